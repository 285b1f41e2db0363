"""Ten minutes on a GPU machine before anything else: does the GPU path work here?

    make gpu-smoke                                   # Qwen/Qwen2.5-7B-Instruct (ungated, Apache-2.0)
    introspect gpu-smoke --model ORG/NAME --out results/gpu-smoke

Loads the model (download time is measured apart and not counted), builds three concept vectors
at two layers, runs task A there on the three concepts, and checks what breaks silently on GPUs:
every vector, P(yes) and log-prob finite; a zero injection reproducing its control token for
token in the same batch; and, with two or more GPUs, the model spread over all of them giving the
same first-token log-probs as on one within bf16 tolerance. It prints one table to attach to a bug
report (and writes it as JSON with ``--out``); the exit code is 1 when a check fails. CI runs it
on the CPU with a tiny model (``tests/test_gpu_smoke.py``).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from introspect.cli.common import Parser, command

DEFAULT = "Qwen/Qwen2.5-7B-Instruct"
BF16_TOL = 0.25  # nats: bf16 logits move in steps of ~0.06-0.125 at |logit| 10-30; kernels may differ by 2 steps


def _finite(xs: Any) -> bool:
    return all(x is None or math.isfinite(float(x)) for x in xs)


def smoke(model_name: str, device: str | None = None, n_concepts: int = 3, max_new_tokens: int = 24) -> list[dict]:
    """Run every check; returns the table's rows (check, ok, value, seconds)."""
    import torch

    from introspect.engine.load import devices, hub
    from introspect.engine.load.models import load_model, model_info
    from introspect.engine.run.chat import Conversation, render
    from introspect.engine.run.decode import generate, next_token_logprobs
    from introspect.engine.run.inject import InjectionSpec
    from introspect.engine.vectors import build_concept_vectors
    from introspect.tasks import run_task
    from introspect.tasks.base import TaskConfig
    from introspect.tasks.prompts import load_words
    from introspect.tasks.runner import make_context

    rows: list[dict] = []

    def add(check: str, ok: bool | None, value: Any, t0: float) -> None:
        rows.append({"check": check, "ok": ok, "value": value, "seconds": round(time.perf_counter() - t0, 1)})

    t = time.perf_counter()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    names = sorted({torch.cuda.get_device_name(i) for i in range(gpus)})
    add("environment", None, f"torch {torch.__version__}, CUDA {torch.version.cuda}, {gpus} GPU(s) {names}", t)
    if model_name.count("/") == 1 and not model_name.startswith((".", "~")) and not Path(model_name).exists():
        t = time.perf_counter()
        hub.snapshot(model_name)
        add("download (not counted)", None, model_name, t)
    start = time.perf_counter()
    t = time.perf_counter()
    model = load_model(model_name, device=device)
    info = model_info(model)
    add("load", True, f"{info.name} {info.dtype} on {devices.describe(model)['device']}, attention {info.attention}", t)

    n = model.cfg.n_layers
    layers = sorted({max(0, round(n * 0.5)), max(0, min(n - 1, round(n * 2 / 3)))})
    words = load_words()
    t = time.perf_counter()
    vecs = build_concept_vectors(model, list(words.targets[:n_concepts]), layers, words.baseline)
    ok = all(torch.isfinite(v.vector).all().item() and math.isfinite(v.raw_norm) for v in vecs.values())
    add(f"vectors finite ({len(vecs)} at layers {layers})", ok, f"raw norms {min(v.raw_norm for v in vecs.values()):.3g}"
        f"-{max(v.raw_norm for v in vecs.values()):.3g}", t)

    t = time.perf_counter()
    cfg = TaskConfig(layers=tuple(layers), alphas=(2.0,), alpha_units="resid", n_concepts=n_concepts,
                       n_samples=1, max_new_tokens=max_new_tokens)
    recs = [r.to_dict() for r in run_task(make_context(model, cfg, "notebook"), "A")]
    p_yes = [r.get("p_yes") for r in recs]
    add(f"task A finite ({len(recs)} records)", _finite(p_yes) and bool(recs),
        f"P(yes) {sum(p is not None for p in p_yes)} read", t)

    t = time.perf_counter()
    prompt = render(model.tokenizer, Conversation.of(("user", "Do you detect an injected thought?")))
    key = next(iter(vecs))
    zero = InjectionSpec(layer_idx=key[1], alpha=0.0, vector=vecs[key].vector, token_positions="all")
    g = generate(model, [prompt, prompt], [None, zero], max_new_tokens=max_new_tokens)
    same = g[0].tokens == g[1].tokens
    lp = next_token_logprobs(model, [prompt, prompt], [None, zero])
    diff = float((lp[0] - lp[1]).abs().max())
    add("zero injection = its control (same batch)", same and diff == 0.0 and math.isfinite(float(lp.max())),
        f"tokens {'equal' if same else 'DIFFER'}, max |Δ log-prob| {diff:.3g}", t)

    if gpus >= 2:
        t = time.perf_counter()
        ref = lp[0]
        del model
        devices.release()
        spread = load_model(model_name, device_map="auto")  # balanced over every GPU
        lp2 = next_token_logprobs(spread, [prompt])[0]
        top = ref.topk(10).indices
        d = float((ref[top] - lp2[top].to(ref.device)).abs().max())
        add(f"{gpus} GPUs = one GPU (top-10 first-token log-probs)", d <= BF16_TOL,
            f"max |Δ| {d:.3g} nats (tolerance {BF16_TOL}), spread {devices.describe(spread)['device']}", t)
    else:
        add("two GPUs = one GPU", None, "skipped: fewer than two GPUs", time.perf_counter())
    add("total (download not counted)", all(r["ok"] is not False for r in rows), "", start)
    return rows


def table(rows: list[dict]) -> str:
    mark = {True: "ok", False: "FAIL", None: "-"}
    w = max(len(r["check"]) for r in rows)
    lines = [f"{'check'.ljust(w)}  result  seconds  value"]
    lines += [f"{r['check'].ljust(w)}  {mark[r['ok']]:<6}  {r['seconds']:>7}  {r['value']}" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog=command("gpu-smoke"), description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT, help=f"hub id, registry name or local folder (default {DEFAULT})")
    ap.add_argument("--device", default=None, help="cuda, cuda:1, cpu (default: cuda when there is a GPU)")
    ap.add_argument("--concepts", type=int, default=3)
    ap.add_argument("--out", default=None, help="folder for gpu-smoke.json")
    a = ap.parse_args(argv)
    if a.concepts < 1:
        ap.error(f"--concepts must be at least 1, got {a.concepts}")
    from introspect.engine.load.gguf_files import ModelError
    from introspect.records.atomic import atomic_write_text

    try:
        rows = smoke(a.model, a.device, a.concepts)
    except ModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(table(rows))
    if a.out:
        atomic_write_text(Path(a.out) / "gpu-smoke.json", json.dumps(rows, indent=2))
    return 0 if all(r["ok"] is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
