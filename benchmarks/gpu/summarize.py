#!/usr/bin/env python3
"""Summarise measure_gemm.py output into the headline tables of README.md (stdlib only).

Usage: python3 benchmarks/gpu/summarize.py [results/gemm_measurements.csv]
       [--repeat results/gemm_measurements_repeat_dense_24.csv]
Prints Markdown to stdout. No GPU or torch needed.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC_PEAK, SPEC_BW = 989.4e12, 3.35e12


def load(path):
    rows = list(csv.DictReader(open(path, newline="")))
    for r in rows:
        for k in (
            "median_s",
            "steady_s",
            "sol_fraction",
            "speedup_vs_dense",
            "tflops_useful",
            "prof_kernel_s",
            "sparsity",
            "host_call_s",
        ):
            v = r.get(k, "")
            r[k] = float(v) if v not in ("", None) else None
        for k in ("M", "K", "N"):
            r[k] = int(r[k]) if r.get(k) else None
    return rows


def gmean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def bucket(r):
    """Shape group label used in the tables."""
    g = r["group"]
    if g == "vit":
        return f"ViT/DeiT, batch {r['batch']} (N={r['N']})"
    if g == "convnext":
        return f"ConvNeXt-T, batch {r['batch']}"
    n = r["N"]
    return f"square, N={n}"


ORDER = [
    "ViT/DeiT, batch 1 (N=197)",
    "ViT/DeiT, batch 8 (N=1576)",
    "ViT/DeiT, batch 64 (N=12608)",
    "ConvNeXt-T, batch 1",
    "ConvNeXt-T, batch 8",
    "square, N=1",
    "square, N=16",
    "square, N=128",
    "square, N=1024",
    "square, N=8192",
]


def shape_key(r):
    return (r["group"], r["layer"], r["batch"], r["M"], r["K"], r["N"])


def fmt(x, f="{:.2f}"):
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f.format(x)


def build_parser() -> argparse.ArgumentParser:
    """dse's parser, which refuses a second, different value of an option (stdlib only). Run
    as ``python3 benchmarks/gpu/summarize.py`` without dse installed, the checkout's."""
    try:
        from dse.cli.parser import Parser
    except ModuleNotFoundError:
        sys.path.append(os.path.dirname(os.path.dirname(HERE)))
        from dse.cli.parser import Parser
    ap = Parser()
    res = os.path.join(HERE, "results")
    ap.add_argument("csv", nargs="?", default=os.path.join(res, "gemm_measurements.csv"))
    ap.add_argument("--repeat", default=os.path.join(res, "gemm_measurements_repeat_dense_24.csv"))
    return ap


