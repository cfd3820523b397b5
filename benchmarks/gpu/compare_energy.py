"""dse's energy model against the GPU's own energy counter: the NVML readings that
``benchmarks/gpu/collect`` (part ``energy``) took on an H100, per call, beside what
``dse.roofline.evaluate_energy`` gives for the same work on the catalog's ``h100-sxm``
(no GPU needed).

    python -m benchmarks.gpu.compare_energy benchmarks/gpu/results/collect \\
        benchmarks/gpu/results/collect-seed1

Compared: the GEMMs (dense on cuBLAS, 2:4 on cuSPARSELt) and the whole models (eager, batch
128). dse prices dynamic energy only on the H100 (the catalog has no static power), so its
figure is set against the measured *dynamic* energy: the counter's joules per call less the
idle power times the call's time. A reading below 1.5x the idle power is printed but left out
of the summary: its dynamic share is within the idle reading's noise. The vector op and the
convolution rows are left out: the energy table does not keep the norm's width nor the
convolution's geometry, which their traces need. The whole models are priced as their traces
stand (attention as exported); the measured eager 2:4 models ran torch's math attention path
(:mod:`workloads.backend`) and a semi-structured path that takes 3-6x the dense time.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from dse.cli.parser import Parser

#: A reading's power must be at least this multiple of the idle power for its dynamic share
#: to count in the summary.
CLEAR_OF_IDLE = 1.5


def _gemm_trace(m: int, k: int, n: int):
    import workloads

    return workloads.Trace.from_records("gemm", [1], [{
        "name": "mm", "kind": "linear", "m": m, "k": k, "n": n, "groups": 1,
        "weight_elems": m * k, "input_elems": k * n, "output_elems": m * n,
        "vector_flops": 0.0, "prunable": True, "producers": ["input"]}])


def dse_energy(row) -> float:
    """dse's energy of one call of the row's work on ``h100-sxm`` (J), fp16."""
    from dse.roofline.energy import evaluate_energy

    fmt = "dense" if row.format == "dense" else str(row.format)
    if row.kind == "gemm":
        trace, batch, scope = _gemm_trace(int(row.m), int(row.k), int(row.n)), 1, "all"
    else:
        trace, batch, scope = str(row.model), int(row.batch), "all"
    table = evaluate_energy(trace, "h100-sxm", [fmt], batches=batch, scope=scope)
    return float(table.loc[table["format"] == fmt, "energy_j"].iloc[0])


def compare(folders: list[Path]) -> pd.DataFrame:
    """One row per measured GEMM and whole model: measured joules per call (all, dynamic),
    dse's, and their ratio."""
    frames = [pd.read_parquet(f / "energy.parquet") for f in folders]
    energy = pd.concat(frames, ignore_index=True)
    energy = energy[(energy["status"] == "ok") & energy["kind"].isin(["gemm", "model"])]
    rows = []
    for row in energy.itertuples(index=False):
        predicted = dse_energy(row)
        # A call whose power is near the idle power leaves a dynamic share inside the idle
        # reading's own noise (it even comes out negative): kept, marked, not summarised.
        clear = row.watts >= CLEAR_OF_IDLE * row.idle_watts
        rows.append({"item": row.item, "kind": row.kind, "format": row.format,
                     "implementation": row.implementation, "run": row.run_id[-28:],
                     "call_ms": 1e3 * row.seconds / row.calls, "watts": row.watts,
                     "measured_j": row.joules_per_call,
                     "measured_dynamic_j": row.dynamic_joules_per_call,
                     "dse_j": predicted,
                     "dse_over_dynamic": predicted / row.dynamic_joules_per_call,
                     "clear_of_idle": bool(clear)})
    return pd.DataFrame(rows)


def build_parser() -> Parser:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="collect --out folders")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    missing = [f for f in args.folders if not (f / "energy.parquet").exists()]
    if missing:
        print(f"compare_energy: {missing[0]}: no energy.parquet (run benchmarks/gpu/collect "
              "with its energy part)", file=sys.stderr)
        return 2
    table = compare(args.folders)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    for (kind, fmt), group in table.groupby(["kind", "format"]):
        ratio = group.loc[group["clear_of_idle"], "dse_over_dynamic"]
        left = len(group) - len(ratio)
        print(f"{kind} {fmt}: dse / measured dynamic energy {ratio.min():.2f}-{ratio.max():.2f}"
              f" (median {ratio.median():.2f}) over {len(ratio)} readings"
              + (f"; {left} below {CLEAR_OF_IDLE:g}x the idle power left out" if left else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
