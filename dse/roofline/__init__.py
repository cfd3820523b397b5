"""The speed-of-light engine: the Sparsity Roofline of a trace under sparse formats.

Owns pricing every (format, op) pair once (:mod:`.pricing`), the numba kernels that turn prices
into per-design and per-op times (:mod:`.kernels`), the numerics of a run (:mod:`.numerics`) and
the typed, DataFrame-returning evaluator (:mod:`.evaluator`: ``evaluate``, ``evaluate_layers``),
and beside the latency what a design costs in energy and power (:mod:`.energy`, with the power
cap) and in memory (:mod:`.memory`: peak resident bytes, fits, the largest batch that fits).
Imports only the ground packages (``formats``, ``accelerator_models``, ``workloads``).
"""

from .caches import CACHE_CONDITIONS, CacheError, memory_time
from .energy import (
    ENERGY_COLUMNS,
    NO_ENERGY_FIGURES,
    energy_frame,
    evaluate_energy,
    evaluate_layer_frames,
    has_energy_figures,
)
from .evaluator import (
    DEFAULT_NUMERICS,
    FUSIONS,
    SCOPES,
    Designs,
    EvaluationError,
    Peaks,
    evaluate,
    evaluate_designs,
    evaluate_layers,
    peaks,
)
from .memory import MEMORY_COLUMNS, activation_peak, evaluate_memory, memory_frame
from .numerics import DTYPE_BYTES, Numerics, NumericsError

__all__ = [
    "CACHE_CONDITIONS",
    "CacheError",
    "DEFAULT_NUMERICS",
    "Designs",
    "ENERGY_COLUMNS",
    "MEMORY_COLUMNS",
    "NO_ENERGY_FIGURES",
    "activation_peak",
    "memory_time",
    "energy_frame",
    "evaluate_energy",
    "evaluate_layer_frames",
    "evaluate_memory",
    "has_energy_figures",
    "memory_frame",
    "DTYPE_BYTES",
    "FUSIONS",
    "SCOPES",
    "EvaluationError",
    "Numerics",
    "NumericsError",
    "Peaks",
    "evaluate",
    "evaluate_designs",
    "evaluate_layers",
    "peaks",
]
