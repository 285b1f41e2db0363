"""``make gpu-smoke`` on the CPU with a tiny model: every check runs and passes, the table and
its JSON are written, and a model that is not there is one error line with exit 2."""

from __future__ import annotations

import json

import pytest

from experiments import gpu_smoke

pytestmark = pytest.mark.gpu_smoke


def test_smoke_runs_every_check_on_a_tiny_model(tiny_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("INTROSPECT_CACHE", str(tmp_path / "cache"))
    assert gpu_smoke.main(["--model", str(tiny_dir("llama")), "--device", "cpu", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = json.loads((tmp_path / "gpu-smoke.json").read_text())
    checks = {r["check"].split(" (")[0]: r for r in rows}
    for name in ("load", "vectors finite", "task A finite", "zero injection = its control", "total"):
        assert checks[name]["ok"] is True, (name, checks[name])
    assert "tokens equal, max |Δ log-prob| 0" in out
    assert checks["two GPUs = one GPU"]["ok"] is None  # no GPU here: said, not faked
    assert all(r["check"] in out for r in rows)


def test_a_failed_check_exits_1_and_a_missing_model_exits_2(tiny_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("INTROSPECT_CACHE", str(tmp_path / "cache"))
    rows = [{"check": "x", "ok": False, "value": "", "seconds": 0.0}]
    monkeypatch.setattr(gpu_smoke, "smoke", lambda *a, **k: rows)
    assert gpu_smoke.main(["--model", "m"]) == 1
    monkeypatch.undo()
    monkeypatch.setenv("INTROSPECT_CACHE", str(tmp_path / "cache"))
    assert gpu_smoke.main(["--model", str(tmp_path / "absent"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")
