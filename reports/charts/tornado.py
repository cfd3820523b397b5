"""The tornado: sensitivity of the speedup to one hardware field at a time."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from .design import (
    FALLBACK_FIELDS,
    as_text,
    chart_title,
    context_words,
    fallback_columns,
    inline_data,
    require_columns,
)

__all__ = [
    "tornado_chart",
    "tornado_data",
]

# --- 8. tornado: sensitivity of the speedup to one field at a time ------------------------------

def tornado_data(rows: pd.DataFrame) -> pd.DataFrame:
    """One-at-a-time sensitivity, tidy: two rows a field, largest swing first.

    ``rows``: one row a field with ``field, low_value, high_value, low_speedup,
    high_speedup, base_speedup``. Columns: ``field, side`` (``low``/``high``), ``value``
    (the field's value on that side), ``speedup`` and ``delta`` (= speedup - base_speedup).
    Fields are ordered by their largest ``|delta|``, descending (ties keep input order); low
    before high within a field. The base design's ``model, hardware, format, batch, fusion,
    scope`` and fallback fields follow when ``rows`` has them (one design).
    """
    builder = "tornado_data"
    require_columns(rows, ("field", "low_value", "high_value", "low_speedup", "high_speedup",
                    "base_speedup"), builder)
    parts = []
    for side in ("low", "high"):
        speedup = rows[f"{side}_speedup"].to_numpy(dtype=np.float64)
        parts.append(pd.DataFrame({
            "field": as_text(rows["field"]).to_numpy(),
            "side": side,
            "value": rows[f"{side}_value"].to_numpy(dtype=np.float64),
            "speedup": speedup,
            "delta": speedup - rows["base_speedup"].to_numpy(dtype=np.float64),
            "_row": np.arange(len(rows)),
            "_side": 0 if side == "low" else 1,
        }))
    out = pd.concat(parts, ignore_index=True)
    out["_swing"] = out.groupby("_row")["delta"].transform(lambda d: d.abs().max())
    out = out.sort_values(["_swing", "_row", "_side"], ascending=[False, True, True],
                          kind="stable")
    out = out.drop(columns=["_row", "_side", "_swing"]).reset_index(drop=True)
    # The base design, when the rows name it: the chart's title says what was perturbed.
    for column in ("model", "hardware", "format", "batch", "fusion", "scope",
                   *FALLBACK_FIELDS):
        if column in rows.columns and len(rows):
            value = rows[column].iloc[0]
            out[column] = value.item() if hasattr(value, "item") else value
    if all(c in out.columns for c in FALLBACK_FIELDS):
        out["fallback"] = fallback_columns(out)["fallback"]
    return out


def tornado_chart(data: pd.DataFrame) -> alt.LayerChart:
    """Horizontal bars of the change in speedup when one field goes to its low or high value,
    the largest swing on top."""
    fields = list(dict.fromkeys(data["field"]))
    y = alt.Y("field:N", sort=fields, title=None)
    # yOffset, not stacking: when both sides move the same way, stacked bars would add them.
    bars = alt.Chart().mark_bar().encode(
        x=alt.X("delta:Q", title="change in speedup over dense (x, from the base design)",
                stack=None),
        y=y,
        yOffset=alt.YOffset("side:N", sort=["low", "high"]),
        color=alt.Color("side:N", title="field at", sort=["low", "high"],
                        scale=alt.Scale(domain=["low", "high"], range=["#1f77b4", "#ff7f0e"])),
        tooltip=["field:N", "side:N", alt.Tooltip("value:Q", format=".4~g"),
                 alt.Tooltip("speedup:Q", format=".3f"), alt.Tooltip("delta:Q", format="+.3f")])
    zero = alt.Chart().mark_rule(color="#444").encode(x=alt.datum(0))
    what = f" of {data['format'].iloc[0]}" if "format" in data.columns and len(data) else ""
    fallback = ""
    if "fallback" in data.columns and len(data) and data["fallback"].iloc[0]:
        fallback = f"the base design falls back: {data['fallback'].iloc[0]}"
    return alt.layer(bars, zero, data=inline_data(data)).properties(
        width=420, height=alt.Step(14), title=chart_title(
            f"Sensitivity of the speedup{what} to each hardware field, halved and doubled",
            context_words(data), fallback))
