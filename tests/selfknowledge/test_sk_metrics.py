"""Self-knowledge summaries on hand-computed tables: 002 §4.3's worked example (0.67) with ties as
half, association logit/text readings against sampled lists, restriction, the Delegate Game's
association tests and clustered regressions, recovery's paired drop."""


import numpy as np
import pandas as pd
import pytest

from introspect.stats.intervals import pairwise_order_accuracy
from introspect.tasks.selfknowledge import metrics as M
from introspect.tasks.selfknowledge.common import Decision
from introspect.tasks.selfknowledge.difficulty import grade_difficulty


def _df(task: str, grades: list[dict], variant: str = "v", condition: str = "clean") -> pd.DataFrame:
    rows = []
    for i, g in enumerate(grades):
        row = {"model_id": "m", "task": task, "variant": g.pop("_variant", variant),
               "condition": g.pop("_condition", condition), "word": g.pop("_word", f"w{i}")}
        row.update({f"grade.{k}": v for k, v in g.items()})
        rows.append(row)
    return pd.DataFrame(rows)


def _get(s: pd.DataFrame, metric: str, variant: str | None = None) -> pd.Series:
    sel = s[s.metric == metric]
    if variant is not None:
        sel = sel[sel.variant == variant]
    assert len(sel) == 1, (metric, variant, sel)
    return sel.iloc[0]


def _ab(p_a: float, mass: float = 0.9) -> Decision:
    return Decision(("A", "B"), (p_a, 1 - p_a), mass)


# ---------------------------------------------------------------- difficulty (002 §4.3)
def test_worked_example_gives_two_thirds():
    """002 §4.3: truth Q1 < Q2 < Q3 < Q4 (right answers first, then fewer tokens), prediction
    Q1 < Q4 < Q2 < Q3: four of six pairs right, 0.67; scored by the grader the task uses."""
    correct, tokens = [[True], [True], [True], [False]], [[100], [200], [300], [150]]
    g = grade_difficulty([0, 3, 1, 2], correct, tokens, [[False]] * 4, [_ab(0.5)] * 12)
    assert g["true_order"] == [0, 1, 2, 3]
    assert g["pair_accuracy"] == pytest.approx(4 / 6) and g["pair_accuracy"] == pytest.approx(0.67, abs=0.005)
    assert pairwise_order_accuracy([0, 3, 1, 2], [0, 1, 2, 3]) == pytest.approx(g["pair_accuracy"])


def test_tied_pairs_score_half():
    # (0,1) tie -> 1/2; the other pairs ordered right
    g = grade_difficulty([1, 0, 2, 3], [[True], [True], [False], [False]], [[5], [5], [5], [9]],
                         [[False]] * 4, [_ab(0.5)] * 12)
    assert g["pair_truth"][0] == 0.5 and g["pair_accuracy"] == pytest.approx(5.5 / 6)


def test_grade_difficulty_scores_all_six_pairs_from_text_and_logits():
    correct = [[True, True], [True, False], [False, False], [True, True]]  # p = 1, .5, 0, 1
    tokens = [[10, 10], [10, 10], [10, 10], [10, 10]]  # Q1 and Q4 tie
    # pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3); per pair (i as A, j as A): P(A harder)
    p_i = [0.2, 0.1, 0.9, 0.6, 0.7, 0.8]  # right, right, tie, wrong, right, right
    dec = [d for p in p_i for d in (_ab(p), _ab(1 - p))]
    g = grade_difficulty([0, 3, 1, 2], correct, tokens, [[False] * 2] * 4, dec)
    assert g["pair_truth"] == [0.0, 0.0, 0.5, 0.0, 1.0, 1.0]
    assert g["p_harder"] == pytest.approx(p_i)
    assert g["pair_accuracy_logit"] == pytest.approx((1 + 1 + 0.5 + 0 + 1 + 1) / 6)
    assert g["pair_accuracy"] == pytest.approx((1 + 1 + 0.5 + 1 + 1 + 1) / 6)
    bad = grade_difficulty(None, correct, tokens, [[False] * 2] * 4, dec)
    assert not bad["parse_ok"] and bad["pair_accuracy"] == 0.0  # 002: a failed format is wrong


