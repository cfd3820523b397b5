"""One grid evaluation, shared by sweeps and searches, with the evaluator as a value.

A grid is a list of :class:`Block`: one trace on a run of accelerators under a set of formats;
every block is evaluated at the same batches, fusion models and scope. The evaluator is a value
the caller passes: :class:`Roofline` (the speed of light, the default) or :class:`Simulator`
(the event-level simulator: the roofline gives every column first, then each design's latency,
dense latency and speedup become the simulated ones, the roofline's kept as
``roofline_latency_s`` and ``roofline_speedup``). All the simulations of a grid fan out together,
over local processes or a Dask cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from accelerator_models import Accelerator
from formats import Format
from formats import parse as parse_format
from workloads import Trace

from ..roofline import DEFAULT_NUMERICS, Numerics, evaluate
from ..sim import SimConfig, simulated
from ..sim.fanout import Progress

__all__ = ["EVALUATORS", "ROOFLINE", "Block", "Evaluator", "Roofline", "Simulator",
           "evaluate_grid"]


@dataclass(frozen=True)
class Block:
    """One trace on ``accelerators`` under ``formats`` (dense is always added)."""

    trace: Trace
    accelerators: tuple[Accelerator, ...]
    formats: tuple[Format | str, ...]


@dataclass(frozen=True)
class Roofline:
    """The speed-of-light evaluator (:func:`dse.evaluate`)."""

    name = "roofline"

    def refine(self, frames: list[pd.DataFrame], blocks: Sequence[Block],
               numerics: Numerics) -> list[pd.DataFrame]:
        """The roofline's frames are its answer."""
        return frames


@dataclass(frozen=True)
class Simulator:
    """The event-level simulator with ``config``, fanned out over ``workers`` local processes
    or a Dask cluster (``dask``: ``"local"`` or ``tcp://host:port``); ``progress(done, total)``
    hears of each finished design."""

    config: SimConfig = field(default_factory=SimConfig)
    workers: int = 1
    dask: str | None = None
    progress: Progress | None = None

    name = "simulate"

    def refine(self, frames: list[pd.DataFrame], blocks: Sequence[Block],
               numerics: Numerics) -> list[pd.DataFrame]:
        """The frames with simulated latencies. Accelerators are told apart by their position in
        the grid, not their names: a search's hardware points share their base's name."""
        keyed, traces, accelerators, formats = [], {}, {}, {}
        for i, (frame, block) in enumerate(zip(frames, blocks, strict=True)):
            keys = [f"{i}:{j}" for j in range(len(block.accelerators))]
            accelerators.update(zip(keys, block.accelerators, strict=True))
            traces[block.trace.model] = block.trace
            formats.update((f.name, f) for f in _parsed(block.formats))
            keyed.append(frame.assign(hardware=np.array(keys, dtype=object)[
                _hardware_index(frame, block)]))
        sizes = [len(f) for f in frames]
        out = simulated(pd.concat(keyed, ignore_index=True), traces, accelerators, formats,
                        self.config, numerics, workers=self.workers, dask=self.dask,
                        progress=self.progress)
        parts = np.split(np.arange(len(out)), np.cumsum(sizes)[:-1])
        result = []
        for frame, rows in zip(frames, parts, strict=True):
            part = out.iloc[rows].reset_index(drop=True)
            part["hardware"] = frame["hardware"].to_numpy()  # the names, not the keys
            for column in frame.columns:  # keep the categoricals the engines expect
                if isinstance(frame[column].dtype, pd.CategoricalDtype):
                    part[column] = part[column].astype(frame[column].dtype)
            result.append(part)
        return result


Evaluator = Roofline | Simulator
ROOFLINE = Roofline()
#: The evaluators by their command-line name.
EVALUATORS = ("roofline", "simulate")


def _parsed(fmts: Sequence[Format | str]) -> list[Format]:
    return [f if isinstance(f, Format) else parse_format(f) for f in fmts]


def _hardware_index(frame: pd.DataFrame, block: Block) -> np.ndarray:
    """Each row's accelerator position: ``evaluate`` runs fusion-major, then hardware-major."""
    per_fusion = len(frame) // frame["fusion"].nunique()
    per_hw = per_fusion // len(block.accelerators)
    return np.tile(np.repeat(np.arange(len(block.accelerators)), per_hw),
                   len(frame) // per_fusion)


def evaluate_grid(blocks: Sequence[Block], batches: Sequence[int],
                  fusion: str | Sequence[str] = "unfused", scope: str = "gemm",
                  numerics: Numerics = DEFAULT_NUMERICS, evaluator: Evaluator = ROOFLINE,
                  categorical: bool = False) -> list[pd.DataFrame]:
    """One frame per block (``dse.evaluate``'s columns and row order), from ``evaluator``."""
    frames = [evaluate(b.trace, list(b.accelerators), list(b.formats), list(batches),
                       fusion=fusion, scope=scope, numerics=numerics, categorical=categorical)
              for b in blocks]
    return evaluator.refine(frames, blocks, numerics)
