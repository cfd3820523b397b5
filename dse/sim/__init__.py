"""The event-level engine: a SimPy simulation of one design with finite buffers, tiles, kernel
launches and imperfect overlap.

Owns planning a design into tiles (:mod:`.plan`, pure numpy, priced exactly as the roofline
prices it), playing the plan out on SimPy resources (:mod:`.engine`), the API that returns
per-op latencies, timelines and gaps (:mod:`.simulate`: ``simulate``, ``SimConfig``), and
running many simulations at once on processes or Dask (:mod:`.fanout`). Imports the ground
packages and :mod:`dse.roofline`.
"""

from .fanout import LOCAL, FanoutError, simulate_designs, simulated
from .simulate import (
    BUFFERS,
    DEFAULT_LAUNCH_OVERHEAD_S,
    SimConfig,
    Simulation,
    SimulationError,
    simulate,
)

__all__ = [
    "BUFFERS",
    "DEFAULT_LAUNCH_OVERHEAD_S",
    "LOCAL",
    "FanoutError",
    "SimConfig",
    "Simulation",
    "SimulationError",
    "simulate",
    "simulate_designs",
    "simulated",
]