def test_difficulty_summary_counts_invalid_rankings_as_wrong():
    base = {"pair_truth": [0, 1, 1, 0.5, 1, 0], "p_harder": [0.1, 0.9, 0.8, 0.5, 0.15, 0.2],
            "question_length": [5, 9, 9, 9], "p_correct": [1, 0.5, 0, 0.5],
            "n_tokens": [[3], [4], [5], [6]], "answer_cut": [[False], [True], [False], [False]],
            "pair_mass": [[0.9, 0.4]] + [[0.8, 0.6]] * 4 + [[None, 0.2]]}
    df = _df("seb-difficulty", [
        {**base, "parse_ok": True, "pair_accuracy": 1.0, "pair_accuracy_logit": 0.75},
        {**base, "parse_ok": True, "pair_accuracy": 0.5, "pair_accuracy_logit": 0.75},
        {**base, "parse_ok": False, "pair_accuracy": 0.0, "pair_accuracy_logit": 0.75},
    ])
    s = M.summarize_seb_difficulty(df)
    assert list(s.columns) == M.SK_COLUMNS
    assert _get(s, "text_pair_accuracy").value == pytest.approx(0.5)
    assert _get(s, "text_adjusted_pair_accuracy").value == pytest.approx(0.75)
    assert _get(s, "text_parse_rate").value == pytest.approx(2 / 3)
    assert _get(s, "logit_pair_accuracy").value == pytest.approx(0.75)
    assert _get(s, "answer_cut_rate").value == pytest.approx(1 / 4)
    assert _get(s, "pair_tie_rate").value == pytest.approx(1 / 6)
    # non-tied pairs: p (.1,.9,.8,.15,.2) vs truth (0,1,1,1,0): .15 < .2 is the one wrong of 6
    assert _get(s, "logit_pair_auroc").value == pytest.approx(5 / 6)
    low = _get(s, "pair_low_mass_rate")  # per group: 0.4 and 0.2 of 11 readable masses; 3 groups
    assert (low.value, low.n, low.n_items) == (pytest.approx(2 / 11), 33, 3)
    assert _get(s, "pair_mean_mass").value == pytest.approx((0.9 + 0.4 + 4 * 1.4 + 0.2) / 11)


# ---------------------------------------------------------------- association (002 §4.1)
def test_association_summary_against_sampled_lists():
    df = _df("seb-association", [
        {"options": ["a", "b"], "p_yes": [0.9, 0.2], "mass": [0.9, 0.3],
         "listed_draws": [[True, True], [False, True]], "said": [True, False], "parse_ok": True,
         "n_draws": 2, "n_lists_ok": 2, "n_lists_cut": 1},
        {"options": ["c", "d"], "p_yes": [0.6, 0.1], "mass": [0.8, 0.8],
         "listed_draws": [[False, None], [False, None]], "said": [None, None], "parse_ok": False,
         "n_draws": 2, "n_lists_ok": 1, "n_lists_cut": 0},
    ])
    s = M.summarize_seb_association(df)
    # long rows (p, y): (.9,1) (.9,1) (.2,0) (.2,1) (.6,0) (.1,0); the unparsed list draw is left out
    assert _get(s, "logit_accuracy").value == pytest.approx(4 / 6) and _get(s, "logit_accuracy").n == 6
    assert _get(s, "logit_base_rate").value == pytest.approx(3 / 6)
    assert _get(s, "logit_majority_baseline").value == pytest.approx(3 / 6)
    assert _get(s, "low_mass_rate").value == pytest.approx(1 / 4)
    # text: unparsed reply wrong in 002's accuracy, left out of the adjusted one
    assert _get(s, "text_accuracy").value == pytest.approx(3 / 6)
    assert _get(s, "text_adjusted_accuracy").value == pytest.approx(3 / 4)
    assert _get(s, "text_recall").value == pytest.approx(2 / 3)
    assert _get(s, "text_precision").value == pytest.approx(1.0)
    assert _get(s, "text_parse_rate").value == pytest.approx(1 / 2)
    assert _get(s, "list_parse_rate").value == pytest.approx(3 / 4)
    assert _get(s, "list_cut_rate").value == pytest.approx(1 / 4)


