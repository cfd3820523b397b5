"""`dse simulate`, and the simulator options that `dse sweep` and `dse search` share."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from .output import StatusLine, format_seconds, write_table

__all__ = ["SIM_OPTIONS", "add_evaluator_options", "add_sim_options", "add_simulate_parser",
           "refuse_unused_sim_options", "sim_config_from_args"]


def _number(text: str) -> float:
    """A float, where ``inf`` means unlimited; the range is checked by SimConfig."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def add_sim_options(p: argparse.ArgumentParser) -> None:
    """The simulator's settings (also used by --evaluator simulate)."""
    g = p.add_argument_group("simulator settings")
    g.add_argument("--buffer", choices=("smem", "l2"),
                   help="on-chip buffer the tiles are sized to: shared memory per SM x SMs "
                        "(smem, default) or the L2, from the hardware spec")
    g.add_argument("--buffer-bytes", type=_number, metavar="BYTES",
                   help="buffer size in bytes instead of the spec's (inf = unlimited)")
    g.add_argument("--depth", type=_integer, metavar="N",
                   help="buffer stages per op: 1 = no overlap inside an op, 2 = double "
                        "buffering (default 2)")
    g.add_argument("--launch-overhead-s", type=_number, metavar="S",
                   help="fixed cost of each kernel (default: the spec's "
                        "kernel_launch_overhead_s, else 3.2e-6, fitted to models measured on an "
                        "H100)")
    g.add_argument("--overlap", choices=("pipelined", "full"),
                   help="pipelined: a tile computes after its load and stores after its "
                        "compute (default); full: compute and memory overlap completely, the "
                        "roofline's assumption")
    g.add_argument("--prefetch-depth", type=_integer, metavar="N",
                   help="with --fusion fused_prefetched, how many ops ahead weights may load "
                        "(default 1: the next op's; 0: none)")


def add_evaluator_options(p: argparse.ArgumentParser, positive_int) -> None:
    """--evaluator roofline|simulate, --workers and the simulator settings."""
    p.add_argument("--evaluator", choices=("roofline", "simulate"), default="roofline",
                   help="roofline: speed of light (default); simulate: the event-level "
                        "simulator (latency, dense latency and speedup become the simulated "
                        "ones; the roofline's stay as roofline_latency_s, roofline_speedup)")
    p.add_argument("--workers", type=positive_int, metavar="N",
                   help="local processes for --evaluator simulate (default 1)")
    add_sim_options(p)


#: SimConfig field -> the option that sets it (None on the command line: not given).
SIM_OPTIONS = {"buffer": "--buffer", "buffer_bytes": "--buffer-bytes", "depth": "--depth",
               "launch_overhead_s": "--launch-overhead-s", "overlap": "--overlap",
               "prefetch_depth": "--prefetch-depth"}


def sim_config_from_args(args: argparse.Namespace):
    """The SimConfig the options give (defaults where not given), checked; errors name the
    option."""
    from .simulate import SimConfig

    given = {f: getattr(args, f) for f in SIM_OPTIONS if getattr(args, f) is not None}
    return SimConfig(**given).check(names=SIM_OPTIONS)


def refuse_unused_sim_options(args: argparse.Namespace) -> None:
    """Simulator options without --evaluator simulate would be silently ignored: refuse them."""
    from .simulate import SimulationError

    if getattr(args, "evaluator", "roofline") == "simulate":
        return
    for field, option in SIM_OPTIONS.items():
        if getattr(args, field) is not None:
            raise SimulationError(f"{option} is a simulator setting; add --evaluator simulate")


def add_simulate_parser(commands, positive_int) -> None:
    sp = commands.add_parser(
        "simulate", help="event-level simulation: tiles, buffers, launch overhead, overlap",
        description="Simulate one design with the SimPy event-level model: every op cut into "
                    "tiles that fit the on-chip buffer, DRAM and the tensor, sparse tensor and "
                    "vector cores as resources, load/compute/store pipelined with double "
                    "buffering, a launch overhead per kernel, fused intermediates kept on chip "
                    "when they fit. Prints latency against the roofline, where the gap comes "
                    "from (launch, buffer-bound, fill/drain) and the ops with the largest gaps.",
        epilog="Example: dse simulate --model convnext_tiny --hw a100 --format 2:4 "
               "--report sim-report. With --buffer-bytes inf --launch-overhead-s 0 "
               "--overlap full it reproduces the roofline.")
    sp.add_argument("--model", required=True, metavar="NAME|PATH",
                    help="shipped trace name or trace .json")
    sp.add_argument("--hw", required=True, metavar="NAME|PATH",
                    help="catalog name or spec .toml")
    sp.add_argument("--set", dest="overrides", action="append", default=[],
                    metavar="FIELD=VALUE", help="override a hardware field (repeatable)")
    sp.add_argument("--format", default="dense", metavar="F",
                    help="sparse format, e.g. 2:4, block16@87.5%% (default dense)")
    sp.add_argument("--batch", type=positive_int, default=1, metavar="B",
                    help="batch size (default 1)")
    sp.add_argument("--fusion", default="unfused",
                    choices=("unfused", "fused", "fused_prefetched"),
                    help="fusion model (default unfused)")
    sp.add_argument("--scope", default="gemm", choices=("gemm", "all"),
                    help="gemm: prunable weight GEMMs only; all: every op (default gemm)")
    add_sim_options(sp)
    sp.add_argument("--top", type=positive_int, default=10, metavar="N",
                    help="ops with the largest gap to print (default 10)")
    sp.add_argument("--out", type=Path, metavar="FILE",
                    help="per-op results .csv/.parquet/.json (written atomically)")
    sp.add_argument("--timeline", type=Path, metavar="FILE",
                    help="every busy interval .csv/.parquet/.json (written atomically)")
    sp.add_argument("--report", type=Path, metavar="DIR",
                    help="a report folder: Gantt chart, utilization over time, gap by cause")
    sp.set_defaults(run=_cmd_simulate)


