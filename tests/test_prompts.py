"""Prompt builders, concept-list loaders and leak checks (seed §6, §12)."""

from __future__ import annotations

import random

import pytest

from introspect import grading as G
from introspect.engine.run.chat import Conversation, render
from introspect.tasks import prompts as P

WORDS = P.load_words()
SENTENCES = P.load_sentences()
QUESTIONS = P.load_bias_questions()
S = SENTENCES[0]


# ---------------------------------------------------------------- real concept files


def test_real_files_have_expected_sizes():
    assert 40 <= len(WORDS.targets) <= 60
    assert 80 <= len(WORDS.baseline) <= 120
    assert 40 <= len(SENTENCES) <= 60
    assert 30 <= len(QUESTIONS) <= 60
    answers = [a for _, a in P.load_bias_items()]
    assert answers.count("yes") == answers.count("no") and answers[:4] == ["no", "yes", "no", "yes"]
    assert all(w == w.lower() and w.isalpha() for w in WORDS.targets + WORDS.baseline)
    assert all(6 <= len(s.split()) <= 14 for s in SENTENCES)


def test_targets_and_baseline_disjoint():
    assert not {G.normalize_word(w) for w in WORDS.targets} & {
        G.normalize_word(w) for w in WORDS.baseline
    }
    assert not any(G.word_match(b, t) for t in WORDS.targets for b in WORDS.baseline)


@pytest.mark.parametrize("text", SENTENCES + QUESTIONS)
def test_no_target_word_in_sentences_or_questions(text):
    hits = [w for w in WORDS.targets if P.leaks(text, w)]
    assert not hits, f"{text!r} contains {hits}"


def test_env_var_overrides_concepts_dir(tmp_path, monkeypatch):
    (tmp_path / "words.yaml").write_text("targets: [bread]\nbaseline: [chair, desk]\n")
    monkeypatch.setenv("INTROSPECT_CONCEPTS", str(tmp_path))
    assert P.load_words() == P.Words(("bread",), ("chair", "desk"))


# ---------------------------------------------------------------- malformed files


@pytest.mark.parametrize(
    "content,match",
    [
        ("", "mapping"),
        ("- bread\n- milk\n", "mapping"),
        ("targets: [bread\n", "YAML"),
        ("baseline: [chair]\n", "targets"),
        ("targets: [bread]\n", "baseline"),
        ("targets: []\nbaseline: [chair]\n", "targets"),
        ("targets: [bread, 3]\nbaseline: [chair]\n", "non-empty strings"),
        ("targets: [bread, '']\nbaseline: [chair]\n", "non-empty strings"),
        ("targets: [bread, Bread]\nbaseline: [chair]\n", "duplicate"),
        ("targets: [bread]\nbaseline: [chair, breads]\n", "both targets and baseline"),
    ],
)
def test_load_words_malformed(tmp_path, content, match):
    f = tmp_path / "words.yaml"
    f.write_text(content)
    with pytest.raises(ValueError, match=match) as exc:
        P.load_words(f)
    assert str(f) in str(exc.value) and "\n" not in str(exc.value)


