"""Files written whole or not at all.

Why in records: every layer above writes results, caches or summaries that a killed process must
not leave half-written, and records is the lowest layer all of them may import.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: Path, write: Callable[[str], object]) -> None:
    """Write a file whole or not at all: ``write(tmp)`` fills a temp file in the same folder (by
    its path, so any library's save function will do), which then replaces ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Write a UTF-8 text file whole or not at all."""
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
