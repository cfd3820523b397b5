"""The event-level simulator's API: one design in, per-op latencies, a timeline and gaps out.

``simulate(trace, hardware, format, batch, fusion, scope, SimConfig(...))`` plans the design
(:mod:`dse.sim.plan`), plays it out in SimPy (:mod:`dse.sim.engine`) and returns a
:class:`Simulation` holding:

* ``ops``: one row per op: its ``fallback`` ('', ``shape``, ``hw:dense``, ``hw:csr``, as
  ``evaluate_layers`` labels it), start, end and latency (an op's latency runs from the end of the
  previous op, so latencies add up to the total), its roofline time under the same fusion model,
  the gap and its causes: ``launch_s`` (kernel launch overhead), ``buffer_s`` (the roofline time
  of the op's extra traffic: inputs or weights re-read because the tiles are smaller than the
  op, intermediates spilled because they did not fit on chip) and ``fill_drain_s`` (the rest:
  loads and stores that did not overlap compute, pipeline fill and drain; negative where weights
  loaded during an earlier op hid part of this op's traffic);
* ``timeline``: one row per busy interval of DRAM, tensor, sparse tensor and vector cores;
* ``utilization``: the busy fraction of each resource over time.

Settings: the buffer is shared memory x SMs (``smem``, the default) or the L2 (``l2``) of the
hardware spec, or ``buffer_bytes`` (``math.inf``: unlimited); ``depth`` buffer stages (2 = double
buffering); the launch overhead is the spec's ``kernel_launch_overhead_s``, else
:data:`DEFAULT_LAUNCH_OVERHEAD_S`; ``overlap`` ``pipelined`` or ``full`` (the roofline's
assumption); ``prefetch_depth`` ops ahead whose weights load early under ``fused_prefetched``.

``op_time_s`` (op name -> seconds) runs those ops at the given kernel times instead of at peak
(:func:`dse.sim.plan.at_kernel_times`: each op's compute is stretched so that its launch plus
its compute takes that time). ``dse simulate --calibrated`` passes the times kernel predictors
expect (:mod:`dse.calibrate`, a layer above this one, so the times come in as plain numbers);
the result is then an expectation, not a bound. ``ops`` gains ``kernel_time_s`` (the given
time) and ``kernel_s`` (the part of the gap the slower kernels add), the summary
``gap_kernel_s``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

import accelerator_models
from accelerator_models import Accelerator, SpecError
from formats import Format
from formats import parse as parse_format
from workloads import Trace, load_trace

from ..roofline.evaluator import DEFAULT_NUMERICS, evaluate, evaluate_layers
from ..roofline.numerics import Numerics
from .engine import OVERLAPS, PHASES, RESOURCES, EventLog, run
from .plan import Plan, PlanError, Work, at_kernel_times, plan, work

__all__ = [
    "BUFFERS",
    "DEFAULT_LAUNCH_OVERHEAD_S",
    "SimConfig",
    "Simulation",
    "SimulationError",
    "simulate",
]

#: Per-kernel overhead when the spec gives none, fitted to the five timm models measured as CUDA
#: graphs on an H100 SXM (benchmarks/gpu/results/models_measurements.csv): at batch 1, the
#: measured time the simulator leaves unexplained without launch overhead, per kernel, is
#: 4.80 us (ConvNeXt-T), 4.65 (ResNet-50), 3.17 (Swin-T), 2.91 (ViT-B), 2.36 (DeiT-S; fused
#: attention runs fewer kernels than its trace has ops); the median is 3.17 us.
#: `python -m benchmarks.gpu.compare_simulator` recomputes it. Host launch time is not in it
#: (graphs replay without the host); it is what a kernel costs the GPU beyond its speed of light.
DEFAULT_LAUNCH_OVERHEAD_S = 3.2e-6
BUFFERS = ("smem", "l2")


class SimulationError(ValueError):
    """Settings or inputs a simulation cannot use; the message names the input and the fix."""


@dataclass(frozen=True)
class SimConfig:
    """How to simulate: buffer, buffering depth, launch overhead, overlap model, prefetch."""

    buffer: str = "smem"
    buffer_bytes: float | None = None
    depth: int = 2
    launch_overhead_s: float | None = None
    overlap: str = "pipelined"
    prefetch_depth: int = 1
    utilization_bins: int = 100

    def check(self, names: dict[str, str] | None = None) -> SimConfig:
        """Raise SimulationError naming the first bad setting (by ``names[field]``, e.g. the
        command-line option, else the field)."""
        def bad(field: str, problem: str) -> SimulationError:
            label = (names or {}).get(field, field)
            return SimulationError(f"{label} {getattr(self, field)!r}: {problem}")

        if self.buffer not in BUFFERS:
            raise bad("buffer", f"use one of {', '.join(BUFFERS)}, or give buffer bytes")
        if self.buffer_bytes is not None and not self.buffer_bytes > 0:
            raise bad("buffer_bytes", "give a positive size (inf for unlimited)")
        if isinstance(self.depth, bool) or not isinstance(self.depth, int) or self.depth < 1:
            raise bad("depth", "give an integer >= 1 (2 = double buffering)")
        lo = self.launch_overhead_s
        if lo is not None and not (math.isfinite(lo) and lo >= 0):
            raise bad("launch_overhead_s", "give a finite number of seconds >= 0 (0 = none)")
        if self.overlap not in OVERLAPS:
            raise bad("overlap", f"use one of {', '.join(OVERLAPS)}")
        if (isinstance(self.prefetch_depth, bool) or not isinstance(self.prefetch_depth, int)
                or self.prefetch_depth < 0):
            raise bad("prefetch_depth", "give an integer >= 0 (0 = no prefetch)")
        if self.utilization_bins < 1:
            raise bad("utilization_bins", "give at least 1")
        return self

    def to_dict(self) -> dict:
        """The settings as plain JSON values (stored with search studies); infinity as "inf"."""
        data = dict(self.__dict__)
        if data["buffer_bytes"] is not None and not math.isfinite(data["buffer_bytes"]):
            data["buffer_bytes"] = "inf"
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SimConfig:
        """The inverse of :meth:`to_dict`, checked."""
        data = dict(data)
        if data.get("buffer_bytes") == "inf":
            data["buffer_bytes"] = math.inf
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise SimulationError(f"simulator settings: unknown {', '.join(unknown)}")
        return cls(**data).check()

    @classmethod
    def roofline(cls) -> SimConfig:
        """Unlimited buffer, no launch overhead, full overlap, unlimited prefetch: the
        settings under which the simulator reproduces the roofline."""
        return cls(buffer_bytes=math.inf, launch_overhead_s=0.0, overlap="full",
                   prefetch_depth=1 << 30)


@dataclass(frozen=True, eq=False)
class Simulation:
    """The result of one simulated design."""

    design: dict
    config: SimConfig
    buffer_bytes: float
    launch_overhead_s: float
    ops: pd.DataFrame
    timeline: pd.DataFrame
    utilization: pd.DataFrame
    roofline_latency_s: float
    events: int
    wall_s: float
    #: The roofline's fallback fields of the design: ``shape_fallback_ops``, ``hw_fallback``
    #: ('', 'dense' or 'csr') and ``hw_fallback_ops``, as ``dse.evaluate`` gives them.
    fallbacks: dict = field(default_factory=dict)
    #: Whether ops ran at given kernel times (``op_time_s``) rather than at peak.
    kernel_times: bool = False

    @property
    def latency_s(self) -> float:
        return float(self.ops["end_s"].iloc[-1]) if len(self.ops) else 0.0

    @property
    def tiles(self) -> int:
        return int(self.ops["tiles"].sum())

    def busy_fraction(self) -> dict[str, float]:
        """Share of the total latency each resource was busy."""
        total = self.latency_s
        busy = (self.timeline["end_s"] - self.timeline["start_s"]).groupby(
            self.timeline["resource"], observed=False).sum()
        return {r: (float(busy.get(r, 0.0)) / total if total > 0 else 0.0) for r in RESOURCES}

    def summary(self) -> dict:
        """One row of figures for tables and sweeps."""
        gap = self.latency_s - self.roofline_latency_s
        causes = {c: float(self.ops[f"{c}_s"].sum()) for c in ("launch", "buffer", "kernel")
                  if f"{c}_s" in self.ops}
        # The rest of the total gap; per op it is the ops' own fill/drain, but under
        # fused_prefetched the total roofline is one max over the graph, below the sum of the
        # ops' own, and what prefetching gains shows here.
        causes["fill_drain"] = gap - sum(causes.values())
        return {
            **self.design,
            "latency_s": self.latency_s,
            "roofline_latency_s": self.roofline_latency_s,
            "gap_s": gap,
            "gap_share": gap / self.latency_s if self.latency_s > 0 else 0.0,
            **{f"gap_{c}_s": v for c, v in causes.items()},
            "kernels": int(self.ops["kernel_start"].sum()),
            "tiles": self.tiles,
            "dram_bytes": float(self.ops["dram_bytes"].sum()),
            "roofline_dram_bytes": float(self.ops["roofline_dram_bytes"].sum()),
            **{f"busy_{r}": v for r, v in self.busy_fraction().items()},
            "buffer_bytes": self.buffer_bytes,
            "depth": self.config.depth,
            "launch_overhead_s": self.launch_overhead_s,
            "overlap": self.config.overlap,
            "events": self.events,
            **self.fallbacks,
        }


def resolve_buffer(acc: Accelerator, config: SimConfig) -> float:
    """The on-chip buffer in bytes: given, or from the spec's on-chip sizes."""
    if config.buffer_bytes is not None:
        return float(config.buffer_bytes)
    try:
        return float(acc.on_chip_bytes(config.buffer))
    except SpecError as exc:
        raise SimulationError(str(exc)) from None


