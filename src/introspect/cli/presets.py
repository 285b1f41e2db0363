"""Presets: named settings files shipped inside the package (``introspect/cli/presets/*.yaml``).

Why package data: an installed toolkit runs ``introspect run --preset quick`` from any folder,
so presets cannot live beside the repository. The repository's ``experiments/presets`` is a
link to this folder (one copy of each file). A preset is given by its bare name (``quick``) or
as any YAML path; the help text lists the names found here, so it cannot fall behind.
"""

from __future__ import annotations

from pathlib import Path

PRESETS_DIR = Path(__file__).resolve().parent / "presets"


def names() -> list[str]:
    """Every shipped preset's name, sorted."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def find(name: str | Path) -> Path | None:
    """The file a ``--preset``/``--sweep`` value names: an existing path as given, else a shipped
    preset of that name (``quick`` or ``quick.yaml``); None when neither exists."""
    p = Path(name).expanduser()
    if p.is_file():
        return p
    shipped = PRESETS_DIR / (p.name if p.suffix in (".yaml", ".yml") else f"{p.name}.yaml")
    if len(p.parts) <= 1 and shipped.is_file():
        return shipped
    return None


def help_line() -> str:
    """``quick | full | ...``: the names for ``--help``."""
    return " | ".join(names())
