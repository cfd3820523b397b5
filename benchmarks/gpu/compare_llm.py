#!/usr/bin/env python3
"""dse's LLM bound (and calibrated expectation) against the H100 LLM measurements (no GPU).

Reads the rows ``benchmarks/gpu/llm_decode.py`` wrote (``results/llm_decode*.csv``: transformers
eager, fp16, random weights; prefill of 512 tokens at batch 1, decode steps at context 2048) and,
for each, prices the same step with dse on ``h100-sxm``: ``workloads.llm.llm_trace`` of the
shipped configuration, ``dse.evaluate`` with ``scope="all"``, unfused, dense or 2:4 (the LM head
stays dense in both, as in the measurement). The expectation uses the shipped ``h100-sxm``
predictors.

Two measured figures per row: ``kernel_s``, the GPU time of the step's kernels (what a roofline
speaks to), and ``wall_s``, the step as a user waits for it (eager transformers' host dispatch
included). A measurement below the bound would be a bug in dse: the script exits 1 if one is.

    python -m benchmarks.gpu.compare_llm            # prints a Markdown table
    python -m benchmarks.gpu.compare_llm --out results/llm_predicted_vs_measured.csv
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

import dse
from dse.cli.parser import Parser
from workloads.llm import llm_trace, load_llm_config

HERE = Path(__file__).resolve().parent
MEASURED = [HERE / "results" / "llm_decode.csv", HERE / "results" / "llm_decode_kernels.csv"]
HARDWARE = "h100-sxm"
FORMATS = {"dense": "dense", "2:4": "2:4"}


def priced(measured: pd.DataFrame, calibrated: str | None) -> pd.DataFrame:
    """``measured`` with dse's bound (``bound_s``) and, with ``calibrated``, its expectation."""
    rows = []
    for (model, phase, context), group in measured.groupby(["model", "phase", "context"]):
        config = load_llm_config(model)
        step_context = int(group["tokens"].iloc[0]) if phase == "prefill" else int(context)
        trace = llm_trace(config, phase, step_context)
        batches = sorted({int(b) for b in group["batch"]})
        formats = sorted({FORMATS[v] for v in group["variant"]})
        table = dse.evaluate(trace, HARDWARE, formats, batches, scope="all",
                             calibrated=calibrated)
        for _, row in group.iterrows():
            hit = table[(table["format"] == FORMATS[row["variant"]])
                        & (table["batch"] == row["batch"])].iloc[0]
            out = dict(row)
            out["bound_s"] = float(hit["latency_s"])
            if calibrated is not None:
                out["expected_s"] = float(hit["expected_latency_s"])
            rows.append(out)
    frame = pd.DataFrame(rows)
    frame["kernel_over_bound"] = frame["kernel_s"] / frame["bound_s"]
    frame["wall_over_bound"] = frame["wall_s"] / frame["bound_s"]
    if "expected_s" in frame:
        frame["kernel_over_expected"] = frame["kernel_s"] / frame["expected_s"]
    return frame


def build_parser() -> Parser:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measured", action="append", type=Path,
                        help="CSV written by benchmarks/gpu/llm_decode.py (repeatable; default "
                             "the two shipped ones)")
    parser.add_argument("--calibrated", default="h100-sxm",
                        help="predictor set for the expectation ('none' for the bound only)")
    parser.add_argument("--out", type=Path, help="write the joined table to this CSV")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    paths = args.measured or MEASURED
    if args.out is not None:
        from .out_check import file_problem

        problem = file_problem(args.out)
        if problem:
            print(f"compare_llm: {problem}", file=sys.stderr)
            return 2
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        print(f"compare_llm: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    measured = pd.concat([pd.read_csv(p).assign(file=p.name) for p in paths], ignore_index=True)
    calibrated = None if args.calibrated == "none" else args.calibrated
    frame = priced(measured, calibrated)
    if args.out:
        frame.drop(columns=["top_kernels"], errors="ignore").to_csv(args.out, index=False)
    columns = ["model", "variant", "phase", "batch", "context", "kernel_s", "wall_s", "bound_s"]
    columns += ["expected_s"] if calibrated else []
    show = frame[columns + ["kernel_over_bound", "wall_over_bound"]].copy()
    for c in ("kernel_s", "wall_s", "bound_s", "expected_s"):
        if c in show:
            show[c] = (show[c] * 1e3).map("{:.2f}".format)
    show = show.rename(columns={c: c.replace("_s", " (ms)") for c in
                                ("kernel_s", "wall_s", "bound_s", "expected_s")})
    for c in ("kernel_over_bound", "wall_over_bound"):
        show[c] = show[c].map("{:.2f}".format)
    print(show.to_string(index=False))
    beaten = frame[frame["kernel_s"] < frame["bound_s"]]
    print(f"\n{len(frame)} measurements; kernel time / bound: median "
          f"{frame['kernel_over_bound'].median():.2f}, min {frame['kernel_over_bound'].min():.2f}; "
          f"{len(beaten)} beat the bound")
    return 1 if len(beaten) else 0


if __name__ == "__main__":
    sys.exit(main())
