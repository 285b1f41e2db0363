"""What the self-knowledge tasks share: decisions read from next-token probabilities, sampled
behaviour with per-item RNG streams, the ``--option`` knobs, and the arithmetic variant tag.

Why decisions from logits: every choice the benchmarks ask for (a letter, yes/no, A/B) is the
first token after a prefilled "Answer:", so its probability is read there directly instead of
parsing a few greedy tokens. The mass the model puts on the allowed answers is recorded beside
the renormalised probabilities, and a decision with little mass is flagged, never silently
renormalised. Why sampled behaviour: what the model "does" (lists a word, refuses, answers
right) is a probability; each item's K draws come from streams keyed by the item, so a trial's
draws are the same alone, in any batch, shard or resume.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from introspect.engine.run.chat import Conversation, Prompt, render
from introspect.engine.run.decode import Generation, Sampling, generate
from introspect.tasks import fewshot
from introspect.tasks.base import ConfigError, RunContext

PREFILL = "Answer:"
LOW_MASS = 0.5  # a decision with less probability on its allowed answers than this is flagged
YES_NO = {"yes": ("Yes", "yes", "YES"), "no": ("No", "no", "NO")}


def user(text: str, prefill: str | None = None) -> Conversation:
    return Conversation.of(("user", text), prefill=prefill)


FORMATS, prompt_format, fmt_variant = fewshot.FORMATS, fewshot.prompt_format, fewshot.fmt_variant


def rendered(ctx: RunContext, convs: Sequence[Conversation], kind: str | None = None) -> list[Prompt]:
    """Prompts in the run's format: the chat template, or (``fewshot``) the kind's worked
    examples as earlier turns in the plain "Human: … Assistant:" layout."""
    if prompt_format(ctx) == "chat":
        return [render(ctx.model.tokenizer, c) for c in convs]
    return [render(ctx.model.tokenizer, fewshot.with_examples(kind, c) if kind else c, chat=False)
            for c in convs]


def stops(ctx: RunContext) -> tuple[str, ...]:
    """Stop strings: a made-up next "Human:" turn ends a few-shot answer."""
    return fewshot.STOP if prompt_format(ctx) == "fewshot" else ()


# ---------------------------------------------------------------- option knobs
def _opt(ctx: RunContext, key: str, default: Any) -> Any:
    v = ctx.cfg.option(key, default)
    return default if v is None else v


def _n(ctx: RunContext, default: int) -> int:
    return int(_opt(ctx, "n", default))


def _knob(v: Any) -> Any:
    return tuple(v) if isinstance(v, (list, tuple)) else v


def budget(ctx: RunContext, key: str, floor: int) -> int:
    """Token budget of a free-form answer: ``--option KEY=N``, else the larger of
    ``--max-new-tokens`` and ``floor`` (long enough that answers are rarely cut; the cut rate
    is recorded either way)."""
    v = int(_opt(ctx, key, max(floor, int(ctx.cfg.max_new_tokens))))
    if v < 1:
        raise ConfigError(f"option {key} must be a positive token count, got {v}")
    return v


class Budget(int):
    """A token budget that says where it came from (``option``, ``default``, ``calibrated``)."""

    source: str

    def __new__(cls, value: int, source: str = "default") -> Budget:
        b = super().__new__(cls, value)
        b.source = source
        return b

    def __reduce__(self) -> tuple:  # copies and pickles keep the source
        return Budget, (int(self), self.source)


_BUDGETS: dict[tuple, int] = {}
N_CALIBRATION = 4


def _calibration_answers(ctx: RunContext, prompts: Sequence[Prompt], cap: int, sampled: bool) -> list[Generation]:
    if not sampled or sampling(ctx).greedy:
        return greedy(ctx, prompts, cap)
    return generate(ctx.model, list(prompts), max_new_tokens=cap, sampling=sampling(ctx), n_samples=1,
                    seeds=[f"{ctx.cfg.seed}:calibration:{i}" for i in range(len(prompts))], stop=stops(ctx),
                    batch_size=ctx.cfg.batch_size)


def calibrated_budget(ctx: RunContext, key: str, prompts: Sequence[Prompt], floor: int, cap: int,
                      sampled: bool = False) -> Budget:
    """Token budget of a free-form answer from the model's own answers: ``--option KEY=N`` if
    given; else the first ``N_CALIBRATION`` prompts (the task passes the same ones whatever
    the batch, so shards agree) are answered with ``cap`` tokens, as the task will answer them
    (``sampled``: one seeded draw at the run's sampling, since sampled answers run longer than
    greedy ones; else greedily), and the budget is
    twice the longest answer that ended, plus 16, within [floor, cap] (``cap`` when any
    calibration answer was cut: answer lengths are heavy-tailed, and a cut answer has no
    length). ``--option calibrate=false`` uses ``budget(ctx, key, floor)``. Cached per model,
    format and prompts; the source is recorded in each record's ``gen.budget_source``."""
    if _opt(ctx, key, None) is not None or not _opt(ctx, "calibrate", True) or not prompts:
        return Budget(budget(ctx, key, floor), "option" if _opt(ctx, key, None) is not None else "default")
    cal = list(prompts)[:N_CALIBRATION]
    ck = (ctx.fingerprint, key, prompt_format(ctx), floor, cap, sampled, tuple(p.ids for p in cal))
    if ck not in _BUDGETS:
        gens = _calibration_answers(ctx, cal, cap, sampled)
        ended = [len(g.tokens) for g in gens if g.stop_reason != "length"]
        _BUDGETS[ck] = min(cap, max(floor, 2 * max(ended) + 16)) if len(ended) == len(gens) else cap
    return Budget(_BUDGETS[ck], "calibrated")


