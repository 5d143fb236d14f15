"""`python -m harness.commands`: the steptrace command line, as the console script runs it."""

import sys

from . import entry

sys.exit(entry())
