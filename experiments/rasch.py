"""``python -m experiments.rasch``: the ``introspect rasch`` command from a clone (``introspect.cli.rasch``)."""

import sys

from introspect.cli import rasch as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command  # importers and their monkeypatches see the command's own module
