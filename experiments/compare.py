"""``python -m experiments.compare``: the ``introspect compare`` command from a clone (``introspect.cli.compare``)."""

import sys

from introspect.cli import compare as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command  # importers and their monkeypatches see the command's own module
