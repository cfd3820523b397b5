"""The classic roofline: per-op points under the roofs of the units they run on, with the
expected and measured kernels beside the bound when calibrated."""

from __future__ import annotations

import json
from collections.abc import Iterable

import altair as alt
import numpy as np
import pandas as pd

import accelerator_models
from dse.roofline import DEFAULT_NUMERICS, Numerics, peaks

from ..calibration import CARRIED_OVER, is_calibration_fallback
from .design import (
    as_text,
    chart_title,
    context_words,
    fixed_value,
    format_info,
    format_order,
    inline_data,
    one_value,
    require_columns,
)

__all__ = [
    "BOUND_LABEL",
    "roofline_chart",
    "roofline_data",
]

# Units and resources in words, for legends.
_UNIT_WORDS = {"tensor": "tensor core", "sparse_tensor": "sparse tensor core",
               "vector": "vector cores", "dram": "DRAM"}


# --- 2. the classic roofline with per-op points -------------------------------------------------

def roofline_data(layers: pd.DataFrame, accelerator, numerics: Numerics = DEFAULT_NUMERICS,
                  samples: int = 32, *, expected: pd.DataFrame | None = None,
                  measured: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per-op points and the roofs of one accelerator, as one tidy frame.

    ``layers``: rows of ``dse.evaluate_layers`` for one hardware (any models, formats).
    ``accelerator``: an ``accelerator_models.Accelerator`` or a catalog name (``"a100"``);
    ``numerics`` are the evaluation's own (``dse.Numerics``): the roofs are the peaks the
    roofline divided by (``dse.roofline.peaks``).

    Columns: ``series`` (``op``, ``roof`` or ``knee``), ``roof`` (the roof's name, e.g.
    ``tensor fp16``; null on op rows), ``model, format, op, unit, bound`` (null on roof and
    knee rows), ``intensity`` (FLOP per DRAM byte) and ``flops_per_s``.

    - op rows: ``intensity = flops / dram_bytes``, ``flops_per_s = flops / time_s`` (the
      speed-of-light throughput the op attains, in useful FLOPs). Ops with zero FLOPs or zero
      DRAM bytes are dropped: they have no place on log-log axes.
    - roof rows: ``min(peak, bandwidth x intensity)`` at ``samples`` intensities spaced
      geometrically over the ops' range (widened by 2x each way and to include every knee),
      plus the knee itself, so the line's corner is exact. Roofs: the tensor core, the sparse
      tensor core when its ``nonzero_rate`` is not 1 (else it is the tensor roof), the vector
      cores at ``vector_dtype``, and at ``csr_dtype`` when that differs.
    - knee rows: one a roof, ``intensity = peak / bandwidth``, ``flops_per_s = peak``.

    More columns: ``hardware`` (the accelerator's name), ``batch, fusion, scope`` (from
    ``layers``; null on roof and knee rows unless one value, and roof and knee rows repeat
    per batch when ``layers`` holds several), ``fallback`` (the op's, as ``evaluate_layers``
    gives it: '', ``shape``, ``hw:dense``, ``hw:csr``), ``unit_label`` (the unit in words),
    ``roof_label`` (the roof in words, for the legend) and ``used``: on roof and knee rows,
    whether an op runs on that roof (the vector CSR roof carries CSR work: unstructured
    formats and ``hw:csr`` fallbacks); the chart draws only those.

    The expectation beside the bound (``dse report --calibrated``):

    - ``expected``: rows of ``dse.calibrate.expected.expected_layers`` (unfused, same
      hardware) add ``series = expected`` rows, one per op: ``intensity = flops /
      dram_bytes`` of the unfused op, ``flops_per_s = flops / expected_s``, with
      ``expected_s``, ``time_s`` (the op's unfused bound), ``predictor``, ``kernel``,
      ``validated_rmspe``, ``calibration``, ``calibration_fallback`` (priced without the
      family's own kernel data: :func:`reports.calibration.is_calibration_fallback`) and
      ``bound_intensity``, ``bound_flops_per_s`` (the op's bound point in this frame, for the
      connector the chart draws); ``fusion`` is null on them (the expectation is unfused).
    - ``measured``: rows of :func:`reports.calibration.measured_data` add ``series =
      measured`` rows as they are.

    Both widen the roofs' range to their intensities, and set ``series_label`` (the legend's
    words for bound, expected and measured) on every point row.
    """
    builder = "roofline_data"
    require_columns(layers, ("op", "format", "unit", "flops", "dram_bytes", "time_s"), builder)
    one_value(layers, ("hardware",), builder)
    if samples < 2:
        raise ValueError(f"{builder}: samples={samples}; give at least 2")
    acc = accelerator_models.load(accelerator) if isinstance(accelerator, str) else accelerator
    p = peaks(acc, numerics)
    bandwidth = float(p.dram_bytes_per_s)
    tensor, vector = f"tensor {numerics.dtype}", f"vector {numerics.vector_dtype}"
    sparse, csr = tensor, vector  # the roofs they share unless their peaks differ
    roofs = {tensor: float(p.tensor)}
    words = {tensor: f"tensor core {numerics.dtype}"}
    if p.sparse_tensor != p.tensor:
        sparse = f"sparse tensor {numerics.dtype} (x{acc.nonzero_rate:g})"
        roofs[sparse] = float(p.sparse_tensor)
        words[sparse] = (f"sparse tensor core {numerics.dtype} (x{acc.nonzero_rate:g} "
                         "per nonzero FLOP)")
    roofs[vector] = float(p.vector)
    words[vector] = f"vector cores {numerics.vector_dtype}"
    if numerics.csr_dtype != numerics.vector_dtype:
        csr = f"vector {numerics.csr_dtype} (CSR)"
        roofs[csr] = float(p.csr)
        words[csr] = f"vector cores {numerics.csr_dtype} (CSR)"

    flops = layers["flops"].to_numpy(dtype=np.float64)
    nbytes = layers["dram_bytes"].to_numpy(dtype=np.float64)
    time = layers["time_s"].to_numpy(dtype=np.float64)
    keep = (flops > 0) & (nbytes > 0) & (time > 0)
    kept = layers[keep]
    fallback = as_text(kept["fallback"]).fillna("") if "fallback" in kept \
        else pd.Series("", index=kept.index, dtype=object)
    points = pd.DataFrame({
        "series": "op",
        "roof": None,
        "model": as_text(kept["model"]) if "model" in kept else None,
        "format": as_text(kept["format"]),
        "op": as_text(kept["op"]),
        "unit": as_text(kept["unit"]),
        "bound": as_text(kept["bound"]) if "bound" in kept else None,
        "intensity": flops[keep] / nbytes[keep],
        "flops_per_s": flops[keep] / time[keep],
        "fallback": fallback,
    })
    points["unit_label"] = points["unit"].map(lambda u: _UNIT_WORDS.get(u, u))
    # Which roof each op runs under: CSR work (unstructured formats' own GEMMs, hw:csr
    # fallbacks) on the vector cores at the CSR dtype, other vector work at the vector dtype.
    gemm = kept["kind"].isin(["conv", "linear", "matmul"]).to_numpy() if "kind" in kept \
        else np.ones(len(kept), dtype=bool)
    unstructured = points["format"].map(lambda n: format_info(n)[0] == "unstructured")
    is_csr = (points["unit"] == "vector") & ((points["fallback"] == "hw:csr")
                                             | (unstructured & gemm))
    on = [(tensor, points["unit"] == "tensor"), (sparse, points["unit"] == "sparse_tensor"),
          (csr, is_csr), (vector, (points["unit"] == "vector") & ~is_csr)]
    used = dict.fromkeys(roofs, False)
    for name, ops_on in on:
        used[name] = used[name] or bool(ops_on.any())
    if not len(points):
        used = dict.fromkeys(roofs, True)
    if sparse == tensor and used[tensor] and (points["unit"] == "sparse_tensor").any():
        words[tensor] += " (= sparse tensor core)"
    if csr == vector and is_csr.any():
        words[vector] += " (and CSR)"

    for column in ("batch", "fusion", "scope"):
        if column in layers.columns:
            values = layers.loc[keep, column]
            points[column] = values.to_numpy(dtype=np.int64) if column == "batch" \
                else as_text(values).to_numpy()
    extra = []
    if expected is not None:
        extra.append(_expected_points(expected, points, acc.name, builder))
    if measured is not None:
        require_columns(measured, ("series", "intensity", "flops_per_s", "match"), builder)
        extra.append(measured.copy())
    extra = [e for e in extra if len(e)]
    knees = {name: peak / bandwidth for name, peak in roofs.items()}
    span = list(knees.values())
    for frame in [points, *extra]:
        if len(frame):
            span += [frame["intensity"].min() / 2.0, frame["intensity"].max() * 2.0]
    # Past the highest knee too, so that every roof shows its flat part.
    low, high = min(span), max(*span, 4.0 * max(knees.values()))
    grid = np.geomspace(low, high, samples)
    lines, corners = [], []
    for name, peak in roofs.items():
        x = np.unique(np.append(grid, knees[name]))
        lines.append(pd.DataFrame({"series": "roof", "roof": name, "intensity": x,
                                   "flops_per_s": np.minimum(peak, bandwidth * x)}))
        corners.append({"series": "knee", "roof": name, "intensity": knees[name],
                        "flops_per_s": peak})
    roof_rows = pd.concat([*lines, pd.DataFrame(corners)], ignore_index=True)
    roof_rows["roof_label"] = roof_rows["roof"].map(words)
    roof_rows["used"] = roof_rows["roof"].map(used)
    if "batch" in points and points["batch"].nunique() > 1:
        # A copy of the roofs per batch, so that every batch's panel draws them.
        roof_rows = pd.concat([roof_rows.assign(batch=b) for b in sorted(set(points["batch"]))],
                              ignore_index=True)
    else:
        for column in ("batch", "fusion", "scope"):
            if column in points and len(points):
                roof_rows[column] = points[column].iloc[0]
    for column in ("fusion", "scope"):
        if column in points and points[column].nunique() == 1:
            roof_rows[column] = points[column].iloc[0]
    parts = [points, *extra, roof_rows]
    out = pd.concat([p for p in parts if len(p)], ignore_index=True)
    out["hardware"] = acc.name
    columns = ["series", "roof", "model", "format", "op", "unit", "bound", "intensity",
               "flops_per_s", "hardware", "batch", "fusion", "scope", "fallback",
               "unit_label", "roof_label", "used"]
    if extra:
        out["series_label"] = out["series"].map(_series_labels(out))
        if "calibration_fallback" in out:
            out["calibration_fallback"] = out["calibration_fallback"].astype(object).where(
                out["calibration_fallback"].notna(), False).astype(bool)
        columns += ["series_label", "time_s", "expected_s", "predictor", "kernel",
                    "validated_rmspe", "calibration", "calibration_fallback",
                    "bound_intensity", "bound_flops_per_s", "measured_s", "ops",
                    "implementation", "kernel_format", "dtype", "m", "k", "n", "groups", "idle",
                    "cache", "match", "dataset", "device_name"]
    return out[[c for c in columns if c in out.columns]]


def _expected_points(expected: pd.DataFrame, points: pd.DataFrame, hardware: str,
                     builder: str) -> pd.DataFrame:
    """``series = expected`` rows of :func:`roofline_data` from ``expected_layers`` rows."""
    require_columns(expected, ("op", "format", "flops", "dram_bytes", "time_s", "expected_s",
                        "predictor", "calibration"), builder)
    one_value(expected, ("hardware",), builder)
    if "hardware" in expected.columns and len(expected) \
            and str(expected["hardware"].iloc[0]) != hardware:
        raise ValueError(f"{builder}: the expected rows are of hardware "
                         f"{expected['hardware'].iloc[0]}, the roofs of {hardware}; give "
                         "expected_layers rows of the same hardware")
    flops = expected["flops"].to_numpy(dtype=np.float64)
    nbytes = expected["dram_bytes"].to_numpy(dtype=np.float64)
    seconds = expected["expected_s"].to_numpy(dtype=np.float64)
    keep = (flops > 0) & (nbytes > 0) & (seconds > 0)
    kept = expected[keep]
    out = pd.DataFrame({
        "series": "expected",
        "model": as_text(kept["model"]).to_numpy() if "model" in kept else None,
        "format": as_text(kept["format"]).to_numpy(),
        "op": as_text(kept["op"]).to_numpy(),
        "unit": as_text(kept["unit"]).to_numpy() if "unit" in kept else None,
        "bound": as_text(kept["bound"]).to_numpy() if "bound" in kept else None,
        "intensity": flops[keep] / nbytes[keep],
        "flops_per_s": flops[keep] / seconds[keep],
        "fallback": as_text(kept["fallback"]).fillna("").to_numpy() if "fallback" in kept
        else "",
        "time_s": kept["time_s"].to_numpy(dtype=np.float64),
        "expected_s": seconds[keep],
        "predictor": as_text(kept["predictor"]).to_numpy(),
        "kernel": as_text(kept["kernel"]).fillna("").to_numpy() if "kernel" in kept else "",
        "validated_rmspe": kept["validated_rmspe"].to_numpy(dtype=np.float64)
        if "validated_rmspe" in kept else np.nan,
        "calibration": as_text(kept["calibration"]).fillna("").to_numpy(),
        "calibration_fallback": [is_calibration_fallback(n) for n in kept["calibration"]],
    })
    out["unit_label"] = out["unit"].map(lambda u: _UNIT_WORDS.get(u, u))
    if "batch" in kept:
        out["batch"] = kept["batch"].to_numpy(dtype=np.int64)
    if "scope" in kept:
        out["scope"] = as_text(kept["scope"]).to_numpy()
    keys = [c for c in ("model", "format", "batch", "op") if c in out and c in points]
    bound = points[[*keys, "intensity", "flops_per_s"]].drop_duplicates(keys).rename(
        columns={"intensity": "bound_intensity", "flops_per_s": "bound_flops_per_s"})
    return out.merge(bound, on=keys, how="left") if keys and len(bound) else out


#: Legend words of the point series of a calibrated roofline.
BOUND_LABEL = "bound: speed of light"


def _series_labels(data: pd.DataFrame) -> dict[str, str]:
    """``series`` -> the legend's words: the bound, the expectation with its predictors, the
    measured kernels with their dataset and whether their shapes are the trace's."""
    labels = {"op": BOUND_LABEL}
    exp = data[data["series"] == "expected"]
    if len(exp):
        device = sorted({p.split(":")[0] for p in exp["predictor"].dropna()})
        labels["expected"] = f"expected: predictors {', '.join(device)}"
    mes = data[data["series"] == "measured"]
    if len(mes):
        name = fixed_value(mes, "dataset") or "dataset"
        labels["measured"] = (f"measured: {name}, same shape as an op"
                              if (mes["match"] == "same shape").all()
                              else f"measured: {name}, every shape (none is an op's)")
    return labels


def _knee(intensity: float) -> str:
    """A knee's intensity in three significant digits, never in exponent form."""
    text = f"{intensity:.3g}"
    return f"{intensity:,.0f}" if "e" in text else text


def roofline_chart(data: pd.DataFrame) -> alt.LayerChart | alt.FacetChart:
    """Log-log roofline: the roofs the ops run under as lines (``used``), knees as diamonds
    (their intensities in the roofs' legend), ops coloured by format and shaped by the unit
    they run on; ops that fall back are hollow. A column per batch when the frame holds
    several."""
    formats = format_order(data.loc[data["series"] == "op", "format"].dropna())
    x = alt.X("intensity:Q", title="arithmetic intensity (FLOP/byte)",
              scale=alt.Scale(type="log"), axis=alt.Axis(format="~g"))
    y = alt.Y("flops_per_s:Q", title="attainable throughput (FLOP/s)",
              scale=alt.Scale(type="log"), axis=alt.Axis(format="~s"))
    roof_field = "roof_label" if "roof_label" in data.columns else "roof"
    shown = alt.datum.used if "used" in data.columns else alt.expr.isValid(alt.datum.roof)
    base = alt.Chart().encode(x=x, y=y)
    # Each knee is named in the roofs' legend, not beside its diamond, where the ops crowd.
    knee_rows = data[data["series"] == "knee"]
    if "used" in data.columns:
        knee_rows = knee_rows[knee_rows["used"].astype(bool)]
    knee_words = {str(name): f"{name}, knee {_knee(x)} FLOP/B" for name, x in zip(
        knee_rows[roof_field], knee_rows["intensity"], strict=True) if isinstance(name, str)}
    legend_words = " : ".join(f"datum.value == {json.dumps(name)} ? {json.dumps(words)}"
                              for name, words in knee_words.items())
    roofs = base.transform_filter((alt.datum.series == "roof") & shown).mark_line(
        color="#444", strokeWidth=1.5).encode(
        strokeDash=alt.StrokeDash(f"{roof_field}:N", title="roof", legend=alt.Legend(
            labelLimit=440, **({"labelExpr": legend_words + " : datum.label"}
                               if legend_words else {}))),
        detail=f"{roof_field}:N")
    knee_filter = (alt.datum.series == "knee") & shown
    knees = base.transform_filter(knee_filter).mark_point(
        shape="diamond", color="#444", filled=True, size=50).encode(
        tooltip=[f"{roof_field}:N",
                 alt.Tooltip("intensity:Q", title="knee (FLOP/byte)", format=".4~g"),
                 alt.Tooltip("flops_per_s:Q", title="peak (FLOP/s)", format=".4~s")])
    unit_field = "unit_label" if "unit_label" in data.columns else "unit"
    color = alt.Color("format:N", sort=formats, scale=alt.Scale(domain=formats),
                      title="format")
    tooltip = ["model:N", "format:N", "op:N", f"{unit_field}:N", "bound:N",
               alt.Tooltip("intensity:Q", format=".4~g"),
               alt.Tooltip("flops_per_s:Q", format=".4~s")]
    if "fallback" in data.columns:
        tooltip.append(alt.Tooltip("fallback:N", title="falls back"))
    is_op = alt.datum.series == "op"
    own = is_op & ((alt.datum.fallback == "") | ~alt.expr.isValid(alt.datum.fallback))
    ops = base.transform_filter(own).mark_point(filled=True, size=35, opacity=0.75).encode(
        color=color, shape=alt.Shape(f"{unit_field}:N", title="unit"), tooltip=tooltip)
    fell = base.transform_filter(is_op & ~own).mark_point(
        filled=False, size=45, opacity=0.9, strokeWidth=1.5).encode(
        color=color, shape=alt.Shape(f"{unit_field}:N", title="unit"), tooltip=tooltip)
    ops_only = data[data["series"] == "op"]
    models = sorted(set(ops_only["model"].dropna())) if "model" in ops_only else []
    head = ", ".join(models)
    context = context_words(data, ("hardware", "batch", "fusion", "scope"))
    note = ""
    if "fallback" in ops_only and (ops_only["fallback"].fillna("") != "").any():
        words = {"shape": "dense (shape)", "hw:dense": "dense (hardware)",
                 "hw:csr": "CSR (hardware)"}
        falls = ops_only[ops_only["fallback"].fillna("") != ""]
        counts = falls.groupby(["format", "fallback"])["op"].nunique()
        note = "hollow markers: ops that do not run the format's kernel (" + "; ".join(
            f"{f}: {n} ops {words.get(why, why)}" for (f, why), n in counts.items()) + ")"
    if "series_label" in data.columns:
        color = alt.Color("format:N", sort=formats, scale=alt.Scale(domain=formats),
                          title="format", legend=alt.Legend(symbolOpacity=1))
        points, notes = _calibrated_points(data, base, color, tooltip, note)
        layered = alt.layer(roofs, knees, *points, data=inline_data(data))
        title = chart_title("Roofline: per-op bound, expected and measured throughput against the "
                       "roofs of the units used", f"{head} on {context}" if head else context,
                       notes)
    else:
        layered = alt.layer(roofs, knees, ops, fell, data=inline_data(data))
        title = chart_title("Roofline: per-op speed of light against the roofs of the units used",
                       f"{head} on {context}" if head else context, note)
    if "batch" in data.columns and data["batch"].nunique() > 1:
        return layered.properties(width=420, height=320).facet(
            column=alt.Column("batch:O", title="batch")).properties(title=title)
    return layered.properties(width=520, height=360, title=title)


_SERIES_SHAPES = {"op": "circle", "expected": "triangle-down", "measured": "cross"}


def _percent_list(pairs: Iterable[tuple[str, float]]) -> str:
    return ", ".join(f"{name} {value:.0%}" for name, value in pairs)


def _calibrated_points(data: pd.DataFrame, base: alt.Chart, color: alt.Color, tooltip: list,
                       bound_note: str) -> tuple[list, list[str]]:
    """The point layers of a calibrated roofline (bound circles, expected triangles joined to
    their bound, measured crosses) and the subtitle lines that say what each is."""
    present = [s for s in ("op", "expected", "measured") if (data["series"] == s).any()]
    labels = data[data["series"].isin(present)].drop_duplicates("series").set_index(
        "series")["series_label"]
    shape = alt.Shape("series_label:N", title="point", sort=[labels[s] for s in present],
                      scale=alt.Scale(domain=[labels[s] for s in present],
                                      range=[_SERIES_SHAPES[s] for s in present]),
                      legend=alt.Legend(labelLimit=420))
    is_op = alt.datum.series == "op"
    own = is_op & ((alt.datum.fallback == "") | ~alt.expr.isValid(alt.datum.fallback))
    bound_tip = [*tooltip, alt.Tooltip("series_label:N", title="point")]
    back = []  # drawn first: connectors, then measured kernels that are not the trace's ops
    layers = [
        base.transform_filter(own).mark_point(filled=True, size=35, opacity=0.75).encode(
            color=color, shape=shape, tooltip=bound_tip),
        base.transform_filter(is_op & ~own).mark_point(
            filled=False, size=45, opacity=0.9, strokeWidth=1.5).encode(
            color=color, shape=shape, tooltip=bound_tip)]
    notes = [bound_note.replace("hollow markers", "hollow circles")] if bound_note else []
    expected = data[data["series"] == "expected"]
    if len(expected):
        is_exp = alt.datum.series == "expected"
        fell = alt.datum.calibration_fallback == True  # noqa: E712 - a Vega expression
        tip = ["model:N", "format:N", "op:N", "unit_label:N",
               alt.Tooltip("expected_s:Q", title="expected (s)", format=".4~g"),
               alt.Tooltip("time_s:Q", title="bound, unfused (s)", format=".4~g"),
               alt.Tooltip("flops_per_s:Q", title="expected FLOP/s", format=".4~s"),
               "predictor:N", "kernel:N",
               alt.Tooltip("validated_rmspe:Q", title="held-out RMSPE", format=".0%"),
               alt.Tooltip("calibration:N", title="priced how")]
        back.append(base.transform_filter(
            is_exp & alt.expr.isValid(alt.datum.bound_intensity)).mark_rule(
            strokeWidth=1, opacity=0.3).encode(
            x2="bound_intensity:Q", y2="bound_flops_per_s:Q", color=color))
        layers += [
            base.transform_filter(is_exp & ~fell).mark_point(
                filled=True, size=40, opacity=0.8).encode(color=color, shape=shape,
                                                          tooltip=tip),
            base.transform_filter(is_exp & fell).mark_point(
                filled=False, size=45, opacity=0.9, strokeWidth=1.5).encode(
                color=color, shape=shape, tooltip=tip)]
        rmspe = expected.dropna(subset=["validated_rmspe"]).drop_duplicates("predictor")
        errors = _percent_list((":".join(p.split(":")[1:-1]), r) for p, r in zip(
            rmspe["predictor"], rmspe["validated_rmspe"], strict=True))
        device = ", ".join(sorted({p.split(":")[0] for p in expected["predictor"]}))
        notes.append(f"triangles: expected time from the kernel predictors {device}, kernels "
                     "one op at a time (unfused), joined by a line to the op's bound; an "
                     "expectation, not a bound"
                     + (f" (held-out RMSPE {errors})" if errors else ""))
        fallbacks = expected[expected["calibration_fallback"].astype(bool)]
        if len(fallbacks):
            counts = fallbacks.assign(note=[
                "; ".join(n for n in str(c).split("; ") if not n.startswith(
                    CARRIED_OVER))
                for c in fallbacks["calibration"]]).groupby("note")["op"].nunique()
            notes.append("hollow triangles: priced without the family's own kernel data ("
                         + "; ".join(f"{n} ops: {why}" for why, n in counts.items()) + ")")
        carried = sorted({n for c in expected["calibration"] for n in str(c).split("; ")
                          if n.startswith(CARRIED_OVER)})
        if carried:
            notes.append("expected on another spec than the predictors' reference: "
                         + "; ".join(carried))
    measured = data[data["series"] == "measured"]
    if len(measured):
        elsewhere = len(expected) and any(n.startswith(CARRIED_OVER) for c in
                                          expected["calibration"] for n in str(c).split("; "))
        is_mes = alt.datum.series == "measured"
        tip = ["format:N", "op:N", alt.Tooltip("ops:Q", title="ops of this shape"),
               alt.Tooltip("kernel_format:N", title="kernel format"), "implementation:N",
               "m:Q", "k:Q", "n:Q", "groups:Q", "dtype:N",
               alt.Tooltip("measured_s:Q", title="measured median (s)", format=".4~g"),
               alt.Tooltip("flops_per_s:Q", title="measured FLOP/s", format=".4~s"),
               alt.Tooltip("intensity:Q", format=".4~g"), "idle:N", "cache:N", "match:N"]
        same = (measured["match"] == "same shape").all()
        name = fixed_value(measured, "dataset") or "the dataset"
        where = fixed_value(measured, "device_name")
        dtype = fixed_value(measured, "dtype")
        cache = fixed_value(measured, "cache") if "cache" in measured else None
        calls = f"isolated calls{f', {cache} cache' if cache else ''}"
        shapes = len(measured.drop_duplicates(["kernel_format", "m", "k", "n", "groups"]))
        about = f"{name}" + (f" ({where}" + (f", {dtype}" if dtype else "") + ")"
                             if where else "")
        if same:
            layers.append(base.transform_filter(is_mes).mark_point(
                filled=True, size=80, opacity=0.9, stroke="black", strokeWidth=0.7).encode(
                color=color, shape=shape, tooltip=tip))
            models = sorted(set(data.loc[data["series"] == "op", "model"].dropna()))
            missing = [m for m in models if m not in set(measured["model"].dropna())]
            notes.append(f"crosses: measured ({calls}), the fastest kernel of dataset {about} "
                         f"for each of the {shapes} shapes and formats that are ops of the trace "
                         "(same M, K, N, groups and format)"
                         + (f"; none for {', '.join(missing)}" if missing else "")
                         + (f"; measured on that device, not on {fixed_value(data, 'hardware')}"
                            if elsewhere else ""))
        else:
            back.append(base.transform_filter(is_mes).mark_point(
                filled=True, size=30, opacity=0.35, color="#777").encode(
                shape=shape, tooltip=tip))
            notes.append(f"grey crosses: measured ({calls}), the fastest kernel of each of "
                         f"the {shapes} "
                         f"shapes of dataset {about}; none is the shape of an op of the trace, "
                         "so they show what kernels reach on the device, not these ops"
                         + (f"; measured on that device, not on {fixed_value(data, 'hardware')}"
                            if elsewhere else ""))
    return back + layers, notes
