"""Exploration over the engines: grids of designs, sweeps and the built-in studies.

Owns the one grid evaluation that sweeps and searches share, with the evaluator as a value
(:mod:`.grid`: ``evaluate_grid``, ``Roofline``, ``Simulator``), ``--vary`` sweeps
(:mod:`.sweep`) and the built-in sensitivity studies (:mod:`.studies`). Imports the ground
packages, :mod:`dse.roofline` and :mod:`dse.sim`; never ``search`` or ``reports``.
"""

from .grid import EVALUATORS, ROOFLINE, Block, Evaluator, Roofline, Simulator, evaluate_grid
from .studies import FeatureOverhead, crossover_batches, feature_overhead, tornado
from .sweep import SweepError, Vary, parse_vary, sweep

__all__ = [
    "EVALUATORS",
    "ROOFLINE",
    "Block",
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
]
