"""The feature (activation) share of DRAM traffic and the speedup, against batch."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from .design import (
    FACET_WIDTH,
    as_text,
    chart_title,
    context_words,
    design_columns,
    fallback_columns,
    fallback_note,
    format_order,
    inline_data,
    one_value,
    require_columns,
    sorted_rows,
)
from .estimates import estimate_channels, expectation_note, expected_tooltip, with_estimates

__all__ = [
    "feature_share_chart",
    "feature_share_data",
]

# --- 4. feature share and speedup against batch -------------------------------------------------

def feature_share_data(frame: pd.DataFrame) -> pd.DataFrame:
    """Feature (activation) share of DRAM traffic and speedup against batch size.

    ``frame``: rows of ``dse.evaluate`` over several batches, for one hardware, fusion and
    scope. Columns: ``model, format, batch, feature_bytes_share`` (0..1), ``speedup`` and
    ``segment`` (the chart joins points of one model and format by a line only within a
    segment: a new one starts where the batch more than doubles, so a line never implies
    values between batches far apart on the log axis); then, when ``frame`` has them, the
    fallback fields and ``hardware, fusion, scope``. Sorted by model, format (pattern order)
    and batch.

    The bound beside the expectation (``frame`` has ``expected_speedup``: ``dse report``,
    ``dse sweep`` with ``--calibrated``): two rows a design, ``estimate`` ``bound``
    (``speedup`` the bound's) and ``expected`` (the expected speedup), each with
    ``bound_speedup, expected_speedup, expected_by`` (the predictor sets) and the
    expectation's notes; the feature share (traffic, the bound's) is the same on both.
    Segments then run per model, format and estimate; sorted by estimate first.
    """
    builder = "feature_share_data"
    require_columns(frame, ("model", "format", "batch", "feature_bytes_share", "speedup"), builder)
    one_value(frame, ("hardware", "fusion", "scope", "hw_point"), builder)
    out = pd.DataFrame({
        "model": as_text(frame["model"]).to_numpy(),
        "format": as_text(frame["format"]).to_numpy(),
        "batch": frame["batch"].to_numpy(dtype=np.int64),
        "feature_bytes_share": frame["feature_bytes_share"].to_numpy(dtype=np.float64),
        "speedup": frame["speedup"].to_numpy(dtype=np.float64),
        **fallback_columns(frame),
        **design_columns(frame, ("hardware", "fusion", "scope")),
    })
    out = with_estimates(out, frame, ("speedup",), after="format")
    lines = ["estimate", "model", "format"] if "estimate" in out else ["model", "format"]
    out = sorted_rows(out, [*lines, "batch"])
    batch = out["batch"].to_numpy()
    same = np.ones(len(out), dtype=bool)
    same[0] = False
    for column in lines:
        values = out[column].to_numpy()
        same[1:] &= values[1:] == values[:-1]
    near = np.zeros(len(out), dtype=bool)
    near[1:] = batch[1:] <= 2 * batch[:-1]
    out.insert(out.columns.get_loc("speedup") + 1, "segment",
               np.cumsum(~(same & near)).astype(np.int64))
    return out


def feature_share_chart(data: pd.DataFrame) -> alt.VConcatChart:
    """Top row: feature share of DRAM traffic against batch (log x), a colour per format and
    a column per model. Bottom row: speedup over dense against batch, the same layout. Lines
    join only batches at most 2x apart (``segment``); designs the hardware cannot run are
    hollow. With the ``estimate`` column (calibrated) the speedup row draws the bound (solid,
    circles) and the expectation (dashed, triangles), and the legend says which is which."""
    calibrated = "estimate" in data.columns
    formats = format_order(data["format"])
    x = alt.X("batch:Q", title="batch size", scale=alt.Scale(type="log", base=2),
              axis=alt.Axis(format="~g", values=sorted({int(b) for b in data["batch"]})))
    color = alt.Color("format:N", sort=formats, scale=alt.Scale(domain=formats),
                      title="format", legend=alt.Legend(symbolOpacity=1))
    tooltip = ["model:N", "format:N", "batch:Q",
               alt.Tooltip("feature_bytes_share:Q", format=".1%"),
               alt.Tooltip("speedup:Q", format=".3f")]
    if "fallback" in data.columns:
        tooltip.append(alt.Tooltip("fallback:N", title="fallbacks"))
    if calibrated:
        tooltip += [alt.Tooltip("bound_speedup:Q", title="bound speedup", format=".3f"),
                    alt.Tooltip("expected_speedup:Q", title="expected speedup", format=".3f"),
                    *expected_tooltip()]
    own = ~(alt.expr.isValid(alt.datum.hw_fallback_ops) & (alt.datum.hw_fallback_ops > 0))
    inline = inline_data(data)

    def panel(y: alt.Y, title: str, estimates: bool) -> alt.FacetChart:
        base = alt.Chart().encode(x=x, y=y, color=color, tooltip=tooltip)
        if calibrated and not estimates:  # the traffic is the bound's: drawn once
            base = base.transform_filter(alt.datum.estimate == "bound")
        line = base.mark_line().encode(
            detail="segment:N" if "segment" in data.columns else "format:N")
        filled = base.transform_filter(own).mark_point(filled=True)
        hollow = base.transform_filter(~own).mark_point(filled=False, size=70, strokeWidth=2)
        if calibrated and estimates:
            shape, dash = estimate_channels(data, "speedup")
            line, filled, hollow = (line.encode(strokeDash=dash), filled.encode(shape=shape),
                                    hollow.encode(shape=shape))
        layered = alt.layer(line, filled, hollow, data=inline)
        return layered.properties(width=FACET_WIDTH, height=180).facet(
            column=alt.Column("model:N", title=None)).properties(title=title)

    share = panel(alt.Y("feature_bytes_share:Q", title="feature share of DRAM bytes",
                        axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1])),
                  "Features (unprunable) share of DRAM traffic against batch", False)
    speed = panel(alt.Y("speedup:Q", title="speedup over dense (x)",
                        scale=alt.Scale(zero=False)),
                  "Speedup against batch: the bound (solid, circles) and the expectation "
                  "(dashed, triangles)" if calibrated else
                  "Speed-of-light speedup against batch", True)
    joined = "lines join batches at most 2x apart" if "segment" in data.columns else ""
    bound = data[data["estimate"] == "bound"] if calibrated else data
    return alt.vconcat(share, speed).properties(title=chart_title(
        "Feature share of DRAM traffic and speedup against batch",
        ", ".join(p for p in (context_words(data, ("hardware", "fusion", "scope")), joined) if p),
        fallback_note(bound.drop_duplicates(["model", "format"])),
        expectation_note(data, "dashed lines and triangles") if calibrated else ""))
