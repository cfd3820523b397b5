"""Accelerators side by side (``dse compare``): latency and speedup by hardware, and energy
per inference by unit and by traffic class."""

from __future__ import annotations

import json

import altair as alt
import numpy as np
import pandas as pd

from .design import (
    FACET_HEIGHT,
    FACET_WIDTH,
    as_text,
    chart_title,
    context_words,
    design_columns,
    fallback_columns,
    fallback_note,
    format_order,
    inline_data,
    listed,
    one_value,
    require_columns,
    sorted_rows,
)
from .estimates import estimate_channels, expectation_note, expected_tooltip, with_estimates

__all__ = [
    "energy_breakdown_chart",
    "energy_breakdown_data",
    "hardware_comparison_chart",
    "hardware_comparison_data",
]

# --- 5. hardware comparison ---------------------------------------------------------------------

def hardware_comparison_data(frame: pd.DataFrame) -> pd.DataFrame:
    """Per hardware, model, format and batch: latency, speedup and where traffic goes.

    ``frame``: rows of ``dse.evaluate`` over several hardware, one fusion and scope.
    Columns: ``hardware, model, format, batch, latency_s, speedup`` (x dense on the same
    hardware), ``memory_bound_share`` (= memory_bound_ops / ops) and ``feature_bytes_share``;
    then, when ``frame`` has them, the fallback fields (``shape_fallback_ops, hw_fallback,
    hw_fallback_ops, fallback``) and ``fusion, scope``. Sorted by model, batch, format
    (pattern order) and hardware.

    The bound beside the expectation (``dse compare --calibrated``, ``dse sweep
    --calibrated``: ``frame`` has ``expected_latency_s`` and ``expected_speedup``): two rows a
    design, ``estimate`` ``bound`` (``latency_s`` and ``speedup`` the bound's) and
    ``expected`` (the expectation's), each with ``bound_latency_s, expected_latency_s,
    bound_speedup, expected_speedup, expected_by`` (the predictor sets),
    ``fraction_of_sol``, ``validated_rmspe`` and ``calibration``; sorted by estimate after
    the design.
    """
    builder = "hardware_comparison_data"
    columns = ("hardware", "model", "format", "batch", "latency_s", "speedup",
               "memory_bound_ops", "ops", "feature_bytes_share")
    require_columns(frame, columns, builder)
    one_value(frame, ("fusion", "scope"), builder)
    ops = frame["ops"].to_numpy(dtype=np.float64)
    out = pd.DataFrame({
        "hardware": as_text(frame["hardware"]).to_numpy(),
        "model": as_text(frame["model"]).to_numpy(),
        "format": as_text(frame["format"]).to_numpy(),
        "batch": frame["batch"].to_numpy(dtype=np.int64),
        "latency_s": frame["latency_s"].to_numpy(dtype=np.float64),
        "speedup": frame["speedup"].to_numpy(dtype=np.float64),
        "memory_bound_share": frame["memory_bound_ops"].to_numpy(dtype=np.float64)
        / np.where(ops > 0, ops, np.nan),
        "feature_bytes_share": frame["feature_bytes_share"].to_numpy(dtype=np.float64),
        **fallback_columns(frame),
        **design_columns(frame, ("fusion", "scope")),
    })
    out = with_estimates(out, frame, ("latency_s", "speedup"), after="batch")
    keys = ["model", "batch", "format", "hardware"]
    return sorted_rows(out, keys + ["estimate"] if "estimate" in out else keys)


