"""Injection metrics on hand-built records, every number computed independently in the test.

Task A: 6 concepts × 1 trial × 2 samples (the presets' one-trial path) at cells (L2, α4) and
(L4, α4), raw units. Every concept has its own control per sample (records contract of issue 17:
the stream is keyed by trial, sample and concept), its ablations, 5 bias questions in the same
framing with and without the injection, and the steering check with a random direction.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from introspect.records.jsonl import Record
from introspect.report.load import flatten_trial
from introspect.report.metrics import summarize
from introspect.stats import clustered as C
from introspect.stats.holm import add_holm
from introspect.tasks.injection.metrics_a import logit
from introspect.tasks.injection.metrics_steer import STEER_NATS, steering_table
from introspect.tasks.tidy import pair, row

M = "tiny/m"
WORDS = ["w1", "w2", "w3", "w4", "w5", "w6"]
CTRL = {"w1": [1, 0], "w2": [0, 0], "w3": [0, 0], "w4": [0, 1], "w5": [0, 0], "w6": [0, 0]}
DET2 = {"w1": [1, 1], "w2": [1, 0], "w3": [1, 1], "w4": [0, 1], "w5": [1, 0], "w6": [0, 0]}
IDENT2 = {"w1": [1, 1], "w3": [1, 1]}  # names its concept (L2)
BY_CHANCE = {("w3", 0)}  # concept_random answers that name the original word
NEG2 = {("w2", 0)}  # -v answers that say yes
PY_CTRL = 0.2  # first-token P(yes) of every control: same prompt, no injection
PY2 = {"w1": 0.6, "w2": 0.4, "w3": 0.5, "w4": 0.3, "w5": 0.35, "w6": 0.2}
BIAS_CLEAN = [0.05, 0.1, 0.02, 0.08, 0.04]
GAMMA = {"w1": 0.5, "w2": 0.5, "w3": 0.2, "w4": 0.1, "w5": 0.3, "w6": 0.0}  # yes-bias, log-odds
RISE = {2: {"w1": 3.0, "w2": 2.0, "w3": 2.5, "w4": 1.5, "w5": 2.0, "w6": 1.0},
        4: {"w1": 0.5, "w2": 0.3, "w3": 0.6, "w4": 0.2, "w5": 0.4, "w6": 0.4}}
RANDOM_LP = [0.5, 0.3]  # the random direction's rise per sample (same for every concept)


def flat(recs: list[Record]) -> pd.DataFrame:
    return pd.DataFrame([flatten_trial(r.to_dict(), "mem") for r in recs])


def _r(cond: str, word: str, s: int, layer=None, alpha=0.0, variant="paper", i=0, **kw) -> Record:
    return Record(seed=0, model_id=M, task="A", condition=cond, layer_idx=layer, alpha=alpha,
                  alpha_units="raw", word=word, variant=variant, trial_index=i, sample=s,
                  injected=layer is not None, **kw)


def _expit(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def task_a_records(steer: bool = True, det2=DET2, words=WORDS, ctrl=CTRL, py2=PY2, gamma=GAMMA,
                   rise=RISE) -> list[Record]:
    recs = []
    for w in words:
        for s in (0, 1):
            c = ctrl[w][s]
            recs.append(_r("control", w, s, grade={"detected": bool(c), "coherent": True},
                           p_yes=PY_CTRL, response=f"ctl {w} {s}"))
            for layer in (2, 4):
                d = det2[w][s] if layer == 2 else c  # L4: every answer equals its control
                grade = {"detected": bool(d), "identified": layer == 2 and bool(IDENT2.get(w, [0, 0])[s]),
                         "identified_mismatch": (w, s) == ("w2", 1), "coherent": not (w == "w5" and s == 1)}
                recs.append(_r("injected", w, s, layer, 4.0, grade=grade,
                               p_yes=py2[w] if layer == 2 else PY_CTRL,
                               response=f"inj {w} {s}" if layer == 2 else f"ctl {w} {s}",
                               extra={"alpha_as": {"raw": 4.0, "unit": 8.0, "resid": 0.5}}))
                for abl in ("random", "concept_random", "negative"):
                    hit = (abl == "random" and c == 1) or (abl == "negative" and (w, s) in NEG2)
                    named = abl == "concept_random" and (w, s) in BY_CHANCE
                    recs.append(_r(abl, w, s, layer, 4.0, p_yes=PY_CTRL, response=f"{abl} {w} {s}",
                                   grade={"detected": hit, "identified": named}))
        for q, clean in enumerate(BIAS_CLEAN):
            extra = {"question": f"q{q}"}
            recs.append(_r("bias_control", w, 0, p_yes=clean, extra=extra,
                           grade={"said_yes": False}, response="No."))
            for layer in (2, 4):
                hot = _expit(logit(np.array(clean)) + gamma[w]) if layer == 2 else clean
                recs.append(_r("bias", w, 0, layer, 4.0, p_yes=float(hot), extra=extra,
                               grade={"said_yes": layer == 2 and w == "w1" and q == 0}, response="No."))
    if steer:
        for w in words:
            for s in (0, 1):
                recs.append(_r("steer_control", w, s, variant="steer",
                               grade={"lp_word": -10.0, "mentions": False, "coherent": True}))
                for layer in (2, 4):
                    recs.append(_r("steer", w, s, layer, 4.0, variant="steer",
                                   grade={"lp_word": -10.0 + rise[layer][w], "coherent": True,
                                          "mentions": layer == 2 and s == 0 and w in ("w1", "w3")}))
                    recs.append(_r("steer_random", w, s, layer, 4.0, variant="steer",
                                   grade={"lp_word": -10.0 + RANDOM_LP[s], "coherent": True,
                                          "mentions": False}))
    return recs


@pytest.fixture(scope="module")
def summary() -> pd.DataFrame:
    return summarize(flat(task_a_records()))


def get(s: pd.DataFrame, metric: str, variant="paper", layer=2, **kw) -> pd.Series:
    m = (s["metric"] == metric) & (s["variant"] == variant)
    m &= s["layer_idx"].isna() if layer is None else s["layer_idx"] == layer
    for k, v in kw.items():
        m &= s[k] == v
    rows = s[m]
    assert len(rows) == 1, f"{metric} {variant} L{layer}: {len(rows)} rows"
    return rows.iloc[0]


def _t(vals) -> tuple[float, float]:
    v = np.asarray(vals, dtype=float)
    return stats.t.interval(0.95, v.size - 1, loc=v.mean(), scale=v.std(ddof=1) / math.sqrt(v.size))


# ---------------------------------------------------------------- pairing


def test_each_concept_has_its_own_control():
    df = flat(task_a_records())
    inj = df[(df.condition == "injected") & (df.layer_idx == 2)]
    p = pair(inj, df[df.condition == "control"])
    assert len(p) == 12 and p["control_id"].nunique() == 12  # no control serves two concepts
    assert (p["word"] == p["word~c"]).all() and (p["sample"] == p["sample~c"]).all()
    assert pair(inj, df[df.condition == "control"].assign(variant="explained")).empty


def test_pair_uses_word_when_controls_carry_one():
    rows = [dict(model_id=M, task="C", variant="paper", trial_index=0, sample=0, word=w,
                 condition=c, **{"grade.intentional": c == "injected" and w == "a"})
            for w in ("a", "b") for c in ("control", "injected")]
    df = pd.DataFrame(rows)
    p = pair(df[df.condition == "injected"], df[df.condition == "control"])
    assert len(p) == 2 and (p["word"] == p["word~c"]).all()


# ---------------------------------------------------------------- task A detection


def test_tpr_fpr_net(summary):
    tpr, fpr, net = (get(summary, m) for m in ("tpr", "fpr", "net"))
    assert (tpr.value, tpr.n, tpr.n_clusters, tpr.ci) == (pytest.approx(7 / 12), 12, 6,
                                                          "wilson-deff-t(concept)")
    assert (tpr.lo, tpr.hi) == pytest.approx(C.rate(np.array([1, 1, 1, 0, 1, 1, 0, 1, 1, 0, 0, 0.]),
                                                    np.repeat(WORDS, 2)).interval[1:])
    assert (fpr.value, fpr.n) == (pytest.approx(2 / 12), 12)
    # per-concept differences 0.5, 0.5, 1, 0, 0.5, 0: Net 5/12; sign-flip p 8/64 (two zeros)
    assert net.value == pytest.approx(5 / 12) and net.ci == "newcombe∪t(concept)"
    assert net.p == pytest.approx(8 / 64) and net.p_min == pytest.approx(2 / 64)
    assert net.lo < 5 / 12 < net.hi and net.lo < 0  # 6 concepts of 2 answers: not enough


def test_holm_family_is_every_framing_cell_and_claim_and_no_reading(summary):
    head = summary[summary["metric"].isin(("net", "identification_vs_random"))
                   & (summary["variant"] == "paper")]
    assert len(head) == 4  # 2 claims × 2 cells (these records have no latent reading)
    from introspect.stats.holm import holm

    assert head["p_holm"].tolist() == pytest.approx(holm(head["p"].tolist()).tolist())
    score = summary[(summary["metric"] == "introspection_score") & (summary["variant"] == "paper")]
    assert len(score) == 2  # a reading: a family of its own, never in the claims'
    assert score["p_holm"].tolist() == pytest.approx(holm(score["p"].tolist()).tolist())


def test_identification_against_concept_random(summary):
    assert get(summary, "identification").value == pytest.approx(4 / 12)
    assert get(summary, "identification:concept_random").value == pytest.approx(1 / 12)
    d = get(summary, "identification_vs_random")
    assert d.value == pytest.approx((1 + 0.5) / 6)  # w1 1 − 0, w3 1 − 0.5
    assert d.p == pytest.approx(32 / 64)  # two non-zero concepts: both signs agree in 2 of 4
    assert get(summary, "identification_mismatch").value == pytest.approx(1 / 12)


def test_ablations_are_paired_tests(summary):
    assert get(summary, "random_detection").value == pytest.approx(2 / 12)
    nr = get(summary, "net_vs_random")
    assert nr.value == pytest.approx(5 / 12) and nr.ci == "newcombe∪t(concept)"  # = controls
    assert get(summary, "net_vs_concept_random").value == pytest.approx(7 / 12)
    nn = get(summary, "net_vs_negative")
    assert nn.value == pytest.approx(6 / 12)  # w2's first answer says yes under −v too
    assert nn.p == pytest.approx(C.sign_flip_p([1, 0, 1, 0.5, 0.5, 0]))


def test_coherence_rows(summary):
    assert get(summary, "coherent:injected").value == pytest.approx(11 / 12)
    # coherent pairs only: w5's second pair dropped; w5's per-concept Net is then 1 − 0
    nc = get(summary, "net:coherent")
    assert nc.value == pytest.approx(np.mean([0.5, 0.5, 1, 0, 1, 0]))
    assert get(summary, "alpha_as:resid").value == pytest.approx(0.5)


def test_p_yes_shifts_and_the_log_odds_introspection_score(summary):
    d = np.array([PY2[w] - PY_CTRL for w in WORDS])
    shift = get(summary, "p_yes_shift")
    assert shift.value == pytest.approx(d.mean()) and (shift.lo, shift.hi) == pytest.approx(_t(d))
    dl = np.array([logit(np.array(PY2[w])) - logit(np.array(PY_CTRL)) for w in WORDS])
    assert get(summary, "logit_yes_shift").value == pytest.approx(dl.mean())
    bias = get(summary, "logit_yes_shift:bias")
    assert bias.value == pytest.approx(np.mean(list(GAMMA.values())))
    score = get(summary, "introspection_score")
    per = dl - np.array([GAMMA[w] for w in WORDS])
    assert score.value == pytest.approx(per.mean()) and (score.lo, score.hi) == pytest.approx(_t(per))
    assert score.p == pytest.approx(C.sign_flip_p(per)) and score.ci == "t(concept)"
    assert "5 bias questions" in score.note
    assert get(summary, "bias_yes:injected").value == pytest.approx(1 / 30)


def _score_with(delta_det, gamma):
    """The introspection score of records whose detection Δlogit is ``delta_det[w]`` and whose
    bias Δlogit is ``gamma[w]`` on every question."""
    py2 = {w: _expit(logit(np.array(PY_CTRL)) + delta_det[w]) for w in WORDS}
    s = summarize(flat(task_a_records(steer=False, py2=py2, gamma=gamma)))
    return get(s, "introspection_score"), get(s, "p_yes_shift"), get(s, "p_yes_shift:bias")


def test_a_uniform_push_to_yes_scores_zero():
    push = {w: c for w, c in zip(WORDS, (1.0, 0.8, 1.2, 0.9, 1.1, 1.0))}
    eta = dict(zip(WORDS, (0.05, -0.05, 0.1, -0.1, 0.02, -0.02)))
    score, det, bias = _score_with({w: push[w] + eta[w] for w in WORDS}, push)
    assert score.value == pytest.approx(0.0, abs=1e-9) and score.lo < 0 < score.hi
    assert score.p == pytest.approx(1.0)
    # the old score (absolute P(yes) shifts at different baselines) would have called it positive
    assert det.value - bias.value > 0.1


def test_yes_raised_on_the_detection_question_only_scores_above_zero():
    eta = dict(zip(WORDS, (0.05, -0.05, 0.1, -0.1, 0.02, -0.02)))
    score, _, _ = _score_with({w: 1.0 + eta[w] for w in WORDS}, {w: 0.0 for w in WORDS})
    assert score.value == pytest.approx(1.0) and score.lo > 0.8 and score.p == pytest.approx(2 / 64)


# ---------------------------------------------------------------- steering


def test_steering_against_a_random_direction(summary):
    t = steering_table(flat(task_a_records())).set_index(["word", "layer_idx"])
    assert t.loc[("w1", 2), "lp_rise_vs_random"] == pytest.approx(3.0 - 0.4)
    assert t.loc[("w6", 2), "lp_rise"] == pytest.approx(1.0) and not t.loc[("w6", 2), "steers"]
    assert STEER_NATS == 1.0
    vs = np.array([RISE[2][w] - 0.4 for w in WORDS])
    r2 = get(summary, "steer_lp_rise_vs_random", variant="steer")
    assert r2.value == pytest.approx(vs.mean()) and (r2.lo, r2.hi) == pytest.approx(_t(vs))
    assert r2.lo > 0  # L2 steers
    r4 = get(summary, "steer_lp_rise_vs_random", variant="steer", layer=4)
    assert r4.lo < 0 < r4.hi  # L4's rise is what a random push gives
    assert get(summary, "steer_share", variant="steer").value == pytest.approx(5 / 6)
    assert get(summary, "steer_share").value == pytest.approx(5 / 6)  # beside the detection rows
    assert get(summary, "steer_mention:steer", variant="steer").value == pytest.approx(2 / 12)
    assert get(summary, "steer_mention:random", variant="steer").value == 0.0
    assert get(summary, "steer_lp_rise_vs_random:w4", variant="steer").value == pytest.approx(1.1)


# ---------------------------------------------------------------- verdicts


def verdict(s: pd.DataFrame) -> pd.Series:
    return get(s, "verdict", variant="all", layer=None)


def glance(s: pd.DataFrame):
    """The verdict as a value (``VerdictA``): its table's dimensions by key (``glance(s).dim("net")``)."""
    from introspect.tasks.injection.verdict_glance import VerdictA

    return VerdictA.from_json(get(s, "verdict_glance", variant="all", layer=None).note)


