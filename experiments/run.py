"""Run introspection tasks on one model (or a sweep file) and write JSONL results + dashboard.

    python -m experiments.run --preset quick                       # A–D on the default model
    python -m experiments.run --help                               # every flag (experiments.settings)

The flags, presets and settings merge live in ``experiments.settings``, which ``experiments.sweep``
shares; this module is only the entry point.
"""

from __future__ import annotations

import sys

# Besides ``main``, the names other modules imported from here before settings.py existed;
# new code imports them from experiments.settings.
from experiments.settings import (  # noqa: F401
    USER_ERRORS,
    Parser,
    build_parser,
    main,
    quiet_hf,
    settings_from_args,
)

_Parser, _quiet_hf = Parser, quiet_hf

if __name__ == "__main__":
    sys.exit(main())