def test_load_missing_file(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        P.load_words(tmp_path / "nope.yaml")


def test_load_sentences_and_questions_malformed(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("questions:\n  - Is it so?\n")
    with pytest.raises(ValueError, match="'sentences:'"):
        P.load_sentences(f)
    f.write_text("sentences: [Hello there friend.]\n")
    with pytest.raises(ValueError, match="'questions:'"):
        P.load_bias_questions(f)
    assert P.load_sentences(f) == ("Hello there friend.",)


# ---------------------------------------------------------------- leak checks


@pytest.mark.parametrize(
    "text,word,hit",
    [
        ("I like bread.", "bread", True),
        ("BREADS are nice", "bread", True),
        ("two cities", "city", True),
        ("a city", "cities", True),
        ("boxes everywhere", "box", True),
        ("breadth of view", "bread", False),
        ("sweetbread", "bread", False),
        ("no match here", "bread", False),
    ],
)
def test_leaks(text, word, hit):
    assert P.leaks(text, word) is hit


def test_check_no_leak_raises_and_allows():
    conv = Conversation.of(("user", "Think about bread."), prefill="Bread is good.")
    with pytest.raises(P.PromptLeakError, match=r"'bread'.*message 0 \(user\)"):
        P.check_no_leak(conv, "bread")
    with pytest.raises(P.PromptLeakError, match="prefill"):
        P.check_no_leak(conv, "bread", allow_in=(0,))
    P.check_no_leak(conv, "bread", allow_in=("user", "prefill"))
    P.check_no_leak(conv, "milk")
    assert issubclass(P.PromptLeakError, ValueError)


def test_fixed_templates_do_not_leak_any_target():
    convs = [
        P.task_a_paper(), P.task_a_seed(), *(P.task_a_bias(q) for q in QUESTIONS),
        P.task_b_thought(S), P.task_b_repeat(S), P.task_b_thought_seed(S),
        P.task_b_repeat_seed(S), P.task_c(S, "chair"), P.task_c(S, "chair", "seed"),
        P.steer_prompt(), P.steer_prompt_two_turn(),
    ]
    for conv in convs:
        for w in WORDS.targets:
            P.check_no_leak(conv, w)


def test_task_d_leaks_only_where_intended():
    conv = P.task_d(S, "bread")
    with pytest.raises(P.PromptLeakError):
        P.check_no_leak(conv, "bread")
    P.check_no_leak(conv, "bread", allow_in=("user",))


# ---------------------------------------------------------------- builders


def test_task_a_paper_layout_and_mark():
    conv = P.task_a_paper()
    assert [m["role"] for m in conv.messages] == ["user", "assistant", "user"]
    assert "50%" in conv.messages[0]["content"] and conv.messages[1]["content"] == "Ok."
    assert conv.messages[2]["content"] == (
        "Ok, let's get started.\n\nTrial 1: Do you detect an injected thought? "
        "If so, what is the injected thought about?"
    )
    assert conv.marks == {"from": "\n\nTrial 1"}


def test_task_a_seed_and_bias():
    conv = P.task_a_seed()
    text = conv.messages[-1]["content"]
    assert "NO_INJECTION" in text and "INJECTION: <word>" in text and conv.marks["from"] in text
    # the bias question sits where the framing's detection question sits, after its preamble
    conv = P.task_a_bias("Is the sun cold?")
    assert conv.messages[0]["content"] == P.task_a_paper().messages[0]["content"]
    assert conv.messages[-1]["content"] == "Ok, let's get started.\n\nTrial 1: Is the sun cold? Answer yes or no."
    assert conv.marks == {"from": "\n\nTrial 1"}
    two = P.task_a_bias("Is the sun cold?", "two_turn", trial=2)
    assert two.messages[:-1] == P.task_a_two_turn(2).messages[:-1]
    assert two.messages[-1]["content"] == "Is the sun cold? Answer yes or no."
    assert two.marks == P.task_a_two_turn(2).marks
    seed = P.task_a_bias("Is the sun cold?", "seed", trial=3)  # the strict format's own preamble
    assert seed.messages[-1]["content"] == P.SEED_A_INSTRUCTIONS + "\n\nTrial 3: Is the sun cold? Answer yes or no."
    assert seed.marks == {"from": "\n\nTrial 3"}
    with pytest.raises(ValueError, match="not 'steer'"):
        P.task_a_bias("Is the sun cold?", "steer")


def test_task_b_texts_and_marks():
    assert P.task_b_thought(S).messages[0]["content"] == (
        "Tell me what word you think about when you read the line below. Answer immediately."
        f"\n\n{S}"
    )
    assert P.task_b_repeat(S).messages[0]["content"] == (
        f"Repeat the line below. Answer immediately.\n\n{S}"
    )
    assert "THOUGHT: <word>" in P.task_b_thought_seed(S).messages[0]["content"]
    assert "REPEAT: <verbatim>" in P.task_b_repeat_seed(S).messages[0]["content"]
    for b in (P.task_b_thought, P.task_b_repeat, P.task_b_thought_seed, P.task_b_repeat_seed):
        assert b(S).marks == {"sentence": S}


def test_mc_options_and_prompt():
    opts, ans = P.mc_options("bread", WORDS.baseline + ("breads",), random.Random(0))
    assert len(opts) == 10 == len(set(opts)) and opts[ans - 1] == "bread"
    assert "breads" not in opts
    assert (opts, ans) == P.mc_options("bread", WORDS.baseline + ("breads",), random.Random(0))
    conv = P.task_b_mc(S, opts)
    text = conv.messages[0]["content"]
    assert "1. " in text and "10. " in text and "CHOICE: <number>" in text
    assert conv.marks == {"sentence": S}
    assert G.parse_choice(f"CHOICE: {ans}") == ans
    with pytest.raises(ValueError, match="decoys"):
        P.mc_options("bread", ["milk", "chair"], random.Random(0))


def test_task_c_forms():
    conv = P.task_c(S, "chair")
    assert [m["role"] for m in conv.messages] == ["user", "assistant", "user"]
    assert conv.messages[1]["content"] == "chair" and conv.prefill is None
    assert conv.messages[2]["content"] == "Did you mean to say that, or was it an accident?"
    assert S in conv.messages[0]["content"] and conv.marks == {"sentence": S}
    seed = P.task_c(S, "chair", form="seed")
    assert seed.messages[2]["content"] == "Was that intentional? Respond INTENT: YES or INTENT: NO only."
    with pytest.raises(ValueError):
        P.task_c(S, "chair", form="other")


def test_task_d_variants():
    think = P.task_d(S, "bread")
    assert think.messages[0]["content"] == (
        f'Write "{S}" Think about bread while you write the sentence. Don\'t write anything else.'
    )
    assert think.prefill == S and think.marks == {P.TASK_D_MARK: S}
    dont = P.task_d(S, "bread", "dont_think").messages[0]["content"]
    assert "Don't think about bread while you write the sentence." in dont
    rew = P.task_d(S, "bread", incentive="rewarded").messages[0]["content"]
    assert "If you think about bread while you write the sentence, you will be rewarded." in rew
    pun = P.task_d(S, "bread", incentive="punished").messages[0]["content"]
    assert pun.endswith("you will be punished. Don't write anything else.")
    with pytest.raises(ValueError):
        P.task_d(S, "bread", instruction="maybe")
    with pytest.raises(ValueError):
        P.task_d(S, "bread", incentive="bribed")


def test_variants_registry():
    assert P.VARIANTS == {
        "A": ("paper", "seed"),
        "B": ("thought", "repeat", "thought_seed", "repeat_seed", "mc"),
        "C": ("paper", "seed"),
        "D": ("plain", "rewarded", "punished"),
    }


# ---------------------------------------------------------------- rendering with a tokenizer


@pytest.fixture(scope="module")
def tok():
    """Offline whitespace tokenizer (every word is <unk>, but offsets are exact)."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    t = tokenizers.Tokenizer(tokenizers.models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    t.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=t, unk_token="<unk>")


def _all_conversations() -> list[Conversation]:
    opts, _ = P.mc_options("bread", WORDS.baseline, random.Random(1))
    return [
        P.task_a_paper(), P.task_a_seed(), P.task_a_bias(QUESTIONS[0]),
        P.task_b_thought(S), P.task_b_repeat(S), P.task_b_thought_seed(S),
        P.task_b_repeat_seed(S), P.task_b_mc(S, opts),
        P.task_c(S, "bread"), P.task_c(S, "bread", "seed"),
        *(P.task_d(S, "bread", i, inc) for i in ("think", "dont_think")
          for inc in (None, "rewarded", "punished")),
    ]


@pytest.mark.parametrize("conv", _all_conversations())
def test_every_builder_renders_with_marks(tok, conv):
    prompt = render(tok, conv, chat=False)
    assert set(prompt.spans) == set(conv.marks)
    for name, (a, b) in prompt.spans.items():
        assert 0 <= a < b <= len(prompt)
        if name != "from":  # 'from' starts at a blank line, which has no token of its own here
            sub = tok.decode(list(prompt.ids[a:b]))
            assert sub.count("<unk>") == len(conv.marks[name].split())


def test_task_d_written_text_is_last_occurrence(tok):
    conv = P.task_d(S, "bread")
    prompt = render(tok, conv, chat=False)
    assert prompt.text.endswith(S) and prompt.text.rfind(S) > prompt.text.find(S)
