"""The Sparsity Roofline: accuracy against speedup per model and format, a line per pattern
group, the bound and (calibrated) the expectation."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from formats.sparsity import percent

from .design import (
    FACET_HEIGHT,
    FACET_WIDTH,
    as_text,
    chart_title,
    context_words,
    design_columns,
    facet_by_model,
    fallback_columns,
    fallback_note,
    group_order,
    hw_falls_back,
    inline_data,
    one_value,
    pattern_groups,
    require_columns,
    sorted_rows,
)
from .estimates import estimate_channels, expected_devices
from .labels import label_layers, padded_domain, place_labels, segment_points, to_pixels

__all__ = [
    "sparsity_roofline_chart",
    "sparsity_roofline_data",
]

# --- 1. the Sparsity Roofline: accuracy against speedup -----------------------------------------

def sparsity_roofline_data(frame: pd.DataFrame,
                           expected: pd.DataFrame | None = None) -> pd.DataFrame:
    """Accuracy against speedup per model and format, the dense point kept as the reference.

    ``frame``: rows of ``dse.evaluate`` (or search results) with ``model, format, sparsity,
    speedup, accuracy`` (join accuracy from an accuracy table first); one hardware, batch,
    fusion and scope (concatenate the frames of several batches to chart them: the chart
    draws a row per batch). Rows without an accuracy (NaN) are dropped: they have no place
    on the accuracy axis. Columns: ``model, format, group`` (pattern family label: ``N:M``,
    ``block<b>``, ``unstructured``, ``dense``), ``sparsity`` (0..1), ``sparsity_label``
    (``"87.5%"``), ``speedup`` (x dense), ``accuracy`` (percent), ``label`` (the point's
    label: its format, ``"1:4 (runs dense)"`` where the hardware falls back, '' for dense);
    then, when ``frame`` has them, the fallback fields ``shape_fallback_ops, hw_fallback,
    hw_fallback_ops, fallback`` (the text, '' for none) and the design columns ``hardware,
    batch, fusion, scope``. Sorted by model, group and sparsity, the order the chart's lines
    join the points in.

    The bound beside the expectation (``dse report --calibrated``): ``expected``, the rows of
    ``dse.calibrate.expected.expected_layers`` of the same designs (one or more models), adds
    the expected speedup (``expected_designs`` per model, unless ``frame`` already has
    ``expected_speedup``). Each design then has two rows, ``estimate`` ``bound`` (``speedup``
    the bound's) and ``expected`` (``speedup`` the expected one; ``label`` ''), each with
    ``bound_speedup``, ``expected_speedup``, ``expected_latency_s``, ``predictor``,
    ``validated_rmspe``, ``calibration``, ``expected_fallback_share`` and
    ``expected_fallbacks`` (:func:`reports.calibration.expected_fallback_share`). A ``frame``
    with ``expected_speedup`` and no ``expected`` gets the two rows too.
    """
    builder = "sparsity_roofline_data"
    require_columns(frame, ("model", "format", "sparsity", "speedup", "accuracy"), builder)
    one_value(frame, ("hardware", "batch", "fusion", "scope", "hw_point"), builder)
    if expected is not None:
        frame = _with_expected(frame, expected, builder)
    out = pd.DataFrame({
        "model": as_text(frame["model"]).to_numpy(),
        "format": as_text(frame["format"]).to_numpy(),
        "sparsity": frame["sparsity"].to_numpy(dtype=np.float64),
        "speedup": frame["speedup"].to_numpy(dtype=np.float64),
        "accuracy": frame["accuracy"].to_numpy(dtype=np.float64),
        **fallback_columns(frame),
        **design_columns(frame, ("hardware", "batch", "fusion", "scope")),
    })
    # A metric other than accuracy in percent (a language model's published perplexity
    # increase) names its axis and its direction.
    for column in ("accuracy_axis", "accuracy_lower_is_better", "accuracy_note"):
        if column in frame.columns:
            out[column] = frame[column].to_numpy()
    out = out[out["accuracy"].notna()]
    out = out.drop_duplicates(["model", "format"])
    out.insert(2, "group", pattern_groups(out["format"]))
    out.insert(4, "sparsity_label", out["sparsity"].map(percent).astype(object))
    runs = np.where(out["hw_fallback"] == "csr", " (runs as CSR)", " (runs dense)") \
        if "hw_fallback" in out else ""
    # The format names the point (2:4 and 2:8 share a colour and their sparsity with 1:4 and
    # 4:8, so "50%" alone would not tell them apart).
    name = out["format"].astype(object)
    label = np.where(hw_falls_back(out), name + runs, name)
    out.insert(7, "label", np.where(out["group"] == "dense", "", label).astype(object))
    if "expected_speedup" not in frame.columns:
        return sorted_rows(out, ["model", "group", "sparsity", "format"])
    extra = ["expected_speedup", "expected_latency_s", "predictor", "validated_rmspe",
             "calibration", "expected_fallback_share", "expected_fallbacks"]
    known = frame.assign(model=as_text(frame["model"]), format=as_text(frame["format"]))
    known = known.drop_duplicates(["model", "format"])
    out = out.merge(known[["model", "format", *[c for c in extra if c in frame.columns]]],
                    on=["model", "format"], how="left")
    out.insert(out.columns.get_loc("speedup"), "bound_speedup", out["speedup"])
    bound = out.assign(estimate="bound")
    exp = out.assign(estimate="expected", speedup=out["expected_speedup"], label="")
    both = pd.concat([bound, exp[exp["speedup"].notna()]], ignore_index=True)
    both.insert(2, "estimate", both.pop("estimate"))
    return sorted_rows(both, ["model", "estimate", "group", "sparsity", "format"])


def _with_expected(frame: pd.DataFrame, expected: pd.DataFrame, builder: str) -> pd.DataFrame:
    """``frame`` (designs) with the expected columns of ``expected_designs`` (per model) and
    each design's share of expected time priced without its family's kernel data."""
    from dse.calibrate.expected import expected_designs

    from ..calibration import expected_fallback_share

    require_columns(expected, ("format", "batch", "expected_s", "predictor", "calibration"),
                    builder)
    if "expected_speedup" not in frame.columns:
        require_columns(frame, ("hardware", "batch", "latency_s"), builder)
        if "model" in expected.columns:
            parts = [expected_designs(rows, expected[expected["model"].astype(str) == str(m)])
                     for m, rows in frame.groupby("model", sort=False, observed=True)]
            frame = pd.concat(parts).loc[frame.index]
        else:
            frame = expected_designs(frame, expected)
    shares = expected_fallback_share(expected)
    keys = [k for k in ("model", "hardware", "format", "batch")
            if k in shares.columns and k in frame.columns]
    left = frame.drop(columns=["expected_fallback_share", "expected_fallbacks"],
                      errors="ignore")
    label = {k: left[k].astype(object).map(str) if k != "batch" else left[k] for k in keys}
    merged = pd.DataFrame(label).merge(
        shares.assign(**{k: shares[k].map(str) for k in keys if k != "batch"}),
        on=keys, how="left")
    return left.assign(expected_fallback_share=merged["expected_fallback_share"].to_numpy(),
                       expected_fallbacks=merged["expected_fallbacks"].to_numpy())


def sparsity_roofline_chart(data: pd.DataFrame) -> alt.FacetChart:
    """Accuracy (y) against speedup (x), a column per model (a row per batch when the frame
    holds several); one colour, shape and line per pattern group, each point labelled with its
    format, placed where it overlaps no other label or point. Designs that fall back are
    hollow, and named in the caption. With the
    ``estimate`` column (``sparsity_roofline_data(frame, expected)``): a bound curve (solid,
    circles) and an expected curve (dashed, triangles) per group. An empty frame (no design
    has an accuracy) draws the axes and says so."""
    if not len(data):
        return alt.Chart(inline_data(data)).mark_point().encode(
            x=alt.X("speedup:Q", title="speedup over dense (x)"),
            y=alt.Y("accuracy:Q", title="accuracy (%)")).properties(
            width=FACET_WIDTH, height=FACET_HEIGHT, title=chart_title(
                "Sparsity Roofline: accuracy against speedup",
                "nothing to draw: no design has an accuracy in the accuracy table (give one "
                "that has these models and formats)"))
    groups = group_order(data["group"])
    color = alt.Color("group:N", title="pattern", sort=groups,
                      scale=alt.Scale(domain=groups))
    width = FACET_WIDTH + (60 if "estimate" in data.columns else 0)
    axis, reverse = accuracy_axis(data)
    data, x_domain, y_domain = _labels_placed(data, width, FACET_HEIGHT, reverse)
    x = alt.X("speedup:Q", title="speedup over dense (x)",
              scale=alt.Scale(zero=False, nice=False, domain=x_domain))
    # Better is up: a lower-is-better metric runs down its axis.
    y = alt.Y("accuracy:Q", title=axis,
              scale=alt.Scale(zero=False, nice=False, domain=y_domain, reverse=reverse))
    tooltip = ["model:N", "format:N", "sparsity_label:N",
               alt.Tooltip("speedup:Q", format=".3f"), alt.Tooltip("accuracy:Q", format=".2f")]
    if "fallback" in data.columns:
        tooltip.append(alt.Tooltip("fallback:N", title="fallbacks"))
    shape = alt.Shape("group:N", sort=groups, scale=alt.Scale(domain=groups), title="pattern")
    own = ~(alt.expr.isValid(alt.datum.hw_fallback_ops) & (alt.datum.hw_fallback_ops > 0))
    base = alt.Chart().encode(x=x, y=y, color=color)
    line = base.mark_line(opacity=0.6).encode(order="sparsity:Q", detail="group:N")
    points = base.transform_filter(own).mark_point(filled=True, size=60).encode(
        shape=shape, tooltip=tooltip)
    hollow = base.transform_filter(~own).mark_point(filled=False, size=110,
                                                    strokeWidth=2).encode(
        shape=shape, tooltip=tooltip)
    # Each format's name beside its point, in the place labels.place_labels found free
    # (2:4 and 2:8 share a colour, and designs that run dense sit on the dense point).
    labels = label_layers(base)
    if "estimate" in data.columns:
        return _sparsity_roofline_calibrated(data, base, color, tooltip, own, labels)
    layered = alt.layer(line, points, hollow, *labels,
                        data=inline_data(data)).properties(width=width, height=FACET_HEIGHT)
    return facet_by_model(layered, data).properties(title=chart_title(
        f"Sparsity Roofline: {_what(axis)} against speed-of-light speedup",
        context_words(data, ("hardware", "batch", "fusion", "scope")), _accuracy_note(data),
        fallback_note(data)))


def _sparsity_roofline_calibrated(data: pd.DataFrame, base: alt.Chart, color: alt.Color,
                                  tooltip: list, own, labels: list) -> alt.FacetChart:
    """The Sparsity Roofline with a bound curve (solid, circles) and an expected curve
    (dashed, triangles) per pattern group, each expected point joined to its bound."""
    shape, dash = estimate_channels(data, "speedup")
    tip = [*tooltip, alt.Tooltip("estimate:N", title="speedup"),
           alt.Tooltip("bound_speedup:Q", title="bound speedup", format=".3f"),
           alt.Tooltip("expected_speedup:Q", title="expected speedup", format=".3f"),
           alt.Tooltip("validated_rmspe:Q", title="held-out RMSPE", format=".0%"),
           alt.Tooltip("expected_fallback_share:Q", title="expected time without own data",
                       format=".0%"),
           alt.Tooltip("expected_fallbacks:N", title="priced how")]
    groups = group_order(data["group"])
    color = alt.Color("group:N", title="pattern", sort=groups, scale=alt.Scale(domain=groups),
                      legend=alt.Legend(symbolOpacity=1))
    line = base.mark_line(opacity=0.6).encode(
        color=color, strokeDash=dash, order="sparsity:Q", detail=["group:N", "estimate:N"])
    join = base.transform_filter(alt.datum.estimate == "expected").mark_rule(
        strokeWidth=1, opacity=0.35, strokeDash=[2, 2]).encode(
        x2="bound_speedup:Q", color=color)
    points = base.transform_filter(own).mark_point(filled=True, size=60).encode(
        color=color, shape=shape, tooltip=tip)
    hollow = base.transform_filter(~own).mark_point(filled=False, size=110,
                                                    strokeWidth=2).encode(
        color=color, shape=shape, tooltip=tip)
    bound_only = [lab.transform_filter(alt.datum.estimate == "bound") for lab in labels]
    layered = alt.layer(join, line, points, hollow, *bound_only,
                        data=inline_data(data)).properties(width=FACET_WIDTH + 60,
                                                           height=FACET_HEIGHT)
    exp = data[data["estimate"] == "expected"]
    notes = []
    if len(exp):
        rmspe = exp["validated_rmspe"].dropna()
        err = (f"{rmspe.min():.0%}" if rmspe.nunique() == 1 or
               f"{rmspe.min():.0%}" == f"{rmspe.max():.0%}"
               else f"{rmspe.min():.0%} to {rmspe.max():.0%}") if len(rmspe) else ""
        device = expected_devices(data)
        notes.append(f"triangles, dashed: expected speedup from the kernel predictors {device}, "
                     "kernels one op at a time (unfused), an expectation, not a bound"
                     + (f" (held-out RMSPE of the predictors used, weighted by expected time: "
                        f"{err})" if err else "")
                     + "; dotted lines join each design's expected point to its bound")
        share = exp["expected_fallback_share"].fillna(0.0) if "expected_fallback_share" \
            in exp else pd.Series(dtype=float)
        if (share > 0).any():
            fell = exp[share > 0]
            who = [c for c in ("model", "batch") if c in fell and fell[c].nunique() > 1]
            items = []
            for key, rows in (fell.groupby(who, sort=False) if who else [((), fell)]):
                key = key if isinstance(key, tuple) else (key,)
                head = " ".join(f"batch {v}" if c == "batch" else str(v)
                                for c, v in zip(who, key, strict=True))
                items.append((f"{head}: " if head else "") + ", ".join(
                    f"{r.format} {r.expected_fallback_share:.0%}" for r in rows.itertuples()))
            why = sorted({n for text in fell["expected_fallbacks"].dropna()
                          for n in str(text).split("; ") if n})
            notes.append("share of expected time priced without the family's own kernel data: "
                         + "; ".join(items[:6]) + ("; ... (see the data)" if len(items) > 6
                                                   else "")
                         + " (" + "; ".join(why) + ")")
    return facet_by_model(layered, data).properties(title=chart_title(
        f"Sparsity Roofline: {_what(accuracy_axis(data)[0])} against speedup, the bound and "
        "the expectation",
        context_words(data, ("model", "hardware", "batch", "fusion", "scope")),
        _accuracy_note(data), fallback_note(data[data["estimate"] == "bound"]), notes))


def accuracy_axis(data: pd.DataFrame) -> tuple[str, bool]:
    """The y axis's title and whether it runs reversed (a lower-is-better metric, so that
    better is up): ``accuracy (%)`` unless the rows name their metric (``accuracy_axis``,
    ``accuracy_lower_is_better``, as a language model's published perplexity increase)."""
    if "accuracy_axis" not in data.columns or not len(data):
        return "accuracy (%)", False
    lower = bool(data["accuracy_lower_is_better"].iloc[0]) \
        if "accuracy_lower_is_better" in data.columns else False
    return str(data["accuracy_axis"].iloc[0]), lower


def _accuracy_note(data: pd.DataFrame) -> str:
    """What the y axis holds, where the rows say (``accuracy_note``), for the caption."""
    return str(data["accuracy_note"].iloc[0]) if "accuracy_note" in data.columns \
        and len(data) else ""


def _what(axis: str) -> str:
    return "perplexity increase" if "perplexity" in axis else "accuracy"


def _labels_placed(data: pd.DataFrame, width: float, height: float, reverse: bool = False
                   ) -> tuple[pd.DataFrame, list[float], list[float]]:
    """``data`` with ``label_place`` (where each point's label goes: an index into
    ``labels.PLACES``, -1 for none), and the x and y domains the places were found on; each
    facet (model, batch) is placed on its own, every point of it an obstacle. ``reverse``:
    the y axis runs reversed (its lowest value on top)."""
    x_domain = padded_domain(data["speedup"])
    y_domain = padded_domain(data["accuracy"])
    place = np.full(len(data), -1, dtype=np.int64)
    keys = [c for c in ("model", "batch") if c in data.columns]
    for rows in data.groupby(keys, sort=False, dropna=False).indices.values():
        part = data.iloc[rows]
        x = to_pixels(part["speedup"], x_domain, width)
        y = to_pixels(part["accuracy"], y_domain, height, flip=not reverse)
        # The lines drawn: each group's curve in sparsity order, and (calibrated) the dotted
        # join from each expected point to its bound.
        lines = []
        curves = ["group", "estimate"] if "estimate" in part else ["group"]
        for _, curve in part.assign(_x=x, _y=y).groupby(curves, sort=False):
            ordered = curve.sort_values("sparsity")
            xy = list(zip(ordered["_x"], ordered["_y"], strict=True))
            lines += [q for a, b in zip(xy[:-1], xy[1:], strict=True)
                      for q in segment_points(*a, *b)]
        if "bound_speedup" in part:
            x_bound = to_pixels(part["bound_speedup"], x_domain, width)
            lines += [q for x0, x1, y0 in zip(x, x_bound, y, strict=True)
                      if np.isfinite(x1) for q in segment_points(x0, y0, x1, y0)]
        place[rows] = place_labels(x, y, part["label"].fillna("").astype(str).tolist(),
                                   width, height, point=11, obstacles=lines)
    return data.assign(label_place=place), x_domain, y_domain
