"""The positive control's training budget rows of ``introspect bench`` (``--train-only``,
``--recipe-only``): a few timed steps extrapolated to the full run, against its 25-minute budget.

Why apart from the decoding rows: these time ``train.check.training_budget`` (a fresh model copy
each, the replay cache swapped for a temporary one), not generation, and run on their own.
"""

from __future__ import annotations

import os
import tempfile

from introspect.engine.load.models import DEFAULT_MODEL


def bench_training(rows: list, model_name: str) -> None:
    """The positive control's training budget, first with the base model's replay answers generated
    (an empty replay cache of its own), then again with them read from that cache."""
    from introspect.train.check import training_budget

    before = os.environ.get("INTROSPECT_CACHE_REPLAY")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["INTROSPECT_CACHE_REPLAY"] = cache
        try:
            t = training_budget(model_name, steps=5)  # a fresh copy each: training attaches LoRA in place
            w = training_budget(model_name, steps=5)
        finally:
            if before is None:
                os.environ.pop("INTROSPECT_CACHE_REPLAY", None)
            else:
                os.environ["INTROSPECT_CACHE_REPLAY"] = before
    assert not t["replay_from_cache"] and w["replay_from_cache"]
    rows.append(("positive-control training: full run / 25-min budget", t["full_run_min"] / 25,
                 f"{t['full_run_min']:.1f} min est. for {t['full_steps']} steps at layer {t['layer']} "
                 f"({t['step_s']:.2f} s/step wall, {t['step_cpu_s']:.2f} s CPU, prepare {t['prepare_s']:.0f} s "
                 f"with the replay answers generated, {t['steps_timed']} steps timed), "
                 f"peak RSS {t['peak_rss_mib']:.0f} MiB (target ≤ 1×)"))
    rows.append(("training preparation: replay cached / generated", w["prepare_s"] / t["prepare_s"],
                 f"prepare {w['prepare_s']:.0f} s vs {t['prepare_s']:.0f} s; full run with the cache "
                 f"{w['full_run_min']:.1f} min est. ({w['step_s']:.2f} s/step) = {w['full_run_min'] / 25:.2f}× "
                 "the 25-min budget"))
    if model_name == DEFAULT_MODEL:
        bench_recipe(rows, model_name)


def bench_recipe(rows: list, model_name: str) -> None:
    """The documented recipe (docs/positive-control.md's first command: layer 24, split judged at
    20, 400 steps, replay weight 8) timed over the same 10 steps twice, the blocks below its adapter
    (0..24) shared (``train.trunk``, the default: the replay rows' teacher and student, and each
    shared prefix across steps) and run in full every time, in one run; then the two-turn recipe (run F there). The replay answers come from the user's
    replay cache (generated there on a first run)."""
    from introspect.train.check import training_budget
    from introspect.train.data import DEFAULT_MIX, TWO_TURN

    recipe = dict(layer=24, split_layer=20)
    on = training_budget(model_name, steps=10, **recipe)
    off = training_budget(model_name, steps=10, share_trunk=False, **recipe)
    rows.append(("documented recipe: full run / 25-min budget", on["full_run_min"] / 25,
                 f"{on['full_run_min']:.1f} min est. for {on['full_steps']} steps at layer {on['layer']} "
                 f"({on['step_s']:.2f} s/step wall over {on['steps_timed']} steps, prepare {on['prepare_s']:.0f} s, "
                 f"replay {'cached' if on['replay_from_cache'] else 'generated'}) (target ≤ 1×)"))
    rows.append(("recipe step: trunk shared / run in full", on["step_s"] / off["step_s"],
                 f"{on['step_s']:.2f} s vs {off['step_s']:.2f} s a step over the same {on['steps_timed']} steps "
                 f"(CPU {on['step_cpu_s']:.2f} s vs {off['step_cpu_s']:.2f} s); without it the full run is "
                 f"{off['full_run_min']:.1f} min = {off['full_run_min'] / 25:.2f}× the budget"))
    more = {"gaussian": 0.32, "clean": 0.06, "suggested": 0.05, "choice_none": 0.07}
    run_f = dict(recipe, mix=tuple((k, more.get(k, v)) for k, v in DEFAULT_MIX),
                 phrasings=tuple(x for p in ("paper", "explained", "short", "inward", "notice") for x in (p, TWO_TURN)))
    f = training_budget(model_name, steps=10, **run_f)
    rows.append(("two-turn recipe (run F): full run / 25-min budget", f["full_run_min"] / 25,
                 f"{f['full_run_min']:.1f} min est. for {f['full_steps']} steps at layer {f['layer']} "
                 f"({f['step_s']:.2f} s/step wall over {f['steps_timed']} steps, half of them two_turn; "
                 f"prepare {f['prepare_s']:.0f} s, replay {'cached' if f['replay_from_cache'] else 'generated'})"))
