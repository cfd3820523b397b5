"""The event-level simulator's charts: the Gantt timeline, utilization over time and the gap
over the roofline by cause."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence

import altair as alt
import numpy as np
import pandas as pd

from .design import (
    FALLBACK_FIELDS,
    as_text,
    chart_title,
    fallback_text,
    fixed_value,
    inline_data,
    one_value,
    require_columns,
)

__all__ = [
    "gantt_chart",
    "gantt_data",
    "sim_gap_chart",
    "sim_gap_data",
    "utilization_chart",
    "utilization_data",
]

_RESOURCE_WORDS = ("datum.value == 'sparse_tensor' ? 'sparse tensor core' : datum.value == "
                   "'tensor' ? 'tensor core' : datum.value == 'vector' ? 'vector cores' : "
                   "datum.value == 'dram' ? 'DRAM' : datum.value")

# --- 9. the event-level simulator: timeline, utilization, gap by cause --------------------------

# A simulation is one design; its frames carry these columns, constant within one.
_SIM_DESIGN = ("model", "hardware", "format", "batch", "fusion", "scope")
_SIM_RESOURCES = ("dram", "tensor", "sparse_tensor", "vector")
_SIM_PHASES = ("prefetch", "load", "compute", "store", "busy")
_SIM_PHASE_COLORS = ("#9467bd", "#1f77b4", "#2ca02c", "#ff7f0e", "#7f7f7f")
# Causes of the simulator's gap over the roofline, labelled as the ops frame's ``why``;
# ``kernel`` (the slower kernels of a calibrated simulation) only where the ops have it.
_SIM_CAUSES = (("launch_s", "launch"), ("buffer_s", "buffer-bound"), ("kernel_s", "kernel"),
               ("fill_drain_s", "fill/drain"))
_SIM_CAUSE_COLORS = {"launch": "#1f77b4", "buffer-bound": "#d62728", "kernel": "#9467bd",
                     "fill/drain": "#ff7f0e", "other": "#7f7f7f"}
_SIM_WIDTH = 900


def _resource_order(resources: Iterable[str]) -> list[str]:
    """The simulator's resources in their fixed order (every one, busy or not), then any
    other the frame names, alphabetically."""
    extra = sorted(set(resources) - set(_SIM_RESOURCES))
    return [*_SIM_RESOURCES, *extra]


def _phase_order(phases: Iterable[str]) -> list[str]:
    present = set(phases)
    return [p for p in _SIM_PHASES if p in present] + sorted(present - set(_SIM_PHASES))


def _rank_of(order: Sequence[str]):
    ranks = {name: i for i, name in enumerate(order)}
    return lambda column: column.map(ranks)


def _intervals(frame: pd.DataFrame, builder: str) -> tuple[np.ndarray, np.ndarray]:
    """``start_s`` and ``end_s`` as floats; refuses non-finite times and negative lengths."""
    start = frame["start_s"].to_numpy(dtype=np.float64)
    end = frame["end_s"].to_numpy(dtype=np.float64)
    bad = ~(np.isfinite(start) & np.isfinite(end))
    if bad.any():
        raise ValueError(f"{builder}: {int(bad.sum())} row(s) have a missing or infinite "
                         f"start_s/end_s (first at row {int(np.flatnonzero(bad)[0])}); "
                         "drop or fix them first")
    back = end < start
    if back.any():
        i = int(np.flatnonzero(back)[0])
        raise ValueError(f"{builder}: {int(back.sum())} row(s) end before they start (first "
                         f"at row {i}: start_s={start[i]!r}, end_s={end[i]!r})")
    return start, end


def _with_design(out: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """``out`` with the design columns ``frame`` has (checked constant by ``one_value``)
    appended, so a chart can name its design and a CSV says what it shows."""
    for column in _SIM_DESIGN:
        if column in frame.columns:
            values = frame[column].dropna()
            value = values.iloc[0] if len(values) else None
            out[column] = value.item() if hasattr(value, "item") else value
    return out


def _design_title(data: pd.DataFrame, what: str, *notes: str) -> str | alt.TitleParams:
    """``what: model on hardware, format, batch B, fusion, S scope``, from the design columns
    present; with a subtitle naming the design's fallbacks when the frame has the fallback
    fields, then ``notes``."""
    def first(column: str) -> str | None:
        if column not in data.columns or not data[column].notna().any():
            return None
        value = data[column].dropna().iloc[0]
        if isinstance(value, float | np.floating) and float(value).is_integer():
            value = int(value)  # a batch read back from a CSV
        return str(value)

    head = " on ".join(p for p in (first("model"), first("hardware")) if p)
    batch = first("batch")
    scope = first("scope")
    parts = [head, first("format"), f"batch {batch}" if batch else None, first("fusion"),
             f"{scope} scope" if scope else None]
    design = ", ".join(p for p in parts if p)
    text = f"{what}: {design}" if design else what
    if not all(c in data.columns for c in FALLBACK_FIELDS):
        return chart_title(text, *notes) if any(notes) else text
    row = data.iloc[0] if len(data) else None
    fallback = fallback_text(row["shape_fallback_ops"], row["hw_fallback"],
                             row["hw_fallback_ops"]) if row is not None else ""
    return chart_title(text, f"fallbacks: {fallback}" if fallback else "fallbacks: none", *notes)


def _merge_runs(bars: pd.DataFrame, keys: list[str], gap_s: float) -> pd.DataFrame:
    """Merge the bars of each ``keys`` group that follow one another in time with at most
    ``gap_s`` between one's start and the latest end before it; a merged bar spans its first
    start to its last end and sums ``duration_s``, ``bytes`` and ``intervals``."""
    bars = bars.sort_values([*keys, "start_s", "end_s"], kind="stable").reset_index(drop=True)
    same = np.ones(len(bars), dtype=bool)
    for key in keys:
        column = bars[key].to_numpy()
        same[1:] &= column[1:] == column[:-1]
    same[0] = False
    latest_end = bars.groupby(keys, sort=False)["end_s"].cummax().to_numpy()
    new_run = ~same
    new_run[1:] |= bars["start_s"].to_numpy()[1:] - latest_end[:-1] > gap_s
    run = np.cumsum(new_run)
    merged = bars.groupby(run, sort=False).agg(
        resource=("resource", "first"), op_index=("op_index", "first"), op=("op", "first"),
        phase=("phase", "first"), tile=("tile", "first"), start_s=("start_s", "min"),
        end_s=("end_s", "max"), duration_s=("duration_s", "sum"), bytes=("bytes", "sum"),
        intervals=("intervals", "sum"))
    merged["tile"] = merged["tile"].astype("Int64").where(merged["intervals"] == 1)
    return merged.reset_index(drop=True)


def gantt_data(timeline: pd.DataFrame, max_bars: int = 4000, *,
               tolerance: float = 5e-4) -> pd.DataFrame:
    """Bars of a Gantt chart of one simulation: what each resource is busy with, when.

    ``timeline``: the simulator's timeline for one design (``resource, op, op_index, phase,
    start_s, end_s``; ``tile``, ``bytes`` and the design columns ``model, hardware, format,
    batch, fusion`` when present; a frame mixing designs is refused).

    Up to ``max_bars`` intervals, every interval is its own bar. Above that, bars are merged,
    in two steps, as far as needed:

    1. per resource, op and phase: intervals that follow one another in time merge when the
       gap between them is at most ``tolerance`` x the timeline's span (default 1/2000: under
       half a pixel of the chart's 900), so a tiled op becomes one bar per resource and phase
       (its loads and stores merge across each other's short intervals on DRAM; the chart
       draws each phase in its own lane).
    2. if still above ``max_bars``: one bar per resource and op, phase ``busy``.

    A merged bar spans its first interval's start to its last interval's end; its
    ``duration_s`` is the time its intervals are busy (their lengths summed), so it may be
    shorter than ``end_s - start_s``. The busy time per resource (the sum of ``duration_s``)
    is therefore the same before and after merging; when the resource's intervals do not
    overlap, that is exactly the time it is busy.

    Columns: ``resource, op_index, op, phase, tile`` (Int64; null on merged bars),
    ``start_s, end_s, duration_s, start_us, end_us`` (microseconds, for display),
    ``intervals`` (timeline rows in the bar), ``bytes`` (DRAM bytes, summed; 0 without a
    ``bytes`` column), then the design columns present. Sorted by resource (``dram, tensor,
    sparse_tensor, vector``, then others), start, op index and phase.
    """
    builder = "gantt_data"
    require_columns(timeline, ("resource", "op", "op_index", "phase", "start_s", "end_s"), builder)
    one_value(timeline, _SIM_DESIGN, builder)
    if isinstance(max_bars, bool) or not isinstance(max_bars, int | np.integer) \
            or max_bars < 1:
        raise ValueError(f"{builder}: max_bars={max_bars!r}; give a whole number >= 1")
    if not 0 <= tolerance < 1:
        raise ValueError(f"{builder}: tolerance={tolerance!r}; give a fraction of the "
                         "timeline's span in [0, 1), e.g. 5e-4")
    start, end = _intervals(timeline, builder)
    n = len(timeline)
    bars = pd.DataFrame({
        "resource": as_text(timeline["resource"]).to_numpy(),
        "op_index": timeline["op_index"].to_numpy(dtype=np.int64),
        "op": as_text(timeline["op"]).to_numpy(),
        "phase": as_text(timeline["phase"]).to_numpy(),
        "tile": pd.array(timeline["tile"], dtype="Int64") if "tile" in timeline
        else pd.array([pd.NA] * n, dtype="Int64"),
        "start_s": start,
        "end_s": end,
        "duration_s": end - start,
        "bytes": timeline["bytes"].to_numpy(dtype=np.float64) if "bytes" in timeline
        else np.zeros(n),
        "intervals": np.ones(n, dtype=np.int64),
    })
    if len(bars) > max_bars:
        span = float(end.max() - start.min())
        bars = _merge_runs(bars, ["resource", "op_index", "phase"], tolerance * span)
    if len(bars) > max_bars:
        bars = _merge_runs(bars.assign(phase="busy"), ["resource", "op_index"], math.inf)
    resources = _rank_of(_resource_order(bars["resource"]))
    phases = _rank_of(_phase_order(bars["phase"]))

    def key(column: pd.Series) -> pd.Series:
        return {"resource": resources, "phase": phases}.get(column.name, lambda c: c)(column)

    bars = bars.sort_values(["resource", "start_s", "op_index", "phase"], key=key,
                            kind="stable").reset_index(drop=True)
    bars["start_us"] = bars["start_s"] * 1e6
    bars["end_us"] = bars["end_s"] * 1e6
    bars = bars[["resource", "op_index", "op", "phase", "tile", "start_s", "end_s",
                 "duration_s", "start_us", "end_us", "intervals", "bytes"]]
    return _with_design(bars, timeline)


def gantt_chart(data: pd.DataFrame) -> alt.Chart:
    """Horizontal bars from ``start_us`` to ``end_us``, a row per resource (``dram, tensor,
    sparse_tensor, vector``, idle ones too) split into a lane per phase, coloured by phase;
    the tooltip names the op."""
    resources = _resource_order(data["resource"])
    phases = _phase_order(data["phase"])
    colors = dict(zip(_SIM_PHASES, _SIM_PHASE_COLORS, strict=True))
    return alt.Chart(inline_data(data)).mark_bar().encode(
        x=alt.X("start_us:Q", title="time (µs)"),
        x2="end_us:Q",
        y=alt.Y("resource:N", title=None, sort=resources,
                scale=alt.Scale(domain=resources, paddingInner=0.25),
                axis=alt.Axis(labelExpr=_RESOURCE_WORDS)),
        # A lane per phase: merged load and store bars of one op both span the op on DRAM,
        # and would hide one another in a single lane.
        yOffset=alt.YOffset("phase:N", sort=phases, scale=alt.Scale(domain=phases)),
        color=alt.Color("phase:N", title="phase", sort=phases,
                        scale=alt.Scale(domain=phases,
                                        range=[colors.get(p, "#17becf") for p in phases])),
        tooltip=["op:N", "op_index:Q", "phase:N", "resource:N", "tile:Q", "intervals:Q",
                 alt.Tooltip("start_us:Q", title="start (µs)", format=".3f"),
                 alt.Tooltip("end_us:Q", title="end (µs)", format=".3f"),
                 alt.Tooltip("duration_s:Q", title="busy (s)", format=".3~s"),
                 alt.Tooltip("bytes:Q", title="DRAM bytes", format=".3~s")],
    ).properties(width=_SIM_WIDTH, height=alt.Step(12),
                 title=_design_title(data, "Simulated timeline"))


def utilization_data(utilization: pd.DataFrame) -> pd.DataFrame:
    """Busy fraction of each resource in the simulator's time bins.

    ``utilization``: the simulator's utilization frame for one design (``resource, start_s,
    end_s, utilization``, and the design columns when present; a frame mixing designs is
    refused). ``utilization`` must lie in [0, 1] (a rounding overshoot of up to 1e-9 is
    clipped). Columns: ``resource, start_s, end_s, start_us, end_us, utilization``, then the
    design columns present; sorted by resource (fixed order) and bin start.
    """
    builder = "utilization_data"
    require_columns(utilization, ("resource", "start_s", "end_s", "utilization"), builder)
    one_value(utilization, _SIM_DESIGN, builder)
    start, end = _intervals(utilization, builder)
    busy = utilization["utilization"].to_numpy(dtype=np.float64)
    bad = ~((busy >= -1e-9) & (busy <= 1 + 1e-9))  # NaN too
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{builder}: {int(bad.sum())} row(s) have a utilization outside "
                         f"[0, 1] (first at row {i}: {busy[i]!r})")
    out = pd.DataFrame({
        "resource": as_text(utilization["resource"]).to_numpy(),
        "start_s": start,
        "end_s": end,
        "start_us": start * 1e6,
        "end_us": end * 1e6,
        "utilization": np.clip(busy, 0.0, 1.0),
    })
    resources = _rank_of(_resource_order(out["resource"]))
    out = out.sort_values(["resource", "start_s"],
                          key=lambda c: resources(c) if c.name == "resource" else c,
                          kind="stable").reset_index(drop=True)
    return _with_design(out, utilization)


def utilization_chart(data: pd.DataFrame) -> alt.FacetChart:
    """Utilization against time, a row per resource (fixed order): each bin an area from 0 to
    its busy fraction, from ``start_us`` to ``end_us``, so the rows read as step areas."""
    resources = _resource_order(data["resource"])
    area = alt.Chart().mark_rect(opacity=0.8).encode(
        x=alt.X("start_us:Q", title="time (µs)"),
        x2="end_us:Q",
        y=alt.Y("utilization:Q", title="busy", axis=alt.Axis(format="%", tickCount=3),
                scale=alt.Scale(domain=[0, 1])),
        y2=alt.datum(0),
        color=alt.Color("resource:N", title="resource", sort=resources,
                        scale=alt.Scale(domain=resources), legend=None),
        tooltip=["resource:N",
                 alt.Tooltip("start_us:Q", title="from (µs)", format=".3f"),
                 alt.Tooltip("end_us:Q", title="to (µs)", format=".3f"),
                 alt.Tooltip("utilization:Q", format=".1%")])
    layered = alt.layer(area, data=inline_data(data)).properties(width=_SIM_WIDTH, height=70)
    return layered.facet(row=alt.Row("resource:N", sort=resources, title=None,
                                     header=alt.Header(labelExpr=_RESOURCE_WORDS))).properties(
        title=_design_title(data, "Utilization over time"))


def sim_gap_data(ops: pd.DataFrame, top: int = 20) -> pd.DataFrame:
    """The ops the simulator runs slowest relative to their roofline, with the gap by cause.

    ``ops``: the simulator's per-op frame for one design (``op, op_index, gap_s, launch_s,
    buffer_s, fill_drain_s``; ``kind, unit, why, latency_s, roofline_s`` and the design
    columns when present; a frame mixing designs is refused). Keeps the ``top`` ops with the
    largest ``gap_s`` (ties: lower op index first); ops with no gap (``gap_s <= 0``) are
    dropped, they have nothing to explain.

    Long format, one row per (op, component): ``launch`` (``launch_s``), ``buffer-bound``
    (``buffer_s``), ``fill/drain`` (``fill_drain_s``), the labels of the ops frame's ``why``,
    and ``other`` when they do not add up to ``gap_s`` (the remainder, which may be
    negative), so an op's components always sum to its gap. Columns: ``rank`` (1 = largest
    gap), ``op_index, op, label`` (``#index op``, unique), ``kind, unit, why``,
    ``component, time_s, time_us``, the op's ``gap_s, latency_s, roofline_s`` (repeated on
    its rows), then the design columns present.

    A calibrated simulation (``dse simulate --calibrated``: ``ops`` has ``kernel_s`` and
    ``kernel_time_s``) adds the component ``kernel`` (``kernel_s``: how much the slower
    kernels add, between buffer-bound and fill/drain) and, per op, ``kernel_time_s`` (its
    predicted kernel time) and ``kernel_gap_us`` (that time over the roofline, µs: the gap
    the expectation alone gives, as ``dse evaluate --calibrated`` prices the op), and
    ``expected_by`` (the predictor set) when ``ops`` has it. Sorted by rank, then component.
    """
    builder = "sim_gap_data"
    columns = ("op", "op_index", "gap_s", "launch_s", "buffer_s", "fill_drain_s")
    require_columns(ops, columns, builder)
    one_value(ops, _SIM_DESIGN, builder)
    if isinstance(top, bool) or not isinstance(top, int | np.integer) or top < 1:
        raise ValueError(f"{builder}: top={top!r}; give a whole number >= 1")
    n = len(ops)
    causes = [(c, name) for c, name in _SIM_CAUSES if c != "kernel_s" or c in ops]
    calibrated = "kernel_time_s" in ops

    def floats(column: str) -> np.ndarray:
        return ops[column].to_numpy(dtype=np.float64) if column in ops else np.full(n, np.nan)

    def labels(column: str) -> np.ndarray:
        return as_text(ops[column]).to_numpy() if column in ops else np.full(n, None)

    per_op = pd.DataFrame({
        "op_index": ops["op_index"].to_numpy(dtype=np.int64),
        "op": as_text(ops["op"]).to_numpy(),
        "kind": labels("kind"), "unit": labels("unit"), "why": labels("why"),
        "fallback": labels("fallback"),
        "gap_s": floats("gap_s"), "latency_s": floats("latency_s"),
        "roofline_s": floats("roofline_s"),
        **{column: floats(column) for column, _ in causes},
        **({"kernel_time_s": floats("kernel_time_s")} if calibrated else {}),
    })
    per_op = per_op[per_op["gap_s"] > 0]
    parts_known = np.isfinite(per_op[[c for c, _ in causes]].to_numpy()).all(axis=1)
    if not parts_known.all():
        first = per_op["op"].to_numpy()[~parts_known][0]
        raise ValueError(f"{builder}: {int((~parts_known).sum())} op(s) with a gap have a "
                         f"missing or infinite {'/'.join(c for c, _ in causes)} (first: "
                         f"{first!r}); fill them (0 for no such cost) first")
    per_op = per_op.sort_values(["gap_s", "op_index"], ascending=[False, True],
                                kind="stable").head(top).reset_index(drop=True)
    per_op.insert(0, "rank", np.arange(1, len(per_op) + 1, dtype=np.int64))
    per_op.insert(3, "label", [f"#{i} {name}" for i, name in
                               zip(per_op["op_index"], per_op["op"], strict=True)])
    parts = [per_op.assign(component=name, time_s=per_op[column], _order=i)
             for i, (column, name) in enumerate(causes)]
    other = per_op["gap_s"] - per_op[[c for c, _ in causes]].sum(axis=1, skipna=False)
    off = ~np.isclose(other, 0.0, rtol=0, atol=1e-9 * per_op["gap_s"].abs().max()) \
        if len(per_op) else np.zeros(0, dtype=bool)
    parts.append(per_op[off].assign(component="other", time_s=other[off], _order=len(causes)))
    out = pd.concat(parts, ignore_index=True).sort_values(["rank", "_order"], kind="stable")
    out["time_us"] = out["time_s"] * 1e6
    extra = []
    if calibrated:
        out["kernel_gap_us"] = (out["kernel_time_s"] - out["roofline_s"]) * 1e6
        extra = ["kernel_time_s", "kernel_gap_us"]
    out = out[["rank", "op_index", "op", "label", "kind", "unit", "why", "component",
               "time_s", "time_us", "gap_s", "latency_s", "roofline_s", *extra,
               *(["fallback"] if "fallback" in ops else [])]]
    if calibrated and "expected_by" in ops:
        out["expected_by"] = fixed_value(ops, "expected_by")
    return _with_design(out.reset_index(drop=True), ops)


def sim_gap_chart(data: pd.DataFrame) -> alt.LayerChart | alt.Chart:
    """Horizontal stacked bars of each op's gap over its roofline (µs) by cause, the largest
    gap on top. A calibrated simulation's (``kernel_gap_us``): the latency is an
    expectation, the cause ``kernel`` shows what its slower kernels add, and a black dot per
    op marks its predicted kernel time over the roofline (the expectation alone, without
    what the simulation adds), the legend saying so."""
    labels = list(dict.fromkeys(data.sort_values("rank", kind="stable")["label"]))
    present = set(data["component"])
    components = [name for column, name in _SIM_CAUSES
                  if name in present or column in ("launch_s", "buffer_s", "fill_drain_s")]
    components += ["other"] if "other" in present else []
    calibrated = "kernel_gap_us" in data.columns
    y = alt.Y("label:N", sort=labels, title=None)
    tooltip = ["op:N", "op_index:Q", "kind:N", "unit:N", "why:N", "component:N",
               alt.Tooltip("time_us:Q", title="this cause (µs)", format=".3f"),
               alt.Tooltip("gap_s:Q", title="gap (s)", format=".3~s"),
               alt.Tooltip("latency_s:Q", title="expected, simulated (s)" if calibrated
                           else "simulated (s)", format=".3~s"),
               alt.Tooltip("roofline_s:Q", title="roofline (s)", format=".3~s")]
    if calibrated:
        tooltip.append(alt.Tooltip("kernel_time_s:Q", title="predicted kernel time (s)",
                                   format=".3~s"))
    bars = (alt.Chart() if calibrated else alt.Chart(inline_data(data))).mark_bar().encode(
        x=alt.X("time_us:Q", title="simulated time over the roofline (µs)", stack="zero"),
        y=y,
        color=alt.Color("component:N", title="cause", sort=components,
                        scale=alt.Scale(domain=components,
                                        range=[_SIM_CAUSE_COLORS[c] for c in components])),
        order=alt.Order("component_order:Q"),
        tooltip=tooltip,
    ).transform_calculate(
        component_order=f"indexof({json.dumps(components)}, datum.component)")
    if not calibrated:
        return bars.properties(width=600, height=alt.Step(16),
                               title=_design_title(data, f"Gap over the roofline, top "
                                                         f"{len(labels)} ops"))
    device = fixed_value(data, "expected_by")
    predicted = "predicted kernel time"
    dots = alt.Chart().transform_filter(alt.datum.component == components[0]).mark_point(
        filled=True, size=45, color="black", opacity=1).encode(
        x=alt.X("kernel_gap_us:Q"), y=y,
        shape=alt.ShapeDatum(predicted, title="expected, not a bound"),
        tooltip=["op:N", alt.Tooltip("kernel_time_s:Q", title="predicted kernel time (s)",
                                     format=".3~s"),
                 alt.Tooltip("kernel_gap_us:Q", title="predicted over the roofline (µs)",
                             format=".3f")])
    note = (f"the latency is an expectation, not a bound: each op simulated at the kernel "
            f"time the {device + ' ' if device else ''}predictors expect (kernels one op at a "
            "time); kernel: what the slower kernels add; black dots: the predicted kernel "
            "time alone over the roofline (as dse evaluate --calibrated prices the op)")
    return alt.layer(bars, dots, data=inline_data(data)).properties(
        width=600, height=alt.Step(16),
        title=_design_title(data, f"Gap of the expected latency over the roofline, top "
                                  f"{len(labels)} ops", note))
