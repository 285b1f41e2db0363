"""``python -m experiments.dashboard``: the ``introspect dashboard`` command from a clone (``introspect.cli.dashboard``)."""

import sys

from introspect.cli import dashboard as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command  # importers and their monkeypatches see the command's own module
