"""Letter-free baselines in the Delegate Game (issue item 1): cyclic rotations, the
permutation-averaged decision with PriDe's prior beside it, and letter-balanced selection.

Synthetic agents answer through the real baseline code (``delegate.baseline`` with the model
calls replaced by the agent reading the prompt) and their records go through the real
``grade_game`` and ``summarize_delegate``:

- an **always-"A"** agent: raw modal-letter rate 1 and raw accuracy = the share keyed A, while
  the letter-free decision has no letter (modal rate < 0.5) and no rotation agrees with another;
- a **biased knower** (PriDe's model: P(letter) ∝ prior(letter) x its preference for the content
  there, a strong prior on A): the letter-free accuracy is its true accuracy, the raw one is not,
  and PriDe's prior is the planted one.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import introspect as I
from introspect.data import MCQuestion
from introspect.records.jsonl import validate
from introspect.report.load import flatten_trial
from introspect.tasks.selfknowledge import delegate
from introspect.tasks.selfknowledge import rotations as R
from introspect.tasks.selfknowledge.common import Decision
from introspect.tasks.selfknowledge.game_metrics import summarize_delegate

OPT = re.compile(r"^([A-D])\. (.*)$", re.M)


def _pool(n: int, seed: int) -> list[MCQuestion]:
    rng = np.random.default_rng(seed)
    return [MCQuestion(f"q{i}", f"Question {i}?", tuple(f"opt{i}-{j}" for j in range(4)),
                       "ABCD"[rng.integers(4)]) for i in range(n)]


class Agent:
    """P(letter) ∝ prior(letter) · exp(strength · [the content there is the one it favours]):
    the separable model PriDe assumes. ``favoured[qid]``: the option text it prefers."""

    def __init__(self, prior, strength, favoured):
        self.prior, self.strength, self.favoured = prior, strength, favoured
        self.prompts: list[str] = []

    def letters(self, text: str) -> list[float]:
        stem = re.search(r"Question (\d+)\?", text).group(1)
        opts = dict(OPT.findall(text))
        w = [p * math.exp(self.strength * (opts[L] == self.favoured[f"q{stem}"])) for L, p in zip("ABCD", self.prior)]
        return [x / sum(w) for x in w]

    def install(self, monkeypatch):
        def rendered(ctx, convs, kind=None):
            return [SimpleNamespace(text=c.messages[0]["content"]) for c in convs]

        def decisions(ctx, prompts, ids, text_tokens=8):
            self.prompts += [p.text for p in prompts]
            decs = [Decision(tuple("ABCD"), tuple(self.letters(p.text)), 0.9) for p in prompts]
            return decs, [SimpleNamespace(text=d.choice, stop_reason="eos") for d in decs]

        monkeypatch.setattr(delegate, "rendered", rendered)
        monkeypatch.setattr(delegate, "decisions", decisions)
        monkeypatch.setattr(delegate, "letter_ids", lambda tok, letters: {L: [i] for i, L in enumerate(letters)})


def _ctx(**opts):
    return SimpleNamespace(cfg=SimpleNamespace(seed=0, option=lambda k, d=None: opts.get(k, d)),
                           model=SimpleNamespace(tokenizer=None))


def _summary(qs, base, seed=1) -> pd.DataFrame:
    """Game records through the real grade_game: the game decision delegates at random."""
    rng = np.random.default_rng(seed)
    rows = []
    for q in qs:
        pt = float(rng.uniform(0.05, 0.6))
        game = Decision(tuple("ABCDT"), ((1 - pt) * 0.7, (1 - pt) * 0.1, (1 - pt) * 0.1, (1 - pt) * 0.1, pt), 0.9)
        grade = delegate.grade_game(q, base[q.id], game, game.choice, 0.5, bool(rng.random() < 0.5))
        grade.update(question_length=len(q.question), digit_fraction=0.0)
        rows.append(flatten_trial({"model_id": "m", "task": "delegate", "variant": "v", "condition": "clean",
                                   "grade": grade}))
    s = summarize_delegate(pd.DataFrame(rows))
    return s[s.variant == "v"].set_index("metric")


def test_rotated_puts_the_key_at_every_letter():
    q = MCQuestion("x", "What?", ("w", "x", "y", "z"), "C")
    rots = R.rotations(q)
    assert rots[0] == q
    assert [r.answer for r in rots] == ["C", "D", "A", "B"]
    for r in rots:
        assert r.answer_text == "y" and sorted(r.options) == sorted(q.options)
    assert {r.options.index("w") for r in rots} == {0, 1, 2, 3}  # every content at every letter


def test_always_a_agent_is_a_letter_not_a_decision(monkeypatch):
    qs = _pool(200, 0)
    agent = Agent([0.997, 0.001, 0.001, 0.001], 0.0, {q.id: q.options[0] for q in qs})
    agent.install(monkeypatch)
    base = delegate.baseline(_ctx(rotations=True), qs)
    # each item asked with its key at every letter, rotation 0 being the item itself
    by_item: dict[str, list[str]] = {}
    for p in agent.prompts:
        by_item.setdefault("q" + re.search(r"Question (\d+)\?", p).group(1), []).append(p)
    for q in qs:
        asked = by_item[q.id]
        assert len(asked) == 4
        assert {dict((v, k) for k, v in OPT.findall(p))[q.answer_text] for p in asked} == set("ABCD")
        assert asked[0] == delegate.BASELINE_MC.format(q=q.format())
    s = _summary(qs, base)
    keyed_a = sum(q.answer == "A" for q in qs) / len(qs)
    assert s.loc["baseline_modal_letter_rate_raw", "value"] == 1.0
    assert s.loc["baseline_accuracy_raw", "value"] == pytest.approx(keyed_a)
    assert s.loc["baseline_modal_letter_rate", "value"] < 0.5
    assert s.loc["baseline_modal_letter_rate_pride", "value"] < 0.5
    assert s.loc["rotation_consistency", "value"] == 0.0  # the "A" of every rotation is another option
    assert s.loc["baseline_letter_prior[A]", "value"] == pytest.approx(0.997, abs=1e-6)
    # no signal, so the letter-free answers are right at chance, not at the share keyed A
    assert s.loc["baseline_accuracy", "lo"] < 0.25 < s.loc["baseline_accuracy", "hi"]
    assert s.loc["confidence_auroc_raw", "value"] == pytest.approx(1.0)  # the letter bias
    assert s.loc["confidence_auroc", "lo"] < 0.5 < s.loc["confidence_auroc", "hi"]
    assert s.loc["baseline_rotations", "value"] == 4


def test_biased_knower_recovers_its_true_accuracy(monkeypatch):
    qs = _pool(300, 1)
    rng = np.random.default_rng(2)
    knows = rng.random(len(qs)) < 0.6
    fav = {q.id: q.answer_text if k else q.options[(q.options.index(q.answer_text) + 1 + rng.integers(3)) % 4]
           for q, k in zip(qs, knows)}
    prior = [0.85, 0.05, 0.05, 0.05]
    Agent(prior, 2.0, fav).install(monkeypatch)
    base = delegate.baseline(_ctx(rotations=True), qs)
    true_acc = float(knows.mean())
    assert sum(base[q.id]["correct"] for q in qs) / len(qs) == pytest.approx(true_acc)
    assert sum(base[q.id]["pride_correct"] for q in qs) / len(qs) == pytest.approx(true_acc)
    s = _summary(qs, base)
    assert s.loc["baseline_accuracy", "value"] == pytest.approx(true_acc)
    assert s.loc["baseline_accuracy_raw", "value"] < true_acc - 0.25  # the prior on A drowns it
    assert s.loc["baseline_modal_letter_rate_raw", "value"] > 0.6
    assert s.loc["baseline_modal_letter_rate", "value"] < 0.5
    for L, p in zip("ABCD", prior):
        assert s.loc[f"baseline_letter_prior[{L}]", "value"] == pytest.approx(p, abs=1e-9)
    # it prefers one content whatever the letter when e^2 · 0.05 beats 0.85 nowhere: inconsistent
    assert s.loc["rotation_consistency", "value"] == 0.0


def test_without_rotations_the_baseline_is_unchanged(monkeypatch):
    qs = _pool(40, 3)
    Agent([0.4, 0.2, 0.2, 0.2], 1.0, {q.id: q.answer_text for q in qs}).install(monkeypatch)
    off, on = delegate.baseline(_ctx(), qs), delegate.baseline(_ctx(rotations=True), qs)
    for q in qs:
        assert "rotations" not in off[q.id]
        assert on[q.id]["raw_choice"] == off[q.id]["choice"]
        assert on[q.id]["raw_p_correct"] == off[q.id]["p_correct"]
    s = _summary(qs, off)
    assert "baseline_modal_letter_rate" in s.index and "rotation_consistency" not in s.index


@pytest.mark.parametrize("seed", range(3))
def test_letter_balanced_selection(seed):
    qs = _pool(160, seed)
    rng = np.random.default_rng(seed + 10)
    for always_a in (False, True):
        # any model's correctness; or one that always answers "A" (right = keyed A): there the
        # accuracy quota fixes the A count and the other letters are balanced among the rest
        correct = {q.id: q.answer == "A" if always_a else bool(rng.random() < 0.3) for q in qs}
        acc = sum(correct.values()) / len(qs)
        hist, game = delegate.stratified(qs, correct, 30, 50)
        assert not {q.id for q in hist} & {q.id for q in game}
        for part in (hist, game):
            counts = Counter(q.answer for q in part)
            letters = "BCD" if always_a else "ABCD"
            assert max(counts[L] for L in letters) - min(counts[L] for L in letters) <= 1, counts
            assert sum(correct[q.id] for q in part) == round(acc * len(part))
            pos = [qs.index(q) for q in part]
            assert pos == sorted(pos)  # pool order


def test_rotated_baseline_on_a_tiny_model(tiny_model):
    m = tiny_model("llama")
    cfg = I.TaskConfig(max_new_tokens=6, batch_size=8).with_options(
        n=2, history_len=3, short_tokens=6, rotations=True)
    ctx = I.context(m, cfg)
    _, hist, game, base = delegate.selection(ctx)
    for q in hist + game:
        b = base[q.id]
        assert b["rotations"] == 4 and len(b["rotation_letters"]) == 4
        assert sum(b["option_scores"].values()) == pytest.approx(1.0)
        assert b["p_correct"] == pytest.approx(b["option_scores"][q.answer])
        assert b["correct"] == (b["choice"] == q.answer)
    recs = list(delegate.execute(ctx, delegate.plan(ctx)))
    for r in recs:
        validate(r.to_dict())
        assert r.grade["baseline_rotations"] == 4 and r.grade["baseline_raw_choice"] in ("A", "B", "C", "D")
    s = summarize_delegate(pd.DataFrame([flatten_trial(r.to_dict()) for r in recs]))
    s = s[s.variant == recs[0].variant].set_index("metric")
    assert s.loc["baseline_accuracy", "value"] == pytest.approx(np.mean([r.grade["baseline_correct"] for r in recs]))
    for name in ("rotation_consistency", "baseline_accuracy_raw", "baseline_modal_letter_rate_raw",
                 "baseline_modal_letter_rate", "baseline_letter_prior[A]"):
        assert name in s.index
