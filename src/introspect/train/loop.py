"""Train a LoRA adapter to report injected thoughts, with the toolkit's injection hooks active.

Why the toolkit's own hooks: the adapter must learn to notice exactly what task A injects (the
same ``InjectionSpec``, from the same mark, at the same layer), so a model trained here is a
positive control for the same instrument. Why gradients start after the injection: LoRA sits only
on blocks after layer L (the concept vectors at L are then the base model's, exactly), and each
group of rows runs its shared preamble, which lies before the injection, once without gradients
and only the rest with them: the forward pass is exact, the backward pass short.
"""

from __future__ import annotations

import json
import math
import resource
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from introspect.engine.load.models import model_info
from introspect.engine.run.inject import InjectionSpec, injecting
from introspect.records.atomic import atomic_write, atomic_write_text
from introspect.train import data as D
from introspect.train import lora
from introspect.train import losses as LS
from introspect.train import provenance as P
from introspect.train import replay as R
from introspect.train import split as S
from introspect.train import subspace as SUB
from introspect.train import trunk as T
from introspect.train.config import TrainConfig, same_record  # noqa: F401  (TrainConfig re-exported)
from introspect.train.gates import adapter_off, damage_gates
from introspect.train.plan import Plan, prepare, spec_for, step_rows  # noqa: F401  (the loop's inputs; tests use them from here)
from introspect.train.resume import check_resume, word_files

MIN_PREFIX = 8  # shorter shared preambles are not worth a separate pass
CHECKPOINT = "checkpoint.pt"
LOG = "train_log.jsonl"
REPLAY = "replay.json"  # the base model's replayed answers, trained and held out: the gates can be measured again


@dataclass
class StepStats:
    """Per-run counters the tests read: hook positions fired, rows and tokens with gradient."""

    fired: int = 0
    rows: int = 0
    grad_tokens: int = 0
    log: list[dict[str, Any]] = field(default_factory=list)


# ---------------------------------------------------------------- the loss
def _keeps_logits(model: Any) -> bool:
    import inspect

    return "logits_to_keep" in inspect.signature(type(model.original_model).forward).parameters


