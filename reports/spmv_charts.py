"""Charts of the BeBOP SpMV benchmark (``dse bench spmv``), data first.

``spmv_profile_data`` / ``spmv_profile_chart``: the register-blocking profile as OSKI draws
it, MFLOP/s of each ``r x c`` BCSR kernel as a heat map (rows r, columns c), each cell
labelled with its MFLOP/s and its speedup over 1x1.
``spmv_size_data`` / ``spmv_size_chart``: MFLOP/s against the matrix's size in bytes (log),
CSR and BCSR, with the L2 and last-level cache sizes marked.

Both take the benchmark's result frame (``dse.spmv.bench.RESULT_COLUMNS``). These
are measurements on one machine, not bounds: titles say so and name the machine.
"""

from __future__ import annotations

import json

import altair as alt
import numpy as np
import pandas as pd

from .charts.design import chart_title

__all__ = ["spmv_profile_chart", "spmv_profile_data", "spmv_size_chart", "spmv_size_data"]

_KERNEL_COLORS = {"CSR": "#7f7f7f", "BCSR 1x1": "#1f77b4", "BCSR r x c > 1": "#d62728"}


def _require(frame: pd.DataFrame, columns, builder: str) -> None:
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"{builder}: expected a pandas DataFrame, got {type(frame).__name__}")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{builder}: the frame lacks column(s) {', '.join(missing)}; "
                         "pass the result frame of dse bench spmv")


def _inline(frame: pd.DataFrame) -> alt.InlineData:
    return alt.InlineData(values=json.loads(frame.to_json(orient="records",
                                                          double_precision=15)))


def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.3g} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:.3g} KiB"


def _span(values: pd.Series) -> str:
    low, high = int(values.min()), int(values.max())
    return f"{low}" if low == high else f"{low}-{high}"


def spmv_profile_data(frame: pd.DataFrame, family: str | None = "blocked",
                      size_class: str | None = None, machine: str = "this machine"
                      ) -> pd.DataFrame:
    """The register-blocking profile: one row per ``r x c``, from the BCSR runs on matrices
    of dense ``r x c`` blocks.

    ``family`` and ``size_class`` (``small``/``medium``/``large``) filter the matrices first
    (None keeps all). Columns: ``r, c, block``, ``mflops`` (median MFLOP/s of that kernel
    over its matrices), ``speedup`` (over the 1x1 cell; NaN without one),
    ``speedup_over_csr`` (median over the same matrices of BCSR / CSR MFLOP/s),
    ``matrices`` (how many), ``title`` (naming ``machine``) and ``subtitle`` (what is
    fixed). Sorted by r, then c.
    """
    builder = "spmv_profile_data"
    _require(frame, ("family", "n", "nnz_per_row", "r", "c", "kernel", "mflops",
                     "size_class", "seed"), builder)
    rows = frame
    if family is not None:
        rows = rows[rows["family"] == family]
    if size_class is not None:
        rows = rows[rows["size_class"] == size_class]
    if rows.empty:
        raise ValueError(f"{builder}: no runs with family={family!r} and "
                         f"size_class={size_class!r}; pass None to keep all")
    keys = ["family", "n", "nnz_per_row", "r", "c", "seed"]
    pair = rows.pivot_table(index=keys, columns="kernel", values="mflops").reset_index()
    if "bcsr" not in pair:
        raise ValueError(f"{builder}: the frame has no bcsr runs")
    pair["ratio"] = pair["bcsr"] / pair["csr"] if "csr" in pair else np.nan
    out = pair.groupby(["r", "c"]).agg(mflops=("bcsr", "median"),
                                       speedup_over_csr=("ratio", "median"),
                                       matrices=("bcsr", "size")).reset_index()
    base = out.loc[(out["r"] == 1) & (out["c"] == 1), "mflops"]
    out["speedup"] = out["mflops"] / float(base.iloc[0]) if len(base) else np.nan
    out.insert(2, "block", out["r"].astype(str) + "x" + out["c"].astype(str))
    fixed = [f"{family} matrices" if family else "all matrices"]
    if size_class:
        fixed.append(f"{size_class} (cache class)")
    fixed.append(f"n {_span(rows['n'])}")
    fixed.append(f"{_span(rows['nnz_per_row'])} nonzeros/row")
    out["title"] = f"Register-blocking profile on {machine} (measured)"
    out["subtitle"] = (f"median MFLOP/s of r x c BCSR SpMV: {', '.join(fixed)}; "
                       "cell: MFLOP/s and speedup over 1x1")
    out = out[["r", "c", "block", "mflops", "speedup", "speedup_over_csr", "matrices",
               "title", "subtitle"]]
    return out.sort_values(["r", "c"], kind="stable").reset_index(drop=True)


