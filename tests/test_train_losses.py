"""The training log's reading by row kind, framing and stretch of training (``train.losses``),
on constructed logs whose answers are known, and the greedy check's two-turn injection."""

from __future__ import annotations

import json

import pytest

from introspect.train import losses as LS
from introspect.train.data import TrainDataError


def _log() -> list[dict]:
    """Eight steps: gaussian rows in two_turn right only late, in paper always; one row a step each."""
    out = []
    for step in range(1, 9):
        late = step > 4
        out.append({"step": step, "loss": 1.0, "rows": [
            ["gaussian", "two_turn", 0.5, 2.0 if not late else 0.5, 0.2 if not late else 0.9],
            ["gaussian", "paper", 1.0, 0.3, 0.8],
            ["positive", "paper", 0.2 + 0.1 * step, 1.0, 0.4 if step % 2 else 0.6]]})
    return out


def test_by_kind_reads_each_kind_framing_and_stretch():
    t = LS.by_kind(_log(), windows=2)
    row = {(r.kind, r.phrasing, r.steps): r for r in t.itertuples()}
    assert set(row) == {(k, p, s) for k, p in [("gaussian", "two_turn"), ("gaussian", "paper"), ("positive", "paper")]
                        for s in ("1-4", "5-8")}
    early, late = row[("gaussian", "two_turn", "1-4")], row[("gaussian", "two_turn", "5-8")]
    assert (early.n, early.loss, early.p_first, early.right) == (4, 2.0, pytest.approx(0.2), 0.0)
    assert (late.n, late.loss, late.p_first, late.right) == (4, 0.5, pytest.approx(0.9), 1.0)
    assert row[("positive", "paper", "1-4")].right == 0.5  # p_first 0.4 and 0.6 alternate: > 0.5 is right
    whole = LS.by_kind(_log(), windows=1, by=("kind",))
    assert dict(zip(whole.kind, whole.n)) == {"gaussian": 16, "positive": 8}
    assert set(whole.steps) == {"1-8"}


def test_strength_bands_split_the_rows():
    t = LS.by_kind(_log(), windows=1, by=("kind",), strength_bands=(0.0, 0.65, 1.25))
    pos = t[t.kind == "positive"]
    assert dict(zip(pos.band, pos.n)) == {"(-0.001, 0.65]": 4, "(0.65, 1.25]": 4}  # strengths 0.3..1.0


def test_a_log_without_rows_or_a_missing_log_is_one_clear_error(tmp_path):
    with pytest.raises(TrainDataError, match="no per-row records"):
        LS.by_kind([{"step": 1, "loss": 0.5}])
    with pytest.raises(TrainDataError, match="not a training log"):
        LS.read_log(tmp_path)
    (tmp_path / "train_log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in _log()))
    assert len(LS.read_log(tmp_path)) == 8 and LS.render(LS.by_kind(LS.read_log(tmp_path))).count("\n") >= 3


def test_greedy_check_injects_two_turn_over_turn_one_only(tiny_dir, monkeypatch):
    """The post-training check injects each framing where task A does: from the mark on in
    ``paper``, over turn 1 only in ``two_turn`` (the concept and the random direction alike)."""
    from introspect.engine.load.models import load_model
    from introspect.engine.run import decode
    from introspect.engine.run.inject import From
    from introspect.train import data as D
    from introspect.train.check import detection_check

    model = load_model(str(tiny_dir("llama")))
    seen = []
    real = decode.generate
    monkeypatch.setattr(decode, "generate", lambda m, ps, specs, **k: seen.append(specs) or real(m, ps, specs, **k))
    for phrasing in ("paper", "two_turn"):
        r = detection_check(model, ["lemon", "tiger"], 1, 0.8, phrasing=phrasing, max_new_tokens=3,
                            baseline=["pencil", "bottle", "rabbit"])
        prompt = D.render(model.tokenizer, D.detection_conv(phrasing, 1))
        start, end = D.injected_span(prompt)
        want = From(start) if phrasing == "paper" else list(range(start, end))
        specs = seen[-1]
        assert specs[0] is None and len(specs) == 5
        assert all(s.token_positions == want for s in specs[1:]), (phrasing, [s.token_positions for s in specs[1:]])
        assert 0 <= r["yes_random"] <= 1
    assert end is not None and end < len(prompt)  # two_turn's span ends before the second question
