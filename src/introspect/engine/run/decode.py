"""The one place that generates: seeded per-row sampling, a shared prefix computed once, stop strings.

Why a loop of our own: TransformerLens's ``generate`` samples from one global RNG (a row's text
then depends on its batch), cannot start from a precomputed KV cache, and cannot stop on strings.
This loop calls the model the bridge wraps (its blocks are the bridge's components, so every hook
fires under its TransformerLens name) with the HuggingFace KV cache, and:

- gives every output row its own RNG stream, seeded from (trial, sample index), so a row draws
  the same numbers alone, in a batch of 32, after a resume or in another shard. Its logits are
  bitwise the same alone, among K samples of its prompt, or beside equal-length prompts without
  a shared prefix (a batch never runs under ``rows.min_rows`` rows, probed per CPU); a batch whose prompts need padding
  or share a prefix rounds each row slightly differently (~1e-5 in log-probabilities), so a near-tie
  can flip a sampled answer: batch 1 vs 7 on task A of the quick preset differ in a few percent;
- everything per step stays on the device but the chosen ids, their log-probabilities and the
  distributions asked for; finished rows idle until a quarter of the batch has finished;
- computes the longest token prefix that all rows of a batch share *before their first injected
  position* once, and reuses its cache for every row; rows that are identical including their
  injections (K samples of one prompt) share their whole prompt pass;
- cuts each row at its end-of-sequence token or the first stop string, and drops finished rows;
- keeps log-probabilities: the chosen token's at every step, the full distribution at the steps
  asked for (step 0 always, as ``first_logprobs``) and at the step after a marker string, and,
  when asked (``top_logprobs=k``), the k most likely tokens of every step as plain floats.

Tasks hand it prompts, injection specs, seeds and a ``Sampling``; they never see caches or RNGs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from introspect.engine.load import determinism, devices
from introspect.engine.run.chat import Prompt
from introspect.engine.run.hf_call import forward, new_cache
from introspect.engine.run.inject import (
    InjectionError,
    RowSpecs,
    first_injected,
    injecting,
    spec_key,
)
from introspect.engine.run.record import Generation, RowRecords
from introspect.engine.run.rows import min_rows, next_batch
from introspect.engine.run.sampling import (  # noqa: F401  (re-exported: the public names live here too)
    GREEDY,
    Sampling,
    SamplingError,
    check_stops,
    choose,
    resolve_sampling,
    stream_seed,
)
from introspect.engine.run.stopping import Tails
from introspect.engine.run.stopping import eos_ids as _eos_ids

MIN_SHARED_PREFIX = 8  # shorter shared prefixes are not worth an extra forward call
COMPACT_SHARE = 0.25  # finished rows idle in the batch until this share of it is idle, then one compaction


@dataclass
class DecodeStats:
    """What a ``generate`` call did (for tests and the bench): injected positions per hook, the
    shared prefix of each batch, and how many token positions went through the model."""

    fired: dict[str, int] = field(default_factory=dict)
    shared_prefix: list[int] = field(default_factory=list)
    tokens_computed: int = 0
    compactions: int = 0  # times finished rows were dropped from a batch's KV cache
    batches: list[int] = field(default_factory=list)  # rows per batch actually run
    oom_halvings: list[int] = field(default_factory=list)  # batch sizes that ran out of memory

    def add_fired(self, fired: dict[str, int]) -> None:
        for k, v in fired.items():
            self.fired[k] = self.fired.get(k, 0) + v


def eos_ids(model: Any) -> set[int]:
    """Tokens that end a row: config, tokenizer, generation_config and end-of-turn (``introspect.engine.run.stopping``)."""
    return set(_eos_ids(model))


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
def _layout(units: list[tuple[Prompt, RowSpecs]], lp: int, pad_id: int) -> tuple[list[int], int, Tensor, Tensor]:
    """Each unit's own tokens (after the shared prefix of ``lp``), left-padded to the longest:
    their offsets, the width, ids ``[unit, width]`` and attention mask ``[unit, lp + width]``."""
    own = [len(p) - lp for p, _ in units]
    w = max(own)
    offsets = [w - n for n in own]
    u_ids = torch.full((len(units), w), pad_id, dtype=torch.long)
    u_mask = torch.zeros((len(units), lp + w), dtype=torch.long)
    u_mask[:, :lp] = 1
    for i, (p, _) in enumerate(units):
        u_ids[i, offsets[i]:] = torch.tensor(p.ids[lp:], dtype=torch.long)
        u_mask[i, lp + offsets[i]:] = 1
    return offsets, w, u_ids, u_mask


def _compact(cache: Any, bmask: Tensor, slots: list[int | None], floor: int, stats: DecodeStats) -> tuple[Tensor, list[int | None]]:
    """Drop idle slots from the KV cache and mask once a quarter of the batch is idle, keeping at
    least ``floor`` slots (a batch never runs under ``rows.min_rows`` rows)."""
    idle = sum(r is None for r in slots)
    if not idle or idle < COMPACT_SHARE * len(slots) or len(slots) <= floor:
        return bmask, slots
    keep = [j for j, r in enumerate(slots) if r is not None]
    keep = sorted(keep + [j for j, r in enumerate(slots) if r is None][:max(0, floor - len(keep))])
    keep_t = torch.tensor(keep, dtype=torch.long, device=bmask.device)
    cache.reorder_cache(keep_t)
    stats.compactions += 1
    return bmask[keep_t], [slots[j] for j in keep]


def _run_batch(model: Any, units: list[tuple[Prompt, RowSpecs]], row_unit: list[int], seeds: list[int | None],
               samples: list[int], *, sampling: Sampling, max_new_tokens: int, min_new_tokens: int, stops: tuple[str, ...],
               steps: set[int], markers: tuple[str, ...], use_cache: bool, share: bool,
               stats: DecodeStats, top_k: int = 0) -> list[Generation]:
    """Rows (output rows) point at units (distinct prompt + injections). Layout per row:
    ``[shared prefix lp | left pad | unit's own tokens | generated]``.

    Everything per step stays on the device but the chosen ids and their log-probabilities (and
    the full distributions asked for). A finished row leaves its slot idle until a quarter of the
    batch is idle, then the cache is compacted once, not copied at every finish."""
    tok, pad_id = model.tokenizer, model.tokenizer.pad_token_id
    pad_id = 0 if pad_id is None else pad_id
    eos, dev = eos_ids(model), model.cfg.device
    eos_t = torch.tensor(sorted(eos), dtype=torch.long) if eos else None  # moved to the logits' device once
    lp = shared_prefix(units) if (share and use_cache and len(units) > 1) else 0
    offsets, w, u_ids, u_mask = _layout(units, lp, pad_id)
    b, ru = len(row_unit), torch.tensor(row_unit, dtype=torch.long)
    reps = [row_unit.index(u) for u in range(len(units))]
    mult = [row_unit.count(u) for u in range(len(units))]
    gens = [torch.Generator().manual_seed(s) if s is not None else None for s in seeds]
    rec = RowRecords(b, eos, Tails(tok, stops, markers), steps, markers, top_k)
    ids, mask = u_ids[ru], u_mask[ru]
    stats.shared_prefix.append(lp)
    floor = min_rows(model)  # CPU GEMMs round a row as in any larger batch only from this many rows on
    extra = max(0, floor - len(units)) if use_cache else 0  # idle unit copies in the prompt pass
    with torch.no_grad():
        cache = new_cache(model) if use_cache else None
        if lp:  # the shared prefix once, before any hook is attached: nothing is injected before lp
            forward(model, torch.tensor([units[0][0].ids[:lp]]), u_mask[:1, :lp], cache)
            stats.tokens_computed += lp
            cache.reorder_cache(torch.zeros(len(units) + extra, dtype=torch.long, device=dev))
        specs = [units[u][1] for u in row_unit]
        with injecting(model, specs, [units[u][0] for u in row_unit], [offsets[u] for u in row_unit], lp) as inj:
            slots: list[int | None] = list(range(b))  # batch slot -> output row (None: finished, idle)
            if use_cache:  # each unit's own tokens once, then its cache copied to the unit's rows
                inj.select(reps + [None] * extra, mult + [1] * extra)
                inj.at(lp)
                up = torch.cat([torch.arange(len(units)), torch.zeros(extra, dtype=torch.long)])  # + idle copies
                logits, cache = forward(model, u_ids[up], u_mask[up], cache)
                stats.tokens_computed += u_ids.numel()
                ghosts = max(0, floor - b)  # idle copies of row 0: a batch never has under `floor` rows
                rows_t = torch.cat([ru, torch.zeros(ghosts, dtype=torch.long)])
                slots += [None] * ghosts
                cache.reorder_cache(rows_t.to(dev))
                logits = logits[rows_t.to(logits.device)]  # logits live where the unembedding is (the last GPU)
                inj.select(slots)
                bmask = u_mask[rows_t].to(dev)
            for t in range(max_new_tokens):
                if not use_cache:  # the reference path: the whole sequence again at every step
                    slots = [r for r in slots if r is not None]
                    inj.select(slots)
                    inj.at(0)
                    logits, _ = forward(model, ids[slots], mask[slots], None)
                    stats.tokens_computed += ids[slots].numel()
                if t < min_new_tokens and eos_t is not None:  # as transformers' min_new_tokens
                    eos_t = eos_t.to(logits.device)
                    logits = logits.index_fill(1, eos_t, float("-inf"))
                nxt = choose(logits, sampling, [gens[r] if r is not None else None for r in slots])
                done, nxt_of = rec.take(t, slots, torch.log_softmax(logits, dim=-1), nxt)
                if len(done) == len(nxt_of) or t == max_new_tokens - 1:
                    break
                for j in done:
                    slots[j] = None
                if not use_cache:
                    go = [r for r in slots if r is not None]
                    col_ids = torch.full((b, 1), pad_id, dtype=torch.long)
                    col_ids[go, 0] = torch.tensor([nxt_of[r] for r in go], dtype=torch.long)
                    col_mask = torch.zeros((b, 1), dtype=torch.long)
                    col_mask[go, 0] = 1
                    ids, mask = torch.cat([ids, col_ids], 1), torch.cat([mask, col_mask], 1)
                    continue
                bmask, slots = _compact(cache, bmask, slots, floor, stats)
                if done:
                    inj.select(slots)
                step = torch.tensor([[nxt_of[r] if r is not None else pad_id] for r in slots], dtype=torch.long)
                # idle slots attend too (their output is dropped): an all-ones column keeps the mask
                # of equal-length prompts all ones, so attention takes the same kernel as without them
                bmask = torch.cat([bmask, torch.ones((len(slots), 1), dtype=torch.long, device=dev)], 1)
                inj.at(lp + w + t)
                logits, cache = forward(model, step, bmask, cache)
                stats.tokens_computed += len(slots)
        stats.add_fired(inj.fired)
    return rec.generations(tok, stops, samples, seeds)


# ---------------------------------------------------------------- public API
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
    top_logprobs: int = 0,
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
    ``capture_after`` keep full next-token distributions at those steps / after those markers;
    ``top_logprobs=k`` keeps, for every generated token, its step's k most likely (id, log p)
    (``Generation.top_logprobs``; log-softmax of the logits the token was drawn from, before
    temperature; the end-of-sequence step, which adds no token, adds no entry).
    ``batch_size`` is an upper bound: a batch is as large as fits in free memory
    (``introspect.engine.load.devices.fit_batch``), and one that runs out of memory is halved and redone;
    with the batch pinned (``introspect.engine.load.determinism``) it is the size, and an
    out-of-memory error stops the call. Each ``Generation.batch`` says how many rows its batch had.
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
    if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int) or top_logprobs < 0:
        raise SamplingError(f"top_logprobs must be an integer >= 0, got {top_logprobs}")
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
    # rows of one prompt and one stream (a control and its injected rows) sit side by side and
    # share a batch where they fit: a batch's layout rounds every row alike (see rows.next_batch)
    group = [(prompts[i].ids, str(keys[i]), k) for i, k in rows]
    order = sorted(range(len(rows)), key=lambda r: (group[r], rows[r]))
    out: list[Generation | None] = [None] * len(rows)
    st = stats if stats is not None else DecodeStats()
    longest = max((len(p) for p in prompts), default=0) + max_new_tokens
    pinned = determinism.pinned(model)  # reproducible runs: batch_size as given, never lowered or stretched
    size = batch_size if pinned else min(batch_size, getattr(model, "introspect_batch_cap", batch_size),
                                         devices.fit_batch(model, longest, cap=batch_size))
    lo = 0
    while lo < len(order):
        # a quarter more rows to keep a group whole, unless memory is the limit (or ran out before)
        stretch = size if pinned or hasattr(model, "introspect_batch_cap") else \
            devices.fit_batch(model, longest, cap=size + size // 4)
        chunk = next_batch(order, group, lo, size, stretch)
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
        try:
            res = _run_batch(model, units, row_unit, row_seeds, [rows[r][1] for r in chunk], sampling=sampling,
                             max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens, stops=stops,
                             steps=set(logprob_steps), markers=markers, use_cache=use_cache, share=share_prefix, stats=st,
                             top_k=top_logprobs)
        except Exception as e:  # out of memory: halve the batch and redo this chunk; finished chunks stay
            size, failed = devices.halve_after_oom(model, e, size), size
            st.oom_halvings.append(failed)
            continue
        st.batches.append(len(chunk))
        for r, g in zip(chunk, res):
            out[r] = replace(g, batch=len(chunk))
        lo += len(chunk)
    return out  # type: ignore[return-value]


def pad_left(prompts: Sequence[Prompt], pad_id: int | None) -> tuple[Int[Tensor, "b p"], Int[Tensor, "b p"], list[int]]:
    from introspect.engine.run.inject import pad_left as _pad

    return _pad(prompts, 0 if pad_id is None else pad_id)


def next_token_logprobs(
    model: Any, prompts: Sequence[Prompt], injections: Sequence[RowSpecs] | None = None, *, batch_size: int = 16,
) -> Float[Tensor, "n vocab"]:
    """Log-probabilities of the next token after each prompt (one forward pass per batch; only
    the last position is unembedded, positions follow the padding mask). A batch that runs out
    of memory is redone at half the size, as in ``generate``; finished batches are kept."""
    injections = injections or [None] * len(prompts)
    rows = []
    size, lo = max(1, min(batch_size, getattr(model, "introspect_batch_cap", batch_size))), 0
    while lo < len(prompts):
        chunk, specs = prompts[lo:lo + size], injections[lo:lo + size]
        toks, mask, offsets = pad_left(chunk, model.tokenizer.pad_token_id)
        try:
            with injecting(model, specs, chunk, offsets), torch.no_grad():
                logits, _ = forward(model, toks, mask, None)
        except Exception as e:  # out of memory: halve and redo this batch
            size = devices.halve_after_oom(model, e, size)
            continue
        rows.append(torch.log_softmax(logits, dim=-1).cpu())
        lo += len(chunk)
    return torch.cat(rows)


def inject_once(model: Any, prompt: Prompt, spec: Any, **gen_kwargs: Any) -> str:
    """Seed §5: generate for one prompt with one injection active; return the text."""
    return generate(model, [prompt], [spec], **gen_kwargs)[0].text
