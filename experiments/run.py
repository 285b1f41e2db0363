"""``python -m experiments.run``: the ``introspect run`` command from a clone (``introspect.cli.run``)."""

import sys

from introspect.cli import run as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command  # importers and their monkeypatches see the command's own module