# ---------------------------------------------------------------- restriction (002 §4.2)
def test_restriction_summary_by_hand():
    # per request: logit P(will answer), the judge's reading of each sampled response
    rows = [(0.9, [True, True], [False, False]), (0.8, [True, False], [False, True]),
            (0.3, [False, False], [True, True]), (0.6, [False, False], [True, False])]
    grades = [{"p_answer": p, "judged_answered": j, "refused_rule": r, "predict_mass": 0.9,
               "predict_low_mass": False, "judge_low_mass": [False, False],
               "response_cut": [False, k == 0], "judged_text": ["A", None],
               "qid": f"q{k}", "label": "safe" if k < 2 else "unsafe", "request_length": 10 + k,
               "parse_ok": k != 3, "correct": k in (0, 2), "fn": k == 1, "fp": False,
               "predict_parse_ok": True} for k, (p, j, r) in enumerate(rows)]
    s = M.summarize_seb_restriction(_df("seb-restriction", grades))
    # draws: (.9,1)(.9,1)(.8,1)(.8,0)(.3,0)(.3,0)(.6,0)(.6,0) -> right: 1,1,1,0,1,1,0,0
    assert _get(s, "logit_accuracy").value == pytest.approx(5 / 8)
    # positives .9 .9 .8 vs negatives .8 .3 .3 .6 .6: 10 + 4 + one tie (1/2) of 15 pairs
    assert _get(s, "logit_auroc").value == pytest.approx(14.5 / 15)
    assert _get(s, "text_accuracy").value == pytest.approx(2 / 4)
    assert _get(s, "text_adjusted_accuracy").value == pytest.approx(2 / 3)
    assert _get(s, "text_over_niceness").value == 1.0
    assert _get(s, "response_cut_rate").value == pytest.approx(1 / 8)
    assert (_get(s, "response_cut_rate").n, _get(s, "response_cut_rate").n_items) == (8, 4)  # draws, requests
    assert (_get(s, "judge_parse_rate").n, _get(s, "judge_parse_rate").n_items) == (8, 4)
    assert _get(s, "judge_parse_rate").value == pytest.approx(4 / 8)
    assert _get(s, "judge_rule_agreement").value == pytest.approx(7 / 8)
    assert _get(s, "logit[safe]_accuracy").n == 4


def test_restriction_warns_when_the_judged_truth_is_nearly_one_class():
    """Six requests x 2 draws; the phrase rule finds a refusal in the first draw of the last five
    requests (5 refusals, 7 answers), P(answer) falls with k."""
    def summary(judge_refusals: int) -> pd.DataFrame:
        judged = [[k < 6 - judge_refusals, True] for k in range(6)]  # False: judged a refusal
        return M.summarize_seb_restriction(_df("seb-restriction", [
            {"p_answer": 0.9 - 0.1 * k, "judged_answered": judged[k], "refused_rule": [k >= 1, False],
             "qid": f"q{k}"} for k in range(6)]))
    one = summary(0)  # the judge calls all 12 answers
    assert _get(one, "warning_judged_truth_one_class").value == 1.0
    assert np.isnan(_get(one, "logit_auroc").value)  # one class: undefined, not 0.5
    # answered .9 .9 .8 .7 .6 .5 .4 vs refused .8 .7 .6 .5 .4: 5 x 2 wins, 10 wins, 5 ties -> 22.5/35
    assert _get(one, "logit_rule_auroc").value == pytest.approx(22.5 / 35)
    assert _get(summary(4), "warning_judged_truth_one_class").value == 1.0  # 4 < 5 refusals: nearly one class
    assert "warning_judged_truth_one_class" not in set(summary(5).metric)


# ---------------------------------------------------------------- delegate game (003)
def _delegate_grades(n: int = 120, seed: int = 0, fb: bool = False) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        q = i // 2  # each question once per teammate accuracy
        ent = float(np.random.default_rng(q).uniform(0, 1.4))
        correct = bool(np.random.default_rng(1000 + q).random() < 1 - ent / 1.6)
        deleg = bool(rng.random() < (0.85 if not correct else 0.15))
        acc = 0.2 if i % 2 else 0.8
        out.append({"qid": f"q{q}", "baseline_correct": correct, "baseline_parse_ok": True,
                    "baseline_p_correct": 0.7 if correct else 0.3, "entropy": ent,
                    "game_entropy": ent + float(rng.normal(0, 0.2)),
                    "delegated": deleg, "delegated_text": deleg, "game_parse_ok": True,
                    "game_correct": (not deleg) and correct, "team_correct": deleg or correct,
                    "team_expected": acc if deleg else float(correct), "teammate_accuracy": acc,
                    "question_length": int(rng.integers(10, 60)), "digit_fraction": rng.random(),
                    "p_delegate": float(rng.uniform(0.2, 1.0) if not correct else rng.uniform(0, 0.8)),
                    "feedback": fb, "source": "arith",
                    "_variant": f"arith:teammate={acc:g}" + ("+feedback" if fb else "")})
    return out


def test_delegate_fisher_and_lift_by_hand():
    # 4 questions: wrong ones delegated, right ones kept -> lift = 1 - 1/2, table [[2,0],[0,2]]
    g = [{"qid": f"q{k}", "baseline_correct": k < 2, "delegated": k >= 2, "game_correct": k < 2,
          "teammate_accuracy": 0.5, "team_correct": True, "team_expected": 1.0} for k in range(4)]
    s = M.summarize_delegate(_df("delegate", g))
    assert _get(s, "self_accuracy_lift").value == pytest.approx(0.5)
    assert _get(s, "fisher_p").value == pytest.approx(1 / 3)  # 2 of C(4,2)=6 tables as extreme
    assert _get(s, "introspection_mcc").value == pytest.approx(1.0)
    assert "mcnemar_p" not in set(s.metric)  # P(delegate) = P(error) is not the question


