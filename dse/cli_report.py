"""`dse report`, `dse compare`, `dse sweep` and `dse study`: reports and sensitivity studies."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from .cli_simulate import (
    add_evaluator_options,
    refuse_unused_sim_options,
    sim_config_from_args,
)
from .output import OutputError
from .sim_fanout import LOCAL
from .simulate import SimulationError

__all__ = ["add_report_parsers", "check_report_dir", "write_search_report"]


def _models_hw_formats(p: argparse.ArgumentParser, hw_help: str) -> None:
    p.add_argument("--model", dest="models", action="append", required=True,
                   metavar="NAME|PATH", help="shipped trace or trace .json; repeatable")
    p.add_argument("--hw", dest="hardware", action="append", required=True, metavar="NAME|PATH",
                   help=hw_help)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a hardware field on every --hw (repeatable)")
    p.add_argument("--format", dest="formats", action="append", required=True, metavar="F",
                   help="sparse format, e.g. 2:4, block16@87.5%%; repeatable")
    p.add_argument("--batch", dest="batches", action="append", type=int, metavar="B",
                   help="batch size; repeatable (default 1)")
    p.add_argument("--fusion", default="unfused", choices=("unfused", "fused",
                                                            "fused_prefetched"))
    p.add_argument("--scope", default="gemm", choices=("gemm", "all"))


def add_report_parsers(commands, parser_class, positive_int) -> None:
    rp = commands.add_parser(
        "report", help="an HTML report: Sparsity Roofline, roofline, bound mix, feature share",
        description="Evaluate models under formats on one accelerator and write a report folder: "
                    "a self-contained index.html (works offline), PNG and SVG of every chart, "
                    "and the data as CSV. Charts: the Sparsity Roofline (accuracy from the "
                    "accuracy table against speedup), the per-layer roofline, the bound mix by "
                    "format and the feature share of DRAM traffic across the batch sizes.")
    _models_hw_formats(rp, "catalog name or spec .toml (the first is drawn in the roofline)")
    rp.add_argument("--accuracy-table", type=Path, metavar="CSV",
                    help="accuracy table (default: the shipped one)")
    rp.add_argument("--out", type=Path, required=True, metavar="DIR", help="report folder")
    rp.set_defaults(run=_cmd_report)

    cp = commands.add_parser(
        "compare", help="real and hypothetical GPUs side by side",
        description="Evaluate the same models and formats on several accelerators (catalog "
                    "names or spec files, comma-separated or repeated) and print latency, "
                    "speedup, bound mix and feature share side by side.")
    _models_hw_formats(cp, "comma-separated and/or repeated, e.g. a100,h100,my_gpu.toml")
    cp.add_argument("--out", type=Path, metavar="FILE", help="results .csv/.parquet/.json")
    cp.add_argument("--report", type=Path, metavar="DIR", help="also write a report folder")
    cp.set_defaults(run=_cmd_compare)

    sw = commands.add_parser(
        "sweep", help="vary hardware fields, batch size or format parameters",
        description="Evaluate every combination of the --vary dimensions. NAME=V1,V2,... or "
                    "NAME=LOW..HIGH:N (N evenly spaced points; add :log for log spacing). "
                    "Names: batch, hw.FIELD (any numeric hardware field, see `dse hw show "
                    "a100`), format.sparsity, format.block.",
        epilog="Example: dse sweep --model convnext_tiny --hw a100 --format 2:4 --vary "
               "batch=1,2,4,8,16,32,64,128,256 --vary hw.dram_bandwidth_bytes_per_s="
               "1e12..8e12:8 --out sweep.parquet")
    _models_hw_formats(sw, "catalog name or spec .toml; repeatable")
    sw.add_argument("--vary", action="append", required=True, metavar="NAME=VALUES",
                    help="a dimension to sweep; repeatable")
    sw.add_argument("--out", type=Path, required=True, metavar="FILE",
                    help="results .parquet/.csv/.json (written atomically)")
    sw.add_argument("--report", type=Path, metavar="DIR", help="also write a report folder")
    add_evaluator_options(sw, positive_int)
    sw.add_argument("--dask", nargs="?", const=LOCAL, metavar="tcp://HOST:PORT",
                    help="with --evaluator simulate: run the simulations on a Dask cluster; "
                         "alone, a LocalCluster of --workers processes (at least 2)")
    sw.set_defaults(run=_cmd_sweep)

    st = commands.add_parser("study", help="built-in sensitivity studies",
                             description="Built-in studies, each writing a report folder.")
    studies = st.add_subparsers(dest="study", required=True, parser_class=parser_class,
                                metavar="STUDY")
    fo = studies.add_parser(
        "feature-overhead", help="feature share of DRAM traffic and speedup against batch size",
        description="For every shipped model (or --model): the share of DRAM traffic that is "
                    "features against batch size, each format's speedup against batch size, "
                    "the batch at which each format's speedup drops below --threshold, and a "
                    "tornado of how a reference design's speedup responds to each hardware "
                    "field (halved and doubled). Unless --set names sparse_tensor.patterns, "
                    "the sparse tensor core runs every N:M format of the study.")
    fo.add_argument("--model", dest="models", action="append", metavar="NAME",
                    help="default: every shipped model except the toy")
    fo.add_argument("--hw", default="a100", metavar="NAME|PATH")
    fo.add_argument("--set", dest="overrides", action="append", default=[],
                    metavar="FIELD=VALUE")
    fo.add_argument("--format", dest="formats", action="append", metavar="F",
                    help="default: 2:4, 1:4, block16@87.5%%, unstructured@87.5%%")
    fo.add_argument("--batch", dest="batches", action="append", type=positive_int,
                    metavar="B", help="default 1, 2, 4, ..., 256")
    fo.add_argument("--threshold", type=float, default=1.1,
                    help="speedup whose crossing is reported (default 1.1)")
    fo.add_argument("--tornado-format", default="2:4", metavar="F",
                    help="the design the tornado perturbs, at batch 1 (default 2:4)")
    fo.add_argument("--tornado-model", metavar="NAME",
                    help="the model the tornado perturbs (default convnext_tiny)")
    fo.add_argument("--out", type=Path, required=True, metavar="DIR", help="report folder")
    fo.set_defaults(run=_cmd_feature_overhead)


# --- helpers ----------------------------------------------------------------------------------

def _split_hw(values: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(h.strip() for v in values for h in v.split(",") if h.strip()))


def _batches(args) -> list[int]:
    from dse.evaluator import EvaluationError

    batches = args.batches or [1]
    for b in batches:
        if b < 1:
            raise EvaluationError(f"--batch {b}: batch sizes are whole numbers >= 1")
    return batches


def check_report_dir(path: Path | None) -> None:
    """Fail before any work when a report folder cannot be written."""
    if path is None:
        return
    if path.exists() and not path.is_dir():
        raise OutputError(f"{path}: is a file, not a report folder")
    parent = path if path.exists() else path.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: folder {parent} is missing or not writable; create it or "
                          "choose another")


def _with_accuracy(evaluated: pd.DataFrame, table_path: Path | None) -> pd.DataFrame:
    from search import DEFAULT_TABLE, load_accuracy_table

    table = load_accuracy_table(table_path or DEFAULT_TABLE)
    out = evaluated.copy()
    values = {}
    for model, fmt in {(str(m), str(f)) for m, f in zip(out["model"], out["format"],
                                                         strict=True)}:
        try:
            values[(model, fmt)] = table.lookup(model, fmt).value
        except ValueError:
            values[(model, fmt)] = float("nan")
    out["accuracy"] = [values[(str(m), str(f))] for m, f in zip(out["model"], out["format"],
                                                               strict=True)]
    return out


# --- commands ---------------------------------------------------------------------------------

def _cmd_report(args: argparse.Namespace) -> int:
    import accelerator_models
    import reports
    from dse import evaluate, evaluate_layers
    from workloads import load_trace

    check_report_dir(args.out)
    traces = [load_trace(m) for m in dict.fromkeys(args.models)]
    hardware = [accelerator_models.load(h, args.overrides) for h in _split_hw(args.hardware)]
    batches = _batches(args)
    evaluated = pd.concat([evaluate(t, hardware, args.formats, batches, fusion=args.fusion,
                                    scope=args.scope) for t in traces], ignore_index=True)
    layers = pd.concat([evaluate_layers(t, hardware[0], args.formats, batches[0],
                                        fusion=args.fusion, scope=args.scope) for t in traces],
                       ignore_index=True)
    first = evaluated[(evaluated["hardware"] == hardware[0].name)
                      & (evaluated["batch"] == batches[0])]
    roof = reports.sparsity_roofline_data(_with_accuracy(first, args.accuracy_table))
    per_layer = reports.roofline_data(layers, hardware[0])
    mix = reports.bound_mix_data(layers)
    shares = reports.feature_share_data(evaluated[evaluated["hardware"] == hardware[0].name])
    sections = [
        reports.Section("sparsity-roofline", f"Sparsity Roofline on {hardware[0].name}, batch "
                        f"{batches[0]}", reports.sparsity_roofline_chart(roof), roof),
        reports.Section("roofline", f"Per-layer roofline on {hardware[0].name}",
                        reports.roofline_chart(per_layer), per_layer),
        reports.Section("bound-mix", "Memory- and compute-bound ops by format",
                        reports.bound_mix_chart(mix), mix),
        reports.Section("feature-share", "Feature share of DRAM traffic and speedup by batch",
                        reports.feature_share_chart(shares), shares),
    ]
    index = reports.write_report(args.out, "dse report", sections,
                                 tables=[("Designs", evaluated)])
    print(f"wrote {index} ({len(sections)} charts)")
    return 0


def _comparison_text(frame: pd.DataFrame) -> str:
    shown = pd.DataFrame({
        "model": frame["model"], "format": frame["format"], "batch": frame["batch"],
        "hardware": frame["hardware"],
        "latency": frame["latency_s"].map(lambda v: f"{v * 1e3:.4f} ms"),
        "speedup": frame["speedup"].map(lambda v: f"{v:.3f}"),
        "bound mix": [f"{m}/{n} mem" for m, n in zip(frame["memory_bound_ops"], frame["ops"],
                                                      strict=True)],
        "feature share": frame["feature_bytes_share"].map(lambda v: f"{v:.1%}"),
    })
    return shown.to_string(index=False)


def _cmd_compare(args: argparse.Namespace) -> int:
    import accelerator_models
    from dse import evaluate
    from dse.output import check_output_path, write_table
    from workloads import load_trace

    if args.out is not None:
        check_output_path(args.out)
    check_report_dir(args.report)
    traces = [load_trace(m) for m in dict.fromkeys(args.models)]
    hardware = [accelerator_models.load(h, args.overrides) for h in _split_hw(args.hardware)]
    frame = pd.concat([evaluate(t, hardware, args.formats, _batches(args), fusion=args.fusion,
                                scope=args.scope) for t in traces], ignore_index=True)
    frame = frame.sort_values(["model", "batch", "format", "hardware"], kind="stable")
    print(_comparison_text(frame))
    if args.out is not None:
        write_table(frame, args.out)
        print(f"wrote {len(frame)} rows to {args.out}")
    if args.report is not None:
        import reports

        data = reports.hardware_comparison_data(frame)
        index = reports.write_report(args.report, "dse compare", [reports.Section(
            "hardware-comparison", "Speedup by accelerator",
            reports.hardware_comparison_chart(data), data)], tables=[("Designs", frame)])
        print(f"wrote {index}")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    import accelerator_models  # noqa: F401 - fail on a bad --hw before sweeping
    from dse.output import check_output_path, write_table
    from dse.sweep import parse_vary, sweep
    from workloads import load_trace

    check_output_path(args.out)
    check_report_dir(args.report)
    varies = [parse_vary(v) for v in args.vary]
    traces = [load_trace(m) for m in dict.fromkeys(args.models)]
    simulate = args.evaluator == "simulate"
    refuse_unused_sim_options(args)
    for option, value in (("--dask", args.dask), ("--workers", args.workers)):
        if value is not None and not simulate:
            raise SimulationError(f"{option} runs simulations; add --evaluator simulate")
    workers = args.workers or 1
    if args.dask == LOCAL:
        workers = max(workers, 2)
    frame = sweep(traces, _split_hw(args.hardware), args.overrides, args.formats, varies,
                  _batches(args), fusion=(args.fusion,), scope=args.scope,
                  evaluator=args.evaluator,
                  sim_config=sim_config_from_args(args) if simulate else None,
                  workers=workers, dask=args.dask)
    write_table(frame, args.out)
    print(f"wrote {len(frame)} rows ({len(varies)} varied dimensions) to {args.out}")
    if args.report is not None:
        import reports

        sections = []
        if any(v.name == "batch" for v in varies):
            # One hardware point: the feature share does not depend on it, the speedup may.
            first = frame[frame["hardware"] == frame["hardware"].iloc[0]]
            first = first.drop_duplicates(["model", "format", "batch"])
            data = reports.feature_share_data(first)
            sections.append(reports.Section("feature-share", "Feature share and speedup by "
                                            "batch", reports.feature_share_chart(data), data))
        data = reports.hardware_comparison_data(frame)
        sections.append(reports.Section("designs", "Speedup of every swept design",
                                        reports.hardware_comparison_chart(data), data))
        index = reports.write_report(args.report, "dse sweep", sections,
                                     tables=[("Sweep", frame)])
        print(f"wrote {index}")
    return 0


def _cmd_feature_overhead(args: argparse.Namespace) -> int:
    import reports
    from dse.studies import DEFAULT_BATCHES, DEFAULT_FORMATS, feature_overhead
    from workloads import load_trace, trace_names

    check_report_dir(args.out)
    names = args.models or [n for n in trace_names() if n != "toy_hybrid"]
    traces = [load_trace(n) for n in dict.fromkeys(names)]
    study = feature_overhead(traces, args.hw, args.overrides,
                             args.formats or DEFAULT_FORMATS, args.batches or DEFAULT_BATCHES,
                             args.threshold, args.tornado_format,
                             tornado_model=args.tornado_model)
    shares = reports.feature_share_data(study.evaluated)
    torn = reports.tornado_data(study.tornado)
    sections = [
        reports.Section("feature-share", "Feature share of DRAM traffic and speedup against "
                        "batch size", reports.feature_share_chart(shares), shares),
        reports.Section("tornado", f"Speedup of {args.tornado_format} on "
                        f"{study.tornado['model'].iloc[0]} at batch 1 with each hardware field "
                        "halved and doubled", reports.tornado_chart(torn), torn),
    ]
    crossover = study.crossover.rename(columns={
        "first_batch_below": f"first batch below {study.threshold:g}x"})
    index = reports.write_report(args.out, "Feature overhead against batch size", sections,
                                 tables=[("Feature share at batch 1 and 32", study.shares),
                                         (f"Where speedup drops below {study.threshold:g}x",
                                          crossover)])
    print(f"hardware: {args.hw}" + (f" with {'; '.join(study.overrides)}" if study.overrides
                                     else ""))
    print(study.shares.to_string(index=False))
    print()
    print(crossover.to_string(index=False))
    print(f"\nwrote {index}")
    return 0


def write_search_report(folder: Path, results: pd.DataFrame, title: str) -> Path:
    """The report of a search: its Pareto front and its target results."""
    import reports

    pareto = reports.pareto_data(results)
    sections = [reports.Section("pareto", "Accuracy against speedup, Pareto front",
                                reports.pareto_chart(pareto), pareto)]
    if "speedup_over_baseline" in results.columns:
        target = reports.target_data(results)
        sections.append(reports.Section("target", "Speedup over the baseline against accuracy "
                                        "drop", reports.target_chart(target), target))
    return reports.write_report(folder, title, sections)
