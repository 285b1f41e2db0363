"""``python -m experiments.bench``: the ``introspect bench`` command from a clone (``introspect.cli.bench``)."""

import sys

from introspect.cli import bench as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command  # importers and their monkeypatches see the command's own module