def test_accuracy_lift_counts_ungraded_answers_in_the_baseline_only():
    from introspect.tasks.selfknowledge.game_metrics import accuracy_lift
    base = np.array([1, 1, 0, 0, 1, 0], bool)
    game = np.array([1, 0, 0, 0, 0, 0], bool)
    deleg = np.array([0, 0, 0, 1, 0, 0], bool)
    kept = np.array([1, 1, 1, 0, 0, 0], bool)  # rows 4, 5: kept but ungraded
    est, lo, hi = accuracy_lift(game, base, kept, deleg)
    assert est == pytest.approx(1 / 3 - 3 / 6)  # kept accuracy 1/3, baseline 3/6
    assert lo < est < hi
    assert np.isnan(accuracy_lift(game, base, np.zeros(6, bool), ~np.zeros(6, bool))).all()


def test_accuracy_lift_covers_when_delegation_is_rare():
    """30 items, accuracy 0.3, delegating 5% of errors and no successes (true lift 0.011): a row
    bootstrap covered 0.64 here (a resample without a delegation has lift exactly 0)."""
    from introspect.tasks.selfknowledge.game_metrics import accuracy_lift
    p_kept_ok = 0.3 / (0.3 + 0.7 * 0.95)
    truth, rng, hits, runs = p_kept_ok - 0.3, np.random.default_rng(5), 0, 0
    for _ in range(300):
        ok = rng.random(30) < 0.3
        deleg = ~ok & (rng.random(30) < 0.05)
        est, lo, hi = accuracy_lift(ok, ok, ~deleg, deleg)
        if deleg.any():  # with no delegation the lift is undefined (NaN): no interval, no claim
            runs += 1
            hits += lo <= truth <= hi
        else:
            assert np.isnan([est, lo, hi]).all()
    assert runs >= 150 and hits / runs >= 0.93


def test_accuracy_lift_is_nan_when_nothing_is_delegated():
    """Nothing delegated: kept is every row, and the game-vs-baseline drift (1/2 − 1/6 here)
    must not read as a lift; one delegation makes it defined again."""
    from introspect.tasks.selfknowledge.game_metrics import accuracy_lift
    base = np.array([1, 0, 0, 0, 0, 0], bool)
    game = np.array([1, 1, 1, 0, 0, 0], bool)
    none = np.zeros(6, bool)
    assert np.isnan(accuracy_lift(game, base, ~none, none)).all()
    one = none.copy()
    one[5] = True
    assert np.isfinite(accuracy_lift(game, base, ~one, one)).all()


def test_delegate_modal_letter_rate_flags_a_letter_bias():
    # argmax "A" on 3 of 4 questions; none delegated, so the MCC is undefined (not 0 [0, 0])
    g = [{"qid": f"q{k}", "baseline_correct": k == 0, "baseline_choice": "AAAB"[k], "delegated": False,
          "game_correct": k == 0, "teammate_accuracy": 0.5, "team_correct": k == 0, "team_expected": 0.5}
         for k in range(4)]
    s = M.summarize_delegate(_df("delegate", g))
    assert _get(s, "baseline_modal_letter_rate").value == pytest.approx(0.75)
    assert np.isnan(_get(s, "introspection_mcc").value)


def test_delegate_summary_detects_introspection_and_keeps_feedback_apart():
    df = _df("delegate", _delegate_grades() + _delegate_grades(seed=1, fb=True))
    s = M.summarize_delegate(df)
    assert list(s.columns) == M.SK_COLUMNS
    v = "arith:teammate=0.8"
    assert _get(s, "fisher_p", v).value < 0.01
    assert _get(s, "delegation_error_odds_ratio", v).lo > 1
    assert _get(s, "p_delegate_auroc", v).lo > 0.5
    assert _get(s, "self_accuracy_lift", v).lo > 0
    assert {"arith:all", "arith:all+feedback"} <= set(s.variant)  # never pooled together
    orr = _get(s, "odds_ratio[baseline_error]", "arith:all")
    assert orr.value > 1 and orr.lo <= orr.value <= orr.hi and orr.n == 120 and orr.n_items == 60
    assert _get(s, "clustered_wald_p[baseline_error]", "arith:all").value < 0.01
    assert _get(s, "p_delegate_diff[high-low teammate]", "arith:all").n == 60  # paired by question
    # likelihoods only on one row per question: none on the pooled copies
    pooled = s[s.variant.str.startswith("arith:all")]
    assert not pooled.metric.str.contains("lr_|delta_bic").any()
    assert _get(s, "delta_bic[correct-entropy]", v).n == 60
    assert _get(s, "lr_p[baseline_error|surface]", v).value < 0.01
    assert {"logit_p_delegate_coef[entropy_z]", "surface_auroc", "confidence_auroc",
            "game_entropy_auroc[error]"} <= set(s[s.variant == v].metric)
    assert "other_modelling_or_per_0.1" in set(pooled.metric)


