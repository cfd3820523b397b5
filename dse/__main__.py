"""``python -m dse``: the same command line as ``dse``."""

import sys

try:
    # Loading dse (numpy, pandas, numba) takes seconds on a busy machine: a Ctrl-C then, before
    # main() handles it, is told like any other interrupt rather than as a traceback.
    from .cli import main

    code = main()
except KeyboardInterrupt:
    sys.stderr.write("dse: interrupted; no partial result file was left\n")
    code = 130

sys.exit(code)
