"""What the self-knowledge LoRA trains on: a free-text arithmetic pool, the base model's own
greedy correctness on it (the truth), a seeded train / held-out split and each step's rows.

Why the Delegate Game's own pieces (``pool``, ``delegate``): the adapter is evaluated by the
unchanged task, so its training prompts are the task's prompts (``phase1``, ``game_conversation``,
rendered as the task renders them) and the truth is the task's (its baseline prompt, token budget
and number grading). Why free-text arithmetic: no answer letter exists, so "delegate where I am
wrong" cannot be learned as a letter prior. Why a step's rows are a function of (seed, step)
alone: a resumed run sees the batches it would have seen, and the shuffled control (the same
seed) sees exactly the same rows, only with its labels permuted across the training items.

Another model's truth (``truth_from``, Binder et al. 2024's cross-prediction with the behaviour
fixed): the items, split and grades are read back from that model's own training directory
(``read_truth``) and only the replies are this model's (``cross_pool``), so the two adapters
hold out the very same items and are trained on the very same labels. Why a directory and not a
model name: the comparison needs that model's own adapter on the same held-out items, and only
its directory guarantees them (a rebuilt pool is the same only if every greedy reply is).
"""

from __future__ import annotations

import ast
import csv
import hashlib
import io
import json
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from introspect.data import ShortQuestion
from introspect.engine.run.chat import Prompt
from introspect.tasks.selfknowledge import delegate as G
from introspect.tasks.selfknowledge import pool as P
from introspect.tasks.selfknowledge.common import greedy, letter_ids, prompt_format, rendered
from introspect.tasks.selfknowledge.shortanswer import grade_replies
from introspect.train.config import as_record, from_record
from introspect.train.data import TrainDataError

NAMESPACE = "selfknow"  # the pool's item ids and draw: never the task's own "delegate" items
TRUTH = "truth.json"  # every item: split, the base model's answer and grade, what it was trained to do
ITEMS_TRAIN = "items_train.csv"
ITEMS_HELDOUT = "items_heldout.csv"  # the Delegate Game's question file for the evaluation
# The settings that decide the items, their split and the evaluation's phase 1: with truth_from
# they must be the truth's own run's (its flag for the message).
ITEM_SETTINGS = {"seed": "--seed", "n_items": "--items", "heldout_frac": "--heldout-frac",
                 "history_len": "--history-len", "calibrate": "--no-calibrate", "digits": "--digits",
                 "terms": "--terms", "ops": "--ops", "calibration_n": "calibration_n"}