def spmv_profile_chart(data: pd.DataFrame) -> alt.LayerChart:
    """Heat map: rows r (1 at the top), columns c; colour MFLOP/s; each cell labelled with
    its MFLOP/s and, below, its speedup over 1x1."""
    rs = sorted(data["r"].unique().tolist())
    cs = sorted(data["c"].unique().tolist())
    base = alt.Chart().encode(
        x=alt.X("c:O", sort=cs, title="c (block columns)", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("r:O", sort=rs, title="r (block rows)"))
    cells = base.mark_rect(stroke="white", strokeWidth=1).encode(
        color=alt.Color("mflops:Q", title="MFLOP/s", scale=alt.Scale(scheme="viridis")),
        tooltip=["block:N", alt.Tooltip("mflops:Q", format=",.0f", title="MFLOP/s"),
                 alt.Tooltip("speedup:Q", format=".2f", title="x over 1x1"),
                 alt.Tooltip("speedup_over_csr:Q", format=".2f", title="x over CSR"),
                 "matrices:Q"])
    # Text colour flips with the cell's brightness so both ends of the scale stay readable.
    middle = float(data["mflops"].min() + 0.55 * (data["mflops"].max() - data["mflops"].min()))
    text_color = alt.condition(alt.datum.mflops > middle, alt.value("black"),
                               alt.value("white"))
    value = base.mark_text(fontSize=12, fontWeight="bold", dy=-7).encode(
        text=alt.Text("mflops:Q", format=",.0f"), color=text_color)
    speedup = base.transform_calculate(
        label="format(datum.speedup, '.2f') + 'x'").mark_text(fontSize=10, dy=8).encode(
        text="label:N", color=text_color)
    title = str(data["title"].iloc[0]) if len(data) else "Register-blocking profile"
    subtitle = str(data["subtitle"].iloc[0]) if len(data) else ""
    return alt.layer(cells, value, speedup, data=_inline(data)).properties(
        width=alt.Step(62), height=alt.Step(44), title=chart_title(title, subtitle))


def _kernel_group(frame: pd.DataFrame) -> pd.Series:
    blocked = (frame["r"] * frame["c"]) > 1
    return pd.Series(np.where(frame["kernel"] == "csr", "CSR",
                              np.where(blocked, "BCSR r x c > 1", "BCSR 1x1")),
                     index=frame.index)


def spmv_size_data(frame: pd.DataFrame, cache_sizes: dict[str, int],
                   machine: str = "this machine") -> pd.DataFrame:
    """MFLOP/s against matrix size, with the caches as markers.

    ``cache_sizes``: ``{"l2": bytes, "l3": bytes}`` (``l3`` optional), as the run used.
    Columns: ``series`` (``run``: one row per benchmark run; ``median``: the median MFLOP/s
    of a kernel group at one nominal dimension, plotted at its median size; ``cache``: one
    row per cache), ``kernel`` (``CSR``, ``BCSR 1x1``, ``BCSR r x c > 1``; null on cache
    rows), ``family, n, block`` (run rows), ``dim`` (the nominal power of two, n rounded in
    log2; run and median rows), ``matrix_bytes`` (CSR storage; the cache's size
    on cache rows), ``mflops`` (null on cache rows), ``label`` (``L2 1 MiB``; cache rows) and
    ``title``.
    """
    builder = "spmv_size_data"
    _require(frame, ("family", "n", "r", "c", "kernel", "block", "mflops", "matrix_bytes"),
             builder)
    if not cache_sizes or "l2" not in cache_sizes:
        raise ValueError(f"{builder}: cache_sizes needs 'l2' (and 'l3'), in bytes")
    runs = pd.DataFrame({
        "series": "run", "kernel": _kernel_group(frame), "family": frame["family"],
        "n": frame["n"].astype("int64"), "block": frame["block"],
        "matrix_bytes": frame["matrix_bytes"].astype("float64"),
        "mflops": frame["mflops"].astype("float64")})
    # Block-aligned dimensions (504, 510, 512) belong to one nominal power of two.
    runs["dim"] = (2.0 ** np.round(np.log2(runs["n"].to_numpy(dtype=np.float64)))).astype(
        "int64")
    medians = (runs.groupby(["kernel", "dim"], as_index=False)
               .agg(matrix_bytes=("matrix_bytes", "median"), mflops=("mflops", "median")))
    medians["series"] = "median"
    caches = pd.DataFrame([{"series": "cache", "matrix_bytes": float(size),
                            "label": f"{level.upper()} {_mib(size)}"}
                           for level, size in sorted(cache_sizes.items())])
    out = pd.concat([runs, medians, caches], ignore_index=True)
    out["title"] = (f"SpMV on {machine}, measured: MFLOP/s against matrix size "
                    f"(n {_span(frame['n'])}, {_span(frame['nnz_per_row'])} nonzeros/row)"
                    if "nnz_per_row" in frame else f"SpMV on {machine}, measured")
    columns = ["series", "kernel", "family", "n", "dim", "block", "matrix_bytes", "mflops",
               "label", "title"]
    return out.reindex(columns=columns)


def spmv_size_chart(data: pd.DataFrame) -> alt.LayerChart:
    """Runs as faint points, medians per nominal dimension as lines, one colour per kernel
    group;
    dashed vertical rules at the cache sizes, labelled at the top."""
    groups = [g for g in _KERNEL_COLORS if g in set(data["kernel"].dropna())]
    color = alt.Color("kernel:N", title="kernel", sort=groups,
                      scale=alt.Scale(domain=groups,
                                      range=[_KERNEL_COLORS[g] for g in groups]),
                      legend=alt.Legend(symbolOpacity=1, orient="bottom"))
    x = alt.X("matrix_bytes:Q", title="matrix size (CSR bytes, log scale)",
              scale=alt.Scale(type="log", nice=False, padding=10),
              axis=alt.Axis(format="~s"))
    y = alt.Y("mflops:Q", title="MFLOP/s (measured)")
    points = alt.Chart().transform_filter(alt.datum.series == "run").mark_circle(
        size=14, opacity=0.3).encode(
        x=x, y=y, color=color,
        tooltip=["kernel:N", "family:N", "n:Q", "block:N",
                 alt.Tooltip("matrix_bytes:Q", format=".3~s", title="bytes"),
                 alt.Tooltip("mflops:Q", format=",.0f", title="MFLOP/s")])
    lines = alt.Chart().transform_filter(alt.datum.series == "median").mark_line(
        point=True, strokeWidth=2.5).encode(x=x, y=y, color=color, order="matrix_bytes:Q")
    cache = alt.Chart().transform_filter(alt.datum.series == "cache")
    rules = cache.mark_rule(color="#333", strokeDash=[5, 4]).encode(x=x)
    labels = cache.mark_text(align="left", baseline="top", dx=4, y=4, fontSize=11,
                             color="#333").encode(x=x, text="label:N")
    title = str(data["title"].dropna().iloc[0]) if data["title"].notna().any() else "SpMV"
    return alt.layer(points, lines, rules, labels, data=_inline(data)).properties(
        width=560, height=340, title=chart_title(title))
