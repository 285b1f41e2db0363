"""The Delegate Game without letters and with items matched to each model (issue 29, items 1-2).

Planted agents answer through the real task code (``delegate.plan`` / ``execute`` on a tiny
model's context, only its generation calls replaced by the agent reading the prompt), and their
records go through the real ``grade_game`` and ``summarize_delegate``:

- free text: arithmetic asked without options and graded by the number stated; a knower that
  delegates exactly the questions it gets wrong has lift and P(T) AUROC 1, one that delegates
  blind has neither; no prompt holds an option letter;
- calibration: ``pool.calibrate`` on planted accuracies picks the setting closest to 0.5 in
  [0.4, 0.6] and records its walk; through the task, the pool is drawn at the chosen knobs;
- anchors: the same questions for two agents whose calibrated pools differ.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

import introspect as I
from introspect.records.jsonl import validate
from introspect.report.load import flatten_trial
from introspect.tasks.base import ConfigError
from introspect.tasks.selfknowledge import delegate
from introspect.tasks.selfknowledge import pool as P
from introspect.tasks.selfknowledge.common import Decision
from introspect.tasks.selfknowledge.game_metrics import summarize_delegate
from introspect.tasks.selfknowledge.shortanswer import exact_match, grade_number, grade_replies
from introspect.tasks.selfknowledge.surface import surface_frame

EXPR = re.compile(r"What is ([-+* \d]+)\?")
PRESETS = Path(__file__).resolve().parents[2] / "experiments" / "presets"


# ---------------------------------------------------------------- grading by number
def test_numbers_are_read_not_string_matched():
    assert exact_match(" 5", "-5")  # string normalisation drops the minus sign: why numbers are read
    assert grade_number(" 5", "-5").correct is False and grade_number(" -5", "-5").correct is True
    assert grade_number(" 23 + 58 = 81", "81").correct is True  # an expression: its result
    assert grade_number(" The sum is 81.", "81").correct is True  # a result the reply ends on
    assert grade_number(" 81\n\nAnswer: 3", "3").correct is False  # the first statement counts
    assert (grade_number(" I do not know", "81").correct, grade_number("", "81").method) == (None, "excluded")
    qs = I.data.arithmetic_short(2, 0)
    text = I.data.ShortQuestion("s1", "Capital of France?", "Paris")
    got = grade_replies([(qs[0], f" {qs[0].answer}"), (text, "Paris."), (qs[1], " no idea")])
    assert [(g.correct, g.method) for g in got] == [(True, "number"), (True, "exact"), (None, "excluded")]
    mc = I.data.arithmetic_mc(2, 0)
    assert [q.id for q in qs] == [q.id for q in mc] and qs[0].question == mc[0].question  # same items


# ---------------------------------------------------------------- planted agents
def _value(text: str) -> tuple[str, int]:
    expr = EXPR.findall(text)[-1].strip()  # the question under test is the prompt's last
    return expr, int(eval(expr))  # noqa: S307 - generated integer arithmetic


def _accuracy_by_size(expr: str) -> float:
    """A planted ability: falls with the number of digits and of terms."""
    nums = re.findall(r"\d+", expr)
    return {(1, 2): 0.95, (2, 2): 0.85, (2, 3): 0.7, (3, 2): 0.5}.get((max(map(len, nums)), len(nums)), 0.3)


class Agent:
    """Right on a question when a coin keyed by its text falls under ``ability(expr)``; answers
    ``value + 1`` otherwise. In the game it delegates its own errors (``knows``) or a coin
    independent of them. Every prompt it is shown is kept."""

    def __init__(self, ability=lambda e: 0.5, knows: bool = True):
        self.ability, self.knows, self.prompts = ability, knows, []

    def right(self, expr: str) -> bool:
        return zlib.crc32(expr.encode()) % 1000 < 1000 * self.ability(expr)

    def answer(self, text: str) -> str:
        expr, v = _value(text)
        return f" {v if self.right(expr) else v + 1}"

    def install(self, monkeypatch):
        gen = lambda t: SimpleNamespace(text=t, stop_reason="eos", tokens=(1,), batch=0)  # noqa: E731

        def greedy(ctx, prompts, max_new_tokens, stop=()):
            self.prompts += [p.text for p in prompts]
            return [gen(self.answer(p.text)) for p in prompts]

        def draws(ctx, prompts, keys, max_new_tokens, stop=()):
            return [[gen(self.answer(p.text))] * 2 for p in prompts]

        def decisions(ctx, prompts, ids, text_tokens=8):
            self.prompts += [p.text for p in prompts]
            out = []
            for p in prompts:
                expr, _ = _value(p.text)
                deleg = not self.right(expr) if self.knows else zlib.crc32(expr[::-1].encode()) % 2 == 0
                out.append((Decision(("T",), (1.0,), 0.9 if deleg else 0.1), gen(" T" if deleg else self.answer(p.text))))
            return [d for d, _ in out], [g for _, g in out]

        for name, f in (("greedy", greedy), ("draws", draws), ("decisions", decisions)):
            monkeypatch.setattr(delegate, name, f)
        monkeypatch.setattr(delegate, "_SEL", {})
        monkeypatch.setattr(P, "_CAL", {})


def _ctx(model, **opts):
    base = dict(short_answer=True, short_tokens=8, teammate_accuracy=0.5, history_len=10, game_n=60)
    cfg = I.TaskConfig(max_new_tokens=6, batch_size=8).with_options(**{**base, **opts})
    return I.context(model, cfg)


def _run(ctx) -> tuple[list, pd.DataFrame]:
    recs = list(delegate.execute(ctx, delegate.plan(ctx)))
    return recs, summarize_delegate(pd.DataFrame([flatten_trial(r.to_dict()) for r in recs]))


def test_free_text_game_end_to_end(tiny_model, monkeypatch):
    agent = Agent()
    agent.install(monkeypatch)
    recs, s = _run(_ctx(tiny_model("llama")))
    assert len(recs) == 60 and {r.variant for r in recs} == {"arith-d2t2+-+short:teammate=0.5"}
    for r in recs:
        validate(r.to_dict())
        g = r.grade
        assert g["baseline_grade_method"] == "number" and g["entropy"] is None and g["option_ranks"] is None
        assert g["game_grade_method"] in ("number", "delegated") and g["delegated"] == (not g["baseline_correct"])
    for p in agent.prompts:  # no option lines, no letters to answer with: only the number or T
        assert not re.search(r"^[A-D][.)] ", p, re.M) and "one letter" not in p
    assert any("number alone to answer, or T" in p for p in agent.prompts)
    s = s[s.variant == recs[0].variant].set_index("metric")
    acc = s.loc["baseline_accuracy", "value"]
    assert 0.35 < acc < 0.65  # stratified to the pool's accuracy
    assert s.loc["self_accuracy_lift", "value"] == pytest.approx(1 - acc)  # kept answers all right
    assert s.loc["self_accuracy_lift", "lo"] > 0
    assert s.loc["p_delegate_auroc", "value"] == pytest.approx(1.0)
    assert s.loc["introspection_mcc", "value"] == pytest.approx(1.0)
    assert "entropy_unavailable" in s.index and "baseline_modal_letter_rate" not in s.index
    assert s.loc["game_answer_excluded_rate", "value"] == 0.0 and "surface_auroc" in s.index
    X = surface_frame(pd.DataFrame([flatten_trial(r.to_dict()) for r in recs]))
    assert not [c for c in X.columns if "key_" in c or "extreme" in c]  # no options, no geometry


def test_blind_delegation_has_no_lift(tiny_model, monkeypatch):
    Agent(knows=False).install(monkeypatch)
    _, s = _run(_ctx(tiny_model("llama")))
    s = s[s.variant == "arith-d2t2+-+short:teammate=0.5"].set_index("metric")
    assert s.loc["p_delegate_auroc", "lo"] < 0.5 < s.loc["p_delegate_auroc", "hi"]
    assert s.loc["self_accuracy_lift", "lo"] < 0 < s.loc["self_accuracy_lift", "hi"]


def test_short_answer_needs_a_free_text_source(tiny_model, tmp_path):
    p = tmp_path / "algebra_test.csv"
    p.write_text("".join(f"What is {i}?,{i},{i + 1},{i + 2},{i + 3},A\n" for i in range(30)))
    with pytest.raises(ConfigError, match="multiple-choice"):
        delegate._pool(_ctx(tiny_model("llama"), questions=str(p)))
    with pytest.raises(ConfigError, match="short_answer must be true or false"):
        delegate._pool(_ctx(tiny_model("llama"), short_answer="yes"))


# ---------------------------------------------------------------- calibration
def _planted(accs):
    calls = []

    def score(k):
        calls.append(k)
        return round(100 * accs[P.LADDER.index(k)]), 100
    return score, calls


def test_calibrate_walks_to_the_setting_closest_to_half():
    accs = [0.97, 0.9, 0.8, 0.56, 0.47, 0.3, 0.2, 0.1, 0.05, 0.02]
    score, calls = _planted(accs)
    c = P.calibrate(score)  # from d2t2: harder until below 0.5, then the way back is already scored
    assert calls == list(P.LADDER[1:5]) and [s.knobs for s in c.path] == calls
    assert c.chosen == P.LADDER[4] and c.accuracy == 0.47 and c.in_band
    assert c.to_dict()["path"] == [[k.tag, round(100 * a), 100] for k, a in zip(P.LADDER[1:5], accs[1:5])]
    score, calls = _planted([0.6, 0.45, 0.3, 0.2, 0.1, 0.05, 0.04, 0.03, 0.02, 0.01])
    c = P.calibrate(score, start=6)  # too hard: walks easier
    assert calls == [P.LADDER[i] for i in (6, 5, 4, 3, 2, 1, 0)] and c.chosen == P.LADDER[1]
    score, _ = _planted([0.95, 0.75, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1])
    c = P.calibrate(score)  # nothing in [0.4, 0.6]: the closest, flagged
    assert c.chosen == P.LADDER[1] and not c.in_band and len(c.path) == 2
    c = P.calibrate(lambda k: (0, 0))  # nothing graded: no direction, no accuracy
    assert len(c.path) == 1 and not c.in_band
    for bad in (dict(ladder=()), dict(start=10), dict(target=0.7)):
        with pytest.raises(ValueError):
            P.calibrate(score, **bad)


def test_task_pool_is_drawn_at_the_calibrated_knobs(tiny_model, monkeypatch):
    Agent(_accuracy_by_size).install(monkeypatch)
    ctx = _ctx(tiny_model("llama"), calibrate_pool=True, calibration_n=200, game_n=30)
    cal = delegate.calibration(ctx)
    assert [s.knobs for s in cal.path][:3] == list(P.LADDER[1:4])  # d2t2 -> d2t3 -> d3t2 (-> d3t3)
    assert cal.chosen == P.Knobs(3, 2, "+-") and cal.in_band
    recs, s = _run(ctx)
    assert {r.variant for r in recs} == {"arith-cal+short:teammate=0.5"}
    for r in recs:
        assert r.grade["pool_knobs"] == "arith-d3t2+-" and r.extra["pool_calibration"] == cal.to_dict()
        nums = re.findall(r"\d+", EXPR.findall(r.prompt)[-1])
        assert len(nums) == 2 and all(len(x) == 3 for x in nums)  # uniform knobs within the pool
    cal_ids = {f"delegate-cal-0-{i}" for i in range(200)}
    assert not cal_ids & {r.grade["qid"] for r in recs}  # calibration items are never game items
    row = s[s.metric == "pool_calibration_accuracy"]
    assert len(row) == 1 and row["value"].iloc[0] == pytest.approx(cal.accuracy)
    assert s[s.metric == "pool_calibration_in_band"]["value"].tolist() == [1.0]


def test_anchors_are_the_same_for_every_model(tiny_model, monkeypatch):
    runs = {}
    for name, ability in (("weak", lambda e: 0.5 * _accuracy_by_size(e)), ("strong", _accuracy_by_size)):
        Agent(ability).install(monkeypatch)
        ctx = _ctx(tiny_model("llama"), calibrate_pool=True, calibration_n=100, game_n=20, anchors=12)
        runs[name] = (_run(ctx)[0], delegate.calibration(ctx))
    knobs = {n: c.chosen for n, (_, c) in runs.items()}
    assert knobs["weak"] != knobs["strong"]  # pools matched to each model differ ...
    anchor = {n: [(r.grade["qid"], r.prompt.rsplit("Game question:", 1)[1]) for r in recs if r.grade.get("anchor")]
              for n, (recs, _) in runs.items()}
    assert len(anchor["weak"]) == 12 and anchor["weak"] == anchor["strong"]  # ... the anchors do not
    for recs, _ in runs.values():
        pool_q = {r.grade["qid"] for r in recs if not r.grade.get("anchor")}
        assert all(q.startswith("delegate-anchor-") for q, _ in anchor["weak"]) and not pool_q & dict(anchor["weak"]).keys()
        assert {r.variant for r in recs if r.grade.get("anchor")} == {"anchor-arith-d2t2+-+short:teammate=0.5"}
    assert [q.question for q in P.anchor_set(12, 0, True)] == [p.split("\n")[1] for _, p in anchor["weak"]]


def test_pool_leaves_out_questions_that_are_anchors():
    opts = dict(anchors=50, pool=2000, history_len=10)
    ctx = SimpleNamespace(cfg=SimpleNamespace(seed=0, option=lambda k, d=None: opts.get(k, d)))
    anchored = {q.question for q in P.anchor_set(50, 0, False)}
    raw = P.arithmetic_items(2000, 0, P.ANCHOR, False, "delegate")
    assert sum(q.question in anchored for q in raw) > 0  # the same setting repeats some sums
    stem, qs = P.pool(ctx, None)
    assert stem == "arith-d2t2+-" and not {q.question for q in qs} & anchored
    assert len(qs) == 2000 - sum(q.question in anchored for q in raw)


def test_selfknowledge_preset_plays_150_matched_items_and_anchors():
    opts = yaml.safe_load((PRESETS / "selfknowledge.yaml").read_text())["options"]
    assert opts["game_n"] >= 150 and opts["calibrate_pool"] is True and opts["anchors"] >= 20
    assert opts.get("short_answer", False) is False  # the letter-free free-text game is opt-in


def test_calibrated_pool_and_anchors_on_a_tiny_model(tiny_model):
    """The real generation path: letters with rotations, calibration, anchors; records validate."""
    cfg = I.TaskConfig(max_new_tokens=6, batch_size=8).with_options(
        rotations=True, calibrate_pool=True, calibration_n=8, anchors=3, game_n=2, history_len=3)
    ctx = I.context(tiny_model("llama"), cfg)
    cal = delegate.calibration(ctx)
    assert cal.path and cal.path[0].knobs == P.LADDER[1] and all(s.n == 8 for s in cal.path)
    recs = list(delegate.execute(ctx, delegate.plan(ctx)))
    for r in recs:
        validate(r.to_dict())
    anchors = [r for r in recs if r.grade.get("anchor")]
    assert len(anchors) == 3 and {r.grade["pool_knobs"] for r in anchors} == {P.ANCHOR.tag}
    assert {r.grade["pool_knobs"] for r in recs if not r.grade.get("anchor")} == {cal.chosen.tag}
    assert all(r.grade["baseline_rotations"] == 4 for r in recs)


def test_free_text_prompts_in_the_fewshot_format(tiny_model):
    cfg = I.TaskConfig(max_new_tokens=6, batch_size=8).with_options(short_answer=True, short_tokens=4, format="fewshot")
    ctx = I.context(tiny_model("llama"), cfg)
    qs = I.data.arithmetic_short(2, 0, namespace="delegate")
    for b in delegate.baseline(ctx, qs, sampled=False).values():
        assert "Reply with the number alone" in b["prompt"] and "Answer: 13" in b["prompt"]  # worked sums
        assert b["n_draws"] == 0 and b["grade_method"] in ("number", "excluded")
