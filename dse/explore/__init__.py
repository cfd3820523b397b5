"""Exploration over the engines: grids of designs, sweeps and the built-in studies.

Owns the one grid evaluation that sweeps and searches share, with the evaluator as a value
(:mod:`.grid`: ``evaluate_grid``, ``Roofline``, ``Simulator``, ``Calibrated``), ``--vary`` sweeps
(:mod:`.sweep`) and the built-in sensitivity studies (:mod:`.studies`). Imports the ground
packages, :mod:`dse.roofline`, :mod:`dse.sim` and :mod:`dse.calibrate`; never ``search`` or
``reports``.
"""

from .grid import (
    EVALUATORS,
    EXPECTED_COLUMNS,
    ROOFLINE,
    Block,
    Calibrated,
    Evaluator,
    Roofline,
    Simulator,
    evaluate_grid,
    with_expected,
)
from .studies import FeatureOverhead, crossover_batches, feature_overhead, tornado
from .sweep import SweepError, Vary, parse_vary, sweep

__all__ = [
    "EVALUATORS",
    "EXPECTED_COLUMNS",
    "ROOFLINE",
    "Block",
    "Calibrated",
    "Evaluator",
    "FeatureOverhead",
    "Roofline",
    "Simulator",
    "SweepError",
    "Vary",
    "crossover_batches",
    "evaluate_grid",
    "feature_overhead",
    "parse_vary",
    "sweep",
    "tornado",
    "with_expected",
]