def _cmd_simulate(args: argparse.Namespace) -> int:
    import accelerator_models
    from formats import parse as parse_format
    from workloads import load_trace

    from .cli_report import check_report_dir
    from .output import check_output_path
    from .simulate import simulate

    config = sim_config_from_args(args)
    for option, path in (("--out", args.out), ("--timeline", args.timeline)):
        if path is not None:
            check_output_path(path, option=option)
    check_report_dir(args.report)
    trace = load_trace(args.model)
    acc = accelerator_models.load(args.hw, args.overrides)
    result = simulate(trace, acc, parse_format(args.format), args.batch, args.fusion,
                      args.scope, config, progress=StatusLine("simulated", "ops"))
    _print_result(result, args.top)
    if args.out is not None:
        write_table(result.ops, args.out)
    if args.timeline is not None:
        write_table(result.timeline, args.timeline)
    if args.report is not None:
        _write_report(result, args.report)
        print(f"report: {args.report / 'index.html'}")
    return 0


def _bytes(value: float) -> str:
    if math.isinf(value):
        return "unlimited"
    if value >= 2**30:
        return f"{value / 2**30:.3g} GiB"
    return f"{value / 2**20:.3g} MiB"


def _clean(seconds: float, scale: float) -> str:
    """Seconds for printing, with floating-point noise (below 1e-9 of ``scale``) shown as 0."""
    return format_seconds(0.0 if abs(seconds) < 1e-9 * scale else seconds)


def _print_result(result, top: int) -> None:
    d = result.design
    s = result.summary()
    scale = s["latency_s"]
    config = result.config
    source = ("--buffer-bytes" if config.buffer_bytes is not None else
              f"{config.buffer} of the spec")
    print(f"{d['model']} on {d['hardware']}, {d['format']}, batch {d['batch']}, "
          f"{d['fusion']}, scope {d['scope']}")
    print(f"buffer {_bytes(result.buffer_bytes)} ({source}), depth {config.depth}, launch "
          f"overhead {format_seconds(result.launch_overhead_s)}, overlap {config.overlap}"
          + (f", prefetch depth {config.prefetch_depth}" if d["fusion"] == "fused_prefetched"
             else ""))
    share = 100.0 * s["gap_share"] if abs(s["gap_share"]) >= 1e-9 else 0.0
    print(f"latency {format_seconds(s['latency_s'])}, roofline "
          f"{format_seconds(s['roofline_latency_s'])}, gap {_clean(s['gap_s'], scale)} "
          f"({share:.1f}% of the latency): launch {_clean(s['gap_launch_s'], scale)}, "
          f"buffer-bound {_clean(s['gap_buffer_s'], scale)}, fill/drain "
          f"{_clean(s['gap_fill_drain_s'], scale)}")
    print(f"{s['kernels']} kernels, {s['tiles']} tiles, DRAM {_bytes(s['dram_bytes'])} "
          f"(roofline {_bytes(s['roofline_dram_bytes'])})")
    busy = ", ".join(f"{r} {100 * s[f'busy_{r}']:.1f}%"
                     for r in ("dram", "tensor", "sparse_tensor", "vector"))
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


def _write_report(result, folder: Path) -> None:
    from reports import (
        gantt_chart,
        gantt_data,
        sim_gap_chart,
        sim_gap_data,
        utilization_chart,
        utilization_data,
    )
    from reports.html import Section, write_report

    d = result.design
    title = (f"Simulation: {d['model']} on {d['hardware']}, {d['format']}, batch {d['batch']}, "
             f"{d['fusion']}")
    s = result.summary()
    intro = (f"Latency {format_seconds(s['latency_s'])} against a roofline of "
             f"{format_seconds(s['roofline_latency_s'])}; buffer {_bytes(result.buffer_bytes)}, "
             f"depth {result.config.depth}, launch overhead "
             f"{format_seconds(result.launch_overhead_s)}, overlap {result.config.overlap}.")
    gantt, util, gap = (gantt_data(result.timeline), utilization_data(result.utilization),
                        sim_gap_data(result.ops))
    sections = [
        Section("timeline", "Timeline (Gantt)", gantt_chart(gantt), gantt, intro),
        Section("utilization", "Utilization over time", utilization_chart(util), util,
                "Busy fraction of each resource per time bin."),
        Section("gap", "Gap to the roofline by cause", sim_gap_chart(gap), gap,
                "Launch overhead, extra traffic from tiles and spills (buffer-bound), and "
                "loads or stores not hidden behind compute (fill/drain)."),
    ]
    write_report(folder, title, sections,
                 tables=[("Summary", pd.DataFrame([s])), ("Ops", result.ops)])
