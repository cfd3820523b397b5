"""What every chart says about its designs: the frame checks, the order formats and pattern
groups are listed in, the fallback fields and notes, what is fixed across a frame (model,
hardware, batch) in words, and the title with its notes.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Iterable, Sequence
from functools import lru_cache

import altair as alt
import numpy as np
import pandas as pd

from formats import Block, parse

__all__ = [
    "FACET_HEIGHT",
    "FACET_WIDTH",
    "FALLBACK_FIELDS",
    "FAMILY_ORDER",
    "CAPTION",
    "SUBTITLE_WIDTH",
    "as_text",
    "chart_title",
    "context_words",
    "design_columns",
    "facet_by_model",
    "fallback_columns",
    "fallback_note",
    "fallback_text",
    "fixed_value",
    "format_info",
    "format_key",
    "format_order",
    "group_key",
    "group_order",
    "hw_falls_back",
    "inline_data",
    "layer_fallbacks",
    "listed",
    "one_value",
    "pattern_groups",
    "require_columns",
    "sorted_rows",
]

# Pattern families in the order every legend and axis lists them; block sizes sort within.
FAMILY_ORDER = {"dense": 0, "nm": 1, "block": 2, "unstructured": 3}
FACET_WIDTH = 260
FACET_HEIGHT = 220
#: The fallback fields of a ``dse.evaluate`` row: ops that stay dense because their shape cannot
#: take the format, how the hardware falls back ('' none, 'dense' or 'csr') and for how many ops.
FALLBACK_FIELDS = ("shape_fallback_ops", "hw_fallback", "hw_fallback_ops")


# --- shared helpers -----------------------------------------------------------------------------

def require_columns(frame: pd.DataFrame, columns: Iterable[str], builder: str) -> None:
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"{builder}: expected a pandas DataFrame, got {type(frame).__name__}")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{builder}: the frame lacks column(s) {', '.join(missing)}; "
                         f"it has {', '.join(map(str, frame.columns))}")


def one_value(frame: pd.DataFrame, columns: Iterable[str], builder: str) -> None:
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


def as_text(series: pd.Series) -> pd.Series:
    """Label column as plain strings: categoricals (search results) compare and sort like
    the strings they hold, and CSVs of the frames read back the same."""
    return series.astype(object).map(lambda v: None if pd.isna(v) else str(v))


@lru_cache(maxsize=4096)
def format_info(name: str) -> tuple[str, str, float, float]:
    """(family, pattern group label, block size or NaN, sparsity) of a format name."""
    try:
        fmt = parse(name)
    except ValueError as exc:
        raise ValueError(f"format {name!r} is not in dse's format grammar ({exc})") from None
    if isinstance(fmt, Block):
        return fmt.family, f"block{fmt.block}", float(fmt.block), fmt.sparsity
    group = {"dense": "dense", "nm": "N:M", "unstructured": "unstructured"}[fmt.family]
    return fmt.family, group, math.nan, fmt.sparsity


def format_key(name: str) -> tuple:
    family, _, block, sparsity = format_info(name)
    return (FAMILY_ORDER.get(family, 9), 0.0 if math.isnan(block) else block, sparsity, name)


def group_key(group: str) -> tuple:
    if group.startswith("block"):
        return (FAMILY_ORDER["block"], int(group[5:]))
    return ({"dense": 0, "N:M": 1, "unstructured": 3}.get(group, 9), 0)


def pattern_groups(formats: pd.Series) -> pd.Series:
    return formats.map(lambda name: format_info(name)[1])


def format_order(formats: Iterable[str]) -> list[str]:
    return sorted(set(formats), key=format_key)


def group_order(groups: Iterable[str]) -> list[str]:
    return sorted(set(groups), key=group_key)


def inline_data(frame: pd.DataFrame) -> alt.InlineData:
    """The frame as JSON records (NaN and NA become null); no transformer, no row limit."""
    records = json.loads(frame.to_json(orient="records", double_precision=15))
    return alt.InlineData(values=records)


def facet_by_model(layered: alt.LayerChart, data: pd.DataFrame) -> alt.FacetChart:
    """A column per model, and a row per batch when the frame holds several: designs at
    different batches are never on one front."""
    if "batch" in data and data["batch"].nunique(dropna=False) > 1:
        return layered.facet(column=alt.Column("model:N", title=None),
                             row=alt.Row("batch:O", title="batch"))
    return layered.facet(column=alt.Column("model:N", title=None))


def sorted_rows(frame: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Rows sorted by ``keys``; a ``format`` key sorts in pattern order, not alphabetically."""
    def key(column: pd.Series) -> pd.Series:
        if column.name == "format":
            return column.map(format_key)
        if column.name == "group":
            return column.map(group_key)
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


