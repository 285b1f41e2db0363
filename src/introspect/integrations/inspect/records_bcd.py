"""Logs of the Inspect tasks B, C and D as the toolkit's task B / C / D records.

A sample of ``tasks_bc`` (task B or C; its metadata holds ``introspect_inj``) is one toolkit trial
group: its model calls are the trial's prompts (task B's thought and repeat questions, else
one), each with one choice per (condition, sample). Record j joins choice j of every call, as
``task_b.execute`` joins a trial's answers: prompts and responses joined by ``\\n----\\n``, the
stream seed and stop reason of the first, the sentence's token positions, the grade the
scorer wrote. A task D sample (``tasks_d``) is one teacher-forced trial: its record carries the
readout (per-layer cosines) as the grade. Trial ids, variants, indices and samples are the
toolkit run's (``records.toolkit_records`` does the same for task A), so ``summarize`` runs the
task's own summariser on them.
"""

from __future__ import annotations

from typing import Any

from inspect_ai.log import EvalLog

from introspect.integrations.inspect.log_parts import (
    _grades,
    _outputs,
    _token_positions,
    _toolkit_id,
    provider_header,
)
from introspect.integrations.inspect.messages import METADATA_KEY
from introspect.records.jsonl import validate

INJ_KEY = "introspect_inj"
JOIN = "\n----\n"


def _trial_records(log: EvalLog, sample: Any, info: dict[str, Any], task: str | None) -> list[dict[str, Any]]:
    outs = _outputs(sample)
    metas = [o.metadata[METADATA_KEY] for o in outs]  # type: ignore[index]
    meta, rows = metas[0], metas[0]["choices"]
    coords = meta["trial"]
    grades = _grades(sample, len(rows))
    k = 1 + max((int(r["sample"]) for r in rows), default=0)
    epoch = int(coords.get("epoch", 1))
    more = {"epoch": epoch} if epoch > 1 else {}
    out = []
    for j, row in enumerate(rows):
        injected = row["direction"] != "none"
        condition = row["label"].split("@")[0]
        s = int(row["sample"]) + (epoch - 1) * k
        layer = row["layer"] if injected else None
        alpha = float(row["alpha"]) if injected else 0.0
        params = {**more, **({"other": row["concept"]} if condition == "mismatch" else {})}
        extra: dict[str, Any] = {"sentence": info["sentence"]}
        if info.get("mc_answer"):
            extra["mc_answer"] = info["mc_answer"]
        if info["task"] == "C":
            extra["injected_word"] = row["concept"] if injected else None
        if injected:
            extra["alpha_as"] = row.get("alpha_as", {})
        extra.update(inspect_sample_id=sample.id, epoch=sample.epoch, label=row["label"],
                     stream_keys=[m["stream_key"] for m in metas], fingerprint=meta["fingerprint"],
                     injected_positions=row.get("injected_positions"))
        rec = {
            "type": "trial", "seed": coords["seed"], "model_id": meta["model_id"], "task": task or info["task"],
            "condition": condition, "layer_idx": layer, "alpha": alpha, "alpha_units": info["alpha_units"],
            "alpha_effective": float(row.get("alpha_effective", 0.0)), "word": info["word"], "injected": injected,
            "token_positions": _token_positions(row), "prompt": JOIN.join(m["prompt"] for m in metas),
            "response": JOIN.join(o.choices[j].message.text for o in outs), "grade": grades[j],
            "gen": {**meta["sampling"], "max_new_tokens": meta["max_new_tokens"], "stream_seed": row["stream_seed"],
                    "stop_reason": row["stop_reason"]},
            "p_yes": row.get("p_yes") if info["task"] == "C" else None,
            "p_no": row.get("p_no") if info["task"] == "C" else None,
            "variant": coords["variant"], "trial_index": coords["index"], "sample": s,
            "trial_id": _toolkit_id(meta, coords, condition, s, placebo=False, layer=layer, alpha=alpha, params=params),
            "run_id": log.eval.run_id, "extra": extra, "ts": str(log.eval.created),
        }
        out.append(validate(rec))
    return out


def _readout_record(log: EvalLog, sample: Any, info: dict[str, Any], task: str | None) -> list[dict[str, Any]]:
    meta = _outputs(sample)[-1].metadata[METADATA_KEY]  # type: ignore[index]
    coords, ro = meta["trial"], meta["readout"]
    epoch = int(coords.get("epoch", 1))
    if epoch > 1:  # teacher-forced: every epoch reads the same activations; one record per trial
        return []
    cond = info["condition"]
    rec = {
        "type": "trial", "seed": coords["seed"], "model_id": meta["model_id"], "task": task or info["task"],
        "condition": cond, "layer_idx": None, "alpha": 0.0, "alpha_units": info["alpha_units"],
        "alpha_effective": 0.0, "word": info["word"], "injected": False, "token_positions": ro["positions"],
        "prompt": meta["prompt"], "response": info["sentence"], "grade": ro["grade"], "gen": {"teacher_forced": True},
        "p_yes": None, "p_no": None, "variant": coords["variant"], "trial_index": coords["index"], "sample": 0,
        "trial_id": _toolkit_id(meta, coords, cond, 0, placebo=False),
        "run_id": log.eval.run_id, "ts": str(log.eval.created),
        "extra": {"sentence": info["sentence"], "n_control_words": len(ro["control_words"]),
                  "control_words": ro["control_words"], "inspect_sample_id": sample.id, "fingerprint": meta["fingerprint"]},
    }
    return [validate(rec)]


def inj_records(log: EvalLog, *, task: str | None = None) -> list[dict[str, Any]]:
    """A header and the toolkit's task B / C / D records of a ``tasks_bc`` / ``tasks_d`` log."""
    trials: list[dict[str, Any]] = []
    first: dict[str, Any] | None = None
    name = task
    for sample in log.samples or []:
        info = (sample.metadata or {}).get(INJ_KEY)
        outs = _outputs(sample)
        if not info or not outs:
            continue
        first = first or outs[0].metadata[METADATA_KEY]  # type: ignore[index]
        name = name or info["task"]
        make = _readout_record if info["task"] == "D" else _trial_records
        trials += make(log, sample, info, task)
    if first is None:
        return []
    return [provider_header(log, first, name, int(first["trial"]["seed"])), *trials]
