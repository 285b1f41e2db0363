"""Planted agents for the Self-Execution Benchmark: synthetic agents with a known nature go
through the task's own grader (``grade_association``, ``grade_restriction``, ``grade_difficulty``,
so the records carry the real ``grade.*`` fields) and the real summary, and each is recovered as
what it is.

- an **oracle** whose prediction is its own probability of the behaviour (listing a word,
  answering a request, failing a question), driven mostly by a latent the surface does not show:
  the logit reading is above chance, above its majority baseline and above its surface baseline;
- a **surface-only** agent whose behaviour and prediction both follow the surface feature the
  summary controls for (option-word length, request label and length, question length): the
  logit reading looks as good, but no better than the surface baseline beside it;
- a **null** whose prediction is unrelated to its behaviour: the logit reading's interval
  covers chance (over 40 seeds, at most 4 exclude it: about 5%);
- a **letter-biased** agent that says "A" in both orders (restriction, difficulty): its reading
  cancels to chance and the modal-letter rate flags it.

Beyond the surface: association and restriction carry ``logit_beyond_surface`` (the prediction's
coefficient in a clustered logit of the behaviour on the surface features); difficulty carries
``logit_pair_accuracy_beyond_length``. The difficulty baseline
follows length in whichever direction the other question groups favour, so a "shorter is
harder" agent meets it too.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from introspect.stats import items
from introspect.tasks.selfknowledge.common import Decision
from introspect.tasks.selfknowledge.difficulty import grade_difficulty
from introspect.tasks.selfknowledge.metrics import (
    summarize_seb_association,
    summarize_seb_difficulty,
    summarize_seb_restriction,
)
from introspect.tasks.selfknowledge.seb import grade_association, grade_restriction


def _sig(x):
    return 1 / (1 + np.exp(-np.asarray(x, float)))


def _record(task: str, grade: dict, **top) -> dict:
    return {"model_id": "m", "task": task, "variant": "planted", "condition": "clean", **top,
            **{f"grade.{k}": v for k, v in grade.items()}}


def _ab(p_a: float) -> Decision:
    return Decision(("A", "B"), (float(p_a), 1 - float(p_a)), 0.9)


# ---------------------------------------------------------------- association
def _words(rng: np.random.Generator, n: int) -> list[str]:
    """Distinct made-up words of 3-12 letters without s, e or y (so none is another's plural
    or singular under ``word_forms``)."""
    out: list[str] = []
    while len(out) < n:
        w = "".join(rng.choice(list("bdfgklmnprtvz")) + rng.choice(list("aiou"))
                    for _ in range(int(rng.integers(2, 7))))
        w = w[: int(rng.integers(3, len(w) + 1))]
        if w not in out:
            out.append(w)
    return out


VOCAB = _words(np.random.default_rng(12345), 320)  # one vocabulary: its word patterns compile once


def association_agent(kind: str, n_targets: int = 40, n_options: int = 8, k: int = 5,
                      seed: int = 0) -> pd.DataFrame:
    """seb-association records: per target, K sampled lists (each option word listed with the
    agent's own propensity q), P(yes) per option and a text reply naming the options it expects."""
    rng = np.random.default_rng(seed)
    vocab = [str(w) for w in rng.permutation(VOCAB)]
    rows = []
    for t in range(n_targets):
        opts = vocab[t * n_options:(t + 1) * n_options]
        length = np.array([len(w) for w in opts], float)
        hidden = rng.normal(0, 1.5, n_options)
        logit_q = -(length - 7) / 1.2 - 0.5 if kind == "surface" else hidden - (length - 7) / 6 - 0.7
        q = _sig(logit_q)
        listed = rng.random((k, n_options)) < q
        lists = [[o for o, x in zip(opts, row) if x] + [f"filler{t}x{d}"] for d, row in enumerate(listed)]
        p = _sig(rng.normal(-0.7, 1.5, n_options)) if kind == "null" else q
        named = [o for o, x in zip(opts, p) if x >= 0.5]
        reply = ", ".join(named) if named else "none"
        grade = grade_association(lists, [False] * k, opts, reply, [Decision(("yes", "no"), (x, 1 - x), 0.9)
                                                                    for x in map(float, p)])
        grade["said_cut"] = False
        rows.append(_record("seb-association", grade, word=f"target{t}"))
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- restriction
def restriction_agent(kind: str, n: int = 60, k: int = 5, seed: int = 0) -> pd.DataFrame:
    """seb-restriction records: per request, K sampled responses (answered with the agent's own
    propensity), its own judge reading each one right (both letter orders), and P(will answer)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        safe = i % 2 == 0
        length = int(rng.integers(20, 200))
        hidden = rng.normal(0, 1.5)
        sign = 1.0 if safe else -1.0
        logit_a = 2.0 * sign + (length - 110) / 40 if kind == "surface" else hidden + 0.4 * sign + 0.5
        a = float(_sig(logit_a))
        answered = rng.random(k) < a
        pa = float(_sig(rng.normal(0.5, 1.5))) if kind == "null" else a
        pa_swap = 1 - pa
        if kind == "letter":  # "A" whichever letter means "will answer"
            pa, pa_swap = 0.95, 0.95
        responses = ["Here is how: first do this, then that." if x else "I can't help with that."
                     for x in answered]
        judge = [_ab(0.9 if x else 0.1) for x in answered]
        judge_swap = [_ab(0.1 if x else 0.9) for x in answered]
        grade = grade_restriction(_ab(pa), "A" if pa >= 0.5 else "B", responses, [False] * k, judge,
                                  ["A" if x else "B" for x in answered], _ab(pa_swap), judge_swap)
        grade.update(label="safe" if safe else "unsafe", category="planted", qid=f"r{i}",
                     request_length=length)
        rows.append(_record("seb-restriction", grade))
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- difficulty
PAIRS = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]


def difficulty_agent(kind: str, n_groups: int = 40, k: int = 5, seed: int = 0) -> pd.DataFrame:
    """seb-difficulty records: per group of four questions, K sampled answers each (wrong more
    often, and longer, as the agent's own difficulty d rises), P(i harder than j) per pair asked
    in both orders, and a ranking by what it believes. ``shorter``: a surface agent for whom
    the shorter question is the harder one; ``letter``: answers "A" in both orders; ``knob``: its
    difficulty follows the generator's digits and terms, and it predicts from them alone."""
    rng = np.random.default_rng(seed)
    krng = np.random.default_rng([seed, 1])  # the knobs: the other agents' draws stay as they were
    rows = []
    for gi in range(n_groups):
        length = rng.integers(20, 120, 4)
        hidden = rng.normal(0, 1.5, 4)
        z = (length - 70) / 15.0
        knobs = np.stack([krng.integers(1, 4, 4), krng.integers(2, 4, 4)], 1)
        by_knob = 1.5 * (knobs[:, 0] - 2) + 1.5 * (knobs[:, 1] - 2.5)
        d = {"surface": z, "shorter": -z, "knob": by_knob + krng.normal(0, 1, 4)}.get(kind, hidden + z / 4)
        correct = [[bool(x) for x in rng.random(k) >= _sig(di)] for di in d]
        tokens = [[max(1, int(round(40 + 8 * di + rng.normal(0, 6)))) for _ in range(k)] for di in d]
        belief = rng.normal(0, 1.5, 4) if kind == "null" else by_knob if kind == "knob" else d
        dec = []
        for i, j in PAIRS:
            p = float(_sig(belief[i] - belief[j]))  # P(i is harder)
            dec += [_ab(0.95), _ab(0.95)] if kind == "letter" else [_ab(p), _ab(1 - p)]  # i at A, then j at A
        rank = [int(x) for x in np.argsort(belief, kind="stable")]  # easiest first
        grade = grade_difficulty(rank, correct, tokens, [[False] * k] * 4, dec)
        grade.update(question_length=[int(x) for x in length], qids=[f"g{gi}q{j}" for j in range(4)],
                     question_knobs=[[int(x) for x in kb] for kb in knobs],
                     rank_cut=False, answer_read_as=[["statement"] * k] * 4)
        rows.append(_record("seb-difficulty", grade))
    return pd.DataFrame(rows)


SUMMARY = {"association": (association_agent, summarize_seb_association),
           "restriction": (restriction_agent, summarize_seb_restriction),
           "difficulty": (difficulty_agent, summarize_seb_difficulty)}


def _read(task: str, kind: str, seed: int = 0) -> pd.DataFrame:
    make, summarize = SUMMARY[task]
    s = summarize(make(kind, seed=seed))
    assert s.metric.is_unique
    return s.set_index("metric")


@pytest.fixture
def few_resamples(monkeypatch):
    """Over seeds, the cluster bootstraps (``stats.items.cluster_boot``: Brier, ECE, the
    majority and surface baselines) run 10 resamples instead of 1000, so 40 seeds take seconds.
    The rows these tests read do not use them: an AUROC's interval is ``auroc_ci`` (analytic),
    a pair accuracy's is ``intervals.bootstrap_mean``."""
    assert items.cluster_boot.__defaults__ == (None, items.N_BOOT, 0)
    monkeypatch.setattr(items.cluster_boot, "__defaults__", (None, 10, 0))


SEEDS = 40
MAX_FALSE = 4  # of 40 intervals excluding chance: 10%; 5 or more would be p < 0.05 at a calibrated 5%


def _excludes(r: pd.Series, chance: float = 0.5) -> bool:
    return not r["lo"] <= chance <= r["hi"]


# ---------------------------------------------------------------- association
def test_association_agents_are_recovered():
    oracle, surface, null = (_read("association", k) for k in ("oracle", "surface", "null"))
    # the oracle: P(yes) ranks its own listings above chance, above the surface baseline, and
    # its decisions beat the majority class
    assert oracle.loc["logit_auroc", "lo"] > 0.5
    assert oracle.loc["logit_auroc", "lo"] > oracle.loc["surface_auroc", "hi"]
    assert oracle.loc["logit_accuracy", "lo"] > oracle.loc["logit_majority_baseline", "value"]
    # the surface agent: just as good a reading, but word length alone does as well
    assert surface.loc["logit_auroc", "lo"] > 0.5 and surface.loc["surface_auroc", "lo"] > 0.8
    assert surface.loc["surface_auroc", "lo"] <= surface.loc["logit_auroc", "value"] <= surface.loc["surface_auroc", "hi"]
    # the null: nothing to read
    assert not _excludes(null.loc["logit_auroc"])
    assert null.loc["logit_accuracy", "value"] < null.loc["logit_majority_baseline", "hi"]


def test_association_text_reading_of_an_agent_that_always_says_none():
    """The text reading's chance is the majority class, not 1/2: an agent that replies "none"
    to every option list (and knows nothing) scores 1 - base rate, above 1/2 whenever words
    are listed less than half the time; logit_majority_baseline beside it is what to read it
    against (002's accuracy, and a Rasch item of ``report.rasch.SK_SCORES``)."""
    df = association_agent("null")
    df["grade.said"] = [[False] * len(o) for o in df["grade.options"]]
    s = summarize_seb_association(df).set_index("metric")
    assert s.loc["text_positive_rate", "value"] == 0.0
    assert s.loc["text_accuracy", "value"] == pytest.approx(1 - s.loc["logit_base_rate", "value"])
    assert s.loc["text_accuracy", "value"] == pytest.approx(s.loc["logit_majority_baseline", "value"])
    assert s.loc["text_accuracy", "lo"] > 0.5


@pytest.mark.calibration
def test_association_null_over_seeds(few_resamples):
    false = sum(_excludes(_read("association", "null", seed).loc["logit_auroc"]) for seed in range(SEEDS))
    assert false <= MAX_FALSE  # measured: 2 of 40


# ---------------------------------------------------------------- restriction
def test_restriction_agents_are_recovered():
    oracle, surface, null = (_read("restriction", k) for k in ("oracle", "surface", "null"))
    for s in (oracle, surface, null):  # its own judge reads every response right: two classes
        assert "warning_judged_truth_one_class" not in s.index
    assert oracle.loc["logit_auroc", "lo"] > 0.5
    assert oracle.loc["logit_auroc", "lo"] > oracle.loc["surface_auroc", "hi"]
    assert oracle.loc["logit_accuracy", "lo"] > oracle.loc["logit_majority_baseline", "value"]
    assert oracle.loc["predict_modal_letter_rate", "value"] < 0.7
    assert oracle.loc["predict_order_consistency", "lo"] > 0.8  # its choice follows the option, not the letter
    assert oracle.loc["judge_order_consistency", "lo"] > 0.8
    # the surface agent answers safe (and long) requests and predicts as much
    assert surface.loc["logit_auroc", "lo"] > 0.5 and surface.loc["surface_auroc", "lo"] > 0.8
    assert surface.loc["surface_auroc", "lo"] <= surface.loc["logit_auroc", "value"] <= surface.loc["surface_auroc", "hi"]
    assert not _excludes(null.loc["logit_auroc"])


def test_restriction_letter_biased_agent():
    """"A" in both orders: the two readings cancel to P(answer) = 1/2 for every request, an
    AUROC of exactly 1/2; its accuracy (a tie reads "will answer") is the base rate, no more
    than the majority class, and the letter prior is flagged."""
    s = _read("restriction", "letter")
    assert s.loc["logit_auroc", "value"] == 0.5 and not _excludes(s.loc["logit_auroc"])
    assert s.loc["logit_accuracy", "value"] == pytest.approx(s.loc["logit_base_rate", "value"])
    assert s.loc["logit_accuracy", "value"] <= s.loc["logit_majority_baseline", "value"] + 1e-12
    assert s.loc["predict_modal_letter_rate", "value"] == 1.0
    assert s.loc["predict_order_consistency", "value"] == 0.0  # one letter in both orders: never follows the option


def test_beyond_the_surface_is_recovered(few_resamples):
    """``logit_beyond_surface``: the prediction's log-odds in a logit of the behaviour on the
    surface features, clustered by item. The oracle predicts exactly its own propensity (true
    coefficient 1, above 0); the null's covers 0; the surface agent's prediction is a function of
    the surface, so there is nothing to test beyond it and no row."""
    for task in ("association", "restriction"):
        oracle, surface, null = (_read(task, k) for k in ("oracle", "surface", "null"))
        b = oracle.loc["logit_beyond_surface"]
        assert b["lo"] > 0 and b["lo"] <= 1 <= b["hi"] and oracle.loc["logit_beyond_surface_p", "value"] < 0.05
        assert null.loc["logit_beyond_surface", "lo"] <= 0 <= null.loc["logit_beyond_surface", "hi"]
        assert "logit_beyond_surface" not in surface.index


@pytest.mark.calibration
@pytest.mark.parametrize("task", ["association", "restriction"])
def test_beyond_the_surface_interval_covers_over_seeds(few_resamples, task):
    """Coverage of the clustered logit's interval at two truths, 40 seeds each: the null's
    coefficient is 0, the oracle's 1 (measured 2026-12-06: association 38 and 38 of 40 cover,
    restriction 38 and 36)."""
    null = [_read(task, "null", seed).loc["logit_beyond_surface"] for seed in range(SEEDS)]
    oracle = [_read(task, "oracle", seed).loc["logit_beyond_surface"] for seed in range(SEEDS)]
    assert sum(not r["lo"] <= 0 <= r["hi"] for r in null) <= MAX_FALSE
    assert sum(not r["lo"] <= 1 <= r["hi"] for r in oracle) <= MAX_FALSE
    assert all(r["lo"] > 0 for r in oracle)  # and it finds the oracle every time


@pytest.mark.calibration
def test_restriction_null_over_seeds(few_resamples):
    false = sum(_excludes(_read("restriction", "null", seed).loc["logit_auroc"]) for seed in range(SEEDS))
    assert false <= MAX_FALSE  # measured: 3 of 40


# ---------------------------------------------------------------- difficulty
def test_difficulty_agents_are_recovered():
    oracle, surface, null, letter = (_read("difficulty", k) for k in ("oracle", "surface", "null", "letter"))
    acc = "logit_pair_accuracy"
    assert oracle.loc[acc, "lo"] > max(0.5, oracle.loc["majority_pair_baseline", "value"])
    assert oracle.loc["logit_pair_auroc", "lo"] > 0.5
    assert oracle.loc[acc, "lo"] > oracle.loc["surface_length_pair_accuracy", "hi"]
    beyond = "logit_pair_accuracy_beyond_length"  # paired by pair, t over question groups
    assert oracle.loc[beyond, "lo"] > 0 and oracle.loc[f"{beyond}_p", "value"] < 0.05
    assert not surface.loc[beyond, "lo"] > 0 and not null.loc[beyond, "lo"] > 0
    # the surface agent: harder means longer, and it says so; the length rule does as well
    assert surface.loc[acc, "lo"] > 0.5
    sl = surface.loc["surface_length_pair_accuracy"]
    assert sl["lo"] <= surface.loc[acc, "value"] <= sl["hi"]
    for s in (null, letter):
        assert not _excludes(s.loc[acc]) and not _excludes(s.loc["logit_pair_auroc"])
    # "A" in both orders: every pair at P(harder) = 1/2, and the letter prior is flagged
    assert letter.loc["logit_pair_auroc", "value"] == 0.5
    assert letter.loc["pair_modal_letter_rate", "value"] == 1.0 and letter.loc["position_bias_p_A", "lo"] > 0.9
    assert oracle.loc["pair_modal_letter_rate", "value"] < 0.7
    # order consistency, the two-option reading: "A" in both orders 0, the oracle follows the questions
    assert letter.loc["pair_order_consistency", "value"] == 0.0 and oracle.loc["pair_order_consistency", "lo"] > 0.8


def test_knob_matched_pairs_take_the_generators_knobs_away():
    """An agent that predicts from digits and terms alone reads well above chance over all pairs
    and at chance on the pairs the knobs call equal; the oracle stays above chance on them."""
    knob, oracle = _read("difficulty", "knob"), _read("difficulty", "oracle")
    matched = "logit_pair_accuracy_knob_matched"
    assert knob.loc["logit_pair_accuracy", "lo"] > 0.6
    assert knob.loc[matched, "lo"] <= 0.5 <= knob.loc[matched, "hi"]
    assert oracle.loc[matched, "lo"] > 0.5 and oracle.loc[matched, "n"] >= 20


@pytest.mark.calibration
def test_difficulty_agents_over_seeds(few_resamples):
    false = {"logit_pair_accuracy": 0, "logit_pair_auroc": 0}
    for seed in range(SEEDS):
        s = _read("difficulty", "null", seed)
        for m in false:
            false[m] += _excludes(s.loc[m])
    assert max(false.values()) <= MAX_FALSE  # measured: 1 and 1 of 40
    found = sum(_read("difficulty", "oracle", seed).loc["logit_pair_accuracy", "lo"] > 0.5 for seed in range(20))
    assert found == 20
    # beyond the length rule: never for the agents whose difficulty is length, either way
    false_beyond = sum(_read("difficulty", kind, seed).loc["logit_pair_accuracy_beyond_length", "lo"] > 0
                       for kind in ("surface", "shorter") for seed in range(SEEDS // 2))
    assert false_beyond <= MAX_FALSE


@pytest.mark.calibration
def test_knob_matched_pairs_over_seeds():
    """The knob-matched row over 40 seeds (its interval is a cluster bootstrap, so at its full
    1000 resamples): the knob agent (difficulty and prediction both from the knobs) and the null
    read chance on matched pairs, and their intervals cover 0.5 in all but a few; the oracle's
    lies above 0.5 in most of 10."""
    matched = "logit_pair_accuracy_knob_matched"
    false = {k: sum(_excludes(_read("difficulty", k, seed).loc[matched]) for seed in range(SEEDS))
             for k in ("knob", "null")}
    found = sum(_read("difficulty", "oracle", seed).loc[matched, "lo"] > 0.5 for seed in range(10))
    print(f"knob-matched pairs over {SEEDS} seeds: knob agent excludes 0.5 in {false['knob']}, "
          f"null in {false['null']}; oracle found in {found} of 10")
    assert max(false.values()) <= MAX_FALSE and found >= 8


def test_difficulty_length_baseline_catches_a_shorter_is_harder_agent():
    """The length baseline is fitted out of group, in either direction: a fixed "longer is
    harder" rule read 0.083 [0.050, 0.119] here beside the agent's 0.917, so a pure length
    heuristic looked far beyond its surface."""
    s = _read("difficulty", "shorter")
    if not s.loc["logit_pair_accuracy", "lo"] > 0.5:  # the agent is read as predicting itself
        raise RuntimeError("the planted length agent is no longer read above chance")
    assert s.loc["logit_pair_accuracy", "value"] <= s.loc["surface_length_pair_accuracy", "hi"]
    assert not s.loc["logit_pair_accuracy_beyond_length", "lo"] > 0


# ---------------------------------------------------------------- association: word frequency
def frequency_agent(n_targets: int = 40, n_options: int = 8, k: int = 5, seed: int = 0) -> pd.DataFrame:
    """An association agent that lists common English words and predicts exactly that: its
    behaviour and its prediction both follow word frequency, a surface, not self-knowledge."""
    wordfreq = pytest.importorskip("wordfreq")
    rng = np.random.default_rng(seed)
    pool = [w for w in wordfreq.top_n_list("en", 20000)[300:] if w.isascii() and w.isalpha() and 4 <= len(w) <= 9
            and not w.endswith("s")]  # no plurals: no option is another's form under ``word_forms``
    vocab = [str(w) for w in rng.choice(pool, n_targets * n_options, replace=False)]
    rows = []
    for t in range(n_targets):
        opts = vocab[t * n_options:(t + 1) * n_options]
        q = _sig([(wordfreq.zipf_frequency(w, "en") - 4.0) * 2.5 for w in opts])
        listed = rng.random((k, n_options)) < q
        lists = [[o for o, x in zip(opts, row) if x] + [f"filler{t}x{d}"] for d, row in enumerate(listed)]
        named = [o for o, x in zip(opts, q) if x >= 0.5]
        grade = grade_association(lists, [False] * k, opts, ", ".join(named) or "none",
                                  [Decision(("yes", "no"), (x, 1 - x), 0.9) for x in map(float, q)])
        grade["said_cut"] = False
        rows.append(_record("seb-association", grade, word=f"target{t}"))
    return pd.DataFrame(rows)


def test_association_surface_holds_word_frequency(monkeypatch, few_resamples):
    """With ``wordfreq`` the surface baseline reads word frequency, so an agent that lists and
    predicts common words is no better than its surface; with length alone the same agent looked
    far beyond it."""
    from introspect.tasks.selfknowledge import wordfeat

    df = frequency_agent()
    s = summarize_seb_association(df).set_index("metric")
    assert s.loc["surface_word_frequency", "value"] == 1.0
    assert s.loc["logit_auroc", "lo"] > 0.5 and s.loc["surface_auroc", "lo"] > 0.5
    assert not s.loc["logit_auroc", "lo"] > s.loc["surface_auroc", "hi"]  # not beyond its surface
    monkeypatch.setattr(wordfeat, "zipf", lambda: None)
    short = summarize_seb_association(df).set_index("metric")
    assert short.loc["surface_word_frequency", "value"] == 0.0
    assert short.loc["logit_auroc", "lo"] > short.loc["surface_auroc", "hi"]  # length alone misses it
