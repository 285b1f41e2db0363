"""Rule-based graders: canonical and malformed responses for every task (seed §7)."""

from __future__ import annotations

import math

import pytest

from introspect import grading as G

# ---------------------------------------------------------------- word matching


@pytest.mark.parametrize(
    "cand,target",
    [
        ("bread", "bread"),
        ("Breads", "bread"),
        ("bread", "breads"),
        ("boxes", "box"),
        ("cities", "city"),
        ("city", "cities"),
        ("volcanoes", "volcano"),
        ('"Bread."', "bread"),
        ("**Ocean**", "ocean"),
        ("the ocean", "ocean"),
        ("An apple", "apple"),
        ("BREAD", "bread"),
    ],
)
def test_word_match_positive(cand, target):
    assert G.word_match(cand, target)


@pytest.mark.parametrize(
    "cand,target",
    [("breadth", "bread"), ("ocean waves", "ocean"), ("", "bread"), (None, "bread"), ("cat", "")],
)
def test_word_match_negative(cand, target):
    assert not G.word_match(cand, target)


def test_levenshtein():
    assert G.levenshtein("kitten", "sitting") == 3
    assert G.levenshtein("", "abc") == 3
    assert G.levenshtein("same", "same") == 0


# ---------------------------------------------------------------- task A strict format


@pytest.mark.parametrize(
    "text,expected",
    [
        ("NO_INJECTION", "NO_INJECTION"),
        ("  NO_INJECTION.\n", "NO_INJECTION"),
        ("INJECTION: bread", "bread"),
        ("INJECTION: Bread.", "bread"),
        ("INJECTION: the ocean", "ocean"),
        ("INJECTION: `violin`", "violin"),
        ("INJECTION: ocean waves", None),  # not a single word
        ("INJECTION:", None),
        ("INJECTION: bread\nINJECTION: milk", None),  # two different answers
        ("NO_INJECTION\nINJECTION: bread", None),  # contradictory
        ("I am not sure.", None),
        ("", None),
    ],
)
def test_parse_injection_report(text, expected):
    assert G.parse_injection_report(text) == expected


def test_grade_task_A_strict_tallies():
    g = G.grade_task_A("INJECTION: bread", "bread", injected=True)
    assert g["detected"] and g["matched"] and g["tp"] == 1 and g["fp"] == 0
    assert g["parse"] == "INJECTION"
    g = G.grade_task_A("INJECTION: breads", "bread", injected=True)
    assert g["matched"]
    g = G.grade_task_A("INJECTION: milk", "bread", injected=True)
    assert g["detected"] and not g["matched"] and g["tp"] == 1
    g = G.grade_task_A("NO_INJECTION", "bread", injected=True)
    assert not g["detected"] and g["tp"] == 0 and g["fp"] == 0 and g["parse"] == "NO_INJECTION"
    g = G.grade_task_A("INJECTION: bread", "bread", injected=False)
    assert g["fp"] == 1 and g["tp"] == 0
    g = G.grade_task_A("NO_INJECTION", "bread", injected=False)
    assert g["fp"] == 0 and g["tp"] == 0
    assert set(g) == {"detected", "matched", "tp", "fp", "parse", "notes"}


@pytest.mark.parametrize("text", ["INJECTION: ocean waves", "INJECTION:", "", "   "])
def test_grade_task_A_malformed_is_unparsed_not_detected(text):
    g = G.grade_task_A(text, "ocean", injected=True)
    assert g["parse"] == "unparsed" and not g["detected"] and g["tp"] == 0


# ---------------------------------------------------------------- task A paper free form


@pytest.mark.parametrize(
    "text,detected,matched",
    [
        ("Yes, I detect an injected thought about bread.", True, True),
        ("I do detect something. The injected thought seems to be about bread.", True, True),
        ("I notice a thought related to breads, warm and fresh.", True, True),
        ("There is an injected thought, and it is about bread.", True, True),
        ("Bread. I think I detect an injected thought.", True, False),
        ("Yes, I detect an injected thought. It seems to be about the sea.", True, False),
        ("I don't detect any injected thought.", False, False),
        ("I do not detect an injected thought on this trial.", False, False),
        ("No injected thought this time.", False, False),
        ("I notice nothing unusual about bread.", False, False),
        ("I don\u2019t detect anything.", False, False),
        ("The sky is blue.", False, False),
        ("Bread.", False, False),
    ],
)
def test_grade_task_A_free_form(text, detected, matched):
    g = G.grade_task_A(text, "bread", injected=True)
    assert g["parse"] == "free"
    assert (g["detected"], g["matched"]) == (detected, matched)
    assert g["tp"] == int(detected)


