"""Rule-based graders for tasks A–D (seed §7).

Why rules and not an LLM judge: primary metrics must be deterministic and auditable, so every
grade is a pure function of the response text. Strict formats (``INJECTION: w``, ``CHOICE: k``,
``INTENT: YES``) are parsed exactly; the paper's free-form variants use documented rules that
first cut the answer at a made-up next turn (``cut_at_next_turn``) and then read only what it
asserts (not questions, conditionals, hedges or word salad). An optional LLM judge
(``introspect.tasks.judge``) exists for secondary analyses and agreement checks only.

Modules: ``words`` (word forms, matching), ``text`` (cutting, sentences, coherence),
``detection`` (task A and yes/no), ``bias`` (bias-question answers by content), ``formats``
(task B), ``intent`` (task C), ``tokens`` (white-box yes/no probabilities).
"""

from introspect.grading.bias import denies_detection, grade_bias_answer, reports_on_thoughts
from introspect.grading.detection import (
    detection_stance,
    explicit_detection,
    free_form_detection,
    grade_task_A,
    parse_injection_report,
    parse_yes_no,
)
from introspect.grading.formats import grade_task_B, parse_choice, parse_task_B, parse_thought_free
from introspect.grading.intent import grade_task_C, intent_cues, parse_intent
from introspect.grading.text import (
    NEXT_TURN_STOPS,
    Coherence,
    coherence,
    cut_at_next_turn,
    is_question,
    sentences,
)
from introspect.grading.tokens import yes_no_probs, yes_no_token_ids
from introspect.grading.words import (
    concept_pattern,
    distinct_words,
    first_clash,
    first_mention,
    forms_pattern,
    inflections,
    levenshtein,
    names_concept,
    normalize_word,
    word_forms,
    word_match,
)

__all__ = [
    "NEXT_TURN_STOPS", "Coherence", "coherence", "concept_pattern", "cut_at_next_turn",
    "denies_detection", "detection_stance", "distinct_words", "explicit_detection", "first_clash", "first_mention", "forms_pattern",
    "free_form_detection", "grade_bias_answer", "grade_task_A",
    "grade_task_B", "grade_task_C", "inflections", "intent_cues", "is_question", "levenshtein",
    "names_concept", "normalize_word", "parse_choice", "parse_injection_report", "parse_intent",
    "parse_task_B", "parse_thought_free", "parse_yes_no", "reports_on_thoughts", "sentences", "word_forms", "word_match",
    "yes_no_probs", "yes_no_token_ids",
]
