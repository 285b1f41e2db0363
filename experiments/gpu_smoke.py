"""``python -m experiments.gpu_smoke``: the ``introspect gpu-smoke`` command from a clone (``introspect.cli.gpu_smoke``)."""

import sys

from introspect.cli import gpu_smoke as _command

if __name__ == "__main__":
    sys.exit(_command.main())
sys.modules[__name__] = _command  # importers and their monkeypatches see the command's own module
