"""dse's expectation in the number types its H100 kernels never ran, against ``dtype_gemm``'s
measured rows (no torch, no GPU).

dse prices ``--dtype bf16 / fp8 / int8`` and ``--weight-dtype int4 / int8`` on the H100 by
carrying the fp16 kernels' fraction of the bound over to the narrower bytes and faster rates
(marked ``extrapolated_dtype``). ``collect --parts dtype_gemm`` timed the same LLM linears in
those types beside fp16, in one run. For every measured shape and variant this asks dse for
the expected cold kernel time (``dse.evaluate_layers``, ``--calibrated h100-sxm``, one linear
op of that M, K, N, the variant's numerics) and prints, per variant and width (decode N <= 64,
prefill N >= 512): the median of measured / expected, the share within +-10% and +-25%, and
the measured and expected speedup over fp16 dense on the same shape.

Variants (the fastest of the implementations listed, cold, as dse's expectation is the fastest
implementation measured):

==================  ==================================  ======================================
variant             implementations                     dse numerics
==================  ==================================  ======================================
fp16                cublas_linear                       dtype fp16 (what the predictors timed)
fp16, 2:4           cusparselt_linear                   dtype fp16, format 2:4
bf16 compute        cublas, cublas_linear               dtype bf16
bf16 compute, 2:4   cusparselt, cusparselt_linear       dtype bf16, format 2:4
fp8 compute         scaled_mm                           dtype fp8
int8 compute        int_mm                              dtype int8
int4 weights        int4_tinygemm                       dtype bf16, weight_dtype int4 (group 128)
int8 weights        int8_weight_only,                   dtype bf16, weight_dtype int8
                    int8_dequant_linear
==================  ==================================  ======================================

The variant names are the marks dse's output gives an extrapolated dtype (``"int4 weights"``,
``"fp8 compute"``). ``--ship`` writes the dense variants' medians per width to
``dse/calibrate/models/dtype_check/h100-sxm.json``, which the calibrated output's
"expectation extrapolated" line quotes beside the dtypes it extrapolates.

Run from the repository root::

    python -m benchmarks.gpu.compare_dtype

(``--data`` names other ``dtype_gemm`` row files; ``--out`` the CSV written, default
``benchmarks/gpu/results/dtype_vs_expected.csv``; ``--ship`` also writes the check dse
quotes). Exit 2 with one line when a file is
missing or holds no ``dtype_gemm`` rows.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dse.cli.parser import Parser
from dse.roofline import Numerics

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DEFAULT_DATA = (RESULTS / "collect-dtype/parts/dtype_gemm.kernels.parquet",
                RESULTS / "collect-dtype-seed1/parts/dtype_gemm.kernels.parquet")
DEFAULT_OUT = RESULTS / "dtype_vs_expected.csv"
SHIPPED = HERE.parent.parent / "dse/calibrate/models/dtype_check/h100-sxm.json"
HARDWARE, CALIBRATED = "h100-sxm", "h100-sxm"
PREFILL_FROM = 512  #: N at and above which a width counts as prefill


@dataclass(frozen=True)
class Variant:
    name: str
    implementations: tuple[str, ...]
    dtype: str  #: the rows' ``dtype`` column (compute dtype)
    format: str
    numerics: Numerics
    kernel: str  #: what the calibrated output names as the kernel checked


VARIANTS = (
    Variant("fp16", ("cublas_linear",), "fp16", "dense", Numerics(dtype="fp16"), "cuBLAS"),
    Variant("fp16, 2:4", ("cusparselt_linear",), "fp16", "2:4", Numerics(dtype="fp16"),
            "cuSPARSELt"),
    Variant("bf16 compute", ("cublas", "cublas_linear"), "bf16", "dense",
            Numerics(dtype="bf16"), "cuBLAS"),
    Variant("bf16 compute, 2:4", ("cusparselt", "cusparselt_linear"), "bf16", "2:4",
            Numerics(dtype="bf16"), "cuSPARSELt"),
    Variant("fp8 compute", ("scaled_mm",), "fp8", "dense", Numerics(dtype="fp8"),
            "torch._scaled_mm"),
    Variant("int8 compute", ("int_mm",), "int8", "dense", Numerics(dtype="int8"),
            "torch._int_mm"),
    Variant("int4 weights", ("int4_tinygemm",), "bf16", "dense",
            Numerics(dtype="bf16", weight_dtype="int4", weight_group_size=128),
            "torch._weight_int4pack_mm"),
    Variant("int8 weights", ("int8_weight_only", "int8_dequant_linear"), "bf16", "dense",
            Numerics(dtype="bf16", weight_dtype="int8"),
            "torch._weight_int8pack_mm or dequantised into cuBLAS"),
)


class CompareError(ValueError):
    """A data file that cannot be compared (one line)."""


#: Where a collect results folder keeps its dtype_gemm rows (a folder given to --data).
PART = Path("parts/dtype_gemm.kernels.parquet")


def _rows_file(path: Path) -> Path:
    """The rows file ``--data PATH`` names: the file, or a collect results folder's part."""
    if path.is_dir():
        if (path / PART).is_file():
            return path / PART
        raise CompareError(f"--data {path}: a folder without {PART}; name a results folder "
                           "of benchmarks/gpu/collect --parts dtype_gemm, or its rows file")
    if not path.is_file():
        raise CompareError(f"--data {path}: no such file; run benchmarks/gpu/collect "
                           "--parts dtype_gemm (see COLLECT.md) or name its rows file")
    return path


