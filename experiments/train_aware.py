"""``python -m experiments.train_aware``: the ``introspect train-aware`` command from a clone (``introspect.cli.train_aware``)."""

import sys

from introspect.cli import train_aware as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command  # importers and their monkeypatches see the command's own module
