"""Logs of the self-knowledge Inspect tasks (``selfknowledge.py``) as the toolkit's records.

``sk_records(log)`` (``records_from_log`` calls it for these logs) gives a header and one trial
record per (item, epoch), whose grade is the ability task's (``ability.execute``: ``correct``,
``p_correct``, ``choice``, ``mass``, ``low_mass``, ``text_choice``, ``parse_ok``,
``text_correct``), so the toolkit's summariser reads either source. With rotations the decision
is the letter-free one (``rotations.read_rotations`` over the item's rotations, PriDe's prior
over the items read the same way), and the rotation-0 reading stays beside it as ``raw_*``, as
the Delegate Game's baseline does.

Decision sources are never pooled: an item is read from log-probs when every one of its
rotations returned them, else from the parsed text of every rotation (``decision_source`` in
its grade and ``gen``), and the source is part of the variant (``<set>+logprobs:rotations``),
so the summaries keep the two apart; ``summarize_mc`` refuses a group that still mixes them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd
from inspect_ai.log import EvalLog
from inspect_ai.model import ModelOutput

from introspect.integrations.inspect.messages import versions
from introspect.integrations.inspect.selfknowledge import SK_KEY, read_output
from introspect.records.jsonl import SCHEMA_VERSION, trial_id, validate
from introspect.report.inspect_mc import (  # noqa: F401  (their home before; still imported from here)
    MixedSourcesError,
    check_sources,
    rotation_rows,
    summarize_mc,
)
from introspect.report.load import flatten_trial
from introspect.tasks.selfknowledge import rotations as R
from introspect.tasks.selfknowledge.common import LOW_MASS


def _text(input: Any) -> str:
    if isinstance(input, str):
        return input
    return "\n\n".join(f"{m.role}: {m.text}" for m in input)


def _dist(rd: dict[str, Any], source: str, letters: str) -> list[float] | None:
    """The reading as a letter distribution in ``source``'s terms (a logprob reading read as text
    is its parsed letter, one-hot)."""
    if source == "logprobs":
        return None if rd["probs"] is None else [float(rd["probs"][k]) for k in letters]
    tc = rd["text_choice"]
    return None if tc is None else [float(k == tc) for k in letters]


def question_set(meta: dict[str, Any], source: str) -> str:
    """The question set as the records name it: the decision source and the prompt's prefill
    marked on it, as the toolkit marks ``+fewshot`` (summaries that pool variants by question
    set, like the Delegate Game's, still never pool sources)."""
    return f"{meta['question_set']}+{source}" + ("+prefill" if meta.get("prefill") else "")


def variant_of(meta: dict[str, Any], source: str) -> str:
    return question_set(meta, source) + (":rotations" if meta["n_rotations"] > 1 else "")


def grade_item(meta: dict[str, Any], reads: Sequence[dict[str, Any]], source: str,
               prior: Sequence[float] | None, tie_key: str) -> dict[str, Any]:
    """One item's grade from its rotations' readings (``reads[r]``, rotation order)."""
    key, letters = meta["key"], meta["letters"]
    dists = [_dist(rd, source, letters) for rd in reads]
    d0, r0 = dists[0], reads[0]
    choice = None if d0 is None else letters[max(range(len(d0)), key=d0.__getitem__)]
    mass = r0["mass"] if source == "logprobs" else None
    grade: dict[str, Any] = {
        "qid": meta["qid"], "source": meta["question_set"], "answer": key, "topic": meta.get("topic", ""),
        "decision_source": source, "correct": choice == key, "choice": choice,
        "p_correct": None if d0 is None else d0[letters.index(key)],
        "entropy": R.entropy(d0) if d0 is not None and source == "logprobs" else None,
        "mass": mass, "low_mass": bool(mass is not None and mass < LOW_MASS),
        "text_choice": r0["text_choice"], "parse_ok": r0["parse_ok"], "text_correct": r0["text_choice"] == key,
    }
    if meta["n_rotations"] > 1:
        grade.update(raw_correct=grade["correct"], raw_p_correct=grade["p_correct"], raw_choice=choice,
                     raw_entropy=grade["entropy"], raw_mass=mass, rotations=1,
                     rotation_text_choices=[rd["text_choice"] for rd in reads])
        if len(dists) == len(letters) and all(d is not None for d in dists):
            grade.update(R.read_rotations(dists, key, tie_key, prior))
            grade["letter_prior"] = dict(zip(letters, prior)) if prior is not None else None
            if source == "logprobs":
                grade["mass"] = sum(rd["mass"] for rd in reads) / len(reads)
                grade["low_mass"] = grade["mass"] < LOW_MASS
    return grade


def item_records(samples: Iterable[tuple[dict[str, Any], Any, ModelOutput, int]], *, model_id: str,
                 run_id: str = "", ts: str = "", task: str | None = None,
                 gen: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One validated trial record per (item, epoch) from ``(metadata[SK_KEY], input, output,
    epoch)`` per answered sample, whatever produced them (an Inspect log, or outputs in hand)."""
    by_item: dict[tuple[str, int], dict[int, tuple[dict, Any, dict]]] = defaultdict(dict)
    for meta, input, output, epoch in samples:
        by_item[(meta["qid"], epoch)][meta["rotation"]] = (meta, input, read_output(output, meta["letters"]))
    items = []
    for (qid, epoch), rots in by_item.items():
        if 0 not in rots:
            continue  # no rotation-0 answer (an errored sample): nothing to read
        meta = rots[0][0]
        reads = [rots[r][2] for r in sorted(rots)]
        source = "logprobs" if all(rd["decision_source"] == "logprobs" for rd in reads) else "text"
        items.append((qid, epoch, meta, rots, reads, source))
    priors: dict[tuple[str, int], list[list[list[float]]]] = defaultdict(list)
    for _, _, meta, _, reads, source in items:
        dists = [_dist(rd, source, meta["letters"]) for rd in reads]
        if meta["n_rotations"] > 1 and len(dists) == len(meta["letters"]) and all(d is not None for d in dists):
            priors[(source, len(meta["letters"]))].append(dists)  # type: ignore[arg-type]
    prior = {k: R.letter_prior(v) for k, v in priors.items()}
    out = []
    for i, (qid, epoch, meta, rots, reads, source) in enumerate(sorted(items, key=lambda x: (x[1], x[0]))):
        tie = f"{meta.get('seed', 0)}:{qid}" + (f":epoch{epoch}" if epoch > 1 else "")
        grade = grade_item(meta, reads, source, prior.get((source, len(meta["letters"]))), tie)
        name = task or meta["kind"]
        variant = variant_of(meta, source)
        rec = {
            "type": "trial", "seed": int(meta.get("seed", 0)), "model_id": model_id, "task": name,
            "condition": "clean", "layer_idx": None, "alpha": 0.0, "alpha_units": "raw", "alpha_effective": 0.0,
            "word": None, "injected": False, "token_positions": None, "prompt": _text(rots[0][1]),
            "response": rots[0][2].get("response", ""), "grade": grade,
            "gen": {**(gen or {}), "decision_source": source, "format": "chat"},
            "p_yes": None, "p_no": None, "variant": variant, "trial_index": i, "sample": epoch - 1,
            "trial_id": trial_id(run_id=run_id, task=name, variant=variant, qid=qid, epoch=epoch),
            "run_id": run_id, "ts": ts,
            "extra": {"epoch": epoch, "inspect_sample_ids": [f"{qid}@r{r}" for r in sorted(rots)],
                      "rotation_responses": [rots[r][2].get("response", "") for r in sorted(rots)],
                      "decision_tokens": [rd["decision_token"] for rd in reads]},
        }
        out.append(validate(rec))
    return out


def sk_records(log: EvalLog, *, task: str | None = None) -> list[dict[str, Any]]:
    """A header and the item records of a self-knowledge Inspect log (errored samples left out)."""
    rows = [(s.metadata[SK_KEY], s.input, s.output, s.epoch) for s in (log.samples or [])
            if SK_KEY in (s.metadata or {}) and s.error is None]
    trials = item_records(rows, model_id=log.eval.model, run_id=log.eval.run_id, ts=str(log.eval.created),
                          task=task, gen=generate_config(log))
    if not trials:
        return []
    return [header_of(log, trials, task), *trials]


def header_of(log: EvalLog, trials: list[dict[str, Any]], task: str | None = None) -> dict[str, Any]:
    """The run header of an Inspect log's records (a model not ours: its Inspect name stands for
    the weights' fingerprint)."""
    rev, ts = log.eval.revision, str(log.eval.created)
    return validate({
        "type": "header", "schema": SCHEMA_VERSION, "run_id": log.eval.run_id, "ts": ts, "model_id": log.eval.model,
        "fingerprint": f"inspect:{log.eval.model}", "seed": trials[0]["seed"],
        "versions": versions(),
        "git_commit": (rev.commit + ("+dirty" if rev.dirty else "")) if rev is not None else "unknown",
        "config": {"inspect": {"task": log.eval.task, "task_args": log.eval.task_args, "eval_id": log.eval.eval_id,
                               "model": log.eval.model, "model_args": log.eval.model_args,
                               "generate": generate_config(log), "status": log.status, "log": log.location}},
        "runtime": {}, "task": task or trials[0]["task"],
        "notes": [f"from the Inspect log {log.location or log.eval.eval_id}; the model's weights are not "
                  "ours, so the fingerprint is its Inspect name"],
    })


def generate_config(log: EvalLog) -> dict[str, Any]:
    """The generation settings a log's samples were asked with (the task's, under the eval's)."""
    cfg = log.plan.config.merge(log.eval.model_generate_config) if log.eval.model_generate_config else log.plan.config
    return {k: v for k, v in cfg.model_dump(exclude_none=True).items()
            if k in ("temperature", "max_tokens", "logprobs", "top_logprobs", "top_p", "seed")}


def frame_of(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Trial records as the flat frame the summarisers read (``report.load.flatten_trial``)."""
    return pd.DataFrame([flatten_trial(r) for r in records if r.get("type") == "trial"])
