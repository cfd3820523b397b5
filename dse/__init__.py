"""dse: speed-of-light design-space exploration of sparse neural-network inference.

The public API; each name lives in the engine package that owns it:

* :mod:`dse.roofline` (the speed-of-light engine): ``evaluate``, ``evaluate_layers``,
  ``Numerics``;
* :mod:`dse.sim` (the event-level engine): ``simulate``, ``SimConfig``;
* :mod:`dse.explore` (grids over both): ``sweep``, ``Roofline``, ``Simulator``.

``dse.output`` writes result files; ``dse.accuracy`` owns accuracy tables and the pruning
trainer; ``dse.cli`` is the command line. The engines and ``dse.explore`` are imported on first
use, so ``import dse`` stays light.

>>> import dse
>>> table = dse.evaluate("toy_hybrid", hardware="a100", formats=["2:4"])
>>> list(table["format"]), list(table["fusion"])
(['dense', '2:4'], ['unfused', 'unfused'])
"""

from .roofline import (
    DTYPE_BYTES,
    FUSIONS,
    SCOPES,
    EvaluationError,
    Numerics,
    NumericsError,
    evaluate,
    evaluate_layers,
)

__all__ = [
    "DTYPE_BYTES",
    "FUSIONS",
    "SCOPES",
    "EvaluationError",
    "Numerics",
    "NumericsError",
    "Roofline",
    "SimConfig",
    "Simulation",
    "SimulationError",
    "Simulator",
    "evaluate",
    "evaluate_layers",
    "simulate",
    "sweep",
]
__version__ = "0.1.0"

#: Names imported on first use, and the package that owns each.
_LAZY = {"SimConfig": "dse.sim", "Simulation": "dse.sim", "SimulationError": "dse.sim",
         "simulate": "dse.sim", "sweep": "dse.explore", "Roofline": "dse.explore",
         "Simulator": "dse.explore"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dse' has no attribute {name!r}")
