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

from accelerator_models import ENERGY_FIELDS, SIMULATOR_FIELDS, Accelerator
from dse.accuracy import DEFAULT_TABLE, AccuracyTable, AccuracyTableError, load_accuracy_table
from dse.accuracy.llm_table import (
    DEFAULT_LLM_METRIC,
    LLM_METRICS,
    LLM_TABLE,
    LLMAccuracy,
    LLMAccuracyTable,
    load_llm_accuracy_table,
    weights_key,
)
from dse.calibrate.predictor import DevicePredictors, load_predictors
from dse.explore import ROOFLINE, Block, Calibrated, Evaluator, Simulator, evaluate_grid
from dse.roofline import DEFAULT_NUMERICS, Numerics, NumericsError
from dse.roofline.energy import (
    ENERGY_COLUMNS,
    energy_frame,
    evaluate_layer_frames,
    has_energy_figures,
)
from dse.roofline.evaluator import label_column
from dse.roofline.kernels import numpy_only
from dse.roofline.memory import activation_peak, memory_frame
from dse.sim import SimConfig
from formats import NM
from formats import parse as parse_format
from workloads import MAX_BATCH, Trace, TraceError, load_model
from workloads.llm import check_priceable

from .errors import SearchError, TargetError
from .scoring import score
from .space import (
    LLM_TABLE_NAME,
    HardwareBuilder,
    HardwarePoint,
    SearchSpace,
    expand_formats,
    parse_space,
    with_overrides,
)
from .target import Objective, Target, make_objective, parse_target

__all__ = ["NUMPY_STUDY_OP_EVALS", "Problem", "SearchError", "Settings"]

