"""Paper 002's own figures (Self-Execution Benchmark), beside ours on the comparison page.

Only the figures its text states are here: its per-model bars are images. They are text
accuracies as 002 scores them (a reply in the wrong format counts wrong; chance 0.50), on
closed models far larger than the ones this toolkit usually runs, so they are a yardstick for the
``text_*`` rows, not a comparison under the same conditions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Reported:
    task: str  # our task name, or "seb-mean" for 002's average over its three tests
    model: str
    value: float
    where: str  # the section of 002 that states it


REPORTED: tuple[Reported, ...] = (
    Reported("seb-association", "o1-mini (best of all models)", 0.63, "§4.1"),
    Reported("seb-restriction", "Gemini 2.5 Pro", 0.32, "§4.2"),
    Reported("seb-difficulty", "GPT-4.1", 0.73, "§4.3"),
    Reported("seb-difficulty", "Gemini 2.5 Pro", 0.71, "§4.3"),
    Reported("seb-difficulty", "Gemini 2.5 Flash", 0.68, "§4.3"),
    Reported("seb-difficulty", "o4-mini", 0.67, "§4.3"),
    Reported("seb-difficulty", "larger models (Claude, DeepSeek, GPT, Gemini), about", 0.70, "§4.3"),
    Reported("seb-difficulty", "smaller models (Llama, Qwen, Mistral), about", 0.60, "§4.3"),
    Reported("seb-mean", "o4-mini (best of all models)", 0.73, "§4.4"),
    Reported("seb-mean", "Qwen 2.5 7B", 0.58, "§4.4"),
    Reported("seb-mean", "Gemini 2.5 Pro", 0.50, "§4.4"),
)
OURS = {"seb-association": "text_accuracy", "seb-restriction": "text_accuracy",
        "seb-difficulty": "text_pair_accuracy", "seb-mean": "seb_mean_accuracy (logit readings)"}


def reported_rows(tasks: Iterable[str]) -> list[list[str]]:
    """(test, model, 002's accuracy, where, our row to read it against) for the SEB tasks present."""
    have = set(tasks)
    if not have & set(OURS):
        return []
    return [[r.task, r.model, f"{r.value:.2f}", r.where, OURS[r.task]] for r in REPORTED
            if r.task in have or (r.task == "seb-mean" and {"seb-association", "seb-restriction",
                                                             "seb-difficulty"} <= have)]
