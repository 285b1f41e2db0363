"""Train a LoRA adapter that reports injected thoughts: the instrument's positive control.

    python -m experiments.train_aware --model smollm2-135m-instruct --layer 20 --out adapters/smollm2-L20
    python -m experiments.run --task A --adapter adapters/smollm2-L20 --layers 20 --alpha-units resid \\
        --alphas 0.5 --words-file adapters/smollm2-L20/words_heldout.yaml
    python -m experiments.train_aware --recipe two-turn --layer 24 --split-layer 20 --seed 1 --out adapters/smollm2-L24-F5

--recipe names a measured set of flags (docs/positive-control.md): two-turn trains the two-turn
framing on every other step, with a larger Gaussian "no" share and the Yes/No decision weighted 5x.

Trains LoRA on the blocks after --layer only, with the toolkit's injection hooks active in the
training forward pass and the loss on the answer tokens only. Concepts come from
concepts/train_words.yaml minus a seeded held-out share; every task-A concept is held out. The
split is by meaning (--split meaning, the default): no held-out concept's vector at --layer (or
--split-layer) has cosine >= --max-cos to a training concept's, and none is a plural, compound or listed synonym of
one; --split spelling is the old plural-only rule. It is written to OUT/words_train.yaml and
OUT/words_heldout.yaml (ready for --words-file; each held-out word's nearest training word and
cosine as a comment) and OUT/split.json. A checkpoint is written every --checkpoint-every steps:
rerun the same command to resume; a resume whose word files or split differ is refused. OUT receives a plain
peft adapter, its hash, the base model's fingerprint and the training config
(introspect_adapter.json, written last), the replayed answers (replay.json) and the damage gates
(in the summary line and introspect_adapter.json), then whether the adapter may be called a
positive control: only if every gate passed (the replay gates: KL to the base model no larger, and
top token kept no less often, than the base model re-quantized to 6 bits). Bad input is one
``error:`` line and exit 2.

    python -m experiments.train_aware --gates adapters/smollm2-L24 --adapter-scale 0.125
    python -m experiments.train_aware --gates adapters/run-s0 adapters/run-s1 adapters/run-s2

measures saved adapters' damage gates again, each one's weight change times S (default 1), on the
replayed answers and questions it was trained beside; printed, and written to
DIR/damage_gates_xS.json (or to OUT/damage_gates_xS.json with --out OUT, OUT/<DIR's name>/ for
several DIRs, leaving a shared or read-only adapter directory untouched); with several, how many
of them pass every gate. With --twins N, beside N random weight changes of its size instead of one
(the first is the one training measured), each reading's range over them.

    python -m experiments.train_aware --diff adapters/run1 adapters/run2

says where two trainings part ways: weights, base model, config, split, the digests of what the
base model computed before the first step (vectors, residual norms, replay answers, questions),
library versions, commit and CPU kernels, in that order (introspect_adapter.json's provenance).

    python -m experiments.train_aware --losses adapters/run1 --windows 4

reads a run's training log: mean loss, first-answer-token probability and the share of rows whose
first token ("Yes"/"No") has probability > 0.5, per row kind, framing and quarter of training.
Gaussian rows draw a new direction every step, so their late rows say whether "no" to a push
never seen was learned in each framing.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from experiments.train_cli import Parser, check_out, lora_layer, run


def build_parser() -> argparse.ArgumentParser:
    from introspect.train.config import RECIPES
    from introspect.train.data import ALL_PHRASINGS
    from introspect.train.loop import TrainConfig

    d = TrainConfig(layer=0)
    ap = Parser(prog="python -m experiments.train_aware", description=__doc__,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    a = ap.add_argument
    a("--model", default=None, help="registry name, hub id or local model (default smollm2-135m-instruct)")
    a("--recipe", choices=tuple(RECIPES), default="seed",
      help="a named set of the flags below, measured in docs/positive-control.md (flags given as well win): "
           "seed = the defaults; two-turn = two_turn on every other step, --mix gaussian=0.32 clean=0.06 "
           "suggested=0.05 choice_none=0.07 and --decision-weight 5")
    a("--layer", type=int, help="injection layer (default: two thirds of the depth); LoRA goes on the blocks after it")
    a("--out", type=Path, help="adapter directory (default adapters/<model>-L<layer>); with --gates, the "
      "folder that receives damage_gates_xS.json (default: the adapter's)")
    a("--steps", type=int, default=d.steps)
    a("--batch-size", type=int, default=d.batch_size)
    a("--rank", type=int, default=d.rank, help="LoRA rank")
    a("--lora-alpha", type=float, default=d.lora_alpha)
    a("--lr", type=float, default=d.lr)
    a("--seed", type=int, default=d.seed, help="seeds the concept split, the batches and the adapter's init")
    a("--strength", type=float, nargs=2, default=d.strength, metavar=("LO", "HI"),
      help="injection strengths drawn uniformly from [LO, HI], in resid units (x the residual norm)")
    a("--replay-frac", type=float, default=d.replay_frac, help="share of each batch replaying the base model's answers")
    a("--heldout-frac", type=float, default=d.heldout_frac, help="share of the training list held out too")
    a("--split", choices=("meaning", "spelling"), default=d.split,
      help="held-out concepts far from every training concept in meaning (default), or plurals only (the old rule)")
    a("--max-cos", type=float, default=d.max_cos,
      help="meaning split: held-out concepts' vector cosine to every training concept stays below this")
    a("--split-layer", type=int, default=d.split_layer,
      help="meaning split: judge nearness by the vectors at this layer (default: --layer). Cosines shrink "
           "with depth, so one --max-cos is laxer at later layers: pass the layer of a split to keep it")
    a("--name-weight", type=float, default=d.name_weight,
      help="loss weight of the concept name's tokens in answers that name the injected concept")
    a("--decision-weight", type=float, default=d.decision_weight,
      help="loss weight of a detection row's first answer token (its Yes or No) against the formula after it")
    a("--replay-steered", type=float, default=d.replay_steered,
      help="share of replay rows with a training concept injected, their target the base model under the "
           "same injection: the adapted model keeps steering where it is not asked about thoughts")
    a("--replay-weight", type=float, default=d.replay_weight, help="loss weight of a replay row against a detection row")
    a("--read-dims", type=int, default=d.read_dims,
      help="each LoRA map reads only this many input directions: those injections and detection prompts move "
           "and replay text leaves nearly empty (0: every direction; train.subspace)")
    a("--no-gates", action="store_true",
      help="skip the damage gates after training (replay KL and top token against the base model re-quantized "
           "to 6 bits, detection phrases, right answers under injection)")
    a("--no-replay-cache", action="store_true",
      help="generate the base model's replay answers now instead of reading them from the replay cache "
           "(INTROSPECT_CACHE_REPLAY, default ~/.cache/introspect/replay; the answers are the same)")
    a("--phrasings", nargs="+", default=list(d.phrasings), choices=ALL_PHRASINGS,
      help="task A framings to train on, one a step in turn; list one more than once for more of its steps")
    a("--mix", nargs="+", default=[], metavar="KIND=SHARE",
      help="change the shares of training row kinds (the rest keep theirs; shares are relative weights). "
           "Default: " + " ".join(f"{k}={v:g}" for k, v in d.mix))
    a("--checkpoint-every", type=int, default=d.checkpoint_every)
    a("--words-file", help="targets/baseline YAML (default concepts/words.yaml); every target is held out")
    a("--train-words-file", help="training words YAML (default concepts/train_words.yaml)")
    a("--check", type=int, default=6, metavar="N",
      help="after training, greedy check on N training and N held-out concepts (0 = skip)")
    a("--gates", type=Path, nargs="+", metavar="DIR", help="measure the damage gates of the saved adapters "
      "DIR ... again (nothing is trained), and how many pass every gate; with --adapter-scale S, of S times "
      "each one's weight change")
    a("--diff", type=Path, nargs=2, metavar=("DIR1", "DIR2"), help="where two saved adapters' trainings part "
      "ways (weights, config, split, input digests, library versions, CPU), causes first; nothing is trained")
    a("--losses", type=Path, metavar="DIR", help="the training log of DIR by row kind, framing and stretch of "
      "training (--windows); nothing is trained")
    a("--windows", type=int, default=4, metavar="N", help="with --losses: training split into N runs of steps")
    a("--bands", type=float, nargs="+", metavar="EDGE", help="with --losses: group by injection strength too, "
      "between these edges in resid units (e.g. --bands 0.15 0.5 0.9 1.25)")
    a("--adapter-scale", type=float, default=1.0, metavar="S", help="with --gates: the adapter's weight change times S > 0")
    a("--twins", type=int, default=1, metavar="N", help="with --gates: measure N random weight changes of the "
      "adapter's size beside it, not one (about 45 s more each on the default model, 2 CPU cores)")
    a("--yardsticks", nargs="*", metavar="NAME", help="with --gates: measure the base model itself changed as "
      "its users call the same model, beside the adapter (names: bf16 q8_0 q6; none given: all; about 45 s "
      "each on the default model). q6 is always measured: it is the replay gates' bound")
    a("--no-progress", action="store_true")
    a("--debug", action="store_true", help="show tracebacks")
    return ap


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, with --recipe's values as the defaults of the flags it sets (so a flag
    given as well wins; --mix changes the recipe's mix, see ``parse_mix``)."""
    from introspect.train.config import RECIPES

    ap = build_parser()
    chosen = RECIPES[ap.parse_known_args(argv)[0].recipe]
    ap.set_defaults(**{k: list(v) if isinstance(v, tuple) else v for k, v in chosen.items() if k != "mix"})
    return ap.parse_args(argv)


