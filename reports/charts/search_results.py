"""The charts of a search: the Pareto fronts of speedup and accuracy, and the candidates
against the target."""

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
    fallback_columns,
    fallback_note,
    group_order,
    inline_data,
    pattern_groups,
    require_columns,
)
from .estimates import estimate_channels, expectation_note, expected_tooltip, with_estimates
from .labels import label_layers, padded_domain, place_in_facets

__all__ = [
    "pareto_chart",
    "pareto_data",
    "target_chart",
    "target_data",
]

_VERDICTS = ("meets", "too slow", "too inaccurate", "too slow and too inaccurate", "no target")
_VERDICT_COLORS = ("#2ca02c", "#ff7f0e", "#9467bd", "#d62728", "#7f7f7f")


# --- 6. Pareto fronts of a search ---------------------------------------------------------------

def _pareto_mask(speedup: np.ndarray, accuracy: np.ndarray) -> np.ndarray:
    # The search's own definition (twins of a front point are on the front), so a report
    # never disagrees with `dse search`.
    from search.scoring import pareto_mask
    return pareto_mask(speedup, accuracy)


def pareto_data(results: pd.DataFrame) -> pd.DataFrame:
    """Designs of a search in (speedup, accuracy), with the Pareto front marked.

    ``results``: search results (``model, format, speedup, accuracy``; ``batch``,
    ``hardware``, ``verdict`` and ``pareto`` when present). ``pareto`` is kept when the
    results have it (the search computed it among designs meeting the target); otherwise it
    is computed here: non-dominated in (speedup, accuracy), maximizing both, per model and
    batch, among designs with an accuracy. Columns: ``model, hardware, batch, format, group,
    speedup, accuracy, pareto`` (bool) and ``verdict`` (``no target`` when absent); then, when
    ``results`` has them, the fallback fields and ``fusion, scope``.

    A calibrated search's results (``expected_speedup``): two rows a design, ``estimate``
    ``bound`` (``speedup`` the bound's; ``pareto`` the results' ``bound_pareto``, else
    computed here) and ``expected`` (the expected speedup, which the search ranked by;
    ``pareto`` the results' own, else computed here), each with ``bound_speedup,
    expected_speedup, expected_by`` and the expectation's notes. ``verdict`` is the
    search's, by the expectation, on both.
    """
    builder = "pareto_data"
    require_columns(results, ("model", "format", "speedup", "accuracy"), builder)
    n = len(results)
    out = pd.DataFrame({
        "model": as_text(results["model"]).to_numpy(),
        "hardware": as_text(results["hardware"]).to_numpy() if "hardware" in results else None,
        "batch": pd.array(results["batch"], dtype="Int64") if "batch" in results
        else pd.array([pd.NA] * n, dtype="Int64"),
        "format": as_text(results["format"]).to_numpy(),
        "speedup": results["speedup"].to_numpy(dtype=np.float64),
        "accuracy": results["accuracy"].to_numpy(dtype=np.float64),
    }, index=pd.RangeIndex(n))
    out.insert(4, "group", pattern_groups(out["format"]))
    out["verdict"] = as_text(results["verdict"]).to_numpy() if "verdict" in results \
        else "no target"
    for column, values in {**fallback_columns(results),
                           **design_columns(results, ("fusion", "scope"))}.items():
        out[column] = values
    out = with_estimates(out, results, ("speedup",), after="format")
    # Which front each row is on: the results' own where the search computed it.
    fronts = ({"bound": "bound_pareto", "expected": "pareto"} if "estimate" in out
              else {None: "pareto"})
    front = np.zeros(len(out), dtype=bool)
    known = out["accuracy"].notna().to_numpy()
    speedup, accuracy = out["speedup"].to_numpy(), out["accuracy"].to_numpy()
    keys = out.groupby(["model", "batch"], dropna=False, sort=False).ngroup().to_numpy()
    for estimate, column in fronts.items():
        rows = (np.ones(len(out), dtype=bool) if estimate is None
                else (out["estimate"] == estimate).to_numpy())
        if column in results:
            front[rows] = results[column].astype("boolean").fillna(False).to_numpy(dtype=bool)
            continue
        for key in np.unique(keys[rows & known]):
            pick = np.flatnonzero(rows & known & (keys == key))
            front[pick] = _pareto_mask(speedup[pick], accuracy[pick])
    out.insert(out.columns.get_loc("accuracy") + 1, "pareto", front)
    return out


