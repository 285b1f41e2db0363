"""``introspect run``: tasks on one model (or a sweep file) → JSONL records, summary and dashboard.

The flags, presets and settings merge live in ``introspect.cli.settings``, which ``sweep`` shares;
this module is only the entry point (``python -m experiments.run`` is the same command).
"""

from __future__ import annotations

import sys

from introspect.cli.settings import (  # noqa: F401  (the names callers imported from the run command)
    USER_ERRORS,
    Parser,
    build_parser,
    main,
    quiet_hf,
    settings_from_args,
)

if __name__ == "__main__":
    sys.exit(main())
