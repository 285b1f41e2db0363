"""Train a self-knowledge LoRA: the Delegate Game's positive control.

The adapter learns, P(IK)-style, to reply T (delegate) in the Delegate Game on the training items
the base model gets wrong and its own answer on those it gets right; the control (``shuffle``)
learns from the same rows with those labels permuted across the training items. Why this is a
positive control: only the first adapter has been shown which items are its errors, so on
held-out items (never in a training row, not even in a phase 1) only it should delegate its own
errors, a delegation lift that the unchanged task must recover, with the control's lift at the
same delegation rate covering 0 (``tasks.selfknowledge.matched_rate``). The truth on held-out items is measured by the task on each
adapted model itself; replay rows (the base model's own answers to the baseline prompts of the
training items and to neutral questions, learned as its distributions by KL) keep that truth
close to the base model's.

With ``truth_from`` (another model X's own training directory, ``selfknow_data.read_truth``) the
rows are built the same way on X's items, split and truth: T on the training items *X* gets
wrong, this model's own answer on the others, replay of this model's own answers; the adapter
then predicts X's behaviour from the outside, Binder et al.'s cross-trained predictor, held out
on exactly the items X's own adapter holds out.

Why the loop of ``train.loop``: its loss (``group_loss``: a step's game rows share their phase 1,
run once without gradient) and its steps (``run_steps``: schedule, atomic checkpoints). A run is
resumable (rerun the same call) and refuses a checkpoint made with another config or weights.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from introspect.engine.load.models import model_info
from introspect.records.atomic import atomic_write_text
from introspect.train import data as D
from introspect.train import lora
from introspect.train import provenance as P
from introspect.train import replay as R
from introspect.train import selfknow_data as K
from introspect.train.config import same_record
from introspect.train.gates import adapter_off
from introspect.train.loop import (
    CHECKPOINT,
    StepStats,
    group_loss,
    loadable_name,
    run_steps,
)

TRUTH, ITEMS_TRAIN, ITEMS_HELDOUT = K.TRUTH, K.ITEMS_TRAIN, K.ITEMS_HELDOUT  # the files the run writes first
RESULTS = "results/selfknow"  # where the printed evaluation commands write
Replay = tuple[tuple[int, ...], tuple[int, ...]]  # (prompt ids, the base model's answer ids)


def replay_rows(pool: K.Pool, neutral: list[R.ReplayItem], tokenizer: Any) -> list[Replay]:
    """The rows replayed: the training items' baseline prompts with the base model's answers
    (the truth the adapter must keep) and the neutral questions in ``train.replay``'s shapes."""
    return ([(i.prompt_ids, i.answer_ids) for i in pool.train if i.answer_ids]
            + [(tuple(D.render(tokenizer, r.conversation()).ids), r.ids) for r in neutral])


def neutral_replay(ctx: Any, cfg: K.SelfKnowConfig, pool: K.Pool) -> list[R.ReplayItem]:
    """Neutral questions of train_words.yaml answered by the base model (none that holds a
    held-out item's question)."""
    if not cfg.replay_prompts or not cfg.replay_frac:
        return []
    held = [i.question for i in pool.heldout]
    qs = [q for q in D.load_train_words(cfg.train_words_file)[1] if not any(h in q for h in held)]
    return R.cached_replay(ctx.model, qs[:cfg.replay_prompts], seed=cfg.seed, tokens=cfg.replay_tokens)[0]


def _encoded(prompt: tuple[int, ...], answer: tuple[int, ...], first: bool) -> D.Encoded:
    """A row for ``group_loss``: no injection (the shared prefix may run up to the answer);
    ``first``: the answer's first token (the decision) weighs ``decision_weight``."""
    ex = D.Example("selfknow", "game" if first else "replay")
    return D.Encoded(ex, (*prompt, *answer), len(answer), len(prompt), (0, 1) if first else None)


