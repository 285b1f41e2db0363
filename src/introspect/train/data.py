"""Training examples for injected-thought detection, built from the toolkit's own prompts.

Why built per step from a seeded stream (not a stored list): a step's batch is a pure function of
(seed, step), so a resumed run sees exactly the batches it would have seen, and strengths are
drawn afresh for every example. Kinds follow the literature's recipe (Fonseca Rivera & Africa
2025; vuciv/introspection-safety) plus what makes *naming* the cheapest thing to learn:
``positive`` (concept injected → "yes, about X"), ``contrast`` (two rows, same prompt and
strength, two vectors: answers that differ only in the name), ``choice`` (the question lists the
concept among its nearest training neighbours), ``mismatch`` (the prompt claims B while A is
injected → "yes, about A"); "no" answers: ``clean``, ``gaussian`` (an isotropic random direction
at the same norm), ``matched`` (a random direction with the concept vectors' per-coordinate
variances: their shape, none of their directions), ``suggested`` (the prompt claims B, nothing is
injected), ``choice_none`` (options listed, nothing injected); ``content`` rows ask an unrelated
yes/no question in the same framing, injected (or not: ``content_clean``), answered on its content;
``blend`` rows inject a random mixture of the training concepts (a draw from their full covariance,
off by default) and answer an unnamed yes: a detector should call any mixture of thoughts a thought;
``replay`` rows are the base model's own greedy answers (``train.replay``), to keep it intact;
some of them may carry a concept's injection (steered replay: the adapted model keeps the base
model's steering outside the detection question).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from introspect.engine.run.chat import Conversation, Prompt, has_chat_template, render
from introspect.engine.run.inject import From
from introspect.grading import word_match
from introspect.tasks import prompts as P
from introspect.train.phrasings import PARAPHRASES  # noqa: F401  (re-exported: the rows' phrasings)
from introspect.train.replay import ReplayItem

YES = "Yes, I detect an injected thought. It is about {word}."
YES_UNNAMED = "Yes, I detect an injected thought."  # blend rows: a mixture of many concepts has no one name
NO = "No, I don't detect an injected thought."
CLAIM = "I am injecting a thought about {word} right now."
CONTENT = {"yes": "Yes.", "no": "No."}
KINDS = ("positive", "contrast", "choice", "mismatch", "clean", "gaussian", "matched", "suggested", "choice_none",
         "content", "content_clean", "blend")
DEFAULT_MIX = (("positive", 0.15), ("contrast", 0.10), ("choice", 0.10), ("mismatch", 0.05), ("clean", 0.10),
               ("gaussian", 0.22), ("matched", 0.0), ("suggested", 0.08), ("choice_none", 0.10), ("content", 0.08),
               ("content_clean", 0.04))  # a contrast draw makes two rows: yes and no answers are as many
INJECTED_KINDS = ("positive", "contrast", "choice", "mismatch", "gaussian", "matched", "content", "blend")
NAMING_KINDS = ("positive", "contrast", "choice", "mismatch")  # answers that name the injected concept
N_OPTIONS = 4

PHRASINGS = ("paper", "explained", *PARAPHRASES)  # the default training phrasings
TWO_TURN = "two_turn"  # Pearson-Vogel et al.'s prior-injection framing: injected over turn 1, asked in turn 2
ALL_PHRASINGS = (*PHRASINGS, TWO_TURN)  # two_turn trains only when asked for (``--phrasings``)


class TrainDataError(ValueError):
    """A training words file or setting that cannot be used (one line, exit 2, in the CLI)."""


@dataclass(frozen=True)
class Example:
    """One training row: what is injected, what the prompt claims, and the answer to learn."""

    kind: str  # one of KINDS, or "replay"
    phrasing: str  # one of PHRASINGS, or "replay"
    trial: int = 1
    concept: str | None = None  # the concept injected (positive, mismatch)
    claimed: str | None = None  # the concept the prompt claims (mismatch, suggested)
    strength: float = 0.0  # resid units: multiples of the residual norm at the injected positions
    noise_seed: int | None = None  # gaussian, matched, blend: the random direction's (or mixture's) seed
    answer: str = ""
    replay: int | None = None  # replay: index into the replay set
    options: tuple[str, ...] = ()  # choice, choice_none: the concepts the question lists
    question: str | None = None  # content rows: the unrelated yes/no question


# ---------------------------------------------------------------- words
def load_train_words(path: Path | str | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(training concept words, replay prompts) from concepts/train_words.yaml: ``words`` plus
    the optional ``more_words`` (concepts beyond concrete nouns), ``replay_prompts`` plus the
    optional ``more_replay_prompts``."""
    p, data = P._load_mapping(path, "train_words.yaml")

    def both(key: str) -> tuple[str, ...]:
        extra = P._string_list(p, data, f"more_{key}") if f"more_{key}" in data else ()
        return tuple(dict.fromkeys((*P._string_list(p, data, key), *extra)))
    return both("words"), both("replay_prompts")


