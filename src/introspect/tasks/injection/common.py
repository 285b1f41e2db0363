"""Helpers shared by the concept-injection tasks A–D: concept choice, injection specs, batching.

Why shared: every task picks its concepts the same seeded way, turns (word, layer, α) into an
``InjectionSpec`` the same way (α in unit or residual-norm units, both recorded), and runs its
trials chunk by chunk through one ``generate`` call each (``execute_generation``). Keeping that
here keeps each task module about its protocol only.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from introspect.engine.run.chat import Conversation, Prompt, render
from introspect.engine.run.decode import Generation, generate
from introspect.engine.run.inject import From, InjectionSpec, Positions
from introspect.engine.vectors import residuals
from introspect.grading import NEXT_TURN_STOPS, yes_no_probs, yes_no_token_ids
from introspect.tasks import fewshot
from introspect.tasks.base import ConfigError, RunContext, Trial
from introspect.tasks.injection import examples as _examples  # noqa: F401  (registers the few-shot kinds)
from introspect.tasks.prompts import check_no_leak, load_sentences, load_words


def pick_concepts(ctx_or_cfg: Any) -> list[str]:
    """The run's concepts: a seeded sample of ``n_concepts`` target words (stable across reruns)."""
    cfg = getattr(ctx_or_cfg, "cfg", ctx_or_cfg)
    targets = list(load_words(cfg.words_file).targets)
    if cfg.n_concepts < 1:
        raise ConfigError(f"n_concepts must be at least 1, got {cfg.n_concepts}")
    if cfg.n_concepts > len(targets):
        raise ConfigError(f"n_concepts={cfg.n_concepts} exceeds the {len(targets)} target words in the words file")
    return random.Random(cfg.seed).sample(targets, cfg.n_concepts)


def sentence_param(concepts: list[str], word: str, i: int) -> tuple[str, int]:
    """Trial param naming the sentence of concept ``word``'s i-th trial (spread over the corpus)."""
    return ("sentence", (i + concepts.index(word)) % len(load_sentences()))


def grid(ctx: RunContext) -> list[tuple[int, float]]:
    """(layer, α) cells of the run; refuses an empty grid."""
    if not ctx.cfg.layers:
        raise ConfigError("empty layer list; pass --layers or --layers-grid")
    if not ctx.cfg.alphas:
        raise ConfigError("empty alpha list; pass --alphas")
    return [(int(layer), float(a)) for layer in ctx.cfg.layers for a in ctx.cfg.alphas]


def variants(ctx: RunContext, allowed: Sequence[str], default: Sequence[str], *, answered: bool = True) -> list[str]:
    """The run's variants (``--variant a,b`` or ``all``), marked ``+fewshot`` when that format
    runs and the task reads an answer (``answered``; task D is teacher-forced)."""
    v = ctx.cfg.variant
    if v is None:
        chosen = list(default)
    elif v == "all":
        chosen = list(allowed)
    else:
        chosen = [x.strip() for x in v.split(",")]
        bad = [x for x in chosen if x not in allowed]
        if bad:
            raise ConfigError(f"unknown variant {bad[0]!r}; this task has {', '.join(allowed)} (or 'all')")
    return [fewshot.fmt_variant(ctx, x) for x in chosen] if answered else chosen


# Task A's steering checks, one per injection span: ``steer`` injects from a mark in the question
# through the answer (as paper, explained and seed do), ``steer_two_turn`` over turn 1 only (as
# two_turn does). Neither is a detection framing; both are graded on the word's log-prob.
STEER_VARIANTS = ("steer", "steer_two_turn")


def base_variant(t: Trial | str) -> str:
    """A trial's (or variant's) name without its format mark and region (``paper@user``: see
    ``regions``): what selects the prompt."""
    return fewshot.split_variant(t if isinstance(t, str) else t.variant)[0].partition("@")[0]


def is_steer(variant: str) -> bool:
    """Whether a variant is a steering check (``steer``, ``steer_two_turn``, ``steer@<region>``)."""
    return base_variant(str(variant)) in STEER_VARIANTS


def steer_mask(variants: Any) -> Any:
    """``is_steer`` over a pandas Series of variants, as a boolean Series (one filter for the
    summary, the panels and the dashboard)."""
    return variants.astype(str).map(is_steer).astype(bool)


@dataclass(frozen=True)
class Injected:
    """A trial's injection: the spec, the signed norm actually added, and that strength in every unit."""

    spec: InjectionSpec
    effective: float
    alpha_as: dict[str, float]
    also: tuple[InjectionSpec, ...] = ()  # the same push elsewhere (a region's answer beside its prompt part)

    @property
    def specs(self) -> InjectionSpec | list[InjectionSpec]:
        """What a row injects: the spec, or every spec when the push has more than one place."""
        return [self.spec, *self.also] if self.also else self.spec


def _norm_positions(prompt: Prompt, positions: Positions) -> list[int]:
    """Prompt positions whose residual norm sets the ``resid`` unit (the last token if none)."""
    n = len(prompt)
    if isinstance(positions, From):
        return list(range(max(positions.start, 1), n))
    if positions in ("all", "prompt"):
        return list(range(1, n)) if n > 1 else [0]  # never position 0 (its attention-sink norm)
    if positions == "generated":
        return [n - 1]
    return [int(p) for p in positions]  # type: ignore[union-attr]


