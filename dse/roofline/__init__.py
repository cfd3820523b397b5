"""The speed-of-light engine: the Sparsity Roofline of a trace under sparse formats.

Owns pricing every (format, op) pair once (:mod:`.pricing`), the numba kernels that turn prices
into per-design and per-op times (:mod:`.kernels`), the numerics of a run (:mod:`.numerics`) and
the typed, DataFrame-returning evaluator (:mod:`.evaluator`: ``evaluate``, ``evaluate_layers``).
Imports only the ground packages (``formats``, ``accelerator_models``, ``workloads``).
"""

from .evaluator import (
    DEFAULT_NUMERICS,
    FUSIONS,
    SCOPES,
    EvaluationError,
    Peaks,
    evaluate,
    evaluate_layers,
    peaks,
)
from .numerics import DTYPE_BYTES, Numerics, NumericsError

__all__ = [
    "DEFAULT_NUMERICS",
    "DTYPE_BYTES",
    "FUSIONS",
    "SCOPES",
    "EvaluationError",
    "Numerics",
    "NumericsError",
    "Peaks",
    "evaluate",
    "evaluate_layers",
    "peaks",
]
