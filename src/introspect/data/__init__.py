"""Loaders for third-party evaluation data, and generated arithmetic with known answers.

One module per source family, each checking its files' layout and failing with one
``DataError`` line naming the file and that layout: ``taboo`` (word-association lists),
``refusal`` (safe/unsafe request sets), ``choice`` (multiple-choice and short-answer question
sets), ``arithmetic`` (generated questions); ``files`` holds the strict readers they share.
Every public name is re-exported here, so ``from introspect.data import ...`` keeps working.
"""

from introspect.data.arithmetic import (
    ArithmeticQuestion,
    arithmetic_mc,
    arithmetic_questions,
    arithmetic_short,
    to_multiple_choice,
    to_short,
)
from introspect.data.choice import (
    GPQA_URL,
    SIMPLEQA_URL,
    MCQuestion,
    ShortQuestion,
    load_gpqa_csv,
    load_hendrycks_csv,
    load_mmlu_jsonl,
    load_questions,
    load_simpleqa_csv,
    split_inline_options,
)
from introspect.data.files import LETTERS, DataError
from introspect.data.refusal import (
    SafetyPrompt,
    load_refusal_requests,
    load_restriction_questions,
    load_xstest,
)
from introspect.data.taboo import (
    TabooItem,
    load_association_targets,
    load_bigbench_taboo,
    load_kovah_taboo,
)

__all__ = [
    "GPQA_URL", "LETTERS", "SIMPLEQA_URL", "ArithmeticQuestion", "DataError", "MCQuestion",
    "SafetyPrompt", "ShortQuestion", "TabooItem", "arithmetic_mc", "arithmetic_questions", "arithmetic_short",
    "load_association_targets", "load_bigbench_taboo", "load_gpqa_csv", "load_hendrycks_csv",
    "load_kovah_taboo", "load_mmlu_jsonl", "load_questions", "load_refusal_requests", "load_restriction_questions",
    "load_simpleqa_csv", "load_xstest", "split_inline_options", "to_multiple_choice", "to_short",
]
