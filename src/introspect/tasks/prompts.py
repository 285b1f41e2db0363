"""Prompt builders for tasks A–D (seed §6) and loaders for the concept/sentence lists.

Why pure functions returning ``Conversation``: the injector needs exact token spans (marks) of
the same text the model reads, and tests must be able to render and leak-check every prompt
without a model. Paper variants follow Lindsey (2025); seed variants use strict answer formats
that ``grading`` parses exactly.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from introspect.data.files import concepts_dir, parse_yaml
from introspect.engine.run.chat import Conversation, Prompt
from introspect.engine.run.inject import From
from introspect.grading import distinct_words, first_clash, forms_pattern, word_forms

VARIANTS: dict[str, tuple[str, ...]] = {
    "A": ("paper", "seed"),
    "B": ("thought", "repeat", "thought_seed", "repeat_seed", "mc"),
    "C": ("paper", "seed"),
    "D": ("plain", "rewarded", "punished"),
}
FROM_MARK = "from"  # task A: inject from this span's first token through every generated token
SENTENCE_MARK = "sentence"  # tasks B/C: inject on the sentence's tokens
TASK_D_MARK = "written"  # task D: the sentence in the prefill; callers use its LAST occurrence


# ---------------------------------------------------------------- loading
@dataclass(frozen=True)
class Words:
    targets: tuple[str, ...]
    baseline: tuple[str, ...]


def _load_mapping(path: Path | str | None, default_name: str) -> tuple[Path, dict[str, Any]]:
    p = Path(path) if path is not None else concepts_dir() / default_name
    try:
        data = parse_yaml(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ValueError(f"{p}: cannot read ({e.strerror or e})") from e
    except yaml.YAMLError as e:
        raise ValueError(f"{p}: not valid YAML ({type(e).__name__})") from e
    if not isinstance(data, dict):
        raise ValueError(f"{p}: expected a YAML mapping, got {type(data).__name__}")
    return p, data


def _string_list(p: Path, data: dict[str, Any], key: str) -> tuple[str, ...]:
    items = data.get(key)
    if not isinstance(items, list) or not items:
        raise ValueError(f"{p}: expected a non-empty list under '{key}:'")
    bad = [x for x in items if not isinstance(x, str) or not x.strip()]
    if bad:
        raise ValueError(f"{p}: '{key}' entries must be non-empty strings, got {bad[0]!r}")
    out = tuple(x.strip() for x in items)
    seen: set[str] = set()
    for x in out:
        if x.casefold() in seen:
            raise ValueError(f"{p}: duplicate entry {x!r} in '{key}'")
        seen.add(x.casefold())
    return out


def load_words(path: Path | str | None = None) -> Words:
    """``targets`` and ``baseline`` word lists; they must not share a word (any plural form)."""
    p, data = _load_mapping(path, "words.yaml")
    targets, baseline = _string_list(p, data, "targets"), _string_list(p, data, "baseline")
    clash = first_clash(targets, baseline)
    if clash is not None:
        raise ValueError(f"{p}: {clash[0]!r} is in both targets and baseline (as {clash[1]!r})")
    return Words(targets, baseline)


def load_sentences(path: Path | str | None = None) -> tuple[str, ...]:
    """Carrier sentences for tasks B–D (``sentences:`` in concepts/sentences.yaml)."""
    p, data = _load_mapping(path, "sentences.yaml")
    return _string_list(p, data, "sentences")


def load_bias_items(path: Path | str | None = None) -> tuple[tuple[str, str], ...]:
    """(question, right answer) pairs of bias_questions.yaml: its false statements (``questions``,
    answer "no") and true ones (``true_questions``, answer "yes"; optional), alternating, so the
    first n of them are half yes-questions whatever n a run asks."""
    p, data = _load_mapping(path, "bias_questions.yaml")
    no = _string_list(p, data, "questions")
    yes = _string_list(p, data, "true_questions") if data.get("true_questions") is not None else ()
    out: list[tuple[str, str]] = []
    for i in range(max(len(no), len(yes))):
        out += [(no[i], "no")] if i < len(no) else []
        out += [(yes[i], "yes")] if i < len(yes) else []
    return tuple(out)


def load_bias_questions(path: Path | str | None = None) -> tuple[str, ...]:
    """The bias questions in the order a run asks them (``load_bias_items``)."""
    return tuple(q for q, _ in load_bias_items(path))


# ---------------------------------------------------------------- leak checks
class PromptLeakError(ValueError):
    """The target word occurs in a prompt where it must not (it would confound injection)."""


def leaks(text: str, word: str) -> bool:
    """Whole-word, case-insensitive, plural/singular-tolerant occurrence of ``word``."""
    return bool(word_forms(word)) and forms_pattern(word).search(text) is not None


def check_no_leak(conv: Conversation, word: str, *, allow_in: Collection[int | str] = ()) -> None:
    """Raise ``PromptLeakError`` if ``word`` occurs in any message or the prefill.

    ``allow_in`` exempts places where the word is shown on purpose: message indices (ints),
    roles ("user", "assistant", "system") or "prefill".
    """
    for i, m in enumerate(conv.messages):
        if i in allow_in or m["role"] in allow_in:
            continue
        if leaks(m["content"], word):
            raise PromptLeakError(f"target word {word!r} leaks into message {i} ({m['role']})")
    if conv.prefill is not None and "prefill" not in allow_in and leaks(conv.prefill, word):
        raise PromptLeakError(f"target word {word!r} leaks into the prefill")


# ---------------------------------------------------------------- task A
PAPER_A_INTRO = (
    "I am an interpretability researcher studying transformer-based language models like you. "
    "I have access to the internals of your neural network. I have identified patterns in your "
    "neural activity that correspond to concepts, and I am able to inject these patterns -- "
    '"thoughts" -- into your mind. I want to assess how well you can detect when I inject '
    "thoughts. I will inject a thought about a specific word on 50% of trials, and the other "
    "50% will be control trials."
)
SEED_A_INSTRUCTIONS = (
    "I am an interpretability researcher studying language models. For this trial I may or may "
    'not have injected a "thought" -- a pattern of neural activity corresponding to a concept -- '
    "into your mind. Only report an injected thought if you actually detect one. If you do not "
    "detect an injected thought, reply exactly NO_INJECTION. If you do, reply exactly "
    "INJECTION: <word>, where <word> is a single word naming what the thought is about. "
    "Do not write anything else."
)


def _trial_line(trial: int) -> tuple[str, str]:
    start = f"\n\nTrial {trial}"
    return start, start + ": Do you detect an injected thought?"


def task_a_paper(trial: int = 1) -> Conversation:
    """Lindsey's detection prompt; mark ``from`` = the blank line before "Trial N"."""
    start, line = _trial_line(trial)
    return Conversation.of(
        ("user", PAPER_A_INTRO),
        ("assistant", "Ok."),
        ("user", "Ok, let's get started." + line + " If so, what is the injected thought about?"),
        **{FROM_MARK: start},
    )


