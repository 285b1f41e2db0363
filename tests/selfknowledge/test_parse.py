"""The text readings of the self-knowledge replies: every case issue 10 lists, and the ones that
must stay unparsed (never silently "kept and wrong")."""

import pytest

from introspect.tasks.selfknowledge.parse import (
    association_reply,
    final_answer,
    is_delegation,
    last_integer,
    listed_words,
    parse_letter,
    parse_ranking,
    stated_result,
)

GAME = "ABCDT"


@pytest.mark.parametrize("text, letters, want", [
    (" **B**", GAME, "B"),
    ("B\n\nExplanation: 23 + 58 is 81.", GAME, "B"),
    ("B is correct", GAME, "B"),
    ('"B"', GAME, "B"),
    ("T (delegate)", GAME, "T"),
    ("The answer is (C) because option D is too small", GAME, "C"),
    ("A: It will provide an answer", "AB", "A"),
    (" B", "AB", "B"),
    ("Option B, because", "AB", "B"),
    ("I think (B) applies", "AB", "B"),
    ("The answer is C.", "ABCD", "C"),
    ("Answer: B", "ABCD", "B"),
    ("I choose D because A is wrong", "ABCD", "D"),
    (" T", GAME, "T"),
    ("C.", GAME, "C"),
    ("(D)", GAME, "D"),
    ("`A`", "ABCD", "A"),
    # a stated answer introduced by "option is", then a rejected alternative
    ("The correct option is B, not C.", "ABCD", "B"),
    ("The best option is C rather than A, since 23 + 58 = 81.", "ABCD", "C"),
    ("The right option is (D); option A would be wrong because it is too small.", "ABCD", "D"),
    ("My chosen option is A. Option B is incorrect here.", "ABCD", "A"),
    ("Option A is wrong; the correct option is B.", "ABCD", "B"),
    ("The answer is not A, the correct option is C.", "ABCD", "C"),
    # contractions before the verb
    ("I'll go with B, because 81 is the sum.", "ABCD", "B"),
    ("I’d choose D.", "ABCD", "D"),
    ("I'd say the answer is C.", "ABCD", "C"),
])
def test_parse_letter_reads(text, letters, want):
    assert parse_letter(text, letters) == want


@pytest.mark.parametrize("text, letters", [
    ("A pet goldfish is a wonderful choice.", "AB"),  # the article
    ("the answer is a", "ABCD"),  # lower case never counts
    ("Either A: x or B: y", "AB"),  # ambiguous
    ("As an AI I would answer", "AB"),
    ("T cells are part of the immune system", GAME),
    ("T-Mobile is a phone company", GAME),
    ("I am not sure.", GAME),
    ("", GAME),
    ("Option A is wrong.", "ABCD"),  # a rejected letter is no answer
    ("The answer is not B.", "ABCD"),
])
def test_parse_letter_leaves_non_answers_unparsed(text, letters):
    assert parse_letter(text, letters) is None


@pytest.mark.parametrize("text, want", [
    ("T", True), (" T.", True), ("T (delegate)", True), ("I will delegate this one.", True),
    ("Delegate.", True), ("T cells", False), ("T-Mobile", False), ("Paris", False),
    ("Mr. T", False), ("The Tate Modern", False),
    # a contraction before the verb of the hand-over
    ("I'd delegate this question to my teammate.", True), ("I'll delegate this one.", True),
    ("I’ll let my teammate answer this one.", True), ("I'd rather pass on this one.", True),
    ("I'd like to delegate this to my teammate, since I am not sure.", True),
    ("I'll hand this question to my teammate.", True), ("I would prefer to delegate.", True),
    ("I'd say Paris.", False), ("I'll answer this myself: Paris.", False),
    ("I won't delegate this one: it is Paris.", False), ("I'd never delegate a question I know: Paris", False),
])
def test_is_delegation(text, want):
    assert is_delegation(text) is want


def test_listed_words_drop_filler_and_lead_ins():
    assert listed_words("Sure! Here you go:\n1. Water\n2. Waves\n3. Salt\n4. Fish\n5. Blue") == \
        ["water", "waves", "salt", "fish", "blue"]
    assert listed_words("Sure, here you go: salt, fish, sand, waves, blue") == \
        ["salt", "fish", "sand", "waves", "blue"]
    assert listed_words("The words are: Waves, salt water, Fish, blue, sand") == \
        ["waves", "salt water", "fish", "blue", "sand"]
    assert listed_words("Okay. Here you go!\nSnow, ice, cold") == ["snow", "ice", "cold"]
    got = listed_words("Sure, here you go")
    assert "sure" not in got and "here you go" not in got and got == []
    assert listed_words("I think the ocean is a very big place full of life") == []


def test_association_reply_negation_none_and_unparsed():
    opts = ["water", "fish", "salt", "coral"]
    assert association_reply("Water and fish, but not salt", opts) == [True, True, False, False]
    assert association_reply("salt was not on it; coral was", ["salt", "coral"]) == [False, True]
    assert association_reply("Fishes, except coral.", ["fish", "coral"]) == [True, False]
    assert association_reply("None of them.", ["salt", "coral"]) == [False, False]
    assert association_reply("I like turtles", ["salt", "coral"]) == [None, None]


def test_final_answer_reads_the_statement_not_later_working():
    assert final_answer("23 + 58 = 81. Answer: 81. Then 81 + 3 = 84") == 81
    assert final_answer("first 2+2=4, so Answer: -12") == -12
    assert final_answer("Answer: **1,234**") == 1234
    assert final_answer("The answer is 7.") == 7
    assert final_answer('15 + 47 = 62\n\nThe answer is "62".') == 62  # SmolLM2's quoted answer
    assert final_answer("The answer is 25 + 27 = 52.\nThen 52 + 1 = 53") == 52  # statement as working
    assert final_answer("Answer: 25 + 27") is None  # an expression without its result
    assert final_answer("Answer: -3 because 4 - 7 = -3") == -3
    assert final_answer("23 + 58 = 81") is None  # no statement: unparsed, not the last "="
    assert last_integer("23 + 58 = 81") == 81  # the lenient secondary reading


def test_parse_ranking():
    assert parse_ranking("Q3, Q1, Q4, Q2") == [2, 0, 3, 1]
    assert parse_ranking("From easiest to hardest: Q2 < Q1 < Q3 < Q4") == [1, 0, 2, 3]
    assert parse_ranking("3, 1, 4, 2") == [2, 0, 3, 1]
    assert parse_ranking("Q1, Q2") is None


@pytest.mark.parametrize("text, want", [
    # sampled SmolLM2-135M answers to "What is ...? Give the final answer as 'Answer: <number>'."
    ("122 minus 891 = 11.", 11), ("The equation is 122 - 891 = 67, .", 67), ("2 - 4 equals 2.", 2),
    ("122 - 891 is the decimal number that equals 33.", 33), ('"2 - 4 = 2 remainder 4"', None),
    ("To find 4 * 5 - 3, you can perform the operation on 4 and subtracting 3, which is a standard "
     "multiplication operation.", None),
    ("Two minus four equals zero.", None),  # a word, not a number: no reading
    ("First 2 + 2 = 4.\nThen we keep going with 4 + 3", None),  # trails off in working
])
def test_stated_result_reads_only_a_final_result(text, want):
    assert stated_result(text) == want
