"""``experiments.executors`` is ``introspect.cli.executors``: the name older code and tests import."""

import sys

from introspect.cli import executors as _module

sys.modules[__name__] = _module
