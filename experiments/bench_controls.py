"""``experiments.bench_controls`` is ``introspect.cli.bench_controls``: the name older code and tests import."""

import sys

from introspect.cli import bench_controls as _module

sys.modules[__name__] = _module
