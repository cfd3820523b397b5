"""Running the command line in the test's own process, for tests that read what it printed."""

from __future__ import annotations

from dse.cli import main

__all__ = ["run_cli"]


def run_cli(argv: list[str]) -> int:
    """``dse.cli.main(argv)``'s exit code, whether it returns or raises SystemExit."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    if code is None:
        return 0
    return code if isinstance(code, int) else 1
