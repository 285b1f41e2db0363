"""Task A's latent naming: which of the run's concepts does the injection make most likely to be named?

Why a reading beside the sampled answer: a model can carry which concept was injected without
saying it (Pearson-Vogel et al. 2026 pick the injected concept out of a list from the logits). A
small model that has learned to name a handful of training concepts puts its free-text naming
mass on those words, so a held-out concept it ranks first among the candidates is rarely sampled.
The reading prefills the framing's own answer up to the name ("Yes, I detect an injected
thought. It is about", or the seed format's "INJECTION:") and reads, in one forward pass, the
log-probability of each run concept's first token (and of each word whose vector is given as
"another concept's"). The unit of the decision is the *rise* over
the same prompt without injection (the trial's control), so a word the model names anyway does
not win: ``grade.latent_names_word`` says the trial's word rose most, and under another concept's
vector ``grade.latent_names_vector_word`` says that vector's word did. Chance is 1/K for K
candidates; the metrics pair each against the same reading under another concept's vector, as
free-text identification is paired. Ties on a shared first token count as no hit.

Why a second, neutral reading: the vector is injected over the prefill too (as the sampled
trial is, outside two-turn), and a concept vector pushes its own word wherever it is added; that
is steering, and it raises the word after "It is about" whether or not anything was detected.
So the same rise is read again under a prefill that reports nothing but leaves the same kind of
slot ("Sure, here is a short story. It is about"; for the seed format "TOPIC:", a one-word label
of what something is about, as "INJECTION: <word>" is), with the same conversation, vector and
injection rule, against the matched control read with that prefill: ``grade.latent_*_neutral``.
Only the report reading minus the neutral one, paired per concept, is latent naming beyond
steering; until a reading is beyond steering it is a steering reading, not identification. Both
readings rank the same candidates (words with a clean first token after both prefills), so
they share K and chance. The prefills used are in ``extra.latent_prefill`` and
``extra.latent_neutral_prefill``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from introspect.engine.run.chat import Conversation, Prompt
from introspect.tasks.base import RunContext, Trial
from introspect.tasks.injection import common

PREFILL = "Yes, I detect an injected thought. It is about"
PREFILL_SEED = "INJECTION:"
NEUTRAL = "Sure, here is a short story. It is about"  # no report; the name slot as in PREFILL
NEUTRAL_SEED = "TOPIC:"  # no report; a one-word label of what it is about, as "INJECTION: <word>"
READINGS = (("", False), ("_neutral", True))  # (grade-key suffix, neutral prefill?)
CONDITIONS = ("control", "injected", "concept_random")
DIGITS = 4  # rises compared at 1e-4 nats: closer candidates tie (no hit)


def prefill_text(variant: str, neutral: bool = False) -> str:
    """The prefill of a framing's reading (read at call time, so a test can replace it)."""
    if neutral:
        return NEUTRAL_SEED if variant == "seed" else NEUTRAL
    return PREFILL_SEED if variant == "seed" else PREFILL


def prefilled(conv: Conversation, variant: str, neutral: bool = False) -> Conversation:
    """The framing's conversation with its answer written up to the concept's name (or, neutral,
    with a continuation that reports nothing, up to the same kind of slot)."""
    return replace(conv, prefill=prefill_text(variant, neutral))


def first_tokens(tokenizer: Any, prefill: str, words: Sequence[str]) -> list[int | None]:
    """The token each word starts with after ``prefill`` (None when the prefill's own tokens
    change with the word, so the word has no clean first token)."""
    head = tokenizer(prefill, add_special_tokens=False)["input_ids"]
    out: list[int | None] = []
    for w in words:
        ids = tokenizer(f"{prefill} {w}", add_special_tokens=False)["input_ids"]
        out.append(int(ids[len(head)]) if ids[:len(head)] == head and len(ids) > len(head) else None)
    return out


def _key(t: Trial) -> tuple:
    return (t.variant, t.condition, t.index, t.layer, float(t.alpha), t.word, t.params)