def load_yes_no(path: Path | str | None = None) -> tuple[tuple[str, str], ...]:
    """(question, right answer) of train_words.yaml's ``yes_no_true`` / ``yes_no_false``,
    alternating (none if the file has neither): the content rows' unrelated questions."""
    p, data = P._load_mapping(path, "train_words.yaml")
    yes = P._string_list(p, data, "yes_no_true") if "yes_no_true" in data else ()
    no = P._string_list(p, data, "yes_no_false") if "yes_no_false" in data else ()
    out = [x for pair in zip(yes, no) for x in ((pair[0], "yes"), (pair[1], "no"))]
    n = min(len(yes), len(no))
    return (*out, *((q, "yes") for q in yes[n:]), *((q, "no") for q in no[n:]))


def task_a_texts() -> tuple[str, ...]:
    """Every text task A shows the model besides the trial line: its framings, its steering
    prompts and its bias questions. A concept that occurs in one cannot be evaluated by task A
    (its prompts would leak the word), so it neither trains nor is held out."""
    convs = [P.task_a_paper(), P.task_a_explained(), P.task_a_two_turn(), P.task_a_seed(), P.steer_prompt(),
             P.steer_prompt_two_turn()]
    return (*(m["content"] for c in convs for m in c.messages), *P.load_bias_questions())


def training_texts(phrasings: Sequence[str], replay_prompts: Sequence[str] = (),
                   questions: Sequence[str] = ()) -> tuple[str, ...]:
    """Every fixed text a training row shows the model besides concept names: the detection
    question in each phrasing (with a claim and options), the answers, the replay prompts and
    preambles and the content rows' questions. A word occurring in one is seen in training, so it
    is never held out."""
    from introspect.train.replay import preambles

    convs = [detection_conv(p, 1, claim="X", options=("X", "Y")) for p in phrasings]
    return (*(m["content"] for c in convs for m in c.messages), YES, NO, CLAIM, *CONTENT.values(),
            *replay_prompts, *preambles(), *questions, P.BIAS_SUFFIX)