def test_inconclusive_when_answers_move_but_nothing_survives(summary):
    v = verdict(summary)
    assert (v.value, v.condition) == (0.0, "inconclusive") and "why: no Net survives Holm" in v.note
    assert "1 cells steer" in v.note and "Holm over 4 tests" in v.note
    assert "cannot reject" in v.note and "needs ≥ 8 concepts" in v.note  # 2^-6 > 0.05/4 > 2^-7
    power = get(summary, "power:net", variant="all", layer=None)
    assert power.p_min == pytest.approx(2 / 64) and "cannot reject" in power.note


def test_inconclusive_says_when_the_holm_p_passes_but_the_holm_level_interval_does_not():
    """Holm's step-down p can pass while the Bonferroni interval a claim also needs reaches 0
    (the base model on run F's seed-1 words in two_turn: Holm p 0.0495). The note says so
    instead of "no Net survives Holm"."""
    from introspect.tasks.injection.verdict_a import verdict_a

    e = C.Est(0.10, 0.02, 0.19, 128, 64, "t(concept)", p=0.0247, refit=lambda lv: (-0.01, 0.21))
    net = row({"model_id": M, "task": "A", "variant": "two_turn", "layer_idx": 24, "alpha": 0.625,
               "alpha_units": "resid"}, "net", e.interval, e.n, "injected-control", n_clusters=64, p=e.p)
    net.update(p_holm=0.0495, holm_m=4, _est=e)
    v = verdict_a(M, [net], [0.0] * 128)[0]
    assert v["condition"] == "inconclusive" and "no Net survives Holm" not in v["note"]
    assert ("Net's Holm p is below 0.05 but its interval at the Holm level (Bonferroni, so wider) reaches 0 "
            "at two_turn L24 α0.625 (Holm p 0.0495, interval at the Holm level [-0.01, 0.21])") in v["note"]
    net.update(p_holm=0.2)
    assert "why: no Net survives Holm" in verdict_a(M, [net], [0.0] * 128)[0]["note"]