def fallback_columns(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """``shape_fallback_ops, hw_fallback, hw_fallback_ops, fallback`` (the text) of rows of
    ``dse.evaluate``, or ``{}`` when the frame lacks the fields (hand-made frames)."""
    if not all(c in frame.columns for c in FALLBACK_FIELDS):
        return {}
    shape = frame["shape_fallback_ops"].fillna(0).to_numpy(dtype=np.int64)
    kind = as_text(frame["hw_fallback"]).fillna("").to_numpy(dtype=object)
    hw = frame["hw_fallback_ops"].fillna(0).to_numpy(dtype=np.int64)
    text = [fallback_text(s, k, h) for s, k, h in zip(shape, kind, hw, strict=True)]
    return {"shape_fallback_ops": shape, "hw_fallback": kind, "hw_fallback_ops": hw,
            "fallback": np.array(text, dtype=object)}


def layer_fallbacks(layers: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per ``keys`` group of ``dse.evaluate_layers`` rows, the design's fallback fields from
    the ops' ``fallback`` labels (``shape``, ``hw:dense``, ``hw:csr``)."""
    why = as_text(layers["fallback"]).fillna("")
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


def design_columns(frame: pd.DataFrame, columns: Sequence[str]) -> dict[str, np.ndarray]:
    """The design columns ``frame`` has among ``columns``, as plain values (labels as text),
    so a chart can name what is fixed and a CSV says what it shows."""
    out = {}
    for column in columns:
        if column in frame.columns:
            series = frame[column]
            out[column] = (series.to_numpy(dtype=np.int64) if column == "batch"
                           and series.notna().all() else as_text(series).to_numpy())
    return out


def fixed_value(data: pd.DataFrame, column: str) -> str | None:
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


def context_words(data: pd.DataFrame, columns: Sequence[str] = ("model", "hardware", "batch",
                                                           "fusion", "scope")) -> str:
    """What is fixed across the frame, in words: ``convnext_tiny on a100-40gb, batch 1,
    unfused, gemm scope``; varying columns are left out (the chart's axes or facets show
    them), several batches are listed."""
    model, hw = (fixed_value(data, c) if c in columns else None for c in ("model", "hardware"))
    head = " on ".join(p for p in (model, hw) if p)
    parts = [head] if head else []
    if "batch" in columns and "batch" in data.columns:
        batch = fixed_value(data, "batch")
        if batch is not None:
            parts.append(f"batch {batch}")
        elif data["batch"].notna().any():
            batches = sorted({int(b) for b in data["batch"].dropna()})
            parts.append("batches " + ", ".join(map(str, batches)))
    if "fusion" in columns and fixed_value(data, "fusion"):
        parts.append(fixed_value(data, "fusion"))
    if "scope" in columns and fixed_value(data, "scope"):
        parts.append(f"{fixed_value(data, 'scope')} scope")
    return ", ".join(parts)


def hw_falls_back(data: pd.DataFrame) -> pd.Series:
    """Rows whose hardware cannot run the format (the design runs dense or as CSR)."""
    if "hw_fallback_ops" not in data.columns:
        return pd.Series(False, index=data.index)
    return data["hw_fallback_ops"].fillna(0).astype(np.int64) > 0


def listed(items: list[str], shown: int = 6) -> str:
    more = f" and {len(items) - shown} more (see the data)" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def fallback_note(data: pd.DataFrame, who: Sequence[str] = ("model", "format")) -> list[str]:
    """Subtitle lines naming the designs that fall back: hollow markers for the hardware's
    fallbacks (with the op count and the kernel), and the layers whose shape keeps them
    dense; none when nothing falls back (or the frame has no fallback fields)."""
    if not all(c in data.columns for c in FALLBACK_FIELDS):
        return []
    keys = [c for c in who if c in data.columns and data[c].nunique() > 1 or c == "format"]
    designs = data.drop_duplicates([*keys, *FALLBACK_FIELDS])
    lines = []
    hw = designs[hw_falls_back(designs)]
    if len(hw):
        # One item a format (and hardware), whatever the model: the op counts of the models
        # as a range, so the note stays one line; the data names each design's count.
        named = [k for k in keys if k != "model"] or keys
        items = []
        for key, rows in hw.groupby(named, sort=False):
            key = key if isinstance(key, tuple) else (key,)
            ops = rows["hw_fallback_ops"].astype(int)
            kind = "CSR" if (rows["hw_fallback"] == "csr").all() else "dense"
            count = (f"{ops.iloc[0]}" if ops.nunique() == 1 else f"{ops.min()} to {ops.max()}")
            items.append(" ".join(map(str, key)) + f" ({count} ops {kind})")
        lines.append("hollow markers: the hardware lacks the format and runs it dense or as "
                     "CSR: " + listed(items))
    shape = designs[designs["shape_fallback_ops"].fillna(0) > 0]
    if len(shape):
        ops = shape["shape_fallback_ops"].astype(int)
        names = list(dict.fromkeys(" ".join(str(getattr(r, k)) for k in keys)
                                   for r in shape.itertuples(index=False)))
        count = (f"{ops.iloc[0]} ops" if ops.nunique() == 1
                 else f"{ops.min()} to {ops.max()} ops")
        lines.append(f"layers whose shape cannot take the format stay dense ({count}) in "
                     + (listed(names, 3) if len(names) <= 4
                        else f"{len(names)} designs (see the data)"))
    return lines


#: Subtitle lines longer than this wrap: a chart's width must not follow its notes.
SUBTITLE_WIDTH = 110


#: How every chart's title is set: a caption under the plot, the title in bold, then in
#: smaller grey type what is fixed (model, hardware, batch) and the caveats, so the plot is
#: the first thing a reader sees and the notes never push it down.
CAPTION = {"anchor": "start", "orient": "bottom", "offset": 14, "fontSize": 13,
           "subtitleFontSize": 10.5, "subtitleColor": "#555", "subtitlePadding": 4,
           "subtitleLineHeight": 13}


def chart_title(text: str, *subtitle: str | list[str]) -> alt.TitleParams:
    """``text`` in bold, then each of ``subtitle`` (lines or lists of lines; empty ones
    dropped), wrapped at :data:`SUBTITLE_WIDTH` characters, as a caption under the plot."""
    lines = []
    for s in subtitle:
        lines += [s] if isinstance(s, str) else list(s)
    lines = [w for s in lines if s for w in textwrap.wrap(s, SUBTITLE_WIDTH)]
    return alt.TitleParams(text=text, subtitle=lines, **CAPTION) if lines \
        else alt.TitleParams(text=text, **CAPTION)
