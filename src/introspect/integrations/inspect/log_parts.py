"""Pieces every Inspect-log reader shares: a sample's model outputs, its per-choice grades, the
injected positions as records write them, and the toolkit trial id of a choice.

Why a module of its own: task A's records (``records.py``) and tasks B–D's (``records_bcd.py``)
both read logs this way; ``records.py`` dispatches to ``records_bcd``, so the shared parts live
below both.
"""

from __future__ import annotations

from typing import Any

from inspect_ai.log import EvalLog, EvalSample
from inspect_ai.model import ModelOutput

from introspect.integrations.inspect.messages import METADATA_KEY
from introspect.records.jsonl import SCHEMA_VERSION, validate

SCORE_VALUES = {"C": True, "I": False}  # Inspect's CORRECT / INCORRECT


def _outputs(sample: EvalSample) -> list[ModelOutput]:
    """The sample's introspect model outputs, in call order (its events, else its final output)."""
    outs = [e.output for e in (sample.events or []) if getattr(e, "event", None) == "model"
            and (e.output.metadata or {}).get(METADATA_KEY)]
    if not outs and (sample.output.metadata or {}).get(METADATA_KEY):
        outs = [sample.output]
    return outs


def _scalar(v: Any) -> Any:
    if isinstance(v, str) and v in SCORE_VALUES:
        return SCORE_VALUES[v]
    return v if isinstance(v, (bool, int, float, str)) else None


def _grades(sample: EvalSample, n_choices: int) -> list[dict[str, Any]]:
    """One grade dict per choice of the sample's scored (last) output."""
    out: list[dict[str, Any]] = [{} for _ in range(n_choices)]
    for name, score in (sample.scores or {}).items():
        per = (score.metadata or {}).get("choices")
        if isinstance(per, list) and len(per) == n_choices:
            for j, g in enumerate(per):
                out[j].update({k: v for k, v in (g or {}).items() if v is None or _scalar(v) is not None})
            continue
        values = score.value if isinstance(score.value, dict) else {name: score.value}
        for k, v in values.items():
            if _scalar(v) is not None:
                out[0][k if isinstance(score.value, dict) else name] = _scalar(v)
    return out


def _token_positions(row: dict[str, Any]) -> list[int] | str | None:
    if row.get("direction", "none") == "none":
        return None
    p = row.get("positions")
    if isinstance(p, dict):
        if "from" in p:
            return f"from:{p['from']}+generated"
        runs = (row.get("injected_positions") or {}).get("prompt") or []
        if "from_text" in p and runs:
            return f"from:{runs[0][0]}+generated"
        return [i for a, b in runs for i in range(a, b)]
    return p


def _toolkit_id(meta: dict[str, Any], coords: dict[str, Any], condition: str, sample: int, *, placebo: bool,
                layer: int | None = None, alpha: float = 0.0, params: dict[str, Any] | None = None) -> str:
    """The trial id a toolkit run gives this trial (its placebo run's, for a zero injection)."""
    from introspect.integrations.inspect.provider import toolkit_trial

    fp = meta["fingerprint"] + (":placebo" if placebo else "")
    return toolkit_trial(coords, condition, sample, layer=layer, alpha=alpha, params=params).id(fp, coords["seed"])


def provider_header(log: EvalLog, first: dict[str, Any], task: str, seed: Any) -> dict[str, Any]:
    """The run header of records from an ``introspect`` provider log: the model, fingerprint and
    versions its first output's metadata (``first``) recorded, and the eval that made it; where
    the concept vectors came from (``vectors``, and for a vectors file ``config.vectors_file`` and
    the note) as a toolkit run's header says it."""
    rev = log.eval.revision
    vectors = first.get("vectors")
    from_file = {"vectors_file": vectors["path"]} if vectors and vectors.get("source") == "file" else {}
    return validate({
        "type": "header", "schema": SCHEMA_VERSION, "run_id": log.eval.run_id, "ts": str(log.eval.created),
        "model_id": first["model_id"], "fingerprint": first["fingerprint"], "seed": int(seed or 0),
        "versions": first["versions"],
        "git_commit": (rev.commit + ("+dirty" if rev.dirty else "")) if rev is not None else "unknown",
        "config": {"inspect": {"task": log.eval.task, "task_id": log.eval.task_id, "eval_id": log.eval.eval_id,
                               "model": log.eval.model, "model_args": log.eval.model_args,
                               "status": log.status, "log": log.location}, **from_file},
        "runtime": {}, "notes": [f"from the Inspect log {log.location or log.eval.eval_id}", *first.get("notes", [])],
        "task": task, **({"vectors": vectors} if vectors else {}),
    })
