"""``--option KEY=VALUE``: the keys each task reads, checked before anything runs.

Why a table here: a task reads its options wherever it needs them (``cfg.option("n_bias")``
in task A, ``_opt(ctx, "history_len")`` deep in the Delegate Game's pool), and an unknown key
is simply never read, so a typo used to run the defaults in silence. The command line checks
every key against this table and stops with one line naming the valid ones.
``tests/test_cli_options.py`` reads the tasks' source and fails when a task starts reading a
key that is missing here, or stops reading one that is listed.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from introspect.tasks.base import ConfigError

# Read for every task: the prompt format (tasks.fewshot), the placebo run and the vector
# prompts' template (tasks.runner).
EVERY_TASK = ("format", "placebo", "vector_template")
# Read by every self-knowledge task (tasks.selfknowledge.common): items, budget calibration, draws.
SELF_KNOWLEDGE = ("calibrate", "draws", "n")
_DELEGATE = ("anchors", "calibrate_pool", "calibration_n", "digits", "feedback", "game_n", "history_len",
             "judge", "ops", "pool", "questions", "rotations", "short_answer", "short_tokens", "stratify",
             "teammate_accuracy", "terms")

TASK_OPTIONS: dict[str, tuple[str, ...]] = {
    "A": ("latent_naming", "n_bias", "regions", "steer_check"),
    "B": (),
    "C": (),
    "D": ("n_control_words",),
    "seb-association": (*SELF_KNOWLEDGE, "list_tokens", "n_options", "predict_tokens", "targets"),
    "seb-restriction": (*SELF_KNOWLEDGE, "questions", "response_tokens"),
    "seb-difficulty": (*SELF_KNOWLEDGE, "answer_tokens", "digits", "groups", "ops", "prefill", "questions",
                       "rank_tokens", "terms"),
    "delegate": (*SELF_KNOWLEDGE, *_DELEGATE),
    "delegate-probe": (*SELF_KNOWLEDGE, *_DELEGATE, "layer", "steer"),
    "recovery": (*SELF_KNOWLEDGE, "answer_tokens", "digits", "fallback_tokens", "insert_after", "kinds",
                 "n_tokens", "ops", "terms"),
    "ability": (*SELF_KNOWLEDGE, "ability_items", "ability_n", "cloze", "data_dir"),
    "refusal": ("data", "n_prompts"),
}


def keys_for(task: str) -> tuple[str, ...]:
    """Every option key ``task`` reads, sorted (the shared ones included)."""
    return tuple(sorted({*EVERY_TASK, *TASK_OPTIONS.get(task, ())}))


def check(options: Mapping[str, Any] | Iterable[str], tasks: Iterable[str], where: str = "--option") -> None:
    """Refuse a key that none of ``tasks`` reads: one ``ConfigError`` line with the valid keys.

    Task names this table does not know are left to the runner's own check (it names the
    registered tasks)."""
    known = [t for t in dict.fromkeys(tasks) if t in TASK_OPTIONS]
    if not known:
        return
    valid = sorted({k for t in known for k in keys_for(t)})
    for key in options:
        if key not in valid:
            near = difflib.get_close_matches(str(key), valid, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ConfigError(f"{where}: unknown option {key!r} for task{'s' if len(known) > 1 else ''} "
                              f"{', '.join(known)}{hint}; valid keys: {', '.join(valid)}")


def help_lines(task: str) -> str:
    """The keys of one task for ``--help``, without the ones every task takes."""
    own = sorted(TASK_OPTIONS.get(task, ()))
    return ", ".join(own) if own else "(none of its own)"
