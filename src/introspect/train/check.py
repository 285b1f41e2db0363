"""A quick greedy detection check and the training budget figure (for tests and the bench).

Why a check of its own: training needs a fast yes/no on "did it learn?" (greedy answers to the
task-A prompt with and without the injection, graded by task A's grader) without a results
folder or the report. The honest figures with intervals come from ``experiments.run --task A
--adapter DIR`` and the report; this is the smoke test.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from introspect.engine.run.inject import InjectionSpec
from introspect.grading import grade_task_A
from introspect.train import data as D


def detection_check(model: Any, words: Sequence[str], layer: int, strength: float, *,
                    phrasing: str = "paper", trial: int = 1, max_new_tokens: int = 20,
                    baseline: Sequence[str] | None = None) -> dict[str, Any]:
    """Greedy answers to one detection prompt, clean and with each word's concept injected at
    ``strength`` × the residual norm over the injected span (task A's ``resid`` unit), where task A
    injects that framing: from the mark on, or over turn 1 only (``two_turn``).

    Returns ``yes_injected`` / ``yes_clean`` / ``yes_random`` (shares graded as detected; random: a
    random direction at the same norm), ``identified`` (share of injected answers naming the
    word), the residual norm and the concept vectors' mean raw norm (raw α = strength × resid_norm
    / raw_norm), and the answers themselves.
    """
    from introspect.engine.run.decode import generate
    from introspect.engine.vectors import build_concept_vectors, residuals
    from introspect.tasks.prompts import load_words

    base = list(baseline) if baseline is not None else list(load_words().baseline)
    prompt = D.render(model.tokenizer, D.detection_conv(phrasing, trial))
    start, end = D.injected_span(prompt)
    at = D.P.span_positions(start, end)
    span = list(range(start, len(prompt) if end is None else end))
    rn = float(residuals(model, [prompt], [layer], positions=[span])[0][0].norm(dim=-1).mean())
    cvs = build_concept_vectors(model, list(words), [layer], base)
    specs = [InjectionSpec(layer, strength * rn, cvs[(w, layer)].vector, at) for w in words]
    noise = []
    for i in range(len(words)):  # a random direction at the same norm per word: the Gaussian ablation
        v = torch.randn(model.cfg.d_model, generator=torch.Generator().manual_seed(1000 + i))
        noise.append(InjectionSpec(layer, strength * rn, v / v.norm(), at))
    k = len(words)
    gens = generate(model, [prompt] * (2 * k + 1), [None, *specs, *noise], max_new_tokens=max_new_tokens)
    clean = grade_task_A(gens[0].text, None, False)
    graded = [grade_task_A(g.text, w, True) for g, w in zip(gens[1:k + 1], words)]
    rand = [grade_task_A(g.text, None, True) for g in gens[k + 1:]]
    n = max(k, 1)
    return {"yes_injected": sum(g["detected"] for g in graded) / n, "yes_clean": float(clean["detected"]),
            "yes_random": sum(g["detected"] for g in rand) / n,
            "identified": sum(g["matched"] for g in graded) / n, "resid_norm": rn,
            "raw_norm_mean": sum(cvs[(w, layer)].raw_norm for w in words) / n,
            "clean_answer": gens[0].text, "answers": {w: g.text for w, g in zip(words, gens[1:k + 1])}}


def training_budget(model: Any = None, *, layer: int | None = None, steps: int = 5, batch_size: int | None = None,
                    full_steps: int | None = None, out: Path | str | None = None, **config: Any) -> dict[str, float]:
    """Time ``steps`` training steps of the default configuration (``config``: other TrainConfig
    fields, e.g. a recipe's phrasings and mix) and extrapolate the full run.

    ``model``: a loaded bridge or a model name (default: the embedded default model); ``layer``
    defaults to two thirds of the depth. Returns seconds for preparation (vectors, residual norms,
    replay answers; ``replay_from_cache`` says whether those were read from the replay cache) and per
    step, the extrapolated full run (``full_steps``, default
    ``TrainConfig.steps``) and this process's peak resident memory in MiB. For
    ``experiments.bench``: run it with nothing else on the machine, or the figure is contended.
    """
    from introspect.engine.load.models import DEFAULT_MODEL, load_model
    from introspect.train.loop import TrainConfig, train

    t0 = time.perf_counter()
    model = load_model(model or DEFAULT_MODEL) if model is None or isinstance(model, str) else model
    load_s = time.perf_counter() - t0
    layer = int(layer if layer is not None else min(round(2 * model.cfg.n_layers / 3), model.cfg.n_layers - 2))
    full = int(full_steps or TrainConfig(layer=layer).steps)
    batch_size = int(batch_size or TrainConfig(layer=layer).batch_size)
    cfg = TrainConfig(**{**config, "layer": layer, "steps": steps, "batch_size": batch_size,
                         "checkpoint_every": max(steps, 1), "gates": False})
    with tempfile.TemporaryDirectory() as tmp:
        s = train(model, cfg, Path(out or tmp) / "adapter", progress=False)
    per_step = float(s["seconds_per_step"])
    return {"load_s": round(load_s, 1), "prepare_s": float(s["seconds_prepare"]), "step_s": per_step,
            "step_cpu_s": float(s["cpu_seconds_per_step"]),
            "steps_timed": steps, "batch_size": batch_size, "full_steps": full, "layer": layer,
            "full_run_min": round((float(s["seconds_prepare"]) + full * per_step) / 60, 1),
            "peak_rss_mib": float(s["peak_rss_mib"]), "threads": torch.get_num_threads(),
            "replay_from_cache": bool(s["replay_from_cache"])}
