"""The ``introspect`` console command: dispatch to every command, --help and --version, and the
``python -m experiments.<module>`` wrappers being the very same modules.

In-process through ``introspect.cli.main.main`` (the console script's target), except one
subprocess each for ``python -m introspect.cli`` and a wrapper run the shell way.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from introspect.cli import common
from introspect.cli import main as cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _style(monkeypatch):
    """The dispatcher sets how follow-up commands are spelled; each test starts from the default."""
    monkeypatch.setitem(common.STYLE, "prefix", "python -m experiments.")


def test_help_lists_every_command_and_version_answers(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name, (_, summary) in cli.COMMANDS.items():
        assert f"  {name} " in out and summary in out
    assert cli.main(["--version"]) == 0 and cli.main(["-V"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"introspect {cli.version()}"] * 2
    assert cli.version()[0].isdigit()  # installed (editable or not): the distribution's version


def test_no_command_and_an_unknown_one_are_errors(capsys):
    assert cli.main([]) == 2 and "usage: introspect COMMAND" in capsys.readouterr().err
    assert cli.main(["runn", "--task", "A"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: unknown command 'runn'; commands: run, sweep")


def test_every_command_module_has_a_main_and_an_experiments_wrapper():
    """The table names real modules, and each ``experiments/<module>.py`` is that module itself
    (``sys.modules`` replaced), so imports, monkeypatches and ``python -m`` all reach one copy."""
    wrappers = {p.stem for p in (ROOT / "experiments").glob("*.py")} - {"__init__"}
    commands = {mod for mod, _ in cli.COMMANDS.values()}
    assert commands <= wrappers
    for name in sorted(wrappers):
        real = importlib.import_module(f"introspect.cli.{name}")
        assert importlib.import_module(f"experiments.{name}") is real, name
        if name in commands:
            assert callable(real.main), name
    assert (ROOT / "experiments" / "presets").resolve() == (ROOT / "src/introspect/cli/presets").resolve()


def test_dispatch_passes_the_arguments_through_and_returns_the_status(monkeypatch):
    seen = {}
    mod = importlib.import_module("introspect.cli.compare")

    def fake(argv):
        seen["argv"], seen["prefix"] = argv, common.STYLE["prefix"]
        return 3

    monkeypatch.setattr(mod, "main", fake)
    assert cli.main(["compare", "a", "--out", "b.html"]) == 3
    assert seen == {"argv": ["a", "--out", "b.html"], "prefix": "introspect "}
    assert common.STYLE["prefix"] == "python -m experiments."  # restored after the command
    monkeypatch.setattr(mod, "main", lambda argv: None)  # bench's main returns None: exit 0
    assert cli.main(["compare"]) == 0


def test_follow_up_commands_are_spelled_the_way_the_user_started():
    assert common.command("train_aware") == "python -m experiments.train_aware"
    common.STYLE["prefix"] = "introspect "
    assert common.command("train_aware") == "introspect train-aware"
    assert common.command("by-band") == "introspect by-band"


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_command_answers_help(name, capsys):
    """``introspect NAME --help`` prints that command's usage and exits 0, named as invoked."""
    try:
        rc = cli.main([name, "--help"])
    except SystemExit as e:  # argparse's --help
        rc = e.code
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"introspect {name}" in out, out[:300]


def test_the_module_and_a_wrapper_run_as_programs(tmp_path):
    """``python -m introspect.cli`` is the console command without its script; a wrapper keeps
    ``python -m experiments.sweep`` (``make run``'s spelling) answering from the repository."""
    r = subprocess.run([sys.executable, "-m", "introspect.cli", "--version"], capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("introspect ")
    r = subprocess.run([sys.executable, "-m", "experiments.sweep", "--help"], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 0 and "raw|unit|resid" in r.stdout and "quick" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, "-m", "experiments.sweep", str(tmp_path / "nowhere.yaml")],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"error: cannot read sweep config {tmp_path / 'nowhere.yaml'}: no such file"], r.stderr


def test_help_and_version_load_no_torch():
    """The command table is torch-free: ``introspect --help`` answers at once."""
    code = ("import sys; from introspect.cli.main import main; main(['--help']); main(['--version']); "
            "print('torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.splitlines()[-1] == "False"
