"""Cloze scoring of the ability items: option-text log-likelihoods equal a direct forward pass,
the reading normalises per character, letters and option order do not enter it, and the
summary reports its accuracy beside (never instead of) the letter reading."""

import json

import pandas as pd
import pytest
import torch

import introspect as I
from introspect.data import MCQuestion
from introspect.engine.run.chat import Prompt
from introspect.engine.run.score import continuation_logprobs
from introspect.tasks.selfknowledge import ability
from introspect.tasks.selfknowledge.cloze import CLOZE_PROMPT, cloze, continuation, read_cloze
from introspect.tasks.selfknowledge.cloze import prompts as cloze_prompts
from introspect.tasks.selfknowledge.common import PREFILL, rendered, user

ITEMS = [("What colour is the sky?", ["Blue", "Green", "A very dark shade of red", "Yellow"], "A"),
         ("How many wheels has a bicycle?", ["Three", "Two", "One", "Seven hundred"], "B"),
         ("Which animal barks?", ["Cat", "Fish", "Dog", "Bird"], "C")]


def _direct(model, ids: list[int], cont: list[int]) -> float:
    """Summed log-probability of ``cont`` after ``ids``: one unpadded forward pass, no helper."""
    x = torch.tensor([ids + cont])
    with torch.no_grad():
        lp = torch.log_softmax(model.original_model(input_ids=x).logits[0].double(), -1)
    return float(sum(lp[len(ids) - 1 + j, t] for j, t in enumerate(cont)))


@pytest.mark.parametrize("family", ["llama", "gpt2"])  # relative (RoPE) and absolute positions
def test_continuation_logprobs_equal_a_direct_forward_pass(tiny_model, family):
    """Rows of different prompt and continuation lengths, batched (left padding): each
    continuation token's log-probability is the unpadded forward pass's."""
    m = tiny_model(family)
    tok = m.tokenizer
    texts = ["Yes, no.", "Tell me about it. Human: ok", "No"]
    conts = [tok.encode(c, add_special_tokens=False) for c in (" Yes", " no no yes yes", " CHOICE: 1 2")]
    prompts = [Prompt.from_ids(tok.encode(t, add_special_tokens=False), tok) for t in texts]
    got = continuation_logprobs(m, prompts, conts, batch_size=3)
    for p, c, lp in zip(prompts, conts, got):
        assert lp.shape == (len(c),)
        assert float(lp.double().sum()) == pytest.approx(_direct(m, list(p.ids), c), abs=1e-5)
    with pytest.raises(ValueError, match="continuations"):
        continuation_logprobs(m, prompts, conts[:2])


def _ctx(model, **opts):
    return I.context(model, I.TaskConfig(max_new_tokens=4, batch_size=8).with_options(**opts))


def _items_file(tmp_path) -> str:
    path = tmp_path / "items.jsonl"
    with path.open("w") as f:
        for q, opts, key in ITEMS:
            inline = q + "".join(f"\n{L}. {o}" for L, o in zip("ABCD", opts)) + "\nAnswer:"
            f.write(json.dumps({"topic": "t", "question": inline, "answer": key}) + "\n")
    return str(path)


def test_ability_cloze_scores_are_the_option_tokens_summed_logprobs(tiny_model, tmp_path):
    """On the tiny model through the task: every option's recorded cloze score is a direct
    forward pass's summed log-probability of its tokens after the letter-free prompt, the
    decision is the per-character argmax, and the letter reading is still there."""
    m = tiny_model("llama")
    ctx = _ctx(m, ability_items=_items_file(tmp_path), cloze=True, format="chat")
    recs = I.run_task(ctx, "ability")
    assert len(recs) == len(ITEMS)
    tok = m.tokenizer
    for r in recs:
        q, opts, key = next(x for x in ITEMS if x[0] in r.prompt)
        p = rendered(ctx, [user(CLOZE_PROMPT.format(q=q), prefill=PREFILL)], "ability-cloze")[0]
        assert "A." not in p.text and r.extra["cloze_prompt"] == p.text  # no letters shown
        g = r.grade
        for L, o in zip("ABCD", opts):
            c = tok.encode(continuation(o), add_special_tokens=False)
            assert g["cloze_logprobs"][L] == pytest.approx(_direct(m, list(p.ids), c), abs=1e-5)
            assert g["cloze_n_tokens"][L] == len(c) and g["cloze_n_chars"][L] == len(o) + 1
        per_char = {L: g["cloze_logprobs"][L] / g["cloze_n_chars"][L] for L in "ABCD"}
        assert g["cloze_choice"] == max(per_char, key=per_char.get)
        assert g["cloze_correct"] == (g["cloze_choice"] == key)
        assert g["choice"] in "ABCD" and "correct" in g  # the letter reading is kept
    off = I.run_task(_ctx(m, ability_items=_items_file(tmp_path), format="chat"), "ability")
    assert not any("cloze_choice" in r.grade for r in off)  # off by default


