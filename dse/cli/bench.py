"""`dse bench spmv`: the BeBOP sparse matrix-vector benchmark on the machine at hand."""

from __future__ import annotations

import argparse
import datetime
import io
import platform
import shutil
from pathlib import Path

from ..measure.errors import BenchError
from .commands import help_of
from .options import (
    OptionValueError,
    Parser,
    check_outputs,
    comma_list,
    duration,
    integer,
    path_value,
    seed,
)
from .progress import StatusLine

__all__ = ["add_parsers"]


#: Block edges r and c the register-blocked kernels take.
MAX_BLOCK_EDGE = 64
_BLOCK_LIST = comma_list(f"block edges from 1 to {MAX_BLOCK_EDGE}", "1,2,4")


def _ints(text: str) -> list[int]:
    _BLOCK_LIST(text)  # an empty item (1,,2) is refused as in every list
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or not all(1 <= v <= MAX_BLOCK_EDGE for v in values):
        raise OptionValueError(f"{text!r}: give block edges from 1 to {MAX_BLOCK_EDGE} "
                               "separated by commas, e.g. 1,2,4") from None
    return values


#: The traces whose layers `dse bench spmv-blocks` prunes: convolutions, MLPs and attention.
DEFAULT_BLOCK_MODELS = ("convnext_tiny", "resnet50", "vit_base_patch16_224", "swin_tiny",
                        "efficientnet_b4", "mixer_s16")


