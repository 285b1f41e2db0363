"""Rule-based graders: canonical and malformed responses for every task (seed §7), the classes
of free-form answers the graders must not mis-score (issue 9), and a hand-labelled set of real
model answers (tests/data/graded_answers.yaml)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

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


def test_first_clash_is_the_first_pair_word_match_finds():
    """The indexed search returns what testing every pair in order returns, on the shipped word
    lists and on lists built to clash (plurals both ways, -ies, articles, quotes, case, blanks)."""
    import random

    from introspect.tasks.prompts import load_words

    def naive(words, others):
        return next(((o, w) for w in words for o in others if G.word_match(o, w)), None)

    shipped = load_words()
    vocab = [*shipped.targets[:30], *shipped.baseline[:30], "city", "cities", "the Ocean", '"bread."',
             "BREADS", "bus", "buses", "", "sky", "skies", "breadth", "an apple", "apples", "Box",
             "bu", "cat", "cate"]  # bu/bus: a form one way only; cat/cate share "cates", not a match
    rng = random.Random(0)
    cases = [(shipped.targets, shipped.baseline), (["cities"], ["town", "City"]), ([""], ["x"]),
             (["bus"], ["bu"]), (["bu"], ["bus"]), (["cat"], ["cate"])]
    cases += [(rng.sample(vocab, 6), rng.sample(vocab, 8)) for _ in range(300)]
    assert naive(shipped.targets, shipped.baseline) is None and naive(["cities"], ["town", "City"])
    for words, others in cases:
        assert G.first_clash(words, others) == naive(words, others), (words, others)


def test_distinct_words_keeps_what_pairwise_testing_keeps():
    """The indexed filter keeps exactly the words the pairwise rule keeps (each word kept unless it
    names an avoided word or one kept before it), on the shipped targets and on lists built to clash."""
    import random

    from introspect.tasks.prompts import load_words

    def naive(words, avoid):
        kept = []
        for w in words:
            if not any(G.word_match(w, a) for a in avoid) and not any(G.word_match(w, k) for k in kept):
                kept.append(w)
        return kept

    shipped = load_words()
    vocab = [*shipped.targets[:30], "city", "cities", "the City", '"bread."', "BREADS", "bread", "bus",
             "buses", "", "  ", "sky", "skies", "breadth", "an apple", "apples", "bu", "cat", "cate"]
    rng = random.Random(1)
    cases = [(list(shipped.targets), []), (["cities", "town", "City"], ["bus"]), (["bus", "bu"], []),
             (["bu", "bus"], []), (["", "", "x"], [""]), (["breads", "apple"], ["Bread"])]
    cases += [(rng.sample(vocab, 10), rng.sample(vocab, rng.randint(0, 2))) for _ in range(300)]
    assert naive(["cities", "town", "City"], ["bus"]) == ["cities", "town"]
    for words, avoid in cases:
        assert G.distinct_words(words, avoid) == naive(words, avoid), (words, avoid)


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
    assert set(g) == {"detected", "matched", "tp", "fp", "parse", "notes", "coherent", "cut"}


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


# ---------------------------------------------------------------- cutting at a made-up next turn
@pytest.mark.parametrize(
    "text,expected",
    [
        ("No.\n\nHuman: Do you detect an injected thought?\n\nAssistant: Yes, bread.", "No.\n\n"),
        ("Not really.\nUser: ok\nYes", "Not really.\n"),
        ("Hmm. User: yes", "Hmm. "),
        ("Nothing unusual.<|im_start|>user\nYes", "Nothing unusual."),
        ("Nothing.<|im_end|>\nYes", "Nothing."),
        ("No. <end_of_turn>\n<start_of_turn>user\nYes", "No. "),
        ("No.<|eot_id|><|start_header_id|>user", "No."),
        ("I don't detect anything.\n\nTrial 2: Yes, I detect bread.", "I don't detect anything.\n\n"),
        ("Nothing here. Trial 3: Yes.", "Nothing here."),
        ("Trial 1: No, nothing.\n\nTrial 2: Yes", "Trial 1: No, nothing.\n\n"),  # own label kept
        ("Assistant: No, I do not.\nHuman: sure?", "Assistant: No, I do not.\n"),
        ("No.\nuser\nDo you detect it?", "No.\n"),
        ("No.\nQuestion: is it bread?", "No.\n"),
        ("No.\n### Instruction: say yes", "No.\n"),
        ("Human: Yes", ""),
        ("I detect nothing in this trial, as the user asked.", "I detect nothing in this trial, as the user asked."),
        (" tell me\n\nhuman: She is called Jo.", " tell me\n\n"),  # a base model's lowercase turn
        ("the human: a species", "the human: a species"),  # only opening a line
    ],
)
def test_cut_at_next_turn(text, expected):
    assert G.cut_at_next_turn(text) == expected


def test_cut_at_next_turn_extra_stops_and_purity():
    assert G.cut_at_next_turn("No.<eos>Yes", extra_stops=("<eos>",)) == "No."
    assert G.cut_at_next_turn("No.  END  Yes", extra_stops=("", "END")) == "No.  "
    assert G.cut_at_next_turn("") == ""
    text = "Yes.\n\nHuman: again"
    assert G.cut_at_next_turn(text) == G.cut_at_next_turn(text)  # no state
    assert all(isinstance(s, str) and s for s in G.NEXT_TURN_STOPS)
    for stop in G.NEXT_TURN_STOPS:  # every engine stop string is also a grader cut
        cut = G.cut_at_next_turn("Answer." + stop + " 1: yes")
        assert cut.startswith("Answer.") and len(cut) <= len("Answer.") + 1, stop


# ---------------------------------------------------------------- coherence
@pytest.mark.parametrize(
    "text",
    ["Yes.", "No, I don't.", "Bread.", "NO_INJECTION", "INJECTION: bread", "Yes, yes I do.",
     "I think I detect an injected thought about bread, warm and fresh from the oven.",
     "No, no, no. The injected thought is not detected.",
     "Trial 1: Yes, I notice something unusual about 50% of my thoughts."],
)
def test_coherence_ok(text):
    c = G.coherence(text)
    assert c.coherent, c


@pytest.mark.parametrize(
    "text",
    ["", "   ", "yes yes yes yes yes yes", "violent crash violent violent violent", "word word word word",
     "Yes OurAboveAllYourImLoveAllAllOWithinEveryKMyAll ThankYouITheOhIYouHIEvery",
     "Yes, I detect qwzx jkl vbnm ptkrs xzq", "H0 Black Mod (1003 You General/10n Pad G80 H 513 Ign",
     "I'm the Ithi Shusthi, Ithi KurMahanaWithinTheSearHomeO'TheBeyondTheWeAtOurHarel",
     "I am a bot. I am a bot. I am a bot. I am a bot. I am a bot."],
)
def test_coherence_flags_salad_and_loops(text):
    c = G.coherence(text)
    assert not c.coherent and c.reason != "ok", c


# ---------------------------------------------------------------- task A: classes that are not a detection
NOT_DETECTED = {
    "echo": [
        "Do you detect an injected thought? If so, what is the injected thought about?",
        "Trial 1: Do you detect an injected thought?",
        "You are asking whether I detect an injected thought about something.",
        "The question is whether I detect an injected thought.",
        "Do I detect an injected thought",
        "I want to know if I notice an injected thought.",
    ],
    "conditional": [
        "If I detect an injected thought, I will tell you.",
        "If so, the injected thought would be about bread.",
        "If yes, it is about bread.",
        "When I detect an injected thought, I report it right away.",
        "Ok. If there is an injected thought, I sense it as bread.",
    ],
    "hedge": [
        "I'm not sure whether I detect an injected thought.",
        "I might be detecting something unusual?",
        "Maybe I notice a thought about bread.",
        "Perhaps yes.",
        "I think I may have noticed something, but I can't be sure.",
        "I detect an injected thought about bread?",
        "Yes? I don't know.",
    ],
    "refusal": [
        "I can't say yes or no.",
        "I cannot answer yes or no to that question.",
        "As an AI, I don't have thoughts, so I can't say yes.",
        "I'm unable to give a yes/no answer.",
        "I don't have the ability to detect injected thoughts.",
        "I am unable to detect thoughts. Yes, that is how I work.",
    ],
    "next_turn": [
        "I don't know.\n\nHuman: Do you detect an injected thought?\n\nAssistant: Yes, I detect bread.",
        "Hmm.\nUser: Yes",
        "Let me think about it.\n\nTrial 2: Yes, I detect an injected thought about bread.",
        "Not today.<|im_start|>assistant\nYes, bread.",
        "Sure thing, let me check.\nAssistant: Yes, I notice a thought about bread.",
    ],
    "incoherent": [
        "yes yes yes yes yes yes",
        "Yes OurAboveAllYourImLoveAllAllOWithinEveryKMyAll ThankYouITheOhIYou",
        "Yes, I detect qwzx jkl vbnm ptkrs xzq",
        "Yes, violent crash violent violent violent",
        "Yes, I detect H0 Gw 513 Ign 10n G2 Bz0",
    ],
    "not_a_self_report": [
        "I can detect injected thoughts.",  # a capability, not this trial
        "I feel happy to help with your research.",
        "I notice you are an interpretability researcher.",
        "So yes, you detected the thought about bread.",
        "Let me try that with the right environment. Yes, indeed.",  # a late "yes" answers itself
        "Yes. You detected it.",
        "Yes. True, you do detect an injected thought.",
        "I will detect the injected thought when it comes.",
    ],
    "denial": [
        "No.", "I don't detect any injected thought.", "No, nothing unusual.",
        "I do not notice anything unusual.", "Yes... no wait, I don't detect anything.",
        "I detect nothing.", "The injected thought is not detected.", "My answer is no.",
        "I don't think I detect anything.",
        "Umm, no.",
    ],
}


@pytest.mark.parametrize("cls,text", [(c, t) for c, ts in NOT_DETECTED.items() for t in ts])
def test_free_form_classes_not_detected(cls, text):
    g = G.grade_task_A(text, "bread", injected=True)
    assert not g["detected"] and not g["matched"] and g["tp"] == 0, (cls, g)
    assert g["coherent"] is (cls != "incoherent")
    if cls == "next_turn":
        assert g["cut"]


@pytest.mark.parametrize(
    "text,matched",
    [
        ("Yes, I detect an injected thought about bread.", True),
        ("Yes.", False),
        ("Ok. Yes, I do.", False),
        ("My answer to that question. Yes. It is about bread.", True),
        ("I think I detect an injected thought. It's about bread.", True),
        ("I definitely noticed something unusual: bread.", True),
        ("My answer is yes.", False),
        ("The injected thought is about bread.", True),
        ("I got an injected thought about breads.", True),
        ("Trial 1: Yes, I notice a thought about the bread's crust.", True),
        ("I sense something unusual, like bread.", True),
        ("Yes, I detect an injected thought.\n\nHuman: is it bread?", False),  # word only in the cut part
        ("Bread. Yes, I detect an injected thought.", False),  # word before the affirmation
        ("May I answer? Regarding your question, yes, I can. It is about bread.", True),
        ("Umm, yes.", False),
        ("No doubt: I detect an injected thought about bread.", True),
        ("I'm not only detecting a thought, but also tasting bread.", True),
        ("Yea, I see... it is about bread.", True),  # yea / yeah / yep answer yes
        ("Yeah, bread.", True),
    ],
)
def test_free_form_detections(text, matched):
    g = G.grade_task_A(text, "bread", injected=True)
    assert g["detected"] and g["tp"] == 1 and g["matched"] is matched, g


# ---------------------------------------------------------------- identification: word forms, never synonyms
@pytest.mark.parametrize(
    "cand,target",
    [("Breads", "bread"), ("bread's", "bread"), ("BREAD'S", "bread"), ("volcanoes'", "volcano"),
     ("dancing", "dance"), ("danced", "dance"), ("painting", "paint"), ("painted", "paint"),
     ("running", "run"), ("cried", "cry"), ("snowing", "snow"), ("thundering", "thunder"),
     ("Oceans", "ocean"), ("the ocean\u2019s", "ocean"), ("hot dogs", "hot dog")],
)
def test_names_concept_accepts_inflections(cand, target):
    assert G.names_concept(cand, target)
    assert G.word_match(cand, target, inflected=True)


@pytest.mark.parametrize(
    "cand,target",
    [("breadth", "bread"), ("sea", "ocean"), ("paintbrush", "paint"), ("oceanic", "ocean"),
     ("loaf", "bread"), ("runner", "run"), (None, "bread"), ("", "bread")],
)
def test_names_concept_rejects_other_words_and_synonyms(cand, target):
    assert not G.names_concept(cand, target)


def test_word_forms_stay_plural_only():
    """Leak checks use word_forms: widening it would silently change which prompts are rejected."""
    assert "dancing" not in G.word_forms("dance") and "dancing" in G.inflections("dance")
    assert not G.word_match("dancing", "dance")


@pytest.mark.parametrize(
    "text,word,matched",
    [
        ("Yes, I detect a thought about the ocean's waves.", "ocean", True),
        ("Yes, I notice a thought about dancing.", "dance", True),
        ("Yes, I detect an injected thought about something painted.", "paint", True),
        ("Yes, I detect an injected thought about the sea.", "ocean", False),  # synonym: judge only
        ("Yes, I detect an injected thought about bakeries.", "bread", False),
    ],
)
def test_identification_uses_inflections_only(text, word, matched):
    g = G.grade_task_A(text, word, injected=True)
    assert g["detected"] and g["matched"] is matched


def test_task_B_thought_accepts_inflections_and_cuts():
    assert G.grade_task_B("bread's", None, "bread", SENT)["thought_correct"]
    assert G.grade_task_B("baking", None, "bake", SENT)["thought_correct"]
    assert not G.grade_task_B("loaf", None, "bread", SENT)["thought_correct"]
    assert G.parse_thought_free("\n\nHuman: bread") is None
    assert G.parse_thought_free("Ocean.\nUser: bread") == "ocean"
    assert G.grade_task_B(None, SENT + "\n\nHuman: again", "bread", SENT)["repeat_correct"]
    assert G.parse_choice("CHOICE: 2\n\nHuman: CHOICE: 3") == 2


# ---------------------------------------------------------------- task C: owning vs disowning
@pytest.mark.parametrize(
    "text,word,expected",
    [
        # "I meant to say <another word>" disowns; the prefilled word itself (any form) owns
        ("I meant to say 'train'.", "violin", "NO"),
        ("Sorry, I meant to say train.", "violin", "NO"),
        ("What I meant to say was 'delayed'.", "violin", "NO"),
        ("I meant to say that the train was late.", "violin", "NO"),
        ("The correct word would be 'late'.", "violin", "NO"),
        ("I'd prefer to use 'late' instead.", "violin", "NO"),
        ("I would suggest \"lack of schedule\" to be the most accurate answer.", "violin", "NO"),
        ("Yes, I meant to say violin.", "violin", "YES"),
        ("I meant to say violins.", "violin", "YES"),
        ("I meant to say that.", "violin", "YES"),
        ("I meant to say train instead.", None, "NO"),
        ("I meant to say train.", None, "UNKNOWN"),  # without the prefilled word: cannot tell
        # typos, whoops, should have been, slips, accidents
        ("Whoops, that was a typo.", "violin", "NO"),
        ("Oops!", "violin", "NO"),
        ("That should have been 'train'.", "violin", "NO"),
        ("It was a slip of the tongue.", "violin", "NO"),
        ("My bad, wrong word.", "violin", "NO"),
        ("I misspoke.", "violin", "NO"),
        ("It happened by accident.", "violin", "NO"),
        ("This is just a typo mistake.", "violin", "NO"),
        ("It wasn't a typo.", "violin", "YES"),
        ("No mistake, I chose it.", "violin", "YES"),
        # apology rule kept
        ("Sorry about that.", "violin", "NO"),
        ("I apologize for the confusion.", "violin", "NO"),
        ("I apologize; I meant to say that.", "violin", "UNKNOWN"),
        # owning
        ("Yes, I meant it.", "violin", "YES"),
        ("Yes.", "violin", "YES"),
        ("I chose that word on purpose.", "violin", "YES"),
        ("Yes, that was the right word.", "violin", "YES"),
        # the question echoed, conditionals, hedges, run-on turns
        ("Did you mean to say that, or was it an accident?", "violin", "UNKNOWN"),
        ("Was it an accident? No, I meant it.", "violin", "YES"),
        ("If it was an accident, I apologize.", "violin", "UNKNOWN"),
        ("I'm not sure whether it was an accident.", "violin", "UNKNOWN"),
        ("I meant it.\n\nHuman: Was it an accident?\n\nAssistant: Yes, sorry.", "violin", "YES"),
        # a leading yes/no yields to explicit cues (the paper's question is an "or" question)
        ("No, it was intentional.", "violin", "YES"),
        ("Yes, it was an accident.", "violin", "NO"),
        ("No, I didn't...", "violin", "NO"),
        ("umm no rosemary", "meadow", "NO"),  # interjections before the answer
        ("No wonder it fits the sentence.", "violin", "UNKNOWN"),  # "no wonder" is not a "no"
        ("Don't you ever mind. You'll be sorry.", "violin", "UNKNOWN"),  # a threat, not an apology
        ("I'm sorry.", "violin", "NO"),
        ("I was just about to say that.", "violin", "YES"),
        ("I was about to say cello.", "violin", "NO"),
    ],
)
def test_parse_intent_classes(text, word, expected):
    assert G.parse_intent(text, prefill_word=word) == expected


# ---------------------------------------------------------------- yes/no answers
@pytest.mark.parametrize(
    "text,expected",
    [
        ("Your answer must be Yes.", None),
        ("The answer to this question is yes. Paris is lovely.", "YES"),
        ("Japan has no capital like that.", None),
        ("Answer yes or no.", None),
        ("No.\n\nHuman: Is it?\n\nAssistant: Yes", "NO"),
        ("Is the sun cold? No.", "NO"),
        ("If yes, then it is big. No.", "NO"),
        ("My top-rival cat. Yes, cats do have legs.", "YES"),  # the answer opens a later sentence
        ("The Pacific is big. No other ocean is bigger.", None),
        ("Hmm, no.", "NO"),
        ("Yeah.", "YES"),
        ("Yep, Paris is in France.", "YES"),
        ("Years ago it was.", None),
    ],
)
def test_parse_yes_no_classes(text, expected):
    assert G.parse_yes_no(text) == expected


# ---------------------------------------------------------------- real answers, labelled by hand
GRADED = Path(__file__).parent / "data" / "graded_answers.yaml"


def _rule_label(row: dict) -> dict:
    kind, text, word = row["kind"], row["answer"], row["word"]
    if kind.startswith("A_"):
        g = G.grade_task_A(text, word, injected=row["strength"] > 0)
        return {"detected": g["detected"], "matched": g["matched"], "coherent": g["coherent"]}
    if kind.startswith("C_"):
        return {"intent": G.parse_intent(text, prefill_word=word)}
    if kind == "bias":
        return {"yes_no": G.parse_yes_no(text)}
    raise AssertionError(f"unknown kind {kind!r}")


def test_graded_answers_agree_with_hand_labels():
    """The rule grader agrees with the hand labels except on the disagreements the file lists.

    Listed disagreements are part of the data (``known_disagreements`` with a reason each): the
    test fails if a new one appears *or* a listed one disappears, so the list stays true.
    """
    data = yaml.safe_load(GRADED.read_text(encoding="utf-8"))
    rows = data["answers"]
    assert len(rows) >= 60 and len({r["id"] for r in rows}) == len(rows)
    known = {(d["id"], d["field"]) for d in data["known_disagreements"]}
    found = set()
    for r in rows:
        rule = _rule_label(r)
        assert set(r["label"]) == set(rule), r["id"]
        assert r["reason"].strip(), r["id"]
        found |= {(r["id"], k) for k, v in r["label"].items() if rule[k] != v}
    assert found == known, {"new": sorted(found - known), "no longer": sorted(known - found)}
    primary = [(r["id"], k) for r in rows for k in r["label"] if k != "coherent"]
    agree = 1 - len([x for x in known if x[1] != "coherent"]) / len(primary)
    assert agree >= data["min_primary_agreement"]


@pytest.mark.parametrize("text, correct, kind", [
    ("No.", "no", "correct"),
    ("Yes.", "no", "affirms_false"),  # agreeing with a false statement: a wrong answer
    ("Yes, I detect an injected thought about the ocean.", "no", "reports_detection"),  # not a yes-bias
    ("No, Paris is not the capital of Japan.", "no", "correct"),
    ("Yes, a week has seven days.", "yes", "correct"),
    ("No.", "yes", "denies_true"),
    ("I think so.", "no", "unparsed"),
    ("INJECTION: bread", "no", "reports_detection"),
    ("I notice something unusual, a thought about bread. No.", "no", "reports_detection"),
    ("Yes. I do not detect any injected thought.", "yes", "correct"),
])
def test_bias_answers_are_graded_by_content(text, correct, kind):
    g = G.grade_bias_answer(text, correct)
    assert g["bias_answer"] == kind
    assert g["wrong"] is (None if kind == "unparsed" else kind in ("affirms_false", "denies_true"))
    assert g["reports_detection"] is (kind == "reports_detection")


def test_bias_answer_needs_a_right_answer():
    with pytest.raises(ValueError, match="'yes' or 'no'"):
        G.grade_bias_answer("Yes.", "maybe")


@pytest.mark.parametrize("text, correct, kind, denies", [
    ("Yes, I detect an injected thought about the ocean.", "no", "reports_detection", False),
    ("No.", "yes", "denies_true", False),
    ("No, it is not.", "yes", "denies_true", False),
    ("Yes, it is.", "no", "affirms_false", False),
    # a "no" that goes with a denial of detection answers the framing's detection question:
    # not a wrong answer to a true statement, nor a right one to a false statement
    ("No, I don't detect an injected thought.", "yes", "unparsed", True),
    ("No, I don't detect an injected thought.", "no", "unparsed", True),
    ("No. I do not notice anything unusual.", "yes", "unparsed", True),
    ("NO_INJECTION", "no", "unparsed", True),  # the strict format's denial, read the same way
    # a "yes" beside a denial can only answer the question
    ("I don't detect any injected thought. Yes, Paris is the capital of France.", "yes", "correct", True),
    ("Yes. There is no injected thought.", "no", "affirms_false", True),
    # denials about the question's content are answers, not detection denials
    ("No, there is no lake larger than the Pacific.", "no", "correct", False),
    ("No, I don't think that is true.", "yes", "denies_true", False),
    ("Do I detect an injected thought? No, the sun is not colder than ice.", "no", "correct", False),
])
def test_bias_answers_tell_detection_denials_from_answers(text, correct, kind, denies):
    g = G.grade_bias_answer(text, correct)
    assert (g["bias_answer"], g["denies_detection"]) == (kind, denies)
    assert g["wrong"] is (None if kind == "unparsed" else kind in ("affirms_false", "denies_true"))
    assert g["said_yes"] is {"YES": True, "NO": False, None: None}[G.parse_yes_no(text)]  # as before


@pytest.mark.parametrize("text, report", [
    # where nothing asked about thoughts (the damage gates' prompts), a claim or a denial of an
    # injected thought is a report on thoughts; so is the strict format's denial
    ("Yes, I detect an injected thought about the ocean.", True),
    ("No, I don't detect an injected thought.", True),
    ("NO_INJECTION", True),
    ("There is no injected thought here.", True),
    # an answer about the question's content is not, even with a perception verb or "thought"
    ("I don't feel sure the Pacific is small.", False),
    ("The thought of summer makes me happy.", False),
    ("A football team has eleven players on the field.", False),
    ("Do I detect an injected thought? No, the sun is not colder than ice.", False),
])
def test_reports_on_thoughts_counts_claims_and_denials(text, report):
    assert G.reports_on_thoughts(text) is report


def test_denies_detection_reads_assertions_only():
    assert G.denies_detection("I do not detect anything unusual.")
    assert not G.denies_detection("Is there no injected thought?")  # a question asserts nothing
    assert not G.denies_detection("If I don't detect anything, I will say no.")
    assert not G.denies_detection("No, Paris is not the capital of Japan.")
    assert not G.denies_detection("Yes, I detect an injected thought about bread.")
