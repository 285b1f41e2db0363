"""What every command shares: one-line errors, checked counts, quiet loaders, how commands are named.

Why one module: each command promises the same surface (bad input is one ``error:`` line and
exit 2, nothing written), so the parser class, the argument types and the error handler live
once. ``command(name)`` spells a follow-up command the way the user started this one
(``introspect run`` or ``python -m experiments.run``), so printed hints work wherever they ran.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn

USER_ERRORS = (ValueError, OSError)  # ConfigError, ModelError, DataError, TrainDataError ...

# Set by the ``introspect`` dispatcher; the ``experiments`` wrappers leave it as it is.
STYLE = {"prefix": "python -m experiments."}


def command(name: str) -> str:
    """``run`` → ``introspect run`` when started as ``introspect``, else ``python -m experiments.run``."""
    if STYLE["prefix"] == "introspect ":
        return "introspect " + name.replace("_", "-")
    return STYLE["prefix"] + name.replace("-", "_")


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``error: MESSAGE`` and exit 2 (no usage block)."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (a count of rows, concepts, steps ...)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def batch_size(text: str) -> int:
    """``--batch-size``: a positive integer, or ``auto`` (held as 0: as many rows as fit)."""
    if text.strip().lower() == "auto":
        return 0
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer or auto, got {text!r}")
    return v


def quiet_hf() -> None:
    """No HF loading bars in logs (SLURM files, tests): stderr stays for errors and warnings."""
    import os

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:
        pass


def is_user_error(e: BaseException) -> bool:
    """A mistake in what the user gave (one line, exit 2), not a bug (a traceback)."""
    return isinstance(e, USER_ERRORS) or any(c.__name__ == "DataError" for c in type(e).__mro__)


def one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def guarded(body: Callable[[], int], *, debug: bool = False, resume_hint: str = "rerun the same command to resume") -> int:
    """``body()`` with the commands' error handling: a user error is one line and exit 2, an
    interrupt says how to resume and exits 130; ``debug`` shows the traceback instead."""
    try:
        return body()
    except KeyboardInterrupt:
        print(f"interrupted; {resume_hint}", file=sys.stderr)
        return 130
    except Exception as e:
        if debug or not is_user_error(e):
            raise
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2


def fail(message: str) -> int:
    """Print one ``error:`` line; the exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    return 2



def load(name: str, *, remove_direction: str | None = None, refusal_requests: str | None = None, **kw: Any) -> Any:
    """``load_model(name, **kw)``, then the direction ``remove_direction`` names projected out of
    every residual write (``engine.directions.apply``): the model variants a command line offers."""
    from introspect.engine.load.models import load_model

    model = load_model(name, **kw)
    if remove_direction:
        from introspect.engine.directions import apply

        model = apply(model, remove_direction, requests=refusal_requests)
    return model


def save_weights(name: str | None, remove_direction: str, out_dir: str, *, refusal_requests: str | None = None,
                 **kw: Any) -> str:
    """``load_model(name, **kw)`` (default: the adapter's base model, else the default model), the
    direction ``remove_direction`` names orthogonalized out of its weights, and the model saved as
    a folder at ``out_dir`` (``engine.load.orthogonalize``, checked before the model loads); returns
    the line to print."""
    from introspect.engine.directions import resolve
    from introspect.engine.load.models import DEFAULT_MODEL, load_model
    from introspect.engine.load.orthogonalize import check_target, save_orthogonalized

    out = check_target(out_dir)
    if name is None and kw.get("adapter"):  # an adapter names the base model it was trained on
        from introspect.train.lora import read_adapter

        name = read_adapter(kw["adapter"])[0]["base_model"]
    model = load_model(name or DEFAULT_MODEL, **kw)
    save_orthogonalized(model, resolve(model, remove_direction, requests=refusal_requests), out)
    done, check = model.introspect_orthogonalized, model.introspect_orthogonalized["check"]
    return (f"wrote {out}: {done['base_model']} with direction {model.introspect_ablation['direction']} (sha256 "
            f"{model.introspect_ablation['sha256'][:12]}) orthogonalized out of its weights, logits within "
            f"{check['max_abs_logit_diff']:.2g} of the hooks' (scale {check['logit_scale']:.3g}); run on it with "
            f"{command('run')} --model {out}")
