"""Train the self-knowledge LoRA (the Delegate Game's positive control) or its shuffled control.

    introspect train-selfknow --model smollm2-135m-instruct --out adapters/smollm2-sk
    introspect train-selfknow --model smollm2-135m-instruct --out adapters/smollm2-sk-shuffled --shuffle
    introspect train-selfknow --model qwen2.5-coder-0.5b-instruct --truth-from adapters/smollm2-sk

Draws free-text arithmetic items (calibrated so the base model is right on about half), reads
the base model's greedy answer to each (the truth), holds out --heldout-frac of them (seeded,
stratified by the truth), and trains LoRA on the blocks after --layer on Delegate Game prompts
(the task's own phase 1 and game question) to reply T on the training items the base model gets
wrong and its own answer on the others; --shuffle permutes those labels across the training items
(same seed: same items, same split, same rows). Replay rows keep the base model's answers. OUT
receives items_train.csv, items_heldout.csv (the question file for the evaluation), truth.json,
train_log.jsonl and the adapter (introspect_adapter.json written last). A checkpoint is written
every --checkpoint-every steps: rerun the same command to resume. The last lines printed are the
summary (JSON) and the command that plays the unchanged Delegate Game on the held-out items with
the adapter. Bad input is one ``error:`` line and exit 2.

--truth-from DIR (cross-prediction, Binder et al. 2024): DIR is another model X's own finished
train-selfknow output (not a shuffled control, not itself trained on another's truth). Its items,
split and truth (truth.json, checked against DIR's adapter metadata and question files) are
reused exactly; --model answers every item itself (its own prompts and tokenizer) and is trained
to reply T on the training items X gets wrong and its own answer on the others, replay keeping
its own answers; --shuffle permutes X's labels as X's own control would. --seed, --items,
--heldout-frac, --history-len, --no-calibrate, --digits, --terms and --ops must be DIR's. The
metadata and truth.json name X (DIR, sha256 of its truth.json, X's model and fingerprint); the
printed commands play the game with this adapter and with X's on the same file, whose records
``compare`` lines up in cross_prediction.csv (behaviour X's adapter, predictor this one).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from introspect.cli.common import command
from introspect.cli.train_cli import Parser, check_out, lora_layer, run


def knob(text: str) -> int | tuple[int, int]:
    """An arithmetic knob: ``N`` or ``LO-HI`` (a range drawn per item, as ``pool.Knobs`` takes)."""
    try:
        lo, _, hi = text.partition("-")
        return (int(lo), int(hi)) if hi else int(lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number (2) or a range LO-HI (1-2)") from None


def build_parser() -> argparse.ArgumentParser:
    from introspect.train.selfknow_data import SelfKnowConfig

    d = SelfKnowConfig(layer=0)
    ap = Parser(prog=command("train-selfknow"), description=__doc__,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    a = ap.add_argument
    a("--model", default=None, help="registry name, hub id or local model (default smollm2-135m-instruct)")
    a("--out", type=Path, help="adapter directory (default adapters/<model>-sk[-shuffled])")
    a("--shuffle", action="store_true", help="the control: wrong/right labels permuted across the training items")
    a("--truth-from", metavar="DIR", help="train on another model's truth: DIR is its own train-selfknow --out "
      "(its items, split and errors reused; the item settings must be its own)")
    a("--layer", type=int, help="LoRA on the blocks after this one (default: two thirds of the depth, as train_aware)")
    a("--steps", type=int, default=d.steps)
    a("--batch-size", type=int, default=d.batch_size, help="rows per step (game rows sharing one phase 1, plus replay)")
    a("--replay-frac", type=float, default=d.replay_frac, help="share of a step's rows replaying the base model")
    a("--rank", type=int, default=d.rank, help="LoRA rank")
    a("--lora-alpha", type=float, default=d.lora_alpha)
    a("--lr", type=float, default=d.lr)
    a("--seed", type=int, default=d.seed, help="seeds the items, the split, the rows, the init and the shuffle")
    a("--items", type=int, default=d.n_items, help="arithmetic items drawn (repeats and ungraded ones dropped)")
    a("--heldout-frac", type=float, default=d.heldout_frac, help="share of the graded items held out")
    a("--history-len", type=int, default=d.history_len, help="phase-1 questions per game prompt (evaluate with the same)")
    a("--no-calibrate", action="store_true", help="keep --digits/--terms/--ops instead of walking to accuracy ~0.5")
    a("--digits", type=knob, default=d.digits, metavar="N|LO-HI", help="digits per number (LO-HI: drawn per item)")
    a("--terms", type=knob, default=d.terms, metavar="N|LO-HI", help="numbers per item (LO-HI: drawn per item)")
    a("--ops", default=d.ops)
    a("--replay-prompts", type=int, default=d.replay_prompts, help="neutral questions replayed (0 = none)")
    a("--decision-weight", type=float, default=d.decision_weight, help="loss weight of a game reply's first token")
    a("--check", type=int, default=d.check, metavar="N", help="after training, P(T) AUROC on N items per split (0 = skip)")
    a("--checkpoint-every", type=int, default=d.checkpoint_every)
    a("--train-words-file", help="where the neutral replay questions come from (default: the shipped train_words.yaml)")
    a("--no-progress", action="store_true")
    a("--debug", action="store_true", help="show tracebacks")
    return ap


def _config(args: argparse.Namespace, layer: int, truth_from: str | None = None):
    from introspect.train.selfknow_data import SelfKnowConfig

    return SelfKnowConfig(layer=layer, steps=args.steps, batch_size=args.batch_size, replay_frac=args.replay_frac,
                          rank=args.rank, lora_alpha=args.lora_alpha, lr=args.lr, seed=args.seed,
                          shuffle=args.shuffle, n_items=args.items, heldout_frac=args.heldout_frac,
                          history_len=args.history_len, calibrate=not args.no_calibrate, digits=args.digits,
                          terms=args.terms, ops=args.ops, replay_prompts=args.replay_prompts,
                          decision_weight=args.decision_weight, check=args.check,
                          checkpoint_every=args.checkpoint_every, train_words_file=args.train_words_file,
                          truth_from=truth_from)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        from introspect.tasks.runner import model_slug
        from introspect.train.data import TrainDataError
        from introspect.train.selfknow_data import TRUTH, read_truth

        cfg0 = _config(args, 0)  # numbers (and --truth-from) checked before the (slow) model load
        truth = read_truth(args.truth_from, cfg0) if args.truth_from is not None else None
        from introspect.engine.load.models import DEFAULT_MODEL, load_model

        name = args.model or DEFAULT_MODEL
        whose = f"-from-{model_slug(str(truth.source['base_model']))}" if truth else ""
        out = args.out or Path("adapters") / f"{model_slug(name)}-sk{whose}{'-shuffled' if args.shuffle else ''}"
        if out.exists() and not out.is_dir():
            raise TrainDataError(f"--out {out} is a file, not a directory")
        if truth and out.resolve() == Path(truth.source["dir"]):
            raise TrainDataError(f"--out {out} is the --truth-from directory; use a new --out")
        model = load_model(name)
        cfg = _config(args, lora_layer(model, args.layer), truth.digest if truth else None)
        if check_out(out, cfg, marker=TRUTH, what="a self-knowledge adapter"):
            print(f"{out} already holds this adapter (same config); nothing to do")
            return 0
        from introspect.train.selfknow import RESULTS, evaluate_command, train

        summary = train(model, cfg, out, progress=not args.no_progress, model_name=name, truth=truth)
        print(json.dumps(summary))

        def shown(c: str) -> str:
            return c.replace("python -m experiments.run", command("run"), 1)  # as the user started

        ev = shown(summary["evaluate"])
        print(f"adapter: {out}\nevaluate: {ev}\n"
              f"base model on the same items: {ev.replace(f'--adapter {out}', f'--model {name}')}")
        if truth:
            x = shown(evaluate_command(args.truth_from, cfg, summary["n_heldout"]))
            print(f"truth from: {truth.source['base_model']} ({args.truth_from}, {TRUTH} sha256 "
                  f"{truth.source['truth_sha256'][:16]})\n"
                  f"its own adapter on the same items: {x}\n"
                  f"then: {command('compare')} {RESULTS} (cross_prediction.csv, metric self_minus_predictor: "
                  "behaviour = its adapter, predictor = this adapter)")
        return 0

    return run(args, body)


if __name__ == "__main__":
    sys.exit(main())
