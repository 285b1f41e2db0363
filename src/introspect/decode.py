"""The one place that generates: seeded per-row sampling, a shared prefix computed once, stop strings.

Why a loop of our own: TransformerLens's ``generate`` samples from one global RNG (a row's text
then depends on its batch), cannot start from a precomputed KV cache, and cannot stop on strings.
This loop calls the model the bridge wraps (its blocks are the bridge's components, so every hook
fires under its TransformerLens name) with the HuggingFace KV cache, and:

- gives every output row its own RNG stream, seeded from (trial, sample index): a trial's text is
  the same alone, in a batch of 32, after a resume or in another shard;
- computes the longest token prefix that all rows of a batch share *before their first injected
  position* once, and reuses its cache for every row; rows that are identical including their
  injections (K samples of one prompt) share their whole prompt pass;
- cuts each row at its end-of-sequence token or the first stop string, and drops finished rows;
- keeps log-probabilities: the chosen token's at every step, the full distribution at the steps
  asked for (step 0 always, as ``first_logprobs``) and at the step after a marker string.

Tasks hand it prompts, injection specs, seeds and a ``Sampling``; they never see caches or RNGs.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from introspect.chat import Prompt
from introspect.inject import InjectionError, RowSpecs, first_injected, injecting, spec_key

MIN_SHARED_PREFIX = 8  # shorter shared prefixes are not worth an extra forward call


class SamplingError(ValueError):
    """A sampling setting outside its range (reported as one line, exit 2, by the CLIs)."""


@dataclass(frozen=True)
class Sampling:
    """How to pick each token. ``temperature == 0`` is greedy; ``top_k == 0`` and ``top_p == 1`` are off."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self) -> None:
        t, p, k = self.temperature, self.top_p, self.top_k
        if not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise SamplingError(f"temperature must be a finite number >= 0 (0 = greedy), got {t}")
        if not isinstance(p, (int, float)) or not (0 < p <= 1):
            raise SamplingError(f"top_p must be in (0, 1], got {p}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise SamplingError(f"top_k must be an integer >= 0 (0 = off), got {k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict[str, Any]:
        return {"temperature": float(self.temperature), "top_p": float(self.top_p), "top_k": int(self.top_k),
                "do_sample": not self.greedy}


GREEDY = Sampling()


def stream_seed(key: str | int, sample: int = 0) -> int:
    """The RNG seed of output row (key, sample): a stable 63-bit hash, independent of batching."""
    return int.from_bytes(hashlib.sha256(f"{key}:{sample}".encode()).digest()[:8], "big") >> 1


@dataclass(frozen=True)
class Generation:
    """One output row: text, generated ids, log-probabilities, and how it was produced."""

    text: str
    tokens: tuple[int, ...]
    first_logprobs: Float[Tensor, " vocab"]  # full distribution at the first generated step
    token_logprobs: tuple[float, ...] = ()  # log p of each generated token
    step_logprobs: dict[int, Tensor] = field(default_factory=dict)  # full distribution at asked steps
    marked_logprobs: dict[str, Tensor] = field(default_factory=dict)  # at the step after a marker
    sample: int = 0
    seed: int | None = None  # this row's RNG stream (None when greedy)
    stop_reason: str = "length"  # "eos", "stop", or "length" (cut by max_new_tokens)

    @property
    def truncated(self) -> bool:
        return self.stop_reason == "length"


@dataclass
class DecodeStats:
    """What a ``generate`` call did (for tests and the bench): injected positions per hook, the
    shared prefix of each batch, and how many token positions went through the model."""

    fired: dict[str, int] = field(default_factory=dict)
    shared_prefix: list[int] = field(default_factory=list)
    tokens_computed: int = 0

    def add_fired(self, fired: dict[str, int]) -> None:
        for k, v in fired.items():
            self.fired[k] = self.fired.get(k, 0) + v


def check_stops(stop: Sequence[str]) -> tuple[str, ...]:
    if isinstance(stop, str):
        stop = (stop,)
    bad = [s for s in stop if not isinstance(s, str) or s == ""]
    if bad:
        raise SamplingError(f"stop strings must be non-empty strings, got {bad[0]!r}")
    return tuple(stop)


def eos_ids(model: Any) -> set[int]:
    ids = getattr(model.cfg, "eos_token_id", None)
    if ids is None:
        ids = model.tokenizer.eos_token_id
    return {int(i) for i in (ids if isinstance(ids, (list, tuple)) else [ids]) if i is not None}


# ---------------------------------------------------------------- token choice
def choose(logits: Float[Tensor, "b vocab"], sampling: Sampling, gens: Sequence[torch.Generator | None]) -> Int[Tensor, " b"]:
    """Next token per row. Each row draws one uniform number from its own generator (inverse CDF),
    so its choice depends only on its own logits and stream."""
    if sampling.greedy:
        return logits.argmax(-1)
    x = logits.float() / sampling.temperature
    if sampling.top_k:
        kth = x.topk(min(sampling.top_k, x.shape[-1]), dim=-1).values[:, -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if sampling.top_p < 1:
        sp, idx = probs.sort(dim=-1, descending=True)
        drop = (sp.cumsum(-1) - sp) >= sampling.top_p  # keep the smallest set reaching top_p
        probs = probs.scatter(-1, idx, sp.masked_fill(drop, 0.0))
    cdf = probs.cumsum(-1)
    u = torch.stack([torch.rand((), generator=g) for g in gens]) * cdf[:, -1]
    return torch.searchsorted(cdf, u[:, None]).squeeze(-1).clamp_(max=logits.shape[-1] - 1)


# ---------------------------------------------------------------- the model call
def _forward(model: Any, ids: Tensor, mask: Tensor, cache: Any | None) -> tuple[Tensor, Any]:
    """One call of the wrapped HF model (hooks fire under TL names). Positions come from the mask,
    so left padding and a padded gap after a shared prefix both get the right positions."""
    pos = (mask.long().cumsum(-1) - 1).clamp_(min=0)[:, -ids.shape[1]:]
    dev = model.cfg.device
    kw = dict(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev),
              past_key_values=cache, use_cache=cache is not None)
    if _keeps_last_logits(model.original_model):  # unembedding every prompt token is ~20% of a prefill
        kw["logits_to_keep"] = 1
    out = model.original_model(**kw)
    return out.logits[:, -1].float().cpu(), out.past_key_values


def _keeps_last_logits(hf: Any) -> bool:
    """Whether the HF model's forward takes ``logits_to_keep`` (asked of its signature, not by a
    failing call, so hooks never fire twice for one step)."""
    import inspect

    return "logits_to_keep" in inspect.signature(hf.forward).parameters


def _new_cache(model: Any) -> Any:
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.original_model.config)
    except TypeError:
        return DynamicCache()


def shared_prefix(units: Sequence[tuple[Prompt, RowSpecs]]) -> int:
    """Longest prefix all units share that lies before every unit's first injected position,
    leaving at least one own token per unit (its last-position logits come from the own pass)."""
    ids = [u[0].ids for u in units]
    limit = min(min(first_injected(s, len(p)) for p, s in units), min(len(i) for i in ids) - 1)
    n = 0
    while n < limit and all(i[n] == ids[0][n] for i in ids):
        n += 1
    return n if n >= MIN_SHARED_PREFIX else 0


# ---------------------------------------------------------------- one batch
def _run_batch(model: Any, units: list[tuple[Prompt, RowSpecs]], row_unit: list[int], seeds: list[int | None],
               samples: list[int], *, sampling: Sampling, max_new_tokens: int, min_new_tokens: int, stops: tuple[str, ...],
               steps: set[int], markers: tuple[str, ...], use_cache: bool, share: bool,
               stats: DecodeStats) -> list[Generation]:
    """Rows (output rows) point at units (distinct prompt + injections). Layout per row:
    ``[shared prefix lp | left pad | unit's own tokens | generated]``."""
    tok, pad_id = model.tokenizer, model.tokenizer.pad_token_id
    pad_id = 0 if pad_id is None else pad_id
    eos, dev = eos_ids(model), model.cfg.device
    lp = shared_prefix(units) if (share and use_cache and len(units) > 1) else 0
    own = [len(p) - lp for p, _ in units]
    w = max(own)
    offsets = [w - n for n in own]
    u_ids = torch.full((len(units), w), pad_id, dtype=torch.long)
    u_mask = torch.zeros((len(units), lp + w), dtype=torch.long)
    u_mask[:, :lp] = 1
    for i, (p, _) in enumerate(units):
        u_ids[i, offsets[i]:] = torch.tensor(p.ids[lp:], dtype=torch.long)
        u_mask[i, lp + offsets[i]:] = 1
    b, ru = len(row_unit), torch.tensor(row_unit, dtype=torch.long)
    reps = [row_unit.index(u) for u in range(len(units))]
    mult = [row_unit.count(u) for u in range(len(units))]
    gens = [torch.Generator().manual_seed(s) if s is not None else None for s in seeds]
    out_ids: list[list[int]] = [[] for _ in range(b)]
    tok_lp: list[list[float]] = [[] for _ in range(b)]
    step_lp: list[dict[int, Tensor]] = [{} for _ in range(b)]
    mark_lp: list[dict[str, Tensor]] = [{} for _ in range(b)]
    reason, texts = ["length"] * b, [""] * b
    ids, mask = u_ids[ru], u_mask[ru]
    stats.shared_prefix.append(lp)
    with torch.no_grad():
        cache = _new_cache(model) if use_cache else None
        if lp:  # the shared prefix once, before any hook is attached: nothing is injected before lp
            _forward(model, torch.tensor([units[0][0].ids[:lp]]), u_mask[:1, :lp], cache)
            stats.tokens_computed += lp
            cache.reorder_cache(torch.zeros(len(units), dtype=torch.long, device=dev))
        specs = [units[u][1] for u in row_unit]
        with injecting(model, specs, [units[u][0] for u in row_unit], [offsets[u] for u in row_unit], lp) as inj:
            if use_cache:  # each unit's own tokens once, then its cache copied to the unit's rows
                inj.select(reps, mult)
                inj.at(lp)
                logits, cache = _forward(model, u_ids, u_mask, cache)
                stats.tokens_computed += u_ids.numel()
                cache.reorder_cache(ru.to(dev))
                logits = logits[ru]
            active = list(range(b))
            for t in range(max_new_tokens):
                if not use_cache:  # the reference path: the whole sequence again at every step
                    inj.select(active)
                    inj.at(0)
                    logits, _ = _forward(model, ids[active], mask[active], None)
                    stats.tokens_computed += ids[active].numel()
                if t < min_new_tokens and eos:  # as transformers' min_new_tokens: no end before t tokens
                    logits = logits.clone()
                    logits[:, sorted(eos)] = float("-inf")
                lps = torch.log_softmax(logits, dim=-1)
                nxt = choose(logits, sampling, [gens[r] for r in active])
                still = []
                for j, r in enumerate(active):
                    if t == 0 or t in steps:
                        step_lp[r][t] = lps[j]
                    for mk in markers:
                        if mk not in mark_lp[r] and texts[r].endswith(mk):
                            mark_lp[r][mk] = lps[j]
                    tid = int(nxt[j])
                    if tid in eos:
                        reason[r] = "eos"
                        continue
                    out_ids[r].append(tid)
                    tok_lp[r].append(float(lps[j, tid]))
                    texts[r] = tok.decode(out_ids[r], skip_special_tokens=True)
                    if stops and any(s in texts[r] for s in stops):
                        reason[r] = "stop"
                        continue
                    still.append(j)
                if not still or t == max_new_tokens - 1:
                    break
                keep = torch.tensor(still, dtype=torch.long)
                new_active = [active[j] for j in still]
                col_ids = torch.full((b, 1), pad_id, dtype=torch.long)
                col_ids[new_active, 0] = nxt[keep]
                col_mask = torch.zeros((b, 1), dtype=torch.long)
                col_mask[new_active, 0] = 1
                ids, mask = torch.cat([ids, col_ids], 1), torch.cat([mask, col_mask], 1)
                if use_cache:
                    if len(still) < len(active):
                        cache.reorder_cache(keep.to(dev))
                    inj.select(new_active)
                    inj.at(lp + w + t)
                    logits, cache = _forward(model, nxt[keep][:, None], mask[new_active], cache)
                    stats.tokens_computed += len(new_active)
                active = new_active
        stats.add_fired(inj.fired)
    res = []
    for r in range(b):
        text = texts[r]
        if reason[r] == "stop":
            text = text[:min(text.index(s) for s in stops if s in text)]
        res.append(Generation(text, tuple(out_ids[r]), step_lp[r][0], tuple(tok_lp[r]), step_lp[r], mark_lp[r],
                              samples[r], seeds[r], reason[r]))
    return res


# ---------------------------------------------------------------- public API
def resolve_sampling(sampling: Sampling | None = None, *, temperature: float | None = None, top_p: float | None = None,
                     top_k: int | None = None, do_sample: bool | None = None) -> Sampling:
    """A ``Sampling`` from loose keywords (``do_sample=False`` forces greedy, as in transformers)."""
    if sampling is not None:
        return sampling
    t = temperature if temperature is not None else (1.0 if do_sample else 0.0)
    if do_sample is False:
        t = 0.0
    return Sampling(float(t), 1.0 if top_p is None else top_p, 0 if top_k is None else top_k)


def generate(
    model: Any,
    prompts: Sequence[Prompt],
    injections: Sequence[RowSpecs] | None = None,
    *,
    max_new_tokens: int = 40,
    min_new_tokens: int = 0,
    sampling: Sampling | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    do_sample: bool | None = None,
    n_samples: int = 1,
    seeds: Sequence[str | int] | None = None,
    seed: int | None = None,
    stop: Sequence[str] = (),
    logprob_steps: Sequence[int] = (),
    capture_after: Sequence[str] = (),
    batch_size: int = 16,
    share_prefix: bool = True,
    use_cache: bool = True,
    stats: DecodeStats | None = None,
) -> list[Generation]:
    """Generate ``n_samples`` rows per prompt (prompt-major order), each with its own injections.

    Greedy unless a temperature > 0 is given (``sampling=Sampling(1.0)`` or ``temperature=1.0``).
    Row (prompt i, sample k) samples from the stream ``stream_seed(seeds[i], k)``; without
    ``seeds`` the key is ``seed`` plus a hash of the prompt's tokens, so equal prompts draw equal
    streams. ``min_new_tokens`` forbids the end-of-sequence token before that many tokens (equal
    work for timing, as in transformers). ``stop`` strings end a row and are cut from its text; ``logprob_steps`` and
    ``capture_after`` keep full next-token distributions at those steps / after those markers.
    """
    sampling = resolve_sampling(sampling, temperature=temperature, top_p=top_p, top_k=top_k, do_sample=do_sample)
    stops = check_stops(stop)
    markers = check_stops(capture_after)
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:
        raise SamplingError(f"n_samples must be an integer >= 1, got {n_samples}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise SamplingError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens}")
    if isinstance(min_new_tokens, bool) or not isinstance(min_new_tokens, int) or not 0 <= min_new_tokens <= max_new_tokens:
        raise SamplingError(f"min_new_tokens must be an integer in [0, max_new_tokens={max_new_tokens}], got {min_new_tokens}")
    if batch_size < 1:
        raise SamplingError(f"batch_size must be >= 1, got {batch_size}")
    injections = list(injections) if injections is not None else [None] * len(prompts)
    if len(injections) != len(prompts):
        raise InjectionError(f"{len(injections)} injection rows for {len(prompts)} prompts")
    if seeds is not None and len(seeds) != len(prompts):
        raise SamplingError(f"{len(seeds)} seeds for {len(prompts)} prompts; give one per prompt")
    for p, specs in zip(prompts, injections):  # every bad spec fails before any compute
        for spec in [] if specs is None else [specs] if not isinstance(specs, Sequence) else specs:
            spec.validate(model, len(p))
    keys = list(seeds) if seeds is not None else [
        f"{seed or 0}:{hashlib.sha256(str(p.ids).encode()).hexdigest()[:16]}" for p in prompts]
    rows = [(i, k) for i in range(len(prompts)) for k in range(n_samples)]
    order = sorted(range(len(rows)), key=lambda r: (prompts[rows[r][0]].ids, rows[r]))
    out: list[Generation | None] = [None] * len(rows)
    for lo in range(0, len(order), batch_size):
        chunk = order[lo:lo + batch_size]
        unit_of: dict[tuple, int] = {}
        units: list[tuple[Prompt, RowSpecs]] = []
        row_unit = []
        for r in chunk:
            i = rows[r][0]
            key = (prompts[i].ids, spec_key(injections[i]))
            if key not in unit_of:
                unit_of[key] = len(units)
                units.append((prompts[i], injections[i]))
            row_unit.append(unit_of[key])
        row_seeds = [None if sampling.greedy else stream_seed(keys[rows[r][0]], rows[r][1]) for r in chunk]
        res = _run_batch(model, units, row_unit, row_seeds, [rows[r][1] for r in chunk], sampling=sampling,
                         max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens, stops=stops, steps=set(logprob_steps), markers=markers,
                         use_cache=use_cache, share=share_prefix, stats=stats if stats is not None else DecodeStats())
        for r, g in zip(chunk, res):
            out[r] = g
    return out  # type: ignore[return-value]


def pad_left(prompts: Sequence[Prompt], pad_id: int | None) -> tuple[Int[Tensor, "b p"], Int[Tensor, "b p"], list[int]]:
    from introspect.inject import pad_left as _pad

    return _pad(prompts, 0 if pad_id is None else pad_id)


def next_token_logprobs(
    model: Any, prompts: Sequence[Prompt], injections: Sequence[RowSpecs] | None = None, *, batch_size: int = 16,
) -> Float[Tensor, "n vocab"]:
    """Log-probabilities of the next token after each prompt (one forward pass per batch)."""
    injections = injections or [None] * len(prompts)
    rows = []
    for lo in range(0, len(prompts), batch_size):
        chunk, specs = prompts[lo:lo + batch_size], injections[lo:lo + batch_size]
        toks, mask, offsets = pad_left(chunk, model.tokenizer.pad_token_id)
        with injecting(model, specs, chunk, offsets), torch.no_grad():
            logits = model(toks.to(model.cfg.device), attention_mask=mask.to(model.cfg.device))
        rows.append(torch.log_softmax(logits[:, -1].float().cpu(), dim=-1))
    return torch.cat(rows)


def inject_once(model: Any, prompt: Prompt, spec: Any, **gen_kwargs: Any) -> str:
    """Seed §5: generate for one prompt with one injection active; return the text."""
    return generate(model, [prompt], [spec], **gen_kwargs)[0].text