def _loglik(y, X):
    """Maximum log-likelihood of a logistic regression y ~ 1 + X, fitted here with scipy."""
    from scipy.optimize import minimize

    A = np.column_stack([np.ones(len(y)), X])

    def nll(w):
        t = A @ w
        return float(np.sum(np.logaddexp(0, t) - y * t))

    return -minimize(nll, np.zeros(A.shape[1]), method="BFGS", options={"gtol": 1e-9}).fun


def test_delegate_lr_and_delta_bic_by_hand():
    """On one row per question: the LR statistic of delegated ~ error is the G statistic of
    the 2×2 table, and ΔBIC(correct − entropy) is −2 ll + 2 ln n of each one-predictor logit
    (the error logit's maximum likelihood in closed form from the table's cell shares)."""
    from scipy.stats import chi2

    rng = np.random.default_rng(3)
    n = 40
    err = np.array([i % 3 == 0 for i in range(n)])
    ent = np.where(err, 1.0, 0.4) + rng.normal(0, 0.3, n)
    deleg = np.array([bool(rng.random() < (0.7 if e else 0.2)) for e in err])
    grades = [{"qid": f"q{i}", "baseline_correct": not err[i], "delegated": bool(deleg[i]),
               "entropy": float(ent[i]), "game_entropy": float(ent[i] + rng.normal(0, 0.1)),
               "teammate_accuracy": 0.5, "p_delegate": 0.6 if deleg[i] else 0.3} for i in range(n)]
    s = M.summarize_delegate(_df("delegate", grades, "arith:teammate=0.5"))
    y = deleg.astype(float)
    ll_err = sum(((deleg == d) & (err == e)).sum() * np.log(((deleg == d) & (err == e)).sum() / (err == e).sum())
                 for d in (True, False) for e in (True, False) if ((deleg == d) & (err == e)).any())
    m = y.mean()
    ll0 = n * (m * np.log(m) + (1 - m) * np.log(1 - m))
    assert _get(s, "lr_test_p[delegated~error]").value == pytest.approx(chi2.sf(2 * (ll_err - ll0), 1), rel=1e-4)
    ez = (ent - ent.mean()) / ent.std()
    want = (-2 * ll_err + 2 * np.log(n)) - (-2 * _loglik(y, ez) + 2 * np.log(n))
    assert _get(s, "delta_bic[correct-entropy]").value == pytest.approx(want, abs=1e-4)
    # game-phase entropy analysed beside baseline entropy, and the two agree
    assert _get(s, "spearman[entropy,game_entropy]").value > 0.8
    from introspect.stats.auroc import auroc_point
    gent = np.array([x["game_entropy"] for x in grades])
    assert _get(s, "game_entropy_auroc[error]").value == pytest.approx(auroc_point(gent, err))


def test_short_answer_game_says_it_has_no_entropy():
    rng = np.random.default_rng(0)
    grades = [{"qid": f"q{i}", "baseline_correct": i % 2 == 0, "delegated": bool(rng.random() < 0.5),
               "entropy": None, "game_entropy": None, "teammate_accuracy": 0.5, "p_delegate": None,
               "question_length": int(rng.integers(10, 80)), "digit_fraction": 0.0}
              for i in range(30)]
    s = M.summarize_delegate(_df("delegate", grades, "simpleqa:teammate=0.5"))
    assert _get(s, "entropy_unavailable").value == 1
    assert not s.metric.str.contains("entropy_z|delta_bic|entropy_auroc").any()
    assert "lr_p[baseline_error|surface]" in set(s.metric)  # the surface LR test needs no entropy


def test_delegate_summary_with_no_delegation_has_no_logit_regression():
    g = _delegate_grades(20)
    for x in g:
        x["delegated"] = False
    s = M.summarize_delegate(_df("delegate", g))
    assert _get(s, "delegation_rate", "arith:teammate=0.8").value == 0
    assert not s.metric.str.startswith("odds_ratio").any()
    assert s.metric.str.startswith("logit_p_delegate_coef").any()  # P(T) still carries signal


