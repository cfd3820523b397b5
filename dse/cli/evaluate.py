"""`dse evaluate`: speed-of-light latency and speedup of formats on hardware."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from formats import GRAMMAR_HELP
from workloads import trace_names

from ..output import write_table
from ..roofline import evaluate, evaluate_layers
from .options import Default, add_design_options, check_outputs, design_from_args
from .tables import missing, seconds_column, share

__all__ = ["add_parsers", "fallback_summary"]


def add_parsers(commands) -> None:
    ev = commands.add_parser(
        "evaluate", help="speed-of-light latency and speedup of formats on hardware",
        description="Evaluate a model trace under sparse formats on one or more accelerators "
                    "with the roofline (speed-of-light) model, and print latency, dense "
                    "latency, speedup, bound mix, feature share of DRAM traffic and fallbacks.",
        epilog=f"Format grammar: {GRAMMAR_HELP}. Shipped models: {', '.join(trace_names())}.")
    add_design_options(ev, formats=Default(("dense",), "dense alone"))
    ev.add_argument("--per-layer", action="store_true",
                    help="print (and write with --out) one row per op and design")
    ev.add_argument("--out", type=Path, metavar="FILE",
                    help="write results to FILE.csv, FILE.parquet or FILE.json (atomically)")
    ev.set_defaults(run=_cmd_evaluate)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    check_outputs(files=[("--out", args.out)])
    d = design_from_args(args)
    frames = []
    for trace in d.traces:
        if args.per_layer:
            table = pd.concat([evaluate_layers(trace, d.hardware, d.formats, d.batches,
                                               fusion=f, scope=d.scope, numerics=d.numerics)
                               for f in d.fusions], ignore_index=True)
            print(_layer_table(table))
        else:
            table = evaluate(trace, d.hardware, d.formats, d.batches, fusion=d.fusions,
                             scope=d.scope, numerics=d.numerics)
            print(_design_table(table, trace))
        frames.append(table)
    table = pd.concat(frames, ignore_index=True)
    if args.out is not None:
        write_table(table, args.out)
        print(f"wrote {len(table)} rows to {args.out}")
    return 0


def fallback_summary(shape_ops: int, hw_fallback: str, hw_ops: int) -> str:
    """A design's fallbacks as every command prints them: ``18 shape->dense, 41 hw->dense``
    (ops whose shape cannot take the format stay dense; ops the hardware cannot run go dense
    or CSR), ``-`` for none."""
    parts = []
    if shape_ops:
        parts.append(f"{shape_ops} shape->dense")
    if hw_ops:
        parts.append(f"{hw_ops} hw->{hw_fallback}")
    return ", ".join(parts) or "-"


def _fallbacks(row) -> str:
    return fallback_summary(row.shape_fallback_ops, row.hw_fallback, row.hw_fallback_ops)


def _design_table(table: pd.DataFrame, trace) -> str:
    latency = seconds_column(table["latency_s"], "latency")
    dense = seconds_column(table["dense_latency_s"], "dense")
    shown = pd.DataFrame({
        "hardware": table["hardware"],
        "format": table["format"],
        "batch": table["batch"],
        "fusion": table["fusion"],
        latency[0]: latency[1],
        dense[0]: dense[1],
        "speedup": table["speedup"].map(lambda x: f"{x:.3f}x"),
        "mem-bound ops": [f"{a}/{b}" for a, b in zip(table["memory_bound_ops"], table["ops"],
                                                     strict=True)],
        "feature share": table["feature_bytes_share"].map(share),
        "fallbacks": [_fallbacks(r) for r in table.itertuples()],
    })
    scope = table["scope"].iloc[0]
    header = f"model {trace.model}, scope {scope}: speed-of-light latency (roofline)"
    if table["per_layer_density"].any():
        formats = ", ".join(table.loc[table["per_layer_density"], "format"].unique())
        header += (f"\nper-layer densities from the trace replace the sparsity of {formats} "
                   f"(weight sparsity: "
                   + ", ".join(f"{f} {s:.1%}" for f, s in table.loc[
                       table["per_layer_density"], ["format", "weight_sparsity"]]
                       .drop_duplicates().itertuples(index=False)) + ")")
    return header + "\n" + shown.to_string(index=False)


def _layer_table(table: pd.DataFrame) -> str:
    shown = table[["hardware", "format", "batch", "fusion", "op", "kind", "unit", "fallback",
                   "bound"]].copy()
    for column in ("compute", "memory", "time"):
        name, cells = seconds_column(table[f"{column}_s"], column)
        shown[name] = cells
    shown["fallback"] = shown["fallback"].replace("", missing())
    return shown.to_string(index=False)