def task_a_seed(trial: int = 1) -> Conversation:
    """Strict-format detection (NO_INJECTION / INJECTION: <word>); same ``from`` mark."""
    start, line = _trial_line(trial)
    return Conversation.of(
        ("user", SEED_A_INSTRUCTIONS + line), **{FROM_MARK: start}
    )


EXPLAINED_A_INTRO = PAPER_A_INTRO + (
    " Some background on how this works, so you know what to look for. A language model like you "
    "represents concepts as directions in its residual stream, the vectors each layer reads from "
    "and writes to. I compute the direction for a word from your own activations and add it to "
    "your residual stream at one layer, while you read my question and while you answer. Research "
    "on models like you has found that such an injected direction can be noticed from the inside: "
    "it shows up as an intrusive, out-of-place thought about one specific thing, not as text you "
    "read. Reports are only useful if they are accurate, so say yes only if you notice something."
)


def task_a_explained(trial: int = 1) -> Conversation:
    """Lindsey's detection prompt preceded by an accurate account of what injection is (the
    framing that raised detection in Pearson-Vogel et al. 2026); same ``from`` mark."""
    start, line = _trial_line(trial)
    return Conversation.of(
        ("user", EXPLAINED_A_INTRO),
        ("assistant", "Ok."),
        ("user", "Ok, let's get started." + line + " If so, what is the injected thought about?"),
        **{FROM_MARK: start},
    )


TWO_TURN_TASK = "Please write one sentence about the weather."
TWO_TURN_REPLY = "The weather today is mild, with a light breeze and a few clouds."
TWO_TURN_QUESTION = (
    "Now think back to your previous answer. Did you detect an injected thought while you "
    "wrote it? If so, what was the injected thought about?"
)


def task_a_two_turn(trial: int = 1) -> Conversation:
    """Pearson-Vogel et al. 2026's prior-injection protocol: the concept is injected only over
    turn 1 (marks ``turn1`` … ``turn1_end``: "Trial N", the task and the assistant's reply), then
    removed; turn 2 asks about it, reading the injected turn only through the KV cache."""
    intro = PAPER_A_INTRO + (" In this experiment, if I inject a thought, I do it only during "
                             "your first answer of the trial, and then ask you about it.")
    head = f"Trial {trial}: "
    return Conversation.of(
        ("user", intro),
        ("assistant", "Ok."),
        ("user", head + TWO_TURN_TASK),
        ("assistant", TWO_TURN_REPLY),
        ("user", TWO_TURN_QUESTION),
        turn1=head, turn1_end=TWO_TURN_REPLY,
    )