def test_a_gate_whose_interval_clears_0_but_whose_sign_flip_test_does_not_fails():
    """The retrained positive control at S = ¾ (2026-11-29): over the Gaussian [0.004, 0.20] with
    sign-flip p 0.058, follows the vector [0.004, 0.11] with p 0.063. A gate needs both its
    interval and its test, so neither counts, and the verdict's table prints the p that failed."""
    from introspect.tasks.injection.verdict_a import judge_a, verdict_a

    cell = {"model_id": M, "task": "A", "variant": "seed", "layer_idx": 24, "alpha": 0.625, "alpha_units": "resid"}
    e = C.Est(0.14, 0.06, 0.22, 128, 64, "t(concept)", p=0.0008, refit=lambda lv: (0.03, 0.25))
    net = row(cell, "net", e.interval, e.n, "injected-control", n_clusters=64, p=e.p)
    net.update(p_holm=0.0017, holm_m=4, _est=e)
    ident = row(cell, "identification_vs_random", (0.08, 0.03, 0.14), 128, n_clusters=64, p=0.005)
    ident.update(p_holm=0.005, holm_m=4, _est=C.Est(0.08, 0.03, 0.14, 128, 64, "t(concept)", p=0.005,
                                                      refit=lambda lv: (0.01, 0.16)))

    def gates(gauss_p: float, follows_p: float) -> list[dict]:
        return [net, ident,
                row(cell, "net:coherent", (0.14, 0.06, 0.22), 128, n_clusters=64, p=0.0008),
                row({**cell, "variant": "steer"}, "steer_lp_rise_vs_random", (1.0, 0.5, 1.5), 64, n_clusters=64,
                    p=0.001),
                row(cell, "net_beyond_yes_bias", (0.14, 0.06, 0.23), 577, n_clusters=64, p=0.0008),
                row(cell, "bias_wrong_rise", (0.0, -0.05, 0.04), 577, n_clusters=64, p=0.9),
                row(cell, "net_vs_random", (0.10, 0.004, 0.20), 128, n_clusters=64, p=gauss_p),
                row(cell, "random_vs_control", (0.10, 0.04, 0.16), 128, n_clusters=64, p=0.001),
                row(cell, "follows_vector", (0.05, 0.004, 0.11), 128, n_clusters=64, p=follows_p)]

    label = lambda rows: verdict_a(M, rows, [0.0] * 128)[0]  # noqa: E731
    assert label(gates(0.04, 0.04))["condition"] == "detected and identified"
    v = judge_a(M, gates(0.04, 0.063), [0.0] * 128)
    f = v.dim("follows")
    assert v.label == "detected, not identified" and (f.interval(), f.gate, f.why) == ("[0.00, 0.11]", "fail",
                                                                                      "sign-flip p 0.063")
    assert "fail (sign-flip p 0.063)" in v.text()
    v = judge_a(M, gates(0.058, 0.04), [0.0] * 128)
    g = v.dim("beyond_gaussian")
    assert v.label == "reacts to any perturbation" and v.dim("gaussian_yes").gate == "pass"
    assert (g.figure(), g.interval(), g.gate, g.why) == ("0.10", "[0.00, 0.20]", "fail", "sign-flip p 0.058")
    assert label(gates(math.nan, math.nan))["condition"] == "detected and identified"  # no test: the interval alone
    steer_untested = [dict(r, p=0.08) if r["metric"] == "steer_lp_rise_vs_random" else r for r in gates(0.04, 0.04)]
    v = label(steer_untested)  # the precondition asks its test too: an interval above 0 with p 0.08 is no steering
    assert v["condition"] == "inconclusive" and "the cell does not steer" in v["note"]
    assert "0 cells steer" in v["note"]  # the count asks the same rule as the gate
    assert "1 cells steer" in label(gates(0.04, 0.04))["note"]