def hardware_comparison_chart(data: pd.DataFrame) -> alt.VConcatChart:
    """Two panels of grouped bars, one bar per hardware, a column per model and a row per
    batch: the latency of every format, dense included (what differs between GPUs), and the
    speedup over dense on the same hardware (the rule at 1x). Bars of designs the hardware
    cannot run (they run dense or as CSR) are faded, and the subtitle names them. With the
    ``estimate`` column (calibrated), bars are the bound and a triangle on each bar's
    hardware (joined to the bar's top by a thin line) the expectation; the legend says which
    is which."""
    calibrated = "estimate" in data.columns
    bound_rows = data[data["estimate"] == "bound"] if calibrated else data
    formats = format_order(data["format"])
    sparse_formats = [f for f in formats if f != "dense"]
    inline = inline_data(data)
    own = ~(alt.expr.isValid(alt.datum.hw_fallback_ops) & (alt.datum.hw_fallback_ops > 0))
    tooltip = ["hardware:N", "model:N", "format:N", "batch:Q",
               alt.Tooltip("latency_s:Q", title="latency (s)", format=".3~s"),
               alt.Tooltip("speedup:Q", format=".3f"),
               alt.Tooltip("memory_bound_share:Q", format=".0%"),
               alt.Tooltip("feature_bytes_share:Q", format=".0%")]
    if "fallback" in data.columns:
        tooltip.append(alt.Tooltip("fallback:N", title="fallbacks"))
    if calibrated:
        tooltip += [alt.Tooltip("bound_latency_s:Q", title="bound latency (s)", format=".3~s"),
                    alt.Tooltip("expected_latency_s:Q", title="expected latency (s)",
                                format=".3~s"),
                    alt.Tooltip("bound_speedup:Q", title="bound speedup", format=".3f"),
                    alt.Tooltip("expected_speedup:Q", title="expected speedup", format=".3f"),
                    *expected_tooltip()]
    # Swept hardware points are long names (a100-40gb[dram_bandwidth_bytes_per_s=...]):
    # the legend shows them whole, or every label reads the same.
    color = alt.Color("hardware:N", title="hardware",
                      legend=alt.Legend(symbolOpacity=1, labelLimit=480))
    opacity = alt.condition(own, alt.value(1.0), alt.value(0.3))

    def facet(layered, title: str):
        return layered.properties(width=FACET_WIDTH, height=FACET_HEIGHT - 40).facet(
            column=alt.Column("model:N", title=None),
            row=alt.Row("batch:O", title="batch")).resolve_scale(y="independent").properties(
            title=title)

    def panel(y_field: str, y_title: str, sort: list[str], base: alt.Chart) -> list:
        x = alt.X("format:N", sort=sort, title="format", axis=alt.Axis(labelAngle=-40))
        y = alt.Y(f"{y_field}:Q", title=y_title)
        offset = alt.XOffset("hardware:N")
        bars = (base.transform_filter(alt.datum.estimate == "bound") if calibrated
                else base).mark_bar(stroke="#444", strokeWidth=0.5).encode(
            x=x, xOffset=offset, y=y, color=color, opacity=opacity, tooltip=tooltip)
        if not calibrated:
            return [bars]
        shape, _ = estimate_channels(data, "estimate", bound_shape="square")
        expected = base.transform_filter(alt.datum.estimate == "expected")
        join = expected.mark_rule(color="#444", strokeWidth=1, strokeDash=[2, 2]).encode(
            x=x, xOffset=offset, y=y, y2=f"bound_{y_field}:Q")
        # Dark triangles read on a bar of any colour (the bar under each says its hardware);
        # hollow where the design falls back, as everywhere.
        marks = [expected.transform_filter(where).mark_point(
            filled=True, size=80, fill=fill, stroke=stroke, strokeWidth=width,
            opacity=1).encode(x=x, xOffset=offset, y=y, shape=shape, tooltip=tooltip)
            for where, fill, stroke, width in ((own, "#222", "white", 1),
                                               (~own, "white", "#222", 2))]
        return [bars, join, *marks]

    in_ms = {"latency_ms": "datum.latency_s * 1000"}
    if calibrated:
        in_ms["bound_latency_ms"] = "datum.bound_latency_s * 1000"
    latency = panel("latency_ms", "latency (ms)", formats,
                    alt.Chart().transform_calculate(**in_ms))
    speed = [*panel("speedup", "speedup over dense (x)", sparse_formats,
                    alt.Chart().transform_filter(alt.datum.format != "dense")),
             alt.Chart().mark_rule(color="#444", strokeDash=[4, 3]).encode(y=alt.datum(1))]
    faded = "faded bars and hollow triangles" if calibrated else "faded bars"
    note = [line.replace("hollow markers", faded) for line in fallback_note(
        bound_rows.drop_duplicates(["hardware", "model", "format"]),
        ("hardware", "model", "format"))]
    heads = ("Speed-of-light latency", "Speedup over dense on the same hardware")
    if calibrated:
        note.append(expectation_note(data, "bars: the bound (speed of light); triangles, "
                                            "joined to their bar by a dotted line"))
        heads = ("Latency: the bound (bars) and the expectation (triangles)",
                 "Speedup over dense on the same hardware: the bound (bars) and the "
                 "expectation (triangles)")
    # Each panel's bars fill its own format bands: the speedup panel has no dense band, so a
    # shared offset scale (sized to the latency panel's narrower bands) would push its bars
    # off their format's tick.
    return alt.vconcat(
        facet(alt.layer(*latency, data=inline), heads[0]),
        facet(alt.layer(*speed, data=inline), heads[1]),
    ).resolve_scale(xOffset="independent").properties(title=chart_title(
        "Latency and speedup by hardware"
        + (", the bound and the expectation" if calibrated else ""),
        context_words(data, ("model", "batch", "fusion", "scope")), note))


