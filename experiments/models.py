"""``python -m experiments.models``: the ``introspect models`` command from a clone (``introspect.cli.models``)."""

import sys

from introspect.cli import models as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command  # importers and their monkeypatches see the command's own module
