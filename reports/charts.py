"""Chart builders, data first: each ``*_data`` function is a pure function from the project's
tables (``dse.evaluate``, ``dse.evaluate_layers``, search results) to a tidy DataFrame, and
each ``*_chart`` function turns exactly that frame into an Altair chart and computes nothing.

The split keeps every number a chart shows testable by value, and lets a report write the
very frame a chart was drawn from next to it as CSV.

Charts inline their data as plain JSON records (no Altair data transformer), so they carry no
5000-row limit and no reference to a file or URL: a chart's JSON renders anywhere, offline.
Filter large tables (millions of search designs) before charting: every row is inlined.
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from collections.abc import Iterable, Sequence
from functools import lru_cache

import altair as alt
import numpy as np
import pandas as pd

import accelerator_models
from dse.roofline import DEFAULT_NUMERICS, Numerics, peaks
from formats import Block, parse
from formats.sparsity import percent

from .calibration import CARRIED_OVER, is_calibration_fallback

__all__ = [
    "FALLBACK_FIELDS",
    "bound_mix_chart",
    "bound_mix_data",
    "energy_breakdown_chart",
    "energy_breakdown_data",
    "feature_share_chart",
    "feature_share_data",
    "fallback_text",
    "gantt_chart",
    "gantt_data",
    "hardware_comparison_chart",
    "hardware_comparison_data",
    "pareto_chart",
    "pareto_data",
    "roofline_chart",
    "roofline_data",
    "sim_gap_chart",
    "sim_gap_data",
    "sparsity_roofline_chart",
    "sparsity_roofline_data",
    "target_chart",
    "target_data",
    "tornado_chart",
    "tornado_data",
    "utilization_chart",
    "utilization_data",
]

# Pattern families in the order every legend and axis lists them; block sizes sort within.
_FAMILY_ORDER = {"dense": 0, "nm": 1, "block": 2, "unstructured": 3}
_VERDICTS = ("meets", "too slow", "too inaccurate", "too slow and too inaccurate", "no target")
_VERDICT_COLORS = ("#2ca02c", "#ff7f0e", "#9467bd", "#d62728", "#7f7f7f")
_FACET_WIDTH = 260
_FACET_HEIGHT = 220
#: The fallback fields of a ``dse.evaluate`` row: ops that stay dense because their shape cannot
#: take the format, how the hardware falls back ('' none, 'dense' or 'csr') and for how many ops.
FALLBACK_FIELDS = ("shape_fallback_ops", "hw_fallback", "hw_fallback_ops")
_RESOURCE_WORDS = ("datum.value == 'sparse_tensor' ? 'sparse tensor core' : datum.value == "
                   "'tensor' ? 'tensor core' : datum.value == 'vector' ? 'vector cores' : "
                   "datum.value == 'dram' ? 'DRAM' : datum.value")
# Units and resources in words, for legends.
_UNIT_WORDS = {"tensor": "tensor core", "sparse_tensor": "sparse tensor core",
               "vector": "vector cores", "dram": "DRAM"}
_HOLLOW_NOTE = "hollow markers: designs that fall back"


# --- shared helpers -----------------------------------------------------------------------------

def require_columns(frame: pd.DataFrame, columns: Iterable[str], builder: str) -> None:
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"{builder}: expected a pandas DataFrame, got {type(frame).__name__}")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{builder}: the frame lacks column(s) {', '.join(missing)}; "
                         f"it has {', '.join(map(str, frame.columns))}")


def _one_value(frame: pd.DataFrame, columns: Iterable[str], builder: str) -> None:
    """Refuse a frame that mixes designs the chart would silently add or overplot."""
    for column in columns:
        if column in frame.columns:
            values = pd.unique(frame[column].dropna())
            if len(values) > 1:
                shown = ", ".join(map(str, sorted(values, key=str)[:5]))
                first = values[0].item() if hasattr(values[0], "item") else values[0]
                raise ValueError(f"{builder}: the frame holds {len(values)} values of "
                                 f"{column} ({shown}); filter to one first, e.g. "
                                 f"frame[frame[{column!r}] == {first!r}]")


def _text(series: pd.Series) -> pd.Series:
    """Label column as plain strings: categoricals (search results) compare and sort like
    the strings they hold, and CSVs of the frames read back the same."""
    return series.astype(object).map(lambda v: None if pd.isna(v) else str(v))


@lru_cache(maxsize=4096)
def _format_info(name: str) -> tuple[str, str, float, float]:
    """(family, pattern group label, block size or NaN, sparsity) of a format name."""
    try:
        fmt = parse(name)
    except ValueError as exc:
        raise ValueError(f"format {name!r} is not in dse's format grammar ({exc})") from None
    if isinstance(fmt, Block):
        return fmt.family, f"block{fmt.block}", float(fmt.block), fmt.sparsity
    group = {"dense": "dense", "nm": "N:M", "unstructured": "unstructured"}[fmt.family]
    return fmt.family, group, math.nan, fmt.sparsity


def _format_key(name: str) -> tuple:
    family, _, block, sparsity = _format_info(name)
    return (_FAMILY_ORDER.get(family, 9), 0.0 if math.isnan(block) else block, sparsity, name)


def _group_key(group: str) -> tuple:
    if group.startswith("block"):
        return (_FAMILY_ORDER["block"], int(group[5:]))
    return ({"dense": 0, "N:M": 1, "unstructured": 3}.get(group, 9), 0)


def _groups(formats: pd.Series) -> pd.Series:
    return formats.map(lambda name: _format_info(name)[1])


def _format_order(formats: Iterable[str]) -> list[str]:
    return sorted(set(formats), key=_format_key)


def _group_order(groups: Iterable[str]) -> list[str]:
    return sorted(set(groups), key=_group_key)


def _inline(frame: pd.DataFrame) -> alt.InlineData:
    """The frame as JSON records (NaN and NA become null); no transformer, no row limit."""
    records = json.loads(frame.to_json(orient="records", double_precision=15))
    return alt.InlineData(values=records)


def _facet_by_model(layered: alt.LayerChart, data: pd.DataFrame) -> alt.FacetChart:
    """A column per model, and a row per batch when the frame holds several: designs at
    different batches are never on one front."""
    if "batch" in data and data["batch"].nunique(dropna=False) > 1:
        return layered.facet(column=alt.Column("model:N", title=None),
                             row=alt.Row("batch:O", title="batch"))
    return layered.facet(column=alt.Column("model:N", title=None))


def _sorted(frame: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Rows sorted by ``keys``; a ``format`` key sorts in pattern order, not alphabetically."""
    def key(column: pd.Series) -> pd.Series:
        if column.name == "format":
            return column.map(_format_key)
        if column.name == "group":
            return column.map(_group_key)
        return column
    return frame.sort_values(list(keys), key=key, kind="stable").reset_index(drop=True)


# --- fallbacks and titles -----------------------------------------------------------------------