def pareto_chart(data: pd.DataFrame) -> alt.FacetChart:
    """Every design as a faint point, the Pareto front as a line of larger points coloured
    by pattern group and labelled with their formats; a column per model, a row per batch
    when there are several. With the
    ``estimate`` column (a calibrated search) two fronts: the bound's (solid, circles) and
    the expectation's (dashed, triangles), the legend saying which is which."""
    calibrated = "estimate" in data.columns
    groups = group_order(data["group"])
    # The front's points are labelled with their format (the expectation's front when
    # calibrated: the one the search ranked by), where the label covers no other.
    x_domain, y_domain = padded_domain(data["speedup"]), padded_domain(data["accuracy"])
    named = data["pareto"].to_numpy(dtype=bool)
    if calibrated:
        named = named & (data["estimate"] == "expected").to_numpy()
    data = data.assign(label_place=place_in_facets(
        data, "speedup", "accuracy", np.where(named, data["format"], ""), ("model", "batch"),
        FACET_WIDTH, FACET_HEIGHT, x_domain, y_domain,
        curves=["estimate"] if calibrated else [], on_lines=data["pareto"].to_numpy(dtype=bool)))
    x = alt.X("speedup:Q", title="speedup over dense (x)",
              scale=alt.Scale(zero=False, nice=False, domain=x_domain))
    y = alt.Y("accuracy:Q", title="accuracy (%)",
              scale=alt.Scale(zero=False, nice=False, domain=y_domain))
    tooltip = ["model:N", "hardware:N", "batch:Q", "format:N", "verdict:N",
               alt.Tooltip("speedup:Q", format=".3f"), alt.Tooltip("accuracy:Q", format=".2f")]
    if calibrated:
        tooltip += [alt.Tooltip("bound_speedup:Q", title="bound speedup", format=".3f"),
                    alt.Tooltip("expected_speedup:Q", title="expected speedup", format=".3f"),
                    *expected_tooltip()]
    base = alt.Chart().encode(x=x, y=y)
    everyone = base.mark_point(size=20, opacity=0.35, color="#888").encode(tooltip=tooltip)
    front = base.transform_filter(alt.datum.pareto)
    line = front.mark_line(color="#444", strokeWidth=1).encode(order="speedup:Q")
    if "fallback" in data.columns:
        tooltip.append(alt.Tooltip("fallback:N", title="fallbacks"))
    own = ~(alt.expr.isValid(alt.datum.hw_fallback_ops) & (alt.datum.hw_fallback_ops > 0))
    pattern = alt.Color("group:N", sort=groups, scale=alt.Scale(domain=groups),
                        title="pattern", legend=alt.Legend(symbolOpacity=1))
    points = front.transform_filter(own).mark_point(filled=True, size=70).encode(
        color=pattern, tooltip=tooltip)
    hollow = front.transform_filter(~own).mark_point(filled=False, size=90,
                                                     strokeWidth=2).encode(
        color=pattern, tooltip=tooltip)
    notes = []
    if calibrated:
        shape, dash = estimate_channels(data, "speedup")
        everyone = everyone.encode(shape=shape)
        line = line.encode(strokeDash=dash, detail="estimate:N")
        points, hollow = points.encode(shape=shape), hollow.encode(shape=shape)
        notes.append(expectation_note(data, "dashed front, triangles") + "; the search "
                     "ranked by it. Solid front, circles: the bound's front of the same "
                     "designs; faint points: every design, both ways")
    names = [layer.encode(color=pattern) for layer in label_layers(
        alt.Chart().encode(x=x, y=y).transform_filter(alt.datum.label_place >= 0),
        "format")]
    layered = alt.layer(everyone, line, points, hollow, *names,
                        data=inline_data(data)).properties(width=FACET_WIDTH,
                                                           height=FACET_HEIGHT)
    note = fallback_note(data[data["pareto"]].drop_duplicates(["model", "format"]))
    return facet_by_model(layered, data).properties(title=chart_title(
        "Search: Pareto front of speedup and accuracy"
        + (", the bound and the expectation" if calibrated else ""),
        context_words(data, ("hardware", "batch", "fusion", "scope")), note, notes))