def arith_tag(digits: Any, terms: Any, ops: str) -> str:
    """Short name of an arithmetic setting ("arith-d1-3t2+-*"), so runs at different
    difficulty knobs get different variants and are never pooled by the summaries."""
    def f(v: Any) -> str:
        return "-".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)
    return f"arith-d{f(digits)}t{f(terms)}{ops}"


# ---------------------------------------------------------------- sampling
def sampling(ctx: RunContext) -> Sampling:
    """The run's sampling settings (``--temperature --top-p --top-k``)."""
    s = getattr(ctx.cfg, "sampling", None)
    if s is not None:
        return s
    return Sampling(float(getattr(ctx.cfg, "temperature", 0.0)), float(getattr(ctx.cfg, "top_p", 1.0)),
                    int(getattr(ctx.cfg, "top_k", 0)))


MIN_DRAWS = 5  # default K for every sampled truth


def n_draws(ctx: RunContext) -> int:
    """K behaviour draws per item: ``--option draws=K``, else the larger of ``--samples`` and
    ``MIN_DRAWS`` (a truth from one draw is a coin flip read as a fact; the summaries print a
    warning row whenever K = 1). Greedy decoding has one (K identical draws would fake a
    sample size)."""
    if sampling(ctx).greedy:
        return 1
    k = int(_opt(ctx, "draws", max(MIN_DRAWS, int(getattr(ctx.cfg, "n_samples", 1)))))
    if k < 1:
        raise ConfigError(f"option draws must be a positive number of sampled draws, got {k}")
    return k


def draws(ctx: RunContext, prompts: Sequence[Prompt], keys: Sequence[str], max_new_tokens: int,
          stop: Sequence[str] = ()) -> list[list[Generation]]:
    """K sampled completions per prompt (the run's sampling), each row from the stream of
    (its key, its sample index): per prompt, a list of K generations."""
    if not prompts:
        return []
    k = n_draws(ctx)
    gens = generate(ctx.model, list(prompts), max_new_tokens=max_new_tokens, sampling=sampling(ctx),
                    n_samples=k, seeds=[f"{ctx.cfg.seed}:{key}" for key in keys],
                    stop=tuple(stop) + stops(ctx), batch_size=ctx.cfg.batch_size)
    return [gens[i * k:(i + 1) * k] for i in range(len(prompts))]


def greedy(ctx: RunContext, prompts: Sequence[Prompt], max_new_tokens: int,
           stop: Sequence[str] = ()) -> list[Generation]:
    """One greedy completion per prompt: the text reading of a decision (its first step's
    distribution, ``first_logprobs``, is the logit reading)."""
    if not prompts:
        return []
    return generate(ctx.model, list(prompts), max_new_tokens=max_new_tokens, stop=tuple(stop) + stops(ctx),
                    batch_size=ctx.cfg.batch_size)