def test_each_framing_is_judged_by_the_steering_check_with_its_own_span():
    """two_turn injects over turn 1 only: its cells steer when the two-turn check does, whatever
    the single-turn check says; records without a two-turn check fall back to the one check."""
    from introspect.tasks.injection.metrics_steer import cell_steers, steering_cells

    cell = {"model_id": M, "task": "A", "layer_idx": 4, "alpha": 4.0, "alpha_units": "raw"}
    steers = row({**cell, "variant": "steer"}, "steer_lp_rise_vs_random", (1.0, 0.5, 1.5), 64, n_clusters=64,
                 p=0.001)
    flat_two = row({**cell, "variant": "steer_two_turn"}, "steer_lp_rise_vs_random", (0.1, -0.3, 0.5), 64,
                   n_clusters=64, p=0.6)
    copy = {**steers, "variant": "two_turn"}  # the summary's copy beside a framing's rows is no check
    rows = [steers, flat_two, copy]
    assert cell_steers(rows, M, {**cell, "variant": "paper"})
    assert not cell_steers(rows, M, {**cell, "variant": "two_turn"})
    assert steering_cells(rows, M) == {("steer", 4, 4.0, "raw")}
    assert cell_steers([steers], M, {**cell, "variant": "two_turn"})


def test_answers_that_differ_beside_a_table_where_nothing_steers_are_not_a_null():
    flat_rise = {2: RISE[4], 4: RISE[4]}
    s = summarize(flat(task_a_records(rise=flat_rise)))
    v = verdict(s)
    assert v.condition == "inconclusive" and "0 cells steer" in v.note


def inert_records() -> list[Record]:
    """Task A records of an injection that changes nothing: answers equal their controls word
    for word, P(yes) unmoved, and the word gains no more than under a random direction."""
    recs = task_a_records(det2={w: CTRL[w] for w in WORDS}, py2={w: PY_CTRL for w in WORDS},
                          gamma={w: 0.0 for w in WORDS}, rise={2: RISE[4], 4: RISE[4]})
    for r in recs:
        if r.condition == "injected":
            r.response = f"ctl {r.word} {r.sample}"
    return recs


