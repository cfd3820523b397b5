"""`dse bench spmv`: the BeBOP sparse matrix-vector benchmark on the machine at hand."""

from __future__ import annotations

import argparse
import datetime
import io
import platform
from pathlib import Path

from ..measure.errors import BenchError
from ..output import check_report_dir, write_atomic
from .options import Parser
from .progress import StatusLine

__all__ = ["add_parsers"]


def _ints(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers separated by commas, "
                                         "e.g. 1,2,4") from None


def add_parsers(commands) -> None:
    bench = commands.add_parser("bench", help="benchmarks of real kernels on this machine",
                                description="Benchmarks of real kernels on the machine at hand "
                                            "(measurements, not bounds).")
    benches = bench.add_subparsers(dest="bench", required=True, parser_class=Parser,
                                   metavar="BENCHMARK")
    sp = benches.add_parser(
        "spmv", help="the BeBOP sparse matrix-vector benchmark: CSR and register-blocked BCSR",
        description="Sparse matrix-vector multiply on synthetic matrices generated on the fly "
                    "(2^9 rows up to what memory allows, 24-34 nonzeros a row, dense r x c "
                    "blocks, random and banded), CSR and register-blocked r x c BCSR kernels "
                    "(numba), each checked against scipy. A calibration prices the space and "
                    "prunes it to the budget the BeBOP way (fewer nonzeros-per-row values "
                    "first, then the largest dimensions); the estimate is printed before the "
                    "run, which ends within the budget. Writes OUT/spmv.parquet and a report "
                    "(the register-blocking profile and MFLOP/s against matrix size).",
        epilog="Method: Gahvari, Hoemmen, Demmel and Yelick, 'Benchmarking sparse matrix-vector "
               "multiply in five minutes' (2007).")
    sp.add_argument("--budget", default="5m", metavar="DURATION",
                    help="time for calibration, compiling and runs, e.g. 90s, 2m, 1h "
                         "(default 5m)")
    sp.add_argument("--out", type=Path, metavar="DIR",
                    help="output folder (default spmv-YYYYmmdd-HHMMSS): spmv.parquet and "
                         "report/")
    sp.add_argument("--max-dim", type=int, metavar="N",
                    help="largest matrix dimension (default: from memory and the cache sizes)")
    sp.add_argument("--blocks", type=_ints, default=[1, 2, 3, 4, 6, 8], metavar="R,R,...",
                    help="block edges r and c to run (default 1,2,3,4,6,8)")
    sp.add_argument("--bandwidth", dest="bandwidths", action="append", type=int, metavar="B",
                    help="bandwidth of the banded matrices; repeatable; 0: no banded matrices "
                         "(default 64)")
    sp.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    sp.set_defaults(run=_cmd_spmv)


#: Seconds of the budget kept for what follows the run: the Parquet file, the report's charts
#: (vl-convert renders each to PNG and SVG) and the imports before planning starts.
AFTER_RUN_S = 10.0


def _cmd_spmv(args: argparse.Namespace) -> int:
    from ..measure.spmv_bench import parse_duration

    budget = parse_duration(args.budget)
    out = args.out or Path(f"spmv-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    check_report_dir(out, option="--out")
    if out.exists() and any(out.iterdir()):
        raise BenchError(f"--out {out}: folder is not empty; give a new folder")
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BenchError(f"--out {out}: cannot create it ({exc.strerror or exc}); give a "
                         "writable folder") from None
    try:
        return _run_spmv(args, budget, out)
    except BaseException:
        if created and not any(out.iterdir()):
            out.rmdir()  # nothing half-written left behind
        raise


def _run_spmv(args: argparse.Namespace, budget: float, out: Path) -> int:
    import reports

    from ..measure.host import cpu_model
    from ..measure.spmv_bench import (
        DEFAULT_BANDWIDTHS,
        format_summary,
        plan_spmv_benchmark,
        run_spmv_plan,
    )

    bandwidths = [b for b in (args.bandwidths or DEFAULT_BANDWIDTHS) if b != 0]
    if any(b < 0 for b in bandwidths):
        raise BenchError(f"--bandwidth {min(bandwidths)}: give 0 (none) or a positive width")
    if budget <= AFTER_RUN_S:
        raise BenchError(f"--budget {args.budget}: {AFTER_RUN_S:.0f} s of it go to writing the "
                         "results and the report; give at least 30s")
    plan = plan_spmv_benchmark(budget - AFTER_RUN_S, max_dim=args.max_dim, seed=args.seed,
                               blocks=args.blocks, bandwidths=bandwidths)
    dropped = _dropped(plan.pruning.dropped)
    print(f"estimate: {plan.predicted_s:.0f} s for {len(plan.matrices)} of {len(plan.space)} "
          f"matrices (budget {budget:.0f} s, {AFTER_RUN_S:.0f} s of it kept for the report)"
          + (f"; pruned: {dropped}" if dropped else ""),
          flush=True)
    # Progress in predicted seconds, not matrices: the matrices run smallest first, so a count
    # would promise an end far too soon.
    predicted = plan.costs.groupby("matrix", sort=True)["seconds"].sum().cumsum().to_numpy()
    meter = StatusLine("benchmarked", "s of the estimate")
    result = run_spmv_plan(plan, progress=lambda done, total: meter(
        round(float(predicted[done - 1])), round(float(predicted[-1]))))
    machine = f"{cpu_model()} ({platform.machine()})"
    parquet = out / "spmv.parquet"

    def write(handle) -> None:
        buffer = io.BytesIO()
        result.frame.to_parquet(buffer, index=False)
        handle.write(buffer.getvalue())

    write_atomic(parquet, write)
    profile = reports.spmv_profile_data(result.frame, machine=machine)
    sizes = reports.spmv_size_data(result.frame, plan.cache_sizes, machine=machine)
    summary = result.summary()
    sections = [
        reports.Section("profile", "Register-blocking profile",
                        reports.spmv_profile_chart(profile), profile,
                        "Median MFLOP/s of the r x c BCSR kernel on matrices of dense r x c "
                        "blocks, with its speedup over 1x1."),
        reports.Section("sizes", "MFLOP/s against matrix size",
                        reports.spmv_size_chart(sizes), sizes,
                        "Each run, the medians per kernel, and the cache sizes marked."),
    ]
    index = reports.write_report(out / "report", "dse bench spmv", sections,
                                 tables=[("Runs", result.frame)])
    print(format_summary(summary, machine))
    print(f"wrote {parquet} ({len(result.frame)} rows) and {index}")
    return 0


def _dropped(dropped) -> str:
    """What pruning dropped, grouped: ``nnz_per_row 33, 28, ...; n 524288, 262144``."""
    groups: dict[str, list[str]] = {}
    for what, _ in dropped:
        key, _, value = what.partition("=")
        groups.setdefault(key, []).append(value)
    return "; ".join(f"{key} {', '.join(values)}" for key, values in groups.items())
