"""The manual stays a manual: every relative link and #anchor in README and docs resolves, no page
outgrows ~400 lines, and neither the docs nor the code speak of the project's own work sessions
(a benchmark's conversation sessions and pytest's fixture scope are another matter)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "results" / "README.md"]
PAGES = [p for p in PAGES if p.is_file()]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")

# Ordinal work sessions ("the fifth session", "(2026-11-27, thirty-first session)") and the
# diary's other phrasings. SEB's "in a third session" is a benchmark's conversation, so ordinals
# count only beside a date or with "the N-th session" wording about the project's work.
ORDINAL = (r"(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
           r"\w+teenth|\w+tieth|(twenty|thirty|forty|fifty)-\w+)")
DIARY = [
    re.compile(rf"\d{{4}}-\d\d-\d\d,? {ORDINAL} session", re.I),
    re.compile(rf"\({ORDINAL} session\)", re.I),
    re.compile(rf"\bthe {ORDINAL} session'?s?\b(?! of)", re.I),
    re.compile(r"\b(this|last|previous|next|earlier|later|each|every) (work )?session\b", re.I),
    re.compile(r"\bwork sessions?\b|\bsession by session\b|\bsessions? ago\b", re.I),
    re.compile(rf"-{ORDINAL}-session\b", re.I),
]
SEB_CONTEXT = re.compile(r"\b(SEB|trial|benchmark|conversation|association|judges?|perceived|"
                         r"fixture|scope|pytest|tiny model)\b", re.I)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m and not fenced:
            s = _slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    out |= set(re.findall(r'<a (?:name|id)="([^"]+)"', page.read_text(encoding="utf-8")))
    return out


def _links(page: Path) -> list[tuple[int, str]]:
    out, fenced = [], False
    for i, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out += [(i, m) for m in LINK.findall(re.sub(r"`[^`]*`", "", line))]
    return out


def test_the_slug_rule():
    assert _slug("Layer 24 on layer 20's split: detected (2026-11-27)") == "layer-24-on-layer-20s-split-detected-2026-11-27"
    assert _slug("The `--option` keys") == "the---option-keys"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    bad = []
    for line, target in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{page.name}:{line}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{page.name}:{line}: {target} (no heading with that anchor)")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("page", [p for p in PAGES if p.parent.name == "docs"], ids=lambda p: p.name)
def test_no_page_outgrows_a_manual_page(page):
    n = len(page.read_text(encoding="utf-8").splitlines())
    assert n <= 420, f"{page.name}: {n} lines; split it by kind (how-to, reference, explanation, results)"


def _diary_lines(paths) -> list[str]:
    bad = []
    for p in paths:
        name = p.relative_to(ROOT) if p.is_relative_to(ROOT) else p.name
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            if any(r.search(line) for r in DIARY) or (
                    p.suffix == ".md" and re.search(r"\bsessions?\b", line, re.I) and not SEB_CONTEXT.search(line)):
                bad.append(f"{name}:{i}: {line.strip()[:120]}")
    return bad


def test_the_docs_do_not_speak_of_work_sessions():
    bad = _diary_lines(PAGES)
    assert not bad, "\n".join(bad)


def test_the_code_does_not_speak_of_work_sessions():
    code = [p for d in ("src", "experiments", "tests") for p in (ROOT / d).rglob("*.py")
            if p.name != "test_docs.py"]
    bad = _diary_lines(code)
    assert not bad, "\n".join(bad)


def test_the_checks_catch_what_they_name(tmp_path):
    """Each check fails on a page written the old way."""
    page = tmp_path / "p.md"
    page.write_text("# Title\n\n## Layer 24 (2026-11-27, second session)\n\nsee [x](#nope) and [y](q.md)\n")
    assert _diary_lines([page]) and len([t for _, t in _links(page)]) == 2
    assert "layer-24-2026-11-27-second-session" in _anchors(page) and "nope" not in _anchors(page)


# ---------------------------------------------------------------- the commands the pages show

COMMAND = re.compile(r"^(python -m experiments\.|introspect( |$)|make |inspect eval )")


class _Parsed(Exception):
    """Raised by the patched parser once the arguments parsed: the command itself never runs."""


def _commands(page: Path) -> list[str]:
    """Commands in fenced blocks (continuation lines joined) and in inline code."""
    out, fenced, buf = [], False, ""
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            fenced, buf = not fenced, ""
            continue
        found = []
        if fenced:
            s = (buf + " " + line.strip()).strip()
            buf = ""
            if s.endswith("\\"):
                buf = s[:-1]
                continue
            found.append(s)
        else:
            found += re.findall(r"`([^`]+)`", line)
        for c in found:
            c = re.sub(r"^(\.venv/bin/|\w+=\S+ )+", "", c.strip())
            if COMMAND.match(c):
                out.append(c)
    return out


def _parse_command(argv: list[str], module: str, monkeypatch) -> str:
    """'' when ``module``'s own parser accepts ``argv``, else why not."""
    import argparse
    import contextlib
    import importlib
    import io

    original = argparse.ArgumentParser.parse_args

    def parse(self, args=None, namespace=None):
        raise _Parsed(original(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse)
    m = importlib.import_module(f"introspect.cli.{module}")
    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            m.main(argv)
    except _Parsed as p:
        return _preset_problem(p.args[0])
    except SystemExit as e:
        return "" if e.code in (0, None) else err.getvalue().strip().splitlines()[-1]
    return "the command ran past its parser"


def _preset_problem(ns) -> str:
    from introspect.cli import presets

    for key in ("preset", "sweep"):
        v = getattr(ns, key, None)
        if isinstance(v, str) and presets.find(v) is None and "DIR" not in v and "FILE" not in v:
            return f"no preset {v!r} (shipped: {presets.help_line()})"
    return ""


def _inspect_problem(argv: list[str]) -> str:
    R = pytest.importorskip("introspect.integrations.inspect._registry")
    spec = argv[0]
    keys = [t.split("=")[0] for i, t in enumerate(argv) if i and argv[i - 1] == "-T"]
    if spec.startswith("introspect/"):
        name = spec.split("/", 1)[1]
        if name not in R.TASKS:
            return f"no registered task {name!r} ({', '.join(R.TASKS)})"
        params = R.task_params(R.TASKS[name], name)
    elif "@" in spec:
        path, name = spec.split("@")
        if not (ROOT / path).is_file():
            return f"no file {path}"
        params = R.task_params(Path(path).stem, name)
    else:
        return ""
    return ", ".join(f"-T {k} is not a parameter of {spec}" for k in keys if k not in params)


def _problem(command: str, monkeypatch) -> str:
    from introspect.cli.main import COMMANDS

    argv = shlex.split(re.sub(r"\$\{?\w+\}?", "1", command), comments=True)  # a loop's $S: a number
    argv = argv[:argv.index("&&")] if "&&" in argv else argv
    placeholders = {"S": "1", "N": "1", "L": "20"}
    argv = [placeholders.get(a, a) for a in argv]
    if argv[0] == "make":
        makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
        return ", ".join(f"no make target {t!r}" for t in argv[1:]
                         if "=" not in t and not re.search(rf"^{re.escape(t)}:", makefile, re.M))
    if argv[0] == "inspect":
        return _inspect_problem(argv[2:])
    if argv[0] == "python":
        module, rest = argv[2].split(".", 1)[1], argv[3:]
    elif len(argv) == 1 or argv[1].startswith("-"):
        return ""
    else:
        if argv[1] not in COMMANDS:
            return f"no command {argv[1]!r}"
        module, rest = COMMANDS[argv[1]][0], argv[2:]
    if module not in {m for m, _ in COMMANDS.values()}:
        return f"no command module {module!r}"
    return _parse_command(rest, module, monkeypatch)



def test_every_command_shown_parses(monkeypatch):
    """Every ``python -m experiments.*``, ``introspect ...``, ``make ...`` and ``inspect eval``
    line in README and docs goes through the project's own parser: no unknown flag, no invalid
    choice, no missing preset or make target, no ``-T`` the task does not take."""
    bad = []
    for page in PAGES:
        for c in _commands(page):
            why = _problem(c, monkeypatch)
            if why:
                bad.append(f"{page.relative_to(ROOT)}: {c}\n    {why}")
    assert not bad, "\n".join(bad)


def test_the_command_check_catches_what_it_names(monkeypatch):
    assert _problem("python -m experiments.run --task A --no-such-flag 1", monkeypatch)
    assert _problem("introspect run --task A --alpha-units furlongs", monkeypatch)
    assert _problem("introspect sweep no-such-preset", monkeypatch)
    assert _problem("make no-such-target", monkeypatch)
    assert _problem("introspect frobnicate", monkeypatch)
    assert not _problem("introspect run --task A --n-concepts 3 --out /tmp/x", monkeypatch)
