"""Train a LoRA adapter that reports injected thoughts: the instrument's positive control.

    introspect train-aware --model smollm2-135m-instruct --layer 20 --out adapters/smollm2-L20
    introspect run --task A --adapter adapters/smollm2-L20 --layers 20 --alpha-units resid \\
        --alphas 0.5 --words-file adapters/smollm2-L20/words_heldout.yaml
    introspect train-aware --recipe two-turn --layer 24 --split-layer 20 --seed 1 --out adapters/smollm2-L24-F5

--recipe names a measured set of flags (docs/positive-control.md): two-turn trains the two-turn
framing on every other step, with a larger Gaussian "no" share and the Yes/No decision weighted 5x.

Trains LoRA on the blocks after --layer only, with the toolkit's injection hooks active in the
training forward pass and the loss on the answer tokens only. Concepts come from
the shipped train_words.yaml minus a seeded held-out share; every task-A concept is held out. The
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

    introspect train-aware --gates adapters/smollm2-L24 --adapter-scale 0.125
    introspect train-aware --gates adapters/run-s0 adapters/run-s1 adapters/run-s2

measures saved adapters' damage gates again, each one's weight change times S (default 1), on the
replayed answers and questions it was trained beside; printed, and written to
DIR/damage_gates_xS.json (or to OUT/damage_gates_xS.json with --out OUT, OUT/<DIR's name>/ for
several DIRs, leaving a shared or read-only adapter directory untouched); with several, how many
of them pass every gate. With --twins N, beside N random weight changes of its size instead of one
(the first is the one training measured), each reading's range over them.

    introspect train-aware --diff adapters/run1 adapters/run2

says where two trainings part ways: weights, base model, config, split, the digests of what the
base model computed before the first step (vectors, residual norms, replay answers, questions),
library versions, commit and CPU kernels, in that order (introspect_adapter.json's provenance).

    introspect train-aware --losses adapters/run1 --windows 4

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

from introspect.cli.common import command
from introspect.cli.train_cli import Parser, check_out, lora_layer, run
from introspect.cli.train_report import (
    control_line,
    diff,
    gates_again,
    gates_line,
    losses,
    report_check,
)
from introspect.cli.train_report import k_of_n as _k_of_n  # noqa: F401  (read by the trainers' tests)

_gates_line, _control_line = gates_line, control_line  # the names the trainers' tests read


def build_parser() -> argparse.ArgumentParser:
    from introspect.train.config import RECIPES
    from introspect.train.data import ALL_PHRASINGS
    from introspect.train.loop import TrainConfig
    from introspect.train.split import RULES
    from introspect.train.yardsticks import YARDSTICKS

    d = TrainConfig(layer=0)
    ap = Parser(prog=command("train-aware"), description=__doc__,
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
    a("--split", choices=RULES, default=d.split,
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
    a("--words-file", help="targets/baseline YAML (default: the shipped words.yaml); every target is held out")
    a("--train-words-file", help="training words YAML (default: the shipped train_words.yaml)")
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
      f"its users call the same model, beside the adapter (names: {' '.join(YARDSTICKS)}; none given: all; about 45 s "
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
        return run(args, lambda: gates_again(args.gates, args.adapter_scale, args.out, args.twins,
                                                        args.yardsticks))
    if args.diff is not None:
        return run(args, lambda: diff(*args.diff))
    if args.losses is not None:
        return run(args, lambda: losses(args.losses, args.windows, args.bands))

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
            print(gates_line(summary["damage_gates"]))
            print(control_line(summary["damage_gates"]))
        if args.check:
            report_check(model, out, layer, cfg, args.check)
        print(f"adapter: {out}\nevaluate: {command('run')} --task A --variant seed --adapter {out} "
              f"--layers {layer} --alpha-units resid --alphas {sum(cfg.strength) / 2:g} "
              f"--words-file {out}/words_heldout.yaml   # seed: a framing never trained; trained: "
              + ",".join(dict.fromkeys(cfg.phrasings)))
        return 0

    return run(args, body)


if __name__ == "__main__":
    sys.exit(main())