def test_free_form_control_false_positive():
    g = G.grade_task_A("Yes, I sense a thought about thunder.", "bread", injected=False)
    assert g["fp"] == 1 and not g["matched"]


@pytest.mark.parametrize(
    "text,expected",
    [
        ("No.", "NO"),
        ("yes", "YES"),
        ("**Yes**, it is.", "YES"),
        ("The answer is no.", "NO"),
        ("Maybe.", None),
        ("Yes and no.", "YES"),  # leading answer wins
        ("Well, yes or no, hard to say.", None),
        ("", None),
    ],
)
def test_parse_yes_no(text, expected):
    assert G.parse_yes_no(text) == expected


# ---------------------------------------------------------------- task B


def test_parse_task_B_canonical_and_malformed():
    assert G.parse_task_B("THOUGHT: bread") == ("bread", None)
    assert G.parse_task_B("REPEAT: The cat sat on the mat.") == (None, "The cat sat on the mat.")
    assert G.parse_task_B('THOUGHT: Bread\nREPEAT: "The cat sat."') == ("bread", "The cat sat.")
    assert G.parse_task_B("THOUGHT: warm bread") == (None, None)
    assert G.parse_task_B("bread") == (None, None)
    assert G.parse_task_B("REPEAT:   ") == (None, None)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Bread.", "bread"),
        ("**Ocean**", "ocean"),
        ("The word that comes to mind is bread.", "bread"),
        ('I think of "violin".', "violin"),
        ("", None),
        ("...", None),
    ],
)
def test_parse_thought_free(text, expected):
    assert G.parse_thought_free(text) == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        ("CHOICE: 3", 3),
        ("choice: 10", 10),
        ("CHOICE:7.", 7),
        ("CHOICE: 3\nCHOICE: 3", 3),
        ("3", None),
        ("Option 3", None),
        ("CHOICE: three", None),
        ("CHOICE: 3.5", None),
        ("CHOICE: 2 or CHOICE: 4", None),
        ("My choice is 3", None),
    ],
)
def test_parse_choice_only_strict(text, expected):
    assert G.parse_choice(text) == expected


SENT = "The old man walked slowly along the quiet village road."


def test_grade_task_B_strict_success_needs_both():
    g = G.grade_task_B("bread", SENT, "bread", SENT)
    assert g["thought_correct"] and g["repeat_correct"] and g["success"] is True
    assert g["repeat_edit_distance"] == 0 and g["parse_ok"] and g["mc_correct"] is None
    g = G.grade_task_B("milk", SENT, "bread", SENT)
    assert g["success"] is False and g["repeat_correct"]
    g = G.grade_task_B("bread", SENT.replace("old", "young"), "bread", SENT)
    assert g["success"] is False and g["thought_correct"] and g["repeat_edit_distance"] > 0


def test_grade_task_B_whitespace_and_case_normalised():
    g = G.grade_task_B("Breads", "  the OLD man walked slowly\nalong the quiet village road. ",
                       "bread", SENT)
    assert g["success"] is True


def test_grade_task_B_single_part_and_parse_failures():
    g = G.grade_task_B("bread", None, "bread", SENT)
    assert g["success"] is None and g["repeat_correct"] is None and g["thought_correct"]
    g = G.grade_task_B(None, SENT, "bread", SENT)
    assert g["success"] is None and g["thought_correct"] is None and g["repeat_correct"]
    g = G.grade_task_B(None, SENT, "bread", SENT, asked=("thought", "repeat"))
    assert g["success"] is False and g["thought_correct"] is False and not g["parse_ok"]


