"""``experiments.settings`` is ``introspect.cli.settings``: the name older code and tests import."""

import sys

from introspect.cli import settings as _module

sys.modules[__name__] = _module
