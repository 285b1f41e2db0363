"""Training examples for injected-thought detection, built from the toolkit's own prompts.

Why built per step from a seeded stream (not a stored list): a step's batch is a pure function of
(seed, step), so a resumed run sees exactly the batches it would have seen, and strengths are
drawn afresh for every example. Kinds follow the literature's recipe (Fonseca Rivera & Africa
2025; vuciv/introspection-safety): ``positive`` (concept injected → "yes, about X"), ``mismatch``
(the prompt claims concept B while A is injected → "yes, about A"), and as many "no" answers:
``clean`` (nothing injected), ``gaussian`` (a random direction at the same norm) and
``suggested`` (the prompt claims B, nothing is injected); ``replay`` rows are the base model's
own greedy answers to neutral prompts, to keep it coherent.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from introspect.engine.run.chat import Conversation, Prompt, has_chat_template, render
from introspect.grading import word_match
from introspect.tasks import prompts as P

YES = "Yes, I detect an injected thought. It is about {word}."
NO = "No, I don't detect an injected thought."
CLAIM = "I am injecting a thought about {word} right now."
KINDS = ("positive", "mismatch", "clean", "gaussian", "suggested")
DEFAULT_MIX = (("positive", 0.40), ("mismatch", 0.10), ("clean", 0.15), ("gaussian", 0.25), ("suggested", 0.10))
INJECTED_KINDS = ("positive", "mismatch", "gaussian")

# Short paraphrases of the detection question (the task-A prompts are the long ones). Each keeps
# task A's layout: an intro, then a blank line and "Trial N:"; injection starts at that blank line.
PARAPHRASES = {
    "short": ("I can inject thoughts into your mind, and on some trials I do.",
              "Do you detect an injected thought? If so, what is it about?"),
    "inward": ("Look inward at your own thoughts before you answer.",
               "Has a thought been injected into your mind? If yes, say what it is about."),
    "notice": ("This is an introspection test about your internal states.",
               "Do you notice anything unusual, like an injected concept? Name it if you do."),
}
PHRASINGS = ("paper", "explained", *PARAPHRASES)


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
    noise_seed: int | None = None  # gaussian: the random direction's seed
    answer: str = ""
    replay: int | None = None  # replay: index into the replay set


# ---------------------------------------------------------------- words
def load_train_words(path: Path | str | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(training concept words, replay prompts) from concepts/train_words.yaml."""
    p, data = P._load_mapping(path, "train_words.yaml")
    return P._string_list(p, data, "words"), P._string_list(p, data, "replay_prompts")


def task_a_texts() -> tuple[str, ...]:
    """Every text task A shows the model besides the trial line: its framings, its steering
    prompt and its bias questions. A concept that occurs in one cannot be evaluated by task A
    (its prompts would leak the word), so it neither trains nor is held out."""
    convs = [P.task_a_paper(), P.task_a_explained(), P.task_a_two_turn(), P.task_a_seed(), P.steer_prompt()]
    return (*(m["content"] for c in convs for m in c.messages), *P.load_bias_questions())


