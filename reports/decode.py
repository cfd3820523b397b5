"""The decode report: a language model's tokens per second against batch, each format with the
largest batch that fits the device's DRAM drawn (the decode analogue of the feature-overhead
study). At small batch decode reads every weight once a step, so pruning pays; as the batch
grows, the KV cache and activations take over the traffic, and the memory they hold moves the
limit."""

from __future__ import annotations

import json

import altair as alt
import numpy as np
import pandas as pd

from formats import parse

from .charts.design import FALLBACK_FIELDS, chart_title, fallback_text, require_columns

__all__ = ["decode_chart", "decode_data"]

# --- helpers ----------------------------------------------------------------------------------


def _text(series: pd.Series) -> pd.Series:
    return series.astype(object).map(lambda v: None if pd.isna(v) else str(v))


def _one_value(frame: pd.DataFrame, columns, builder: str) -> None:
    """Refuse a frame that mixes designs the chart would overplot."""
    for column in columns:
        if column in frame.columns:
            values = sorted(set(_text(frame[column]).dropna()))
            if len(values) > 1:
                raise ValueError(f"{builder}: the frame holds {len(values)} values of {column} "
                                 f"({', '.join(values[:5])}); filter to one first")


_FAMILY_ORDER = {"dense": 0, "nm": 1, "block": 2, "unstructured": 3}


def _format_key(name: str) -> tuple:
    """Pattern order: dense, N:M, block (by size), unstructured; then sparsity, then name."""
    fmt = parse(name)
    return (_FAMILY_ORDER.get(fmt.family, 9), getattr(fmt, "block", 0) or 0, fmt.sparsity,
            name)


