"""``python -m dse``: the same command line as ``dse``."""

import sys

from .cli import main

sys.exit(main())
