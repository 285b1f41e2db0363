"""What a training run works from: the concept split, vectors, residual norms, replay answers.

Why a module of its own: everything here is computed once from the base model before the first
step (and from the checkpoint on resume), and decides what the adapter can and cannot see; the
loop only draws rows from it. Nothing a held-out item carries (a held-out concept, a held-out
replay question, a held-out yes/no question) enters a training row.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from introspect.engine.run.inject import From, InjectionSpec
from introspect.tasks.prompts import leaks, load_words
from introspect.train import data as D
from introspect.train import replay as R
from introspect.train import split as S

if TYPE_CHECKING:
    from introspect.train.config import TrainConfig

N_SIBLINGS = D.N_OPTIONS - 1


@dataclass
class Plan:
    """What a run trains on: concepts, their vectors at the layer, residual norms, replay answers."""

    train: list[str]
    heldout: list[str]
    baseline: list[str]
    vectors: dict[str, torch.Tensor]  # unit vectors at cfg.layer
    resid: dict[str, float]  # mean residual norm from the mark to the prompt's end, per phrasing (trial 1)
    replay: list[R.ReplayItem]
    split: S.Split | None = None  # the split's record (rule, nearest training word of each held-out word)
    replay_heldout: list[R.ReplayItem] = field(default_factory=list)  # the damage gates' prompts, never trained
    questions: list[tuple[str, str]] = field(default_factory=list)  # content rows' yes/no questions
    gate_questions: list[tuple[str, str]] = field(default_factory=list)  # held-out yes/no questions (gates)
    siblings: dict[str, list[str]] = field(default_factory=dict)  # nearest training concepts (choice rows)
    replay_cached: bool = False  # the replay answers were read from the replay cache (not generated now)

    def basis(self) -> torch.Tensor:
        """The training concepts' unit vectors as rows ``[n, d]``."""
        return torch.stack([self.vectors[w] for w in self.train]).float()

    def scale(self) -> torch.Tensor:
        """Per-coordinate RMS of the training concepts' unit vectors ``[d]``: the matched noise's
        standard deviations (the variance profile of concept vectors, none of their directions)."""
        return self.basis().pow(2).mean(0).sqrt()


def nearest_siblings(vectors: dict[str, torch.Tensor], words: list[str], k: int = N_SIBLINGS) -> dict[str, list[str]]:
    """Each word's ``k`` nearest other words by cosine of their vectors (choice rows' distractors)."""
    if len(words) < 2:
        return {}
    m = torch.nn.functional.normalize(torch.stack([vectors[w] for w in words]).float(), dim=-1)
    sim = m @ m.T
    sim.fill_diagonal_(-2.0)
    top = sim.topk(min(k, len(words) - 1), dim=-1).indices
    return {w: [words[j] for j in top[i].tolist()] for i, w in enumerate(words)}


