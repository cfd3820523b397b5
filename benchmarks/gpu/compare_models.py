#!/usr/bin/env python3
"""dse's whole-model predictions against the measured timm models on the H100 (no torch, no GPU).

Reads ``results/models_measurements.csv`` (written by ``measure_models.py`` on the GPU machine) and,
for every measured (model, batch), asks ``dse.evaluate`` for the latency on ``h100-sxm`` with
``scope="all"`` under each fusion model (``unfused``, ``fused``, ``fused_prefetched``), for
dense and for 2:4, on two traces per model:

* the shipped trace ``workloads/traces/<model>.json`` as it is: dse's 2:4 prunes every prunable
  op whose K % 4 == 0, convolutions included (column ``pred_24_all_s``);
* a copy of it in which only the linears the measurement converted stay prunable (``kind ==
  "linear"`` with M % 64 == 0 and K % 64 == 0, i.e. out/in_features % 64 == 0; convs and the other
  linears are marked ``prunable=False``) and rebuilt with ``workloads.Trace.from_records``
  (``pred_24_linear_only_s``). The number of such ops is checked against the measured
  ``converted_layers``.

The shipped traces were exported with timm's fused attention off (explicit ``q @ k^T``, softmax,
``attn @ v``); the measured ViT/DeiT run ``F.scaled_dot_product_attention`` (flash attention, no
attention matrix in DRAM), Swin runs the explicit form (timm enables its fused path only
experimentally).

Writes ``results/models_predicted_vs_measured.csv`` (one row per model, batch and fusion) and prints
a Markdown summary. ``sol_frac_*`` = predicted / measured (1 = at the speed of light).

Run from the repository root: ``.venv/bin/python -m benchmarks.gpu.compare_models`` (any Python
with the project installed). ``--measurements`` and ``--out`` change the files.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import pandas as pd

import dse
import workloads
from dse.cli.parser import Parser
from workloads import Trace

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

HARDWARE = "h100-sxm"
FUSIONS = ("unfused", "fused", "fused_prefetched")
OUT_COLUMNS = [
    "model",
    "batch",
    "fusion",
    "meas_dense_eager_s",
    "meas_dense_cudagraph_s",
    "pred_dense_s",
    "pred_dense_bound",
    "sol_frac_dense_eager",
    "sol_frac_dense_cudagraph",
    "converted_layers",
    "pred_prunable_ops_all",
    "pred_prunable_ops_linear_only",
    "meas_sparse24_eager_s",
    "meas_sparse24_cudagraph_s",
    "pred_24_all_s",
    "pred_24_linear_only_s",
    "pred_speedup_24_all",
    "pred_speedup_24_linear_only",
    "meas_speedup_24_eager",
    "meas_speedup_24_cudagraph",
    "sol_frac_24_linear_only_cudagraph",
]


def linear_only_trace(trace: Trace) -> Trace:
    """The trace with only the linears measure_models.py converts left prunable."""
    records = trace.to_json()["ops"]
    for r in records:
        if r["prunable"] and not (r["kind"] == "linear" and r["m"] % 64 == 0 and r["k"] % 64 == 0):
            r["prunable"] = False
    return Trace.from_records(
        trace.model + "+linear64_only",
        trace.input_shape,
        records,
        provenance=dict(trace.provenance, modified="only linears with M,K % 64 == 0 prunable"),
    )


def predict(trace: Trace, batches: list[int]) -> pd.DataFrame:
    t = dse.evaluate(trace, HARDWARE, ["2:4"], batches=batches, fusion=list(FUSIONS), scope="all")
    return t


def build_parser() -> Parser:
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--measurements", default=str(HERE / "results" / "models_measurements.csv"))
    p.add_argument("--out", default=str(HERE / "results" / "models_predicted_vs_measured.csv"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .out_check import file_problem

    problem = file_problem(args.out)
    if problem:
        print(f"compare_models: {problem}", file=sys.stderr)
        return 2

    meas = pd.read_csv(args.measurements, keep_default_na=False)
    meas = meas[meas["error"] == ""]
    meas["median_s"] = meas["median_s"].astype(float)
    rows = []
    for model, mg in meas.groupby("model", sort=False):
        batches = sorted(int(b) for b in mg["batch"].unique())
        trace = workloads.load_trace(model)
        lin = linear_only_trace(trace)
        n_all = int(trace.ops["prunable"].sum())
        n_lin = int(lin.ops["prunable"].sum())
        conv_meas = mg.loc[mg["variant"] == "sparse24_eager", "converted_layers"]
        conv_meas = int(conv_meas.iloc[0]) if len(conv_meas) else None
        if conv_meas is not None and conv_meas != n_lin:
            print(f"WARNING {model}: measured {conv_meas} converted linears, trace has {n_lin}")
        full = predict(trace, batches)
        restr = predict(lin, batches)

        def m(variant, b, mg=mg):
            s = mg.loc[(mg["variant"] == variant) & (mg["batch"].astype(int) == b), "median_s"]
            return float(s.iloc[0]) if len(s) else math.nan

        for b in batches:
            for fu in FUSIONS:
                sel = lambda t, fmt, b=b, fu=fu: t[  # noqa: E731
                    (t["batch"] == b) & (t["fusion"] == fu) & (t["format"] == fmt)
                ].iloc[0]
                d = sel(full, "dense")
                s_all = sel(full, "2:4")
                s_lin = sel(restr, "2:4")
                assert math.isclose(sel(restr, "dense")["latency_s"], d["latency_s"], rel_tol=1e-12)
                de, dg = m("dense_eager", b), m("dense_cudagraph", b)
                se, sg = m("sparse24_eager", b), m("sparse24_cudagraph", b)
                rows.append(
                    dict(
                        model=model,
                        batch=b,
                        fusion=fu,
                        meas_dense_eager_s=de,
                        meas_dense_cudagraph_s=dg,
                        pred_dense_s=d["latency_s"],
                        pred_dense_bound=d["bound"],
                        sol_frac_dense_eager=d["latency_s"] / de,
                        sol_frac_dense_cudagraph=d["latency_s"] / dg,
                        converted_layers=conv_meas,
                        pred_prunable_ops_all=n_all,
                        pred_prunable_ops_linear_only=n_lin,
                        meas_sparse24_eager_s=se,
                        meas_sparse24_cudagraph_s=sg,
                        pred_24_all_s=s_all["latency_s"],
                        pred_24_linear_only_s=s_lin["latency_s"],
                        pred_speedup_24_all=s_all["speedup"],
                        pred_speedup_24_linear_only=s_lin["speedup"],
                        meas_speedup_24_eager=de / se,
                        meas_speedup_24_cudagraph=dg / sg,
                        sol_frac_24_linear_only_cudagraph=s_lin["latency_s"] / sg,
                    )
                )
    out = pd.DataFrame(rows, columns=OUT_COLUMNS)
    tmp = Path(args.out).with_suffix(".tmp")
    out.to_csv(tmp, index=False, float_format="%.6g")
    os.replace(tmp, args.out)
    print(f"wrote {args.out} ({len(out)} rows)\n")

    # --- Markdown summary -------------------------------------------------------------------
    ms = lambda x: f"{x * 1e3:.2f}"  # noqa: E731
    print(
        "Dense: measured ms (eager / CUDA graph), dse ms and fraction of SOL vs the CUDA-graph time"
    )
    print()
    print(
        "| model | batch | eager ms | graph ms | dse unfused ms | dse fused ms | dse fused_pref ms "
        "| SOL frac (graph): unfused / fused / fused_pref | bound |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    wide = out.pivot_table(
        index=["model", "batch"],
        columns="fusion",
        values=["pred_dense_s", "sol_frac_dense_cudagraph", "pred_24_linear_only_s"],
        sort=False,
    )
    first = out.drop_duplicates(["model", "batch"]).set_index(["model", "batch"])
    for (model, b), r in wide.iterrows():
        f = first.loc[(model, b)]
        print(
            f"| {model} | {b} | {ms(f['meas_dense_eager_s'])} | "
            f"{ms(f['meas_dense_cudagraph_s'])} | "
            + " | ".join(ms(r[("pred_dense_s", fu)]) for fu in FUSIONS)
            + " | "
            + " / ".join(f"{r[('sol_frac_dense_cudagraph', fu)]:.2f}" for fu in FUSIONS)
            + f" | {f['pred_dense_bound']} |"
        )
    print()
    print(
        "2:4 (linears with in/out % 64 == 0 via cuSPARSELt, convs dense): measured speedup over "
        "dense (eager / CUDA graph) vs dse's (linear-only trace; whole trace incl. convs), "
        "fused_prefetched and unfused"
    )
    print()
    print(
        "| model | batch | converted | meas eager | meas graph | dse lin-only unfused / fused_pref "
        "| dse all-prunable unfused / fused_pref |"
    )
    print("|---|---|---|---|---|---|---|")
    sp = out.pivot_table(
        index=["model", "batch"],
        columns="fusion",
        values=["pred_speedup_24_linear_only", "pred_speedup_24_all"],
        sort=False,
    )
    for (model, b), r in sp.iterrows():
        f = first.loc[(model, b)]
        print(
            f"| {model} | {b} | {f['converted_layers']}/{f['pred_prunable_ops_all']} | "
            f"{f['meas_speedup_24_eager']:.2f}x | {f['meas_speedup_24_cudagraph']:.2f}x | "
            f"{r[('pred_speedup_24_linear_only', 'unfused')]:.2f}x / "
            f"{r[('pred_speedup_24_linear_only', 'fused_prefetched')]:.2f}x | "
            f"{r[('pred_speedup_24_all', 'unfused')]:.2f}x / "
            f"{r[('pred_speedup_24_all', 'fused_prefetched')]:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