def resolve_launch(acc: Accelerator, config: SimConfig) -> float:
    if config.launch_overhead_s is not None:
        return float(config.launch_overhead_s)
    spec = getattr(acc, "kernel_launch_overhead_s", None)
    return DEFAULT_LAUNCH_OVERHEAD_S if spec is None else float(spec)


def simulate(
    trace: Trace | str,
    hardware: Accelerator | str,
    fmt: Format | str,
    batch: int = 1,
    fusion: str = "unfused",
    scope: str = "gemm",
    config: SimConfig | None = None,
    numerics: Numerics = DEFAULT_NUMERICS,
    progress: Callable[[int, int], None] | None = None,
    op_time_s: Mapping[str, float] | None = None,
) -> Simulation:
    """Simulate one design; see the module docstring for what comes back. ``progress(done,
    total)`` hears of every op finished (for a status line on long runs). ``op_time_s``: op
    name -> kernel time (s) to run those ops at instead of at peak (ops not named run at
    peak)."""
    config = (config or SimConfig()).check()
    trace = trace if isinstance(trace, Trace) else load_trace(trace)
    acc = hardware if isinstance(hardware, Accelerator) else accelerator_models.load(hardware)
    fmt = parse_format(fmt) if isinstance(fmt, str) else fmt
    if isinstance(batch, bool) or not isinstance(batch, int | np.integer) or batch < 1:
        raise SimulationError(f"batch size {batch!r} is not a positive integer")
    buffer_bytes = resolve_buffer(acc, config)
    launch = resolve_launch(acc, config)
    started = time.perf_counter()
    w = work(trace, acc, fmt, int(batch), fusion, scope, numerics)
    try:
        p = plan(w, buffer_bytes, config.depth, launch, config.prefetch_depth)
    except PlanError as exc:
        raise SimulationError(str(exc)) from None
    timed, seconds = None, None
    if op_time_s is not None:
        seconds = _kernel_times(trace, op_time_s)
        try:
            timed = at_kernel_times(p, seconds)
        except PlanError as exc:
            raise SimulationError(str(exc)) from None
    log = run(timed if timed is not None else p, config.overlap, config.prefetch_depth, progress)
    wall = time.perf_counter() - started
    design = {"model": trace.model, "hardware": acc.name, "format": w.format.name,
              "batch": int(batch), "fusion": fusion, "scope": scope}
    rows = evaluate(trace, acc, w.format, int(batch), fusion=fusion, scope=scope,
                    numerics=numerics)
    row = rows.loc[rows["format"] == w.format.name].iloc[0]
    roofline = float(row["latency_s"])
    fallbacks = {"shape_fallback_ops": int(row["shape_fallback_ops"]),
                 "hw_fallback": str(row["hw_fallback"]),
                 "hw_fallback_ops": int(row["hw_fallback_ops"])}
    ops = _ops_frame(p, log, design, timed, seconds)
    # Each op's fallback ('', 'shape', 'hw:dense', 'hw:csr'), as evaluate_layers labels it.
    layers = evaluate_layers(trace, acc, w.format, int(batch), fusion=fusion, scope=scope,
                             numerics=numerics)
    why = dict(zip(layers["op"], layers["fallback"], strict=True))
    ops.insert(ops.columns.get_loc("unit") + 1, "fallback",
               ops["op"].map(why).fillna("").astype(object))
    timeline = _timeline_frame(p, log, design)
    utilization = _utilization_frame(timeline, log.latency_s, config.utilization_bins, design)
    return Simulation(design=design, config=config, buffer_bytes=buffer_bytes,
                      launch_overhead_s=launch, ops=ops, timeline=timeline,
                      utilization=utilization, roofline_latency_s=roofline, events=log.events,
                      wall_s=wall, fallbacks=fallbacks, kernel_times=timed is not None)