def group_loss(model: Any, encs: list[D.Encoded], specs: list[InjectionSpec | None], *,
               share_prefix: bool = True, stats: StepStats | None = None, name_weight: float = 1.0,
               decision_weight: float = 1.0,
               distill: bool = False, trunk: int | None = None,
               prefixes: T.Prefixes | None = None, p_first: list[float] | None = None) -> torch.Tensor:
    """Mean answer-token cross-entropy per row (a tensor ``[rows]``) under the rows' injections,
    the concept name's tokens weighted ``name_weight`` (rows that name the injected concept) and
    the first answer token ``decision_weight`` (the "Yes" or "No": one token of ~16, which an
    unweighted mean leaves to the formula after it; the training log showed its probability
    near 0.5-0.7 at a mean loss of 0.05, 2026-12-02).
    ``distill``: instead of the answer's tokens, the base model's whole next-token distribution
    at each answer position is the target (KL from it, adapter switched off for the teacher pass):
    replay rows then keep every probability, not only the greedy token. ``trunk``: the last block
    without an adapter; with ``distill``, blocks 0..trunk run once, for the teacher, and the student
    starts after them (``train.trunk``: exact, since the adapter only sits after it). ``prefixes``:
    the shared prefix's blocks below the adapter, kept across steps (``train.trunk.Prefixes``; exact).
    ``p_first``: each row's probability of its first answer token is appended (the decision token:
    "Yes" or "No"; with ``distill``, exp(−KL) at that position).

    Layout per row: ``[shared prefix | left pad | own tokens]``, as the decode loop lays rows
    out; the shared prefix (before every row's first injected position) runs once without
    gradient, its KV cache copied to every row.
    """
    from introspect.engine.run.hf_call import cache_kwargs, new_cache

    hf, dev = model.original_model, model.cfg.device
    pad = model.tokenizer.pad_token_id or 0
    g = len(encs)
    limit = min(min(e.from_pos, len(e.ids) - e.n_answer - 1) for e in encs)
    lp = 0
    if share_prefix:
        first = encs[0].ids
        while lp < limit and all(e.ids[lp] == first[lp] for e in encs):
            lp += 1
        lp = lp if lp >= MIN_PREFIX else 0
    own = [len(e.ids) - lp for e in encs]
    w = max(own)
    offsets = [w - n for n in own]
    ids = torch.full((g, w), pad, dtype=torch.long)
    mask = torch.zeros((g, lp + w), dtype=torch.long)
    mask[:, :lp] = 1
    for i, e in enumerate(encs):
        ids[i, offsets[i]:] = torch.tensor(e.ids[lp:], dtype=torch.long)
        mask[i, lp + offsets[i]:] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    k = max(e.n_answer for e in encs) + 1

    def forward(around: Callable[[], Any] = nullcontext) -> tuple[torch.Tensor, Any]:
        cache = None
        if lp:
            with torch.no_grad():
                cache = new_cache(model)
                with prefixes.around(model, tuple(first[:lp]), cache) if prefixes is not None else nullcontext():
                    hf(input_ids=torch.tensor([first[:lp]], device=dev), attention_mask=mask[:1, :lp].to(dev),
                       position_ids=pos[:1, :lp].to(dev), **cache_kwargs(model, cache))
                cache.reorder_cache(torch.zeros(g, dtype=torch.long, device=dev))
        kw: dict[str, Any] = dict(input_ids=ids.to(dev), attention_mask=mask.to(dev),
                                  position_ids=pos[:, lp:].to(dev), **cache_kwargs(model, cache))
        if _keeps_logits(model):
            kw["logits_to_keep"] = k
        with injecting(model, specs, [e.prompt() for e in encs], offsets, lp) as inj, around():
            inj.at(lp)
            return hf(**kw).logits[:, -k:-1].float(), inj

    teacher, kept = None, []
    if distill:  # the base model's own next-token distributions over the same tokens
        with torch.no_grad(), adapter_off(model):
            rec = (lambda: T.recording(model, trunk, kept)) if trunk is not None else nullcontext
            teacher = torch.log_softmax(forward(rec)[0], -1)
    logits, inj = forward((lambda: T.replaying(model, trunk, kept)) if kept else nullcontext)
    if stats is not None:
        stats.fired += sum(inj.fired.values())
        stats.rows += g
        stats.grad_tokens += int(mask[:, lp:].sum())
    logp = torch.log_softmax(logits, -1)
    if teacher is not None:
        nll = (teacher.exp() * (teacher - logp)).sum(-1)  # KL(base ‖ adapted) per token
    else:
        target = ids[:, -(k - 1):].to(logits.device)
        nll = -logp.gather(-1, target[..., None])[..., 0]
    keep = torch.zeros_like(nll)
    for i, e in enumerate(encs):
        keep[i, -e.n_answer:] = 1.0
        keep[i, nll.shape[1] - e.n_answer] = decision_weight
        if e.name is not None and name_weight != 1.0:  # the concept's name weighs more than the formula around it
            a, b = e.name
            keep[i, nll.shape[1] - e.n_answer + a:nll.shape[1] - e.n_answer + b] = name_weight
    if p_first is not None:
        at = torch.tensor([nll.shape[1] - e.n_answer for e in encs])
        p_first.extend(torch.exp(-nll.detach()[torch.arange(g), at]).tolist())
    return (nll * keep).sum(1) / keep.sum(1)


