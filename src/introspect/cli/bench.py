"""Benchmark: speed ratios measured in one run on the embedded default model (not a test).

    introspect bench [--model NAME] [--n 32] [--skip-cold] [--skip-sweep] [--device cuda] [--train-only] [--recipe-only]

Prints, each as a ratio of two timings taken in this run on this machine, with tokens/s beside it.
First: one decoding step of the 16-row task-A batch, ours vs raw transformers sdpa (target ≤ 1.1×),
and prefill / decode tokens per second of both; with ``--device cuda`` those are the figures (on
the GPU, against HF ``generate`` with sdpa) and the CPU-only rows are skipped. The first line says
whether other Python processes were running: timings taken beside them are contended, and only
their ratios mean anything.
Unless a line says otherwise, every generation makes exactly ``--new-tokens`` tokens per row
(end-of-sequence suppressed until then, on both sides), so each ratio compares equal work:
- on 16 task-A prompts (chat template, the Lindsey preamble, injection from "Trial N"): our
  injected batch with the shared-prefix cache vs raw transformers sdpa ``generate`` on the same
  left-padded batch with no hook — the anchor a user would pick instead (target ≤ 0.5×); and,
  as a run really goes (rows end at end-of-sequence), ours vs raw transformers with the same
  injection as a plain forward hook, whose tokens must equal ours
- K = 16 sampled answers to one task-A prompt vs one greedy answer to it (target ≤ 4×)
- batched vs one-by-one injected generation (target ≥ 10×)
- hook overhead: injected generate vs the same generate without hooks (target ≤ 5%)
- batched vs per-word-per-layer concept-vector extraction (target ≥ 20×)
- cold (GGUF conversion) vs warm (cached) model load (target warm ≤ 3 s)
- a quick task-A grid through the sweep runner vs a one-trial-at-a-time loop (target ≥ 10×), and
  the resume bookkeeping's share of sweep time (target ≤ 2%)
- the positive control's training (``introspect train-aware``): 5 timed steps extrapolated to
  the full run, against its 25-minute budget (target ≤ 1×), with peak resident memory; and its
  preparation with the base model's replay answers read from the replay cache vs generated
  and, on the default model, the documented recipe of docs/positive-control.md (layer 24) with the
  blocks below its adapter shared vs run in full (``train.trunk``: the replay rows' teacher and
  student, and shared prefixes across steps), and its two-turn recipe, run F (10 steps timed each)
  (``--train-only``: these rows alone; ``--recipe-only``: the recipe's rows alone)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from introspect.cli.bench_train import bench_recipe, bench_training
from introspect.cli.common import Parser, command, positive_int
from introspect.engine.load.models import DEFAULT_MODEL, load_model, resolve
from introspect.engine.run.chat import render
from introspect.engine.run.decode import Sampling, generate
from introspect.engine.run.inject import From, InjectionSpec
from introspect.engine.vectors import build_concept_vectors
from introspect.tasks import prompts as P
from introspect.tasks.prompts import load_words


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


def _task_a(model, n: int):
    """n task-A paper prompts (Trial 1..n) and their injections (4 concepts, from "Trial N" on)."""
    prompts = [render(model.tokenizer, P.task_a_paper(i + 1)) for i in range(n)]
    words = load_words()
    vecs = list(build_concept_vectors(model, words.targets[:4], [model.cfg.n_layers // 2], words.baseline,
                                      cache=False).values())
    specs = [InjectionSpec(vecs[i % 4].layer, 16.0, vecs[i % 4].vector, From(p.spans[P.FROM_MARK][0]))
             for i, p in enumerate(prompts)]
    return prompts, specs


def _n_tokens(gens) -> int:
    return sum(len(g.tokens) for g in gens)


def _raw_hf(model_name: str, device: str = "cpu", dtype: torch.dtype = torch.float32):
    from transformers import AutoModelForCausalLM

    from introspect.engine.load import hub

    path = resolve(model_name)[0]
    path = path if Path(path).is_dir() else str(hub.snapshot(path))
    hf = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa", dtype=dtype,
                                              device_map={"": device} if device != "cpu" else None)
    return hf.eval()


def contention() -> list[str]:
    """Other Python processes on this machine (they share the CPU and skew every timing), matched
    by process name: a command line that merely mentions python (an env dump) is not one."""
    import subprocess

    try:
        out = subprocess.run(["pgrep", "-a", "python"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [ln for ln in out.splitlines() if ln.split()[0] != str(os.getpid()) and "pgrep" not in ln]


def bench_steps(model, hf, prompts, specs, new_tokens: int, device: str) -> dict[str, float]:
    """Prefill and per-step decode time of one batch, ours (injected, prefix-shared) vs raw HF
    ``generate`` with sdpa (no hook): a step is (time for 1 + n tokens − time for 1 token) / n."""
    from introspect.engine.run.inject import pad_left

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    pad = hf.config.pad_token_id if hf.config.pad_token_id is not None else 0
    toks, mask, _ = pad_left(prompts, pad)
    toks, mask = toks.to(device), mask.to(device)
    n = len(prompts)

    def ours(k):
        def f():
            generate(model, prompts, specs, max_new_tokens=k, min_new_tokens=k, batch_size=n)
            sync()
        return f

    def raw(k):
        def f():
            with torch.no_grad():
                hf.generate(toks, attention_mask=mask, max_new_tokens=k, min_new_tokens=k, do_sample=False,
                            pad_token_id=pad)
            sync()
        return f

    k = new_tokens + 1
    res = {"rows": n, "prompt_tokens": sum(len(p) for p in prompts), "new": new_tokens}
    for who, fn in (("ours", ours), ("raw", raw)):
        fn(2)()  # warm-up
        one, many = _timed(fn(1), repeat=3), _timed(fn(k), repeat=3)
        res[f"{who}_prefill_s"], res[f"{who}_step_s"] = one, (many - one) / new_tokens
    return res


def _until_eos(out: torch.Tensor, hf) -> list[list[int]]:
    eos = hf.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    return [row[:next((k for k, x in enumerate(row) if x in eos), len(row))] for row in out.tolist()]


def bench_raw_anchor(hf, prompts, new_tokens: int, specs=None) -> tuple[float, list[list[int]]]:
    """Raw transformers, sdpa, one left-padded batch, greedy: time and each row's tokens.

    Without ``specs``: no hook, exactly ``new_tokens`` per row (the issue's anchor). With ``specs``
    (one layer): the same injections as a plain forward hook on that decoder layer, ending at
    end-of-sequence as a user's run would, so its tokens must equal ours.
    """
    from introspect.engine.run.inject import pad_left

    pad = hf.config.pad_token_id if hf.config.pad_token_id is not None else 0
    toks, mask, offsets = pad_left(prompts, pad)
    kw = dict(attention_mask=mask, max_new_tokens=new_tokens, do_sample=False, pad_token_id=pad)
    handle = None
    if specs is None:
        kw["min_new_tokens"] = new_tokens
    else:
        starts = [o + sp.token_positions.start for o, sp in zip(offsets, specs)]
        delta = torch.stack([float(sp.alpha) * sp.vector.float() for sp in specs])

        def hook(module, inputs, output):
            hs = (output[0] if isinstance(output, tuple) else output).clone()
            if hs.shape[1] > 1:  # the prompt pass, from each row's own "Trial N"
                for i, s0 in enumerate(starts):
                    hs[i, s0:] += delta[i]
            else:  # every decoding step
                hs[:, 0] += delta
            return (hs, *output[1:]) if isinstance(output, tuple) else hs

        handle = hf.get_decoder().layers[specs[0].layer_idx].register_forward_hook(hook)
    holder = {}

    def run():
        with torch.no_grad():
            holder["out"] = hf.generate(toks, **kw)

    try:
        t = _timed(run, repeat=2)
    finally:
        if handle is not None:
            handle.remove()
    return t, _until_eos(holder["out"][:, toks.shape[1]:], hf)


def bench_generation(model, model_name: str, n: int, new_tokens: int) -> dict[str, float]:
    prompts, specs = _task_a(model, n)
    res: dict[str, float] = {}
    # equal work everywhere: every row generates exactly new_tokens tokens (no early end-of-sequence),
    # so a ratio compares the same number of tokens rather than whichever run happened to stop first
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, batch_size=n)
    hold: dict[str, list] = {}

    def run(key, *a, **k):
        def f():
            hold[key] = generate(model, *a, **k)
        return f

    hf = _raw_hf(model_name)
    res["raw_s"], raw = bench_raw_anchor(hf, prompts, new_tokens)
    res["raw_tok"] = sum(map(len, raw))
    res["rawinj_s"], rawinj = bench_raw_anchor(hf, prompts, new_tokens, specs)
    res["rawinj_tok"] = sum(map(len, rawinj))
    del hf
    natural = dict(max_new_tokens=new_tokens, batch_size=n)
    res["natural_s"] = _timed(run("natural", prompts, specs, **natural), repeat=2)
    res["natural_tok"] = _n_tokens(hold["natural"])
    res["same_tokens"] = float([list(g.tokens) for g in hold["natural"]] == rawinj)
    res["batched_s"] = _timed(run("batched", prompts, specs, **kw), repeat=2)
    res["batched_tok"] = _n_tokens(hold["batched"])
    res["unshared_s"] = _timed(run("unshared", prompts, specs, share_prefix=False, **kw))
    res["unshared_tok"] = _n_tokens(hold["unshared"])
    k = 4  # one-by-one on a subset, scaled to n
    res["single_s"] = _timed(lambda: [generate(model, [p], [s], max_new_tokens=new_tokens, min_new_tokens=new_tokens)
                                      for p, s in zip(prompts[:k], specs[:k])]) * n / k
    # hook overhead is a few percent of a run whose timing wobbles ~10% between repeats on a VM:
    # interleave the two and keep each one's best of three
    bare, inj = run("bare", prompts, None, **kw), run("batched", prompts, specs, **kw)
    times = {"bare": [], "inj": []}
    for _ in range(3):
        times["bare"].append(_timed(bare))
        times["inj"].append(_timed(inj))
    res["bare_s"], res["inj_s"] = min(times["bare"]), min(times["inj"])
    res["bare_tok"] = _n_tokens(hold["bare"])
    one = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    res["greedy1_s"] = _timed(run("g1", prompts[:1], specs[:1], **one), repeat=2)
    res["greedy1_tok"] = _n_tokens(hold["g1"])
    res["k16_s"] = _timed(run("k16", prompts[:1], specs[:1], sampling=Sampling(1.0), n_samples=16,
                              seeds=["bench"], batch_size=16, **one), repeat=2)
    res["k16_tok"] = _n_tokens(hold["k16"])
    return res


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
        from introspect.tasks.runner import run_grid
    except ImportError:
        return None
    from introspect.tasks.base import TaskConfig

    model = load_model(model_name)
    cfg = TaskConfig(layers=(20,), alphas=(2.0, 8.0), alpha_units="raw", n_concepts=4, n_trials=1,
                     max_new_tokens=16, batch_size=32, variant="paper", temperature=1.0, n_samples=2)
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
    ap = Parser(prog=command("bench"), description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--n", type=positive_int, default=16, help="task-A prompts per batched generate")
    ap.add_argument("--new-tokens", type=positive_int, default=24)
    ap.add_argument("--skip-cold", action="store_true")
    ap.add_argument("--skip-sweep", action="store_true")
    ap.add_argument("--skip-train", action="store_true", help="skip the positive-control training budget")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda: prefill/decode tokens/s vs HF generate")
    ap.add_argument("--steps-only", action="store_true", help="stop after the decode-step and prefill rows")
    ap.add_argument("--train-only", action="store_true", help="only the positive-control training rows")
    ap.add_argument("--recipe-only", action="store_true",
                    help="only the documented recipe's rows: its budget, and its step with the trunk shared vs not")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    print(f"introspect bench — model {args.model}, device {args.device}, torch threads {torch.get_num_threads()}",
          flush=True)
    others = contention()
    print(f"CONTENDED: {len(others)} other Python process(es) running; read the ratios only" if others
          else "uncontended: no other Python process running", flush=True)
    rows = _Rows()
    if args.train_only:
        bench_training(rows, args.model)
        return
    if args.recipe_only:
        bench_recipe(rows, args.model)
        return
    gpu = args.device.startswith("cuda")
    model = load_model(args.model, device=args.device)
    prompts, specs = _task_a(model, args.n)
    dtype = next(model.original_model.parameters()).dtype
    st = bench_steps(model, _raw_hf(args.model, args.device, dtype), prompts, specs, args.new_tokens, args.device)
    rows.append((f"decode step, {st['rows']} rows: ours / raw transformers sdpa", st["ours_step_s"] / st["raw_step_s"],
                 f"{1000 * st['ours_step_s']:.0f} ms vs {1000 * st['raw_step_s']:.0f} ms "
                 f"({st['rows'] / st['ours_step_s']:.0f} vs {st['rows'] / st['raw_step_s']:.0f} decode tok/s; "
                 f"attention {model.introspect_info.attention}) (target ≤ 1.1×)"))
    rows.append(("prefill: ours (shared prefix) / raw transformers", st["ours_prefill_s"] / st["raw_prefill_s"],
                 f"{st['prompt_tokens'] / st['ours_prefill_s']:.0f} vs {st['prompt_tokens'] / st['raw_prefill_s']:.0f} "
                 f"prompt tok/s ({st['prompt_tokens']} prompt tokens)"))
    if gpu or args.steps_only:
        return
    if not args.skip_cold:
        ld = bench_load(args.model)
        rows.append(("model load: cold / warm", ld["cold_s"] / ld["warm_s"], f"cold {ld['cold_s']:.1f} s, warm {ld['warm_s']:.2f} s (target warm ≤ 3 s)"))
    g = bench_generation(model, args.model, args.n, args.new_tokens)

    def tps(key: str) -> str:
        return f"{g[key + '_tok'] / g[key + '_s']:.0f} tok/s"

    rows.append(("task-A batch, prefix-shared / raw transformers", g["batched_s"] / g["raw_s"],
                 f"{g['batched_s']:.2f} s ({tps('batched')}) vs {g['raw_s']:.2f} s ({tps('raw')}), "
                 f"{args.n} prompts × {args.new_tokens} tokens (target ≤ 0.5×)"))
    rows.append(("task-A batch as run (ends at EOS) / raw + same hook", g["natural_s"] / g["rawinj_s"],
                 f"{g['natural_s']:.2f} s ({tps('natural')}) vs {g['rawinj_s']:.2f} s ({tps('rawinj')}); "
                 f"identical tokens: {'yes' if g['same_tokens'] else 'NO'} (finished rows leave our batch)"))
    rows.append(("task-A batch, without prefix sharing / raw transformers", g["unshared_s"] / g["raw_s"],
                 f"{g['unshared_s']:.2f} s ({tps('unshared')}) — what the shared prefix saves"))
    rows.append(("K=16 samples of one prompt / one greedy answer", g["k16_s"] / g["greedy1_s"],
                 f"{g['k16_s']:.2f} s ({tps('k16')}) vs {g['greedy1_s']:.2f} s ({tps('greedy1')}) (target ≤ 4×)"))
    rows.append(("injected generation: one-by-one / batched", g["single_s"] / g["batched_s"],
                 f"{args.n / g['batched_s']:.2f} vs {args.n / g['single_s']:.2f} trials/s (target ≥ 10×)"))
    rows.append(("hook overhead: injected / bare generate", g["inj_s"] / g["bare_s"],
                 f"{100 * (g['inj_s'] / g['bare_s'] - 1):+.1f}% ({g['batched_tok'] / g['inj_s']:.0f} tok/s vs {tps('bare')}), "
                 f"best of 3 interleaved (target ≤ 5%)"))
    layers = [5, 15, 25]
    v = bench_vectors(model, 6, layers)
    rows.append(("vector extraction: batched / per word per layer", v["naive_s"] / v["batched_s"],
                 f"{v['batched_s']:.2f} s vs {v['naive_s']:.2f} s for 6 words × {len(layers)} layers (target ≥ 20×)"))
    from introspect.cli.bench_controls import bench_controls

    c = bench_controls(model)
    rows.append(("task A: a control per concept / one shared control", c["all_s"] / c["shared_s"],
                 f"{c['all_s']:.1f} s vs {c['shared_s']:.1f} s for {c['trials_all']:.0f} vs "
                 f"{c['trials_shared']:.0f} trials ({c['trials_all'] / c['trials_shared']:.2f}× the trials, "
                 f"{c['tokens_all'] / max(1, c['tokens_shared']):.2f}× the generated tokens; "
                 "paper framing, 8 concepts, 2 α, K = 2, best of 2)"))
    if not args.skip_sweep:
        s = bench_sweep(args.model)
        if s is None:
            rows.append(("sweep", float("nan"), "runner not available"))
        else:
            rows.append(("task-A sweep: batched / one trial at a time", s["single_s"] / s["batched_s"],
                         f"{s['batched_s']:.1f} s vs {s['single_s']:.1f} s (target ≥ 10×)"))
            rows.append(("resume bookkeeping / sweep time", s["resume_s"] / s["batched_s"],
                         f"{100 * s['resume_s'] / s['batched_s']:.2f}% (target ≤ 2%)"))
    if not args.skip_train:
        bench_training(rows, args.model)


class _Rows(list):
    """Print each figure as soon as it is measured, so a long run shows progress."""

    def append(self, item: tuple[str, float, str]) -> None:
        super().append(item)
        name, ratio, detail = item
        print(f"{name:<52}  {ratio:8.2f}×  {detail}", flush=True)


if __name__ == "__main__":
    main()