# --- 5b. energy per inference by unit and by traffic class against batch ------------------------

#: The two stacks of :func:`energy_breakdown_data`: (breakdown, part, column of ``energy_frame``);
#: each stack sums to ``energy_j`` (compute units, data movement and static energy in the first;
#: weights, index, features, compute and static in the second).
_ENERGY_PARTS = (
    ("by unit", "tensor core", ("energy_tensor_j",)),
    ("by unit", "sparse tensor core", ("energy_sparse_tensor_j",)),
    ("by unit", "vector cores", ("energy_vector_j",)),
    ("by unit", "data movement", ("energy_weights_j", "energy_index_j", "energy_features_j")),
    ("by unit", "static", ("energy_static_j",)),
    ("by traffic class", "weights", ("energy_weights_j",)),
    ("by traffic class", "index", ("energy_index_j",)),
    ("by traffic class", "features", ("energy_features_j",)),
    ("by traffic class", "compute", ("energy_tensor_j", "energy_sparse_tensor_j",
                                     "energy_vector_j")),
    ("by traffic class", "static", ("energy_static_j",)),
)
_ENERGY_COLORS = {"tensor core": "#1f77b4", "sparse tensor core": "#17becf",
                  "vector cores": "#9467bd", "data movement": "#ff7f0e", "static": "#7f7f7f",
                  "weights": "#2ca02c", "index": "#d62728", "features": "#e377c2",
                  "compute": "#1f77b4"}


def energy_breakdown_data(frame: pd.DataFrame) -> pd.DataFrame:
    """Energy per inference split by unit and by traffic class, per design, against batch.

    ``frame``: ``dse.roofline.energy_frame`` rows (``dse.roofline.evaluate_energy``) of one
    model, fusion and scope; any hardware, formats and batches. One row per design and part:
    ``model, hardware, format, batch, fusion, scope, breakdown`` (``by unit`` or ``by traffic
    class``), ``part``, ``energy_per_inference_j`` (the part's joules per sample),
    ``share`` (of the design's energy) and ``total_per_inference_j``; then ``power_capped``,
    ``energy_unpriced`` and the fallback fields. Each breakdown's parts sum to the design's
    ``energy_per_inference_j``; parts zero in every design are left out. Sorted by hardware,
    format (pattern order), batch, breakdown and part order.
    """
    builder = "energy_breakdown_data"
    columns = {c for _, _, cs in _ENERGY_PARTS for c in cs}
    require_columns(frame, ("model", "hardware", "format", "batch", "energy_j", *sorted(columns)),
             builder)
    one_value(frame, ("model", "fusion", "scope"), builder)
    batch = frame["batch"].to_numpy(dtype=np.float64)
    energy = frame["energy_j"].to_numpy(dtype=np.float64)
    design = {
        **design_columns(frame, ("model", "hardware")),
        "format": as_text(frame["format"]).to_numpy(),
        "batch": frame["batch"].to_numpy(dtype=np.int64),
        **design_columns(frame, ("fusion", "scope")),
    }
    extra = {
        "power_capped": (frame["power_capped"].to_numpy(dtype=bool) if "power_capped" in frame
                         else np.zeros(len(frame), dtype=bool)),
        "energy_unpriced": (as_text(frame["energy_unpriced"]).fillna("").to_numpy()
                            if "energy_unpriced" in frame else np.full(len(frame), "")),
        **fallback_columns(frame),
    }
    parts = []
    for order, (breakdown, part, cols) in enumerate(_ENERGY_PARTS):
        joules = sum(frame[c].to_numpy(dtype=np.float64) for c in cols)
        if not (joules > 0).any():
            continue
        parts.append(pd.DataFrame({
            **design, "breakdown": breakdown, "part": part, "part_order": order,
            "energy_per_inference_j": joules / batch,
            "share": np.divide(joules, energy, out=np.full(len(frame), np.nan),
                               where=energy > 0),
            "total_per_inference_j": energy / batch, **extra}))
    if not parts:
        raise ValueError(f"{builder}: every energy part is zero; the spec prices nothing "
                         "(see energy_unpriced)")
    out = pd.concat(parts, ignore_index=True)
    keys = [k for k in ("hardware", "format", "batch") if k in out] + ["part_order"]
    out = sorted_rows(out, keys)
    return out.drop(columns="part_order")