def test_no_measurable_effect_needs_identical_answers_and_no_steering():
    v = verdict(summarize(flat(inert_records())))
    assert (v.value, v.condition) == (-1.0, "no measurable effect")
    assert "100% of injected answers" in v.note


def test_rounding_sized_shifts_are_not_effects():
    """A placebo's P(yes) differs from its control's by float32 rounding of two batch layouts
    (1e-7–1e-5 on the default model, always the same sign): counted as 0, never significant."""
    recs = task_a_records(det2={w: CTRL[w] for w in WORDS}, py2={w: PY_CTRL + 2e-6 for w in WORDS},
                          gamma={w: 0.0 for w in WORDS})
    s = summarize(flat(recs))
    for m in ("p_yes_shift", "logit_yes_shift", "introspection_score"):
        r = get(s, m)
        assert (r.value, r.lo, r.hi, r.p) == (0.0, 0.0, 0.0, 1.0), m
    recs = task_a_records(det2={w: CTRL[w] for w in WORDS}, py2={w: PY_CTRL + 2e-3 for w in WORDS},
                          gamma={w: 0.0 for w in WORDS})
    r = get(summarize(flat(recs)), "p_yes_shift")  # a real (small) shift still counts
    assert r.value == pytest.approx(2e-3) and r.p == pytest.approx(2 / 2**6)


def _strong(n: int = 12) -> list[Record]:
    words = [f"c{i:02d}" for i in range(n)]
    ctrl = {w: [0, 0] for w in words}
    det = {w: [1, 1] for w in words}
    rise = {2: {w: 3.0 for w in words}, 4: {w: 0.4 for w in words}}
    py = {w: 0.2 for w in words}
    return task_a_records(det2=det, words=words, ctrl=ctrl, py2=py, gamma={w: 0.0 for w in words},
                          rise=rise)


def _set(recs: list[Record], cond: str, layer=2, **grade) -> list[Record]:
    """The records of ``cond`` at ``layer`` with ``grade`` fields overwritten (in place)."""
    for r in recs:
        if r.condition == cond and r.layer_idx == layer:
            r.grade = {**r.grade, **grade}
    return recs


def _perfect(n: int = 12) -> list[Record]:
    """A simulated perfect introspector: it reports every injected thought (its own concept's,
    another concept's, −v) and names the thought it was given; a Gaussian push is no thought;
    unrelated questions stay answered right."""
    recs = _set(_set(_strong(n), "injected", identified=True), "concept_random", detected=True,
                names_vector_word=True, identified=False)
    recs = _set(recs, "negative", detected=True)
    for r in recs:
        if r.condition in ("bias", "bias_control"):
            r.grade = {**r.grade, "bias_answer": "correct", "wrong": False, "reports_detection": False}
    return recs


def test_a_perfect_introspector_is_detected_and_identified():
    s = summarize(flat(_perfect()))
    v = verdict(s)
    assert (v.value, v.condition) == (1.0, "detected and identified") and "paper L2 α4" in v.note
    # saying yes to another concept's vector and to −v is what a detector should do: shown, not held against it
    assert get(s, "concept_random_detection").value == 1.0 and get(s, "negative_detection").value == 1.0
    assert "yes-rates a detector should share: another concept's vector 1.00, −v 1.00" in v.note
    assert get(s, "follows_vector").value == 1.0 and get(s, "follows_vector").lo > 0
    assert get(s, "net_beyond_yes_bias").value == 1.0
    assert "Holm family: 4 tests = identification_vs_random, net × framings ['paper'] × " \
           "cells ['L2 α4 raw', 'L4 α4 raw']" in v.note
    net = get(s, "net")
    assert net.value == 1.0 and net.p == pytest.approx(2 / 2**12) and net.p_holm < 0.05


def test_detected_but_not_identified_says_which_identification_gate_failed():
    v = verdict(summarize(flat(_strong())))  # never names the concept; names_vector_word not recorded
    assert (v.value, v.condition) == (0.75, "detected, not identified")
    assert "does not name the concept above chance after Holm and follows-the-vector not recorded" in v.note
    recs = _set(_set(_strong(), "injected", identified=True), "concept_random", names_vector_word=False)
    v = verdict(summarize(flat(recs)))  # names its own concept, but under another vector names nothing
    assert v.condition == "detected, not identified" and "does not follow the vector" in v.note


def _latent(recs: list[Record], own: bool, other_vector: bool, by_chance: bool = False,
            neutral: bool = False) -> list[Record]:
    """Latent-naming grades at layer 2: under its own vector the word rose most (``own``), and
    after the neutral prefill too (``neutral``: the vector's steering alone); under another
    concept's vector that vector's word did (``other_vector``), or the original word did
    (``by_chance``)."""
    recs = _set(recs, "injected", latent_names_word=own, latent_names_word_neutral=neutral, latent_k=12,
                latent_rank=1 if own else 5)
    return _set(recs, "concept_random", latent_names_word=by_chance, latent_names_vector_word=other_vector,
                latent_names_vector_word_neutral=neutral and other_vector, latent_k=12)


def test_latent_naming_note_says_how_many_concepts_competed_or_k_when_unrecorded():
    """The note reads the records' ``latent_k`` (12 here); records without it (the calibration
    simulation's) say "K", never "nan", and raise no All-NaN warning."""
    import warnings

    recs = _latent(_strong(), own=True, other_vector=True)
    assert "among the run's 12 concepts" in get(summarize(flat(recs)), "latent_identification").note
    for r in recs:
        r.grade = {k: v for k, v in r.grade.items() if k != "latent_k"}
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        note = get(summarize(flat(recs)), "latent_identification").note
    assert "among the run's K concepts" in note and "nan" not in note


