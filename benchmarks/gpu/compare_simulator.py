#!/usr/bin/env python3
"""The event-level simulator's whole-model latencies against the measured timm models on the H100
(no torch, no GPU): how much of the measured time each model explains.

Reads ``results/models_measurements.csv`` (``measure_models.py`` on the GPU machine) and, for
every model and batch measured as a CUDA graph (host launch cost removed, every kernel still
running), predicts the latency on ``h100-sxm`` with ``scope="all"`` and ``fusion="unfused"``
(what eager PyTorch and its CUDA-graph replay execute: every op a kernel, every output to DRAM;
see ``README.md``): once with the roofline (``dse.evaluate``) and once with the simulator
(``dse.sim.simulate.simulate``, default settings: shared memory x SMs as the buffer, double
buffering, ``DEFAULT_LAUNCH_OVERHEAD_S`` per kernel). 2:4 uses the same linear-only trace as
``compare_models.py`` (only the linears the measurement converted are prunable), so its speedup
compares with the measured.

It also derives that default: per model at batch 1, the measured time the simulator leaves
unexplained without any launch overhead, divided by its kernels (``per_kernel_fit_s``); the
default is the median over the models, rounded to 0.1 us.

Writes ``results/simulator_vs_measured.csv`` and prints a Markdown table. ``frac_*`` =
predicted / measured: 1 means the model explains all of the measured time.

Run from the repository root: ``.venv/bin/python -m benchmarks.gpu.compare_simulator``.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

import dse
from dse.cli.parser import Parser
from dse.sim.simulate import SimConfig, simulate
from workloads import load_trace

from .compare_models import HARDWARE, linear_only_trace

HERE = Path(__file__).resolve().parent
FUSION, SCOPE = "unfused", "all"


def _roofline(trace, fmt: str, batch: int) -> float:
    table = dse.evaluate(trace, HARDWARE, fmt, batch, fusion=FUSION, scope=SCOPE)
    return float(table.loc[table["format"] == fmt, "latency_s"].iloc[0])


def compare(measurements: pd.DataFrame, config: SimConfig) -> pd.DataFrame:
    graphs = measurements[measurements["variant"].str.endswith("_cudagraph")
                          & measurements["error"].isna()]
    wide = graphs.pivot_table(index=["model", "batch"], columns="variant", values="median_s")
    rows = []
    for (model, batch), meas in wide.iterrows():
        trace = load_trace(model)
        sparse_trace = linear_only_trace(trace)
        dense = simulate(trace, HARDWARE, "dense", int(batch), FUSION, SCOPE, config)
        sparse = simulate(sparse_trace, HARDWARE, "2:4", int(batch), FUSION, SCOPE, config)
        roof_dense = _roofline(trace, "dense", int(batch))
        roof_24 = _roofline(sparse_trace, "2:4", int(batch))
        measured = float(meas["dense_cudagraph"])
        measured_24 = float(meas.get("sparse24_cudagraph", float("nan")))
        summary = dense.summary()
        free = simulate(trace, HARDWARE, "dense", int(batch), FUSION, SCOPE,
                        replace(config, launch_overhead_s=0.0))
        rows.append({
            "model": model, "batch": int(batch),
            "meas_dense_cudagraph_s": measured,
            "roofline_dense_s": roof_dense,
            "sim_dense_s": dense.latency_s,
            "frac_roofline": roof_dense / measured,
            "frac_sim": dense.latency_s / measured,
            "sim_kernels": summary["kernels"],
            "per_kernel_fit_s": (measured - free.latency_s) / summary["kernels"],
            "sim_gap_launch_s": summary["gap_launch_s"],
            "sim_gap_buffer_s": summary["gap_buffer_s"],
            "sim_gap_fill_drain_s": summary["gap_fill_drain_s"],
            "meas_speedup_24_cudagraph": measured / measured_24,
            "roofline_speedup_24": roof_dense / roof_24,
            "sim_speedup_24": dense.latency_s / sparse.latency_s,
        })
    return pd.DataFrame(rows)


def build_parser() -> Parser:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--measurements", type=Path,
                        default=HERE / "results" / "models_measurements.csv")
    parser.add_argument("--out", type=Path,
                        default=HERE / "results" / "simulator_vs_measured.csv")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .out_check import file_problem

    problem = file_problem(args.out)
    if problem:
        print(f"compare_simulator: {problem}", file=sys.stderr)
        return 2
    table = compare(pd.read_csv(args.measurements), SimConfig())
    table.to_csv(args.out, index=False)
    print("| model | batch | measured graph ms | roofline ms | simulated ms | roofline / measured "
          "| simulated / measured | kernels | 2:4 speedup measured / roofline / simulated |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in table.itertuples():
        print(f"| {r.model} | {r.batch} | {1e3 * r.meas_dense_cudagraph_s:.3f} | "
              f"{1e3 * r.roofline_dense_s:.3f} | {1e3 * r.sim_dense_s:.3f} | "
              f"{r.frac_roofline:.2f} | {r.frac_sim:.2f} | {r.sim_kernels} | "
              f"{r.meas_speedup_24_cudagraph:.2f}x / {r.roofline_speedup_24:.2f}x / "
              f"{r.sim_speedup_24:.2f}x |")
    fits = table.loc[table["batch"] == 1, ["model", "per_kernel_fit_s"]]
    print("\nper-kernel time left unexplained at batch 1 (no launch overhead simulated): "
          + ", ".join(f"{m} {1e6 * v:.2f} us" for m, v in fits.itertuples(index=False))
          + f"; median {1e6 * fits['per_kernel_fit_s'].median():.2f} us")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