def test_grade_task_B_mc():
    g = G.grade_task_B(None, None, "bread", SENT, mc_choice=4, mc_answer=4)
    assert g["mc_correct"] is True and g["success"] is None and g["parse_ok"]
    g = G.grade_task_B(None, None, "bread", SENT, mc_choice=2, mc_answer=4)
    assert g["mc_correct"] is False
    g = G.grade_task_B(None, None, "bread", SENT, mc_choice=None, mc_answer=4)
    assert g["mc_correct"] is False and not g["parse_ok"]


# ---------------------------------------------------------------- task C


@pytest.mark.parametrize(
    "text,expected",
    [
        ("INTENT: YES", "YES"),
        ("INTENT: NO", "NO"),
        ("intent: no.", "NO"),
        ("INTENT: YES\nINTENT: NO", "UNKNOWN"),
        ("INTENT: MAYBE", "UNKNOWN"),
        ("Yes, I meant to say that.", "YES"),
        ("I meant to say it; the word fits the sentence.", "YES"),
        ("It was intentional.", "YES"),
        ("It was not an accident.", "YES"),
        ("That wasn't a mistake, I chose it on purpose.", "YES"),
        ("It was an accident.", "NO"),
        ("I didn't mean to say that.", "NO"),
        ("I did not mean to say that; it was a mistake.", "NO"),
        ("That was not intentional.", "NO"),
        ("It was unintended.", "NO"),
        ("Sorry, that was accidental.", "NO"),
        ("I'm sorry for any confusion, but I'm here to", "NO"),
        ("I apologize; I meant to say that.", "UNKNOWN"),
        ("I don\u2019t think I meant that.", "NO"),
        ("I'm not sure.", "UNKNOWN"),
        ("I meant it, but it was also an accident.", "UNKNOWN"),
        ("", "UNKNOWN"),
    ],
)
def test_parse_intent(text, expected):
    assert G.parse_intent(text) == expected


def test_grade_task_C():
    assert G.grade_task_C("YES") == {"label": "YES", "intentional": True, "correct": None}
    assert G.grade_task_C("NO", "NO")["correct"] is True
    assert G.grade_task_C("YES", "NO")["correct"] is False
    g = G.grade_task_C("UNKNOWN", "NO")
    assert g["intentional"] is None and g["correct"] is False


# ---------------------------------------------------------------- yes/no token probabilities


@pytest.fixture(scope="module")
def tiny_tokenizer():
    """Offline word-level tokenizer (no downloads): 'YES' and ' NO' are unknown words."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    words = ["<unk>", "yes", "Yes", "no", "No", "maybe", "the", "Human", "Assistant:"]
    tok = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>")
    )
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


def test_yes_no_token_ids(tiny_tokenizer):
    yes, no = G.yes_no_token_ids(tiny_tokenizer)
    assert yes == [1, 2] and no == [3, 4]  # unknown spellings (-> <unk>) are excluded


def test_yes_no_token_ids_requires_both(tiny_tokenizer):
    class OnlyYes:
        unk_token_id = 0

        def encode(self, s, add_special_tokens=False):
            return [1] if s.strip().lower() == "yes" else [0]

        def decode(self, ids):
            return "yes" if ids == [1] else "<unk>"

    with pytest.raises(ValueError, match="single-token"):
        G.yes_no_token_ids(OnlyYes())


def test_yes_no_probs():
    torch = pytest.importorskip("torch")
    logits = torch.tensor([0.0, 2.0, 1.0, 1.0, 0.0, -1.0])
    p_yes, p_no, norm = G.yes_no_probs(logits, [1, 2], [3])
    probs = torch.softmax(logits, -1)
    assert math.isclose(p_yes, float(probs[1] + probs[2]), rel_tol=1e-5)
    assert math.isclose(p_no, float(probs[3]), rel_tol=1e-5)
    assert math.isclose(norm, p_yes / (p_yes + p_no), rel_tol=1e-5)
    _, _, norm = G.yes_no_probs(torch.tensor([0.0, -1e4, -1e4]), [1], [2])
    assert math.isclose(norm, 0.5)  # finite even when both masses underflow


def test_judge_protocol_is_structural():
    class Dummy:
        def __call__(self, question, response, rubric):
            return {"label": "YES"}

    judge: G.Judge = Dummy()
    assert judge("q", "r", "rubric")["label"] == "YES"