def main():
    a = build_parser().parse_args()
    rows = load(a.csv)
    ok = [r for r in rows if not r["error"] and r["median_s"]]

    # ---------------- calibration
    print("### Calibration (achieved vs H100 SXM datasheet)\n")
    print("| quantity | measured | spec | fraction |\n|---|---|---|---|")
    for path in [a.csv] + ([a.repeat] if os.path.exists(a.repeat) else []):
        for r in load(path):
            if r["kernel"] == "calib_copy_bw" and r["median_s"]:
                bw = 2 * 2 * 2**30 / r["median_s"]
                print(
                    f"| DRAM BW, 4 GiB D2D copy (read+write), {os.path.basename(path)} | "
                    f"{bw / 1e12:.3f} TB/s | 3.35 TB/s | {bw / SPEC_BW:.1%} |"
                )
            if r["kernel"] == "calib_dense_peak" and r["median_s"]:
                p = 2 * 8192**3 / r["median_s"]
                print(
                    f"| fp16 dense 8192^3 torch.mm, {os.path.basename(path)} | "
                    f"{p / 1e12:.0f} TFLOP/s | "
                    f"989.4 TFLOP/s | {p / SPEC_PEAK:.1%} |"
                )
    print()

    # ---------------- per-shape bests
    dense = defaultdict(dict)
    s24 = defaultdict(dict)
    bsr = defaultdict(lambda: defaultdict(dict))  # shape -> block -> sparsity -> best time
    csr = defaultdict(dict)
    info = {}
    for r in ok:
        k = shape_key(r)
        info[k] = r
        if r["kernel"] in ("dense_mm", "dense_linear"):
            dense[k][r["kernel"]] = r
        elif r["kernel"].startswith("sparse24"):
            s24[k][(r["kernel"], r["backend"])] = r
        elif r["kernel"].startswith("bsr"):
            b, sp = int(r["block"]), r["sparsity"]
            cur = bsr[k][b].get(sp)
            if cur is None or r["median_s"] < cur["median_s"]:
                bsr[k][b][sp] = r
        elif r["kernel"] == "csr_mm":
            csr[k][r["sparsity"]] = r

    def best_dense(k):
        return min(x["median_s"] for x in dense[k].values())

    by_bucket = defaultdict(list)
    for k in dense:
        by_bucket[bucket(info[k])].append(k)

    # ---------------- dense + 2:4 vs SOL
    print("### Dense and 2:4 vs roofline speed of light (cold L2, GPU time)\n")
    print(
        "sol = time_sol / measured (1.0 = at the roofline, P=989.4 TFLOP/s, BW=3.35 TB/s); "
        "speedup = best dense (min of torch.mm, F.linear) / 2:4 time; geometric means over the "
        "shapes in the group, [min-max] in brackets.\n"
    )
    print(
        "| shape group | #shapes | dense best: sol | "
        "2:4 cuSPARSELt default (mm): sol | speedup | "
        "2:4 best of mm/linear/alg-search: speedup | "
        "2:4 steady-state eager call (host-bound) / dense |"
    )
    print("|---|---|---|---|---|---|---|")
    for bk in ORDER:
        ks = by_bucket.get(bk, [])
        if not ks:
            continue
        dsol = [max(x["sol_fraction"] for x in dense[k].values()) for k in ks]
        sp_def, sol_def, sp_best, steady_ratio = [], [], [], []
        for k in ks:
            d = best_dense(k)
            r = s24[k].get(("sparse24_mm", "cusparselt"))
            if r:
                sp_def.append(d / r["median_s"])
                sol_def.append(r["sol_fraction"])
                dst = min((x["steady_s"] for x in dense[k].values() if x["steady_s"]), default=None)
                if r["steady_s"] and dst:
                    steady_ratio.append(r["steady_s"] / dst)
            if s24[k]:
                sp_best.append(d / min(x["median_s"] for x in s24[k].values()))

        def rng(xs, f="{:.2f}"):
            if not xs:
                return "n/a"
            return f"{fmt(gmean(xs), f)} [{fmt(min(xs), f)}-{fmt(max(xs), f)}]"

        print(
            f"| {bk} | {len(ks)} | {rng(dsol)} | {rng(sol_def)} | {rng(sp_def)} | "
            f"{rng(sp_best)} | "
            f"{rng(steady_ratio, '{:.0f}x')} |"
        )
    print()

    # ---------------- BSR break-even
    blocks = sorted({b for k in bsr for b in bsr[k]})
    levels = [0.5, 0.75, 0.875, 0.9375]
    print("### BSR (best of torch.sparse.mm / triton bsr_dense_mm / F.linear) vs best dense\n")
    print(
        "Break-even = lowest measured sparsity at which BSR is faster than dense for that shape; "
        "'never' = slower at all of 50/75/87.5/93.75%. "
        "Cells: number of shapes per break-even level "
        "and geometric-mean speedup over dense at 93.75% sparsity.\n"
    )
    print(
        "| shape group | block | 50% | 75% | 87.5% | 93.75% | never | "
        "speedup @93.75% (gmean [max]) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    groups = [
        ("ViT/DeiT (all batches)", lambda r: r["group"] == "vit"),
        ("ConvNeXt-T (all)", lambda r: r["group"] == "convnext"),
        ("square, N<=128", lambda r: r["group"] == "square" and r["N"] <= 128),
        ("square, N>=1024", lambda r: r["group"] == "square" and r["N"] >= 1024),
    ]
    for gname, pred in groups:
        for b in blocks:
            cnt = defaultdict(int)
            sp94 = []
            for k in bsr:
                if not pred(info[k]) or b not in bsr[k]:
                    continue
                d = best_dense(k)
                be = "never"
                for lv in levels:
                    r = bsr[k][b].get(lv)
                    if r and r["median_s"] < d:
                        be = lv
                        break
                cnt[be] += 1
                if bsr[k][b].get(0.9375):
                    sp94.append(d / bsr[k][b][0.9375]["median_s"])
            if not sum(cnt.values()):
                continue
            cells = " | ".join(str(cnt.get(lv, 0)) for lv in levels + ["never"])
            mx = fmt(max(sp94) if sp94 else None)
            print(f"| {gname} | {b} | {cells} | {fmt(gmean(sp94))} [{mx}] |")
    print()

    # ---------------- CSR
    print("### CSR (cuSPARSE SpMM, fp16 values, int32 indices) vs best dense\n")
    print(
        "| shape group | "
        + " | ".join(f"{s:.5g}" for s in [0.5, 0.75, 0.875, 0.9375, 0.96875])
        + " | best TFLOP/s (useful) |"
    )
    print("|---|---|---|---|---|---|---|")
    for gname, pred in groups:
        ks = [k for k in csr if pred(info[k])]
        if not ks:
            continue
        cells = []
        for s in [0.5, 0.75, 0.875, 0.9375, 0.96875]:
            xs = [best_dense(k) / csr[k][s]["median_s"] for k in ks if s in csr[k]]
            nwin = sum(1 for x in xs if x > 1)
            cells.append(f"{fmt(gmean(xs))}x ({nwin}/{len(xs)} faster)")
        tf = max(csr[k][s]["tflops_useful"] for k in ks for s in csr[k])
        print(f"| {gname} | " + " | ".join(cells) + f" | {tf:.1f} |")
    print()

    # ---------------- reproducibility
    if os.path.exists(a.repeat):
        rep = {
            (shape_key(r), r["kernel"], r["backend"]): r
            for r in load(a.repeat)
            if not r["error"] and r["median_s"]
        }
        diffs = defaultdict(list)
        for r in ok:
            key = (shape_key(r), r["kernel"], r["backend"])
            if key in rep:
                rel = rep[key]["median_s"] / r["median_s"] - 1
                diffs[r["kernel"] + " / " + r["backend"]].append(rel)
        print("### Run-to-run (main run vs repeat run, same script, same machine session)\n")
        print("| kernel | #shapes | median abs diff | #shapes with abs diff > 10% | max abs diff |")
        print("|---|---|---|---|---|")
        for kname, ds in sorted(diffs.items()):
            ab = [abs(x) for x in ds]
            n10 = sum(1 for x in ab if x > 0.1)
            print(f"| {kname} | {len(ds)} | {statistics.median(ab):.1%} | {n10} | {max(ab):.0%} |")
        print()

    # ---------------- disturbed rows
    print("### Rows whose median is > 1.5x their min (transient host/VM disturbance suspected)\n")
    print("| file | kernel | rows flagged | rows timed |\n|---|---|---|---|")
    for path in [a.csv] + ([a.repeat] if os.path.exists(a.repeat) else []):
        flagged, total = defaultdict(int), defaultdict(int)
        for r in csv.DictReader(open(path, newline="")):
            if r["median_s"] and r["min_s"] and not r["kernel"].startswith("calib"):
                total[r["kernel"]] += 1
                if float(r["median_s"]) > 1.5 * float(r["min_s"]):
                    flagged[r["kernel"]] += 1
        for kn in sorted(total):
            print(f"| {os.path.basename(path)} | {kn} | {flagged[kn]} | {total[kn]} |")
    print()

    # ---------------- errors
    errs = defaultdict(int)
    for r in rows:
        if r["error"]:
            errs[(r["kernel"], r["error"][:110])] += 1
    print("### Rows with an error string\n")
    print("| kernel | error | rows |\n|---|---|---|")
    for (kn, e), n in sorted(errs.items()):
        print(f"| {kn} | {e} | {n} |")


if __name__ == "__main__":
    main()