def parse_mix(items: list[str], base: tuple[tuple[str, float], ...] | None = None) -> tuple[tuple[str, float], ...]:
    """--mix KIND=SHARE ... over ``base`` (default: the default mix): named kinds get the new share, in place."""
    from introspect.train.data import DEFAULT_MIX, KINDS, TrainDataError

    new: dict[str, float] = {}
    for item in items:
        kind, eq, share = item.partition("=")
        try:
            value = float(share) if eq else math.nan
        except ValueError:
            value = math.nan
        if kind not in KINDS or not math.isfinite(value) or value < 0:
            raise TrainDataError(f"--mix {item!r}: want KIND=SHARE, KIND one of {', '.join(KINDS)} and SHARE "
                                 "a number >= 0 (e.g. --mix gaussian=0.3 clean=0.06)")
        new[kind] = value
    mix = dict(base or DEFAULT_MIX) | new
    return tuple(mix.items())


def _config(args: argparse.Namespace, layer: int):
    from introspect.train.config import RECIPES
    from introspect.train.loop import TrainConfig

    return TrainConfig(layer=layer, steps=args.steps, batch_size=args.batch_size, rank=args.rank,
                       lora_alpha=args.lora_alpha, lr=args.lr, seed=args.seed, strength=tuple(args.strength),
                       replay_frac=args.replay_frac, heldout_frac=args.heldout_frac,
                       phrasings=tuple(args.phrasings), checkpoint_every=args.checkpoint_every,
                       words_file=args.words_file, train_words_file=args.train_words_file,
                       split=args.split, max_cos=args.max_cos, split_layer=args.split_layer, name_weight=args.name_weight,
                       decision_weight=args.decision_weight,
                       replay_steered=args.replay_steered, replay_weight=args.replay_weight,
                       read_dims=args.read_dims, gates=not args.no_gates, mix=parse_mix(args.mix, RECIPES[args.recipe].get("mix")))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    if args.gates is not None:
        return run(args, lambda: _gates_again(args.gates, args.adapter_scale, args.out, args.twins,
                                                        args.yardsticks))
    if args.diff is not None:
        return run(args, lambda: _diff(*args.diff))
    if args.losses is not None:
        return run(args, lambda: _losses(args.losses, args.windows, args.bands))

    def body() -> int:
        if args.adapter_scale != 1:
            from introspect.train.data import TrainDataError

            raise TrainDataError("--adapter-scale applies to --gates DIR (training always trains the whole adapter)")
        if args.twins != 1:
            from introspect.train.data import TrainDataError

            raise TrainDataError("--twins applies to --gates DIR (training measures its gates beside one random twin)")
        if args.yardsticks is not None:
            from introspect.train.data import TrainDataError

            raise TrainDataError("--yardsticks applies to --gates DIR (measure a trained adapter's gates again with them)")
        _config(args, 0)  # numbers checked before the (slow) model load
        from introspect.engine.load.models import DEFAULT_MODEL, load_model
        from introspect.tasks.runner import model_slug
        from introspect.train.resume import word_files, word_files_changed

        name = args.model or DEFAULT_MODEL
        model = load_model(name)
        layer = lora_layer(model, args.layer)
        cfg = _config(args, layer)
        out = args.out or Path("adapters") / f"{model_slug(name)}-L{layer}"
        if check_out(out, cfg, marker="words_train.yaml", what="an adapter",
                     also=lambda meta: word_files_changed(meta.get("word_files"), word_files(cfg))):
            print(f"{out} already holds this adapter (same config); nothing to do")
            return 0
        from introspect.train.loop import train

        summary = train(model, cfg, out, progress=not args.no_progress, model_name=name,
                        replay_cache=not args.no_replay_cache)
        print(json.dumps(summary))
        if summary.get("damage_gates"):
            print(_gates_line(summary["damage_gates"]))
            print(_control_line(summary["damage_gates"]))
        if args.check:
            _report_check(model, out, layer, cfg, args.check)
        print(f"adapter: {out}\nevaluate: python -m experiments.run --task A --variant seed --adapter {out} "
              f"--layers {layer} --alpha-units resid --alphas {sum(cfg.strength) / 2:g} "
              f"--words-file {out}/words_heldout.yaml   # seed: a framing never trained; trained: "
              + ",".join(dict.fromkeys(cfg.phrasings)))
        return 0

    return run(args, body)


