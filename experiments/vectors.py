"""``python -m experiments.vectors``: the ``introspect vectors`` command from a clone (``introspect.cli.vectors``)."""

import sys

from introspect.cli import vectors as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command  # importers and their monkeypatches see the command's own module
