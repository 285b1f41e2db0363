"""``python -m experiments.sweep``: the ``introspect sweep`` command from a clone (``introspect.cli.sweep``)."""

import sys

from introspect.cli import sweep as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command  # importers and their monkeypatches see the command's own module
