"""The bound mix: the share of time (or ops) that is memory- or compute-bound, per format."""

from __future__ import annotations

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
    facet_by_model,
    fallback_note,
    format_info,
    format_order,
    hw_falls_back,
    inline_data,
    layer_fallbacks,
    one_value,
    require_columns,
    sorted_rows,
)

__all__ = [
    "bound_mix_chart",
    "bound_mix_data",
]

# --- 3. bound mix by format ---------------------------------------------------------------------

def bound_mix_data(layers: pd.DataFrame) -> pd.DataFrame:
    """How many ops, and how much time, are memory- or compute-bound, per model and format.

    ``layers``: rows of ``dse.evaluate_layers`` for one hardware, batch, fusion and scope.
    Columns: ``model, format, block_size`` (the block edge for block formats, NaN otherwise),
    ``bound``, ``ops`` (count), ``time_s`` (sum), ``op_share`` and ``time_share`` (each sums
    to 1 over the bounds of one model and format). Sorted by model, format (pattern order)
    and bound. When ``layers`` has them: the design's fallback fields (``shape_fallback_ops,
    hw_fallback, hw_fallback_ops, fallback``, counted from the ops' ``fallback``),
    ``format_label`` (the format, ``" *"`` added where the hardware falls back) and the design
    columns ``hardware, batch, fusion, scope``. Concatenate the frames of several batches to
    chart them: the chart draws a row per batch.
    """
    builder = "bound_mix_data"
    require_columns(layers, ("model", "format", "bound", "time_s"), builder)
    one_value(layers, ("hardware", "batch", "fusion", "scope"), builder)
    frame = pd.DataFrame({"model": as_text(layers["model"]), "format": as_text(layers["format"]),
                          "bound": as_text(layers["bound"]),
                          "time_s": layers["time_s"].to_numpy(dtype=np.float64)})
    out = frame.groupby(["model", "format", "bound"], sort=False).agg(
        ops=("time_s", "size"), time_s=("time_s", "sum")).reset_index()
    totals = out.groupby(["model", "format"], sort=False)[["ops", "time_s"]].transform("sum")
    design = design_columns(layers, ("hardware", "batch", "fusion", "scope"))
    out["op_share"] = out["ops"] / totals["ops"]
    # A design whose ops all take zero time has no time mix; NaN says so rather than 0/0 noise.
    out["time_share"] = out["time_s"] / totals["time_s"].where(totals["time_s"] > 0)
    out.insert(2, "block_size", out["format"].map(lambda name: format_info(name)[2]))
    out["ops"] = out["ops"].astype(np.int64)
    if "fallback" in layers.columns:
        per_design = layer_fallbacks(layers.assign(model=frame["model"].to_numpy(),
                                                    format=frame["format"].to_numpy()),
                                      ["model", "format"])
        out = out.merge(per_design, on=["model", "format"], how="left")
        marked = np.where(hw_falls_back(out), out["format"] + " *", out["format"])
        out["format_label"] = marked.astype(object)
    for column, values in design.items():
        out[column] = values[0]
    return sorted_rows(out, ["model", "format", "bound"])


def bound_mix_chart(data: pd.DataFrame, share: str = "time_share") -> alt.FacetChart:
    """Stacked bars per format of the share of time (``share="time_share"``) or of ops
    (``"op_share"``) that is memory- or compute-bound; a column per model, a row per batch
    when several. Formats the hardware cannot run are starred and their bars faded."""
    if share not in ("time_share", "op_share"):
        raise ValueError(f"bound_mix_chart: share={share!r}; use 'time_share' or 'op_share'")
    what = "time" if share == "time_share" else "ops"
    labelled = "format_label" in data.columns
    order = format_order(data["format"])
    if labelled:
        names = dict(zip(data["format"], data["format_label"], strict=True))
        order = list(dict.fromkeys(names[f] for f in order))
    tooltip = ["model:N", "format:N", "bound:N", "ops:Q",
               alt.Tooltip("time_s:Q", title="time (s)", format=".3~s"),
               alt.Tooltip("op_share:Q", format=".1%"),
               alt.Tooltip("time_share:Q", format=".1%")]
    if "fallback" in data.columns:
        tooltip.append(alt.Tooltip("fallback:N", title="fallbacks"))
    faded = ~(alt.expr.isValid(alt.datum.hw_fallback_ops) & (alt.datum.hw_fallback_ops > 0))
    bar = alt.Chart().mark_bar(stroke="#444", strokeWidth=0.5).encode(
        x=alt.X("format_label:N" if labelled else "format:N", sort=order, title="format",
                axis=alt.Axis(labelAngle=-40)),
        y=alt.Y(f"{share}:Q", stack="zero", title=f"share of {what}",
                axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("bound:N", title="bound",
                        scale=alt.Scale(domain=["memory", "compute"],
                                        range=["#d62728", "#1f77b4"])),
        opacity=alt.condition(faded, alt.value(1.0), alt.value(0.35)),
        order=alt.Order("bound:N", sort="descending"),
        tooltip=tooltip)
    layered = alt.layer(bar, data=inline_data(data)).properties(width=FACET_WIDTH,
                                                            height=FACET_HEIGHT)
    note = [line.replace("hollow markers", "* and faded bars") for line in
            fallback_note(data.drop_duplicates(["model", "format"]))]
    return facet_by_model(layered, data).properties(title=chart_title(
        f"Memory- and compute-bound share of {what}, by format",
        context_words(data, ("hardware", "batch", "fusion", "scope")), note))