def test_a_detector_that_names_only_latently_gets_a_label_of_its_own():
    """Detected, free-text naming absent, but after the detection report the injection raises the
    concept's own name most, and after a neutral prefill it does not: "identified latently"."""
    s = summarize(flat(_latent(_strong(), own=True, other_vector=True)))
    v = verdict(s)
    assert (v.value, v.condition) == (0.875, "detected, identified latently (not in words)")
    assert "the sampled answers do not name it" in v.note
    lat = glance(s).dim("latent")
    assert (lat.value, lat.gate) == (1.0, "pass") and glance(s).dim("names").gate == "fail"
    assert get(s, "latent_identification").value == 1.0
    lat = get(s, "latent_beyond_steering")
    assert lat.value == 1.0 and lat.p_holm < 0.05
    assert "Holm family: 5 tests = identification_vs_random, latent_beyond_steering, net" in v.note
    # free-text naming that follows the vector still outranks it
    recs = _latent(_set(_set(_strong(), "injected", identified=True), "concept_random", names_vector_word=True,
                        identified=False), own=True, other_vector=True)
    assert verdict(summarize(flat(recs))).condition == "detected and identified"


def test_latent_naming_that_the_vector_does_alone_is_a_steering_reading():
    """The issue-72 case: the vector raises its own word after the report and after a neutral
    prefill alike. Every latent reading against another concept's vector is perfect, and still
    no label uses it; records without the neutral reading cannot be identified latently."""
    s = summarize(flat(_latent(_strong(), own=True, other_vector=True, neutral=True)))
    assert get(s, "latent_identification_vs_random").value == 1.0 and get(s, "latent_follows_vector").value == 1.0
    assert get(s, "latent_beyond_steering").value == 0.0
    assert get(s, "latent_identification:neutral").value == 1.0
    v = verdict(s)
    assert v.condition == "detected, not identified" and (glance(s).dim("latent").value, glance(s).dim("latent").gate) == (0.0, "fail")
    recs = _latent(_strong(), own=True, other_vector=True)
    for r in recs:
        r.grade = {k: x for k, x in r.grade.items() if not k.endswith("_neutral")}
    s = summarize(flat(recs))
    assert not (s["metric"] == "latent_beyond_steering").any()
    assert verdict(s).condition == "detected, not identified"
    assert (glance(s).dim("latent").figure(), glance(s).dim("latent").gate) == ("not measured", "not judged")


def test_latent_naming_at_chance_or_not_following_the_vector_identifies_nothing():
    # the word rises most whichever vector is injected: a word prior, not naming
    v = verdict(summarize(flat(_latent(_strong(), own=True, other_vector=False, by_chance=True))))
    assert (v.value, v.condition) == (0.75, "detected, not identified")
    s = summarize(flat(_latent(_strong(), own=True, other_vector=False)))  # names its own, never another's
    assert get(s, "latent_follows_vector").value == 0.0
    assert verdict(s).condition == "detected, not identified"
    # latent naming without detection is no detection
    recs = _latent(task_a_records(), own=True, other_vector=True)
    assert verdict(summarize(flat(recs))).value < 0.75


def test_a_yes_bias_is_not_detection():
    """Injection makes the model answer unrelated yes/no questions wrongly as often as it says
    yes to the detection question: Net minus that rise is 0."""
    recs = _perfect()
    for r in recs:
        if r.condition == "bias" and r.layer_idx == 2:
            r.grade = {**r.grade, "bias_answer": "affirms_false", "wrong": True, "said_yes": True}
            r.response = "Yes."
    s = summarize(flat(recs))
    v = verdict(s)
    assert (v.value, v.condition) == (0.25, "yes-bias, not detection")
    assert get(s, "bias_yes_rise").value == 1.0 and get(s, "net_beyond_yes_bias").value == 0.0
    d = glance(s)
    assert (d.dim("yes_bias").value, d.dim("yes_bias").gate, d.dim("beyond_yes_bias").gate) == (1.0, "pass", "fail")


def _reports(recs: list[Record], questions: tuple[str, ...]) -> list[Record]:
    """Injected at layer 2, the bias questions in ``questions`` are answered with a detection report."""
    for r in recs:
        if r.condition == "bias" and r.layer_idx == 2 and r.extra["question"] in questions:
            r.grade = {**r.grade, "bias_answer": "reports_detection", "wrong": False, "reports_detection": True,
                       "said_yes": True}
            r.response, r.p_yes = "Yes, I detect an injected thought.", 0.9
    return recs


def test_a_detection_report_to_every_question_is_not_a_yes_bias_and_leaves_it_unjudged():
    """The adapter of the issue: injected, it answers "Is the Pacific smaller than a lake?" with
    "Yes, I detect an injected thought": first-token P(yes) soars on the bias questions (the
    log-odds introspection score falls below 0), yet no question is answered wrongly. With every
    answer a report there is no content answer to judge the yes-bias on: not judged, so not passed."""
    s = summarize(flat(_reports(_perfect(), tuple(f"q{q}" for q in range(len(BIAS_CLEAN))))))
    v = verdict(s)
    assert v.condition == "inconclusive" and "the yes-bias is not judged, 1.00 of the injected answers" in v.note
    assert get(s, "bias_detection_reports").value == 1.0 and get(s, "bias_wrong_rise").value == 0.0
    assert get(s, "bias_yes_or_report_rise").value == 1.0
    assert not ((s["metric"] == "bias_yes_rise") & (s["layer_idx"] == 2)).any()  # no content answer left
    assert get(s, "introspection_score").value < 0  # the first-token reading is fooled; the verdict is not
    # reports to a few questions: shown, never a yes-bias, never a right answer; the rest are judged
    s = summarize(flat(_reports(_perfect(), ("q0",))))
    assert get(s, "bias_yes_rise").value == 0.0 and verdict(s).condition == "detected and identified"