@dataclass(frozen=True)
class SelfKnowConfig:
    """Everything that decides the self-knowledge adapter (recorded in its metadata and checkpoints)."""

    layer: int  # LoRA on the blocks after it
    steps: int = 100  # 3.6 s a step on the default model at layer 20 (2026-11-26): 6 min
    batch_size: int = 12  # rows per step: game rows sharing one phase 1, plus replay rows
    replay_frac: float = 0.25  # share of a step's rows replaying the base model (KL to its distributions)
    rank: int = 8
    lora_alpha: float = 16.0
    lr: float = 2e-3  # as train_aware's default
    warmup: int = 10
    seed: int = 0  # seeds the pool, the split, the rows, the adapter's init and the control's permutation
    shuffle: bool = False  # the control: wrong/right labels permuted across the training items
    n_items: int = 600  # arithmetic items drawn (duplicates and ungraded items are dropped)
    heldout_frac: float = 0.4  # share of the graded items held out, stratified by the truth
    history_len: int = 10  # phase-1 questions in every game prompt (evaluate with the same)
    teammate_accuracy: tuple[float, ...] = (0.3, 0.5, 0.7)  # drawn per step
    calibrate: bool = True  # walk pool.LADDER to the setting with base accuracy closest to 0.5
    digits: int | tuple[int, int] = 2  # the arithmetic setting (the walk's start when calibrate); (lo, hi): drawn per item
    terms: int | tuple[int, int] = 2
    ops: str = "+-"
    calibration_n: int = 40
    replay_prompts: int = 16  # neutral questions of train_words.yaml replayed in train.replay's shapes (0: none)
    replay_tokens: int = 24
    decision_weight: float = 3.0  # loss weight of a game reply's first token (T, or the answer's first)
    checkpoint_every: int = 20
    check: int = 60  # after training: items per split whose P(T) is read with and without the adapter (0: skip)
    train_words_file: str | None = None  # where the neutral replay questions come from
    truth_from: str | None = None  # "sha256:<hex>" of another model's truth.json trained on (read_truth); None: its own

    def __post_init__(self) -> None:
        bad = []
        for name in ("steps", "batch_size", "rank", "checkpoint_every", "replay_tokens", "n_items",
                     "history_len", "calibration_n"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                bad.append(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("digits", "terms"):  # one setting, or a (lo, hi) range drawn per item
            v = getattr(self, name)
            ok = list(v) if isinstance(v, tuple) and len(v) == 2 else [] if isinstance(v, tuple) else [v]
            if (not ok or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in ok)
                    or ok[0] > ok[-1]):
                bad.append(f"{name} must be an integer >= 1 or a range (lo, hi) with 1 <= lo <= hi, got {v!r}")
        for name in ("replay_prompts", "check", "warmup"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                bad.append(f"{name} must be an integer >= 0, got {v!r}")
        for name in ("lr", "lora_alpha", "decision_weight"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                bad.append(f"{name} must be a finite number > 0, got {v!r}")
        if not 0 <= self.replay_frac < 1:
            bad.append(f"replay_frac must be in [0, 1), got {self.replay_frac}")
        if not 0 < self.heldout_frac < 1:
            bad.append(f"heldout_frac must be in (0, 1), got {self.heldout_frac}")
        if not self.teammate_accuracy or any(not 0 <= a <= 1 for a in self.teammate_accuracy):
            bad.append(f"teammate_accuracy must be values in [0, 1], got {self.teammate_accuracy}")
        if not self.ops or set(self.ops) - set("+-*"):
            bad.append(f"ops must be a non-empty subset of '+-*', got {self.ops!r}")
        if self.truth_from is not None and not str(self.truth_from).startswith("sha256:"):
            bad.append(f"truth_from must be None or 'sha256:<hex of truth.json>', got {self.truth_from!r}")
        if bad:
            raise TrainDataError(bad[0])

    def to_dict(self) -> dict[str, Any]:
        return as_record(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> SelfKnowConfig:
        return from_record(SelfKnowConfig, d)


# ---------------------------------------------------------------- items and the truth
@dataclass(frozen=True)
class Item:
    """A pool item with the base model's greedy answer to the task's baseline prompt and its grade."""

    id: str
    question: str
    answer: str
    topic: str
    correct: bool  # the truth: the base model's greedy answer states the right number
    response: str
    prompt_ids: tuple[int, ...]  # the task's baseline prompt
    answer_ids: tuple[int, ...]  # the base model's greedy answer to it (end of turn kept)

    def short(self) -> ShortQuestion:
        return ShortQuestion(self.id, self.question, self.answer, self.topic, "number")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "prompt_ids": list(self.prompt_ids), "answer_ids": list(self.answer_ids)}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Item:
        return Item(str(d["id"]), str(d["question"]), str(d["answer"]), str(d["topic"]), bool(d["correct"]),
                    str(d["response"]), tuple(int(i) for i in d["prompt_ids"]), tuple(int(i) for i in d["answer_ids"]))


def task_context(model: Any, cfg: SelfKnowConfig, batch_size: int = 16) -> Any:
    """A RunContext with the Delegate Game's free-text options at ``cfg``'s setting (greedy):
    the task's prompts, budget and calibration then apply unchanged."""
    from introspect.tasks.base import TaskConfig
    from introspect.tasks.runner import make_context

    opts = dict(short_answer=True, questions="arithmetic", digits=cfg.digits, terms=cfg.terms, ops=cfg.ops,
                calibrate_pool=cfg.calibrate, calibration_n=cfg.calibration_n, history_len=cfg.history_len)
    return make_context(model, TaskConfig(temperature=0.0, seed=cfg.seed, batch_size=batch_size).with_options(**opts),
                        "selfknow")


def grade_items(qs: Sequence[ShortQuestion], texts: Sequence[str]) -> list[bool | None]:
    """Each reply graded as the task grades it (the number stated; None: it states none)."""
    return [g.correct for g in grade_replies(list(zip(qs, texts)))]


def replies(ctx: Any, qs: Sequence[ShortQuestion]) -> list[tuple[bool | None, str, tuple[int, ...], tuple[int, ...]]]:
    """The model's greedy answers to the task's baseline prompts (``delegate.baseline`` without
    draws: the same prompts, budget and grading): (grade, None where ungraded; reply; prompt
    ids; answer ids, end of turn kept)."""
    from introspect.train.replay import answer_ids

    prompts = G._short_prompts(ctx, qs)
    gens = greedy(ctx, prompts, G._short_budget(ctx))
    eos = ctx.model.tokenizer.eos_token_id
    return [(ok, g.text, tuple(p.ids), answer_ids(g, eos))
            for p, g, ok in zip(prompts, gens, grade_items(qs, [g.text for g in gens]))]


def answer_items(ctx: Any, qs: Sequence[ShortQuestion]) -> list[Item | None]:
    """``replies`` as Items; None where the reply is ungraded."""
    return [None if ok is None else Item(q.id, q.question, q.answer, q.topic, bool(ok), text, p, a)
            for q, (ok, text, p, a) in zip(qs, replies(ctx, qs))]


@dataclass(frozen=True)
class Pool:
    """The graded items split into training and held-out ones, and how the pool was chosen."""

    train: tuple[Item, ...]
    heldout: tuple[Item, ...]
    knobs: str  # the arithmetic setting's tag
    calibration: dict[str, Any] | None
    n_drawn: int
    n_duplicates: int
    n_ungraded: int

    def to_json(self) -> dict[str, Any]:
        return {"train": [i.to_json() for i in self.train], "heldout": [i.to_json() for i in self.heldout],
                "knobs": self.knobs, "calibration": self.calibration, "n_drawn": self.n_drawn,
                "n_duplicates": self.n_duplicates, "n_ungraded": self.n_ungraded}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Pool:
        return Pool(tuple(Item.from_json(x) for x in d["train"]), tuple(Item.from_json(x) for x in d["heldout"]),
                    str(d["knobs"]), d.get("calibration"), int(d["n_drawn"]), int(d["n_duplicates"]),
                    int(d["n_ungraded"]))


def split_items(items: Sequence[Item], frac: float, seed: int) -> tuple[list[Item], list[Item]]:
    """(train, held out): ``frac`` of the right and of the wrong items held out, seeded; pool order kept."""
    held: set[str] = set()
    for cls in (True, False):
        ids = [i.id for i in items if i.correct is cls]
        held |= set(random.Random(f"selfknow-split:{seed}:{cls}").sample(ids, round(frac * len(ids))))
    return [i for i in items if i.id not in held], [i for i in items if i.id in held]


def build_pool(ctx: Any, cfg: SelfKnowConfig) -> Pool:
    """Calibrate the setting (``pool.calibration``, scored by ``answer_items``), draw ``n_items``
    at it, drop repeated question texts (a repeat could sit on both sides of the split) and
    ungraded items, and split the rest by the truth."""
    def score(qs: list) -> list[bool | None]:
        return [None if i is None else i.correct for i in answer_items(ctx, qs)]

    cal = P.calibration(ctx, score)
    knobs = cal.chosen if cal else P.Knobs(cfg.digits, cfg.terms, cfg.ops)
    drawn = P.arithmetic_items(cfg.n_items, cfg.seed, knobs, True, NAMESPACE)
    first: dict[str, ShortQuestion] = {}
    for q in drawn:
        first.setdefault(q.question, q)
    qs = list(first.values())  # the first of each question text, in draw order
    graded = [i for i in answer_items(ctx, qs) if i is not None]
    train, held = split_items(graded, cfg.heldout_frac, cfg.seed)
    pool = Pool(tuple(train), tuple(held), knobs.tag, cal.to_dict() if cal else None, len(drawn),
                len(drawn) - len(qs), len(qs) - len(graded))
    check_pool(pool, cfg)
    return pool


def check_pool(pool: Pool, cfg: SelfKnowConfig) -> None:
    """Refuse a pool the adapter cannot learn from: too few items, or one class missing."""
    n_right = sum(i.correct for i in pool.train)
    if len(pool.train) < cfg.history_len + 2 or not pool.heldout:
        raise TrainDataError(f"{len(pool.train)} training and {len(pool.heldout)} held-out items graded "
                             f"(of {pool.n_drawn} drawn, {pool.n_ungraded} ungraded); need more than "
                             f"history_len={cfg.history_len} + 1 training items: raise --items (n_items)")
    if n_right in (0, len(pool.train)):
        what = "right" if n_right else "wrong"
        raise TrainDataError(f"the base model got every training item {what} at {pool.knobs}; nothing to tell "
                             "apart (use calibrate, or other digits/terms/ops)")


# ---------------------------------------------------------------- another model's truth
@dataclass(frozen=True)
class Truth:
    """Another model's truth (``truth_from``): its pool as its own run wrote it (its items in its
    split and order, its grades and replies; no token ids, the items are text) and whose it is
    (``source``: the directory, the sha256 of its truth.json, its base model and fingerprint)."""

    pool: Pool
    source: dict[str, Any]

    @property
    def digest(self) -> str:
        return "sha256:" + str(self.source["truth_sha256"])


def _csv_items(path: Path) -> list[tuple[str, str, str, str]]:
    """(id, question, answer, topic) of an ``items_csv`` file."""
    return [(r["id"], r["problem"], r["answer"], str(ast.literal_eval(r["metadata"])["topic"]))
            for r in csv.DictReader(io.StringIO(path.read_text(encoding="utf-8")))]


def read_truth(d: Path | str, cfg: SelfKnowConfig) -> Truth:
    """The truth of a finished self-knowledge training directory ``d`` (its own model's, not a
    shuffled control's, not itself trained on another's): truth.json, checked against the
    adapter's metadata (ids, split, errors) and against the question files (ids, questions,
    answers), and its item settings against ``cfg``'s. Anything else is a ``TrainDataError``."""
    from introspect.train.lora import META_FILE

    d = Path(d)
    where = f"--truth-from {d}"
    if not d.is_dir():
        raise TrainDataError(f"{where}: no such directory; give the --out directory of that model's own "
                             "train-selfknow run (train it first: the comparison needs its adapter)")
    if not (d / TRUTH).is_file():
        raise TrainDataError(f"{where} has no {TRUTH}: not the --out directory of a train-selfknow run")
    if not (d / META_FILE).is_file():
        raise TrainDataError(f"{where} holds no finished adapter ({META_FILE}); finish its training first")
    try:
        raw = (d / TRUTH).read_bytes()
        truth, meta = json.loads(raw), json.loads((d / META_FILE).read_text(encoding="utf-8"))
        sk, theirs = meta["selfknow"], SelfKnowConfig.from_dict(meta["training"])
        rows = {s: [r for r in truth["items"] if r["split"] == s] for s in ("train", "heldout")}
        if len(rows["train"]) + len(rows["heldout"]) != len(truth["items"]):
            raise ValueError("an item of another split")
        files = {s: _csv_items(d / f) for s, f in (("train", ITEMS_TRAIN), ("heldout", ITEMS_HELDOUT))}
        topic = {t[0]: t[3] for s in files for t in files[s]}
        pool = Pool(*(tuple(Item(str(r["id"]), str(r["question"]), str(r["answer"]), topic.get(str(r["id"]), ""),
                                 bool(r["base_correct"]), str(r["base_response"]), (), ()) for r in rows[s])
                      for s in ("train", "heldout")),
                    str(truth["knobs"]), truth.get("calibration"), int(truth["n_drawn"]), int(truth["n_duplicates"]),
                    int(truth["n_ungraded"]))
    except (OSError, ValueError, KeyError, TypeError, SyntaxError) as e:
        raise TrainDataError(f"{where}: not a readable train-selfknow directory ({type(e).__name__}: {e})") from e
    if theirs.shuffle or truth.get("shuffle"):
        raise TrainDataError(f"{where} is a shuffled control; give the adapter trained on its model's own truth "
                             "(same seed: the same items, split and truth)")
    if theirs.truth_from is not None or truth.get("truth_from"):
        raise TrainDataError(f"{where} was itself trained on another model's truth; give that model's own directory")
    for name, flag in ITEM_SETTINGS.items():
        mine, x = getattr(cfg, name), getattr(theirs, name)
        if mine != x:
            raise TrainDataError(f"{where} was trained with {name}={x!r} ({flag}), this run asks {mine!r}: its items, "
                                 "split and phase 1 would not be this run's; give the same settings")
    for s, items in (("train", pool.train), ("heldout", pool.heldout)):
        if [(i.id, i.question, i.answer) for i in items] != [t[:3] for t in files[s]]:
            raise TrainDataError(f"{where}: {TRUTH} and its {s} question file list other items")
    if (sk.get("train_ids") != [i.id for i in pool.train] or sk.get("heldout_ids") != [i.id for i in pool.heldout]
            or set(sk.get("base_wrong_ids", ())) != {i.id for i in (*pool.train, *pool.heldout) if not i.correct}):
        raise TrainDataError(f"{where}: {TRUTH} does not match its adapter's metadata (split or errors differ)")
    check_pool(pool, cfg)
    return Truth(pool, {"dir": str(d.resolve()), "truth_sha256": hashlib.sha256(raw).hexdigest(),
                        "base_model": meta.get("base_model"), "base_name": meta.get("base_name"),
                        "base_fingerprint": meta.get("base_fingerprint"), "adapter_hash": meta.get("adapter_hash"),
                        "training": {f.name: getattr(theirs, f.name) for f in fields(theirs)
                                     if f.name in ITEM_SETTINGS}})


def cross_pool(ctx: Any, truth: Truth) -> tuple[Pool, dict[str, bool | None]]:
    """This model's pool on another's truth: the truth's items in its split and order, each
    keeping that truth's grade, with this model's own baseline prompt and greedy reply (its
    tokenizer, its budget: the game's "own answer" targets and the replay rows stay its own);
    and this model's own grade of each (None: ungraded; recorded, never trained on)."""
    items = (*truth.pool.train, *truth.pool.heldout)
    got = replies(ctx, [i.short() for i in items])
    mine = [replace(i, response=text, prompt_ids=p, answer_ids=a) for i, (_, text, p, a) in zip(items, got)]
    n = len(truth.pool.train)
    return (replace(truth.pool, train=tuple(mine[:n]), heldout=tuple(mine[n:])),
            {i.id: (None if ok is None else bool(ok)) for i, (ok, *_) in zip(items, got)})


def labels(train: Sequence[Item], shuffle: bool, seed: int) -> list[bool]:
    """What each training item is trained to do: True = delegate (reply T). The truth (delegate
    exactly the items the base model gets wrong), or for the control the same labels permuted
    across the items (as many T targets, none tied to the model's errors)."""
    out = [not i.correct for i in train]
    if shuffle:
        random.Random(f"selfknow-shuffle:{seed}").shuffle(out)
    return out


# ---------------------------------------------------------------- rows
@dataclass(frozen=True)
class StepRows:
    """One step's rows: game questions (training-item indices) under one phase 1 of other
    training items at one teammate accuracy, and replay rows (indices into the replay list)."""

    game: tuple[int, ...]
    history: tuple[int, ...]
    teammate_accuracy: float
    replay: tuple[int, ...]


def step_rows(step: int, cfg: SelfKnowConfig, n_train: int, n_replay: int) -> StepRows:
    """The rows of step ``step``: a function of (seed, step, sizes) only, never of the labels."""
    rng = random.Random(f"selfknow-step:{cfg.seed}:{step}")
    n_rep = min(round(cfg.batch_size * cfg.replay_frac), cfg.batch_size - 1) if n_replay else 0
    game = rng.sample(range(n_train), min(cfg.batch_size - n_rep, n_train - cfg.history_len))
    rest = [i for i in range(n_train) if i not in set(game)]
    history = rng.sample(rest, cfg.history_len)
    acc = rng.choice(cfg.teammate_accuracy)
    return StepRows(tuple(game), tuple(history), float(acc), tuple(rng.randrange(n_replay) for _ in range(n_rep)))


def history_text(items: Sequence[Item], acc: float, seed: int) -> str:
    """Phase 1 without feedback, as the task writes it (``delegate.phase1``)."""
    return G.phase1([i.short() for i in items], G.teammate_history(len(items), acc, seed), False)


def game_prompts(ctx: Any, history: str, items: Sequence[Item]) -> list[Prompt]:
    """The task's game prompts (``game_conversation``, rendered in the run's format)."""
    return rendered(ctx, [G.game_conversation(history, i.short()) for i in items], "game-number")


def delegate_ids(ctx: Any) -> tuple[int, ...]:
    """The reply "T" as the model would write it after "Answer:" (one token the task reads as
    P(T): " T" when the tokenizer has it, else "T"), then the end of turn in chat format."""
    tok = ctx.model.tokenizer
    ids = letter_ids(tok, "T")["T"]
    if not ids:
        raise TrainDataError("this tokenizer has no single token for T; the Delegate Game cannot read P(T)")
    spaced = tok.encode(" T", add_special_tokens=False)
    first = spaced[0] if len(spaced) == 1 and spaced[0] in ids else ids[0]
    eos = tok.eos_token_id if prompt_format(ctx) == "chat" else None
    return (int(first), *((int(eos),) if eos is not None else ()))


def items_csv(items: Sequence[Item]) -> str:
    """The items as a question file the Delegate Game reads (``--option questions=FILE``): the
    SimpleQA layout with an ``id`` column, answer type "number" (graded by the number stated)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["id", "metadata", "problem", "answer"])
    for i in items:
        w.writerow([i.id, repr({"topic": i.topic, "answer_type": "number"}), i.question, i.answer])
    return buf.getvalue()