def _gates_again(adapters: list[Path], scale: float, folder: Path | None = None, twins: int = 1,
                 yardsticks: list[str] | None = None) -> int:
    """``--gates DIR [DIR ...]``: each saved adapter's damage gates at ``scale`` (beside ``twins``
    random twins and the ``yardsticks``, all of them for an empty list), printed with whether it may
    be called a positive control and written atomically to ``folder`` (default DIR; for several
    DIRs, FOLDER/<DIR's name>/); for several, how many pass every gate. Every DIR is checked before
    the first (slow) measurement."""
    from introspect.engine.load.adapters import check_scale, read_adapter
    from introspect.records.atomic import atomic_write_text
    from introspect.train.data import TrainDataError
    from introspect.train.gates import positive_control
    from introspect.train.remeasure import saved_gates
    from introspect.train.yardsticks import YARDSTICKS, check_names

    if folder is not None and folder.exists() and not folder.is_dir():
        raise TrainDataError(f"--out {folder} is a file: with --gates it names the folder that receives "
                             "damage_gates_xS.json")
    if twins < 1:
        raise TrainDataError(f"--twins {twins}: want an integer >= 1 (e.g. --twins 5)")
    check_scale(scale)
    names = check_names(() if yardsticks is None else (yardsticks or YARDSTICKS))
    dirs = [Path(a).expanduser() for a in adapters]
    if len({d.resolve() for d in dirs}) < len(dirs):
        raise TrainDataError("--gates names an adapter twice: each DIR once (k of n counts trainings)")
    if folder is not None and len(dirs) > 1 and len({d.name for d in dirs}) < len(dirs):
        raise TrainDataError(f"--gates DIRs share a folder name, and --out {folder} receives one subfolder per "
                             "DIR's name: rename one or measure them apart")
    for d in dirs:
        read_adapter(d)  # a missing or tampered adapter stops here, before any measurement
    dest = {d: d if folder is None else folder if len(dirs) == 1 else folder / d.name for d in dirs}
    failing = []
    for d in dirs:
        g = saved_gates(d, scale, twins=twins, yardsticks=names)
        out = dest[d] / f"damage_gates_x{g['scale']:g}.json"
        atomic_write_text(out, json.dumps(g, indent=1, sort_keys=True) + "\n")
        print(f"{d}: adapter {g['adapter_hash']} at scale {g['scale']:g}: " + _gates_line(g))
        print(_control_line(g))
        print(f"wrote {out}")
        if not positive_control(g)[0]:
            failing.append(str(d))
    if len(dirs) > 1:
        print(_k_of_n(len(dirs) - len(failing), len(dirs), failing))
    return 0


