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
from dataclasses import dataclass
from typing import Any

from introspect.chat import Conversation, Prompt, render
from introspect.grading import yes_no_probs, yes_no_token_ids
from introspect.inject import Generation, InjectionSpec, Positions, generate
from introspect.prompts import check_no_leak, load_sentences, load_words
from introspect.tasks.base import ConfigError, RunContext, Trial


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


def variants(ctx: RunContext, allowed: Sequence[str], default: Sequence[str]) -> list[str]:
    v = ctx.cfg.variant
    if v is None:
        return list(default)
    if v == "all":
        return list(allowed)
    chosen = [x.strip() for x in v.split(",")]
    bad = [x for x in chosen if x not in allowed]
    if bad:
        raise ConfigError(f"unknown variant {bad[0]!r}; this task has {', '.join(allowed)} (or 'all')")
    return chosen


def spec_for(ctx: RunContext, trial: Trial, positions: Positions, *, word: str | None = None,
             sign: float = 1.0, random_seed: int | None = None) -> tuple[InjectionSpec, float]:
    """The injection of a trial (concept ``word`` or a random unit vector) and its effective α."""
    layer = int(trial.layer)  # type: ignore[arg-type]
    cv = ctx.vectors.get(word or trial.word, layer)
    if random_seed is not None:
        cv = ctx.vectors.random_like(cv, random_seed)
    eff = cv.alpha_effective(trial.alpha, ctx.cfg.alpha_units)
    return InjectionSpec(layer, sign * eff, cv.vector, positions), sign * eff


def render_checked(ctx: RunContext, conv: Conversation, *, no_leak: Iterable[str] = (), allow_in=()) -> Prompt:
    """Render a conversation after refusing any that leaks a word it must not contain."""
    for w in no_leak:
        if w:
            check_no_leak(conv, w, allow_in=allow_in)
    return render(ctx.model.tokenizer, conv)


def run_batch(ctx: RunContext, prompts: Sequence[Prompt], specs: Sequence[Any], *,
              max_new_tokens: int | None = None) -> list[Generation]:
    return generate(ctx.model, prompts, specs, max_new_tokens=max_new_tokens or ctx.cfg.max_new_tokens,
                    batch_size=ctx.cfg.batch_size)


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


def execute_generation(ctx: RunContext, trials: Sequence[Trial], make: Callable[[Trial], Made], *,
                       chunk: int = 4) -> Iterator[Generated]:
    """Run trials ``chunk × batch_size`` at a time: ``make(trial)`` gives the trial's prompts, one
    injection spec per prompt and any extra value; every prompt of a chunk goes through one
    ``run_batch`` call, and the outputs come back per trial, in trial order."""
    size = ctx.cfg.batch_size * chunk
    for lo in range(0, len(trials), size):
        made = []
        for t in trials[lo:lo + size]:
            ps, ss, extra = make(t)
            if len(ps) != len(ss):
                raise ValueError(f"trial {t.condition}/{t.index}: {len(ps)} prompts but {len(ss)} specs")
            made.append((t, list(ps), list(ss), extra))
        gens = iter(run_batch(ctx, [p for m in made for p in m[1]], [s for m in made for s in m[2]]))
        for t, ps, ss, extra in made:
            yield Generated(t, ps, ss, [next(gens) for _ in ps], extra)


def gen_info(ctx: RunContext, max_new_tokens: int | None = None) -> dict[str, Any]:
    return {"do_sample": False, "temperature": 0.0, "top_p": 1.0,
            "max_new_tokens": max_new_tokens or ctx.cfg.max_new_tokens}


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