def step_loss(model: Any, plan: Plan, cfg: TrainConfig, rows: list[D.Example], *,
              stats: StepStats | None = None, prefixes: T.Prefixes | None = None
              ) -> tuple[torch.Tensor, dict[str, Any]]:
    """Mean per-row loss of one step's rows (groups: the detection rows, the replay rows);
    ``prefixes``: shared prefixes' blocks below the adapter, kept from earlier steps. The second
    value holds each group's mean loss and, under ``rows``, each detection row's
    ``train.losses.row_record``."""
    encs = [D.encode(model.tokenizer, ex, plan.replay) for ex in rows]
    groups: dict[str, list[int]] = {}
    for i, ex in enumerate(rows):
        groups.setdefault("replay" if ex.kind == "replay" else "detect", []).append(i)
    parts, by_kind, detail = [], {}, []
    for name, idx in groups.items():
        sub = [encs[i] for i in idx]
        first: list[float] = []
        losses = group_loss(model, sub, [spec_for(rows[i], encs[i], plan, cfg.layer) for i in idx],
                            share_prefix=cfg.share_prefix, stats=stats, name_weight=cfg.name_weight,
                            decision_weight=1.0 if name == "replay" else cfg.decision_weight,
                            distill=name == "replay" and cfg.replay_distill,
                            trunk=cfg.layer if cfg.share_trunk else None, prefixes=prefixes, p_first=first)
        parts.append(losses * cfg.replay_weight if name == "replay" else losses)
        by_kind[name] = float(losses.detach().mean())
        if name == "detect":
            detail = [LS.row_record(rows[i], float(v), p) for i, v, p in zip(idx, losses.detach().tolist(), first)]
    total = torch.cat(parts)
    n_rep = len(groups.get("replay", ()))
    denom = len(rows) - n_rep + cfg.replay_weight * n_rep  # a weighted mean: weight 1 is the plain mean
    return total.sum() / denom, {**by_kind, "rows": detail}


# ---------------------------------------------------------------- checkpoints
def _atomic_save(obj: Any, path: Path) -> None:
    atomic_write(path, lambda tmp: torch.save(obj, tmp))


def _replay_from(rows: list[Any]) -> list[R.ReplayItem]:
    return [R.ReplayItem.from_json(r) for r in rows]


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    warm = min(1.0, (step + 1) / max(cfg.warmup, 1))
    return cfg.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / max(cfg.steps, 1))))


def loadable_name(model: Any) -> str:
    """What ``load_model`` takes to load this model again: its registry name, else the path or
    hub id the HF weights came from (a display name such as a folder's last part is not enough)."""
    from introspect.engine.load.models import registry

    name = model_info(model).name
    if name in registry():
        return name
    return str(getattr(model.original_model.config, "_name_or_path", "") or name)


