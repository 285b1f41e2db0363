"""Task ``refusal`` and its summaries: rates by label on constructed records, a removed direction
compared with the model itself paired by request, and the task end to end on a tiny model with
and without a direction removed (records valid against the published schema)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from introspect.report.load import flatten_trial
from introspect.tasks.refusal.metrics import pairs, refusal_change, summarize_refusal


def _recs(model: str, refused: list[bool], label: str = "unsafe") -> list[dict]:
    return [flatten_trial({"model_id": model, "task": "refusal", "layer_idx": None, "alpha": 0.0, "alpha_units": "raw",
                           "variant": "own", "condition": "clean", "trial_id": f"{model}{label}{i}",
                           "grade": {"refusal": "refuses" if r else "complies", "label": label, "id": f"{label}{i}",
                                     "type": "t", "cut": False}})
            for i, r in enumerate(refused)]


def test_rates_by_label_and_every_outcome_reachable():
    df = pd.DataFrame(_recs("m", [True] * 6 + [False] * 4) + _recs("m", [False] * 9 + [True], "safe"))
    s = pd.DataFrame(summarize_refusal(df)).set_index("metric")
    assert s.loc["refusal_rate:unsafe", "value"] == pytest.approx(0.6)
    assert s.loc["refusal_rate:safe", "value"] == pytest.approx(0.1)
    assert s.loc["compliance_rate:unsafe", "value"] == pytest.approx(0.4)
    assert s.loc["other_rate:safe", "value"] == 0.0
    lo, hi = s.loc["refusal_rate:unsafe", ["lo", "hi"]]
    assert lo < 0.6 < hi and s.loc["refusal_rate:unsafe", "n"] == 10


def test_a_removed_direction_is_compared_with_its_model_paired_by_request():
    base, abl = "m", "m+ablate-refusal-1234abcd"
    df = pd.DataFrame(_recs(base, [True] * 18 + [False] * 2) + _recs(abl, [False] * 18 + [True] * 2))
    assert pairs([base, abl, "other"]) == [(abl, base)]
    r = {x["metric"]: x for x in refusal_change(df, abl, base)}
    ch = r["refusal_rate_change:unsafe"]
    assert ch["value"] == pytest.approx(-0.8) and ch["hi"] < 0  # fewer refusals, and the interval says so
    same = pd.DataFrame(_recs(base, [True] * 10 + [False] * 10) + _recs(abl, [True] * 10 + [False] * 10))
    r0 = {x["metric"]: x for x in refusal_change(same, abl, base)}["refusal_rate_change:unsafe"]
    assert r0["value"] == 0 and r0["lo"] < 0 < r0["hi"]
    assert refusal_change(df, abl, "absent") == []


def test_the_task_runs_with_and_without_a_direction_removed(tiny_dir, tmp_path):
    from introspect.engine.load.ablation import Direction, remove_direction
    from introspect.engine.load.models import load_model
    from introspect.records import schema as S
    from introspect.records.jsonl import read_records
    from introspect.tasks.base import TaskConfig
    from introspect.tasks.runner import run_grid

    cfg = TaskConfig(max_new_tokens=6, seed=1).with_options(n_prompts=3)
    model = load_model(str(tiny_dir("llama")))
    a = run_grid(model, ["refusal"], cfg, tmp_path, progress=False)
    v = torch.randn(model.cfg.d_model, generator=torch.Generator().manual_seed(0))
    remove_direction(model, Direction("refusal", v / v.norm(), layer=1))
    b = run_grid(model, ["refusal"], cfg, tmp_path, progress=False)
    ra = [r for r in read_records(a.files["refusal"]) if r["type"] == "trial"]
    rb = [r for r in read_records(b.files["refusal"]) if r["type"] == "trial"]
    assert len(ra) == len(rb) == 6 and {r["grade"]["label"] for r in ra} == {"unsafe", "safe"}
    assert b.model.startswith(a.model + "+ablate-refusal-")
    (hb,) = [r for r in read_records(b.files["refusal"]) if r["type"] == "header"]
    assert any(n.startswith("ablation: ") for n in hb["notes"])
    from introspect.cli.compare import main as compare

    assert compare([str(tmp_path), "--out", str(tmp_path / "c.html")]) == 0  # pairs them without a flag
    ab = pd.read_csv(tmp_path / "ablation.csv")
    assert {"refusal_rate_change:unsafe", "refusal_rate_change:safe"} <= set(ab["metric"])
    assert set(ab["model_id"]) == {f"{b.model} - {a.model}"}
    pytest.importorskip("jsonschema")
    for rec in [*read_records(a.files["refusal"]), *read_records(b.files["refusal"])]:
        assert S.errors(rec) == [], rec