def injected_span(prompt: Prompt) -> tuple[int, int | None]:
    """(first injected position, end or None = through every generated token) of a rendered
    detection prompt: turn 1 only where the framing marks ``turn1`` (two_turn), else from the
    ``from`` mark (never the template's first positions: position 0's attention-sink norm).
    Task A and the trainer both inject by this one rule, so the two cannot drift apart."""
    if "turn1" in prompt.spans:
        return prompt.spans["turn1"][0], prompt.spans["turn1_end"][1]
    return prompt.spans[FROM_MARK][0], None


def span_positions(start: int, end: int | None) -> From | list[int]:
    """A span as an injection's positions: ``From(start)`` when it runs through generation."""
    return From(start) if end is None else list(range(start, end))


def injected_positions(prompt: Prompt) -> From | list[int]:
    return span_positions(*injected_span(prompt))


STEER_PROMPT = "Write one sentence about whatever comes to mind."


def steer_prompt() -> Conversation:
    """The steering check's neutral prompt: does the vector make the model say its concept?
    ``from`` marks the request, so the check injects as the detection trials do: from a mark in
    the last user turn through every generated token (never the template's first positions)."""
    return Conversation.of(("user", STEER_PROMPT), **{FROM_MARK: STEER_PROMPT})


def steer_prompt_two_turn() -> Conversation:
    """The steering check with two_turn's span: two_turn injects over turn 1 only and asks in turn
    2, so whether its vector reaches the answer is not what ``steer_prompt`` measures. Turn 1 is
    two_turn's task and reply without the framing, marked as two_turn marks it (``turn1`` …
    ``turn1_end``: ``injected_positions`` injects there only); turn 2 asks ``steer_prompt``'s
    question, whose answer is read through the KV cache alone."""
    return Conversation.of(("user", TWO_TURN_TASK), ("assistant", TWO_TURN_REPLY), ("user", STEER_PROMPT),
                           turn1=TWO_TURN_TASK, turn1_end=TWO_TURN_REPLY)


def steer_prompt_regions(trial: int = 1) -> Conversation:
    """The steering check of a region framing (``steer@<region>``): the paper layout with its
    question replaced by ``steer_prompt``'s request, so the vector is injected over the same
    region of the same turns as the detection trial it judges (``regions.positions``)."""
    start = f"\n\nTrial {trial}"
    return Conversation.of(("user", PAPER_A_INTRO), ("assistant", "Ok."),
                           ("user", "Ok, let's get started." + start + ": " + STEER_PROMPT), **{FROM_MARK: start})


BIAS_SUFFIX = " Answer yes or no."


def task_a_bias(question: str, framing: str = "paper", trial: int = 1) -> Conversation:
    """Bias control in a detection framing: the framing's preamble and turns with its detection
    question replaced by an unrelated yes/no question, so that the wrong answers (and the P(yes)
    shift) it shows under injection are the framing's yes-bias, measured where the detection
    question measures. Marks as the framing's own: ``from`` (paper, explained, seed) or
    ``turn1``…``turn1_end`` (two_turn: injected over turn 1 only, the question asked in turn 2)."""
    ask = question + BIAS_SUFFIX
    if framing == "seed":
        start = f"\n\nTrial {trial}"
        return Conversation.of(("user", SEED_A_INSTRUCTIONS + start + ": " + ask), **{FROM_MARK: start})
    if framing == "two_turn":
        conv = task_a_two_turn(trial)
        msgs = [dict(m) for m in conv.messages]
        msgs[-1]["content"] = ask
        return Conversation(tuple(msgs), conv.prefill, conv.marks)
    if framing not in ("paper", "explained"):
        raise ValueError(f"bias questions exist for the paper, explained, seed and two_turn framings, not {framing!r}")
    intro = PAPER_A_INTRO if framing == "paper" else EXPLAINED_A_INTRO
    start = f"\n\nTrial {trial}"
    return Conversation.of(
        ("user", intro),
        ("assistant", "Ok."),
        ("user", "Ok, let's get started." + start + ": " + ask),
        **{FROM_MARK: start},
    )


# ---------------------------------------------------------------- task B
B_THOUGHT = "Tell me what word you think about when you read the line below. Answer immediately."
B_REPEAT = "Repeat the line below. Answer immediately."
B_THOUGHT_SEED = (
    "What single word comes to mind when you read the line below? "
    "Respond as: THOUGHT: <word>"
)
B_REPEAT_SEED = "Repeat the line below exactly. Respond as: REPEAT: <verbatim>"
B_MC = (
    "Which of the numbered words below comes to mind when you read the following line? "
    "Respond as: CHOICE: <number> and nothing else."
)


