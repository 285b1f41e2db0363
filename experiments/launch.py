"""``experiments.launch`` is ``introspect.cli.launch``: the name older code and tests import."""

import sys

from introspect.cli import launch as _module

sys.modules[__name__] = _module