def fallback_text(shape_ops: int, hw_fallback: str, hw_ops: int) -> str:
    """A design's fallbacks in words: ``''`` when every op runs the format's own kernel, else
    e.g. ``"53 ops dense (hardware)"`` or ``"3 ops dense (shape), 2 ops CSR (hardware)"``:
    how many ops, run how, and why (the layer's shape cannot take the format, or the hardware
    lacks it)."""
    parts = []
    if shape_ops and int(shape_ops) > 0:
        parts.append(f"{int(shape_ops)} ops dense (shape)")
    if hw_ops and int(hw_ops) > 0 and hw_fallback:
        kind = "CSR" if str(hw_fallback) == "csr" else "dense"
        parts.append(f"{int(hw_ops)} ops {kind} (hardware)")
    return ", ".join(parts)


def _fallback_columns(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """``shape_fallback_ops, hw_fallback, hw_fallback_ops, fallback`` (the text) of rows of
    ``dse.evaluate``, or ``{}`` when the frame lacks the fields (hand-made frames)."""
    if not all(c in frame.columns for c in FALLBACK_FIELDS):
        return {}
    shape = frame["shape_fallback_ops"].fillna(0).to_numpy(dtype=np.int64)
    kind = _text(frame["hw_fallback"]).fillna("").to_numpy(dtype=object)
    hw = frame["hw_fallback_ops"].fillna(0).to_numpy(dtype=np.int64)
    text = [fallback_text(s, k, h) for s, k, h in zip(shape, kind, hw, strict=True)]
    return {"shape_fallback_ops": shape, "hw_fallback": kind, "hw_fallback_ops": hw,
            "fallback": np.array(text, dtype=object)}


def _layer_fallbacks(layers: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per ``keys`` group of ``dse.evaluate_layers`` rows, the design's fallback fields from
    the ops' ``fallback`` labels (``shape``, ``hw:dense``, ``hw:csr``)."""
    why = _text(layers["fallback"]).fillna("")
    frame = layers[keys].astype(object).assign(
        _shape=(why == "shape").to_numpy(), _dense=(why == "hw:dense").to_numpy(),
        _csr=(why == "hw:csr").to_numpy())
    out = frame.groupby(keys, sort=False, dropna=False)[["_shape", "_dense", "_csr"]].sum()
    out = out.reset_index()
    hw_kind = np.where(out["_csr"] > 0, "csr", np.where(out["_dense"] > 0, "dense", ""))
    out["shape_fallback_ops"] = out["_shape"].astype(np.int64)
    out["hw_fallback"] = hw_kind.astype(object)
    out["hw_fallback_ops"] = (out["_dense"] + out["_csr"]).astype(np.int64)
    out["fallback"] = [fallback_text(s, k, h) for s, k, h in zip(
        out["shape_fallback_ops"], out["hw_fallback"], out["hw_fallback_ops"], strict=True)]
    return out.drop(columns=["_shape", "_dense", "_csr"])


def _design_columns(frame: pd.DataFrame, columns: Sequence[str]) -> dict[str, np.ndarray]:
    """The design columns ``frame`` has among ``columns``, as plain values (labels as text),
    so a chart can name what is fixed and a CSV says what it shows."""
    out = {}
    for column in columns:
        if column in frame.columns:
            series = frame[column]
            out[column] = (series.to_numpy(dtype=np.int64) if column == "batch"
                           and series.notna().all() else _text(series).to_numpy())
    return out


def _fixed(data: pd.DataFrame, column: str) -> str | None:
    """The one value of ``column`` as text, or None when absent or not one value."""
    if column not in data.columns:
        return None
    values = pd.unique(data[column].dropna())
    if len(values) != 1:
        return None
    value = values[0]
    if isinstance(value, float | np.floating) and float(value).is_integer():
        value = int(value)  # a batch read back from a CSV
    return str(value)


def _context(data: pd.DataFrame, columns: Sequence[str] = ("model", "hardware", "batch",
                                                           "fusion", "scope")) -> str:
    """What is fixed across the frame, in words: ``convnext_tiny on a100-40gb, batch 1,
    unfused, gemm scope``; varying columns are left out (the chart's axes or facets show
    them), several batches are listed."""
    model, hw = (_fixed(data, c) if c in columns else None for c in ("model", "hardware"))
    head = " on ".join(p for p in (model, hw) if p)
    parts = [head] if head else []
    if "batch" in columns and "batch" in data.columns:
        batch = _fixed(data, "batch")
        if batch is not None:
            parts.append(f"batch {batch}")
        elif data["batch"].notna().any():
            batches = sorted({int(b) for b in data["batch"].dropna()})
            parts.append("batches " + ", ".join(map(str, batches)))
    if "fusion" in columns and _fixed(data, "fusion"):
        parts.append(_fixed(data, "fusion"))
    if "scope" in columns and _fixed(data, "scope"):
        parts.append(f"{_fixed(data, 'scope')} scope")
    return ", ".join(parts)


def _hw_falls_back(data: pd.DataFrame) -> pd.Series:
    """Rows whose hardware cannot run the format (the design runs dense or as CSR)."""
    if "hw_fallback_ops" not in data.columns:
        return pd.Series(False, index=data.index)
    return data["hw_fallback_ops"].fillna(0).astype(np.int64) > 0


def _listed(items: list[str], shown: int = 6) -> str:
    more = f" and {len(items) - shown} more (see the data)" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def _fallback_note(data: pd.DataFrame, who: Sequence[str] = ("model", "format")) -> list[str]:
    """Subtitle lines naming the designs that fall back: hollow markers for the hardware's
    fallbacks (with the op count and the kernel), and the layers whose shape keeps them
    dense; none when nothing falls back (or the frame has no fallback fields)."""
    if not all(c in data.columns for c in FALLBACK_FIELDS):
        return []
    keys = [c for c in who if c in data.columns and data[c].nunique() > 1 or c == "format"]
    designs = data.drop_duplicates([*keys, *FALLBACK_FIELDS])
    lines = []
    hw = designs[_hw_falls_back(designs)]
    if len(hw):
        items = [" ".join(str(getattr(r, k)) for k in keys)
                 + f" ({int(r.hw_fallback_ops)} ops {'CSR' if r.hw_fallback == 'csr' else 'dense'})"
                 for r in hw.itertuples(index=False)]
        lines.append("hollow markers: the hardware lacks the format and runs it dense or as "
                     "CSR: " + _listed(list(dict.fromkeys(items))))
    shape = designs[designs["shape_fallback_ops"].fillna(0) > 0]
    if len(shape):
        ops = shape["shape_fallback_ops"].astype(int)
        names = list(dict.fromkeys(" ".join(str(getattr(r, k)) for k in keys)
                                   for r in shape.itertuples(index=False)))
        count = (f"{ops.iloc[0]} ops" if ops.nunique() == 1
                 else f"{ops.min()} to {ops.max()} ops")
        lines.append(f"layers whose shape cannot take the format stay dense ({count}) in "
                     + (_listed(names, 3) if len(names) <= 4
                        else f"{len(names)} designs (see the data)"))
    return lines


#: Subtitle lines longer than this wrap: a chart's width must not follow its notes.
SUBTITLE_WIDTH = 110


def _title(text: str, *subtitle: str | list[str]) -> alt.TitleParams:
    lines = []
    for s in subtitle:
        lines += [s] if isinstance(s, str) else list(s)
    lines = [w for s in lines if s for w in textwrap.wrap(s, SUBTITLE_WIDTH)]
    return alt.TitleParams(text=text, subtitle=lines, anchor="start") if lines \
        else alt.TitleParams(text=text, anchor="start")


# --- the bound beside the expectation (calibrated results) --------------------------------------

#: The two estimates a calibrated chart draws, in legend order, with their marks: the bound
#: solid with circles, the expectation dashed with triangles, in every chart.
_ESTIMATES = ("bound", "expected")
_ESTIMATE_SHAPES = {"bound": "circle", "expected": "triangle-down"}
_ESTIMATE_DASHES = {"bound": [1, 0], "expected": [5, 3]}
#: Columns a calibrated design row carries beside its expected latency and speedup.
_EXPECTED_NOTES = ("fraction_of_sol", "validated_rmspe", "calibration")


def _expected_by(frame: pd.DataFrame) -> np.ndarray:
    """Per row, the predictor sets (devices) that priced its expectation, from ``predictor``
    (``dse evaluate``: ``"h100-sxm:nm:fraction 80%, ..."``) or ``predictors`` (a search or
    sweep: ``"h100-sxm:gemm:fraction; ..."``); '' where neither says."""
    column = next((c for c in ("predictor", "predictors", "expected_by") if c in frame), None)
    if column is None:
        return np.full(len(frame), "", dtype=object)
    codes, cells = pd.factorize(frame[column].astype(object), use_na_sentinel=False)
    text = [", ".join(sorted({p.split(":")[0] for p in re.split(r"[;,] ", str(c)) if ":" in p}))
            or ("" if column != "expected_by" or pd.isna(c) else str(c)) for c in cells]
    return np.array(text, dtype=object)[codes]


def _with_estimates(out: pd.DataFrame, frame: pd.DataFrame, values: Sequence[str],
                    after: str) -> pd.DataFrame:
    """``out`` (one row per row of ``frame``, in its order) as two rows a design when
    ``frame`` carries the expectation (``expected_speedup``): ``estimate`` ``bound`` (each of
    ``values`` the bound's) then ``expected`` (each ``expected_<value>``), both with
    ``bound_<value>`` and ``expected_<value>`` so either row can draw the other, and
    ``expected_by`` (the predictor sets), ``fraction_of_sol``, ``validated_rmspe`` and
    ``calibration`` where ``frame`` has them; ``estimate`` goes after column ``after``. A
    frame without the expectation gives ``out`` as it is."""
    if "expected_speedup" not in frame.columns:
        return out
    wide = out.reset_index(drop=True)
    for value in values:
        wide[f"bound_{value}"] = wide[value].to_numpy(dtype=np.float64)
        wide[f"expected_{value}"] = frame[f"expected_{value}"].to_numpy(dtype=np.float64)
    wide["expected_by"] = _expected_by(frame)
    for column in _EXPECTED_NOTES:
        if column in frame.columns:
            wide[column] = (_text(frame[column]).to_numpy() if column == "calibration"
                            else frame[column].to_numpy(dtype=np.float64))
    bound = wide.assign(estimate="bound")
    exp = wide.assign(estimate="expected", **{v: wide[f"expected_{v}"] for v in values})
    both = pd.concat([bound, exp], ignore_index=True)
    both.insert(both.columns.get_loc(after) + 1, "estimate", both.pop("estimate"))
    return both


def _expected_devices(data: pd.DataFrame) -> str:
    """The predictor sets (devices) of the expected rows of ``data``, e.g. ``h100-sxm``."""
    rows = data[data["estimate"] == "expected"] if "estimate" in data else data
    return ", ".join(sorted({d for text in _expected_by(rows) for d in str(text).split(", ")
                             if d}))


def _estimate_words(data: pd.DataFrame) -> dict[str, str]:
    """Legend words of the two estimates: the bound is the speed of light; the expectation
    names its predictors and says it is not a bound."""
    device = _expected_devices(data)
    return {"bound": "bound: speed of light",
            "expected": f"expected: {device} predictors (not a bound)" if device
            else "expected (not a bound)"}


def _estimate_channels(data: pd.DataFrame, title: str, bound_shape: str = "circle"
                       ) -> tuple[alt.Shape, alt.StrokeDash]:
    """Shape and stroke-dash encodings of ``estimate`` with one legend naming both: circles
    (``bound_shape``: ``square`` where the bound is a bar) and solid lines the bound,
    triangles and dashed lines the expectation."""
    words = _estimate_words(data)
    legend = alt.Legend(labelExpr=" : ".join(
        f"datum.value == '{e}' ? {json.dumps(words[e])}" for e in _ESTIMATES)
        + " : datum.value", symbolOpacity=1, labelLimit=360)
    shape = alt.Shape("estimate:N", title=title, sort=list(_ESTIMATES), legend=legend,
                      scale=alt.Scale(domain=list(_ESTIMATES), range=[
                          bound_shape if e == "bound" else _ESTIMATE_SHAPES[e]
                          for e in _ESTIMATES]))
    dash = alt.StrokeDash("estimate:N", title=title, sort=list(_ESTIMATES), legend=legend,
                          scale=alt.Scale(domain=list(_ESTIMATES),
                                          range=[_ESTIMATE_DASHES[e] for e in _ESTIMATES]))
    return shape, dash


def _expected_tooltip() -> list:
    return [alt.Tooltip("estimate:N", title="estimate"),
            alt.Tooltip("expected_by:N", title="expected by predictors"),
            alt.Tooltip("fraction_of_sol:Q", title="fraction of the speed of light",
                        format=".3f"),
            alt.Tooltip("validated_rmspe:Q", title="held-out RMSPE", format=".0%"),
            alt.Tooltip("calibration:N", title="priced how")]


def _expectation_note(data: pd.DataFrame, marks: str) -> str:
    """The subtitle line of a calibrated chart: how the expectation is drawn (``marks``) and
    that it is one, not a bound."""
    device = _expected_devices(data)
    return (f"{marks}: expected" + (f", from the kernel predictors {device}" if device else "")
            + " (kernels one op at a time, unfused): an expectation, not a bound")


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
    _one_value(frame, ("hardware", "batch", "fusion", "scope", "hw_point"), builder)
    if expected is not None:
        frame = _with_expected(frame, expected, builder)
    out = pd.DataFrame({
        "model": _text(frame["model"]).to_numpy(),
        "format": _text(frame["format"]).to_numpy(),
        "sparsity": frame["sparsity"].to_numpy(dtype=np.float64),
        "speedup": frame["speedup"].to_numpy(dtype=np.float64),
        "accuracy": frame["accuracy"].to_numpy(dtype=np.float64),
        **_fallback_columns(frame),
        **_design_columns(frame, ("hardware", "batch", "fusion", "scope")),
    })
    out = out[out["accuracy"].notna()]
    out = out.drop_duplicates(["model", "format"])
    out.insert(2, "group", _groups(out["format"]))
    out.insert(4, "sparsity_label", out["sparsity"].map(percent).astype(object))
    runs = np.where(out["hw_fallback"] == "csr", " (runs as CSR)", " (runs dense)") \
        if "hw_fallback" in out else ""
    # The format names the point (2:4 and 2:8 share a colour and their sparsity with 1:4 and
    # 4:8, so "50%" alone would not tell them apart).
    name = out["format"].astype(object)
    label = np.where(_hw_falls_back(out), name + runs, name)
    out.insert(7, "label", np.where(out["group"] == "dense", "", label).astype(object))
    if "expected_speedup" not in frame.columns:
        return _sorted(out, ["model", "group", "sparsity", "format"])
    extra = ["expected_speedup", "expected_latency_s", "predictor", "validated_rmspe",
             "calibration", "expected_fallback_share", "expected_fallbacks"]
    known = frame.assign(model=_text(frame["model"]), format=_text(frame["format"]))
    known = known.drop_duplicates(["model", "format"])
    out = out.merge(known[["model", "format", *[c for c in extra if c in frame.columns]]],
                    on=["model", "format"], how="left")
    out.insert(out.columns.get_loc("speedup"), "bound_speedup", out["speedup"])
    bound = out.assign(estimate="bound")
    exp = out.assign(estimate="expected", speedup=out["expected_speedup"], label="")
    both = pd.concat([bound, exp[exp["speedup"].notna()]], ignore_index=True)
    both.insert(2, "estimate", both.pop("estimate"))
    return _sorted(both, ["model", "estimate", "group", "sparsity", "format"])


def _with_expected(frame: pd.DataFrame, expected: pd.DataFrame, builder: str) -> pd.DataFrame:
    """``frame`` (designs) with the expected columns of ``expected_designs`` (per model) and
    each design's share of expected time priced without its family's kernel data."""
    from dse.calibrate.expected import expected_designs

    from .calibration import expected_fallback_share

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
    sparsity. Designs that fall back are hollow, and named in the subtitle. With the
    ``estimate`` column (``sparsity_roofline_data(frame, expected)``): a bound curve (solid,
    circles) and an expected curve (dashed, triangles) per group. An empty frame (no design
    has an accuracy) draws the axes and says so."""
    if not len(data):
        return alt.Chart(_inline(data)).mark_point().encode(
            x=alt.X("speedup:Q", title="speedup over dense (x)"),
            y=alt.Y("accuracy:Q", title="accuracy (%)")).properties(
            width=_FACET_WIDTH, height=_FACET_HEIGHT, title=_title(
                "Sparsity Roofline: accuracy against speedup",
                "nothing to draw: no design has an accuracy in the accuracy table (give one "
                "that has these models and formats)"))
    groups = _group_order(data["group"])
    color = alt.Color("group:N", title="pattern", sort=groups,
                      scale=alt.Scale(domain=groups))
    x = alt.X("speedup:Q", title="speedup over dense (x)", scale=alt.Scale(zero=False))
    y = alt.Y("accuracy:Q", title="accuracy (%)", scale=alt.Scale(zero=False))
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
    # Labels alternate above and below the point along each line, so neighbours of one
    # pattern (2:8 and 1:4 at 75%) do not print over each other.
    above = base.transform_window(rank="row_number()", groupby=["model", "group"],
                                  sort=[alt.SortField("sparsity")])
    labels_up = above.transform_filter("datum.rank % 2 == 1").mark_text(
        align="left", dx=7, dy=-8, fontSize=9).encode(text="label:N")
    labels_down = above.transform_filter("datum.rank % 2 == 0").mark_text(
        align="left", dx=7, dy=10, fontSize=9).encode(text="label:N")
    if "estimate" in data.columns:
        return _sparsity_roofline_calibrated(data, base, color, tooltip, own,
                                             [labels_up, labels_down])
    layered = alt.layer(line, points, hollow, labels_up, labels_down,
                        data=_inline(data)).properties(width=_FACET_WIDTH,
                                                       height=_FACET_HEIGHT)
    return _facet_by_model(layered, data).properties(title=_title(
        "Sparsity Roofline: accuracy against speed-of-light speedup",
        _context(data, ("hardware", "batch", "fusion", "scope")), _fallback_note(data)))


def _sparsity_roofline_calibrated(data: pd.DataFrame, base: alt.Chart, color: alt.Color,
                                  tooltip: list, own, labels: list) -> alt.FacetChart:
    """The Sparsity Roofline with a bound curve (solid, circles) and an expected curve
    (dashed, triangles) per pattern group, each expected point joined to its bound."""
    shape, dash = _estimate_channels(data, "speedup")
    tip = [*tooltip, alt.Tooltip("estimate:N", title="speedup"),
           alt.Tooltip("bound_speedup:Q", title="bound speedup", format=".3f"),
           alt.Tooltip("expected_speedup:Q", title="expected speedup", format=".3f"),
           alt.Tooltip("validated_rmspe:Q", title="held-out RMSPE", format=".0%"),
           alt.Tooltip("expected_fallback_share:Q", title="expected time without own data",
                       format=".0%"),
           alt.Tooltip("expected_fallbacks:N", title="priced how")]
    groups = _group_order(data["group"])
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
                        data=_inline(data)).properties(width=_FACET_WIDTH + 60,
                                                       height=_FACET_HEIGHT)
    exp = data[data["estimate"] == "expected"]
    notes = []
    if len(exp):
        rmspe = exp["validated_rmspe"].dropna()
        err = (f"{rmspe.min():.0%}" if rmspe.nunique() == 1 or
               f"{rmspe.min():.0%}" == f"{rmspe.max():.0%}"
               else f"{rmspe.min():.0%} to {rmspe.max():.0%}") if len(rmspe) else ""
        device = _expected_devices(data)
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
    return _facet_by_model(layered, data).properties(title=_title(
        "Sparsity Roofline: accuracy against speedup, the bound and the expectation",
        _context(data, ("model", "hardware", "batch", "fusion", "scope")),
        _fallback_note(data[data["estimate"] == "bound"]), notes))


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
    _one_value(layers, ("hardware",), builder)
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
    fallback = _text(kept["fallback"]).fillna("") if "fallback" in kept \
        else pd.Series("", index=kept.index, dtype=object)
    points = pd.DataFrame({
        "series": "op",
        "roof": None,
        "model": _text(kept["model"]) if "model" in kept else None,
        "format": _text(kept["format"]),
        "op": _text(kept["op"]),
        "unit": _text(kept["unit"]),
        "bound": _text(kept["bound"]) if "bound" in kept else None,
        "intensity": flops[keep] / nbytes[keep],
        "flops_per_s": flops[keep] / time[keep],
        "fallback": fallback,
    })
    points["unit_label"] = points["unit"].map(lambda u: _UNIT_WORDS.get(u, u))
    # Which roof each op runs under: CSR work (unstructured formats' own GEMMs, hw:csr
    # fallbacks) on the vector cores at the CSR dtype, other vector work at the vector dtype.
    gemm = kept["kind"].isin(["conv", "linear", "matmul"]).to_numpy() if "kind" in kept \
        else np.ones(len(kept), dtype=bool)
    unstructured = points["format"].map(lambda n: _format_info(n)[0] == "unstructured")
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
                else _text(values).to_numpy()
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
    _one_value(expected, ("hardware",), builder)
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
        "model": _text(kept["model"]).to_numpy() if "model" in kept else None,
        "format": _text(kept["format"]).to_numpy(),
        "op": _text(kept["op"]).to_numpy(),
        "unit": _text(kept["unit"]).to_numpy() if "unit" in kept else None,
        "bound": _text(kept["bound"]).to_numpy() if "bound" in kept else None,
        "intensity": flops[keep] / nbytes[keep],
        "flops_per_s": flops[keep] / seconds[keep],
        "fallback": _text(kept["fallback"]).fillna("").to_numpy() if "fallback" in kept
        else "",
        "time_s": kept["time_s"].to_numpy(dtype=np.float64),
        "expected_s": seconds[keep],
        "predictor": _text(kept["predictor"]).to_numpy(),
        "kernel": _text(kept["kernel"]).fillna("").to_numpy() if "kernel" in kept else "",
        "validated_rmspe": kept["validated_rmspe"].to_numpy(dtype=np.float64)
        if "validated_rmspe" in kept else np.nan,
        "calibration": _text(kept["calibration"]).fillna("").to_numpy(),
        "calibration_fallback": [is_calibration_fallback(n) for n in kept["calibration"]],
    })
    out["unit_label"] = out["unit"].map(lambda u: _UNIT_WORDS.get(u, u))
    if "batch" in kept:
        out["batch"] = kept["batch"].to_numpy(dtype=np.int64)
    if "scope" in kept:
        out["scope"] = _text(kept["scope"]).to_numpy()
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
        name = _fixed(mes, "dataset") or "dataset"
        labels["measured"] = (f"measured: {name}, same shape as an op"
                              if (mes["match"] == "same shape").all()
                              else f"measured: {name}, every shape (none is an op's)")
    return labels


def roofline_chart(data: pd.DataFrame) -> alt.LayerChart | alt.FacetChart:
    """Log-log roofline: the roofs the ops run under as lines (``used``), knees as labelled
    points, ops coloured by format and shaped by the unit they run on; ops that fall back are
    hollow. A column per batch when the frame holds several."""
    formats = _format_order(data.loc[data["series"] == "op", "format"].dropna())
    x = alt.X("intensity:Q", title="arithmetic intensity (FLOP/byte)",
              scale=alt.Scale(type="log"), axis=alt.Axis(format="~g"))
    y = alt.Y("flops_per_s:Q", title="attainable throughput (FLOP/s)",
              scale=alt.Scale(type="log"), axis=alt.Axis(format="~s"))
    roof_field = "roof_label" if "roof_label" in data.columns else "roof"
    shown = alt.datum.used if "used" in data.columns else alt.expr.isValid(alt.datum.roof)
    base = alt.Chart().encode(x=x, y=y)
    roofs = base.transform_filter((alt.datum.series == "roof") & shown).mark_line(
        color="#444", strokeWidth=1.5).encode(
        strokeDash=alt.StrokeDash(f"{roof_field}:N", title="roof",
                                  legend=alt.Legend(labelLimit=320)),
        detail=f"{roof_field}:N")
    knee_filter = (alt.datum.series == "knee") & shown
    knees = base.transform_filter(knee_filter).mark_point(
        shape="diamond", color="#444", filled=True, size=50).encode(
        tooltip=[f"{roof_field}:N",
                 alt.Tooltip("intensity:Q", title="knee (FLOP/byte)", format=".4~g"),
                 alt.Tooltip("flops_per_s:Q", title="peak (FLOP/s)", format=".4~s")])
    knee_labels = base.transform_filter(knee_filter).transform_calculate(
        label="'knee ' + format(datum.intensity, '.3~g') + ' FLOP/B'").mark_text(
        align="left", dx=5, dy=-8, fontSize=9, color="#444").encode(text="label:N")
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
    context = _context(data, ("hardware", "batch", "fusion", "scope"))
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
        layered = alt.layer(roofs, knees, knee_labels, *points, data=_inline(data))
        title = _title("Roofline: per-op bound, expected and measured throughput against the "
                       "roofs of the units used", f"{head} on {context}" if head else context,
                       notes)
    else:
        layered = alt.layer(roofs, knees, knee_labels, ops, fell, data=_inline(data))
        title = _title("Roofline: per-op speed of light against the roofs of the units used",
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
        name = _fixed(measured, "dataset") or "the dataset"
        where = _fixed(measured, "device_name")
        dtype = _fixed(measured, "dtype")
        cache = _fixed(measured, "cache") if "cache" in measured else None
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
                         + (f"; measured on that device, not on {_fixed(data, 'hardware')}"
                            if elsewhere else ""))
        else:
            back.append(base.transform_filter(is_mes).mark_point(
                filled=True, size=30, opacity=0.35, color="#777").encode(
                shape=shape, tooltip=tip))
            notes.append(f"grey crosses: measured ({calls}), the fastest kernel of each of "
                         f"the {shapes} "
                         f"shapes of dataset {about}; none is the shape of an op of the trace, "
                         "so they show what kernels reach on the device, not these ops"
                         + (f"; measured on that device, not on {_fixed(data, 'hardware')}"
                            if elsewhere else ""))
    return back + layers, notes


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
    _one_value(layers, ("hardware", "batch", "fusion", "scope"), builder)
    frame = pd.DataFrame({"model": _text(layers["model"]), "format": _text(layers["format"]),
                          "bound": _text(layers["bound"]),
                          "time_s": layers["time_s"].to_numpy(dtype=np.float64)})
    out = frame.groupby(["model", "format", "bound"], sort=False).agg(
        ops=("time_s", "size"), time_s=("time_s", "sum")).reset_index()
    totals = out.groupby(["model", "format"], sort=False)[["ops", "time_s"]].transform("sum")
    design = _design_columns(layers, ("hardware", "batch", "fusion", "scope"))
    out["op_share"] = out["ops"] / totals["ops"]
    # A design whose ops all take zero time has no time mix; NaN says so rather than 0/0 noise.
    out["time_share"] = out["time_s"] / totals["time_s"].where(totals["time_s"] > 0)
    out.insert(2, "block_size", out["format"].map(lambda name: _format_info(name)[2]))
    out["ops"] = out["ops"].astype(np.int64)
    if "fallback" in layers.columns:
        per_design = _layer_fallbacks(layers.assign(model=frame["model"].to_numpy(),
                                                    format=frame["format"].to_numpy()),
                                      ["model", "format"])
        out = out.merge(per_design, on=["model", "format"], how="left")
        marked = np.where(_hw_falls_back(out), out["format"] + " *", out["format"])
        out["format_label"] = marked.astype(object)
    for column, values in design.items():
        out[column] = values[0]
    return _sorted(out, ["model", "format", "bound"])


def bound_mix_chart(data: pd.DataFrame, share: str = "time_share") -> alt.FacetChart:
    """Stacked bars per format of the share of time (``share="time_share"``) or of ops
    (``"op_share"``) that is memory- or compute-bound; a column per model, a row per batch
    when several. Formats the hardware cannot run are starred and their bars faded."""
    if share not in ("time_share", "op_share"):
        raise ValueError(f"bound_mix_chart: share={share!r}; use 'time_share' or 'op_share'")
    what = "time" if share == "time_share" else "ops"
    labelled = "format_label" in data.columns
    order = _format_order(data["format"])
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
    layered = alt.layer(bar, data=_inline(data)).properties(width=_FACET_WIDTH,
                                                            height=_FACET_HEIGHT)
    note = [line.replace("hollow markers", "* and faded bars") for line in
            _fallback_note(data.drop_duplicates(["model", "format"]))]
    return _facet_by_model(layered, data).properties(title=_title(
        f"Memory- and compute-bound share of {what}, by format",
        _context(data, ("hardware", "batch", "fusion", "scope")), note))


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
    _one_value(frame, ("hardware", "fusion", "scope", "hw_point"), builder)
    out = pd.DataFrame({
        "model": _text(frame["model"]).to_numpy(),
        "format": _text(frame["format"]).to_numpy(),
        "batch": frame["batch"].to_numpy(dtype=np.int64),
        "feature_bytes_share": frame["feature_bytes_share"].to_numpy(dtype=np.float64),
        "speedup": frame["speedup"].to_numpy(dtype=np.float64),
        **_fallback_columns(frame),
        **_design_columns(frame, ("hardware", "fusion", "scope")),
    })
    out = _with_estimates(out, frame, ("speedup",), after="format")
    lines = ["estimate", "model", "format"] if "estimate" in out else ["model", "format"]
    out = _sorted(out, [*lines, "batch"])
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
    formats = _format_order(data["format"])
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
                    *_expected_tooltip()]
    own = ~(alt.expr.isValid(alt.datum.hw_fallback_ops) & (alt.datum.hw_fallback_ops > 0))
    inline = _inline(data)

    def panel(y: alt.Y, title: str, estimates: bool) -> alt.FacetChart:
        base = alt.Chart().encode(x=x, y=y, color=color, tooltip=tooltip)
        if calibrated and not estimates:  # the traffic is the bound's: drawn once
            base = base.transform_filter(alt.datum.estimate == "bound")
        line = base.mark_line().encode(
            detail="segment:N" if "segment" in data.columns else "format:N")
        filled = base.transform_filter(own).mark_point(filled=True)
        hollow = base.transform_filter(~own).mark_point(filled=False, size=70, strokeWidth=2)
        if calibrated and estimates:
            shape, dash = _estimate_channels(data, "speedup")
            line, filled, hollow = (line.encode(strokeDash=dash), filled.encode(shape=shape),
                                    hollow.encode(shape=shape))
        layered = alt.layer(line, filled, hollow, data=inline)
        return layered.properties(width=_FACET_WIDTH, height=180).facet(
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
    return alt.vconcat(share, speed).properties(title=_title(
        "Feature share of DRAM traffic and speedup against batch",
        ", ".join(p for p in (_context(data, ("hardware", "fusion", "scope")), joined) if p),
        _fallback_note(bound.drop_duplicates(["model", "format"])),
        _expectation_note(data, "dashed lines and triangles") if calibrated else ""))


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
    _one_value(frame, ("fusion", "scope"), builder)
    ops = frame["ops"].to_numpy(dtype=np.float64)
    out = pd.DataFrame({
        "hardware": _text(frame["hardware"]).to_numpy(),
        "model": _text(frame["model"]).to_numpy(),
        "format": _text(frame["format"]).to_numpy(),
        "batch": frame["batch"].to_numpy(dtype=np.int64),
        "latency_s": frame["latency_s"].to_numpy(dtype=np.float64),
        "speedup": frame["speedup"].to_numpy(dtype=np.float64),
        "memory_bound_share": frame["memory_bound_ops"].to_numpy(dtype=np.float64)
        / np.where(ops > 0, ops, np.nan),
        "feature_bytes_share": frame["feature_bytes_share"].to_numpy(dtype=np.float64),
        **_fallback_columns(frame),
        **_design_columns(frame, ("fusion", "scope")),
    })
    out = _with_estimates(out, frame, ("latency_s", "speedup"), after="batch")
    keys = ["model", "batch", "format", "hardware"]
    return _sorted(out, keys + ["estimate"] if "estimate" in out else keys)


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
    formats = _format_order(data["format"])
    sparse_formats = [f for f in formats if f != "dense"]
    inline = _inline(data)
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
                    *_expected_tooltip()]
    color = alt.Color("hardware:N", title="hardware", legend=alt.Legend(symbolOpacity=1))
    opacity = alt.condition(own, alt.value(1.0), alt.value(0.3))

    def facet(layered, title: str):
        return layered.properties(width=_FACET_WIDTH, height=_FACET_HEIGHT - 40).facet(
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
        shape, _ = _estimate_channels(data, "estimate", bound_shape="square")
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
    note = [line.replace("hollow markers", faded) for line in _fallback_note(
        bound_rows.drop_duplicates(["hardware", "model", "format"]),
        ("hardware", "model", "format"))]
    heads = ("Speed-of-light latency", "Speedup over dense on the same hardware")
    if calibrated:
        note.append(_expectation_note(data, "bars: the bound (speed of light); triangles, "
                                            "joined to their bar by a dotted line"))
        heads = ("Latency: the bound (bars) and the expectation (triangles)",
                 "Speedup over dense on the same hardware: the bound (bars) and the "
                 "expectation (triangles)")
    return alt.vconcat(
        facet(alt.layer(*latency, data=inline), heads[0]),
        facet(alt.layer(*speed, data=inline), heads[1]),
    ).properties(title=_title("Latency and speedup by hardware" + (
        ", the bound and the expectation" if calibrated else ""),
        _context(data, ("model", "batch", "fusion", "scope")), note))


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
    _one_value(frame, ("model", "fusion", "scope"), builder)
    batch = frame["batch"].to_numpy(dtype=np.float64)
    energy = frame["energy_j"].to_numpy(dtype=np.float64)
    design = {
        **_design_columns(frame, ("model", "hardware")),
        "format": _text(frame["format"]).to_numpy(),
        "batch": frame["batch"].to_numpy(dtype=np.int64),
        **_design_columns(frame, ("fusion", "scope")),
    }
    extra = {
        "power_capped": (frame["power_capped"].to_numpy(dtype=bool) if "power_capped" in frame
                         else np.zeros(len(frame), dtype=bool)),
        "energy_unpriced": (_text(frame["energy_unpriced"]).fillna("").to_numpy()
                            if "energy_unpriced" in frame else np.full(len(frame), "")),
        **_fallback_columns(frame),
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
    out = _sorted(out, keys)
    return out.drop(columns="part_order")


def energy_breakdown_chart(data: pd.DataFrame) -> alt.VConcatChart:
    """Two panels of stacked bars against batch (energy per inference, mJ): by unit, and by
    traffic class; a column per format and a row per hardware. The title names the model,
    hardware, fusion and scope where fixed, the subtitle what energy leaves out (a lower bound
    there) and the designs whose power limit binds."""
    inline = _inline(data)
    formats = _format_order(data["format"])
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
        width = max(120, min(_FACET_WIDTH, 36 * len(batches)))
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
                     + _listed([f"{r.format} at batch {r.batch}"
                                + (f" on {r.hardware}" if several_hw else "")
                                for r in capped.itertuples(index=False)]))
    notes += [line.replace("hollow markers", "bars")
              for line in _fallback_note(data.drop_duplicates(["hardware", "format", "batch"]),
                                         ("hardware", "format"))]
    return alt.vconcat(panel("by unit"), panel("by traffic class")).resolve_scale(
        color="independent").properties(title=_title(
            "Energy per inference by unit and by traffic class against batch",
            _context(data, ("model", "hardware", "fusion", "scope")), notes))


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
        "model": _text(results["model"]).to_numpy(),
        "hardware": _text(results["hardware"]).to_numpy() if "hardware" in results else None,
        "batch": pd.array(results["batch"], dtype="Int64") if "batch" in results
        else pd.array([pd.NA] * n, dtype="Int64"),
        "format": _text(results["format"]).to_numpy(),
        "speedup": results["speedup"].to_numpy(dtype=np.float64),
        "accuracy": results["accuracy"].to_numpy(dtype=np.float64),
    }, index=pd.RangeIndex(n))
    out.insert(4, "group", _groups(out["format"]))
    out["verdict"] = _text(results["verdict"]).to_numpy() if "verdict" in results \
        else "no target"
    for column, values in {**_fallback_columns(results),
                           **_design_columns(results, ("fusion", "scope"))}.items():
        out[column] = values
    out = _with_estimates(out, results, ("speedup",), after="format")
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
    by pattern group; a column per model, a row per batch when there are several. With the
    ``estimate`` column (a calibrated search) two fronts: the bound's (solid, circles) and
    the expectation's (dashed, triangles), the legend saying which is which."""
    calibrated = "estimate" in data.columns
    groups = _group_order(data["group"])
    x = alt.X("speedup:Q", title="speedup over dense (x)", scale=alt.Scale(zero=False))
    y = alt.Y("accuracy:Q", title="accuracy (%)", scale=alt.Scale(zero=False))
    tooltip = ["model:N", "hardware:N", "batch:Q", "format:N", "verdict:N",
               alt.Tooltip("speedup:Q", format=".3f"), alt.Tooltip("accuracy:Q", format=".2f")]
    if calibrated:
        tooltip += [alt.Tooltip("bound_speedup:Q", title="bound speedup", format=".3f"),
                    alt.Tooltip("expected_speedup:Q", title="expected speedup", format=".3f"),
                    *_expected_tooltip()]
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
        shape, dash = _estimate_channels(data, "speedup")
        everyone = everyone.encode(shape=shape)
        line = line.encode(strokeDash=dash, detail="estimate:N")
        points, hollow = points.encode(shape=shape), hollow.encode(shape=shape)
        notes.append(_expectation_note(data, "dashed front, triangles") + "; the search "
                     "ranked by it. Solid front, circles: the bound's front of the same "
                     "designs; faint points: every design, both ways")
    layered = alt.layer(everyone, line, points, hollow, data=_inline(data)).properties(
        width=_FACET_WIDTH, height=_FACET_HEIGHT)
    note = _fallback_note(data[data["pareto"]].drop_duplicates(["model", "format"]))
    return _facet_by_model(layered, data).properties(title=_title(
        "Search: Pareto front of speedup and accuracy"
        + (", the bound and the expectation" if calibrated else ""),
        _context(data, ("hardware", "batch", "fusion", "scope")), note, notes))


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
    rows = results[_text(results["role"]).to_numpy() == "candidate"]
    calibrated = {"expected_speedup", "bound_speedup_over_baseline"} <= set(rows.columns)
    speed = "bound_speedup_over_baseline" if calibrated else "speedup_over_baseline"
    n = len(rows)
    out = pd.DataFrame({
        "model": _text(rows["model"]),
        "hardware": _text(rows["hardware"]) if "hardware" in rows else None,
        "batch": rows["batch"].astype("Int64") if "batch" in rows
        else pd.array([pd.NA] * n, dtype="Int64"),
        "format": _text(rows["format"]),
        **{c: _text(rows[c]) for c in ("fusion", "scope") if c in rows},
        "speedup_over_baseline": rows[speed].to_numpy(dtype=np.float64),
        "accuracy_drop": rows["accuracy_drop"].to_numpy(dtype=np.float64),
        "verdict": _text(rows["verdict"]),
        "rank": rows["rank"].astype("Int64") if "rank" in rows
        else pd.array([pd.NA] * n, dtype="Int64"),
    }, index=rows.index)
    for column, values in _fallback_columns(rows).items():
        out[column] = values
    out.insert(list(out.columns).index("format") + 1, "group", _groups(out["format"]))
    keys = ["model", "batch", "rank", "speedup_over_baseline"]
    if calibrated:
        out["bound_meets_target"] = rows["bound_meets_target"].to_numpy(dtype=bool) \
            if "bound_meets_target" in rows else np.nan
        out = _with_estimates(out, rows.assign(
            expected_speedup_over_baseline=rows["speedup_over_baseline"]),
            ("speedup_over_baseline",), after="group")
        keys = ["model", "batch", "estimate", "rank", "speedup_over_baseline"]
    out = out.sort_values(keys, ascending=[k != "speedup_over_baseline" for k in keys],
                          na_position="last", kind="stable")
    return out.reset_index(drop=True)


def target_chart(data: pd.DataFrame, ratio: float | None = None,
                 max_acc_drop: float | None = None, target: str | None = None) -> alt.FacetChart:
    """Accuracy drop (y, lower is better) against speedup over the baseline (x), coloured by
    verdict, a column per model (a row per batch when several); ``ratio`` and
    ``max_acc_drop`` (the target's) draw its two edges as dashed rules; ``target`` (its text,
    e.g. ``1.3x_over_2:4``) goes into the title. With the ``estimate`` column (a calibrated
    search) the expected points (triangles, coloured by the verdict, which the expectation
    decides) each have their bound beside them (grey circles, joined by a dotted line)."""
    calibrated = "estimate" in data.columns
    verdicts = [v for v in _VERDICTS if v != "no target" or v in set(data["verdict"])]
    colors = [c for v, c in zip(_VERDICTS, _VERDICT_COLORS, strict=True) if v in verdicts]
    x = alt.X("speedup_over_baseline:Q", title="speedup over the baseline (x)",
              scale=alt.Scale(zero=False))
    y = alt.Y("accuracy_drop:Q", title="accuracy drop (percentage points)",
              scale=alt.Scale(zero=False))
    color = alt.Color("verdict:N", title="verdict",
                      scale=alt.Scale(domain=verdicts, range=colors))
    tooltip = ["model:N", "format:N", "verdict:N", "rank:Q",
               alt.Tooltip("speedup_over_baseline:Q", format=".3f"),
               alt.Tooltip("accuracy_drop:Q", format=".2f")]
    verdict_marks = alt.Chart().mark_point(filled=True, size=60)
    if calibrated:
        shape, _ = _estimate_channels(data, "speedup")
        tooltip += [alt.Tooltip("bound_speedup_over_baseline:Q", title="bound: x baseline",
                                format=".3f"),
                    alt.Tooltip("expected_speedup_over_baseline:Q",
                                title="expected: x baseline", format=".3f"),
                    alt.Tooltip("bound_meets_target:N", title="meets it by the bound"),
                    *_expected_tooltip()]
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
    layered = alt.layer(*layers, data=_inline(data)).properties(width=_FACET_WIDTH,
                                                                height=_FACET_HEIGHT)
    bound = data[data["estimate"] == "bound"] if calibrated else data
    note = [line.replace("hollow markers: ", "")
            for line in _fallback_note(bound.drop_duplicates(["model", "format"]))]
    if calibrated:
        note.append(_expectation_note(data, "triangles") + "; the target compares it. Grey "
                    "circles, joined by a dotted line: the same design by the bound")
    points = "point" if max_acc_drop == 1 else "points"
    rule = (f"; dashed: at least {ratio:g}x the baseline's speedup, at most {max_acc_drop:g} "
            f"{points} below its accuracy" if ratio is not None and max_acc_drop is not None
            else "")
    head = f"Candidates against the target {target}" if target else "Candidates against the target"
    return _facet_by_model(layered, data).properties(title=_title(
        head + (", the bound and the expectation" if calibrated else ""),
        _context(data, ("hardware", "batch", "fusion", "scope")) + rule, note))


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
            "field": _text(rows["field"]).to_numpy(),
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
        out["fallback"] = _fallback_columns(out)["fallback"]
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
    return alt.layer(bars, zero, data=_inline(data)).properties(
        width=420, height=alt.Step(14), title=_title(
            f"Sensitivity of the speedup{what} to each hardware field, halved and doubled",
            _context(data), fallback))


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
    """``out`` with the design columns ``frame`` has (checked constant by ``_one_value``)
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
        return _title(text, *notes) if any(notes) else text
    row = data.iloc[0] if len(data) else None
    fallback = fallback_text(row["shape_fallback_ops"], row["hw_fallback"],
                             row["hw_fallback_ops"]) if row is not None else ""
    return _title(text, f"fallbacks: {fallback}" if fallback else "fallbacks: none", *notes)


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
    _one_value(timeline, _SIM_DESIGN, builder)
    if isinstance(max_bars, bool) or not isinstance(max_bars, int | np.integer) \
            or max_bars < 1:
        raise ValueError(f"{builder}: max_bars={max_bars!r}; give a whole number >= 1")
    if not 0 <= tolerance < 1:
        raise ValueError(f"{builder}: tolerance={tolerance!r}; give a fraction of the "
                         "timeline's span in [0, 1), e.g. 5e-4")
    start, end = _intervals(timeline, builder)
    n = len(timeline)
    bars = pd.DataFrame({
        "resource": _text(timeline["resource"]).to_numpy(),
        "op_index": timeline["op_index"].to_numpy(dtype=np.int64),
        "op": _text(timeline["op"]).to_numpy(),
        "phase": _text(timeline["phase"]).to_numpy(),
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
    return alt.Chart(_inline(data)).mark_bar().encode(
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
    _one_value(utilization, _SIM_DESIGN, builder)
    start, end = _intervals(utilization, builder)
    busy = utilization["utilization"].to_numpy(dtype=np.float64)
    bad = ~((busy >= -1e-9) & (busy <= 1 + 1e-9))  # NaN too
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{builder}: {int(bad.sum())} row(s) have a utilization outside "
                         f"[0, 1] (first at row {i}: {busy[i]!r})")
    out = pd.DataFrame({
        "resource": _text(utilization["resource"]).to_numpy(),
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
    layered = alt.layer(area, data=_inline(data)).properties(width=_SIM_WIDTH, height=70)
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
    _one_value(ops, _SIM_DESIGN, builder)
    if isinstance(top, bool) or not isinstance(top, int | np.integer) or top < 1:
        raise ValueError(f"{builder}: top={top!r}; give a whole number >= 1")
    n = len(ops)
    causes = [(c, name) for c, name in _SIM_CAUSES if c != "kernel_s" or c in ops]
    calibrated = "kernel_time_s" in ops

    def floats(column: str) -> np.ndarray:
        return ops[column].to_numpy(dtype=np.float64) if column in ops else np.full(n, np.nan)

    def labels(column: str) -> np.ndarray:
        return _text(ops[column]).to_numpy() if column in ops else np.full(n, None)

    per_op = pd.DataFrame({
        "op_index": ops["op_index"].to_numpy(dtype=np.int64),
        "op": _text(ops["op"]).to_numpy(),
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
        out["expected_by"] = _fixed(ops, "expected_by")
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
    bars = (alt.Chart() if calibrated else alt.Chart(_inline(data))).mark_bar().encode(
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
    device = _fixed(data, "expected_by")
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
    return alt.layer(bars, dots, data=_inline(data)).properties(
        width=600, height=alt.Step(16),
        title=_design_title(data, f"Gap of the expected latency over the roofline, top "
                                  f"{len(labels)} ops", note))
