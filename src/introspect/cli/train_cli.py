"""What the two adapter trainers' command lines share (``train_aware``, ``train_selfknow``).

Why a module: both check their numbers before the slow model load, pick the LoRA layer the same
way, refuse an --out that holds something else, and turn a user error into one ``error:`` line
and exit 2 (an interrupt into "rerun to resume" and exit 130). They differ in their flags, their
config and what they print at the end.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from introspect.cli.common import USER_ERRORS, Parser, quiet_hf  # noqa: F401  (Parser: the trainers' parser)


def lora_layer(model: Any, layer: int | None) -> int:
    """--layer, else two thirds of the depth; LoRA needs at least one block after it."""
    from introspect.train.data import TrainDataError

    n = int(model.cfg.n_layers)
    layer = layer if layer is not None else min(round(2 * n / 3), n - 2)
    if not 0 <= layer < n - 1:
        raise TrainDataError(f"--layer {layer} out of range; this model has layers 0..{n - 1} "
                             "and LoRA needs at least one block after it")
    return layer


def check_out(out: Path, cfg: Any, *, marker: str, what: str,
              also: Callable[[dict[str, Any]], str] | None = None) -> bool:
    """True if OUT already holds this exact adapter; raises on a directory we must not touch.

    ``marker`` is the file a started run of this trainer writes before its first step (a
    directory without it, its checkpoint or an adapter is not ours); ``also(meta)`` returns why a
    finished adapter with the same config still differs ("" when it does not).
    """
    from introspect.train.config import same_record
    from introspect.train.data import TrainDataError
    from introspect.train.loop import CHECKPOINT
    from introspect.train.lora import META_FILE

    if out.exists() and not out.is_dir():
        raise TrainDataError(f"--out {out} is a file, not a directory")
    if not out.is_dir() or not any(out.iterdir()):
        return False
    if (out / META_FILE).is_file():
        meta = json.loads((out / META_FILE).read_text())
        if not same_record(meta.get("training"), cfg):
            raise TrainDataError(f"{out} holds an adapter trained with another config; use a new --out")
        if also is not None and (why := also(meta)):
            raise TrainDataError(f"{out} holds an adapter trained from {why}")
        return True
    if not (out / CHECKPOINT).is_file() and not (out / marker).is_file():
        raise TrainDataError(f"--out {out} exists and is not {what} directory; use a new --out")
    return False


def run(args: Any, body: Callable[[], int]) -> int:
    """``body()`` with the trainers' error handling: a user error is one line and exit 2."""
    if args.no_progress or not sys.stderr.isatty():
        quiet_hf()
    try:
        return body()
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to resume from the last checkpoint", file=sys.stderr)
        return 130
    except Exception as e:
        if args.debug or not isinstance(e, USER_ERRORS):
            raise
        print(f"error: {' '.join(str(e).split()) or type(e).__name__}", file=sys.stderr)
        return 2
