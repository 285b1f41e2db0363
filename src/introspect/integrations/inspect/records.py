"""Inspect logs as the toolkit's JSONL records, so the summariser and dashboard read them.

``records_from_log(log)`` returns a run header and one trial record per output choice of every
``introspect`` model call in the log (a request's conditions and samples are its choices), each
checked by ``introspect.records.jsonl.validate``; ``write_records(log, path)`` appends them to a
JSONL file that ``introspect.report.load_results`` and ``summarize`` read.

Mapping: a direction's record condition is ``control`` (none), ``injected`` (concept, and zero:
the placebo), ``negative``, ``random`` or ``concept_random`` (other_concept). A placebo row gets
the model id ``<model>+placebo`` (and its fingerprint ``:placebo``), as the toolkit's placebo
runs do, so a zero injection never counts as a real one. Grades: a sample's scores go to the
records of its last model call; a score whose metadata holds ``choices`` (one grade dict per
choice, as ``scorers.detection`` writes) grades each choice; otherwise a multi-choice output's
records get only the scalar scores of choice 0 (what Inspect's scorers saw) and the others none.

A request that names its toolkit trial (``trial``: ``tasks.injected_thoughts`` sends task A's)
gives that trial's records: task ``A``, its framing as the variant, its index and sample, the
toolkit's trial ids and ``extra`` fields, so ``summarize`` runs task A's paired summariser on
them and equals it on a direct run of the same trials (``toolkit_records``).

Logs of the self-knowledge tasks (``selfknowledge.py``: their samples carry ``introspect_sk``
metadata) become one record per item instead, whatever model answered (``sk_records``), and the
Delegate Game's (``introspect_game``) one ``delegate`` record per reply (``delegate_game``), and
the SEB tasks' (``introspect_seb``) one toolkit SEB record per trial (``seb.seb_records``).
"""

from __future__ import annotations

from pathlib import Path
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
from introspect.records.jsonl import JsonlWriter, trial_id, validate


def toolkit_records(recs: list[dict[str, Any]], rows: list[dict[str, Any]], meta: dict[str, Any],
                    coords: dict[str, Any], metadata: dict[str, Any]) -> list[dict[str, Any]]:
    """One request's records as its toolkit trial's: the trial's task, framing (variant), index,
    seed and sample, the toolkit's trial ids, ``extra.vector_word`` only under another concept's
    direction and ``extra.mismatch_word`` (task A's), so the task's own summariser pairs each
    injected answer with its control as it pairs a direct run's. Epoch N > 1 (Inspect's repeats,
    new streams) counts as samples (N − 1)·K … N·K − 1. A request with a zero injection also
    gives its control under the placebo model id (the same answer): the placebo rows then pair
    with a control, as a toolkit placebo run's do (Net 0 by construction). A bias question's
    request (``metadata["bias"]``, the trial's ``question`` param) gives ``bias_control`` and
    ``bias`` records with ``extra.question`` and ``extra.correct``."""
    mismatch, bias = metadata.get("mismatch_word"), metadata.get("bias")
    rename = {"control": "bias_control", "injected": "bias"} if bias else {}
    k = 1 + max((int(r["sample"]) for r in rows), default=0)
    epoch = int(coords.get("epoch", 1))
    more = {"epoch": epoch} if epoch > 1 else {}
    out = []
    for rec, row in zip(recs, rows):
        s = int(row["sample"]) + (epoch - 1) * k
        params = {**more, **({"vector_word": row["vector_concept"]} if row["direction"] == "other_concept" else {})}
        injected = rec["injected"]
        rec = {**rec, "condition": rename.get(rec["condition"], rec["condition"])}
        ex = {key: v for key, v in rec["extra"].items() if key not in ("vector_word", "alpha_as")}
        if row["direction"] == "other_concept":
            ex["vector_word"] = row["vector_concept"]
        if injected:
            ex["alpha_as"] = rec["extra"]["alpha_as"]
        if mismatch and rec["word"]:
            ex["mismatch_word"] = mismatch
        if bias:
            ex["question"], ex["correct"] = bias["question"], bias["correct"]
        tid = _toolkit_id(meta, coords, rec["condition"], s, placebo=ex["placebo"], layer=rec["layer_idx"],
                          alpha=rec["alpha"], params=params)
        out.append({**rec, "variant": coords["variant"], "trial_index": coords["index"],
                    "seed": coords["seed"], "sample": s, "trial_id": tid, "extra": ex})
    if any(r["extra"]["placebo"] for r in out):
        for rec in [r for r in out if r["condition"] in ("control", "bias_control")]:
            tid = _toolkit_id(meta, coords, rec["condition"], rec["sample"], placebo=True, params=more)
            out.append({**rec, "model_id": rec["model_id"] + "+placebo", "trial_id": tid,
                        "extra": {**rec["extra"], "placebo": True, "fingerprint": rec["extra"]["fingerprint"] + ":placebo",
                                  "copy_of": rec["trial_id"]}})
    return out


