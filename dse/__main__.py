"""``python -m dse`` and the ``dse`` console script: the command line."""

import sys

#: The exit code of an interrupted run (128 + SIGINT), told in one line.
INTERRUPTED = 130


def run() -> int:
    """Load the command line and run it. Loading dse (numpy, pandas, numba) takes seconds on a
    busy machine: a Ctrl-C then, before ``main()`` handles it, is told like any other
    interrupt rather than as a traceback (the console script enters here too, not at
    ``dse.cli:main``, so that it is covered)."""
    try:
        from .cli import main

        code = main()
    except KeyboardInterrupt:
        sys.stderr.write("dse: interrupted; no partial result file was left\n")
        code = INTERRUPTED
    if code == INTERRUPTED:
        _forget_the_told_interrupt()
    return code


def _forget_the_told_interrupt() -> None:
    """CPython (3.11, 3.12) marks a KeyboardInterrupt that leaves a string ``exec`` or
    ``eval`` as unhandled, even when a caller catches it, and under ``python -m`` ends the
    process by SIGINT at exit (status -2) in place of the code given to ``sys.exit``. A
    Ctrl-C lands there often: importing torch or numba builds dataclasses, whose methods are
    made by ``exec(str)``. Every string evaluation clears the mark as it starts, so one that
    runs to its end forgets it. Runs only once the interrupt has been told: a real
    unhandled one is never hidden (tests/test_signals.py)."""
    exec("pass", {})  # noqa: S102 - a constant string, run for its side effect on the mark


if __name__ == "__main__":
    sys.exit(run())