def add_parsers(commands) -> None:
    bench = commands.add_parser("bench", help=help_of("bench"),
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
    sp.add_argument("--budget", default="5m", metavar="DURATION", type=duration(),
                    help="time for calibration, compiling and runs, e.g. 90s, 2m, 1h "
                         "(default 5m)")
    sp.add_argument("--out", type=path_value, metavar="DIR",
                    help="output folder (default spmv-YYYYmmdd-HHMMSS): spmv.parquet and "
                         "report/")
    sp.add_argument("--max-dim", type=integer(512, 2**30), metavar="N",
                    help="largest matrix dimension (default: from memory and the cache sizes)")
    sp.add_argument("--blocks", type=_ints, default=[1, 2, 3, 4, 6, 8], metavar="R,R,...",
                    help="block edges r and c to run (default 1,2,3,4,6,8)")
    sp.add_argument("--bandwidth", dest="bandwidths", action="append",
                    type=integer(0, 2**30), metavar="B",
                    help="bandwidth of the banded matrices; repeatable; 0: no banded matrices "
                         "(default 64)")
    sp.add_argument("--seed", type=seed, default=0, help="generator seed (default 0)")
    sp.set_defaults(run=_cmd_spmv)

    bl = benches.add_parser(
        "spmv-blocks", help="per-block SpMV times, the data of the blockwise SpMV estimator",
        description="Time CSR SpMV on BeBOP's synthetic matrices and on pruned weight "
                    "matrices of shipped traces (per-layer and global magnitude, N:M and block "
                    "masks on synthetic weights with log-normal row and column scales), with "
                    "the cycle counter read every 250 nonzeros, so each block's time is "
                    "measured inside the whole product, and a reference product around every "
                    "matrix (how fast the shared machine is at that moment, for drift "
                    "correction). Matrices run in a seeded random order "
                    "until --budget is spent. Writes one Parquet row per measured block (a "
                    "sample of each matrix's blocks) with its matrix's description (enough to "
                    "rebuild it), the plain kernel's time and the instrumented total; "
                    "FILE.json beside it records the host and the command. Train the "
                    "estimator on it with dse calibrate --estimator spmv-cnn.")
    bl.add_argument("--budget", default="5m", metavar="DURATION", type=duration(),
                    help="time for the measurements, e.g. 90s, 5m (default 5m)")
    bl.add_argument("--out", type=path_value, default=Path("spmv-blocks.parquet"), metavar="FILE",
                    help="dataset to write, .parquet (default spmv-blocks.parquet)")
    bl.add_argument("--max-dim", type=integer(512, 2**30), default=2**17, metavar="N",
                    help="largest BeBOP matrix dimension (default 131072: 4.7 M nonzeros, "
                         "past a 32 MiB last-level cache)")
    bl.add_argument("--models", default=",".join(DEFAULT_BLOCK_MODELS), metavar="NAME,...",
                    type=comma_list("shipped trace names", "convnext_tiny,resnet50"),
                    help="shipped traces whose layers give the pruned weight matrices "
                         f"(default {','.join(DEFAULT_BLOCK_MODELS)})")
    bl.add_argument("--repeats", type=integer(3, 10**9), default=9, metavar="R",
                    help="timed products per matrix, each kernel (default 9; medians kept)")
    bl.add_argument("--sample", type=integer(1, 1_000_000), default=256, metavar="B",
                    help="blocks kept per matrix, spread evenly (default 256)")
    bl.add_argument("--seed", type=seed, default=0, help="generator seed (default 0)")
    bl.set_defaults(run=_cmd_spmv_blocks)


#: Seconds of the budget kept for what follows the run: the Parquet file, the report's charts
#: (vl-convert renders each to PNG and SVG) and the imports before planning starts.
AFTER_RUN_S = 10.0


def _cmd_spmv(args: argparse.Namespace) -> int:
    from ..spmv.bench import parse_duration

    budget = parse_duration(args.budget)
    out = args.out or Path(f"spmv-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    check_outputs(folders=[("--out", out)])
    if args.max_dim is not None:
        _check_spmv_dim(args.max_dim)
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
        # The folder was new or empty: whatever is in it now this run wrote (the Parquet file
        # before the report, say). An interrupted or failed run leaves none of it.
        for child in out.iterdir():
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink(missing_ok=True)
        if created:
            out.rmdir()
        raise


def _run_spmv(args: argparse.Namespace, budget: float, out: Path) -> int:
    import reports

    from ..measure.host import cpu_model
    from ..output import write_atomic
    from ..spmv.bench import (
        DEFAULT_BANDWIDTHS,
        format_summary,
        plan_spmv_benchmark,
        run_spmv_plan,
    )

    bandwidths = [b for b in (args.bandwidths or DEFAULT_BANDWIDTHS) if b != 0]
    if any(b < 0 for b in bandwidths):
        raise BenchError(f"--bandwidth {min(bandwidths)}: give 0 (none) or a positive width")
    if budget <= AFTER_RUN_S:
        from ..measure.budget import duration_text

        raise BenchError(f"--budget {duration_text(budget)}: {AFTER_RUN_S:.0f} s of it go to "
                         "writing the results and the report, which leaves nothing to "
                         "measure; give at least 30s")
    plan = plan_spmv_benchmark(budget, max_dim=args.max_dim, seed=args.seed,
                               blocks=args.blocks, bandwidths=bandwidths, reserve_s=AFTER_RUN_S)
    dropped = _dropped(plan.pruning.dropped)
    # Progress in predicted seconds, not matrices: the matrices run smallest first, so a count
    # would promise an end far too soon. The estimate printed is the total the meter counts
    # to; the calibration it follows is already done.
    predicted = plan.costs.groupby("matrix", sort=True)["seconds"].sum().cumsum().to_numpy()
    print(f"estimate: {_estimate_s(predicted)} s of benchmarking for {len(plan.matrices)} of "
          f"{len(plan.space)} matrices, after {plan.calibration.seconds:.0f} s of calibration; "
          f"with {AFTER_RUN_S:.0f} s for writing the results and the report, the run ends "
          f"within the {budget:.0f} s budget" + (f"; pruned: {dropped}" if dropped else ""),
          flush=True)
    meter = StatusLine("benchmarked", "s of the estimate")
    result = run_spmv_plan(plan, progress=lambda done, total: meter(
        round(float(predicted[done - 1])), _estimate_s(predicted)))
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


def _estimate_s(predicted) -> int:
    """Whole seconds of the benchmark's estimate: the header's figure and the progress total."""
    return round(float(predicted[-1])) if len(predicted) else 0


def _check_spmv_dim(max_dim: int) -> None:
    """Refuse, before planning, a --max-dim whose largest matrix cannot fit in memory: planning
    alone works on arrays of its rows, and the run builds it (``PEAK_BYTES_PER_NNZ`` a nonzero
    at the densest rows, in ``MEMORY_SHARE`` of this machine's memory, as the default
    --max-dim is chosen)."""
    from ..measure.host import memory_bytes
    from ..spmv.bench import MEMORY_SHARE, NNZ_PER_ROW, PEAK_BYTES_PER_NNZ

    memory = memory_bytes()
    need = max_dim * max(NNZ_PER_ROW) * PEAK_BYTES_PER_NNZ
    if memory and need > MEMORY_SHARE * memory:
        largest = 512
        while largest * 2 * max(NNZ_PER_ROW) * PEAK_BYTES_PER_NNZ <= MEMORY_SHARE * memory:
            largest *= 2
        raise BenchError(f"--max-dim {max_dim:,}: its largest matrix needs about "
                         f"{need / 2**30:,.1f} GiB, above {MEMORY_SHARE:.0%} of this machine's "
                         f"{memory / 2**30:,.1f} GiB; give at most {largest:,} (or leave it "
                         "out: the default fits this machine)")


def _dropped(dropped) -> str:
    """What pruning dropped, grouped: ``nnz_per_row 33, 28, ...; n 524288, 262144``."""
    groups: dict[str, list[str]] = {}
    for what, _ in dropped:
        key, _, value = what.partition("=")
        groups.setdefault(key, []).append(value)
    return "; ".join(f"{key} {', '.join(values)}" for key, values in groups.items())


def _cmd_spmv_blocks(args: argparse.Namespace) -> int:
    import json

    import workloads

    from ..measure.host import cpu_model, fingerprint
    from ..output import FileSet, write_atomic
    from ..spmv.bench import parse_duration
    from ..spmv.blocks import (
        BLOCK_NNZ,
        pruned_specs,
        run_block_benchmark,
        synthetic_specs,
    )
    budget = parse_duration(args.budget)
    check_outputs(files=[("--out", args.out, (".parquet",))])
    if args.out.with_suffix(".json").is_dir():  # found before the run, not after it
        raise BenchError(f"--out {args.out}: {args.out.with_suffix('.json')}, where its "
                         "provenance goes, is a folder; remove it or choose another --out")
    traces = [workloads.load_trace(name.strip()) for name in args.models.split(",")
              if name.strip()]
    if not traces:
        raise BenchError(f"--models {args.models!r}: no trace name; give shipped traces "
                         "separated by commas, e.g. convnext_tiny,resnet50")
    _check_block_run(traces, args.repeats, budget, args.max_dim)
    specs = [*synthetic_specs(args.max_dim, args.seed), *pruned_specs(traces, args.seed)]
    print(f"{len(specs)} matrices to measure within {budget:.0f} s (random order)", flush=True)
    meter = StatusLine("measured", "matrices")
    data = run_block_benchmark(specs, budget, repeats=args.repeats, sample=args.sample,
                               seed=args.seed, progress=meter)
    frame = data.frame()

    def write(handle) -> None:
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        handle.write(buffer.getvalue())

    sidecar = args.out.with_suffix(".json")
    provenance = {
        "command": args.command_line, "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "host": f"{cpu_model()} ({platform.machine()})", "fingerprint": fingerprint(),
        "matrices": int(len(data.matrices)), "skipped": int(data.skipped),
        "blocks": int(len(data.blocks)), "block_nnz": BLOCK_NNZ, "repeats": args.repeats,
        "tsc_hz": float(data.matrices["tsc_hz"].median()),
        "instrumented_over_plain": float((data.matrices["instrumented_s"]
                                          / data.matrices["spmv_s"]).median()),
        "reference_p90_over_p10": float(data.matrices["reference_s"].quantile(0.9)
                                        / data.matrices["reference_s"].quantile(0.1)),
    }
    with FileSet():  # the dataset and its provenance: both, or neither
        write_atomic(args.out, write)
        write_atomic(sidecar, lambda h: h.write((json.dumps(provenance, indent=1) + "\n"
                                                  ).encode()))
    by_source = data.matrices.groupby("source").size().to_dict()
    sources = ", ".join(f"{v} {k}" for k, v in by_source.items())
    print(f"measured {len(data.matrices)} matrices ({sources}), "
          f"{data.skipped} left when the budget ran out; the instrumented kernel takes "
          f"{provenance['instrumented_over_plain']:.2f}x the plain one (median); the machine's "
          f"speed (a reference product around every matrix) varied "
          f"{provenance['reference_p90_over_p10']:.2f}x (p90 / p10)")
    print(f"wrote {args.out} ({len(frame)} blocks) and {sidecar}")
    return 0


#: Share of this machine's memory the block benchmark may plan to take.
BLOCK_MEMORY_SHARE = 0.5


def _check_block_run(traces, repeats: int, budget_s: float, max_dim: int) -> None:
    """Estimate, before any matrix is planned or built, the memory and time of the largest
    matrix the run may draw, and refuse with the estimate when it cannot fit: BeBOP's largest
    has the largest power-of-two dimension up to ``max_dim`` and 34 nonzeros a row, a pruned
    one at most ``m x k`` of a trace's layer (``pruned_specs`` keeps those up to 2**22);
    ``measure_matrix`` keeps a ``repeats x blocks`` array of block times (8 bytes each) beside
    the matrix (its CSR, the instrumented copy and temporaries: ``PEAK_BYTES_PER_NNZ`` a
    nonzero), and each of its ``repeats`` plain samples lasts at least ``MIN_SAMPLE_S``; the
    budget is looked at only between matrices, so one matrix must fit in it."""
    import math

    from ..measure.host import memory_bytes
    from ..output import format_seconds
    from ..spmv.bench import PEAK_BYTES_PER_NNZ
    from ..spmv.blocks import BLOCK_NNZ, MIN_SAMPLE_S

    largest_n = 512 * 2 ** max(0, int(math.log2(max_dim / 512)))
    layers = [int(o.m) * int(o.k) for t in traces for o in t.ops.itertuples()
              if o.prunable and o.groups == 1 and int(o.m) * int(o.k) <= 2**22]
    nnz = max(largest_n * 34, *layers)
    blocks = math.ceil(nnz / BLOCK_NNZ)
    need = nnz * PEAK_BYTES_PER_NNZ + repeats * blocks * 8
    memory = memory_bytes()
    have = BLOCK_MEMORY_SHARE * memory if memory else None
    seconds = repeats * MIN_SAMPLE_S
    problems = []
    if have is not None and need > have:
        problems.append(f"its largest matrix ({nnz:,} nonzeros, {blocks:,} blocks) needs "
                        f"{need / 2**30:,.1f} GiB, above half of this machine's "
                        f"{memory / 2**30:,.1f} GiB")
    if seconds > budget_s:
        problems.append(f"each matrix takes at least {format_seconds(seconds)} ({repeats:,} "
                        f"products of at least {format_seconds(MIN_SAMPLE_S)}), beyond the "
                        f"{format_seconds(budget_s)} budget")
    if problems:
        fits = int(budget_s / MIN_SAMPLE_S)
        if have is not None:
            fits = min(fits, int(max(0.0, have - nnz * PEAK_BYTES_PER_NNZ) / (blocks * 8)))
        hint = (f"give --repeats of at most {fits:,}" if fits >= 3 else
                f"give a --max-dim below {max_dim:,}")
        raise BenchError(f"--repeats {repeats:,} --max-dim {max_dim:,}: {'; '.join(problems)}; "
                         f"{hint}")