def _k_of_n(k: int, n: int, failing: list[str]) -> str:
    """How many trainings pass every gate, and which do not."""
    return f"{k} of {n} trainings pass every gate" + (f" (not: {', '.join(failing)})" if failing else "")


def _diff(first: Path, second: Path) -> int:
    """``--diff DIR1 DIR2``: one line per difference in what produced the two adapters, causes first."""
    from introspect.engine.load.adapters import read_adapter
    from introspect.train.provenance import differences

    a, b = read_adapter(first)[0], read_adapter(second)[0]  # hashes checked: a stale directory is refused
    lines = differences(a, b)
    print(f"{first} and {second}: " + ("the same weights" if not lines else f"{len(lines) - 1} other difference(s)"))
    for line in lines:
        print("  " + line)
    return 0


def _losses(adapter: Path, windows: int, bands: list[float] | None = None) -> int:
    """``--losses DIR``: the training log by row kind, framing, stretch of training (and strength)."""
    from introspect.train import losses as LS
    from introspect.train.data import TrainDataError

    if windows < 1:
        raise TrainDataError(f"--windows {windows}: want an integer >= 1 (e.g. --windows 4)")
    if bands is not None and (len(bands) < 2 or any(b >= c for b, c in zip(bands, bands[1:]))):
        raise TrainDataError(f"--bands {' '.join(f'{b:g}' for b in bands)}: want two or more increasing "
                             "edges (e.g. --bands 0.15 0.5 0.9 1.25)")
    table = LS.by_kind(LS.read_log(adapter), windows=windows, strength_bands=bands)
    print(f"{adapter}: detection rows by kind, framing and steps (loss: mean answer cross-entropy; p_first: "
          "mean probability of the first answer token; right: share with p_first > 0.5)")
    print(LS.render(table))
    return 0


