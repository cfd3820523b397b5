"""`dse simulate`: one design through the event-level simulator."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

from .commands import help_of
from .first_run import evaluation_begins
from .options import (
    CALIBRATED_FIX,
    Default,
    add_design_options,
    add_sim_options,
    check_outputs,
    design_from_args,
    dtypes_text,
    integer,
    nonempty_text,
    path_value,
    predictors_from_args,
    sim_config_from_args,
    with_dtype_columns,
)
from .progress import StatusLine

if TYPE_CHECKING:
    from ..api import CalibratedSimulation

__all__ = ["add_parsers"]


def add_parsers(commands) -> None:
    sp = commands.add_parser(
        "simulate", help=help_of("simulate"),
        description="Simulate one design with the SimPy event-level model: every op cut into "
                    "tiles that fit the on-chip buffer, DRAM and the tensor, sparse tensor and "
                    "vector cores as resources, load/compute/store pipelined with double "
                    "buffering, a launch overhead per kernel, fused intermediates kept on chip "
                    "when they fit. Prints latency against the roofline, where the gap comes "
                    "from (launch, buffer-bound, fill/drain) and the ops with the largest gaps.",
        epilog="Example: dse simulate --model convnext_tiny --hw a100 --format 2:4 "
               "--report sim-report. With --buffer-bytes inf --launch-overhead-s 0 "
               "--overlap full it reproduces the roofline.")
    add_design_options(sp, single=("--model", "--hw", "--format", "--batch", "--fusion"),
                       formats=Default(("dense",), "dense"), quantisation=True)
    add_sim_options(sp)
    sp.add_argument("--top", type=integer(1, 1_000_000), default=10, metavar="N",
                    help="ops with the largest gap to print (default 10)")
    sp.add_argument("--out", type=path_value, metavar="FILE",
                    help="per-op results .csv/.parquet/.json (written atomically)")
    sp.add_argument("--timeline", type=path_value, metavar="FILE",
                    help="every busy interval .csv/.parquet/.json (written atomically)")
    sp.add_argument("--report", type=path_value, metavar="DIR",
                    help="a report folder: Gantt chart, utilization over time, gap by cause")
    sp.add_argument("--calibrated", type=nonempty_text(CALIBRATED_FIX), metavar="DEVICE",
                    help="run each op at the kernel time the predictors of DEVICE expect "
                         "(shipped: h100-sxm, cpu-amd-epyc-2c; or a file written by dse "
                         "calibrate --out) instead of at peak: its compute is stretched so that "
                         "launch plus compute takes the predicted time (never shortened); "
                         "traffic and tiles stay. The latency is then an expectation, not a "
                         "bound; prints which predictor priced each op family. Kernels are "
                         "predicted one op at a time, so --fusion must be unfused")
    sp.set_defaults(run=_cmd_simulate)


def _cmd_simulate(args: argparse.Namespace) -> int:
    config = sim_config_from_args(args)
    check_outputs(files=[("--out", args.out), ("--timeline", args.timeline)],
                  folders=[("--report", args.report)])
    d = design_from_args(args)
    from ..api import CalibratedSimulation, simulate
    from ..output import FileSet, write_table
    from ..sim import SimulationError
    from .evaluate import check_quantisation

    check_quantisation(args, d)
    if args.calibrated is not None and d.fusions[0] != "unfused":
        raise SimulationError(f"--calibrated with --fusion {d.fusions[0]}: kernel predictors "
                              "price kernels one op at a time; use --fusion unfused (the "
                              "default)")
    predictors = predictors_from_args(args)
    evaluation_begins(args)  # every input checked: the first run's note, if any
    result = simulate(d.trace, d.accelerator, d.formats[0], d.batches[0], d.fusions[0],
                      d.scope, config, d.numerics, progress=StatusLine("simulated", "ops"),
                      calibrated=predictors)
    if isinstance(result, CalibratedSimulation):
        print(_calibration_note(result))
    _print_result(result, args.top, d.numerics)
    if d.trace.provenance.get("phase"):
        print(_language_model_line(result, d))
    with FileSet():  # --out and --timeline: both written, or neither
        if args.out is not None:  # with the number types it priced, as the first line says
            write_table(with_dtype_columns(result.ops, d.numerics,
                                           bool(d.trace.provenance.get("phase"))), args.out)
        if args.timeline is not None:
            write_table(result.timeline, args.timeline)
    if args.report is not None:
        _write_report(result, args.report, args.command_line, d.accelerator,
                      result.predictors.name if isinstance(result, CalibratedSimulation)
                      else None)
        print(f"report: {args.report / 'index.html'}")
    return 0


def _language_model_line(result, d) -> str:
    """A language-model step's rate from the simulated latency (decode: tokens/s over the
    batch; prefill: the time to first token), beside the roofline's, and its memory fit as
    ``dse evaluate`` gives it (:func:`dse.design_columns.with_language_model_columns`)."""
    import pandas as pd

    from ..design_columns import with_energy_and_memory, with_language_model_columns
    from ..output import format_seconds
    from ..roofline import evaluate
    from .evaluate import unfit_at_batch_1

    design, s = result.design, result.summary()
    fmt, batch = design["format"], int(design["batch"])
    args = ([d.accelerator], [fmt], [batch], [design["fusion"]], design["scope"], d.numerics)
    table = evaluate(d.trace, [d.accelerator], [fmt], [batch], fusion=[design["fusion"]],
                     scope=design["scope"], numerics=d.numerics)
    table = with_energy_and_memory(table, d.trace, *args)
    table = with_language_model_columns(table, d.trace, d.numerics)
    row = table[table["format"].astype(str) == str(fmt)].iloc[0]
    p = d.trace.provenance
    what = "expected" if result.kernel_times else "simulated"
    if p["phase"] == "decode":
        rate = (f"decode at context {p['context']:,}: {batch / s['latency_s']:,.1f} tokens/s "
                f"{what} (batch {batch} over {format_seconds(s['latency_s'])} a step; roofline "
                f"{batch / s['roofline_latency_s']:,.1f})")
    else:
        rate = (f"prefill of {p['context']:,} tokens: time to first token "
                f"{format_seconds(s['latency_s'])} {what} (roofline "
                f"{format_seconds(s['roofline_latency_s'])})")
    known = not pd.isna(row["fits"])
    fits = "capacity unknown" if not known else ("fits" if bool(row["fits"]) else
                                                 "does NOT fit")
    largest = f" (largest batch {int(row['largest_batch_that_fits']):,})" if known else ""
    return (f"language model {p['config']}, {rate}; KV cache {row['kv_cache_bytes'] / 1e9:.3g} GB "
            f"({int(row['kv_bytes_per_token']):,} bytes a token), {p['params']:,} parameters; "
            f"peak memory {row['peak_memory_bytes'] / 2**30:.3g} GiB, {fits}{largest}"
            + "".join("\n" + line for line in unfit_at_batch_1(table)))


def _bytes(value: float) -> str:
    if math.isinf(value):
        return "unlimited"
    if value >= 2**30:
        return f"{value / 2**30:.3g} GiB"
    return f"{value / 2**20:.3g} MiB"


def _clean(seconds: float, scale: float) -> str:
    """Seconds for printing, with floating-point noise (below 1e-9 of ``scale``) shown as 0."""
    from ..output import format_seconds

    return format_seconds(0.0 if abs(seconds) < 1e-9 * scale else seconds)


def _fallback_line(result) -> str:
    """``fallbacks: 41 hw->dense of 53 ops: ...``: the ops that do not run the format's own
    kernel, why (shape or hardware) and how (dense or CSR); ``fallbacks: none``."""
    from .evaluate import fallback_summary

    s = result.summary()
    text = fallback_summary(s.get("shape_fallback_ops", 0), s.get("hw_fallback", ""),
                            s.get("hw_fallback_ops", 0))
    if text == "-":
        return "fallbacks: none"
    ops = len(result.ops)
    how = "dense or as CSR"
    if not s.get("shape_fallback_ops"):
        how = "as CSR" if s.get("hw_fallback") == "csr" else "dense"
    elif not s.get("hw_fallback_ops") or s.get("hw_fallback") == "dense":
        how = "dense"
    return (f"fallbacks: {text} of {ops} ops: those ops run {how}, not as "
            f"{result.design['format']}")


def _calibration_note(result: CalibratedSimulation) -> str:
    """What the calibrated simulation is, and which predictor priced each op family (op kinds
    and formats' kernels) with its held-out error and how ops without data were priced."""
    from ..output import format_seconds
    from .tables import predictor_error

    priced, predictors = result.expected, result.predictors
    lines = [f"calibrated: each op runs at the kernel time the {predictors.name} predictors "
             f"expect (kernels measured one op at a time on {predictors.name}, reference "
             f"{predictors.reference_hw}) instead of at peak; the latency below is an "
             f"expectation, not a bound. Sum of the predicted kernel times: "
             f"{format_seconds(result.expected_kernel_s)} (as dse evaluate "
             "--calibrated); the simulation adds what overlap, tiles and launches change."]
    used = priced[priced["expected_s"] > 0]
    for (family, name), group in used.groupby(["family", "predictor"], sort=True):
        kinds = ", ".join(sorted(group["kind"].unique()))
        err = predictor_error(name, group["validated_rmspe"].iloc[0])
        lines.append(f"  {family}: {len(group)} ops ({kinds}) priced by {name}, {err}; "
                     f"{format_seconds(float(group['expected_s'].sum()))} predicted")
    notes = sorted({n for note in used["calibration"] for n in note.split("; ") if n})
    lines += [f"  note: {n}" for n in notes]
    return "\n".join(lines)


def _print_result(result, top: int, numerics) -> None:
    import pandas as pd

    from ..output import format_seconds

    d = result.design
    s = result.summary()
    scale = s["latency_s"]
    config = result.config
    source = ("--buffer-bytes" if config.buffer_bytes is not None else
              f"{config.buffer} of the spec")
    print(f"{d['model']} on {d['hardware']}, {d['format']}, batch {d['batch']}, "
          f"{d['fusion']}, scope {d['scope']}, {dtypes_text(numerics)}")
    print(f"buffer {_bytes(result.buffer_bytes)} ({source}), depth {config.depth}, launch "
          f"overhead {format_seconds(result.launch_overhead_s)}, overlap {config.overlap}"
          + (f", prefetch depth {config.prefetch_depth}" if d["fusion"] == "fused_prefetched"
             else ""))
    share = 100.0 * s["gap_share"] if abs(s["gap_share"]) >= 1e-9 else 0.0
    kernel = (f", kernels below peak {_clean(s['gap_kernel_s'], scale)}"
              if "gap_kernel_s" in s else "")
    print(f"{'expected latency' if result.kernel_times else 'latency'} "
          f"{format_seconds(s['latency_s'])}, roofline "
          f"{format_seconds(s['roofline_latency_s'])}, gap {_clean(s['gap_s'], scale)} "
          f"({share:.1f}% of the latency): launch {_clean(s['gap_launch_s'], scale)}, "
          f"buffer-bound {_clean(s['gap_buffer_s'], scale)}{kernel}, fill/drain "
          f"{_clean(s['gap_fill_drain_s'], scale)}")
    print(f"{s['kernels']} kernels, {s['tiles']} tiles, DRAM {_bytes(s['dram_bytes'])} "
          f"(roofline {_bytes(s['roofline_dram_bytes'])})")
    print(_fallback_line(result))
    words = {"dram": "DRAM", "tensor": "tensor core", "sparse_tensor": "sparse tensor core",
             "vector": "vector cores"}
    busy = ", ".join(f"{words[r]} {100 * s[f'busy_{r}']:.1f}%" for r in words)
    print(f"busy: {busy}")
    print(f"{s['events']} events simulated in {result.wall_s:.3f} s")
    ops = result.ops.nlargest(top, "gap_s")
    if len(ops):
        table = pd.DataFrame({
            "op": ops["op"], "tiles": ops["tiles"],
            "latency": ops["latency_s"].map(format_seconds),
            "roofline": ops["roofline_s"].map(format_seconds),
            "gap": ops["gap_s"].map(lambda g: _clean(g, scale)),
            "why": ops["why"].replace("", "-"),
        })
        print(f"\nlargest gaps to the roofline (top {len(ops)}):")
        print(table.to_string(index=False))


def _write_report(result, folder: Path, command: str | None = None, hardware=None,
                  expected_by: str | None = None) -> None:
    """The simulation's report; ``expected_by``: the predictor set whose kernel times the
    ops ran at (``--calibrated``), named on the page and the gap chart."""
    import pandas as pd

    from reports import (
        gantt_chart,
        gantt_data,
        sim_gap_chart,
        sim_gap_data,
        utilization_chart,
        utilization_data,
    )
    from reports.html import Section, write_report

    from ..output import format_seconds

    d = result.design
    title = (f"Simulation: {d['model']} on {d['hardware']}, {d['format']}, batch {d['batch']}, "
             f"{d['fusion']}, {d['scope']} scope")
    s = result.summary()
    fallback = _fallback_line(result)
    what = "Latency" if expected_by is None else (
        f"Expected latency (each op at the kernel time the {expected_by} predictors expect: "
        "an expectation, not a bound)")
    intro = (f"{what} {format_seconds(s['latency_s'])} against a roofline of "
             f"{format_seconds(s['roofline_latency_s'])}; buffer {_bytes(result.buffer_bytes)}, "
             f"depth {result.config.depth}, launch overhead "
             f"{format_seconds(result.launch_overhead_s)}, overlap {result.config.overlap}; "
             f"{fallback}.")
    # The design's fallback fields ride on every chart's frame, so each chart names them.
    marks = {k: s[k] for k in ("shape_fallback_ops", "hw_fallback", "hw_fallback_ops")
             if k in s}
    ops = result.ops if expected_by is None else result.ops.assign(expected_by=expected_by)
    gantt, util, gap = (gantt_data(result.timeline).assign(**marks),
                        utilization_data(result.utilization).assign(**marks),
                        sim_gap_data(ops).assign(**marks))
    causes = ("Launch overhead, extra traffic from tiles and spills (buffer-bound), and "
              "loads or stores not hidden behind compute (fill/drain).")
    if expected_by is not None:
        causes = (causes[:-1] + "; kernel: what the kernels the predictors expect add over "
                  "running at peak. Black dots: each op's predicted kernel time over the "
                  "roofline, the expectation alone.")
    sections = [
        Section("timeline", "Timeline (Gantt)", gantt_chart(gantt), gantt, intro),
        Section("utilization", "Utilization over time", utilization_chart(util), util,
                "Busy fraction of each resource per time bin."),
        Section("gap", "Gap to the roofline by cause", sim_gap_chart(gap), gap, causes),
    ]
    write_report(folder, title, sections,
                 tables=[("Summary", pd.DataFrame([s])), ("Ops", result.ops)],
                 command=command, hardware=[hardware] if hardware is not None else ())