def peak_rss_mib() -> float:
    """This process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------- the steps (any adapter)
@dataclass(frozen=True)
class Steps:
    """What ``run_steps`` did: the step it resumed from and what its steps cost."""

    start: int
    seconds: float
    cpu_seconds: float

    def summary(self, cfg: Any, stats: StepStats) -> dict[str, Any]:
        n = max(cfg.steps - self.start, 1)
        return {"steps": cfg.steps, "steps_this_run": cfg.steps - self.start, "seconds_train": round(self.seconds, 1),
                "seconds_per_step": round(self.seconds / n, 3),
                # CPU seconds of all threads per step: on a busy machine, what the step costs without the wait
                "cpu_seconds_per_step": round(self.cpu_seconds / n, 3), "threads": torch.get_num_threads(),
                "peak_rss_mib": round(peak_rss_mib(), 1),
                "loss_first": stats.log[0]["loss"] if stats.log else None,
                "loss_last": stats.log[-1]["loss"] if stats.log else None}


def run_steps(model: Any, cfg: Any, stats: StepStats, ckpt: dict[str, Any] | None, ckpt_path: Path, *,
              loss_at: Callable[[int], tuple[torch.Tensor, dict[str, Any]]], saved: dict[str, Any],
              progress: bool = True, constrain: Callable[[], None] | None = None) -> Steps:
    """Attach the LoRA (restored from ``ckpt``) and run steps up to ``cfg.steps``: ``lr_at``'s
    schedule, clipped AdamW, a log line per step (losses, wall seconds: a step's cost varies with
    its rows; a ``rows`` list from ``loss_at`` is kept as it is), an atomic checkpoint every ``checkpoint_every`` steps holding ``saved`` beside the
    adapter, optimiser, log and config; the log is written last.

    Why shared: the detection and self-knowledge adapters differ in their rows and loss
    (``loss_at(step)``), not in how a step is taken, saved or resumed. ``constrain``: called after
    attaching or restoring the adapter and after every step (``train.subspace.constrain``).
    """
    from tqdm.auto import tqdm

    params = lora.attach(model, cfg.layer, cfg.rank, cfg.lora_alpha, seed=cfg.seed)
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    start = 0
    if ckpt is not None:
        lora.load_adapter_state(model, ckpt["adapter"])
        opt.load_state_dict(ckpt["optim"])
        start, stats.log = int(ckpt["step"]), list(ckpt["log"])
    if constrain is not None:
        constrain()
    bar = tqdm(total=cfg.steps, initial=start, desc="train", unit="step", dynamic_ncols=True,
               file=sys.stderr, disable=not progress)
    loop_t0, cpu_t0 = time.perf_counter(), time.process_time()
    for step in range(start, cfg.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(cfg, step)
        t_step = time.perf_counter()
        loss, parts = loss_at(step)
        detail = parts.pop("rows", None)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if constrain is not None:
            constrain()
        stats.log.append({"step": step + 1, "loss": round(loss.item(), 5),
                          **{f"loss_{k}": round(v, 5) for k, v in parts.items()},
                          "seconds": round(time.perf_counter() - t_step, 3),
                          **({"rows": detail} if detail is not None else {})})
        bar.set_postfix(loss=f"{stats.log[-1]['loss']:.3f}", refresh=False)
        bar.update(1)
        if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.steps:
            _atomic_save({"step": step + 1, "adapter": lora.adapter_state(model), "optim": opt.state_dict(),
                          "log": stats.log, "config": cfg.to_dict(), **saved}, ckpt_path)
    bar.close()
    done = Steps(start, time.perf_counter() - loop_t0, time.process_time() - cpu_t0)
    atomic_write_text(ckpt_path.parent / LOG, "".join(json.dumps(r) + "\n" for r in stats.log))
    return done


def replay_json(plan: Plan) -> dict[str, list[dict[str, Any]]]:
    """The base model's replay answers as saved (checkpoint, ``replay.json``, digest), built once."""
    return {"trained": [r.to_json() for r in plan.replay], "heldout": [r.to_json() for r in plan.replay_heldout]}


def plan_inputs(plan: Plan, replay: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, str]:
    """sha256 of what the base model computed for the run: vectors, residual norms, replay answers,
    yes/no questions; two trainings with equal digests differ only in the steps themselves."""
    replay = replay if replay is not None else replay_json(plan)
    return {"vectors": P.digest_tensors(plan.vectors), "resid": P.digest_json(plan.resid),
            "replay": P.digest_json([replay["trained"], replay["heldout"]]),
            "questions": P.digest_json([plan.questions, plan.gate_questions])}