def _g2(v: float | None) -> str:
    """A KL in the gates line: two significant figures, or n/a."""
    return "n/a" if v is None else format(v, ".2g")


def _p2(v: float | None) -> str:
    """A share in the gates line: two decimals, or n/a."""
    return "n/a" if v is None else f"{v:.2f}"


def _twins_part(g: dict) -> str:
    """With several random twins: each reading's range over them and where the adapter's falls."""
    each = g.get("replay_random_twins") or []
    if len(each) < 2 or g.get("replay_top1") is None:
        return ""
    parts = []
    for key, mine, what, better in (("identical", "replay_identical", "identical", "at or above"),
                                    ("top1", "replay_top1", "top token kept", "at or above"),
                                    ("kl", "replay_kl", "KL", "below")):
        vals = [t[key] for t in each]
        n = sum(g[mine] >= v if better == "at or above" else g[mine] < v for v in vals)
        fmt = _g2 if key == "kl" else (lambda v: f"{v:.2f}")
        parts.append(f"{what} {fmt(min(vals))}–{fmt(max(vals))} (the adapter's {better} {n} of them)")
    return f"; over {len(each)} random changes: " + ", ".join(parts)


def _yardsticks_part(g: dict) -> str:
    """The base model changed as its users call the same model: identity, KL and top token of each."""
    each = g.get("replay_yardsticks") or []
    return "".join(f"; {y['what']}: identical {_p2(y['identical'])}, KL {_g2(y['kl'])}, top token kept {_p2(y['top1'])}"
                   for y in each)