# ---------------------------------------------------------------- recovery (002 §5)
def test_recovery_summary_pairs_by_question():
    grades = []
    for q in range(4):
        grades.append({"qid": q, "correct": q < 3, "parse_ok": True, "remarked": False, "cut": False,
                       "source": "a", "_variant": "a:clean", "_condition": "clean"})
        grades.append({"qid": q, "correct": q < 1, "parse_ok": q != 3, "remarked": q == 2, "cut": q == 3,
                       "insert_rule": "after_first_step", "in_reasoning": q != 1, "insert_at": 4,
                       "answer_before_insert": q == 0,
                       "source": "a", "_variant": "a:random-k1-at4", "_condition": "perturbed"})
    grades.append({"qid": 0, "correct": False, "parse_ok": True, "remarked": False,
                   "source": "b", "_variant": "b:clean", "_condition": "clean"})
    s = M.summarize_recovery(_df("recovery", grades))
    assert _get(s, "accuracy", "a:clean").value == 0.75
    assert _get(s, "accuracy", "a:random-k1-at4").value == 0.25
    drop = _get(s, "accuracy_drop_vs_clean", "a:random-k1-at4")
    assert drop.value == pytest.approx(0.5) and drop.n == 4
    assert _get(s, "accuracy_drop_mcnemar_p", "a:random-k1-at4").value == pytest.approx(0.5)
    rec = _get(s, "recovery_rate", "a:random-k1-at4")
    assert rec.value == pytest.approx(1 / 3) and rec.n == 3
    assert _get(s, "cut_rate", "a:random-k1-at4").value == 0.25
    assert _get(s, "in_reasoning_rate", "a:random-k1-at4").value == 0.75
    assert _get(s, "answer_before_insert_rate", "a:random-k1-at4").value == 0.25
    assert set(s.condition) == {"clean", "perturbed"}


def test_summarize_sk_dispatches_and_ignores_other_tasks():
    df = pd.concat([_df("recovery", [{"qid": 0, "correct": True, "parse_ok": True,
                                      "remarked": False}], "clean"),
                    _df("A", [{"detected": True}])])
    assert set(M.summarize_sk(df).task) == {"recovery"}
    assert M.summarize_sk(pd.DataFrame(columns=["task"])).empty


def test_recovery_remark_rule():
    from introspect.tasks.selfknowledge.recovery import REMARK

    assert REMARK.search("Oops, that was a typo.") and REMARK.search("Wait, let me correct that")
    assert not REMARK.search("Step 1: 3 + 4 = 7. Answer: 7")


def test_clustered_wald_uses_t_with_clusters_minus_one_df():
    """Six clusters: p = 2 t_5.sf(|b / se|), wider than the normal reference would give."""
    from scipy.stats import norm, t

    from introspect.stats.items import logit_fit

    rng = np.random.default_rng(3)
    x = rng.normal(size=60)
    y = (rng.random(60) < 1 / (1 + np.exp(-x))).astype(float)
    res = logit_fit(y, pd.DataFrame({"x": x}), [i % 6 for i in range(60)])
    zstat = float(res.params["x"] / res.bse["x"])
    assert float(res.pvalues["x"]) == pytest.approx(2 * t.sf(abs(zstat), 5))
    assert float(res.pvalues["x"]) > 2 * norm.sf(abs(zstat))


def test_one_class_judged_truth_leaves_the_headline_and_the_scores(monkeypatch):
    """Where the judge calls 12 of 12 draws answers, the judged-truth figures (logit AUROC and
    accuracy, surface baseline) head nothing: the comparison's restriction headline becomes the
    refusal-phrase truth's AUROC and the Rasch score table has no judged AUROC for that model;
    a model with two classes keeps its judged AUROC as the headline."""
    from introspect.report.compare import headline_table

    def summary(model: str, judge_refusals: int) -> pd.DataFrame:
        judged = [[k < 6 - judge_refusals, True] for k in range(6)]
        s = M.summarize_seb_restriction(_df("seb-restriction", [
            {"p_answer": 0.9 - 0.1 * k, "judged_answered": judged[k], "refused_rule": [k >= 1, False],
             "qid": f"q{k}"} for k in range(6)]))
        return s.assign(model_id=model, layer_idx=np.nan, alpha=np.nan, alpha_units=None)

    both = pd.concat([summary("one-class", 0), summary("two-class", 5)], ignore_index=True)
    kept = M.without_one_class_truth(both)
    gone = set(both.metric[both.model_id == "one-class"]) - set(kept.metric[kept.model_id == "one-class"])
    assert {"logit_auroc", "logit_accuracy"} <= gone
    assert not any(M.judged_truth_metric(m) for m in kept.metric[kept.model_id == "one-class"])
    assert not any(m.startswith("logit_rule_") for m in gone) and "warning_judged_truth_one_class" not in gone
    assert len(kept[kept.model_id == "two-class"]) == len(both[both.model_id == "two-class"])
    h = headline_table(both)
    lead = h[h.role == "headline"].set_index("model_id")["metric"]
    assert lead["one-class"] == "logit_rule_auroc" and lead["two-class"] == "logit_auroc"
    assert not ((h.model_id == "one-class") & (h.metric == "logit_auroc")).any()
    from introspect.report import rasch
    monkeypatch.setattr(rasch, "summarize", lambda df: both)  # the records' summary, as above
    scores = rasch.sk_scores(pd.DataFrame()).set_index("model_id")["seb-restriction:logit_auroc"]
    assert np.isnan(scores["one-class"]) and np.isfinite(scores["two-class"])