# --- 7. candidates against the target -----------------------------------------------------------

def target_data(results: pd.DataFrame) -> pd.DataFrame:
    """The candidate designs of a search scored against its target.

    ``results``: search results with ``role, model, format, speedup_over_baseline,
    accuracy_drop, verdict`` (and ``rank``, ``batch``, ``hardware`` when present); only
    ``role == "candidate"`` rows are kept. Columns: ``model, hardware, batch, format, group,
    speedup_over_baseline`` (x the baseline format), ``accuracy_drop`` (percentage points
    below the baseline; negative is a gain), ``verdict``, ``rank`` (Int64, NA unless the design
    meets the target). Sorted by model, batch, rank (NA last), then speedup descending.

    A calibrated search's results (``expected_speedup`` and ``bound_speedup_over_baseline``):
    two rows a candidate, ``estimate`` ``bound`` (``speedup_over_baseline`` the bound's) and
    ``expected`` (the expected one, which the target compared), each with
    ``bound_speedup_over_baseline, expected_speedup_over_baseline, bound_meets_target,
    expected_by`` and the expectation's notes; ``verdict`` and ``rank`` are the search's, by
    the expectation, on both. Sorted by estimate after model and batch.
    """
    builder = "target_data"
    require_columns(results, ("role", "model", "format", "speedup_over_baseline", "accuracy_drop",
                       "verdict"), builder)
    rows = results[as_text(results["role"]).to_numpy() == "candidate"]
    calibrated = {"expected_speedup", "bound_speedup_over_baseline"} <= set(rows.columns)
    speed = "bound_speedup_over_baseline" if calibrated else "speedup_over_baseline"
    n = len(rows)
    out = pd.DataFrame({
        "model": as_text(rows["model"]),
        "hardware": as_text(rows["hardware"]) if "hardware" in rows else None,
        "batch": rows["batch"].astype("Int64") if "batch" in rows
        else pd.array([pd.NA] * n, dtype="Int64"),
        "format": as_text(rows["format"]),
        **{c: as_text(rows[c]) for c in ("fusion", "scope") if c in rows},
        "speedup_over_baseline": rows[speed].to_numpy(dtype=np.float64),
        "accuracy_drop": rows["accuracy_drop"].to_numpy(dtype=np.float64),
        "verdict": as_text(rows["verdict"]),
        "rank": rows["rank"].astype("Int64") if "rank" in rows
        else pd.array([pd.NA] * n, dtype="Int64"),
    }, index=rows.index)
    for column, values in fallback_columns(rows).items():
        out[column] = values
    out.insert(list(out.columns).index("format") + 1, "group", pattern_groups(out["format"]))
    keys = ["model", "batch", "rank", "speedup_over_baseline"]
    if calibrated:
        out["bound_meets_target"] = rows["bound_meets_target"].to_numpy(dtype=bool) \
            if "bound_meets_target" in rows else np.nan
        out = with_estimates(out, rows.assign(
            expected_speedup_over_baseline=rows["speedup_over_baseline"]),
            ("speedup_over_baseline",), after="group")
        keys = ["model", "batch", "estimate", "rank", "speedup_over_baseline"]
    out = out.sort_values(keys, ascending=[k != "speedup_over_baseline" for k in keys],
                          na_position="last", kind="stable")
    return out.reset_index(drop=True)