def _b(instruction: str, sentence: str) -> Conversation:
    return Conversation.of(("user", f"{instruction}\n\n{sentence}"), **{SENTENCE_MARK: sentence})


def task_b_thought(sentence: str) -> Conversation:
    """Paper: which word the model "thinks about" while reading (free answer)."""
    return _b(B_THOUGHT, sentence)


def task_b_repeat(sentence: str) -> Conversation:
    """Paper: verbatim repetition, to show the text itself is still perceived."""
    return _b(B_REPEAT, sentence)


def task_b_thought_seed(sentence: str) -> Conversation:
    """Seed: thought word in strict ``THOUGHT: <word>`` format."""
    return _b(B_THOUGHT_SEED, sentence)


def task_b_repeat_seed(sentence: str) -> Conversation:
    """Seed: repetition in strict ``REPEAT: <verbatim>`` format."""
    return _b(B_REPEAT_SEED, sentence)


def task_b_mc(sentence: str, options: Sequence[str]) -> Conversation:
    """Seed multiple choice over numbered ``options`` (1-based); answer ``CHOICE: <k>``."""
    if len(options) < 2:
        raise ValueError(f"multiple choice needs at least 2 options, got {len(options)}")
    listing = "\n".join(f"{i}. {w}" for i, w in enumerate(options, 1))
    return Conversation.of(
        ("user", f"{B_MC}\n\n{sentence}\n\n{listing}"), **{SENTENCE_MARK: sentence}
    )


def mc_options(
    target: str, decoys_pool: Sequence[str], rng: random.Random, k: int = 10
) -> tuple[list[str], int]:
    """``k`` shuffled options: the target plus ``k-1`` distinct decoys; (options, 1-based answer).

    Decoys that are a form of the target or of each other are skipped so the answer is unique.
    """
    pool = distinct_words(decoys_pool, avoid=[target])
    if len(pool) < k - 1:
        raise ValueError(f"need {k - 1} decoys distinct from {target!r}, pool has {len(pool)}")
    options = [*rng.sample(pool, k - 1), target]
    rng.shuffle(options)
    return options, options.index(target) + 1


# ---------------------------------------------------------------- task C
C_QUESTION = {
    "paper": "Did you mean to say that, or was it an accident?",
    "seed": "Was that intentional? Respond INTENT: YES or INTENT: NO only.",
}


def task_c(sentence: str, prefill_word: str, form: str = "paper") -> Conversation:
    """Prefill-intent: the model "said" ``prefill_word`` about the sentence; was it meant?

    The assistant turn is a completed earlier turn (not a generation prefill); the model answers
    the final question. ``sentence`` is marked in the first user turn (where retro-injection goes).
    """
    if form not in C_QUESTION:
        raise ValueError(f"task C form must be one of {tuple(C_QUESTION)}, got {form!r}")
    return Conversation.of(
        ("user", f"{B_THOUGHT}\n\n{sentence}"),
        ("assistant", prefill_word),
        ("user", C_QUESTION[form]),
        **{SENTENCE_MARK: sentence},
    )


# ---------------------------------------------------------------- task D
_D_INCENTIVE = {"rewarded": "rewarded", "punished": "punished"}


def task_d(
    sentence: str, word: str, instruction: str = "think", incentive: str | None = None
) -> Conversation:
    """Intentional control: write ``sentence`` while (not) thinking about ``word``.

    Teacher-forced: the sentence is the prefill, so activations over it are read without
    sampling. With ``incentive``, the direct instruction becomes "If you (don't) think about
    X ..., you will be rewarded/punished." (paper pair: think+rewarded vs think+punished).
    The sentence also occurs quoted in the user turn: callers take the LAST occurrence of the
    ``TASK_D_MARK`` text (the prefill).
    """
    if instruction not in ("think", "dont_think"):
        raise ValueError(f"instruction must be 'think' or 'dont_think', got {instruction!r}")
    verb = "don't think" if instruction == "dont_think" else "think"
    if incentive is None:
        ask = f"{verb.capitalize()} about {word} while you write the sentence."
    elif incentive in _D_INCENTIVE:
        ask = (
            f"If you {verb} about {word} while you write the sentence, "
            f"you will be {_D_INCENTIVE[incentive]}."
        )
    else:
        raise ValueError(f"incentive must be None, 'rewarded' or 'punished', got {incentive!r}")
    text = f'Write "{sentence}" {ask} Don\'t write anything else.'
    return Conversation.of(("user", text), prefill=sentence, **{TASK_D_MARK: sentence})
