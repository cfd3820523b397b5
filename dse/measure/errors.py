"""The errors of measuring, in a module light enough for the command line to import at start
(the measuring modules bring scipy, numba kernels and, on use, torch)."""

from __future__ import annotations

__all__ = ["BenchError"]


class BenchError(ValueError):
    """Bad benchmark input; the message is one line naming the option and the fix."""
