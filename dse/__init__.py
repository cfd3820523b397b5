"""dse: speed-of-light design-space exploration of sparse neural-network inference.

The public API; each name lives in the engine package that owns it:

* :mod:`dse.roofline` (the speed-of-light engine): ``evaluate_designs``, ``Numerics``;
* :mod:`dse.sim` (the event-level engine): ``SimConfig``, ``Simulation``;
* :mod:`dse.explore` (grids over both): ``sweep``, ``Roofline``, ``Simulator``;
* :mod:`dse.api` and :mod:`dse.comparison` (the engines' calls as the command line makes them,
  with ``calibrated=``: the expectation beside the bound): ``evaluate``, ``evaluate_layers``,
  ``simulate`` (returning a ``CalibratedSimulation`` when calibrated), ``expected_ops``,
  ``compare`` and its ``Comparison``.

``dse.output`` writes result files; ``dse.accuracy`` owns accuracy tables and the pruning
trainer; ``dse.cli`` is the command line. The engines and ``dse.explore`` are imported on first
use, so ``import dse`` stays light.

>>> import dse
>>> table = dse.evaluate("toy_hybrid", hardware="a100", formats=["2:4"])
>>> list(table["format"]), list(table["fusion"])
(['dense', '2:4'], ['unfused', 'unfused'])
"""

import os as _os
import sys as _sys
from importlib import metadata as _metadata


def _numba_cache_dir() -> None:
    """Keep numba's compiled kernels out of the installed package: by default numba caches them
    in ``__pycache__`` beside the source, i.e. inside ``site-packages/dse``, where a later
    ``pip install -e`` leaves them behind as a folder that shadows the editable install. They
    go to the user's cache folder instead, ``$XDG_CACHE_HOME/dse/numba`` (``~/.cache/dse/numba``
    by default), unless the user set ``NUMBA_CACHE_DIR``. Must run before numba decorates the
    kernels (it picks the cache folder then), i.e. before ``dse.roofline`` is imported."""
    if _os.environ.get("NUMBA_CACHE_DIR"):
        return
    base = _os.environ.get("XDG_CACHE_HOME") or _os.path.join(_os.path.expanduser("~"), ".cache")
    _os.environ["NUMBA_CACHE_DIR"] = _os.path.join(base, "dse", "numba")
    if "numba" in _sys.modules:  # imported before dse: make it read the setting again
        _sys.modules["numba"].core.config.reload_config()


_numba_cache_dir()

__all__ = [
    "CalibratedSimulation",
    "Comparison",
    "DTYPE_BYTES",
    "FUSIONS",
    "SCOPES",
    "Designs",
    "EvaluationError",
    "Numerics",
    "NumericsError",
    "Roofline",
    "SimConfig",
    "Simulation",
    "SimulationError",
    "Simulator",
    "compare",
    "evaluate",
    "evaluate_designs",
    "evaluate_layers",
    "expected_ops",
    "simulate",
    "sweep",
]
try:  # one version, the package's own (pyproject.toml), read from its installed metadata
    __version__ = _metadata.version("sparsity-dse")
except _metadata.PackageNotFoundError:  # a source tree on sys.path without an install
    __version__ = "0+unknown"

#: Names imported on first use, and the package that owns each: ``import dse`` loads neither
#: pandas nor numba (0.4 s on the project's machine) until a name needs them.
_LAZY = {**{name: "dse.api" for name in (
             "CalibratedSimulation", "evaluate", "evaluate_layers", "expected_ops", "simulate")},
         "Comparison": "dse.comparison", "compare": "dse.comparison",
         **{name: "dse.roofline" for name in (
             "DTYPE_BYTES", "FUSIONS", "SCOPES", "Designs", "EvaluationError", "Numerics",
             "NumericsError", "evaluate_designs")},
         "SimConfig": "dse.sim", "Simulation": "dse.sim", "SimulationError": "dse.sim",
         "sweep": "dse.explore", "Roofline": "dse.explore",
         "Simulator": "dse.explore"}


#: Subpackages and modules, loaded on first attribute access too (``dse.roofline.X`` after a
#: bare ``import dse``), as when ``import dse`` still imported them.
_SUBMODULES = ("accuracy", "api", "calibrate", "cli", "comparison", "design_columns", "explore",
               "measure", "output", "roofline", "sim")


def __getattr__(name: str):
    import importlib

    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later look-ups skip this function (0.8 us each)
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"dse.{name}")
    raise AttributeError(f"module 'dse' has no attribute {name!r}")
