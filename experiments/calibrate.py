"""``python -m experiments.calibrate``: the ``introspect calibrate`` command from a clone (``introspect.cli.calibrate``)."""

import sys

from introspect.cli import calibrate as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command  # importers and their monkeypatches see the command's own module