def resid_norms(ctx: RunContext, prompt: Prompt) -> Tensor:
    """Residual norms ``[layers, positions]`` of an un-injected prompt at the run's layers (memoised)."""
    memo = ctx.memo.setdefault("resid_norms", {})
    if prompt.ids not in memo:
        layers = sorted(set(ctx.cfg.layers)) or [ctx.model.cfg.n_layers // 2]
        acts = residuals(ctx.model, [prompt], layers, positions=[list(range(len(prompt)))])[0]
        memo[prompt.ids] = dict(zip(layers, acts.norm(dim=-1)))
    return memo[prompt.ids]


def spec_for(ctx: RunContext, trial: Trial, prompt: Prompt, positions: Positions, *, word: str | None = None,
             sign: float = 1.0, random_seed: int | None = None, norm_word: str | None = None) -> Injected:
    """The injection of a trial: concept ``word`` (default the trial's), a random direction
    (``random_seed``), at ``trial.alpha`` in the run's units. ``raw``: α × the raw mean-difference
    vector (Lindsey's strengths); ``unit``: α × the unit vector; ``resid``: α × the mean residual
    norm at the positions injected, measured on this prompt without injection. ``norm_word``: take
    the added norm from that concept (a different direction at the same strength)."""
    layer = int(trial.layer)  # type: ignore[arg-type]
    cv = ctx.vectors.get(word or trial.word, layer)
    ref = ctx.vectors.get(norm_word, layer) if norm_word else cv
    if random_seed is not None:
        cv = ctx.vectors.random_like(cv, random_seed)
    rn = float(resid_norms(ctx, prompt)[layer][_norm_positions(prompt, positions)].mean())
    units, a = ctx.cfg.alpha_units, float(trial.alpha)
    scale = {"unit": 1.0, "raw": ref.raw_norm, "resid": rn}
    if units not in scale:
        raise ConfigError(f"alpha_units must be raw, unit or resid, got {units!r}")
    eff = a * scale[units]
    alpha_as = {"unit": eff, "raw": eff / ref.raw_norm, "resid": eff / rn}
    vector = cv.vector
    if ctx.cfg.option("placebo", False):  # the instrument's null: a zero vector, same positions and α
        vector = torch.zeros_like(vector)
    return Injected(InjectionSpec(layer, sign * eff, vector, positions), sign * eff, alpha_as)


def other_concept(ctx: RunContext, concepts: Sequence[str], word: str, salt: str = "") -> str:
    """A different concept, deterministic per (run seed, word, salt): from the run's concepts when
    there are several, else any other target word."""
    pool = [w for w in concepts if w != word] or [w for w in load_words(ctx.cfg.words_file).targets if w != word]
    return random.Random(f"{ctx.cfg.seed}:{word}:{salt}").choice(pool)


def word_token_ids(tokenizer: Any, word: str) -> list[int]:
    """First-token ids of a word's surface forms (case, leading space, plural), for log-probs."""
    forms = {word, word.capitalize(), word + "s", word.capitalize() + "s"}
    ids = set()
    for f in forms:
        for text in (f, " " + f):
            toks = tokenizer(text, add_special_tokens=False)["input_ids"]
            if toks:
                ids.add(int(toks[0]))
    return sorted(ids)


def word_logprob(tokenizer: Any, g: Generation, word: str) -> float:
    """Log of the first-step probability mass on the word's forms (the steering check's score)."""
    ids = word_token_ids(tokenizer, word)
    return float(torch.logsumexp(g.first_logprobs[ids], dim=0))


def render_checked(ctx: RunContext, conv: Conversation, *, no_leak: Iterable[str] = (), allow_in=(),
                   chat: bool | None = None) -> Prompt:
    """Render a conversation (``chat`` as in ``chat.render``) after refusing any that leaks a
    word it must not contain."""
    for w in no_leak:
        if w:
            check_no_leak(conv, w, allow_in=allow_in)
    return render(ctx.model.tokenizer, conv, chat=chat)


def render_trial(ctx: RunContext, t: Trial, conv: Conversation, kind: str, *, no_leak: Iterable[str] = (),
                 allow_in=(), avoid: Iterable[str] = ()) -> Prompt:
    """A trial's prompt in its format: a ``+fewshot`` variant gets ``kind``'s worked examples
    (none mentioning the trial's words, ``no_leak`` and ``avoid``) in the plain "Human: …
    Assistant:" layout, any other the chat template; leaks refused as ``render_checked`` does."""
    no_leak = [w for w in no_leak if w]
    few = fewshot.split_variant(t.variant)[1]
    if few:
        conv = fewshot.with_examples(kind, conv, avoid=[*no_leak, *(w for w in avoid if w)])
    return render_checked(ctx, conv, no_leak=no_leak, allow_in=allow_in, chat=False if few else None)


def run_batch(ctx: RunContext, prompts: Sequence[Prompt], specs: Sequence[Any], *,
              max_new_tokens: int | None = None, seeds: Sequence[str] | None = None,
              stop: Sequence[str] | None = None) -> list[Generation]:
    """One ``generate`` call with the run's sampling; ``seeds`` are the rows' stream keys."""
    return generate(ctx.model, prompts, specs, max_new_tokens=max_new_tokens or ctx.cfg.max_new_tokens,
                    batch_size=ctx.cfg.batch_size, sampling=ctx.cfg.sampling, seeds=seeds,
                    stop=STOP_STRINGS if stop is None else stop)


STOP_STRINGS = NEXT_TURN_STOPS  # a base model's made-up next turn ends the answer (graders cut there too)


def stream_keys(ctx: RunContext, trial: Trial, n_prompts: int) -> list[str]:
    """Stream keys of a trial's prompts: matched across conditions that share the prompt."""
    key = trial.stream_key(ctx.fingerprint, ctx.cfg.seed)
    return [f"{key}:{j}" for j in range(n_prompts)]


@dataclass(frozen=True)
class Generated:
    """One trial after generation: its prompts, their injections (None = none), the outputs in
    the same order, and whatever the task's ``make`` returned beside them."""

    trial: Trial
    prompts: list[Prompt]
    specs: list[InjectionSpec | None]
    gens: list[Generation]
    extra: Any


Made = tuple[Sequence[Prompt], Sequence[InjectionSpec | None], Any]


def _pair_key(ctx: RunContext, trial: Trial) -> str:
    """Trials that share a stream up to the sample index: a control and its injected trials."""
    return replace(trial, sample=0).stream_key(ctx.fingerprint, ctx.cfg.seed)


def execute_generation(ctx: RunContext, trials: Sequence[Trial], make: Callable[[Trial], Made], *,
                       chunk: int = 4, max_new_tokens: int | None = None) -> Iterator[Generated]:
    """Run trials ``chunk × batch_size`` at a time: ``make(trial)`` gives the trial's prompts, one
    injection spec per prompt and any extra value; every prompt of a chunk goes through one
    ``run_batch`` call (``max_new_tokens``: this call's budget, default the run's), and the
    outputs come back per trial, in trial order."""
    size, lo = max(1, ctx.cfg.batch_size) * chunk, 0
    while lo < len(trials):
        hi = min(lo + size, len(trials))
        while hi < len(trials) and _pair_key(ctx, trials[hi]) == _pair_key(ctx, trials[hi - 1]):
            hi += 1  # a concept's control and its injected trials go through one call (see rows.next_batch)
        made = []
        chunk_trials, lo = trials[lo:hi], hi
        for t in chunk_trials:
            ps, ss, extra = make(t)
            if len(ps) != len(ss):
                raise ValueError(f"trial {t.condition}/{t.index}: {len(ps)} prompts but {len(ss)} specs")
            made.append((t, list(ps), list(ss), extra))
        seeds = [k for m in made for k in stream_keys(ctx, m[0], len(m[1]))]
        gens = iter(run_batch(ctx, [p for m in made for p in m[1]], [s for m in made for s in m[2]], seeds=seeds,
                              max_new_tokens=max_new_tokens))
        for t, ps, ss, extra in made:
            yield Generated(t, ps, ss, [next(gens) for _ in ps], extra)


def gen_info(ctx: RunContext, g: Generation | None = None, max_new_tokens: int | None = None) -> dict[str, Any]:
    """How an answer was produced: sampling settings, its stream seed, why it stopped, and (in
    reproducible mode, where the batch is pinned) the rows of the batch it was decoded in: a
    rerun that batches alike rounds alike."""
    info = {**ctx.cfg.sampling.to_dict(), "max_new_tokens": max_new_tokens or ctx.cfg.max_new_tokens}
    if g is not None:
        info.update(stream_seed=g.seed, stop_reason=g.stop_reason, **ctx.decode_batch(g))
    return info


def with_samples(ctx: RunContext, trials: Iterable[Trial]) -> list[Trial]:
    """Each planned trial once per sample index (K samples when sampling, one when greedy)."""
    return [replace(t, sample=k) for t in trials for k in ctx.cfg.samples]


class YesNo:
    """First-token p(yes)/p(no), the white-box score beside a yes/no style answer."""

    def __init__(self, tokenizer: Any):
        try:
            self.ids: tuple[list[int], list[int]] | None = yes_no_token_ids(tokenizer)
        except ValueError:
            self.ids = None

    def __call__(self, g: Generation) -> dict[str, float | None]:
        if self.ids is None:
            return {"p_yes": None, "p_no": None}
        p_yes, p_no, _ = yes_no_probs(g.first_logprobs, *self.ids)
        return {"p_yes": p_yes, "p_no": p_no}


def by_layer(trials: Sequence[Trial]) -> dict[int | None, list[Trial]]:
    """Group trials by layer, so one generate call covers a whole concept × α slice."""
    groups: dict[int | None, list[Trial]] = defaultdict(list)
    for t in trials:
        groups[t.layer].append(t)
    return dict(groups)


def positions_of(prompt: Prompt, mark: str) -> list[int]:
    return prompt.positions(mark)
