"""The API reference builds from the docstrings with pdoc, warnings as errors (``make api``): a
module that fails to import, or a docstring pdoc cannot read, fails here rather than on a user's
machine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_api_reference_builds_without_a_warning(tmp_path):
    pytest.importorskip("pdoc", reason="the API reference needs pdoc (the dev extra)")
    import pkgutil

    import introspect

    out = tmp_path / "api"
    # every module by name, as ``make api`` lists them (a package's ``__all__`` would hide its
    # modules); pdoc's notice that a package already added one is the only warning let through
    mods = ["introspect"] + [m.name for m in pkgutil.walk_packages(introspect.__path__, "introspect.")
                             if not m.name.endswith("__main__")]
    r = subprocess.run([sys.executable, "-W", "error", "-W", "ignore:The module specification:UserWarning",
                        "-m", "pdoc", "--docformat", "restructuredtext", "-o", str(out), *mods],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    pages = {p.relative_to(out).as_posix() for p in out.rglob("*.html")}
    for page in ("introspect.html", "introspect/engine/vectors.html", "introspect/engine/vector_files.html",
                 "introspect/tasks/runner.html", "introspect/report/metrics.html"):
        assert page in pages, sorted(pages)[:20]
