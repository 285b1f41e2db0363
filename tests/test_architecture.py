"""The package's shape, as docs/architecture.md draws it: no import cycle (lazy imports and
TYPE_CHECKING blocks included) and no import from a lower layer up to a higher one.

Read from the source with ``ast`` (nothing is imported), so the test is exact and takes
milliseconds.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "introspect"

# Lowest first: a module may import from its own layer and the layers before it. The foundations
# (pure numbers, pure text, the JSONL schema) import nothing else of the package.
LAYERS = [
    ("introspect.stats", "introspect.grading", "introspect.records"),
    ("introspect.data",),
    ("introspect.engine", "introspect.engine.load"),
    ("introspect.engine.run",),
    ("introspect.engine.vectors", "introspect.engine.vector_files", "introspect.engine.directions"),
    ("introspect.tasks",),
    ("introspect.train",),
    ("introspect.report",),
    ("introspect.integrations",),
    ("introspect.cli",),  # the command line, on top of everything (nothing imports it)
]
ROOMS = {"cli", "data", "engine", "grading", "records", "report", "stats", "tasks", "train"}


def _name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(mod: str) -> bool:
    p = SRC / mod.replace(".", "/")
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def import_graph() -> dict[str, set[str]]:
    """Module → the package modules it imports anywhere in its body."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PKG.rglob("*.py")):
        mod = _name(path)
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if not target.startswith("introspect"):
                    continue
                for alias in node.names:  # ``from pkg import module`` imports the module
                    sub = f"{target}.{alias.name}"
                    out.add(sub if _exists(sub) else target)
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name.startswith("introspect")}
        out.discard(mod)
        graph[mod] = out
    return graph


def layer(mod: str) -> int | None:
    """The layer of the longest prefix in LAYERS that names ``mod`` or a package holding it."""
    hits = [(len(p), i) for i, prefixes in enumerate(LAYERS) for p in prefixes
            if mod == p or mod.startswith(p + ".")]
    return max(hits)[1] if hits else None


def test_every_module_has_a_room():
    loose = [p.name for p in PKG.glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"modules at the package root, outside any room: {loose}"
    assert {p.name for p in PKG.iterdir() if (p / "__init__.py").is_file()} >= ROOMS
    outside = [m for m in import_graph() if m != "introspect" and layer(m) is None]
    assert not outside, f"modules outside LAYERS: {outside}"


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Imports from a module to one in a higher layer, or to the package's public façade."""
    return sorted(f"{m} -> {t}" for m, targets in graph.items() if m != "introspect"
                  for t in targets if t == "introspect" or layer(t) > layer(m))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_from_a_lower_layer_up():
    up = upward(import_graph())
    assert not up, "imports from a lower layer up to a higher one:\n" + "\n".join(up)


def test_no_import_cycle():
    assert not cycles(import_graph()), f"import cycles: {cycles(import_graph())}"


def test_the_checks_can_fail():
    """On constructed graphs: the old ``models`` ↔ ``train.lora`` loop and a stats module
    importing a task are both caught (guards the guards)."""
    loop = {"introspect.engine.load.models": {"introspect.train.lora"},
            "introspect.train.lora": {"introspect.engine.load.models"}}
    assert cycles(loop) == [sorted(loop)]
    assert upward(loop) == ["introspect.engine.load.models -> introspect.train.lora"]
    assert upward({"introspect.stats.auroc": {"introspect.tasks.tidy"}})
    assert upward({"introspect.tasks.judge": {"introspect"}})
    assert layer("introspect.engine.vectors") > layer("introspect.engine.run.inject")
    assert layer("introspect.nowhere") is None


def test_importing_the_package_is_torch_free_and_names_load_on_use():
    """The façade is lazy (PEP 562): ``import introspect`` loads no torch, every public name in
    ``__all__`` resolves, and an unknown one is an AttributeError."""
    import subprocess
    import sys

    code = ("import sys, introspect as I; t0 = 'torch' in sys.modules; "
            "missing = [n for n in I.__all__ if getattr(I, n, None) is None]; "
            "print(t0, missing, 'torch' in sys.modules, I.run_task_a.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "[]", "True", "run_task_a"], out
    import introspect

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = introspect.nope