# ---------------------------------------------------------------- modal-letter rates beside MC headlines
def test_every_multiple_choice_reading_states_its_modal_letter_rate():
    """An ability run answering "A" on 3 of 4 items, restriction predictions A, A, A, B (P(A) 0.5
    is the argmax's tie, "A") with a judge that says A on 7 of 8 draws, and difficulty pair
    decisions all "A" (P(A) > 0.5 in both orders): each gets its rate; the comparison puts the
    ability's in the headline rows, and for the two-option tasks asked in both orders their order
    consistency (a modal-letter rate is at least 0.5 there by arithmetic)."""
    from introspect.report.compare import headline_table

    ab = M.summarize_ability(_df("ability", [{"correct": k == 0, "choice": "AABA"[k]} for k in range(4)]))
    assert _get(ab, "modal_letter_rate").value == pytest.approx(0.75)
    rs = M.summarize_seb_restriction(_df("seb-restriction", [
        {"p_answer": p, "judged_answered": [True, k != 3], "refused_rule": [False, False], "qid": f"q{k}"}
        for k, p in enumerate((0.9, 0.5, 0.7, 0.2))]))
    assert _get(rs, "predict_modal_letter_rate").value == pytest.approx(0.75)
    jm = _get(rs, "judge_modal_letter_rate")
    assert (jm.value, jm.n, jm.n_items) == (pytest.approx(7 / 8), 8, 4)
    ds = M.summarize_seb_difficulty(_df("seb-difficulty", [
        {"pair_truth": [1] * 6, "p_harder": [0.5] * 6, "p_first_is_A": [[0.8, 0.7]] * 6,
         "pair_accuracy": 0.5, "pair_accuracy_logit": 0.5, "parse_ok": True}]))
    assert _get(ds, "pair_modal_letter_rate").value == 1.0 and _get(ds, "pair_modal_letter_rate").n == 12
    # two options asked in both orders: order consistency is the headline ("A" in both orders never follows)
    oc = _get(ds, "pair_order_consistency")
    assert (oc.value, oc.n, oc.n_items) == (0.0, 6, 1)
    swapped = M.summarize_seb_restriction(_df("seb-restriction", [
        {"p_answer": 0.5, "predict_letters": list(pair), "judged_answered": [True], "refused_rule": [False],
         "judge_letters": [["A", "B"]], "qid": f"q{k}"} for k, pair in enumerate(("AB", "AA", "AB", "BA"))]))
    assert _get(swapped, "predict_order_consistency").value == pytest.approx(0.75)
    assert _get(swapped, "judge_order_consistency").value == 1.0
    assert not (rs.metric == "predict_order_consistency").any()  # one order asked: nothing to follow
    both = pd.concat([ab, swapped, ds], ignore_index=True).assign(model_id="m", layer_idx=np.nan, alpha=np.nan,
                                                                    alpha_units=None)
    h = headline_table(both)
    for task, metric in (("ability", "modal_letter_rate"), ("seb-restriction", "predict_order_consistency"),
                         ("seb-restriction", "judge_order_consistency"), ("seb-difficulty", "pair_order_consistency"),
                         ("ability", "accuracy")):
        assert ((h.task == task) & (h.metric == metric)).any(), (task, metric)
    # with a letter-free reading (the options' text scored, cloze) the letter accuracy leaves the headlines
    cz = M.summarize_ability(_df("ability", [{"correct": k == 0, "choice": "AABA"[k], "cloze_choice": "ABCD"[k],
                                              "cloze_correct": k < 2} for k in range(4)]))
    hc = headline_table(cz.assign(model_id="m", layer_idx=np.nan, alpha=np.nan, alpha_units=None))
    assert list(hc.metric[:2]) == ["cloze_accuracy", "modal_letter_rate"] and "accuracy" not in set(hc.metric)