def read_rows(paths) -> pd.DataFrame:
    """Every row of ``paths`` (files or collect results folders), each file checked against
    the kernel-row schema (dse.measure.dataset.validate) so that a file that is not one, or a
    row with a negative or missing time, is refused in one line naming it."""
    from dse.measure.dataset import DatasetError, validate

    files = [_rows_file(Path(p)) for p in paths]
    seen: dict[Path, Path] = {}
    for given, path in zip(paths, files, strict=True):
        key = path.resolve()
        if key in seen:
            raise CompareError(f"--data {given}: the rows file {path} is given twice; give "
                               "each once (its runs would count twice)")
        seen[key] = path
    frames = []
    for path in files:
        try:
            frame = pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)
        except Exception as exc:  # pyarrow and pandas raise many kinds
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise CompareError(f"--data {path}: cannot read it as kernel rows "
                               f"({type(exc).__name__}: {first[:120]}); name a file written "
                               "by benchmarks/gpu/collect --parts dtype_gemm") from None
        try:
            frames.append(validate(frame, str(path)))
        except DatasetError as exc:
            raise CompareError(f"--data {exc}") from None
    return pd.concat(frames, ignore_index=True)


def load_rows(paths) -> pd.DataFrame:
    """The timed cold ``dtype_gemm`` rows of ``paths`` (seeds pooled: the median of a shape's
    repeats is taken per variant)."""
    return _timed(read_rows(paths), paths)


def _timed(everything: pd.DataFrame, paths) -> pd.DataFrame:
    rows = load_rows_frame(everything)
    if rows.empty:
        raise CompareError(f"--data {', '.join(map(str, paths))}: no timed dtype_gemm rows; "
                           "name the rows of benchmarks/gpu/collect --parts dtype_gemm")
    return rows


def load_rows_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """The timed cold ``dtype_gemm`` rows of a kernel-row frame."""
    rows = rows[rows["why"].astype(str).str.startswith("collect dtype_gemm")]
    return rows[(rows["error"].fillna("") == "") & (rows["cache"] == "cold")]