def gen_info(ctx: RunContext, g: Generation | None = None, **budgets: int) -> dict[str, Any]:
    """Sampling, token budgets and format; ``g``: the record's response, whose decode batch a
    reproducible run keeps (``RunContext.decode_batch``)."""
    return {"sampling": sampling(ctx).to_dict(), "n_draws": n_draws(ctx),
            "max_new_tokens": {k: int(v) for k, v in budgets.items()},
            "format": prompt_format(ctx),
            "budget_source": {k: getattr(v, "source", "fixed") for k, v in budgets.items()},
            **ctx.decode_batch(g)}


def cut(g: Generation) -> bool:
    """The completion was cut by its token budget (not ended by EOS or a stop string)."""
    return g.stop_reason == "length"


# ---------------------------------------------------------------- decisions from logits
def answer_ids(tokenizer: Any, spellings: Mapping[str, Sequence[str]]) -> dict[str, list[int]]:
    """Single-token spellings of each answer label ("A", " A"; "Yes", " yes", ...). A token
    that would spell two labels is dropped from both; a label may end up with no token."""
    out: dict[str, list[int]] = {}
    for label, forms in spellings.items():
        ids: list[int] = []
        for f in forms:
            for s in (f, " " + f):
                enc = tokenizer.encode(s, add_special_tokens=False)
                if len(enc) == 1 and tokenizer.decode(enc).strip() == f and enc[0] not in ids:
                    ids.append(int(enc[0]))
        out[label] = ids
    seen: dict[int, int] = {}
    for ids in out.values():
        for i in ids:
            seen[i] = seen.get(i, 0) + 1
    return {k: [i for i in v if seen[i] == 1] for k, v in out.items()}


def letter_ids(tokenizer: Any, letters: str) -> dict[str, list[int]]:
    return answer_ids(tokenizer, {L: (L,) for L in letters})


@dataclass(frozen=True)
class Decision:
    """A choice read from one next-token distribution: probabilities renormalised over the
    allowed answers, and ``mass``, the raw probability those answers had before that."""

    labels: tuple[str, ...]
    probs: tuple[float, ...]
    mass: float

    @property
    def choice(self) -> str:
        return self.labels[max(range(len(self.probs)), key=self.probs.__getitem__)]

    @property
    def low_mass(self) -> bool:
        return self.mass < LOW_MASS

    def p(self, label: str) -> float:
        return self.probs[self.labels.index(label)]

    def entropy(self, labels: Sequence[str] | None = None) -> float:
        """Entropy (nats) over ``labels`` (default all), renormalised over them."""
        ps = torch.tensor([self.p(x) for x in (labels or self.labels)], dtype=torch.float64)
        ps = ps / ps.sum()
        return float(-(ps * ps.clamp_min(1e-300).log()).sum())

    def to_dict(self) -> dict[str, Any]:
        return {"p": dict(zip(self.labels, self.probs)), "mass": self.mass, "choice": self.choice,
                "low_mass": self.low_mass}


def decide(logprobs: Float[Tensor, " vocab"], ids: Mapping[str, Sequence[int]]) -> Decision | None:
    """The decision at one step; None when some allowed answer has no single token (the
    tokenizer cannot express it, so no logit reading exists)."""
    if not ids or any(not v for v in ids.values()):
        return None
    lp = [float(torch.logsumexp(logprobs[list(v)].double(), 0)) for v in ids.values()]
    total = math.log(sum(math.exp(x) for x in lp)) if max(lp) > -math.inf else -math.inf
    if total == -math.inf:
        return None
    return Decision(tuple(ids), tuple(math.exp(x - total) for x in lp), math.exp(total))


def decisions(ctx: RunContext, prompts: Sequence[Prompt], ids: Mapping[str, Sequence[int]],
              text_tokens: int = 8) -> tuple[list[Decision | None], list[Generation]]:
    """Logit decision at each prompt's first answer step, plus a short greedy completion for
    the text reading. One ``generate`` call: prompts sharing a long prefix share its cache."""
    gens = greedy(ctx, prompts, text_tokens)
    return [decide(g.first_logprobs, ids) for g in gens], gens


def session_log(prompts: Sequence[Prompt], gens: Sequence[Generation]) -> list[dict[str, str]]:
    return [{"prompt": p.text, "response": g.text} for p, g in zip(prompts, gens)]