def split_questions(items: tuple[tuple[str, str], ...], heldout_frac: float,
                    seed: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(trained, held out) yes/no questions, seeded; held-out ones are the gates' only."""
    idx = list(range(len(items)))
    held = set(random.Random(f"yes-no:{seed}").sample(idx, round(heldout_frac * len(items))))
    return [items[i] for i in idx if i not in held], [items[i] for i in idx if i in held]


def prepare(model: Any, cfg: TrainConfig, *,
            replay: list[R.ReplayItem] | tuple[list[R.ReplayItem], list[R.ReplayItem]] | None = None,
            replay_cache: bool = True) -> Plan:
    """Split the concepts, build their vectors at the layer, measure residual norms, replay answers.

    ``replay``: the replay items already answered (a resume passes (trained, held out)); a list
    is the trained ones. Replay items and yes/no questions that mention a held-out word (any
    plural form) are left out, so no training row shows one. ``replay_cache``: read and write the
    base model's answers through ``train.replay.cached_replay``.
    """
    from introspect.engine.vectors import residuals

    words = load_words(cfg.words_file)
    train_words, replay_prompts = D.load_train_words(cfg.train_words_file)
    yes_no = D.load_yes_no(cfg.train_words_file)
    split_layer = cfg.split_at
    if not 0 <= split_layer < int(model.cfg.n_layers):
        raise D.TrainDataError(f"split_layer {split_layer} is not a layer of this model (0..{int(model.cfg.n_layers) - 1})")
    split, vecs = S.make_split(model, split_layer, train_words, words.targets, words.baseline, seed=cfg.seed,
                               heldout_frac=cfg.heldout_frac, rule=cfg.split, max_cos=cfg.max_cos,
                               avoid=D.task_a_texts(),
                               train_texts=D.training_texts(cfg.phrasings, replay_prompts, [q for q, _ in yes_no]))
    train, held = list(split.train), list(split.heldout)
    if split_layer != cfg.layer:  # nearness judged at another layer; the injected vectors are the trained layer's
        from introspect.engine.vectors import build_concept_vectors

        cvs = build_concept_vectors(model, train, [cfg.layer], list(words.baseline))
        vecs = {w: cvs[(w, cfg.layer)].vector for w in train}
    vectors = {w: vecs[w] for w in train}
    prompts = [D.render(model.tokenizer, D.detection_conv(p, 1)) for p in cfg.phrasings]
    spans = [D.injected_span(pr) for pr in prompts]  # the injected positions (two_turn: turn 1)
    where = [list(range(a, len(pr) if b is None else b)) for (a, b), pr in zip(spans, prompts)]
    # Twice, the second kept: on MKL this first batched pass of a process came out different in
    # its last digits in 11 of 45 fresh processes, the pass repeated at once never did (docs/decoding.md,
    # "Across processes"); the norms set every injection's strength, so the adapter's hash with them.
    residuals(model, prompts, [cfg.layer], positions=where)
    acts = residuals(model, prompts, [cfg.layer], positions=where)
    resid = {p: float(a[0].norm(dim=-1).mean()) for p, a in zip(cfg.phrasings, acts)}

    def clean(text: str) -> bool:
        return not any(leaks(text, w) for w in held)

    questions = [q for q in yes_no if clean(q[0])]
    trained_q, gate_q = split_questions(tuple(questions), cfg.yes_no_heldout, cfg.seed)
    cached = False
    if isinstance(replay, tuple):
        rep, rep_held = list(replay[0]), list(replay[1])
    elif replay is not None:
        rep, rep_held = list(replay), []
    else:
        chosen = [q for q in replay_prompts if clean(q)][:cfg.replay_prompts] if cfg.replay_frac > 0 else []
        items, cached = (R.cached_replay(model, chosen, seed=cfg.seed, tokens=cfg.replay_tokens, cache=replay_cache)
                         if chosen else ([], False))
        items = [r for r in items if clean(r.text) and clean(model.tokenizer.decode(list(r.ids)))]
        held_q = R.heldout_questions(len(chosen), cfg.replay_heldout, cfg.seed)
        held_text = {chosen[i] for i in held_q}  # nor as a multi-turn item's earlier turn
        rep = [r for r in items if r.question not in held_q and not any(c in held_text for _, c in r.messages)]
        rep_held = [r for r in items if r.question in held_q]
    return Plan(train, held, list(words.baseline), vectors, resid, rep, split, rep_held, trained_q, gate_q,
                nearest_siblings(vectors, train), cached)


def step_rows(plan: Plan, cfg: TrainConfig, step: int) -> list[D.Example]:
    """Training step ``step``'s rows, drawn from the plan as the config says (the loop trains on
    them; ``train.subspace`` fits the adapter's read directions on the same rows)."""
    return D.step_examples(step, seed=cfg.seed, batch_size=cfg.batch_size, train=plan.train,
                           phrasings=cfg.phrasings, strength=cfg.strength, n_trials=cfg.n_trials,
                           replay_frac=cfg.replay_frac, n_replay=len(plan.replay), mix=cfg.mix,
                           siblings=plan.siblings, questions=plan.questions, replay_steered=cfg.replay_steered)


def spec_for(ex: D.Example, enc: D.Encoded, plan: Plan, layer: int) -> InjectionSpec | None:
    """The injection of a row: a concept, an isotropic random direction (``gaussian``), one
    with the concept vectors' per-coordinate variances (``matched``) or a random mixture of the
    training concepts (``blend``: Gaussian weights, a draw from their full covariance), at
    strength × the residual norm.

    Why the diagonal of the covariance, not all of it: an isotropic direction lacks the few
    large coordinates every concept vector shares, so rejecting it is learned from them alone;
    matched noise has them. The full covariance of n < d training vectors is a random mixture
    *of those concepts*, which a detector should call a thought, and labelled "no" it teaches
    the adapter to accept only the training directions. An adapter trained that way (2026-11-25,
    smollm2 L20, 240 steps) said yes to held-out concepts as often as to a random direction
    (0.17 vs 0.17, greedy check), to training concepts 0.83. ``blend`` rows label that mixture
    "yes" instead: the whole span of the training concepts, not their few directions, is a thought.
    """
    if ex.kind == "replay":  # steered replay: a concept at the phrasings' mean residual norm
        if ex.concept is None:
            return None
        norm = ex.strength * sum(plan.resid.values()) / len(plan.resid)
        return InjectionSpec(layer, norm, plan.vectors[str(ex.concept)], From(enc.from_pos))
    if ex.kind not in D.INJECTED_KINDS or (ex.kind == "content" and ex.concept is None):
        return None
    norm = ex.strength * plan.resid[ex.phrasing]
    if ex.kind in ("gaussian", "matched", "blend"):
        g = torch.Generator().manual_seed(int(ex.noise_seed or 0))
        if ex.kind == "blend":
            v = torch.randn(len(plan.train), generator=g) @ plan.basis()
        else:
            v = torch.randn(len(next(iter(plan.vectors.values()))), generator=g)
            if ex.kind == "matched":
                v = v * plan.scale()
        v = v / v.norm()
    else:
        v = plan.vectors[str(ex.concept)]
    return InjectionSpec(layer, norm, v, enc.positions())