def _figure(k: str, v: float | None) -> str:
    """A gate's figure in the gates line: KL to three significant figures, a share to two decimals
    (the top token to three, as its bound), or n/a."""
    return "n/a" if v is None else format(v, ".3g") if k == "replay_kl" else (
        f"{v:.3f}" if k == "replay_top1" else f"{v:.2f}")


def _gates_line(g: dict) -> str:
    """Each gate's figure, bound and pass/fail, then the readings beside them (the figures are in
    the summary's JSON too)."""
    f = _p2
    marks = {True: "pass", False: "FAIL", None: "not measured"}
    return ("damage gates: " + "; ".join(f"{k} {_figure(k, g.get(k))} ({g['gates'][k]}: {marks[g['passed'][k]]})"
                                         for k in g["passed"])
            + f"; readings over {g['replay_n']} held-out replay prompts: greedy answers identical to the base "
            f"model's {f(g.get('replay_identical'))} (the base model decoded again {f(g['replay_identical_base'])}, "
            f"a random weight change of the adapter's size {f(g.get('replay_identical_random'))})"
            + (f"; the random change teacher-forced: KL {_g2(g.get('replay_kl_random'))}, top token the base "
               f"model's {f(g.get('replay_top1_random'))}" if g.get("replay_top1") is not None else "")
            + _twins_part(g) + _yardsticks_part(g)
            + f"; detection phrases of the base model {f(g.get('detection_phrases_base'))}; right answers of the "
            f"base model under the same injection {f(g['content_answers_base'])}, without one "
            f"{f(g.get('content_answers_clean_base'))}"
            + "".join(f"\n  caught by the detection-phrase gate: {t!r}" for t in g.get("detection_phrases_examples", ())))


def _control_line(g: dict) -> str:
    """Whether the adapter may be called a positive control (``all_passed``: every gate passed),
    and which gates failed or were not measured."""
    from introspect.train.gates import positive_control

    ok, failed, missing = positive_control(g)
    why = [f"failed: {', '.join(failed)}"] * bool(failed) + [f"not measured: {', '.join(missing)}"] * bool(missing)
    return "positive control: " + ("yes (every damage gate passed)" if ok else f"no ({'; '.join(why) or 'no gates'})")


def _report_check(model, out: Path, layer: int, cfg, n: int) -> None:
    """Greedy yes-rates with and without injection, on training and held-out concepts, in the
    paper framing and, when it was trained, the two-turn one."""
    import yaml

    from introspect.train.check import detection_check
    from introspect.train.data import TWO_TURN

    mid = sum(cfg.strength) / 2
    for phrasing in ("paper", *((TWO_TURN,) if TWO_TURN in cfg.phrasings else ())):
        for split in ("train", "heldout"):
            words = yaml.safe_load((out / f"words_{split}.yaml").read_text())["targets"][:n]
            r = detection_check(model, words, layer, mid, phrasing=phrasing)
            print(f"check {split} (strength {mid:g} resid, greedy, {phrasing} prompt): yes injected "
                  f"{r['yes_injected']:.2f}, yes clean {r['yes_clean']:.2f}, yes random direction "
                  f"{r['yes_random']:.2f}, names the concept {r['identified']:.2f}")
    print(f"per-kind training losses: python -m experiments.train_aware --losses {out}")


if __name__ == "__main__":
    sys.exit(main())
