"""Ground truths that say what they are: SimpleQA graded by exact match, else a judge consensus,
else excluded and counted; the difficulty truth from parsed, uncut draws only; K ≥ 5 draws by
default and a warning row when K = 1; surface baselines scored against the same per-draw targets
as the model; ``n`` (draws) beside ``n_items`` (items)."""

import numpy as np
import pandas as pd
import pytest

import introspect as I
from introspect.report.load import flatten_trial
from introspect.tasks.judge import JudgeVerdict
from introspect.tasks.selfknowledge import delegate
from introspect.tasks.selfknowledge import metrics as M
from introspect.tasks.selfknowledge.common import n_draws
from introspect.tasks.selfknowledge.difficulty import (
    answer_correct,
    answer_reading,
    grade_difficulty,
)
from introspect.tasks.selfknowledge.shortanswer import consensus, exact_match, grade_short


class FakeJudge:
    """Says YES when the reference answer's first word is in the reply (or always ``fixed``)."""

    def __init__(self, fixed: str | None = "rule"):
        self.fixed, self.calls = fixed, 0

    def judge_many(self, items):
        self.calls += 1
        out = []
        for _, answer, crit in items:
            ref = crit.split("'")[1].split()[0].lower()
            label = ("YES" if ref in answer.lower() else "NO") if self.fixed == "rule" else self.fixed
            out.append(JudgeVerdict(label, label or "??", "fake"))
        return out


def test_short_answers_exact_then_judge_consensus_then_excluded():
    assert exact_match("The Eiffel Tower.", "Eiffel Tower") and exact_match(" paris\nmore", "Paris")
    assert not exact_match("It was Jane Doe.", "Jane Doe") and not exact_match("Paris or Lyon", "Paris")
    items = [("q", "Paris.", "Paris"), ("q", "It was Jane Doe.", "Jane Doe"), ("q", "Lyon", "Paris")]
    alone = grade_short(items)  # no judge: only the exact match counts; the rest are excluded
    assert [(g.correct, g.method) for g in alone] == [(True, "exact"), (None, "excluded"), (None, "excluded")]
    j1, j2 = FakeJudge(), FakeJudge()
    two = grade_short(items, [j1, j2])
    assert [(g.correct, g.method) for g in two] == [(True, "exact"), (True, "judge"), (False, "judge")]
    assert j1.calls == 1 and j2.calls == 1  # one batch per judge
    split = grade_short(items, [FakeJudge(), FakeJudge("NO")])  # judges disagree on item 2
    assert [(g.correct, g.method) for g in split] == [(True, "exact"), (None, "excluded"), (False, "judge")]
    assert consensus(["YES", None]) is None and consensus([]) is None and consensus(["NO", "NO"]) is False


def test_simpleqa_game_counts_excluded_answers(tiny_model, tiny_dir, tmp_path, monkeypatch):
    """A SimpleQA file end to end: without a judge every inexact reply is excluded and counted,
    and an excluded question never enters the game as an error (stratified or not); with a judge
    (here the tiny model, loaded by path) every reply has a method. A random model never answers
    exactly, so even-numbered references count as exact matches here."""
    from introspect.tasks.selfknowledge import shortanswer

    monkeypatch.setattr(shortanswer, "exact_match", lambda r, a: int(a.split()[-1]) % 2 == 0)
    p = tmp_path / "simple_qa.csv"
    rows = [f'"{{\'topic\': \'t{i % 3}\', \'answer_type\': \'Person\'}}",Who is person {i}?,Person {i}'
            for i in range(40)]
    p.write_text("metadata,problem,answer\n" + "\n".join(rows) + "\n")
    m = tiny_model("llama")
    cfg = I.TaskConfig(max_new_tokens=4, batch_size=8).with_options(
        questions=str(p), n=3, history_len=4, short_tokens=4, draws=2, stratify=False)
    ctx = I.context(m, cfg)
    recs = list(delegate.execute(ctx, delegate.plan(ctx)))
    _, hist, game, base = delegate.selection(ctx)
    pool = delegate._pool(ctx)[1]
    odd = sum(int(q.answer.split()[-1]) % 2 for q in pool)
    assert 0 < odd < len(pool) - 7
    assert [q.id for q in hist + game] == [q.id for q in pool if int(q.answer.split()[-1]) % 2 == 0][:7]
    assert recs and {r.grade["qid"] for r in recs} == {q.id for q in game}
    for r in recs:
        b = base[r.grade["qid"]]
        assert b["grade_method"] == "exact" and b["correct"] is True and b["n_draws"] == 2
        assert b["pool_excluded"] == odd
        assert r.grade["entropy"] is None and r.grade["game_grade_method"] in ("exact", "excluded", "delegated")
    s = M.summarize_sk(pd.DataFrame([flatten_trial(r.to_dict()) for r in recs]))
    assert "entropy_unavailable" in set(s.metric) and "baseline_draw_excluded_rate" in set(s.metric)
    judged = I.context(m, cfg.with_options(judge=str(tiny_dir("llama")), stratify=True))
    for r in delegate.execute(judged, delegate.plan(judged)):
        assert r.grade["baseline_grade_method"] in ("exact", "judge", "excluded")