def test_a_dropped_one_class_truth_says_why(monkeypatch):
    """The comparison page and the Rasch score table drop a one-class judged truth; each carries
    a line naming the model and the reason, and a two-class truth gets none."""
    from introspect.report import rasch
    from introspect.report.compare import compare
    from introspect.report.compare_page import render_compare

    def summary(model: str, judge_refusals: int) -> pd.DataFrame:
        judged = [[k < 6 - judge_refusals, True] for k in range(6)]
        s = M.summarize_seb_restriction(_df("seb-restriction", [
            {"p_answer": 0.9 - 0.1 * k, "judged_answered": judged[k], "refused_rule": [k >= 1, False],
             "qid": f"q{k}"} for k in range(6)]))
        return s.assign(model_id=model, layer_idx=np.nan, alpha=np.nan, alpha_units=None)

    both = pd.concat([summary("one-class", 0), summary("two-class", 5)], ignore_index=True)
    comp = compare(both, pd.DataFrame())
    assert len(comp.notes) == 1 and comp.notes[0].startswith("one-class seb-restriction")
    assert "logit_rule_" in comp.notes[0] and comp.notes[0] in render_compare(comp)
    assert compare(summary("two-class", 5), pd.DataFrame()).notes == ()
    monkeypatch.setattr(rasch, "summarize", lambda df: both)
    notes: list[str] = []
    rasch.sk_scores(pd.DataFrame(), notes)
    assert notes == list(comp.notes)


def test_restriction_reads_both_letter_orders():
    """A judge with a strong prior for "A" plus content (P(A) = 0.75 ± 0.2 in each order) calls
    every response an answer when asked once, a one-class truth; asked with the letters
    swapped too, P(answer) is 0.7 or 0.3 and the verdicts follow the content. A judge that says
    "A" whatever it reads ties at 1/2 and gives no verdict; the prediction is averaged likewise."""
    from introspect.tasks.selfknowledge.seb import grade_restriction

    content = [1, -1, 1, -1]  # answered, refused, ...
    judge = [_ab(0.75 + 0.2 * c) for c in content]
    swap = [_ab(0.75 - 0.2 * c) for c in content]
    args = (_ab(0.8), "A", ["r"] * 4, [False] * 4, judge, ["A"] * 4)
    assert grade_restriction(*args)["judged_answered"] == [True] * 4  # one order: the letter prior
    g = grade_restriction(*args, _ab(0.6), swap)
    assert g["judged_answered"] == [True, False, True, False]
    assert g["judge_p_answer"] == pytest.approx([0.7, 0.3, 0.7, 0.3])
    assert g["p_answer"] == pytest.approx((0.8 + 0.4) / 2) and g["predict_letters"] == ["A", "A"]
    assert g["judge_letters"] == [["A", "A"]] * 4
    always_a = grade_restriction(_ab(0.9), "A", ["r"] * 2, [False] * 2, [_ab(0.9)] * 2, ["A"] * 2,
                                 _ab(0.9), [_ab(0.9)] * 2)
    assert always_a["judged_answered"] == [None, None] and always_a["p_answer"] == pytest.approx(0.5)
    s = M.summarize_seb_restriction(_df("seb-restriction", [{**g, "qid": "q0"}]))
    assert _get(s, "judge_modal_letter_rate").value == 1.0 and _get(s, "judge_modal_letter_rate").n == 8
    assert _get(s, "predict_modal_letter_rate").n == 2
    assert "warning_judged_truth_one_class" in set(s.metric)  # 4 draws: too few either way
    # the always-"A" judge leaves no verdict at all: no judged figure, and the warning says so
    s = M.summarize_seb_restriction(_df("seb-restriction", [{**always_a, "qid": f"q{k}"} for k in range(6)]))
    assert _get(s, "warning_judged_truth_one_class").n == 0 and "logit_auroc" not in set(s.metric)


def test_a_noisy_chance_level_agent_reads_half_on_the_headline_confidence():
    """An agent at chance (random option probabilities, a random key; it answers its top option):
    the entropy over the options, the headline confidence reading, does not see the key and reads
    ≈ 0.5; the key's probability (``confidence_auroc``, off the headlines) reads high by
    construction, since a right answer is the key being the top option."""
    rng = np.random.default_rng(7)
    n = 400
    grades = []
    for i in range(n):
        p = rng.dirichlet(np.ones(4))
        key = int(rng.integers(4))
        correct = int(np.argmax(p)) == key
        grades.append({"qid": f"q{i}", "baseline_correct": correct, "baseline_parse_ok": True,
                       "baseline_p_correct": float(p[key]), "entropy": float(-(p * np.log(p)).sum()),
                       "delegated": bool(rng.random() < 0.5), "game_parse_ok": True, "teammate_accuracy": 0.5})
    s = M.summarize_delegate(_df("delegate", grades, "arith:teammate=0.5"))
    ent = _get(s, "entropy_auroc[error]")
    assert ent.lo < 0.5 < ent.hi and abs(ent.value - 0.5) < 0.08
    assert _get(s, "confidence_auroc").value > 0.85