def _kernel_times(trace: Trace, op_time_s: Mapping[str, float]) -> np.ndarray:
    """Per op of ``trace``, its kernel time from ``op_time_s`` (NaN where not given)."""
    index = {name: i for i, name in enumerate(trace.ops["name"])}
    unknown = [name for name in op_time_s if name not in index]
    if unknown:
        raise SimulationError(f"kernel times: {unknown[0]!r} is not an op of {trace.model} "
                              f"({len(unknown)} unknown); give times by the trace's op names")
    seconds = np.full(len(index), np.nan)
    for name, value in op_time_s.items():
        try:
            seconds[index[name]] = float(value)
        except (TypeError, ValueError):
            raise SimulationError(f"kernel time of op {name!r}: {value!r} is not a number of "
                                  "seconds") from None
    return seconds


def roofline_memory_bytes(w: Work) -> np.ndarray:
    """Per op, the bytes the roofline moves under ``w.fusion`` (all ops of the trace)."""
    if w.fusion.startswith("rules:"):
        return w.weight_bytes + w.feature_bytes
    if w.fusion == "unfused":
        features = w.input_bytes + w.output_bytes
    else:
        features = w.model_input_bytes + np.where(w.is_output, w.output_bytes, 0.0)
    return w.weight_bytes + features


