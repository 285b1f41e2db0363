"""What per-concept controls cost (issue 17), measured for ``introspect bench``.

Since concepts became independent replicates, every concept has its own control per trial and
sample instead of one control shared by all concepts. The extra controls share the prompt (and,
before the first injected position, the KV cache) with the injected trials, so they should cost
little beyond their decoding steps. This times task A's paper framing on the same model twice:
with every concept's control, and with the controls of one concept only (the old layout's
count), and reports the time ratio beside the trial and generated-token ratios (controls that
write to the budget while injected rows stop early cost more than their share of trials).
"""

from __future__ import annotations

import time
from typing import Any


def bench_controls(model: Any, n_concepts: int = 8, new_tokens: int = 16) -> dict[str, float]:
    """Seconds for task A with a control per concept vs one shared control per (trial, sample)."""
    from introspect.tasks import get_task
    from introspect.tasks.base import TaskConfig
    from introspect.tasks.runner import make_context

    layer = model.cfg.n_layers // 2
    cfg = TaskConfig(layers=(layer,), alphas=(2.0, 8.0), alpha_units="raw", n_concepts=n_concepts,
                     n_trials=1, n_samples=2, max_new_tokens=new_tokens, batch_size=16,
                     variant="paper").with_options(n_bias=0, steer_check=False)
    spec = get_task("A")
    ctx = make_context(model, cfg, "bench")
    trials = spec.plan(ctx)
    first = next(t.word for t in trials if t.condition == "control")
    shared = [t for t in trials if t.condition != "control" or t.word == first]
    words = {t.word for t in trials if t.word} | {t.param("vector_word") for t in trials if t.param("vector_word")}
    ctx.vectors.ensure(sorted(words), [layer])
    tok = model.tokenizer
    out: dict[str, float] = {"trials_all": len(trials), "trials_shared": len(shared)}
    for key, ts in (("shared", shared), ("all", trials), ("shared2", shared), ("all2", trials)):
        t0, tokens = time.perf_counter(), 0
        for rec in spec.execute(ctx, ts):
            tokens += len(tok.encode(rec.response or "", add_special_tokens=False))
        out[key] = time.perf_counter() - t0
        out[f"tokens_{key.rstrip('2')}"] = tokens  # generated tokens (sampled: both runs draw the same streams)
    out["all_s"] = min(out.pop("all"), out.pop("all2"))  # best of two, interleaved
    out["shared_s"] = min(out.pop("shared"), out.pop("shared2"))
    return out