def _fallback_columns(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    if not all(c in frame.columns for c in FALLBACK_FIELDS):
        return {}
    shape = frame["shape_fallback_ops"].fillna(0).to_numpy(dtype=np.int64)
    kind = _text(frame["hw_fallback"]).fillna("").to_numpy(dtype=object)
    hw = frame["hw_fallback_ops"].fillna(0).to_numpy(dtype=np.int64)
    return {"shape_fallback_ops": shape, "hw_fallback": kind, "hw_fallback_ops": hw,
            "fallback": np.array([fallback_text(s, k, h) for s, k, h in
                                  zip(shape, kind, hw, strict=True)], dtype=object)}


def _inline(frame: pd.DataFrame) -> alt.InlineData:
    """The frame as JSON records (NaN and NA become null), as every chart of reports inlines."""
    return alt.InlineData(values=json.loads(frame.to_json(orient="records",
                                                          double_precision=15)))


_WIDTH = 560
#: The ``kernel`` of a design whose every op runs the format's own kernel.
_OWN = "the format's own kernel"
_TOKENS_HEIGHT = 300
_SPEEDUP_HEIGHT = 160


def _series(formats: pd.Series, weight_dtypes: pd.Series) -> np.ndarray:
    """A line's name: the format, and the weight dtype where the frame holds several."""
    if weight_dtypes.nunique(dropna=False) <= 1:
        return formats.to_numpy(dtype=object)
    return np.array([f"{f}, weights {w}" for f, w in zip(formats, weight_dtypes, strict=True)],
                    dtype=object)


def decode_data(frame: pd.DataFrame) -> pd.DataFrame:
    """Tokens per second and the memory fit of a language model's decode step, per format and
    batch.

    ``frame``: rows of ``dse evaluate`` for a decode step with its language-model columns
    (``dse.cli.evaluate.language_model_columns``: ``tokens_per_s``, ``fits``,
    ``largest_batch_that_fits``), for one model, hardware, context, fusion, scope and KV-cache
    dtype; several weight dtypes may be mixed (each format and weight dtype is then a line).

    Columns: ``model, hardware, context, weight_dtype, kv_dtype, format, series`` (the line:
    the format, with the weight dtype where there are several), ``kernel`` (the format's own,
    or dense or CSR where the hardware lacks the format), ``batch``, ``tokens_per_s``
    (= batch / ``time_per_token_s``, the speed-of-light bound), ``time_per_token_s``,
    ``speedup`` (over dense with the same weight dtype), ``fits`` (weights, activations and the
    batch's KV cache at the context fit ``dram_capacity_bytes``), ``largest_batch_that_fits``
    (NA where the spec has no capacity), ``weight_bytes`` (read a step), ``kv_cache_bytes``,
    ``peak_memory_bytes``, ``dram_capacity_bytes``; then the fallback fields, ``fusion`` and
    ``scope`` when ``frame`` has them. Sorted by format (pattern order), weight dtype and batch.
    """
    builder = "decode_data"
    require_columns(frame, ("model", "hardware", "format", "batch", "phase", "context",
                            "tokens_per_s", "time_per_token_s", "speedup", "fits",
                            "largest_batch_that_fits", "weight_bytes", "kv_cache_bytes",
                            "peak_memory_bytes", "dram_capacity_bytes"), builder)
    phases = set(_text(frame["phase"]).dropna())
    if phases != {"decode"}:
        raise ValueError(f"{builder}: the frame holds phase {', '.join(sorted(phases)) or 'none'}"
                         "; the decode report charts decode steps (--phase decode)")
    _one_value(frame, ("model", "hardware", "context", "fusion", "scope", "kv_dtype"), builder)
    weight = (_text(frame["weight_dtype"]) if "weight_dtype" in frame.columns
              else pd.Series("", index=frame.index)).fillna("")
    kv = (_text(frame["kv_dtype"]) if "kv_dtype" in frame.columns
          else pd.Series("", index=frame.index)).fillna("")
    formats = _text(frame["format"])
    out = pd.DataFrame({
        "model": _text(frame["model"]).to_numpy(),
        "hardware": _text(frame["hardware"]).to_numpy(),
        "context": frame["context"].to_numpy(dtype=np.int64),
        "weight_dtype": weight.to_numpy(dtype=object),
        "kv_dtype": kv.to_numpy(dtype=object),
        "format": formats.to_numpy(),
        "series": _series(formats, weight),
        "batch": frame["batch"].to_numpy(dtype=np.int64),
        "tokens_per_s": frame["tokens_per_s"].to_numpy(dtype=np.float64),
        "time_per_token_s": frame["time_per_token_s"].to_numpy(dtype=np.float64),
        "speedup": frame["speedup"].to_numpy(dtype=np.float64),
        "fits": frame["fits"].astype("boolean").to_numpy(dtype=object),
        "largest_batch_that_fits": frame["largest_batch_that_fits"].astype("Int64").to_numpy(),
        "weight_bytes": frame["weight_bytes"].to_numpy(dtype=np.float64),
        "kv_cache_bytes": frame["kv_cache_bytes"].to_numpy(dtype=np.float64),
        "peak_memory_bytes": frame["peak_memory_bytes"].to_numpy(dtype=np.float64),
        "dram_capacity_bytes": frame["dram_capacity_bytes"].to_numpy(dtype=np.float64),
        **_fallback_columns(frame),
        **{c: _text(frame[c]).to_numpy() for c in ("fusion", "scope") if c in frame.columns},
    })
    fallback = (out["hw_fallback_ops"] > 0 if "hw_fallback_ops" in out.columns
                else pd.Series(False, index=out.index))
    kind = out["hw_fallback"] if "hw_fallback" in out.columns else pd.Series("", index=out.index)
    out.insert(out.columns.get_loc("batch"), "kernel", np.where(
        ~fallback.to_numpy(dtype=bool), _OWN,
        np.where(kind == "csr", "CSR (hardware lacks the format)",
                 "dense (hardware lacks the format)")).astype(object))
    out["largest_batch_that_fits"] = out["largest_batch_that_fits"].astype("Int64")
    out["fits"] = out["fits"].astype("boolean")
    order = out.assign(_key=out["format"].map(_format_key))
    order = order.sort_values(["_key", "weight_dtype", "batch"], kind="stable")
    return order.drop(columns="_key").reset_index(drop=True)


def _series_order(data: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(data["series"]))  # decode_data sorted them in pattern order


def _limits(data: pd.DataFrame) -> pd.DataFrame:
    """One row per line: its largest batch that fits (NA without a capacity)."""
    return data.drop_duplicates("series")[["series", "largest_batch_that_fits"]]


def _limit_text(data: pd.DataFrame) -> str:
    """The subtitle line that says what the rules are and where each line's limit is."""
    limits = _limits(data)
    if limits["largest_batch_that_fits"].isna().all():
        return "no memory-fit limit: the hardware spec gives no dram_capacity_bytes"
    top = int(data["batch"].max())
    capacity = data["dram_capacity_bytes"].dropna()
    gib = f"{capacity.iloc[0] / 2**30:.0f} GiB of " if len(capacity) else ""
    parts = []
    for row in limits.itertuples(index=False):
        value = row.largest_batch_that_fits
        if pd.isna(value):
            parts.append(f"{row.series} no capacity")
        elif int(value) < 1:
            parts.append(f"{row.series} none (not even batch 1)")
        else:
            parts.append(f"{row.series} {int(value):,}"
                         + (" (beyond the batches charted)" if int(value) > top else ""))
    return (f"dashed rules: the largest batch whose weights, activations and KV cache at context "
            f"{int(data['context'].iloc[0]):,} fit {gib}DRAM ({'; '.join(parts)}); hollow "
            "markers beyond a rule do not fit")


def _fallback_line(data: pd.DataFrame) -> str:
    if "hw_fallback_ops" not in data.columns:
        return ""
    hw = data[data["hw_fallback_ops"].fillna(0) > 0].drop_duplicates("series")
    if hw.empty:
        return ""
    items = [f"{r.series} ({int(r.hw_fallback_ops)} ops "
             f"{'CSR' if r.hw_fallback == 'csr' else 'dense'})" for r in hw.itertuples()]
    return ("diamonds and thin lines: the hardware lacks the format and runs it dense or as "
            "CSR, priced that way: " + ", ".join(items))


def decode_chart(data: pd.DataFrame) -> alt.VConcatChart:
    """Top: tokens per second (log) against batch (log 2), a colour per format, the line drawn
    through the batches that fit, a dashed vertical rule per format at its largest batch that
    fits (where it lies within the batches charted), filled markers where the design fits and
    hollow ones where it does not. Bottom: the speedup over dense, the same marks. The title
    names model, hardware, context and dtypes; the subtitle says the numbers are the speed of
    light, not a measurement, and where each limit lies."""
    series = _series_order(data)
    batches = sorted({int(b) for b in data["batch"]})
    low, high = batches[0], batches[-1]
    x = alt.X("batch:Q", title="batch (requests decoding together)",
              scale=alt.Scale(type="log", base=2, domain=[low, high]),
              axis=alt.Axis(format="~g", values=batches))
    color = alt.Color("series:N", sort=series, scale=alt.Scale(domain=series),
                      title="format" if (data["series"] == data["format"]).all()
                      else "format, weights", legend=alt.Legend(symbolOpacity=1))
    tooltip = ["series:N", "batch:Q",
               alt.Tooltip("tokens_per_s:Q", title="tokens/s", format=",.0f"),
               alt.Tooltip("time_per_token_s:Q", title="time per step (s)", format=".4g"),
               alt.Tooltip("speedup:Q", format=".3f"),
               alt.Tooltip("fits:N", title="fits in DRAM"),
               alt.Tooltip("largest_batch_that_fits:Q", title="largest batch that fits"),
               alt.Tooltip("kv_cache_bytes:Q", title="KV cache (bytes)", format=".3s"),
               alt.Tooltip("peak_memory_bytes:Q", title="peak memory (bytes)", format=".3s")]
    if "fallback" in data.columns:
        tooltip.append(alt.Tooltip("fallback:N", title="fallbacks"))
    fits = alt.datum.fits == True  # noqa: E712 - a Vega expression, not Python
    inline = _inline(data)
    in_range = (alt.expr.isValid(alt.datum.largest_batch_that_fits)
                & (alt.datum.largest_batch_that_fits >= low)
                & (alt.datum.largest_batch_that_fits <= high))
    limits = _inline(_limits(data).assign(
        largest_batch_that_fits=lambda f: f["largest_batch_that_fits"].astype("Float64")))

    kernels = list(dict.fromkeys(data["kernel"]))
    # A format the hardware runs dense lies on dense's line: a thinner line and diamonds on
    # top keep both visible, and the shape legend says why.
    shape = alt.Shape("kernel:N", sort=kernels, title="runs on",
                      scale=alt.Scale(domain=kernels,
                                      range=["circle", "diamond", "square"][:len(kernels)]),
                      legend=alt.Legend(symbolFillColor="gray") if len(kernels) > 1 else None)
    own = alt.datum.kernel == _OWN

    def panel(y: alt.Y, height: int) -> alt.LayerChart:
        base = alt.Chart(inline).encode(x=x, y=y, color=color, tooltip=tooltip)
        line = base.transform_filter(fits & own).mark_line(strokeWidth=2.5)
        fallback = base.transform_filter(fits & ~own).mark_line(strokeWidth=1.2)
        beyond = base.mark_line(strokeWidth=1, strokeDash=[2, 3], opacity=0.6)
        filled = base.transform_filter(fits & own).mark_point(filled=True, size=50, opacity=1)\
            .encode(shape=shape)
        diamonds = base.transform_filter(fits & ~own).mark_point(filled=True, size=110,
                                                                 opacity=1).encode(shape=shape)
        hollow = base.transform_filter(~fits).mark_point(filled=False, size=60, strokeWidth=2)\
            .encode(shape=shape)
        rule = alt.Chart(limits).transform_filter(in_range).mark_rule(
            strokeDash=[6, 4], strokeWidth=1.5).encode(
            x="largest_batch_that_fits:Q", color=alt.Color("series:N", sort=series,
                                                           scale=alt.Scale(domain=series)),
            tooltip=["series:N", alt.Tooltip("largest_batch_that_fits:Q",
                                             title="largest batch that fits")])
        layers = (beyond, line, fallback, rule, filled, diamonds, hollow)
        return alt.layer(*layers).properties(width=_WIDTH, height=height)

    rates = data["tokens_per_s"]
    tokens = panel(alt.Y("tokens_per_s:Q", title="generated tokens/s (whole batch)",
                         scale=alt.Scale(type="log", nice=False,
                                         domain=[float(rates.min()) / 1.25,
                                                 float(rates.max()) * 1.25]),
                         axis=alt.Axis(format="~s")),
                   _TOKENS_HEIGHT)
    speed = panel(alt.Y("speedup:Q", title="speedup over dense (x)",
                        scale=alt.Scale(zero=False)), _SPEEDUP_HEIGHT)
    row = data.iloc[0]
    model = str(row["model"]).removesuffix(f".decode.{int(row['context'])}")  # the trace's name
    dtypes = ", ".join(sorted(set(data["weight_dtype"]) - {""})) or "?"
    kv = row["kv_dtype"] or "?"
    where = ", ".join(f"{c} {row[c]}" for c in ("fusion", "scope") if c in data.columns)
    return alt.vconcat(tokens, speed, spacing=12).resolve_scale(color="shared").properties(
        title=chart_title(
            f"Decode tokens/s against batch: {model} on {row['hardware']}, context "
            f"{int(row['context']):,}, weights {dtypes}, KV cache {kv}",
            "the speed-of-light bound (roofline"
            + (f", {where}" if where else "") + "), not a measurement: tokens/s = batch / "
            "time per decode step; real kernels reach a fraction of it",
            _limit_text(data), _fallback_line(data)))