def target_chart(data: pd.DataFrame, ratio: float | None = None,
                 max_acc_drop: float | None = None, target: str | None = None) -> alt.FacetChart:
    """Accuracy drop (y, lower is better) against speedup over the baseline (x), coloured by
    verdict, the designs that meet the target labelled with their format, a column per model
    (a row per batch when several); ``ratio`` and ``max_acc_drop`` (the target's) draw its two
    edges as dashed rules; ``target`` (its text, e.g. ``1.3x_over_2:4``) goes into the title.
    With the ``estimate`` column (a calibrated search) the expected points (triangles,
    coloured by the verdict, which the expectation decides) each have their bound beside them
    (grey circles, joined by a dotted line)."""
    calibrated = "estimate" in data.columns
    verdicts = [v for v in _VERDICTS if v != "no target" or v in set(data["verdict"])]
    colors = [c for v, c in zip(_VERDICTS, _VERDICT_COLORS, strict=True) if v in verdicts]
    # The designs that meet the target are labelled with their format (the expected rows
    # when calibrated: the expectation decides the verdict), where no label covers another.
    x_domain = padded_domain([*data["speedup_over_baseline"], *([ratio] if ratio else [])])
    y_domain = padded_domain([*data["accuracy_drop"],
                              *([max_acc_drop] if max_acc_drop is not None else [])])
    named = (data["verdict"] == "meets").to_numpy()
    if calibrated:
        named = named & (data["estimate"] == "expected").to_numpy()
    data = data.assign(label_place=place_in_facets(
        data, "speedup_over_baseline", "accuracy_drop", np.where(named, data["format"], ""),
        ("model", "batch"), FACET_WIDTH, FACET_HEIGHT, x_domain, y_domain))
    x = alt.X("speedup_over_baseline:Q", title="speedup over the baseline (x)",
              scale=alt.Scale(zero=False, nice=False, domain=x_domain))
    y = alt.Y("accuracy_drop:Q", title="accuracy drop (percentage points)",
              scale=alt.Scale(zero=False, nice=False, domain=y_domain))
    color = alt.Color("verdict:N", title="verdict",
                      scale=alt.Scale(domain=verdicts, range=colors))
    tooltip = ["model:N", "format:N", "verdict:N", "rank:Q",
               alt.Tooltip("speedup_over_baseline:Q", format=".3f"),
               alt.Tooltip("accuracy_drop:Q", format=".2f")]
    verdict_marks = alt.Chart().mark_point(filled=True, size=60)
    if calibrated:
        shape, _ = estimate_channels(data, "speedup")
        tooltip += [alt.Tooltip("bound_speedup_over_baseline:Q", title="bound: x baseline",
                                format=".3f"),
                    alt.Tooltip("expected_speedup_over_baseline:Q",
                                title="expected: x baseline", format=".3f"),
                    alt.Tooltip("bound_meets_target:N", title="meets it by the bound"),
                    *expected_tooltip()]
        layers = [
            alt.Chart().transform_filter(alt.datum.estimate == "expected").mark_rule(
                color="#999", strokeWidth=1, strokeDash=[2, 2]).encode(
                x=x, x2="bound_speedup_over_baseline:Q", y=y),
            alt.Chart().transform_filter(alt.datum.estimate == "bound").mark_point(
                filled=True, size=35, color="#999", opacity=0.8).encode(
                x=x, y=y, shape=shape, tooltip=tooltip),
            verdict_marks.transform_filter(alt.datum.estimate == "expected").encode(
                x=x, y=y, color=color, shape=shape, tooltip=tooltip)]
    else:
        layers = [verdict_marks.encode(x=x, y=y, color=color, tooltip=tooltip)]
    if ratio is not None:
        layers.append(alt.Chart().mark_rule(color="#444", strokeDash=[4, 3]).encode(
            x=alt.datum(float(ratio))))
    if max_acc_drop is not None:
        layers.append(alt.Chart().mark_rule(color="#444", strokeDash=[4, 3]).encode(
            y=alt.datum(float(max_acc_drop))))
    layers += [layer.encode(color=color) for layer in label_layers(
        alt.Chart().encode(x=x, y=y).transform_filter(alt.datum.label_place >= 0), "format")]
    layered = alt.layer(*layers, data=inline_data(data)).properties(width=FACET_WIDTH,
                                                                    height=FACET_HEIGHT)
    bound = data[data["estimate"] == "bound"] if calibrated else data
    note = [line.replace("hollow markers: ", "")
            for line in fallback_note(bound.drop_duplicates(["model", "format"]))]
    if calibrated:
        note.append(expectation_note(data, "triangles") + "; the target compares it. Grey "
                    "circles, joined by a dotted line: the same design by the bound")
    points = "point" if max_acc_drop == 1 else "points"
    rule = (f"; dashed: at least {ratio:g}x the baseline's speedup, at most {max_acc_drop:g} "
            f"{points} below its accuracy" if ratio is not None and max_acc_drop is not None
            else "")
    head = f"Candidates against the target {target}" if target else "Candidates against the target"
    return facet_by_model(layered, data).properties(title=chart_title(
        head + (", the bound and the expectation" if calibrated else ""),
        context_words(data, ("hardware", "batch", "fusion", "scope")) + rule, note))