def records_from_log(log: EvalLog, *, task: str | None = None) -> list[dict[str, Any]]:
    """A header and one trial record per (model call, choice) of ``log``; ``task`` names the
    records' task (default: the request's toolkit ``trial`` task, e.g. ``A`` for
    ``injected_thoughts``, else the Inspect task's name), which picks the report's summariser.
    A request with ``trial`` coordinates gives that toolkit trial's records (``toolkit_records``).
    A self-knowledge task's log (any model) gives its item records (``sk_records.sk_records``),
    a Delegate Game log its game records (``delegate_game.game_records``), an SEB log its
    association / restriction / difficulty records (``seb.seb_records``), a task B / C / D log
    (``tasks_bc``, ``tasks_d``) the toolkit's task B / C / D records (``records_bcd.inj_records``)."""
    keys = {k for s in log.samples or [] for k in (s.metadata or {})}
    if "introspect_sk" in keys:
        from introspect.integrations.inspect.sk_records import sk_records

        return sk_records(log, task=task)
    if "introspect_seb" in keys:
        from introspect.integrations.inspect.seb import seb_records

        return seb_records(log, task=task)
    if "introspect_inj" in keys:
        from introspect.integrations.inspect.records_bcd import inj_records

        return inj_records(log, task=task)
    if "introspect_game" in keys:
        from introspect.integrations.inspect.delegate_game import game_records

        return game_records(log, task=task)
    trials: list[dict[str, Any]] = []
    first: dict[str, Any] | None = None
    for s_idx, sample in enumerate(log.samples or []):
        outs = _outputs(sample)
        for call, out in enumerate(outs):
            meta = out.metadata[METADATA_KEY]  # type: ignore[index]
            first = first or meta
            rows = meta["choices"]
            grades = _grades(sample, len(rows)) if call == len(outs) - 1 else [{} for _ in rows]
            coords_t = meta.get("trial")  # a toolkit trial's coordinates: its records are that run's
            name = task or (coords_t["task"] if coords_t else log.eval.task)
            recs = []
            for j, (row, choice) in enumerate(zip(rows, out.choices)):
                placebo = row["direction"] == "zero"
                injected = row["direction"] != "none"
                coords = dict(eval_id=log.eval.eval_id, sample=str(sample.id), epoch=sample.epoch, call=call,
                              label=row["label"], k=row["sample"])
                recs.append({
                    "type": "trial", "seed": int(meta.get("seed") or 0),
                    "model_id": meta["model_id"] + ("+placebo" if placebo else ""), "task": name,
                    "condition": row["condition"], "layer_idx": row["layer"] if injected else None,
                    "alpha": float(row["alpha"]) if injected else 0.0, "alpha_units": row["alpha_units"],
                    "alpha_effective": float(row.get("alpha_effective", 0.0)), "word": row.get("concept"),
                    "injected": injected, "token_positions": _token_positions(row), "prompt": meta["prompt"],
                    "response": choice.message.text, "grade": grades[j],
                    "gen": {**meta["sampling"], "max_new_tokens": meta["max_new_tokens"],
                            "stream_seed": row["stream_seed"], "stop_reason": row["stop_reason"]},
                    "p_yes": row.get("p_yes"), "p_no": row.get("p_no"), "variant": "default", "trial_index": s_idx,
                    "sample": int(row["sample"]), "trial_id": trial_id(**coords), "run_id": log.eval.run_id,
                    "extra": {"inspect_sample_id": sample.id, "epoch": sample.epoch, "call": call,
                              "label": row["label"], "direction": row["direction"], "stream_key": meta["stream_key"],
                              "alpha_as": row.get("alpha_as", {}), "vector_word": row.get("vector_concept"),
                              "injected_positions": row.get("injected_positions"), "placebo": placebo,
                              "fingerprint": meta["fingerprint"] + (":placebo" if placebo else "")},
                    "ts": str(log.eval.created),
                })
            if coords_t:
                recs = toolkit_records(recs, rows, meta, coords_t, sample.metadata or {})
            trials += [validate(r) for r in recs]
    if first is None:
        return []
    name = task or (first.get("trial") or {}).get("task") or log.eval.task
    seed = (first.get("trial") or {}).get("seed", first.get("seed"))
    return [provider_header(log, first, name, seed), *trials]


def write_records(log: EvalLog, path: Path | str, *, task: str | None = None) -> Path:
    """Append ``records_from_log(log)`` to a JSONL file (atomic lines, as every toolkit run)."""
    w = JsonlWriter(path)
    for rec in records_from_log(log, task=task):
        w.write(rec)
    return w.path