#: Studies of at most this many op-evaluations (design points, dense included, times the ops of
#: their model) are priced in numpy (:func:`dse.roofline.kernels.numpy_only`): numpy prices about
#: 3 million a second here, and loading numba's cached kernels costs ~0.6 s a process (imports
#: included), so below this a search never loads numba.
NUMPY_STUDY_OP_EVALS = 250_000


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
        self.space: SearchSpace = with_overrides(
            parse_space(settings.space_text, settings.space_where, Path(settings.space_folder)),
            settings.extra.get("overrides", {}))
        try:
            self.target: Target | None = (None if settings.target is None else
                                          parse_target(settings.target, settings.max_acc_drop))
            self.objective: Objective = make_objective(settings.objective, settings.minimize)
        except TargetError as exc:
            raise SearchError(str(exc)) from None
        self.traces: list[Trace] = []
        for model in self.space.models:
            try:
                trace = load_model(model, self.space.phase, self.space.context)
                check_priceable(trace, self.space.batches, [self.space.fusion])
            except TraceError as exc:
                raise SearchError(f"search space {self.space.where}: models: {exc}") from None
            self.traces.append(trace)
        #: Whether the models are language models (all of them: a space does not mix).
        self.language = self._language()
        self.numerics = self._numerics()
        self.table: AccuracyTable | LLMAccuracyTable = self._table()
        self.metric = self.space.metric or (DEFAULT_LLM_METRIC if self.language else "top1")
        if self.language and self.metric not in LLM_METRICS:
            raise SearchError(f"search space {self.space.where}: accuracy.metric "
                              f"{self.metric!r}: language models take "
                              f"{', '.join(LLM_METRICS)}")
        #: The accuracy of a language model is its degradation from dense (perplexity increase
        #: or zero-shot points lost): lower is better, and targets and rankings say so.
        self.lower_is_better = self.language
        #: Language models: where each format's figure comes from, per model.
        self.accuracy_sources: dict[str, dict[str, LLMAccuracy]] = {}
        self.candidates = expand_formats(self.space, self._table_levels)
        baseline = () if self.target is None else (self.target.baseline,)
        self.evaluated = tuple(dict.fromkeys(self.candidates + tuple(b.name for b in baseline)))
        # "candidates" in sparse_tensor.patterns: every N:M format evaluated, baseline included.
        nm = [f for f in self.evaluated if isinstance(parse_format(f), NM)]
        self.builder = HardwareBuilder(self.space, nm)
        self._check_fields_read()
        self.accuracy = {t.model: self._accuracies(t) for t in self.traces}
        self._check_objective()
        self.predictors  # noqa: B018 - a calibrated study's predictors load (or fail) here
        self._outside: dict[tuple[str, str], float] = {}
        # Language models: peak memory per (format, batch) of each trace, priced once.
        self._llm_peaks: dict[str, dict[tuple[str, int], tuple[float, float]]] = {}

    # --- inputs --------------------------------------------------------------------------------

    def _check_fields_read(self) -> None:
        """Refuse a ``[hardware.set]`` or ``[hardware.vary]`` field that only the simulator
        reads in a study the roofline prices: a setting is honoured or refused, never
        ignored (``kernel_launch_overhead_s`` once changed nothing)."""
        if self.simulation is not None:
            return
        given = [("set", path) for path, _ in self.space.fixed]
        given += [("vary", knob.path) for knob in self.space.knobs]
        for table, path in given:
            if path in SIMULATOR_FIELDS:
                raise SearchError(
                    f"search space {self.space.where}: hardware.{table} {path!r}: only the "
                    "event-level simulator reads it (the roofline bound prices kernels at "
                    "peak, with no launch cost or on-chip buffer); add --evaluator simulate, "
                    "or leave it out")

    def _language(self) -> bool:
        kinds = {bool(t.provenance.get("phase")) for t in self.traces}
        if len(kinds) > 1:
            raise SearchError(f"search space {self.space.where}: models mixes language models "
                              "and traces; search them in separate studies")
        language = kinds == {True}
        if not language and (self.space.kv_dtype is not None):
            raise SearchError(f"kv_dtype {self.space.kv_dtype}: "
                              f"{self.traces[0].model} has no KV cache; the option is for "
                              "language models (--model NAME --phase --context)")
        if not language and self.space.weight_dtype is not None:
            # A trace's accuracy table holds unquantised weights only: an int4 design would be
            # ranked by an accuracy it was never measured at.
            raise SearchError(f"weight_dtype {self.space.weight_dtype}: "
                              f"{self.traces[0].model} is a trace, and its accuracy table has "
                              "no row for quantised weights; leave it out")
        return language

    def _numerics(self) -> Numerics:
        s = self.space
        try:
            numerics = Numerics(weight_dtype=s.weight_dtype,
                                weight_group_size=s.weight_group_size, kv_dtype=s.kv_dtype)
        except NumericsError as exc:
            raise SearchError(f"search space {s.where}: numerics: {exc}") from None
        return numerics

    def _table(self) -> AccuracyTable | LLMAccuracyTable:
        path = self.space.accuracy_table
        try:
            if self.language:
                return load_llm_accuracy_table(
                    LLM_TABLE if path in ("default", LLM_TABLE_NAME) else path)
            if path == LLM_TABLE_NAME:
                raise SearchError(f"search space {self.space.where}: accuracy.table \"llm\" "
                                  "holds language models; these models are traces (use "
                                  "\"default\" or a table of theirs)")
            return load_accuracy_table(DEFAULT_TABLE if path == "default" else path)
        except AccuracyTableError as exc:
            raise SearchError(f"search space {self.space.where}: accuracy.table: {exc}") from None

    def _config(self, trace: Trace) -> str:
        """The name a trace's rows carry in an accuracy table: a language model's
        configuration name (``llama-3-8b``), a trace's model name otherwise."""
        return trace.provenance.get("config", trace.model) if self.language else trace.model

    @property
    def weights(self) -> str:
        """The accuracy table's ``weights`` value for this search's weight storage."""
        return weights_key(self.numerics.weight_dtype, self.numerics.weight_group_size)

    def _rows(self) -> pd.DataFrame:
        if isinstance(self.table, LLMAccuracyTable):
            frame = self.table.frame
            names = [self._config(t) for t in self.traces]
            rows = frame[frame["model"].isin(names) & (frame["metric"] == self.metric)
                         & (frame["weights"] == self.weights)]
            fmts = [parse_format(p) for p in rows["pattern"]]
            return pd.DataFrame({
                "family": [f.family for f in fmts],
                "block": pd.array([getattr(f, "block", None) for f in fmts], dtype="Int64"),
                "sparsity": [f.sparsity for f in fmts]})
        frame = self.table.frame
        models = [t.model for t in self.traces]
        rows = frame[frame["model"].isin(models) & (frame["metric"] == self.metric)]
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

    def _accuracies(self, trace: Trace) -> dict[str, tuple[float, str]]:
        if isinstance(self.table, LLMAccuracyTable):
            return self._llm_accuracies(trace)
        model = trace.model
        found: dict[str, tuple[float, str]] = {}
        for name in self.evaluated:
            try:
                hit = self.table.lookup(model, name, self.metric, self.space.dataset)
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

    def _llm_accuracies(self, trace: Trace) -> dict[str, tuple[float, str]]:
        """Each evaluated format's degradation from dense (lower is better) from the published
        figures, for this search's weight storage. A candidate without a figure keeps NaN and
        status ``missing`` (reported as "no accuracy", never ranked); a model without figures,
        or a baseline without one, cannot be searched against a target."""
        table = self.table
        name = self._config(trace)
        found: dict[str, tuple[float, str]] = {}
        sources: dict[str, LLMAccuracy] = {}
        for fmt in self.evaluated:
            hit = table.lookup(name, fmt, self.weights, self.metric)
            found[fmt] = (hit.degradation, hit.status)
            sources[fmt] = hit
        dense = table.lookup(name, "dense", self.weights, self.metric)
        found["dense"] = (dense.degradation, dense.status)
        sources["dense"] = dense
        self.accuracy_sources[trace.model] = sources
        if not self._needs_accuracy():
            return found
        if name not in table.models():
            raise SearchError(f"model {name} has no accuracy table: {table.where} holds "
                              f"published figures for {', '.join(table.models())} only; search "
                              "it without --target (and without an accuracy objective), or add "
                              "published rows for it")
        if self.metric not in table.metrics(name):
            raise SearchError(f"model {name} has no {self.metric} figures in {table.where} "
                              f"(it has {', '.join(table.metrics(name))}); set accuracy.metric")
        if self.target is not None and math.isnan(found[self.target.baseline.name][0]):
            hit = sources[self.target.baseline.name]
            raise SearchError(f"the target's baseline {self.target.baseline.name} has no "
                              f"accuracy for {name}: {hit.note}; pick a baseline with a "
                              "published figure or search without --target")
        return found

    def _check_objective(self) -> None:
        if self.objective.needs_energy and not any(k.path in ENERGY_FIELDS
                                                   for k in self.space.knobs):
            # Minimizing energy over NaN (a spec with no energy figure, e.g. from dse hw
            # probe) would rank nothing: refused before any work.
            bare = [name for name, acc in zip(self.space.hardware, self.builder.bases,
                                              strict=True) if not has_energy_figures(acc)]
            if bare:
                raise SearchError(f"{self.objective.text}: hardware {', '.join(bare)} has no "
                                  "energy figures (dram_pj_per_byte, tensor_pj_per_flop, ...), "
                                  "so its energy is unknown; add them to the spec or rank by "
                                  "another objective")
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
        with numpy_only(self.in_numpy):
            return self._evaluate_points(model, points, first, formats)

    @cached_property
    def in_numpy(self) -> bool:
        """Whether the study is priced in numpy, numba never loaded: a finite space of at most
        :data:`NUMPY_STUDY_OP_EVALS` op-evaluations, evaluated in this process (the simulator's
        workers price their own plans). The same answer for every worker of a study."""
        points = self.space.hardware_count()
        if self.simulation is not None or not math.isfinite(points):
            return False
        per_op = len(self.space.batches) * (len(self.evaluated) + 1) * points
        return sum(per_op * len(t.ops) for t in self.traces) <= NUMPY_STUDY_OP_EVALS

    def _evaluate_points(self, model: int, points: list[HardwarePoint], first: int,
                         formats: tuple[str, ...] | None) -> pd.DataFrame:
        trace = self.traces[model]
        formats = self.evaluated if formats is None else formats
        accelerators = tuple(self.builder.build(p.base, p.values) for p in points)
        (frame,) = evaluate_grid([Block(trace, accelerators, tuple(formats))],
                                 list(self.space.batches), fusion=self.space.fusion,
                                 scope=self.space.scope, numerics=self.numerics,
                                 evaluator=self.evaluator, categorical=True)
        # evaluate's rows run hardware-major: each point's formats x batches together.
        per_point = len(frame) // len(points)
        local = np.repeat(np.arange(len(points)), per_point)
        frame.insert(2, "hw_point", local + first)
        for j, column in enumerate(self.knob_columns):
            values = [_cell(p.values[j]) for p in points]
            frame[column] = (label_column(local, values) if isinstance(values[0], str)
                             else np.array(values)[local])
        if self.language:
            self._add_language_model(frame, trace, accelerators, local)
        else:
            self._add_memory(frame, trace, accelerators, local)
        if self.objective.needs_energy:
            self._add_energy(frame, trace, accelerators, local, tuple(formats))
        return score(frame, set(self.candidates), self.accuracy[trace.model], self.target,
                     speed=self.speed, lower_is_better=self.lower_is_better)

    def _add_language_model(self, frame: pd.DataFrame, trace: Trace,
                            accelerators: tuple[Accelerator, ...], local: np.ndarray) -> None:
        """A language-model step's columns, in place: ``tokens_per_s`` and ``time_per_token_s``
        (decode) or ``ttft_s`` (prefill), ``weight_dtype``, ``kv_dtype``, and the memory fit
        (``peak_memory_bytes``: weights, activations and the batch's KV cache at the context;
        ``fits`` against each hardware point's DRAM, NA without a capacity), as ``dse
        evaluate`` gives them."""
        from dse.design_columns import with_energy_and_memory, with_language_model_columns
        from dse.roofline import evaluate

        if trace.model not in self._llm_peaks:
            formats = list(dict.fromkeys(("dense", *self.evaluated)))
            batches = list(self.space.batches)
            designs = evaluate(trace, [accelerators[0]], formats, batches,
                               fusion=self.space.fusion, scope=self.space.scope,
                               numerics=self.numerics)
            designs = with_energy_and_memory(designs, trace, [accelerators[0]], formats, batches,
                                             [self.space.fusion], self.space.scope,
                                             self.numerics)
            designs = with_language_model_columns(designs, trace, self.numerics)
            # Per design: the peak memory and its resident weights (the rest is per request).
            self._llm_peaks[trace.model] = {(str(f), int(b)): (float(m), float(w)) for f, b, m, w
                                            in zip(designs["format"], designs["batch"],
                                                   designs["peak_memory_bytes"],
                                                   designs["weight_storage_bytes"], strict=True)}
        peaks = self._llm_peaks[trace.model]
        peak, weights = np.array([peaks[(str(f), int(b))] for f, b in zip(
            frame["format"], frame["batch"], strict=True)]).reshape(-1, 2).T
        capacity = np.array([np.nan if a.dram_capacity_bytes is None else a.dram_capacity_bytes
                             for a in accelerators])[local]
        known = ~np.isnan(capacity)
        per_request = (peak - weights) / frame["batch"].to_numpy(dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            largest = np.clip(np.floor((capacity - weights) / per_request), 0, MAX_BATCH)
        p = trace.provenance
        kvb = float(self.numerics.kv_value_bytes)
        frame["kv_bytes_per_token"] = p["kv_elems_per_token"] * kvb
        frame["kv_cache_bytes"] = frame["batch"].to_numpy(dtype=np.float64) \
            * p["kv_cache_elems"] * kvb
        frame["params"] = p["params"]
        frame["largest_batch_that_fits"] = pd.array(np.where(known, largest, 0).astype(np.int64),
                                                    dtype="Int64")
        frame.loc[~known, "largest_batch_that_fits"] = pd.NA
        frame["max_batch"] = frame["largest_batch_that_fits"]
        decode = trace.provenance["phase"] == "decode"
        latency = frame["latency_s"].to_numpy(dtype=np.float64)
        nothing = np.full(len(frame), np.nan)
        frame["tokens_per_s"] = frame["batch"].to_numpy(dtype=np.float64) / latency \
            if decode else nothing
        frame["time_per_token_s"] = latency if decode else nothing
        frame["ttft_s"] = nothing if decode else latency
        frame["weight_dtype"] = self.numerics.weight_label
        frame["kv_dtype"] = self.numerics.kv_dtype or self.numerics.dtype
        frame["peak_memory_bytes"] = peak
        frame["fits"] = pd.arrays.BooleanArray(peak <= np.where(known, capacity, np.inf),
                                               mask=~known)
        sources = self.accuracy_sources.get(trace.model, {})
        names = [str(f) for f in frame["format"]]
        frame["accuracy_source"] = [
            f"{sources[n].method}, {sources[n].source}" if n in sources
            and sources[n].status != "missing" else "" for n in names]

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