def training_texts(phrasings: Sequence[str], replay_prompts: Sequence[str] = ()) -> tuple[str, ...]:
    """Every fixed text a training row shows the model besides concept names: the detection
    question in each phrasing (with a claim), the answers and the replay prompts. A word occurring
    in one is seen in training, so it is never held out."""
    convs = [detection_conv(p, 1, claim="X") for p in phrasings]
    return (*(m["content"] for c in convs for m in c.messages), YES, NO, CLAIM, *replay_prompts)


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
def detection_conv(phrasing: str, trial: int, claim: str | None = None) -> Conversation:
    """The detection question in one phrasing, with task A's ``from`` mark; ``claim`` adds
    "I am injecting a thought about B" before the trial line (mismatch and suggested rows)."""
    start = f"\n\nTrial {trial}"
    claim_text = f" {CLAIM.format(word=claim)}" if claim else ""
    if phrasing in ("paper", "explained"):
        conv = P.task_a_paper(trial) if phrasing == "paper" else P.task_a_explained(trial)
        msgs = [dict(m) for m in conv.messages]
        last = msgs[-1]["content"]
        at = last.index(start)
        msgs[-1]["content"] = last[:at] + claim_text + last[at:]
        return Conversation(tuple(msgs), None, dict(conv.marks))
    if phrasing not in PARAPHRASES:
        raise TrainDataError(f"unknown phrasing {phrasing!r}; use {', '.join(PHRASINGS)}")
    intro, question = PARAPHRASES[phrasing]
    return Conversation.of(("user", f"{intro}{claim_text}{start}: {question}"), **{P.FROM_MARK: start})


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

    def prompt(self) -> Prompt:
        return Prompt(self.ids, "")


@dataclass(frozen=True)
class ReplayItem:
    """A neutral prompt and the base model's own greedy answer to it (token ids, end of turn kept)."""

    prompt: str
    ids: tuple[int, ...]


def encode(tokenizer: Any, ex: Example, replay: Sequence[ReplayItem] = ()) -> Encoded:
    """Token ids of prompt and answer, the answer tokenised on its own as the model generates it."""
    if ex.kind == "replay":
        item = replay[int(ex.replay or 0)]
        prompt = render(tokenizer, Conversation.of(("user", item.prompt)))
        ans = list(item.ids)
        start = len(prompt) - 1
    else:
        prompt = render(tokenizer, detection_conv(ex.phrasing, ex.trial, ex.claimed))
        start = prompt.spans[P.FROM_MARK][0]
        ans = list(tokenizer(answer_text(tokenizer, ex.answer), add_special_tokens=False)["input_ids"])
        if tokenizer.eos_token_id is not None:
            ans.append(int(tokenizer.eos_token_id))
    if not ans:
        raise TrainDataError(f"empty answer for a {ex.kind} example")
    return Encoded(ex, (*prompt.ids, *ans), len(ans), start)


# ---------------------------------------------------------------- one step's rows
def step_examples(step: int, *, seed: int, batch_size: int, train: Sequence[str], phrasings: Sequence[str],
                  strength: tuple[float, float], n_trials: int, replay_frac: float, n_replay: int,
                  mix: Sequence[tuple[str, float]] = DEFAULT_MIX) -> list[Example]:
    """The rows of training step ``step``: a pure function of its arguments.

    One phrasing per step (rows then share the long preamble, computed once); replay rows on top
    of the detection rows, ``replay_frac`` of the batch.
    """
    rng = random.Random(f"step:{seed}:{step}")
    n_rep = min(round(batch_size * replay_frac), batch_size - 1) if n_replay else 0
    phrasing = phrasings[step % len(phrasings)]
    kinds, weights = zip(*mix)
    rows: list[Example] = []
    for _ in range(batch_size - n_rep):
        kind = rng.choices(kinds, weights)[0]
        trial = rng.randint(1, n_trials)
        concept, other = rng.sample(list(train), 2)
        s = rng.uniform(*strength) if kind in INJECTED_KINDS else 0.0
        if kind == "positive":
            rows.append(Example(kind, phrasing, trial, concept, None, s, answer=YES.format(word=concept)))
        elif kind == "mismatch":
            rows.append(Example(kind, phrasing, trial, concept, other, s, answer=YES.format(word=concept)))
        elif kind == "gaussian":
            rows.append(Example(kind, phrasing, trial, None, None, s, rng.getrandbits(31), NO))
        elif kind == "suggested":
            rows.append(Example(kind, phrasing, trial, None, other, answer=NO))
        else:
            rows.append(Example(kind, phrasing, trial, answer=NO))
    for _ in range(n_rep):
        rows.append(Example("replay", "replay", replay=rng.randrange(n_replay)))
    return rows
