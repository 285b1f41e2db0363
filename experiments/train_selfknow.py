"""``python -m experiments.train_selfknow``: the ``introspect train-selfknow`` command from a clone (``introspect.cli.train_selfknow``)."""

import sys

from introspect.cli import train_selfknow as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command  # importers and their monkeypatches see the command's own module
