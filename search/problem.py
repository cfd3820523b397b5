"""A search problem: the space, the target and objective resolved against real inputs.

Every worker (local process or another machine) rebuilds the same problem from the study's
stored settings, so the settings hold everything: the space's TOML text, the target, the
objective and the engine's parameters.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from accelerator_models import Accelerator
from dse.accuracy import DEFAULT_TABLE, AccuracyTable, AccuracyTableError, load_accuracy_table
from dse.calibrate.predictor import DevicePredictors, load_predictors
from dse.explore import ROOFLINE, Block, Calibrated, Evaluator, Simulator, evaluate_grid
from dse.roofline import DEFAULT_NUMERICS
from dse.roofline.energy import ENERGY_COLUMNS, energy_frame, evaluate_layer_frames
from dse.roofline.evaluator import label_column
from dse.roofline.memory import activation_peak, memory_frame
from dse.sim import SimConfig
from formats import NM
from formats import parse as parse_format
from workloads import Trace, TraceError, load_trace

from .errors import SearchError, TargetError
from .scoring import score
from .space import HardwareBuilder, HardwarePoint, SearchSpace, expand_formats, parse_space
from .target import Objective, Target, make_objective, parse_target

__all__ = ["Problem", "SearchError", "Settings"]


@dataclass(frozen=True)
class Settings:
    """Everything a worker needs to rebuild the problem; stored in the study as JSON."""

    space_text: str
    space_where: str
    space_folder: str
    target: str | None
    max_acc_drop: float
    objective: str | None
    minimize: str | None
    engine: str
    trials: int
    seed: int
    chunk_points: int
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Settings:
        return cls(**data)


class Problem:
    """The resolved problem: traces, candidate formats, accuracies and hardware builder."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.space: SearchSpace = parse_space(settings.space_text, settings.space_where,
                                              Path(settings.space_folder))
        try:
            self.target: Target | None = (None if settings.target is None else
                                          parse_target(settings.target, settings.max_acc_drop))
            self.objective: Objective = make_objective(settings.objective, settings.minimize)
        except TargetError as exc:
            raise SearchError(str(exc)) from None
        self.traces: list[Trace] = []
        for model in self.space.models:
            try:
                self.traces.append(load_trace(model))
            except TraceError as exc:
                raise SearchError(f"search space {self.space.where}: models: {exc}") from None
        self.table = self._table()
        self.candidates = expand_formats(self.space, self._table_levels)
        baseline = () if self.target is None else (self.target.baseline,)
        self.evaluated = tuple(dict.fromkeys(self.candidates + tuple(b.name for b in baseline)))
        # "candidates" in sparse_tensor.patterns: every N:M format evaluated, baseline included.
        nm = [f for f in self.evaluated if isinstance(parse_format(f), NM)]
        self.builder = HardwareBuilder(self.space, nm)
        self.accuracy = {t.model: self._accuracies(t.model) for t in self.traces}
        self._check_objective()
        self.predictors  # noqa: B018 - a calibrated study's predictors load (or fail) here
        self._outside: dict[tuple[str, str], float] = {}

    # --- inputs --------------------------------------------------------------------------------

    def _table(self) -> AccuracyTable:
        path = self.space.accuracy_table
        try:
            return load_accuracy_table(DEFAULT_TABLE if path == "default" else path)
        except AccuracyTableError as exc:
            raise SearchError(f"search space {self.space.where}: accuracy.table: {exc}") from None

    def _rows(self) -> pd.DataFrame:
        frame = self.table.frame
        models = [t.model for t in self.traces]
        rows = frame[frame["model"].isin(models) & (frame["metric"] == self.space.metric)]
        if self.space.dataset is not None:
            rows = rows[rows["dataset"] == self.space.dataset]
        return rows

    def _table_levels(self, family: str, block: int | None) -> list[Any]:
        rows = self._rows()
        if family == "block_sizes":
            values = rows.loc[rows["family"] == "block", "block"].dropna().astype(int)
        elif family == "nm":
            values = rows.loc[rows["family"] == "nm", "sparsity"]
        else:
            rows = rows[rows["family"] == family]
            if block is not None:
                rows = rows[rows["block"] == block]
            values = rows["sparsity"]
        found = sorted(set(values.tolist()))
        if not found:
            label = f"block{block}" if block is not None else family
            raise SearchError(f"search space {self.space.where}: formats: \"table\" found no "
                              f"{label} rows for {', '.join(t.model for t in self.traces)} in "
                              f"{self.table.where}; list the levels instead")
        return found

    def _needs_accuracy(self) -> bool:
        return self.target is not None or self.objective.needs_accuracy

    def _accuracies(self, model: str) -> dict[str, tuple[float, str]]:
        found: dict[str, tuple[float, str]] = {}
        for name in self.evaluated:
            try:
                hit = self.table.lookup(model, name, self.space.metric, self.space.dataset)
            except AccuracyTableError as exc:
                raise SearchError(f"search space {self.space.where}: accuracy: {exc}; set "
                                  "accuracy.dataset") from None
            if math.isnan(hit.value) and self._needs_accuracy():
                role = ("the target's baseline" if self.target is not None
                        and name == self.target.baseline.name else "candidate")
                raise SearchError(f"{role} {name} has no accuracy for model {model} in "
                                  f"{self.table.where} ({hit.note}); remove it from the space "
                                  "or add a row to the table")
            found[name] = (hit.value, hit.status)
        return found

    def _check_objective(self) -> None:
        if self.objective.kind != "cost" or self.objective.per_row:
            return
        knob = next((k for k in self.space.knobs if k.path == self.objective.field), None)
        if knob is None:
            varied = ", ".join(k.path for k in self.space.knobs) or "none"
            raise SearchError(f"--minimize {self.objective.field}: the space does not vary it "
                              f"(varied: {varied}); add it to [hardware.vary]")
        if knob.path in ("sparse_tensor.patterns", "block_sparse.supported"):
            raise SearchError(f"--minimize {knob.path}: not a number; minimize a numeric field")

    # --- evaluation ----------------------------------------------------------------------------

    @cached_property
    def knob_columns(self) -> list[str]:
        return [k.column for k in self.space.knobs]

    def evaluate_points(self, model: int, points: list[HardwarePoint], first: int,
                        formats: tuple[str, ...] | None = None) -> pd.DataFrame:
        """Scored rows of ``model`` on hardware ``points`` (numbered from ``first``) for every
        evaluated format (or ``formats``) and batch; rows in hardware, format, batch order."""
        trace = self.traces[model]
        formats = self.evaluated if formats is None else formats
        accelerators = tuple(self.builder.build(p.base, p.values) for p in points)
        (frame,) = evaluate_grid([Block(trace, accelerators, tuple(formats))],
                                 list(self.space.batches), fusion=self.space.fusion,
                                 scope=self.space.scope, evaluator=self.evaluator,
                                 categorical=True)
        # evaluate's rows run hardware-major: each point's formats x batches together.
        per_point = len(frame) // len(points)
        local = np.repeat(np.arange(len(points)), per_point)
        frame.insert(2, "hw_point", local + first)
        for j, column in enumerate(self.knob_columns):
            values = [_cell(p.values[j]) for p in points]
            frame[column] = (label_column(local, values) if isinstance(values[0], str)
                             else np.array(values)[local])
        self._add_memory(frame, trace, accelerators, local)
        if self.objective.needs_energy:
            self._add_energy(frame, trace, accelerators, local, tuple(formats))
        return score(frame, set(self.candidates), self.accuracy[trace.model], self.target,
                     speed=self.speed)

    def _add_memory(self, frame: pd.DataFrame, trace: Trace,
                    accelerators: tuple[Accelerator, ...], local: np.ndarray) -> None:
        """``peak_memory_bytes`` and ``fits`` (NA where the spec has no capacity), in place.

        As :func:`dse.roofline.memory.memory_frame`, in closed form on the design rows: its
        weight storage is the rows' ``weight_bytes`` plus the dense weights of the ops outside
        the scope (the same for every format and hardware point; taken once from
        ``memory_frame``), and its activations are the trace's live peak times the batch.
        """
        vb = float(DEFAULT_NUMERICS.value_bytes)
        batch = frame["batch"].to_numpy(dtype=np.float64)
        weights = frame["weight_bytes"].to_numpy(dtype=np.float64) + self._outside_weights(
            trace, accelerators[0])
        peak = weights + activation_peak(trace, self.space.fusion).dram_elems * vb * batch
        capacity = np.array([np.nan if a.dram_capacity_bytes is None else a.dram_capacity_bytes
                             for a in accelerators])[local]
        known = ~np.isnan(capacity)
        frame["peak_memory_bytes"] = peak
        frame["fits"] = pd.arrays.BooleanArray(peak <= np.where(known, capacity, np.inf),
                                               mask=~known)

    def _outside_weights(self, trace: Trace, accelerator: Accelerator) -> float:
        """Bytes of weights ``memory_frame`` counts beyond the design rows' ``weight_bytes``
        (the ops outside the scope, stored dense)."""
        key = (trace.model, self.space.scope)
        if key not in self._outside:
            designs = evaluate_grid([Block(trace, (accelerator,), ("dense",))], [1],
                                    fusion=self.space.fusion, scope=self.space.scope)[0]
            layers = evaluate_layer_frames(trace, [accelerator], ["dense"], [1],
                                           [self.space.fusion], [self.space.scope])
            memory = memory_frame(designs, layers, trace, accelerator)
            self._outside[key] = float(memory["weight_storage_bytes"].iloc[0]
                                       - memory["weight_bytes"].iloc[0])
        return self._outside[key]

    def _add_energy(self, frame: pd.DataFrame, trace: Trace,
                    accelerators: tuple[Accelerator, ...], local: np.ndarray,
                    formats: tuple[str, ...]) -> None:
        """:data:`ENERGY_COLUMNS`, in place; only for objectives that need them (it evaluates
        every op of every design)."""
        # Hardware points share their base's name; energy_frame joins designs to their layers
        # by name, so each point gets its own for the join.
        tagged = [dataclasses.replace(a, name=f"{a.name}#{i}") for i, a in enumerate(accelerators)]
        designs = pd.DataFrame({
            "hardware": label_column(local, [a.name for a in tagged], categorical=False),
            **{k: frame[k].to_numpy() for k in ("format", "batch", "fusion", "scope",
                                                  "latency_s")}})
        layers = evaluate_layer_frames(trace, tagged, list(dict.fromkeys(("dense", *formats))),
                                       list(self.space.batches), [self.space.fusion],
                                       [self.space.scope])
        energy = energy_frame(designs, layers, trace, tagged)
        for column in ENERGY_COLUMNS:
            frame[column] = energy[column].to_numpy()

    @cached_property
    def simulation(self) -> SimConfig | None:
        """The simulator's settings when the study evaluates with it, else None."""
        if self.settings.extra.get("evaluator", "roofline") != "simulate":
            return None
        return SimConfig.from_dict(self.settings.extra.get("simulation", {}))

    @cached_property
    def predictors(self) -> DevicePredictors | None:
        """The kernel predictors of a calibrated study (``--calibrated DEVICE``), else None."""
        name = self.settings.extra.get("calibrated")
        return None if name is None else load_predictors(name)

    @property
    def speed(self) -> str:
        """The column targets and rankings use: the expected speedup in a calibrated study,
        the bound's otherwise."""
        return "speedup" if self.settings.extra.get("calibrated") is None else "expected_speedup"

    @cached_property
    def evaluator(self) -> Evaluator:
        """The roofline, the roofline with the expectation beside it (calibrated), or the
        simulator in this process (the study's workers fan out)."""
        if self.predictors is not None:
            return Calibrated(self.predictors)
        return ROOFLINE if self.simulation is None else Simulator(self.simulation)


def _cell(value: Any) -> Any:
    """A knob value as a table cell: pattern lists become "2:4,1:4"."""
    return ",".join(value) if isinstance(value, tuple) else value
