"""``python -m introspect.records.schema FILE...``: check records files against the record schema."""

import sys

from introspect.records.schema import main

sys.exit(main())