def _ops_frame(p: Plan, log: EventLog, design: dict, timed: Plan | None = None,
               seconds: np.ndarray | None = None) -> pd.DataFrame:
    """One row per simulated op; ``timed``: the plan as run at the kernel times ``seconds``
    (per trace op), which adds the ``kernel`` cause (how much longer the op's own time is at
    its kernel time than at peak) and the times themselves."""
    w = p.work
    ops = w.trace.ops
    j = p.ops
    compute = w.compute_s[j]
    roof_bytes = roofline_memory_bytes(w)[j]
    roofline = np.maximum(compute, roof_bytes * w.inv_bw)
    sim_bytes = p.load_bytes + p.store_bytes
    at_sim_traffic = np.maximum(compute, sim_bytes * w.inv_bw)
    at_kernel_time = (at_sim_traffic if timed is None
                      else np.maximum(timed.work.compute_s[j], sim_bytes * w.inv_bw))
    previous_end = np.concatenate([[0.0], log.op_end[:-1]])
    latency = log.op_end - previous_end
    launch = log.op_launch
    buffer = at_sim_traffic - roofline
    kernel = at_kernel_time - at_sim_traffic
    fill_drain = latency - launch - at_kernel_time
    gap = latency - roofline
    causes = np.stack([launch, buffer, kernel, fill_drain], axis=1)
    names = np.array(["launch", "buffer-bound", "kernel", "fill/drain"], dtype=object)
    tolerance = 1e-9 * np.maximum(roofline, 1e-12)
    why = np.where((gap > tolerance) & (causes.max(axis=1) > tolerance),
                   names[np.argmax(causes, axis=1)], "")
    unit = np.where(w.tensor_s[j] > 0, np.where(w.tensor_unit[j] == 1, "sparse_tensor", "tensor"),
                    "vector")
    frame = pd.DataFrame({
        "op": ops["name"].to_numpy(dtype=object)[j],
        "op_index": j.astype(np.int64),
        "kind": ops["kind"].to_numpy(dtype=object)[j],
        "unit": unit,
        "tiles": p.tiles,
        "start_s": log.op_begin,
        "end_s": log.op_end,
        "latency_s": latency,
        "roofline_s": roofline,
        "gap_s": gap,
        "launch_s": launch,
        "buffer_s": buffer,
        "fill_drain_s": fill_drain,
        "why": why,
        "compute_s": compute,
        "dram_bytes": sim_bytes,
        "roofline_dram_bytes": roof_bytes,
        "prefetch_bytes": p.prefetch_bytes,
        "kernel_start": p.kernel_start,
        "resident_output": p.resident_output,
        "tile_bytes": p.footprint,
    })
    if timed is not None:
        frame.insert(frame.columns.get_loc("fill_drain_s"), "kernel_s", kernel)
        frame["kernel_time_s"] = seconds[j]
    return _with_design(frame, design)