def energy_breakdown_chart(data: pd.DataFrame) -> alt.VConcatChart:
    """Two panels of stacked bars against batch (energy per inference, mJ): by unit, and by
    traffic class; a column per format and a row per hardware. The title names the model,
    hardware, fusion and scope where fixed, the subtitle what energy leaves out (a lower bound
    there) and the designs whose power limit binds."""
    inline = inline_data(data)
    formats = format_order(data["format"])
    batches = sorted({int(b) for b in data["batch"]})
    several_hw = "hardware" in data and data["hardware"].nunique() > 1
    tooltip = ["hardware:N", "format:N", "batch:O", "part:N",
               alt.Tooltip("energy_mj:Q", title="energy/inference (mJ)", format=".4~g"),
               alt.Tooltip("share:Q", format=".1%"),
               alt.Tooltip("total_mj:Q", title="total (mJ)", format=".4~g")]

    def panel(breakdown: str) -> alt.FacetChart:
        order = [p for b, p, _ in _ENERGY_PARTS if b == breakdown and p in set(data["part"])]
        bars = alt.Chart().transform_filter(alt.datum.breakdown == breakdown).transform_calculate(
            energy_mj="datum.energy_per_inference_j * 1000",
            total_mj="datum.total_per_inference_j * 1000",
            part_rank=f"indexof({json.dumps(order)}, datum.part)").mark_bar(
            stroke="#444", strokeWidth=0.3).encode(
            x=alt.X("batch:O", title="batch size", sort=batches,
                    axis=alt.Axis(labelAngle=0)),
            y=alt.Y("energy_mj:Q", title="energy per inference (mJ)", stack="zero"),
            color=alt.Color("part:N", sort=order, title=breakdown,
                            scale=alt.Scale(domain=order,
                                            range=[_ENERGY_COLORS[p] for p in order])),
            order=alt.Order("part_rank:Q"), tooltip=tooltip)
        width = max(120, min(FACET_WIDTH, 36 * len(batches)))
        facet = {"column": alt.Column("format:N", sort=formats, title=None)}
        if several_hw:
            facet["row"] = alt.Row("hardware:N", title=None)
        return alt.layer(bars, data=inline).properties(width=width, height=170).facet(
            **facet).properties(title=f"Energy per inference {breakdown}")

    notes = []
    unpriced = sorted({g.strip() for gaps in data.get("energy_unpriced", [])
                       for g in str(gaps).split(";") if g.strip() not in ("", "nan", "None")})
    if unpriced:
        notes.append("a lower bound: the spec has no figure for " + ", ".join(unpriced))
    if "power_capped" in data and data["power_capped"].astype(bool).any():
        capped = data[data["power_capped"].astype(bool)].drop_duplicates(
            ["hardware", "format", "batch"])
        notes.append("the board power limit binds (latency stretched) for "
                     + listed([f"{r.format} at batch {r.batch}"
                                + (f" on {r.hardware}" if several_hw else "")
                                for r in capped.itertuples(index=False)]))
    notes += [line.replace("hollow markers", "bars")
              for line in fallback_note(data.drop_duplicates(["hardware", "format", "batch"]),
                                         ("hardware", "format"))]
    return alt.vconcat(panel("by unit"), panel("by traffic class")).resolve_scale(
        color="independent").properties(title=chart_title(
            "Energy per inference by unit and by traffic class against batch",
            context_words(data, ("model", "hardware", "fusion", "scope")), notes))