def readings(ctx: RunContext, trials: Sequence[Trial], candidates: Sequence[str],
             make: Callable[[Trial, Conversation], tuple[Prompt, Any]],
             conv_of: Callable[[Trial], Conversation]) -> dict[tuple, dict[str, Any]]:
    """Latent-naming grades (and the prefills read) per trial, keyed without the sample: the
    reading is deterministic.

    ``make(trial, conversation)`` renders the prefilled prompt and returns it with the trial's
    injection spec (None for a control), exactly as the sampled trial is injected; both prefills
    go through it, so the neutral reading is injected over its prefill as the report one is.
    ``candidates`` must not depend on which trials run (a shard or a resumed run reads the same).
    One batched pass reads every trial and control under both prefills (two rows each).
    """
    from introspect.engine.run.decode import next_token_logprobs

    tok = ctx.model.tokenizer
    todo: dict[tuple, Trial] = {}
    for t in trials:
        if t.condition in CONDITIONS[1:] and not common.is_steer(t.variant) and "@" not in t.variant:  # whole spans only
            todo.setdefault(_key(t), t)
            ctl = replace(t, condition="control", layer=None, alpha=0.0, params=(), sample=0)
            todo.setdefault(_key(ctl), ctl)  # its matched control, even when a resumed run already has it
    if not todo or len(candidates) < 2:
        return {}
    items = list(todo.items())
    rows, prompts, specs = [], [], []
    for k, t in items:
        for suffix, neutral in READINGS:  # a trial's two rows side by side: one batch, one padding
            p, spec = make(t, prefilled(conv_of(t), common.base_variant(t), neutral))
            rows.append((k, suffix))
            prompts.append(p)
            specs.append(spec)
    lps = next_token_logprobs(ctx.model, prompts, specs, batch_size=ctx.cfg.batch_size)
    raw = dict(zip(rows, lps))
    firsts = {}  # per framing: each reading's first tokens, for the words clean under both prefills
    for v in {common.base_variant(t) for _, t in items}:
        per = {s: first_tokens(tok, prefill_text(v, n), candidates) for s, n in READINGS}
        ok = [all(per[s][j] is not None for s, _ in READINGS) for j in range(len(candidates))]
        firsts[v] = {s: [(w, i) for w, i, good in zip(candidates, ids, ok) if good] for s, ids in per.items()}
    out: dict[tuple, dict[str, Any]] = {}
    for k, t in items:
        if t.condition == "control":
            continue
        v = common.base_variant(t)
        if len(firsts[v][""]) < 2:
            continue
        ck = (t.variant, "control", t.index, None, 0.0, t.word, ())
        grade: dict[str, Any] = {"latent_k": len(firsts[v][""])}
        for suffix, _ in READINGS:
            # rounded: a resumed shard's batches differ from the first run's in float rounding, never in the reading
            rise = {w: round(float(raw[k, suffix][i] - raw[ck, suffix][i]), DIGITS) for w, i in firsts[v][suffix]}
            grade.update(_grade(rise, t, suffix))
        out[k] = {"grade": grade, "extra": {"latent_prefill": prefill_text(v),
                                            "latent_neutral_prefill": prefill_text(v, True)}}
    return out


def _grade(rise: dict[str, float], t: Trial, suffix: str) -> dict[str, Any]:
    """One reading's grade: the top riser (None on a tie), and whether it is the trial's word
    (and, under another concept's vector, that vector's word); keys end in ``suffix``."""
    best = max(rise.values())
    top = [w for w, r in rise.items() if r == best]
    g: dict[str, Any] = {f"latent_top{suffix}": top[0] if len(top) == 1 else None,
                         f"latent_names_word{suffix}": top == [t.word] if t.word in rise else None}
    if t.word in rise:
        g[f"latent_rank{suffix}"] = 1 + sum(r > rise[t.word] for r in rise.values())
    vw = t.param("vector_word")
    if t.condition == "concept_random" and vw:
        g[f"latent_names_vector_word{suffix}"] = top == [vw] if vw in rise else None
    return g


def grade_of(found: dict[tuple, dict[str, Any]], t: Trial) -> dict[str, Any]:
    return dict(found.get(_key(t), {}).get("grade", {}))


def extra_of(found: dict[tuple, dict[str, Any]], t: Trial) -> dict[str, Any]:
    """The prefills a trial's readings were taken under (empty when it has none)."""
    return dict(found.get(_key(t), {}).get("extra", {}))
