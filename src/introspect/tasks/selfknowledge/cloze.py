"""Cloze scoring of multiple-choice items: each option's text scored as the answer to the bare
question, no letters shown, the decision the best-scoring option.

Why: a small model that says "A" whatever it is asked scores, under a letter argmax, the share
of items keyed A; its "ability" is then its letter prior. Rotations (``rotations.py``) remove the
prior by averaging it out; cloze never asks for a letter at all. The prompt is the question stem
alone (``CLOZE_PROMPT``, the reply prefilled "Answer:"), and each option's text, tokenised on its
own after a space, is scored teacher-forced (``engine.run.score.continuation_logprobs``). Neither
the letters nor the options' order enters a score, so rotations are irrelevant to it (tested: a
rotated item scores the same). The price: stems that need their options ("Which of the
following …") lose sense, so cloze and letter accuracy measure different things; both are kept.

Normalisation. A summed log-likelihood favours short options (every token costs probability),
so the decision divides it by the option's length in **characters** (of the scored text, its
leading space included: lm-evaluation-harness's ``acc_norm``). Characters rather than tokens
because a token count depends on the tokenizer, and the comparison page sets models with
different tokenizers side by side; the unconditional-likelihood (PMI) correction would need a
second pass per option. The records keep every option's summed log-probability, token and
character count, so any other normalisation can be recomputed; the summary shows the summed and
per-token readings beside the headline, so a result that hinges on the normalisation shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from introspect.data import MCQuestion
from introspect.data.files import LETTERS
from introspect.engine.run.chat import Prompt, render
from introspect.engine.run.score import continuation_logprobs
from introspect.tasks import fewshot
from introspect.tasks.base import ConfigError, RunContext
from introspect.tasks.selfknowledge.common import PREFILL, _opt, prompt_format, rendered, user
from introspect.tasks.selfknowledge.rotations import _argmax

CLOZE_PROMPT = "Answer the following question.\n\n{q}"
fewshot.register("ability-cloze", "ABCD", [
    fewshot.Example(key, CLOZE_PROMPT.format(q=stem), f"{PREFILL} {opts[LETTERS.index(key)]}", terms)
    for stem, opts, key, terms in fewshot.MC_BANK])

READINGS = ("char", "sum", "token")  # normalisations recorded: the decision's first


def cloze_on(ctx: RunContext) -> bool:
    """``--option cloze=true``: ability items are also scored by option-text likelihood."""
    v = _opt(ctx, "cloze", False)
    if not isinstance(v, bool):
        raise ConfigError(f"cloze must be true or false, got {v!r}")
    return v


def continuation(option: str) -> str:
    """The text scored after "Answer:" for one option."""
    return " " + option.strip()


def read_cloze(logprobs: Sequence[float], n_tokens: Sequence[int], n_chars: Sequence[int], key: str,
               tie_key: str) -> dict[str, Any]:
    """One item's cloze reading from each option's summed log-probability, token and character
    count (options in their listed order): the decision per character (``cloze_choice``,
    ``cloze_correct``), the summed and per-token decisions beside it, and the raw scores."""
    if not (len(logprobs) == len(n_tokens) == len(n_chars) >= 2) or min(n_tokens) < 1 or min(n_chars) < 1:
        raise ValueError(f"need >= 2 options, each with a log-probability and positive counts; got {len(logprobs)}")
    k = LETTERS.index(key)
    scores = {"char": [lp / c for lp, c in zip(logprobs, n_chars)], "sum": list(logprobs),
              "token": [lp / t for lp, t in zip(logprobs, n_tokens)]}
    out: dict[str, Any] = {}
    for name in READINGS:
        c = _argmax(scores[name], f"cloze:{name}:{tie_key}")
        sfx = "" if name == "char" else f"_{name}"
        out[f"cloze_choice{sfx}"], out[f"cloze_correct{sfx}"] = LETTERS[c], c == k
    labels = LETTERS[:len(logprobs)]
    out.update(cloze_logprobs=dict(zip(labels, map(float, logprobs))),
               cloze_n_tokens=dict(zip(labels, map(int, n_tokens))),
               cloze_n_chars=dict(zip(labels, map(int, n_chars))))
    return out


def prompts(ctx: RunContext, items: Sequence[MCQuestion]) -> list[Prompt]:
    """The letter-free prompts in the run's format. Few-shot examples are answered with an
    option's text, never a letter, and an example that mentions one of the item's options (which
    the prompt does not show, but the scored continuation is) is replaced like one that mentions
    the stem."""
    convs = [user(CLOZE_PROMPT.format(q=q.question), prefill=PREFILL) for q in items]
    if prompt_format(ctx) == "chat":
        return rendered(ctx, convs)
    return [render(ctx.model.tokenizer, fewshot.with_examples("ability-cloze", c, avoid=q.options), chat=False)
            for c, q in zip(convs, items)]


def cloze(ctx: RunContext, items: Sequence[MCQuestion]) -> list[dict[str, Any]]:
    """The cloze reading of each item (``read_cloze``), in the run's format."""
    if not items:
        return []
    tok = ctx.model.tokenizer
    prompts_ = prompts(ctx, items)
    pairs = [(p, continuation(o)) for p, q in zip(prompts_, items) for o in q.options]
    conts = [tok.encode(text, add_special_tokens=False) for _, text in pairs]
    lps = iter(continuation_logprobs(ctx.model, [p for p, _ in pairs], conts, batch_size=ctx.cfg.batch_size))
    sizes = iter((len(c), len(text)) for c, (_, text) in zip(conts, pairs))
    out = []
    for p, q in zip(prompts_, items):
        lp, nt, nc = [], [], []
        for _ in q.options:
            x, (t, c) = next(lps), next(sizes)
            lp.append(float(x.double().sum()))
            nt.append(t)
            nc.append(c)
        out.append({**read_cloze(lp, nt, nc, q.answer, f"{ctx.cfg.seed}:{q.id}"), "cloze_prompt": p.text})
    return out
