"""Checked inputs of ``run`` and ``sweep``: ``--option`` keys per task (and the table agreeing
with what the tasks' source reads), non-positive counts, presets by name and in ``--help``, and
every choice list in the help matching what the code accepts. Bad input is one ``error:`` line,
exit 2, nothing written. No model is loaded (the checks come first).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from introspect.cli import options, presets, settings
from introspect.cli.main import main as introspect
from introspect.tasks.base import ConfigError

SRC = Path(__file__).resolve().parents[1] / "src"
TASKS_DIR = SRC / "introspect" / "tasks"


# ---------------------------------------------------------------- the table agrees with the tasks
def _readers(trees: dict[str, ast.Module]) -> dict[str, int]:
    """Functions that read an option, and which argument is the key: ``cfg.option(key)``,
    ``_opt(ctx, key)``, and (to a fixed point) any function passing its own parameter there."""
    readers = {"option": 0, "_opt": 1}
    defs = [f for t in trees.values() for f in ast.walk(t) if isinstance(f, ast.FunctionDef)]
    changed = True
    while changed:
        changed = False
        for f in defs:
            params = [a.arg for a in f.args.args]
            for c in ast.walk(f):
                fn = _name(c)
                if fn in readers and f.name not in readers and len(c.args) > readers[fn]:
                    arg = c.args[readers[fn]]
                    if isinstance(arg, ast.Name) and arg.id in params:
                        readers[f.name] = params.index(arg.id)
                        changed = True
    return readers


def _name(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)


def _module(path: Path) -> str:
    return ".".join(path.relative_to(SRC).with_suffix("").parts)


def scanned() -> tuple[dict[str, set[str]], dict[str, set[str]], dict[str, list[str]]]:
    """(option keys read per module, task-package imports per module, tasks registered per module)."""
    trees = {_module(p): ast.parse(p.read_text()) for p in TASKS_DIR.rglob("*.py")}
    readers = _readers(trees)
    keys, imports, registered = {}, {}, {}
    for mod, tree in trees.items():
        keys[mod], imports[mod], registered[mod] = set(), set(), []
        for node in ast.walk(tree):
            fn = _name(node)
            if fn in readers and len(node.args) > readers[fn]:
                arg = node.args[readers[fn]]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    keys[mod].add(arg.value)
            if fn == "register" and node.args and _name(node.args[0]) == "TaskSpec":
                registered[mod].append(node.args[0].args[0].value)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("introspect.tasks"):
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    imports[mod].add(sub if sub in trees else node.module)
    return keys, imports, registered


def _closure(mod: str, imports: dict[str, set[str]]) -> set[str]:
    seen, todo = set(), [mod]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += imports.get(m, ())
    return seen


def test_the_option_table_matches_what_each_task_reads():
    """Per module that registers tasks: the keys read in it and in what it imports from tasks/
    (plus the runner, which every task goes through) equal the table's keys for those tasks. A
    new ``_opt(ctx, "...")`` without a table entry, or a listed key no task reads, fails here."""
    keys, imports, registered = scanned()
    runner = keys["introspect.tasks.runner"]
    assert {"placebo", "vector_template"} <= runner and keys["introspect.tasks.fewshot"] == {"format"}
    tasks_seen = []
    for mod, names in registered.items():
        if not names:
            continue
        tasks_seen += names
        read = set().union(*(keys.get(m, set()) for m in _closure(mod, imports))) | runner
        listed = {k for t in names for k in options.keys_for(t)}
        assert read == listed, f"{mod} ({', '.join(names)}): read but not listed {sorted(read - listed)}, " \
                               f"listed but not read {sorted(listed - read)}"
    assert sorted(tasks_seen) == sorted(options.TASK_OPTIONS)


# ---------------------------------------------------------------- --option keys
def _run(argv, capsys):
    """``introspect run ARGV``: (exit status, stderr lines)."""
    try:
        rc = introspect(["run", *argv])
    except SystemExit as e:
        rc = e.code
    return rc, capsys.readouterr().err.strip().splitlines()


def test_a_mistyped_option_is_one_line_with_the_valid_keys(tmp_path, capsys):
    out = tmp_path / "out"
    rc, err = _run(["--task", "D", "--option", "n_control_word=5", "--out", str(out)], capsys)
    assert rc == 2 and len(err) == 1, err
    assert err[0] == ("error: --option: unknown option 'n_control_word' for task D (did you mean n_control_words?); "
                      "valid keys: format, n_control_words, placebo, vector_template")
    assert not out.exists()
    rc, err = _run(["--task", "A", "B", "--option", "history_len=3", "--out", str(out)], capsys)
    assert rc == 2 and err[0].startswith("error: --option: unknown option 'history_len' for tasks A, B; valid keys: ")
    assert not out.exists()


def test_an_option_of_any_task_in_the_run_is_accepted():
    parse = settings.build_parser().parse_args
    s = settings.settings_from_args(parse(["--task", "A", "D", "--option", "n_control_words=5", "--option",
                                           "n_bias=0"]))
    assert s["options"] == {"n_control_words": 5, "n_bias": 0}
    s = settings.settings_from_args(parse(["--option", "steer_check=false"]))  # no --task: A-D
    assert s["options"] == {"steer_check": False}
    # --task narrows a preset's tasks; its own options (task D's here) stay valid
    assert settings.settings_from_args(parse(["--preset", "quick", "--task", "A"]))["options"] == {"n_control_words": 20}


def test_a_settings_file_with_an_unknown_option_names_the_file(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("tasks: [delegate]\noptions:\n  history_length: 8\n")
    with pytest.raises(ConfigError, match=r"s\.yaml: unknown option 'history_length' for task delegate "
                                          r"\(did you mean history_len\?\)"):
        settings.load_settings(f)


@pytest.mark.parametrize("name", presets.names())
def test_every_shipped_preset_loads_by_name(name):
    s = settings.load_settings(name)
    assert s["tasks"] and s == settings.load_settings(presets.PRESETS_DIR / f"{name}.yaml")


# ---------------------------------------------------------------- counts
@pytest.mark.parametrize("flags, msg", [
    (["--batch-size", "0"], "argument --batch-size: expected a positive integer or auto, got '0'"),
    (["--batch-size", "-4"], "argument --batch-size: expected a positive integer or auto, got '-4'"),
    (["--batch-size", "many"], "argument --batch-size: expected a positive integer or auto, got 'many'"),
    (["--layers-grid", "0"], "argument --layers-grid: expected a positive integer, got '0'"),
    (["--n-concepts", "0"], "n_concepts must be at least 1, got 0"),
    (["--max-new-tokens", "0"], "max_new_tokens must be at least 1, got 0"),
])
def test_non_positive_counts_are_one_line_and_write_nothing(flags, msg, tmp_path, capsys):
    """``--batch-size 0`` used to mean "auto" and start a full default run; now it is refused."""
    out = tmp_path / "out"
    rc, err = _run(["--task", "A", "--layers", "1", *flags, "--out", str(out)], capsys)
    assert rc == 2 and err == [f"error: {msg}"], err
    assert not out.exists() and not any(tmp_path.iterdir())
    assert settings.build_parser().parse_args(["--batch-size", "auto"]).batch_size == 0  # auto stays


def test_a_zero_count_in_a_settings_file_is_refused(tmp_path):
    for key in ("batch_size", "n_concepts", "layers_grid"):
        f = tmp_path / f"{key}.yaml"
        f.write_text(f"tasks: [A]\n{key}: 0\n")
        with pytest.raises(ConfigError, match=f"{key} must be a positive integer"):
            settings.load_settings(f)
    (tmp_path / "auto.yaml").write_text("tasks: [A]\nbatch_size: auto\n")
    assert settings.load_settings(tmp_path / "auto.yaml")["batch_size"] == 0


def test_vectors_refuses_a_zero_batch(capsys):
    with pytest.raises(SystemExit) as e:
        introspect(["vectors", "--batch-size", "0"])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip() == "error: argument --batch-size: expected a positive integer, got '0'"


# ---------------------------------------------------------------- presets and choices in --help
def test_run_help_lists_every_preset_found_and_each_tasks_options():
    text = settings.build_parser().format_help()
    found = presets.names()
    assert {"quick", "full", "models", "selfknowledge", "selfknowledge-quick", "task-a-models"} <= set(found)
    assert all(name in text for name in found)
    assert " | ".join(found) in " ".join(text.split())
    for task in options.TASK_OPTIONS:
        assert all(k in text for k in options.TASK_OPTIONS[task]), task


def test_presets_by_bare_name_or_path_and_an_unknown_one(tmp_path):
    assert presets.find("quick") == presets.find("quick.yaml") == presets.PRESETS_DIR / "quick.yaml"
    assert presets.find(presets.PRESETS_DIR / "full.yaml") == presets.PRESETS_DIR / "full.yaml"
    assert presets.find("nope") is None and presets.find(tmp_path / "quick") is None
    with pytest.raises(ConfigError, match="unknown preset 'qiuck'; presets: full, models, quick"):
        settings.load_settings("qiuck")


def test_every_choice_list_matches_what_the_code_accepts():
    import torch

    from introspect.engine.load import attention
    from introspect.engine.load.models import ModelError, resolve_dtype
    from introspect.tasks.runner import ALPHA_UNITS

    actions = {a.dest: a for a in settings.build_parser()._actions}
    assert tuple(actions["alpha_units"].choices) == ALPHA_UNITS
    assert tuple(actions["attention"].choices) == attention.CHOICES
    for name in settings.DTYPES:
        assert isinstance(resolve_dtype(name, "cpu"), torch.dtype)
    with pytest.raises(ModelError):
        resolve_dtype("fp8", "cpu")
    from introspect.cli import sweep

    assert "(raw|unit|resid)" in sweep.__doc__ and "|".join(ALPHA_UNITS) == "raw|unit|resid"


def test_the_trainers_choices_come_from_the_code():
    from introspect.cli import train_aware
    from introspect.train.split import RULES
    from introspect.train.yardsticks import YARDSTICKS

    ap = train_aware.build_parser()
    actions = {a.dest: a for a in ap._actions}
    assert tuple(actions["split"].choices) == RULES
    assert f"names: {' '.join(YARDSTICKS)};" in " ".join(ap.format_help().split())


def test_a_repository_preset_path_outside_the_repository_points_to_its_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"experiments/presets/quick\.yaml: no such file "
                                          r"\(the shipped preset is named by itself: quick\)"):
        settings.load_settings("experiments/presets/quick.yaml")


@pytest.mark.parametrize(("tasks", "printed"), [(["refusal"], False), (["seb-restriction"], False), (["D"], True),
                                                (["A", "seb-restriction"], True)])
def test_the_layer_line_is_printed_only_where_a_task_uses_layers(monkeypatch, tmp_path, capsys, tasks, printed):
    """A run of tasks that neither inject nor read the residual stream prints no default-layers
    line and no layer × α grid: those numbers mean nothing to it."""
    from types import SimpleNamespace

    from introspect.cli import settings
    from introspect.tasks import runner

    summary = SimpleNamespace(model="m", table=lambda: "")
    monkeypatch.setattr(settings, "load", lambda *a, **k: SimpleNamespace(cfg=SimpleNamespace(n_layers=6)))
    monkeypatch.setattr(runner, "run_grid", lambda *a, **k: summary)
    monkeypatch.setattr(settings, "report", lambda *a, **k: None)
    assert settings.run_settings({"tasks": tasks, "out": str(tmp_path)}) == 0
    out = capsys.readouterr().out
    assert ("layers not given" in out) is printed and ("layers=[" in out) is printed, out
