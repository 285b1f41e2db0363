"""The comparison page's self-knowledge headline names metrics the summaries produce, and shows
their values: every task run end to end on a tiny model, summarised by the report, headlined."""

import numpy as np
import pandas as pd
import pytest

import introspect as I
from introspect.report.compare import HEADLINES, headline_table
from introspect.report.load import flatten_trial
from introspect.report.metrics import summarize
from introspect.tasks import get_task
from introspect.tasks.selfknowledge.metrics import without_one_class_truth

SK = ["seb-association", "seb-restriction", "seb-difficulty", "delegate", "recovery"]
# shown only when their condition holds (a K = 1 truth, a short-answer game, a fitted regression,
# ten items or more, an error of each kind, an untied pair, a right clean answer); each is produced in tests/selfknowledge/test_truths.py or test_sk_metrics.py
CONDITIONAL = {"warning_single_draw_truth", "warning_judged_truth_one_class", "entropy_unavailable", "surface_auroc",
               "logit_beyond_surface", "odds_ratio[baseline_error]",  # ten items or more, a prediction beyond it
               "other_modelling_or_per_0.1", "text_over_niceness",
               "majority_pair_baseline", "surface_length_pair_accuracy",  # two question groups or more
               "recovery_rate", "rotation_consistency"}  # only with rotations


@pytest.fixture(scope="module")
def summary(tiny_model):
    m = tiny_model("llama")
    cfg = I.TaskConfig(max_new_tokens=6, batch_size=8).with_options(
        n=3, history_len=3, n_options=4, n_tokens=(1,), draws=2, list_tokens=6, predict_tokens=6,
        response_tokens=6, answer_tokens=6, rank_tokens=6, short_tokens=6, teammate_accuracy=[0.3, 0.7])
    ctx = I.context(m, cfg)
    rows = [flatten_trial(r.to_dict()) for name in SK for r in get_task(name).execute(ctx, get_task(name).plan(ctx))]
    return summarize(pd.DataFrame(rows))


def test_self_knowledge_headlines_name_existing_metrics(summary):
    """Every headline is the first wanted metric a variant has once a one-class judged truth's
    figures are gone (a random tiny model's own judge gives one verdict: the rule truth leads)."""
    h = headline_table(summary)
    gated = without_one_class_truth(summary)
    for task in SK:
        produced = set(summary[summary.task == task].metric)
        wanted = HEADLINES[task]
        assert set(wanted) - produced <= CONDITIONAL, (task, set(wanted) - produced)
        head = h[(h.task == task) & (h.role == "headline")]
        assert not head.empty, task
        for r in head.itertuples():  # the first wanted metric each variant has, with its value
            have = set(gated[(gated.task == task) & (gated.variant == r.variant)].metric)
            assert r.metric == next((w for w in wanted if w in have), None), (task, r.variant, r.metric, have)
            want = summary[(summary.task == task) & (summary.variant == r.variant) & (summary.metric == r.metric)]
            assert r.value == pytest.approx(float(want.value.iloc[0]), nan_ok=True)
    main = h[(h.task == "seb-restriction") & (h.role == "headline")]
    one_class = (summary.metric == "warning_judged_truth_one_class").any()
    assert set(main.metric) == {"logit_rule_auroc" if one_class else "logit_auroc"}
    game = h[(h.task == "delegate") & (h.role == "headline") & h.variant.str.contains("teammate")]
    assert set(game.metric) == {"self_accuracy_lift"} and len(game) == 2  # one per teammate accuracy
    rec = h[(h.task == "recovery") & (h.role == "headline")].set_index("variant")
    assert {m for v, m in rec.metric.items() if v.endswith(":clean")} == {"accuracy"}
    assert {m for v, m in rec.metric.items() if not v.endswith(":clean")} == {"accuracy_drop_vs_clean"}


def test_the_game_reads_entropy_beside_its_headline_not_confidence_auroc():
    """confidence_auroc scores P(key) against "the top option is the key", so a model at chance
    reads 0.92-0.97: it stays in the summary and heads nothing; the entropy over A-D, which does
    not see the key, is read in the headline's cell instead."""
    summary = pd.DataFrame([{"task": "delegate", "variant": "arith:teammate=0.5", "model_id": "m", "metric": k,
                             "value": v, "lo": v - 0.1, "hi": v + 0.1, "n": 40, "layer_idx": np.nan,
                             "alpha": np.nan, "alpha_units": None}
                            for k, v in (("self_accuracy_lift", 0.1), ("confidence_auroc", 0.95),
                                         ("entropy_auroc[error]", 0.55), ("p_delegate_auroc", 0.6))])
    h = headline_table(summary)
    assert list(h.metric) == ["self_accuracy_lift", "p_delegate_auroc", "entropy_auroc[error]"]
    assert "confidence_auroc" not in HEADLINES["delegate"]