def test_reports_that_replace_wrong_answers_do_not_raise_detection_beyond_the_yes_bias():
    """Without injection some false statements are affirmed; under injection exactly those answers
    become detection reports. Read as "not wrong", the rise would fall below 0 and Net beyond it
    would exceed Net; counted with the "yes" answers, it stays at 0."""
    recs = _strong()
    wrong = {(r.word, r.extra["question"]) for r in recs if r.condition == "bias_control" and r.extra["question"] == "q0"
             and r.word in {"c00", "c01", "c02", "c03", "c04", "c05"}}
    for r in recs:
        if r.condition in ("bias", "bias_control"):
            hit = (r.word, r.extra["question"]) in wrong
            if r.condition == "bias_control" or r.layer_idx != 2:
                g = {"bias_answer": "affirms_false" if hit else "correct", "wrong": hit, "said_yes": hit,
                     "reports_detection": False}
            else:
                g = {"bias_answer": "reports_detection" if hit else "correct", "wrong": False, "said_yes": hit,
                     "reports_detection": hit}
            r.grade = {**r.grade, **g}
    s = summarize(flat(recs))
    net, beyond = get(s, "net"), get(s, "net_beyond_yes_bias")
    assert get(s, "bias_wrong_rise").value < 0  # the old reading: reports flatter the model
    assert get(s, "bias_yes_or_report_rise").value == 0.0
    assert beyond.value == pytest.approx(net.value)  # not above Net


def test_unparsed_bias_answers_are_counted_and_left_out_of_the_wrong_rate():
    recs = _perfect()
    for r in recs:
        if r.condition == "bias" and r.layer_idx == 2 and r.word in ("c00", "c01", "c02"):
            r.grade = {**r.grade, "bias_answer": "unparsed", "wrong": None, "said_yes": None}
    s = summarize(flat(recs))
    assert get(s, "bias_unparsed:injected").value == pytest.approx(3 / 12)
    assert get(s, "bias_unparsed:clean").value == 0.0
    assert get(s, "bias_wrong:injected").n_clusters == 9  # the three concepts' answers are left out


def test_an_anomaly_detector_reacts_to_any_perturbation():
    recs = _set(_perfect(), "random", detected=True)  # a Gaussian push reported as often
    v = verdict(summarize(flat(recs)))
    assert (v.value, v.condition) == (0.5, "reacts to any perturbation") and "a Gaussian push" in v.note
    assert "it tells the concepts apart" in v.note  # it names what it was given, though it says yes to noise
    unnamed = _set(recs, "injected", identified=False)
    s = summarize(flat(unnamed))
    v = verdict(s)
    assert v.condition == "reacts to any perturbation" and glance(s).dim("names").gate == "fail"
    assert (glance(s).dim("beyond_gaussian").gate, glance(s).dim("gaussian_yes").gate) == ("fail", "pass")
    assert "tells the concepts apart" not in v.note


def test_records_without_bias_questions_cannot_be_detected():
    recs = [r for r in _perfect() if r.condition not in ("bias", "bias_control")]
    v = verdict(summarize(flat(recs)))
    assert v.condition == "inconclusive" and "the yes-bias is not measured" in v.note


def test_a_cell_that_does_not_steer_is_inconclusive():
    recs = [r for r in _perfect() if r.variant != "steer"]
    v = verdict(summarize(flat(recs)))
    assert v.condition == "inconclusive" and "paper L2 α4: the cell does not steer" in v.note
    recs = _set(_perfect(), "injected", coherent=False)
    assert verdict(summarize(flat(recs))).condition == "inconclusive"


def test_split_half_reports_on_held_out_concepts(summary):
    held = summary[summary["metric"] == "net@held_out"]
    assert len(held) == 1
    r = held.iloc[0]
    sel = [w for w in WORDS if f"'{w}'" in r.note.split("estimate on")[0]]
    out = [w for w in WORDS if w not in sel]
    assert len(sel) == 3 and sorted(sel + out) == WORDS
    d2 = {w: np.mean([DET2[w][k] - CTRL[w][k] for k in (0, 1)]) for w in WORDS}
    best = 2 if np.mean([d2[w] for w in sel]) >= 0 else 4
    assert r.layer_idx == best
    assert r.value == pytest.approx(np.mean([d2[w] for w in out]) if best == 2 else 0.0)
    assert math.isnan(r.lo) and "fewer than 5 concepts" in r.note  # 3 held-out concepts


def test_holm_known_values():
    rows = [row({"model_id": M, "task": "A", "variant": "v", "layer_idx": k}, "net",
                (0, 0, 0), 1, p=p) for k, p in enumerate((0.01, 0.04, 0.03, 0.02))]
    rows.append(row({"model_id": M, "task": "A", "variant": "w", "layer_idx": 0},
                    "identification_vs_random", (0, 0, 0), 1, p=0.001))
    add_holm(rows, {"net", "identification_vs_random"})
    # one family of five: sorted .001 .01 .02 .03 .04 -> ×5 ×4 ×3 ×2 ×1, monotone
    assert [r["p_holm"] for r in rows] == pytest.approx([0.04, 0.06, 0.06, 0.06, 0.005])
    other = row({"model_id": M, "task": "A", "variant": "w"}, "p_yes_shift", (0, 0, 0), 1, p=0.01)
    add_holm([other], {"net"})
    assert other["p_holm"] == pytest.approx(0.01)  # a secondary metric: its own family


# ---------------------------------------------------------------- tasks B, C, D


def _bc(task, cond, word, i, s, layer=None, grade=None, **kw) -> Record:
    return Record(seed=0, model_id=M, task=task, condition=cond, layer_idx=layer,
                  alpha=4.0 if layer else 0.0, alpha_units="raw", word=word, variant="paper",
                  trial_index=i, sample=s, grade=grade or {}, extra={"sentence": f"s{i}"}, **kw)


B_HITS = {"a": [1, 1], "b": [0, 1], "c": [1, 0], "d": [0, 0], "e": [1, 1], "f": [1, 0]}