def train(model: Any, cfg: TrainConfig, out: Path | str, *, progress: bool = True,
          stats: StepStats | None = None, model_name: str | None = None, replay_cache: bool = True) -> dict[str, Any]:
    """Train (or resume) an adapter into ``out``; returns a summary (losses, seconds, memory).

    A checkpoint (adapter, optimiser, log) is written atomically every ``checkpoint_every``
    steps; rerunning the same command resumes from it. A checkpoint made with another config or
    on other weights is refused, and so is one made from other word files (their sha256) or whose
    concept split differs from the one this run makes (one line: what differs, what would be right). The finished adapter, its hash, the base model's fingerprint and
    the config are saved into ``out`` (``introspect_adapter.json`` written last). ``replay_cache``:
    the base model's replay answers through ``train.replay.cached_replay`` (False: generated now).
    """
    out = Path(out)
    info = model_info(model)
    hashes = word_files(cfg)
    base_fp = info.fingerprint
    ckpt_path = out / CHECKPOINT
    ckpt = None
    if ckpt_path.exists():
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        if not same_record(ckpt.get("config"), cfg) or ckpt.get("base_fingerprint") != base_fp:
            raise D.TrainDataError(f"{ckpt_path} was made with another config or model; use a new --out")
        check_resume(ckpt, ckpt_path, hashes)
    stats = stats if stats is not None else StepStats()
    t0 = time.perf_counter()
    plan = prepare(model, cfg, replay=(_replay_from(ckpt["replay"]), _replay_from(ckpt.get("replay_heldout", [])))
                   if ckpt else None, replay_cache=replay_cache)
    assert plan.split is not None
    if ckpt is not None:
        check_resume(ckpt, ckpt_path, hashes, plan.split)
    out.mkdir(parents=True, exist_ok=True)
    note = (f"adapter training split ({cfg.split} rule" + (f", max cos {cfg.max_cos:g}" if cfg.split == "meaning" else "")
            + f", seed {cfg.seed}, layer {cfg.layer}"
            + (f", nearness judged at layer {cfg.split_at}" if cfg.split_at != cfg.layer else "")
            + f") for {info.name}; baseline as concepts/words.yaml")
    atomic_write_text(out / "words_train.yaml", S.words_yaml(plan.train, plan.baseline, "trained on: " + note))
    atomic_write_text(out / "words_heldout.yaml", S.words_yaml(plan.heldout, plan.baseline, "never trained on: " + note,
                                                          plan.split))
    atomic_write_text(out / S.SPLIT_FILE, json.dumps({**plan.split.to_dict(), "word_files": hashes, "layer": cfg.layer,
                                                  "split_layer": cfg.split_at,
                                                  "seed": cfg.seed}, indent=2) + "\n")
    read = SUB.fit(model, plan, cfg, cfg.read_dims) if cfg.read_dims else None
    prep_s = time.perf_counter() - t0
    prefixes = T.Prefixes(cfg.layer) if cfg.share_trunk else None

    def loss_at(step: int) -> tuple[torch.Tensor, dict[str, Any]]:
        return step_loss(model, plan, cfg, step_rows(plan, cfg, step), stats=stats, prefixes=prefixes)

    replay = replay_json(plan)
    steps = run_steps(model, cfg, stats, ckpt, ckpt_path, loss_at=loss_at, progress=progress,
                      saved={"base_fingerprint": base_fp, "replay": replay["trained"],
                             "replay_heldout": replay["heldout"],
                             "split": plan.split.identity(), "word_files": hashes},
                      constrain=(lambda: SUB.constrain(model, read[0])) if read else None)
    atomic_write_text(out / REPLAY, json.dumps(replay) + "\n")
    t_gates = time.perf_counter()
    gates = damage_gates(model, plan, cfg) if cfg.gates else None
    summary = {**steps.summary(cfg, stats), "seconds_prepare": round(prep_s, 1),
               "n_train_concepts": len(plan.train), "n_heldout_concepts": len(plan.heldout),
               "split": cfg.split, "n_dropped_concepts": len(plan.split.dropped),
               "n_replay": len(plan.replay), "n_replay_heldout": len(plan.replay_heldout),
               "replay_from_cache": plan.replay_cached,
               "seconds_gates": round(time.perf_counter() - t_gates, 1), "damage_gates": gates,
               **(read[1] if read else {})}
    meta = {"base_model": model_name or loadable_name(model), "base_name": info.name,
            "base_fingerprint": base_fp, "training": cfg.to_dict(),
            "train_concepts": plan.train, "heldout_concepts": plan.heldout, "split": plan.split.to_dict(),
            "word_files": hashes, "summary": summary, "provenance": P.record(plan_inputs(plan, replay))}
    summary["adapter_hash"] = lora.save_adapter(model, out, layer=cfg.layer, meta=meta)
    ckpt_path.unlink(missing_ok=True)
    return summary