def _with_design(frame: pd.DataFrame, design: dict) -> pd.DataFrame:
    for i, (key, value) in enumerate(design.items()):
        frame.insert(i, key, value)
    return frame


def _timeline_frame(p: Plan, log: EventLog, design: dict) -> pd.DataFrame:
    names = p.work.trace.ops["name"].to_numpy(dtype=object)
    order = np.lexsort((log.start, log.resource))
    trace_index = p.ops[log.op[order]] if len(order) else np.zeros(0, dtype=np.int64)
    frame = pd.DataFrame({
        "resource": np.array(RESOURCES, dtype=object)[log.resource[order]],
        "op": names[trace_index],
        "op_index": trace_index.astype(np.int64),
        "tile": log.tile[order],
        "phase": np.array(PHASES, dtype=object)[log.phase[order]],
        "start_s": log.start[order],
        "end_s": log.end[order],
        "bytes": log.bytes[order],
    })
    return _with_design(frame, design)


def busy_between(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Busy time of non-overlapping intervals inside each ``[edges[i], edges[i+1])``."""
    starts, ends = np.sort(starts), np.sort(ends)
    cum_start = np.concatenate([[0.0], np.cumsum(starts)])
    cum_end = np.concatenate([[0.0], np.cumsum(ends)])
    # Busy time before t: sum over intervals started of (t - start) minus over ended (t - end).
    k_s = np.searchsorted(starts, edges, side="right")
    k_e = np.searchsorted(ends, edges, side="right")
    before = (edges * k_s - cum_start[k_s]) - (edges * k_e - cum_end[k_e])
    return np.diff(before)


def _utilization_frame(timeline: pd.DataFrame, total: float, bins: int,
                       design: dict) -> pd.DataFrame:
    edges = np.linspace(0.0, total, bins + 1) if total > 0 else np.zeros(2)
    width = np.diff(edges)
    rows = []
    for resource in RESOURCES:
        part = timeline[timeline["resource"] == resource]
        busy = busy_between(part["start_s"].to_numpy(), part["end_s"].to_numpy(), edges)
        share = np.divide(busy, width, out=np.zeros_like(busy), where=width > 0)
        rows.append(pd.DataFrame({"resource": resource, "start_s": edges[:-1],
                                  "end_s": edges[1:], "utilization": np.clip(share, 0.0, 1.0)}))
    return _with_design(pd.concat(rows, ignore_index=True), design)

