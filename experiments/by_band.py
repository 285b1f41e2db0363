"""``python -m experiments.by_band``: the ``introspect by-band`` command from a clone (``introspect.cli.by_band``)."""

import sys

from introspect.cli import by_band as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command  # importers and their monkeypatches see the command's own module