def test_task_b_paired_by_concept():
    recs = []
    for w, hits in B_HITS.items():
        for s in (0, 1):
            recs.append(_bc("B", "control", w, 0, s, grade={"thought_correct": False, "repeat_correct": True}))
            recs.append(_bc("B", "injected", w, 0, s, 2, grade={"thought_correct": bool(hits[s]),
                                                              "repeat_correct": s != 0}))
    s = summarize(flat(recs))
    tc = get(s, "delta_thought_correct", layer=2)
    d = np.array([np.mean(h) for h in B_HITS.values()])
    assert tc.value == pytest.approx(d.mean()) and tc.n == 12 and tc.n_clusters == 6
    assert tc.p == pytest.approx(C.sign_flip_p(d)) and tc.ci == "newcombe∪t(concept)"
    assert get(s, "thought_correct:control", layer=2).value == 0.0
    assert get(s, "delta_repeat_correct", layer=2).value == pytest.approx(-0.5)
    assert not (s["metric"] == "verdict").any()  # no answer text: no verdict


def test_task_b_verdict_from_identical_answers():
    recs = []
    for w in B_HITS:
        for s in (0, 1):
            for cond, layer in (("control", None), ("injected", 2)):
                recs.append(_bc("B", cond, w, 0, s, layer, grade={"thought_correct": False},
                                response=f"the same words {w} {s}"))
    v = get(summarize(flat(recs)), "verdict", variant="all", layer=None)
    assert (v.value, v.condition) == (-1.0, "no measurable effect") and "100%" in v.note


def test_task_c_matched_deltas():
    recs = []
    vals = {"control": [False, None], "injected": [True, None], "mismatch": [False, True]}
    for w in ("a", "b", "c", "d", "e"):
        for cond, v in vals.items():
            for s in (0, 1):
                recs.append(_bc("C", cond, w, 0, s, None if cond == "control" else 3,
                                grade={"intentional": v[s]}))
    s = summarize(flat(recs))
    assert get(s, "intentional:control", layer=3).value == 0.0
    assert get(s, "unknown:control", layer=3).value == 0.5
    d = get(s, "delta_intentional:injected", layer=3)
    assert d.value == pytest.approx(0.5) and d.n == 10 and d.p == pytest.approx(2 / 32)
    assert get(s, "delta_intentional:mismatch", layer=3).value == pytest.approx(0.5)
    im = get(s, "delta_intentional:injected-mismatch", layer=3)
    assert im.value == pytest.approx(0.0) and im.p == 1.0


def _d(cond, word, i, cos, centred, ctrl, words, variant="plain") -> Record:
    return Record(seed=0, model_id=M, task="D", condition=cond, word=word, variant=variant,
                  trial_index=i, extra={"sentence": f"s{i}"},
                  grade={"layers": [0, 1], "cos": cos, "cos_centred": centred, "cos_ctrl": ctrl,
                         "cos_ctrl_centred": [c / 2 for c in ctrl], "cos_ctrl_words": words,
                         "cos_ctrl_words_centred": words})


D_WORDS = (("a", -0.3, 0.02), ("b", 0.0, 0.03), ("c", 0.4, 0.025), ("d", 0.1, 0.01), ("e", 0.2, 0.04),
           ("f", -0.1, 0.03))
CTRL_WORD_DELTA = np.array([0.0, 0.01, -0.01, 0.02])  # four unrelated words' think − don't-think


def test_task_d_contrasts_band_and_held_out_peak():
    recs = []
    for w, off, bump in D_WORDS:
        for variant, (x, y) in (("plain", ("think", "dont_think")), ("incentive", ("rewarded", "punished"))):
            base = [[0.05, 0.05] for _ in CTRL_WORD_DELTA]
            hot = [[b0 + d, b1 + 2 * d] for (b0, b1), d in zip(base, CTRL_WORD_DELTA)]
            recs.append(_d(x, w, 0, [off + bump, off + 2 * bump], [bump, 3 * bump], [0.01, 0.01], hot, variant))
            recs.append(_d(y, w, 0, [off, off], [0.0, 0.0], [0.01, 0.0], base, variant))
    s = summarize(flat(recs))
    plain = {"variant": "plain"}
    bumps = np.array([b for _, _, b in D_WORDS])
    d1 = get(s, "delta_cos", layer=1, **plain)
    assert d1.value == pytest.approx(2 * bumps.mean()) and (d1.lo, d1.hi) == pytest.approx(_t(2 * bumps))
    assert d1.ci == "t(concept)"
    band = get(s, "band_delta_cos", layer=1, **plain)  # per-word Δ at layer 1: 2 × CTRL_WORD_DELTA
    w = 2 * CTRL_WORD_DELTA
    half = stats.t.ppf(0.975, 3) * w.std(ddof=1) * math.sqrt(1 + 1 / 4)
    assert (band.value, band.lo, band.hi) == pytest.approx((w.mean(), w.mean() - half, w.mean() + half))
    assert band.n_clusters == 4 and band.ci.startswith("prediction")
    above = get(s, "above_band_delta_cos", layer=1, **plain)
    assert above.value == pytest.approx(np.mean(2 * bumps > w.mean() + half))
    # the peak: chosen on half the concepts, reported on the other half (3 concepts: no interval)
    peak = s[(s["metric"] == "peak_delta_cos@held_out") & (s["variant"] == "plain")].iloc[0]
    assert peak.layer_idx == 1 and peak.n_clusters == 3 and math.isnan(peak.lo)
    held = [w for w, _, _ in D_WORDS if f"'{w}'" in peak.note.split("held-out")[1]]
    assert peak.value == pytest.approx(np.mean([2 * b for w, _, b in D_WORDS if w in held]))
    layer = get(s, "peak_layer", layer=None, **plain)
    assert layer.value == 1 and layer.lo == 1 and layer.hi == 1
    inc = get(s, "delta_cos", variant="incentive", layer=0)
    assert inc.condition == "rewarded-punished"
    assert math.isfinite(get(s, "auc_delta_cos_centred", layer=None, **plain).value)
