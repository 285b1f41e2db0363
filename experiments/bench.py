"""Benchmark: speed ratios measured in one run on the embedded default model (not a test).

    python -m experiments.bench [--model NAME] [--n 32] [--skip-cold] [--skip-sweep]

Prints, each as a ratio of two timings taken in this run on this machine:
- batched vs one-by-one injected generation (target ≥ 10×)
- hook overhead: injected generate vs the same generate without hooks (target ≤ 5%)
- batched vs per-word-per-layer concept-vector extraction (target ≥ 20×)
- cold (GGUF conversion) vs warm (cached) model load (target warm ≤ 3 s)
- a quick task-A grid through the sweep runner vs a one-trial-at-a-time loop (target ≥ 10×), and
  the resume bookkeeping's share of sweep time (target ≤ 2%)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from introspect.chat import Conversation, render
from introspect.inject import InjectionSpec, generate
from introspect.models import DEFAULT_MODEL, load_model
from introspect.prompts import load_sentences, load_words
from introspect.vectors import build_concept_vectors


def _timed(fn, repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def bench_load(model_name: str) -> dict[str, float]:
    old = os.environ.get("INTROSPECT_CACHE")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["INTROSPECT_CACHE"] = tmp
        try:
            cold = _timed(lambda: load_model(model_name))
            warm = _timed(lambda: load_model(model_name), repeat=2)
        finally:
            if old is None:
                os.environ.pop("INTROSPECT_CACHE", None)
            else:
                os.environ["INTROSPECT_CACHE"] = old
    return {"cold_s": cold, "warm_s": warm}


def bench_generation(model, n: int, new_tokens: int) -> dict[str, float]:
    sentences = load_sentences()
    prompts = [render(model.tokenizer, Conversation.of(("user", f"Repeat the line below.\n\n{s}")))
               for s in (sentences * (n // len(sentences) + 1))[:n]]
    words = load_words()
    vecs = build_concept_vectors(model, words.targets[:4], [model.cfg.n_layers // 2], words.baseline, cache=False)
    v = list(vecs.values())
    specs = [InjectionSpec(v[i % 4].layer, 16.0, v[i % 4].vector, "all") for i in range(n)]
    kw = dict(max_new_tokens=new_tokens, batch_size=n)
    batched = _timed(lambda: generate(model, prompts, specs, **kw), repeat=2)
    k = max(4, n // 8)  # one-by-one on a subset, scaled to n
    single = _timed(lambda: [generate(model, [p], [s], max_new_tokens=new_tokens) for p, s in zip(prompts[:k], specs[:k])])
    single *= n / k
    hooked = _timed(lambda: generate(model, prompts, specs, **kw), repeat=3)
    bare = _timed(lambda: generate(model, prompts, None, **kw), repeat=3)
    return {"batched_s": batched, "single_s": single, "hooked_s": hooked, "bare_s": bare}


def bench_vectors(model, n_words: int, layers: list[int]) -> dict[str, float]:
    words = load_words()
    targets, base = list(words.targets[:n_words]), list(words.baseline[:10])
    batched = _timed(lambda: build_concept_vectors(model, targets, layers, base, cache=False), repeat=2)

    def naive():  # the seed's loop: one forward per word per layer (baseline recomputed each time)
        for w in targets:
            for layer in layers:
                build_concept_vectors(model, [w], [layer], base, cache=False, batch_size=1)

    return {"batched_s": batched, "naive_s": _timed(naive)}


def bench_sweep(model_name: str) -> dict[str, float] | None:
    try:
        from introspect.runner import run_grid
    except ImportError:
        return None
    from introspect.tasks.base import TaskConfig

    model = load_model(model_name)
    cfg = TaskConfig(layers=(10, 20), alphas=(16.0, 48.0), n_concepts=4, n_trials=1, max_new_tokens=16, batch_size=32)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        run_grid(model, ["A"], cfg, Path(tmp) / "batched", progress=False)
        batched = time.perf_counter() - t
        t = time.perf_counter()
        run_grid(model, ["A"], cfg, Path(tmp) / "batched", progress=False)  # everything already done
        resume_only = time.perf_counter() - t
        cfg1 = TaskConfig(**{**cfg.to_dict(), "batch_size": 1, "options": ()})
        t = time.perf_counter()
        run_grid(model, ["A"], cfg1, Path(tmp) / "single", progress=False)
        single = time.perf_counter() - t
    return {"batched_s": batched, "single_s": single, "resume_s": resume_only}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--n", type=int, default=32, help="prompts per batched generate")
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--skip-cold", action="store_true")
    ap.add_argument("--skip-sweep", action="store_true")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    print(f"introspect bench — model {args.model}, torch threads {torch.get_num_threads()}", flush=True)
    rows = _Rows()
    if not args.skip_cold:
        ld = bench_load(args.model)
        rows.append(("model load: cold / warm", ld["cold_s"] / ld["warm_s"], f"cold {ld['cold_s']:.1f} s, warm {ld['warm_s']:.2f} s (target warm ≤ 3 s)"))
    model = load_model(args.model)
    g = bench_generation(model, args.n, args.new_tokens)
    rows.append(("injected generation: batched / one-by-one (trials/s)", g["single_s"] / g["batched_s"],
                 f"{args.n / g['batched_s']:.2f} vs {args.n / g['single_s']:.2f} trials/s (target ≥ 10×)"))
    rows.append(("hook overhead: hooked / bare generate", g["hooked_s"] / g["bare_s"],
                 f"{100 * (g['hooked_s'] / g['bare_s'] - 1):+.1f}% (target ≤ 5%)"))
    layers = [5, 15, 25]
    v = bench_vectors(model, 6, layers)
    rows.append(("vector extraction: batched / per word per layer", v["naive_s"] / v["batched_s"],
                 f"{v['batched_s']:.2f} s vs {v['naive_s']:.2f} s for 6 words × {len(layers)} layers (target ≥ 20×)"))
    if not args.skip_sweep:
        s = bench_sweep(args.model)
        if s is None:
            rows.append(("sweep", float("nan"), "runner not available"))
        else:
            rows.append(("task-A sweep: batched / one trial at a time", s["single_s"] / s["batched_s"],
                         f"{s['batched_s']:.1f} s vs {s['single_s']:.1f} s (target ≥ 10×)"))
            rows.append(("resume bookkeeping / sweep time", s["resume_s"] / s["batched_s"],
                         f"{100 * s['resume_s'] / s['batched_s']:.2f}% (target ≤ 2%)"))


class _Rows(list):
    """Print each figure as soon as it is measured, so a long run shows progress."""

    def append(self, item: tuple[str, float, str]) -> None:
        super().append(item)
        name, ratio, detail = item
        print(f"{name:<52}  {ratio:8.2f}×  {detail}", flush=True)


if __name__ == "__main__":
    main()
