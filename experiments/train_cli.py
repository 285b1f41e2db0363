"""``experiments.train_cli`` is ``introspect.cli.train_cli``: the name older code and tests import."""

import sys

from introspect.cli import train_cli as _module

sys.modules[__name__] = _module
