"""The damage gates of a saved adapter, measured again, at its trained size or scaled.

Why: training measures the gates once, on the adapter as trained. Whether a smaller dose of the
same adapter (``--adapter-scale``) still detects injections *and* leaves the model intact is the
trade-off an owner weighs against the replay gates (no more change than a 6-bit copy of the base
model); and a recipe is judged by how many of its trainings pass every gate (k of n), gates
measured again when the gates change. So they must be measurable at any scale, on the same
held-out replay answers (``replay.json``), yes/no questions and injections as in training,
without retraining. The adapter is attached live (not merged): the
gates switch it off for the base model beside it and swap in a random twin of its (scaled) size.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from introspect.engine.load.adapters import AdapterError, check_scale, read_adapter, scale_lora


def saved_gates(path: Path | str, scale: float = 1.0, *, model: Any = None, twins: int = 1,
                yardsticks: Sequence[str] = ()) -> dict[str, Any]:
    """The damage gates (``train.gates.damage_gates``, with ``twins`` random twins and the
    named ``yardsticks``) of the
    adapter at ``path`` times ``scale``: its base model loaded (or ``model``, a fresh base
    model), the concept split and vectors rebuilt from the recorded config and refused if they
    differ from the recorded split, the replayed answers read from ``replay.json``. Returns the
    gates' figures plus ``scale`` and ``adapter_hash``."""
    from introspect.engine.load.models import load_model, model_info
    from introspect.train import lora
    from introspect.train import replay as R
    from introspect.train.config import TrainConfig
    from introspect.train.gates import check_twins, damage_gates
    from introspect.train.loop import REPLAY
    from introspect.train.plan import prepare
    from introspect.train.yardsticks import check_names

    scale = check_scale(scale)
    check_twins(twins)  # before the (slow) model load
    yardsticks = check_names(yardsticks)
    d = Path(path).expanduser()
    meta, state, _ = read_adapter(d)
    try:
        replay = json.loads((d / REPLAY).read_text())
    except (OSError, ValueError) as e:
        raise AdapterError(f"{d}: no readable {REPLAY} (the base model's replayed answers the gates "
                           f"compare with; adapters from before it cannot be measured again)") from e
    cfg = TrainConfig.from_dict(meta["training"])
    model = model if model is not None else load_model(meta["base_model"])
    if getattr(model, "introspect_lora", None) is not None:
        raise AdapterError("saved_gates needs a fresh base model (this one already carries a LoRA adapter)")
    if model_info(model).fingerprint != meta.get("base_fingerprint"):
        raise AdapterError(f"adapter {d} was trained on {meta.get('base_model')!r} (fingerprint "
                           f"{meta.get('base_fingerprint')}), not on this model ({model_info(model).fingerprint})")
    items = ([R.ReplayItem.from_json(r) for r in replay["trained"]],
             [R.ReplayItem.from_json(r) for r in replay["heldout"]])
    plan = prepare(model, cfg, replay=items)  # on the base model, as training did before attaching
    if (plan.train, plan.heldout) != (list(meta["train_concepts"]), list(meta["heldout_concepts"])):
        raise AdapterError(f"{d}: the concept split made now differs from the one recorded at training "
                           "(word files or the model changed); measure with the files it was trained on")
    lora.attach(model, cfg.layer, cfg.rank, cfg.lora_alpha, seed=cfg.seed)
    lora.load_adapter_state(model, state)
    scale_lora(model.original_model, scale)  # as load_model(adapter_scale=) does before merging
    return {**damage_gates(model, plan, cfg, twins, yardsticks), "scale": scale, "adapter_hash": meta["adapter_hash"]}
