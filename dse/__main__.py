"""``python -m dse`` and the ``dse`` console script: the command line."""

import sys


def run() -> int:
    """Load the command line and run it. Loading dse (numpy, pandas, numba) takes seconds on a
    busy machine: a Ctrl-C then, before ``main()`` handles it, is told like any other
    interrupt rather than as a traceback (the console script enters here too, not at
    ``dse.cli:main``, so that it is covered)."""
    try:
        from .cli import main

        return main()
    except KeyboardInterrupt:
        sys.stderr.write("dse: interrupted; no partial result file was left\n")
        return 130


if __name__ == "__main__":
    sys.exit(run())