def test_difficulty_truth_excludes_cut_and_unparsed_draws():
    q = I.data.arithmetic_questions(1, 0)[0]
    assert answer_correct(q, f"Answer: {q.answer}") is True
    assert answer_correct(q, f"{q.answer} is what I get, I think") is None  # no statement: no last-integer guess
    assert answer_reading(q, f"so it is {q.answer}.") == (True, "result")  # a result it ends on: read, and said so
    assert answer_reading(q, f"Answer: {q.answer + 1}") == (False, "statement")
    ab = I.tasks.selfknowledge.common.Decision(("A", "B"), (0.6, 0.4), 0.9)
    # Q1: 2 usable right (10 tokens); Q2: one right one cut -> p=1 from one usable draw, 20 tokens;
    # Q3: all unparsed -> no truth; Q4: wrong, 10 tokens
    correct = [[True, True], [True, True], [None, None], [False, False]]
    tokens = [[10, 10], [20, 160], [30, 30], [10, 10]]
    cuts = [[False, False], [False, True], [False, False], [False, False]]
    g = grade_difficulty([0, 1, 2, 3], correct, tokens, cuts, [ab] * 12)
    assert g["p_correct"] == [1.0, 1.0, None, 0.0] and g["n_usable_draws"] == [2, 1, 0, 2]
    # pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3): the second is harder in each; those with Q3 have no truth
    assert g["pair_truth"] == [0.0, None, 0.0, None, 0.0, None] and g["n_pairs_excluded"] == 3
    assert g["pair_accuracy"] == pytest.approx(1.0)  # the ranking orders the three scorable pairs right
    df = pd.DataFrame([{"model_id": "m", "task": "seb-difficulty", "variant": "v", "condition": "clean",
                        **{f"grade.{k}": v for k, v in g.items()}}])
    s = M.summarize_seb_difficulty(df).set_index("metric")
    assert s.loc["pair_excluded_rate", "value"] == 0.5
    assert s.loc["answer_cut_rate", "value"] == pytest.approx(1 / 8)
    assert s.loc["answer_parse_rate", "value"] == pytest.approx(5 / 7)  # of the 7 uncut draws
    assert s.loc["answer_excluded_rate", "value"] == pytest.approx(3 / 8)


def test_k_defaults_to_five_and_k1_warns(tiny_model):
    m = tiny_model("llama")
    assert n_draws(I.context(m, I.TaskConfig())) == 5
    assert n_draws(I.context(m, I.TaskConfig(n_samples=8))) == 8
    assert n_draws(I.context(m, I.TaskConfig(temperature=0.0))) == 1
    assert n_draws(I.context(m, I.TaskConfig().with_options(draws=2))) == 2
    grades = [{"qid": f"q{i}", "p_answer": 0.6, "judged_answered": [True], "refused_rule": [False],
               "n_draws": 1, "parse_ok": True, "correct": True} for i in range(3)]
    df = pd.DataFrame([{"model_id": "m", "task": "seb-restriction", "variant": "v", "condition": "clean",
                        **{f"grade.{k}": v for k, v in x.items()}} for x in grades])
    s = M.summarize_seb_restriction(df).set_index("metric")
    assert s.loc["warning_single_draw_truth", "value"] == 1 and s.loc["truth_draws_per_item", "value"] == 1
    for x in grades:
        x.update(judged_answered=[True] * 5, refused_rule=[False] * 5, n_draws=5)
    df5 = pd.DataFrame([{"model_id": "m", "task": "seb-restriction", "variant": "v", "condition": "clean",
                         **{f"grade.{k}": v for k, v in x.items()}} for x in grades])
    s5 = M.summarize_seb_restriction(df5).set_index("metric")
    assert "warning_single_draw_truth" not in s5.index and s5.loc["truth_draws_per_item", "value"] == 5
    assert s5.loc["logit_accuracy", "n"] == 15 and s5.loc["logit_accuracy", "n_items"] == 3
    from introspect.report.metrics import summarize  # the report's table: n draws, n_clusters items
    r = summarize(df5.assign(layer_idx=None, alpha=None, alpha_units=None)).set_index("metric")
    assert r.loc["logit_accuracy", "n"] == 15 and r.loc["logit_accuracy", "n_clusters"] == 3


def test_surface_baseline_is_scored_per_draw_like_the_model():
    """Each item answered 4 times, 3 of them "answers": scored per draw, a baseline that
    always predicts "answers" is right on 3/4 of the draws (the model's accuracy is counted the
    same way), not on every item (which the items' majority labels would give)."""
    grades = [{"qid": f"q{i}", "p_answer": 0.9, "judged_answered": [True, True, True, False],
               "refused_rule": [False] * 4, "n_draws": 4, "request_length": 10 + i % 5,
               "label": "safe", "parse_ok": True, "correct": True} for i in range(20)]
    df = pd.DataFrame([{"model_id": "m", "task": "seb-restriction", "variant": "v", "condition": "clean",
                        **{f"grade.{k}": v for k, v in x.items()}} for x in grades])
    s = M.summarize_seb_restriction(df).set_index("metric")
    assert s.loc["logit_accuracy", "value"] == pytest.approx(0.75)
    assert s.loc["surface_accuracy", "value"] == pytest.approx(0.75)
    assert s.loc["surface_accuracy", "n"] == 80 and s.loc["surface_accuracy", "n_items"] == 20
    assert np.isclose(s.loc["logit_majority_baseline", "value"], 0.75)


def test_judge_option_reads_a_comma_list_as_several_judges(monkeypatch):
    """``--option judge=a,b`` arrives as the string "a,b": two judges, not one named "a,b"."""
    import introspect.engine.load.models as models
    import introspect.tasks.judge as J
    from introspect.tasks.selfknowledge import shortanswer

    monkeypatch.setattr(models, "load_model", lambda name: f"model:{name}")
    monkeypatch.setattr(J, "ModelJudge", lambda model, model_id: (model, model_id))
    monkeypatch.setattr(shortanswer, "_JUDGES", {})
    assert shortanswer.judges_for("a, b") == [("model:a", "a"), ("model:b", "b")]
    assert shortanswer.judges_for(["c"]) == [("model:c", "c")]
    assert shortanswer.judges_for("") == [] and shortanswer.judges_for(None) == []
