"""The errors of measuring, in a module light enough for the command line to import at start
(the measuring modules bring scipy, numba kernels and, on use, torch)."""

from __future__ import annotations

__all__ = ["BenchError", "DatasetError", "MeasureError", "ProbeError"]


class BenchError(ValueError):
    """Bad benchmark input; the message is one line naming the option and the fix."""


class DatasetError(ValueError):
    """A dataset that cannot be used; the message names the file, the column and the fix."""


class MeasureError(ValueError):
    """Input ``dse measure`` cannot use; one line naming the option and the fix."""


class ProbeError(ValueError):
    """A probe that cannot run as asked; the message names the option and the fix."""