def step_encoded(ctx: Any, cfg: K.SelfKnowConfig, pool: K.Pool, labels: list[bool], replay: list[Replay],
                 step: int, t_ids: tuple[int, ...]) -> tuple[list[D.Encoded], list[D.Encoded]]:
    """(game rows, replay rows) of step ``step`` as token ids: each game question after one
    phase 1 of other training items, answered T where its label says delegate, else with the
    base model's own answer."""
    rows = K.step_rows(step, cfg, len(pool.train), len(replay))
    hist = K.history_text([pool.train[i] for i in rows.history], rows.teammate_accuracy, cfg.seed * 100_003 + step)
    prompts = K.game_prompts(ctx, hist, [pool.train[i] for i in rows.game])
    game = [_encoded(tuple(p.ids), t_ids if labels[i] else pool.train[i].answer_ids, True)
            for i, p in zip(rows.game, prompts)]
    return game, [_encoded(*replay[j], False) for j in rows.replay]


def step_loss(ctx: Any, cfg: K.SelfKnowConfig, game: list[D.Encoded], rep: list[D.Encoded],
              stats: StepStats | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Mean per-row loss: cross-entropy on the game replies (first token weighted), KL to the
    base model's distributions on the replay rows."""
    parts, by_kind = [], {}
    for name, encs in (("game", game), ("replay", rep)):
        if encs:
            losses = group_loss(ctx.model, encs, [None] * len(encs), stats=stats, name_weight=cfg.decision_weight,
                                distill=name == "replay", trunk=cfg.layer)
            parts.append(losses)
            by_kind[name] = float(losses.detach().mean())
    total = torch.cat(parts)
    return total.sum() / total.numel(), by_kind


# ---------------------------------------------------------------- the check after training
def p_delegate(ctx: Any, prompts: list) -> list[float]:
    """P(first token T) at each game prompt, as the task reads it in free text (``decide``'s mass)."""
    from introspect.tasks.selfknowledge.common import decisions, letter_ids

    dec, _ = decisions(ctx, prompts, {"T": letter_ids(ctx.model.tokenizer, "T")["T"]}, 1)
    return [d.mass if d is not None else float("nan") for d in dec]


def _auroc(p: list[float], wrong: list[bool]) -> list[float] | None:
    from introspect.stats.auroc import auroc_ci

    a = auroc_ci(p, wrong)
    return None if a[0] != a[0] else [round(float(x), 4) for x in a]


def check(ctx: Any, cfg: K.SelfKnowConfig, pool: K.Pool, labels: list[bool]) -> dict[str, Any]:
    """A quick reading on ``check`` items per split (the first ``history_len`` of the split as
    phase 1, teammate 0.5): AUROC [lo, hi] of P(T) for the base model's errors, adapter on and
    off; on held-out items also the adapted model's own truth (its greedy baseline answers
    graded) and how often it equals the base model's. Not the evaluation: that is the task's."""
    out: dict[str, Any] = {"n_phase1": cfg.history_len}
    for split, items in (("train", list(pool.train)), ("heldout", list(pool.heldout))):
        hist, game = items[:cfg.history_len], items[cfg.history_len:cfg.history_len + cfg.check]
        if not game:
            continue
        prompts = K.game_prompts(ctx, K.history_text(hist, 0.5, cfg.seed), game)
        on = p_delegate(ctx, prompts)
        with adapter_off(ctx.model):
            off = p_delegate(ctx, prompts)
        wrong = [not i.correct for i in game]
        out[split] = {"n": len(game), "auroc_adapter": _auroc(on, wrong), "auroc_base": _auroc(off, wrong),
                      "mean_p_t_adapter": round(sum(on) / len(on), 4), "mean_p_t_base": round(sum(off) / len(off), 4)}
        if split == "train":
            pos = {i.id: k for k, i in enumerate(pool.train)}
            out[split]["auroc_adapter_trained_labels"] = _auroc(on, [labels[pos[i.id]] for i in game])
        else:
            own = K.answer_items(ctx, [i.short() for i in game])
            keep = [k for k, o in enumerate(own) if o is not None]
            out[split]["own_truth_graded"] = len(keep)
            out[split]["own_truth_equals_base"] = (round(sum(own[k].correct == game[k].correct for k in keep)
                                                         / len(keep), 4) if keep else None)
            out[split]["auroc_adapter_own_truth"] = _auroc([on[k] for k in keep], [not own[k].correct for k in keep])
    return out


# ---------------------------------------------------------------- training
def _truth_json(pool: K.Pool, labels: list[bool], cfg: K.SelfKnowConfig, truth: K.Truth | None = None,
                own: dict[str, bool | None] | None = None) -> str:
    """Every item's split, the truth's grade and reply (``base_*``: the base model's, or with
    ``truth`` the other model's) and, with ``truth``, this model's own (``own_*``)."""
    theirs = {i.id: i.response for i in (*truth.pool.train, *truth.pool.heldout)} if truth else {}
    rows = [{"id": i.id, "question": i.question, "answer": i.answer, "split": split, "base_correct": i.correct,
             "base_response": theirs.get(i.id, i.response),
             **({"own_correct": (own or {}).get(i.id), "own_response": i.response} if truth else {}),
             **({"trained_delegate": labels[k]} if split == "train" else {})}
            for split, items in (("train", pool.train), ("heldout", pool.heldout)) for k, i in enumerate(items)]
    return json.dumps({"knobs": pool.knobs, "calibration": pool.calibration, "seed": cfg.seed,
                       "shuffle": cfg.shuffle, "shuffle_seed": cfg.seed if cfg.shuffle else None,
                       "truth_from": truth.source if truth else None,
                       "n_drawn": pool.n_drawn, "n_duplicates": pool.n_duplicates, "n_ungraded": pool.n_ungraded,
                       "items": rows}, indent=1) + "\n"


def _own_figures(pool: K.Pool, own: dict[str, bool | None]) -> dict[str, Any]:
    """This model's own accuracy on the other model's training items, and how often its own
    grade equals the truth trained on (graded items only)."""
    both = [(own[i.id], i.correct) for i in (*pool.train, *pool.heldout) if own.get(i.id) is not None]
    mine = [own[i.id] for i in pool.train if own.get(i.id) is not None]
    return {"own_graded": len(both),
            "own_accuracy_train": round(sum(mine) / len(mine), 4) if mine else None,
            "own_equals_truth": round(sum(a == b for a, b in both) / len(both), 4) if both else None}


def evaluate_command(out: Path | str, cfg: K.SelfKnowConfig, n_heldout: int, results: str = RESULTS) -> str:
    """The unchanged Delegate Game on the held-out items with this adapter (greedy, as the truth was read)."""
    return (f"python -m experiments.run --task delegate --adapter {out} --greedy --option short_answer=true "
            f"--option questions={Path(out) / ITEMS_HELDOUT} --option history_len={cfg.history_len} "
            f"--option game_n={max(1, n_heldout - cfg.history_len)} --option teammate_accuracy=0.5 --out {results}")


def train(model: Any, cfg: K.SelfKnowConfig, out: Path | str, *, progress: bool = True,
          stats: StepStats | None = None, model_name: str | None = None,
          truth: K.Truth | None = None) -> dict[str, Any]:
    """Build the pool and its truth, train (or resume) the adapter into ``out``; returns a summary.

    ``truth`` (``K.read_truth`` of another model's directory, its digest ``cfg.truth_from``):
    the pool is that model's items, split and grades with this model's replies (``cross_pool``).

    Written before the first step: ``items_train.csv``, ``items_heldout.csv`` (the task's
    question file for the evaluation) and ``truth.json``. A checkpoint (adapter, optimiser, log,
    the pool with its truth, the replay answers) is written atomically every ``checkpoint_every``
    steps; rerunning resumes from it. The finished adapter goes into ``out`` as any introspect
    adapter (``load_model(name, adapter=out)``), its metadata holding the config, the split, the
    truth's ids, the shuffle seed and the check (``introspect_adapter.json`` written last).
    """
    out = Path(out)
    if cfg.truth_from != (truth.digest if truth else None):
        raise D.TrainDataError(f"config truth_from={cfg.truth_from!r} but the truth given is "
                               f"{truth.digest if truth else None!r}")
    info = model_info(model)
    ckpt_path = out / CHECKPOINT
    ckpt = None
    if ckpt_path.exists():
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        if (ckpt.get("kind") != "selfknow" or not same_record(ckpt.get("config"), cfg)
                or ckpt.get("base_fingerprint") != info.fingerprint):
            raise D.TrainDataError(f"{ckpt_path} was made with another config or model; use a new --out")
    stats = stats if stats is not None else StepStats()
    t0 = time.perf_counter()
    ctx = K.task_context(model, cfg)
    if ckpt:
        pool, own = K.Pool.from_json(ckpt["pool"]), ckpt.get("own")
    else:
        pool, own = K.cross_pool(ctx, truth) if truth else (K.build_pool(ctx, cfg), None)
    neutral = [R.ReplayItem.from_json(r) for r in ckpt["replay"]] if ckpt else neutral_replay(ctx, cfg, pool)
    labels = K.labels(pool.train, cfg.shuffle, cfg.seed)
    replay = replay_rows(pool, neutral, model.tokenizer) if cfg.replay_frac else []
    t_ids = K.delegate_ids(ctx)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / ITEMS_TRAIN, K.items_csv(pool.train))
    atomic_write_text(out / ITEMS_HELDOUT, K.items_csv(pool.heldout))
    atomic_write_text(out / TRUTH, _truth_json(pool, labels, cfg, truth, own))
    prep_s = time.perf_counter() - t0

    def loss_at(step: int) -> tuple[torch.Tensor, dict[str, float]]:
        game, rep = step_encoded(ctx, cfg, pool, labels, replay, step, t_ids)
        return step_loss(ctx, cfg, game, rep, stats)

    steps = run_steps(model, cfg, stats, ckpt, ckpt_path, loss_at=loss_at, progress=progress,
                      saved={"kind": "selfknow", "base_fingerprint": info.fingerprint, "pool": pool.to_json(),
                             "replay": [r.to_json() for r in neutral], "own": own})
    t_check = time.perf_counter()
    checked = check(ctx, cfg, pool, labels) if cfg.check else None
    truth_agrees = sum(lab == (not i.correct) for lab, i in zip(labels, pool.train)) / len(labels)
    summary = {"kind": "selfknow", "control": cfg.shuffle, **steps.summary(cfg, stats),
               "seconds_prepare": round(prep_s, 1),
               "knobs": pool.knobs, "n_train": len(pool.train), "n_heldout": len(pool.heldout),
               "base_accuracy_train": round(sum(i.correct for i in pool.train) / len(pool.train), 4),
               "base_accuracy_heldout": round(sum(i.correct for i in pool.heldout) / len(pool.heldout), 4),
               "labels_equal_truth": round(truth_agrees, 4), "n_replay": len(replay),
               "seconds_check": round(time.perf_counter() - t_check, 1), "check": checked,
               "evaluate": evaluate_command(out, cfg, len(pool.heldout))}
    if truth:  # whose truth, this model's own figures, and the truth model's adapter played the same way
        summary.update(truth_from=truth.source, **_own_figures(pool, own or {}),
                       evaluate_truth_model=evaluate_command(truth.source["dir"], cfg, len(pool.heldout)))
    meta = {"base_model": model_name or loadable_name(model), "base_name": info.name,
            "base_fingerprint": info.fingerprint, "training": cfg.to_dict(),
            "selfknow": {"control": cfg.shuffle, "shuffle_seed": cfg.seed if cfg.shuffle else None,
                         "split_seed": cfg.seed, "knobs": pool.knobs, "calibration": pool.calibration,
                         "train_ids": [i.id for i in pool.train], "heldout_ids": [i.id for i in pool.heldout],
                         "base_wrong_ids": [i.id for i in (*pool.train, *pool.heldout) if not i.correct],
                         "trained_delegate_ids": [i.id for i, lab in zip(pool.train, labels) if lab],
                         "truth_from": truth.source if truth else None,
                         **({"own_wrong_ids": [k for k, v in (own or {}).items() if v is False]} if truth else {}),
                         "files": {"truth": TRUTH, "items_train": ITEMS_TRAIN, "items_heldout": ITEMS_HELDOUT}},
            "summary": summary,
            "provenance": P.record({"pool": P.digest_json(pool.to_json()), "labels": P.digest_json(labels),
                                    "replay": P.digest_json([r.to_json() for r in neutral])})}
    summary["adapter_hash"] = lora.save_adapter(model, out, layer=cfg.layer, meta=meta)
    ckpt_path.unlink(missing_ok=True)
    return summary