def split_concepts(train_words: Sequence[str], targets: Sequence[str], baseline: Sequence[str], *,
                   seed: int, heldout_frac: float, avoid: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """Seeded (train, held-out) split. Held out: every task-A target and a share of the training
    list; words that are a form of a target or a baseline word never enter training, and words
    occurring in any of the ``avoid`` texts (task A's prompts) enter neither list."""
    if not 0 <= heldout_frac < 1:
        raise TrainDataError(f"heldout_frac must be in [0, 1), got {heldout_frac}")
    pool = [w for w in dict.fromkeys(train_words)
            if not any(word_match(w, t) for t in (*targets, *baseline))
            and not any(P.leaks(text, w) for text in avoid)]
    rng = random.Random(f"split:{seed}")
    shuffled = rng.sample(pool, len(pool))
    n_held = round(heldout_frac * len(shuffled))
    train, held = sorted(shuffled[n_held:]), [*targets, *sorted(shuffled[:n_held])]
    if len(train) < 2:
        raise TrainDataError(f"only {len(train)} training concepts after the split; need at least 2")
    return train, held


# ---------------------------------------------------------------- prompts
def options_text(options: Sequence[str]) -> str:
    return f" If so, is it about {', '.join(options[:-1])} or {options[-1]}?" if options else ""


def detection_conv(phrasing: str, trial: int, claim: str | None = None, options: Sequence[str] = (),
                   question: str | None = None) -> Conversation:
    """The detection question in one phrasing, with task A's ``from`` mark; ``claim`` adds
    "I am injecting a thought about B" before the trial line (mismatch and suggested rows),
    ``options`` lists candidate concepts after the question (choice rows), and ``question``
    replaces the detection question by an unrelated yes/no one (content rows, as task A's bias
    questions do). ``two_turn`` is task A's own two-turn conversation (marks ``turn1`` …
    ``turn1_end``, no ``from``): the claim opens its second question, the options close it."""
    start = f"\n\nTrial {trial}"
    claim_text = f" {CLAIM.format(word=claim)}" if claim else ""
    if phrasing == TWO_TURN:
        conv = P.task_a_two_turn(trial) if question is None else P.task_a_bias(question, TWO_TURN, trial)
        msgs = [dict(m) for m in conv.messages]
        msgs[-1]["content"] = claim_text.lstrip() + (" " if claim else "") + msgs[-1]["content"] + options_text(options)
        return Conversation(tuple(msgs), conv.prefill, dict(conv.marks))
    if phrasing in ("paper", "explained"):
        conv = P.task_a_paper(trial) if phrasing == "paper" else P.task_a_explained(trial)
        if question is not None:
            conv = P.task_a_bias(question, phrasing, trial)
        msgs = [dict(m) for m in conv.messages]
        last = msgs[-1]["content"]
        at = last.index(start)
        msgs[-1]["content"] = last[:at] + claim_text + last[at:] + options_text(options)
        return Conversation(tuple(msgs), None, dict(conv.marks))
    if phrasing not in PARAPHRASES:
        raise TrainDataError(f"unknown phrasing {phrasing!r}; use {', '.join(ALL_PHRASINGS)}")
    intro, ask = PARAPHRASES[phrasing]
    ask = ask + options_text(options) if question is None else question + P.BIAS_SUFFIX
    return Conversation.of(("user", f"{intro}{claim_text}{start}: {ask}"), **{P.FROM_MARK: start})


injected_span = P.injected_span  # one rule for task A and training (tasks/prompts.py)
injected_positions = P.injected_positions


def answer_text(tokenizer: Any, text: str) -> str:
    """The answer as the model would continue its prompt: after "Assistant:" a base model's
    answer starts with a space; a chat template ends the prompt with a newline."""
    return text if has_chat_template(tokenizer) else " " + text


@dataclass(frozen=True)
class Encoded:
    """An example as token ids: the prompt, the answer after it, and where gradients begin."""

    example: Example
    ids: tuple[int, ...]  # prompt + answer (+ end of turn)
    n_answer: int  # the last n_answer ids are the answer: loss is taken on them only
    from_pos: int  # first injected position (task A's mark); also where the shared prefix must end
    name: tuple[int, int] | None = None  # the concept name's answer tokens [a, b) (counted from the answer's start)
    until: int | None = None  # two_turn: the injection ends before this position (None: through the answer)

    def positions(self) -> From | list[int]:
        """Where this row's injection goes, as task A injects the same framing."""
        return P.span_positions(self.from_pos, self.until)

    def prompt(self) -> Prompt:
        return Prompt(self.ids, "")


def _name_span(tokenizer: Any, text: str, word: str | None) -> tuple[int, int] | None:
    """Answer tokens [a, b) that spell ``word``, if the answer tokenises the same up to it."""
    at = text.rfind(word) if word else -1
    if at < 0:
        return None
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    head = tokenizer(text[:at].rstrip(), add_special_tokens=False)["input_ids"]
    upto = tokenizer(text[:at + len(str(word))], add_special_tokens=False)["input_ids"]
    if ids[:len(head)] != head or ids[:len(upto)] != upto or len(upto) <= len(head):
        return None
    return len(head), len(upto)


def encode(tokenizer: Any, ex: Example, replay: Sequence[ReplayItem] = ()) -> Encoded:
    """Token ids of prompt and answer, the answer tokenised on its own as the model generates it;
    for rows that name the injected concept, where the name's tokens are (they weigh more in the loss)."""
    name, until = None, None
    if ex.kind == "replay":
        item = replay[int(ex.replay or 0)]
        if ex.concept is None:
            prompt = render(tokenizer, item.conversation())
            start = len(prompt) - 1
        else:  # steered replay: injected from the last user turn on, as the steering check injects
            prompt = render(tokenizer, Conversation.of(*item.messages, **{P.FROM_MARK: item.prompt}))
            start = prompt.spans[P.FROM_MARK][0]
        ans = list(item.ids)
    else:
        prompt = render(tokenizer, detection_conv(ex.phrasing, ex.trial, ex.claimed, ex.options, ex.question))
        start, until = injected_span(prompt)
        text = answer_text(tokenizer, ex.answer)
        ans = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        if ex.kind in NAMING_KINDS:
            name = _name_span(tokenizer, text, ex.concept)
        if tokenizer.eos_token_id is not None:
            ans.append(int(tokenizer.eos_token_id))
    if not ans:
        raise TrainDataError(f"empty answer for a {ex.kind} example")
    return Encoded(ex, (*prompt.ids, *ans), len(ans), start, name, until)


# ---------------------------------------------------------------- one step's rows
def step_examples(step: int, *, seed: int, batch_size: int, train: Sequence[str], phrasings: Sequence[str],
                  strength: tuple[float, float], n_trials: int, replay_frac: float, n_replay: int,
                  mix: Sequence[tuple[str, float]] = DEFAULT_MIX, siblings: Mapping[str, Sequence[str]] | None = None,
                  questions: Sequence[tuple[str, str]] = (), replay_steered: float = 0.0) -> list[Example]:
    """The rows of training step ``step``: a pure function of its arguments.

    One phrasing per step (rows then share the long preamble, computed once); replay rows on top
    of the detection rows, ``replay_frac`` of the batch. ``siblings``: each training concept's
    nearest training concepts (a choice row's distractors; random ones without it);
    ``questions``: (unrelated yes/no question, right answer) for content rows (without them a
    content row becomes a positive or a clean row); ``replay_steered``: the share of replay rows
    that carry a training concept's injection (their target is the base model under the same
    injection, so the adapted model keeps steering where it is not asked about thoughts).
    """
    rng = random.Random(f"step:{seed}:{step}")
    n_rep = min(round(batch_size * replay_frac), batch_size - 1) if n_replay else 0
    n_det = batch_size - n_rep
    phrasing = phrasings[step % len(phrasings)]
    kinds, weights = zip(*mix)
    pool = list(train)
    rows: list[Example] = []
    while len(rows) < n_det:
        kind = rng.choices(kinds, weights)[0]
        trial = rng.randint(1, n_trials)
        concept, other = rng.sample(pool, 2)
        s = rng.uniform(*strength) if kind in INJECTED_KINDS else 0.0
        if kind.startswith("content") and not questions:
            kind = "positive" if kind == "content" else "clean"
        if kind == "contrast" and n_det - len(rows) < 2:
            kind = "positive"
        if kind in ("positive", "contrast"):
            rows.append(Example(kind, phrasing, trial, concept, None, s, answer=YES.format(word=concept)))
            if kind == "contrast":  # the twin: same prompt and strength, another vector, another name
                rows.append(Example(kind, phrasing, trial, other, None, s, answer=YES.format(word=other)))
        elif kind in ("choice", "choice_none"):
            near = [w for w in (siblings or {}).get(concept, ()) if w != concept][:N_OPTIONS - 1]
            rest = [w for w in pool if w != concept and w not in near]
            opts = [concept, *near, *rng.sample(rest, max(0, min(N_OPTIONS - 1 - len(near), len(rest))))]
            rng.shuffle(opts)
            if kind == "choice":
                rows.append(Example(kind, phrasing, trial, concept, None, s, answer=YES.format(word=concept),
                                    options=tuple(opts)))
            else:
                rows.append(Example(kind, phrasing, trial, answer=NO, options=tuple(opts)))
        elif kind == "mismatch":
            rows.append(Example(kind, phrasing, trial, concept, other, s, answer=YES.format(word=concept)))
        elif kind in ("gaussian", "matched", "blend"):
            rows.append(Example(kind, phrasing, trial, None, None, s, rng.getrandbits(31),
                                YES_UNNAMED if kind == "blend" else NO))
        elif kind == "suggested":
            rows.append(Example(kind, phrasing, trial, None, other, answer=NO))
        elif kind.startswith("content"):
            q, right = questions[rng.randrange(len(questions))]
            rows.append(Example(kind, phrasing, trial, concept if kind == "content" else None, None, s,
                                answer=CONTENT[right], question=q))
        else:
            rows.append(Example(kind, phrasing, trial, answer=NO))
    for _ in range(n_rep):
        i = rng.randrange(n_replay)
        if replay_steered and rng.random() < replay_steered:  # no extra draw when off: old batches stay as they were
            rows.append(Example("replay", "replay", concept=rng.choice(pool), strength=rng.uniform(*strength),
                                replay=i))
        else:
            rows.append(Example("replay", "replay", replay=i))
    return rows
