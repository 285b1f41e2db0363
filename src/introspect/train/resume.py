"""What a resumed training must match besides its config (``config.same_record``): its word
files' hashes and its split.

Why a module of its own: a resume that silently continued from other words would train on
words later called held out, so these checks are the held-out claim's guard, kept apart from
the steps themselves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from introspect.train import split as S
from introspect.train.config import TrainConfig


def word_files(cfg: TrainConfig) -> dict[str, str]:
    """sha256 of the two word files a run reads (targets/baseline, training words), by role."""
    from introspect.data.files import concepts_dir

    paths = {"words_file": cfg.words_file or concepts_dir() / "words.yaml",
             "train_words_file": cfg.train_words_file or concepts_dir() / "train_words.yaml"}
    return {k: S.file_sha256(p) for k, p in paths.items()}


def word_files_changed(old: dict[str, str] | None, now: dict[str, str]) -> str:
    """What differs between two ``word_files`` records, as the end of a one-line error ("another
    --words-file (sha256 differs); use a new --out or the original --words-file"); "" if nothing."""
    changed = [k.replace("_", "-") for k in now if (old or {}).get(k) != now[k]]
    if not changed:
        return ""
    return (f"another --{changed[0]} (sha256 differs); use a new --out or the original "
            f"{' and '.join('--' + c for c in changed)}")


def check_resume(ckpt: dict[str, Any], where: Path, hashes: dict[str, str], split: S.Split | None = None) -> None:
    """Refuse a checkpoint made from other word files or (once the split is known) another split."""
    old = ckpt.get("word_files")
    if old is None or "split" not in ckpt:
        raise S.SplitError(f"{where} predates the split and word-file checks; use a new --out")
    if why := word_files_changed(old, hashes):
        raise S.SplitError(f"{where} was made from {why}")
    if split is not None:
        why = S.differs(ckpt["split"], split.identity())
        if why:
            raise S.SplitError(f"{where} was made with another split ({why}); use a new --out or the "
                               "original word files, prompts and model")
