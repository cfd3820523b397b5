#!/usr/bin/env python3
"""dse speed-of-light predictions against the measured H100 GEMMs (no torch, no GPU).

For every successfully timed GEMM row of ``results/gemm_measurements.csv`` (dense, 2:4, BSR,
CSR; calibration and error rows skipped) this builds a one-op ``dse`` trace (one prunable
``linear`` op, ``Y[M x N] = W[M x K] . X[K x N]``) and asks ``dse.evaluate`` for the predicted
latency on ``h100-sxm`` (batch 1, since N already holds the batch; scope ``gemm``, fusion
``unfused``; default numerics, so CSR runs on the vector cores at the FP32 rate). It calls dse
once per (M, K, N) with every format measured on that shape, writes
``results/predicted_vs_measured.csv`` and prints:

* checks: dse's dense and 2:4 predictions must equal the measuring script's ``time_sol_s``
  (same roofline) to 1e-6 relative, and every prediction must equal the README's equations
  worked here independently; either failure exits non-zero. The BSR/CSR differences from
  ``time_sol_s`` are decomposed (nominal vs actual nonzeros, CSR vector rate).
* a Markdown summary: fraction of speed of light (predicted / measured) per kernel family and
  shape group, and the measured vs predicted speedup over dense.

Run from the repository root: ``.venv/bin/python -m benchmarks.gpu.compare_predictions``
(any Python with the project installed). ``--measurements`` and ``--out`` change the files.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import pandas as pd

import accelerator_models
import dse
import formats
from dse.cli.parser import Parser
from workloads import Trace

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

HARDWARE = "h100-sxm"
DENSE_KERNELS = ("dense_mm", "dense_linear")
GROUPS = ("vit", "convnext", "square")
TOL_SAME_ROOFLINE = 1e-6  # time_sol_s is stored with 7 significant digits (rel. error <= 5e-7)
TOL_EQUATIONS = 1e-9

OUT_COLUMNS = [
    "kernel",
    "backend",
    "group",
    "layer",
    "batch",
    "M",
    "K",
    "N",
    "format",
    "family",
    "measured_median_s",
    "dse_latency_s",
    "dse_bound",
    "fraction_of_sol",
    "helper_time_sol_s",
    "rel_diff_dse_vs_helper_sol",
    "dse_dense_latency_s",
    "dse_speedup",
    "measured_speedup_vs_best_dense",
    "nnz_measured",
    "nnz_dse",
]


def family_of(kernel: str, block) -> str:
    """Kernel family label used in the summary (BSR split by block size)."""
    if kernel in DENSE_KERNELS:
        return "dense"
    if kernel.startswith("sparse24"):
        return "2:4"
    if kernel.startswith("bsr"):
        return f"bsr b={int(block)}"
    if kernel == "csr_mm":
        return "csr"
    raise ValueError(f"unknown kernel {kernel!r}")


def format_spec(kernel: str, block, sparsity: float) -> str:
    """The dse format string of a measured row."""
    pct = f"{round(sparsity * 100.0, 6):g}%"
    if kernel in DENSE_KERNELS:
        return "dense"
    if kernel.startswith("sparse24"):
        return "2:4"
    if kernel.startswith("bsr"):
        return f"block{int(block)}@{pct}"
    if kernel == "csr_mm":
        return f"unstructured@{pct}"
    raise ValueError(f"unknown kernel {kernel!r}")


def one_op_trace(m: int, k: int, n: int) -> Trace:
    record = {
        "name": "gemm",
        "kind": "linear",
        "m": m,
        "k": k,
        "n": n,
        "groups": 1,
        "weight_elems": m * k,
        "input_elems": k * n,
        "output_elems": m * n,
        "vector_flops": 0.0,
        "prunable": True,
        "producers": ["input"],
    }
    return Trace.from_records(
        f"gemm_M{m}_K{k}_N{n}",
        [k * n],
        [record],
        provenance={"source": "benchmarks/gpu/compare_predictions.py"},
    )


def load_measurements(path: Path) -> pd.DataFrame:
    d = pd.read_csv(path)
    d = d[d["error"].isna() & d["median_s"].notna()]
    d = d[~d["kernel"].str.startswith("calib")].copy()
    for c in ("M", "K", "N"):
        d[c] = d[c].astype("int64")
    d["batch"] = d["batch"].astype("Int64")  # empty for the square shapes
    d["family"] = [family_of(k, b) for k, b in zip(d["kernel"], d["block"], strict=True)]
    d["format"] = [
        formats.parse(format_spec(k, b, s)).name
        for k, b, s in zip(d["kernel"], d["block"], d["sparsity"], strict=True)
    ]
    return d


def predict(d: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """dse prediction per unique (M, K, N, format); one dse call per shape."""
    frames = []
    designs = d[["M", "K", "N", "format"]].drop_duplicates()
    for (m, k, n), g in designs.groupby(["M", "K", "N"], sort=True):
        fmts = sorted(set(g["format"]) - {"dense"})
        res = dse.evaluate(
            one_op_trace(int(m), int(k), int(n)),
            HARDWARE,
            fmts or ["dense"],
            batches=1,
            fusion="unfused",
            scope="gemm",
        )
        res = res.drop_duplicates("format").assign(M=m, K=k, N=n)
        frames.append(res)
    pred = pd.concat(frames, ignore_index=True)
    return pred, len(designs)


def readme_equations(row, acc, parts: bool = False):
    """The README's model for one GEMM, worked independently of dse's code.

    Returns the time, or with ``parts`` the (index bytes, DRAM bytes) behind it."""
    fmt = formats.parse(row.format)
    m, k, n = row.M, row.K, row.N
    nnz = fmt.density * m * k
    if fmt.family == "dense":
        index, rate = 0.0, acc.tensor_rate("fp16")
    elif fmt.family == "nm":
        index, rate = (
            nnz * math.ceil(math.log2(fmt.m)) / 8.0,
            acc.tensor_rate("fp16") * acc.nonzero_rate,
        )
    elif fmt.family == "block":
        b = fmt.block
        index, rate = 4.0 * (nnz / b**2 + m / b + 1), acc.tensor_rate("fp16")
    else:
        index, rate = 4.0 * (nnz + m + 1), acc.vector_rate("fp32")
    flops = 2.0 * nnz * n
    dram = 2.0 * nnz + index + 2.0 * (k * n + m * n)
    if parts:
        return index, dram
    return max(flops / rate, dram / acc.dram_bandwidth_bytes_per_s)


def helper_formula(row, nnz: float, peak: float) -> float:
    """measure_gemm.py's time_sol_s formula (spec P and BW) with a chosen nnz."""
    m, k, n = row.M, row.K, row.N
    fam = row.family
    if fam == "dense":
        index = 0.0
    elif fam == "2:4":
        index = nnz * 2 / 8
    elif fam.startswith("bsr"):
        b = int(fam.split("=")[1])
        index = (nnz / b**2) * 4 + (m // b + 1) * 4
    else:
        index = nnz * 4 + (m + 1) * 4
    dram = 2.0 * nnz + index + 2.0 * (k * n + m * n)
    return max(2.0 * nnz * n / peak, dram / 3.35e12)


def rng(s: pd.Series, f: str = "{:.2f}") -> str:
    s = s.dropna()
    if s.empty:
        return "-"
    return f"{f.format(s.median())} [{f.format(s.min())}-{f.format(s.max())}]"


def summary_tables(out: pd.DataFrame) -> str:
    lines = []
    # Best kernel per design: what a designer would pick for that shape and format.
    best = out.loc[out.groupby(["M", "K", "N", "format"])["measured_median_s"].idxmin()]
    fam_order = ["dense", "2:4", "bsr b=16", "bsr b=32", "bsr b=64", "csr"]
    lines.append(
        "| family | group | rows | fraction_of_sol, all rows | designs | "
        "fraction_of_sol, best kernel | measured speedup | dse speedup | "
        "measured / dse speedup |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for fam in fam_order:
        for grp in GROUPS:
            a = out[(out["family"] == fam) & (out["group"] == grp)]
            if a.empty:
                continue
            b = best[(best["family"] == fam) & (best["group"] == grp)]
            if fam == "dense":
                spd = ("1 (baseline)", "1", "-")
            else:
                spd = (
                    rng(b["measured_speedup_vs_best_dense"]),
                    rng(b["dse_speedup"]),
                    rng(b["measured_speedup_vs_best_dense"] / b["dse_speedup"], "{:.3f}"),
                )
            lines.append(
                f"| {fam} | {grp} | {len(a)} | {rng(a['fraction_of_sol'], '{:.3f}')} | "
                f"{len(b)} | {rng(b['fraction_of_sol'], '{:.3f}')} | "
                f"{spd[0]} | {spd[1]} | {spd[2]} |"
            )
    lines.append("")
    # Fraction of SOL of the best kernel by N (all groups together): the small-N effect.
    buckets = [
        ("N <= 49", 0, 49),
        ("128 <= N <= 392", 128, 392),
        ("1024 <= N <= 3136", 1024, 3136),
        ("N >= 8192", 8192, 10**9),
    ]
    lines.append(
        "| family (best kernel per design) | " + " | ".join(name for name, _, _ in buckets) + " |"
    )
    lines.append("|---|" + "---|" * len(buckets))
    for fam in fam_order:
        cells = []
        for _, lo, hi in buckets:
            b = best[(best["family"] == fam) & best["N"].between(lo, hi)]
            cells.append(rng(b["fraction_of_sol"], "{:.3f}") + f" (n={len(b)})")
        lines.append(f"| {fam} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def build_parser() -> Parser:
    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("--measurements", type=Path, default=HERE / "results" / "gemm_measurements.csv")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "predicted_vs_measured.csv")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from .out_check import file_problem

    problem = file_problem(args.out)
    if problem:
        print(f"compare_predictions: {problem}", file=sys.stderr)
        return 2

    d = load_measurements(args.measurements)
    pred, n_designs = predict(d)
    n_shapes = pred[["M", "K", "N"]].drop_duplicates().shape[0]
    print(
        f"{len(d)} measured GEMM rows, {n_designs} unique (M, K, N, format) designs, "
        f"{n_shapes} dse calls (one per shape) on {HARDWARE}\n"
    )

    keep = ["M", "K", "N", "format", "latency_s", "bound", "dense_latency_s", "speedup"]
    out = d.merge(pred[keep], on=["M", "K", "N", "format"], how="left", validate="many_to_one")
    if out["latency_s"].isna().any():
        missing = out[out["latency_s"].isna()][["M", "K", "N", "format"]].drop_duplicates()
        raise SystemExit(f"no dse prediction for:\n{missing}")
    dense_best = (
        d[d["kernel"].isin(DENSE_KERNELS)]
        .groupby(["M", "K", "N"])["median_s"]
        .min()
        .rename("best_dense_s")
    )
    out = out.join(dense_best, on=["M", "K", "N"])
    out = out.assign(
        measured_median_s=out["median_s"],
        dse_latency_s=out["latency_s"],
        dse_bound=out["bound"],
        fraction_of_sol=out["latency_s"] / out["median_s"],
        helper_time_sol_s=out["time_sol_s"],
        rel_diff_dse_vs_helper_sol=out["latency_s"] / out["time_sol_s"] - 1.0,
        dse_dense_latency_s=out["dense_latency_s"],
        dse_speedup=out["speedup"],
        measured_speedup_vs_best_dense=out["best_dense_s"] / out["median_s"],
        nnz_measured=out["nnz"].astype("int64"),
        nnz_dse=[
            formats.parse(f).density * m * k
            for f, m, k in zip(out["format"], out["M"], out["K"], strict=True)
        ],
    )
    # Own speedup column agrees with the helper's speedup_vs_dense (same definition).
    spd_diff = (out["measured_speedup_vs_best_dense"] / out["speedup_vs_dense"] - 1).abs().max()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".csv.tmp")
    out[OUT_COLUMNS].to_csv(tmp, index=False, float_format="%.6e")
    os.replace(tmp, args.out)
    print(
        f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out} "
        f"({len(out)} rows)\n"
    )

    # ---------------- checks
    acc = accelerator_models.load(HARDWARE)
    failed = False
    print("### Checks\n")
    rel = out["rel_diff_dse_vs_helper_sol"].abs()
    for fam in ("dense", "2:4"):
        r = rel[out["family"] == fam].max()
        ok = r <= TOL_SAME_ROOFLINE
        failed |= not ok
        print(
            f"- {fam}: max |dse / time_sol_s - 1| = {r:.2e} over "
            f"{(out['family'] == fam).sum()} rows ({'OK' if ok else 'FAIL'}, "
            f"tolerance {TOL_SAME_ROOFLINE:g})"
        )
    designs = out.drop_duplicates(["M", "K", "N", "format"])
    eq = designs.apply(lambda r: readme_equations(r, acc), axis=1)
    r_eq = (designs["dse_latency_s"] / eq - 1).abs().max()
    ok = r_eq <= TOL_EQUATIONS
    failed |= not ok
    print(
        f"- all {len(designs)} designs: max |dse / README equations (worked here) - 1| = "
        f"{r_eq:.2e} ({'OK' if ok else 'FAIL: dse contradicts its README'})"
    )
    # BSR / CSR: where dse and time_sol_s differ, and why.
    p_tensor = acc.tensor_rate("fp16")
    for fam_prefix, label in (("bsr", "BSR"), ("csr", "CSR")):
        sub = out[out["family"].str.startswith(fam_prefix)]
        raw = sub["rel_diff_dse_vs_helper_sol"]
        # dse's inputs in the helper's formula: nominal nnz (and for CSR the tensor peak)
        same_nnz = sub.apply(lambda r: helper_formula(r, r.nnz_dse, p_tensor), axis=1)
        nnz_only = same_nnz / sub["helper_time_sol_s"] - 1
        line = (
            f"- {label}: dse / time_sol_s - 1 in [{raw.min():+.3f}, {raw.max():+.3f}] "
            f"(median {raw.median():+.3f}); measured nnz / nominal nnz in "
            f"[{(sub['nnz_measured'] / sub['nnz_dse']).min():.3f}, "
            f"{(sub['nnz_measured'] / sub['nnz_dse']).max():.3f}]; "
            f"the helper's formula fed dse's nominal nnz differs from time_sol_s by "
            f"[{nnz_only.min():+.3f}, {nnz_only.max():+.3f}]"
        )
        if label == "CSR":
            vec = sub.apply(lambda r: helper_formula(r, r.nnz_dse, acc.vector_rate("fp32")), axis=1)
            r_vec = (sub["dse_latency_s"] / vec - 1).abs().max()
            line += (
                f"; with nominal nnz and the FP32 vector rate "
                f"({acc.vector_rate('fp32') / 1e12:.1f} TFLOP/s) instead of "
                f"{p_tensor / 1e12:.1f} it equals dse to {r_vec:.1e}; dse CSR bound: "
                f"{(sub['dse_bound'] == 'compute').sum()} compute / "
                f"{(sub['dse_bound'] == 'memory').sum()} memory rows"
            )
        else:
            r_bsr = (sub["dse_latency_s"] / same_nnz - 1).abs().max()
            # int64 instead of int32 indices: the index bytes double.
            extra = sub.apply(
                lambda r: (
                    readme_equations(r, acc, parts=True)[0]
                    / readme_equations(r, acc, parts=True)[1]
                ),
                axis=1,
            )
            line += (
                f"; with nominal nnz it equals dse to {r_bsr:.1e}. torch stored the BSR "
                f"indices as int64 (index_dtype column), both models count 4 B: 8 B would "
                f"add at most {extra.max():.2%} to the DRAM bytes"
            )
        print(line)
    csr_idx = set(out.loc[out["family"] == "csr", "index_dtype"])
    print(f"- CSR index dtype in the measurements: {sorted(csr_idx)} (dse: 4 B, same)")
    print(
        f"- measured speedup recomputed here vs the CSV's speedup_vs_dense: max rel diff "
        f"{spd_diff:.1e} (4-significant-digit rounding)"
    )
    print()

    print("### Summary\n")
    print(
        "fraction_of_sol = dse latency / measured median (1 = at dse's roofline); "
        "median [min-max]. Speedups over the best dense kernel (min of torch.mm, F.linear) "
        "for the best kernel of the family per (shape, format); dse speedup = its `speedup`.\n"
    )
    print(summary_tables(out))
    if failed:
        print("\nFAILED: see the checks above", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