def test_cloze_ignores_letters_and_option_order(tiny_model):
    """A rotated item (options at other letters) gets the same option scores: the reading is
    about the options' text, so rotations have nothing to remove from it."""
    m = tiny_model("llama")
    ctx = _ctx(m, format="chat")
    q = MCQuestion("q", ITEMS[1][0], tuple(ITEMS[1][1]), "B")
    a, b = cloze(ctx, [q, q.rotated(1)])
    for i, L in enumerate("ABCD"):
        assert b["cloze_logprobs"]["ABCD"[(i + 1) % 4]] == pytest.approx(a["cloze_logprobs"][L], abs=1e-5)
    assert a["cloze_correct"] == b["cloze_correct"]


def test_fewshot_cloze_examples_answer_with_text_and_avoid_the_options(tiny_model):
    """The base-model transcript answers its examples with an option's text, never a letter, and
    replaces an example that mentions one of the item's options (the scored continuations)."""
    m = tiny_model("llama")
    ctx = _ctx(m, format="fewshot")
    plain = MCQuestion("p", "Which is heavier?", ("A feather", "A brick", "A leaf", "A coin"), "B")
    clash = MCQuestion("c", "Which is heavier?", ("Mars", "A brick", "A leaf", "A coin"), "B")
    a, b = (cloze_prompts(ctx, [q])[0].text for q in (plain, clash))
    assert "Answer: Mars" in a and "Mars" not in b  # the Red Planet example is swapped out of b
    assert not any(f"Answer: {L}\n" in a for L in "ABCD") and a.count("Human:") == b.count("Human:") == 5


def test_read_cloze_normalises_per_character():
    """A long key with the lower sum but the higher per-character score: the decision takes it,
    the summed reading takes the short option; both are recorded."""
    x = read_cloze([-6.0, -20.0, -9.0], [2, 10, 3], [4, 40, 5], key="B", tie_key="i")
    assert (x["cloze_choice"], x["cloze_correct"]) == ("B", True)
    assert (x["cloze_choice_sum"], x["cloze_correct_sum"]) == ("A", False)
    assert x["cloze_choice_token"] == "B"  # -2.0 per token beats -3.0
    ties = {read_cloze([-1.0] * 4, [1] * 4, [2] * 4, "A", f"t{k}")["cloze_choice"] for k in range(40)}
    assert len(ties) > 1  # an exact tie is broken by the item's stream, not "the first option"
    with pytest.raises(ValueError, match="options"):
        read_cloze([-1.0], [1], [1], "A", "t")


def _records(n: int = 12) -> pd.DataFrame:
    """An always-"A" letter model on items keyed A on half of them, whose option texts the
    model scores best at the key except on two A-keyed items."""
    rows = []
    for i in range(n):
        key = "A" if i % 2 == 0 else "BCD"[i % 3]
        lp = [-3.0] * 4
        lp["ABCD".index(key if i not in (0, 2) else "D")] = -1.0
        g = {"qid": f"q{i}", "answer": key, "choice": "A", "correct": key == "A", "p_correct": 0.9 if key == "A" else 0.03,
             "mass": 0.9, "low_mass": False, "parse_ok": True, "text_correct": key == "A",
             **read_cloze(lp, [2] * 4, [6] * 4, key, f"q{i}")}
        rows.append({"model_id": "m", "task": "ability", "variant": "items", "condition": "clean", "word": f"q{i}",
                     **{f"grade.{k}": v for k, v in g.items()}})
    return pd.DataFrame(rows)


def test_summary_reports_cloze_accuracy_beside_the_letter_reading():
    """The letter accuracy of an always-"A" model is the share keyed A (modal-letter rate 1.0);
    its cloze accuracy is what the option scores say (10 of 12), not that share, and it heads the
    comparison page's ability rows, the letter reading and its modal-letter rate beside it."""
    from introspect.report.compare import headline_table

    s = ability.summarize_ability(_records()).set_index("metric")
    assert s.loc["accuracy", "value"] == pytest.approx(0.5) and s.loc["modal_letter_rate", "value"] == 1.0
    assert s.loc["cloze_accuracy", "value"] == pytest.approx(10 / 12) and s.loc["cloze_accuracy", "n"] == 12
    assert s.loc["cloze_accuracy", "value"] != s.loc["accuracy", "value"]
    assert s.loc["cloze_letter_agreement", "value"] == pytest.approx(4 / 12)  # cloze picks A on 4
    assert {"cloze_accuracy_sum", "cloze_accuracy_token"} <= set(s.index)
    h = headline_table(s.reset_index().assign(layer_idx=float("nan"), alpha=float("nan"), alpha_units=None))
    assert list(h.metric[:2]) == ["cloze_accuracy", "modal_letter_rate"]  # the letter accuracy leaves them
    assert "accuracy" not in set(h.metric) and "accuracy" in s.index
    assert h.role.iloc[0] == "headline"  # the letter-free reading heads the task
    h0 = headline_table(ability.summarize_ability(_records().drop(columns=[c for c in _records() if "cloze" in c]))
                        .assign(layer_idx=float("nan"), alpha=float("nan"), alpha_units=None))
    assert h0.metric.iloc[0] == "accuracy"  # without a cloze reading the letter accuracy heads it
    plain = ability.summarize_ability(_records().drop(columns=[c for c in _records() if "cloze" in c]))
    assert not plain.metric.str.startswith("cloze").any()  # records without a cloze reading: no rows