def measured(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (variant, M, K, N): the fastest listed implementation's median over the
    runs (``measured_s``), and how many runs timed it."""
    out = []
    for v in VARIANTS:
        mine = rows[rows["implementation"].isin(v.implementations) & (rows["dtype"] == v.dtype)
                    & (rows["format"] == v.format)]
        if mine.empty:
            continue
        per_impl = mine.groupby(["m", "k", "n", "implementation"])["median_s"].agg(
            ["median", "size"]).reset_index()
        best = per_impl.sort_values("median").groupby(["m", "k", "n"], as_index=False).first()
        out.append(best.rename(columns={"median": "measured_s", "size": "runs"})
                   .assign(variant=v.name))
    if not out:
        names = dict.fromkeys(i for v in VARIANTS for i in v.implementations)
        raise CompareError("--data: no timed row of an implementation it compares ("
                           + ", ".join(names) + "); name the rows of benchmarks/gpu/collect "
                           "--parts dtype_gemm")
    return pd.concat(out, ignore_index=True)


def expected(shapes: pd.DataFrame) -> pd.DataFrame:
    """dse's expected cold time (``expected_s``) and bound (``sol_s``) per (variant, M, K, N)
    of ``shapes``."""
    import dse
    import formats
    import workloads

    out = []
    for v in VARIANTS:
        mine = shapes[shapes["variant"] == v.name]
        if mine.empty:
            continue
        records = [{"name": f"op{i}", "kind": "linear", "m": int(r.m), "k": int(r.k),
                    "n": int(r.n), "groups": 1, "weight_elems": int(r.m * r.k),
                    "input_elems": int(r.k * r.n), "output_elems": int(r.m * r.n),
                    "vector_flops": 0.0, "prunable": True, "producers": ["input"]}
                   for i, r in enumerate(mine.itertuples(index=False))]
        trace = workloads.Trace.from_records("dtype_gemm", [1], records)
        layers = dse.evaluate_layers(trace, HARDWARE, v.format, scope="all",
                                     numerics=v.numerics, cache="cold", calibrated=CALIBRATED)
        # the design's rows (evaluate_layers adds the dense baseline's beside a sparse format)
        layers = layers[layers["format"] == formats.parse(v.format).name]
        layers = layers.set_index("op").loc[[rec["name"] for rec in records]]
        out.append(mine.assign(expected_s=layers["expected_s"].to_numpy(),
                               sol_s=layers["time_s"].to_numpy()))
    return pd.concat(out, ignore_index=True)


def compare(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (variant, shape): measured, expected, their ratio, and each one's speedup over fp16
    dense on the same shape (NaN where fp16 was not timed there)."""
    table = expected(measured(rows))
    table["ratio"] = table["measured_s"] / table["expected_s"]
    fp16 = table[table["variant"] == "fp16"].set_index(["m", "k", "n"])
    key = pd.MultiIndex.from_frame(table[["m", "k", "n"]])
    table["measured_speedup"] = fp16["measured_s"].reindex(key).to_numpy() / table["measured_s"]
    table["expected_speedup"] = fp16["expected_s"].reindex(key).to_numpy() / table["expected_s"]
    table["width"] = np.where(table["n"] >= PREFILL_FROM, "prefill", "decode")
    return table


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per variant and width: shapes, median measured / expected, share within +-10% and
    +-25%, median measured and expected speedup over fp16 dense."""
    def one(group: pd.DataFrame) -> pd.Series:
        err = (group["ratio"] - 1).abs()
        return pd.Series({"shapes": len(group), "median_ratio": group["ratio"].median(),
                          "within_10": (err <= 0.10).mean(), "within_25": (err <= 0.25).mean(),
                          "measured_speedup": group["measured_speedup"].median(),
                          "expected_speedup": group["expected_speedup"].median()})

    order = {v.name: i for i, v in enumerate(VARIANTS)}
    out = table.groupby(["variant", "width"]).apply(one, include_groups=False).reset_index()
    return out.sort_values(["variant", "width"], key=lambda s: s.map(order)
                           if s.name == "variant" else s).reset_index(drop=True)


def shipped_check(summary_table: pd.DataFrame, paths) -> dict:
    """The document ``--ship`` writes: per dense variant other than fp16 and per width, the
    shapes compared and the median measured / expected (dse.calibrate.coverage reads it)."""
    dense = [v.name for v in VARIANTS if v.format == "dense" and v.name != "fp16"]
    checks: dict[str, dict] = {}
    for r in summary_table[summary_table["variant"].isin(dense)].itertuples(index=False):
        checks.setdefault(r.variant, {})[r.width] = {
            "shapes": int(r.shapes), "median_measured_over_expected": round(r.median_ratio, 3)}
    kernels = {v.name: v.kernel for v in VARIANTS if v.name in checks}
    return {"device": CALIBRATED, "command": "python -m benchmarks.gpu.compare_dtype --ship",
            "data": [str(Path(p).resolve().relative_to(HERE.parent.parent))
                     if Path(p).resolve().is_relative_to(HERE.parent.parent) else str(p)
                     for p in paths],
            "kernels": kernels, "checks": checks}


def refused(paths_or_rows) -> pd.DataFrame:
    """Per implementation and dtype: the widths N whose calls torch refused (of the rows, or
    of the files, ``paths_or_rows``)."""
    rows = paths_or_rows if isinstance(paths_or_rows, pd.DataFrame) else pd.concat(
        [pd.read_parquet(p) for p in paths_or_rows], ignore_index=True)
    rows = rows[rows["error"].fillna("") != ""]
    return (rows.groupby(["implementation", "dtype"])
            .agg(rows=("n", "size"), widths=("n", lambda s: sorted(set(map(int, s)))),
                 error=("error", lambda s: s.iloc[0][:90])).reset_index())


def _markdown(frame: pd.DataFrame) -> str:
    head = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(_cell(v) for v in row) + " |" for row in frame.itertuples(False)]
    return "\n".join([head, rule, *body])


def _cell(value) -> str:
    if isinstance(value, float):
        return "" if np.isnan(value) else f"{value:.2f}"
    return str(value)


def _check_out(out: Path) -> None:
    """Refuse an --out that cannot be written: a folder, or in a folder that is not there or
    not writable."""
    import os

    folder = out.parent if str(out.parent) else Path(".")
    if out.is_dir():
        raise CompareError(f"--out {out}: is a folder; give a .csv file path")
    if not folder.is_dir():
        raise CompareError(f"--out {out}: no folder {folder}; create it or give another path")
    if out.exists() and not os.access(out, os.W_OK):
        raise CompareError(f"--out {out}: cannot write there; give a writable path")
    from .out_check import file_problem

    problem = file_problem(out)  # creates and removes a file: os.access says yes to root
    if problem:
        raise CompareError(problem)
    if len(out.name.encode()) + len(".tmp") > 255:
        raise CompareError(f"--out {out.name[:20]}...: the name is longer than the file "
                           "system takes (255); give a shorter one")


def build_parser() -> Parser:
    p = Parser(prog="python -m benchmarks.gpu.compare_dtype",
               description="dse's expectation in bf16, fp8, int8 and int4 "
                           "weights against the H100 dtype_gemm rows.")
    p.add_argument("--data", type=Path, action="append", metavar="PARQUET",
                   help="dtype_gemm rows (repeatable; default: both seeds' part files)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="CSV of every shape")
    shipped = SHIPPED.relative_to(HERE.parent.parent)
    p.add_argument("--ship", action="store_true",
                   help=f"also write the medians dse quotes to {shipped}")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    paths = args.data or list(DEFAULT_DATA)
    try:
        _check_out(args.out)  # before the work, not after it
        everything = read_rows(paths)
        table = compare(_timed(everything, paths))
    except CompareError as exc:
        print(f"compare_dtype: {exc}", file=sys.stderr)
        return 2
    tmp = args.out.with_name(args.out.name + ".tmp")
    table.to_csv(tmp, index=False)
    tmp.replace(args.out)
    print(f"dse --calibrated {CALIBRATED} (cold) against {len(table)} measured (variant, "
          f"shape) pairs on {HARDWARE}; ratio = measured / expected; speedups over fp16 "
          "dense on the same shape")
    table_summary = summary(table)
    print(_markdown(table_summary))
    print("\nrefused by torch (error rows):")
    print(_markdown(refused(everything)))
    print(f"\nwrote {args.out}")
    if args.ship:
        SHIPPED.parent.mkdir(parents=True, exist_ok=True)
        tmp = SHIPPED.with_name(SHIPPED.name + ".tmp")
        tmp.write_text(json.dumps(shipped_check(table_summary, paths), indent=1) + "\n")
        tmp.replace(SHIPPED)
        print(f"wrote {SHIPPED.relative_to(HERE.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
