"""``python -m introspect.cli``: the ``introspect`` command without its console script."""

import sys

from introspect.cli.main import main

sys.exit(main())
