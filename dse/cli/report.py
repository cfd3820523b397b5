"""`dse report`, `dse compare`, `dse sweep` and `dse study`: reports and sensitivity studies."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from .commands import help_of
from .first_run import evaluation_begins
from .names import DEFAULT_BATCHES, DEFAULT_FORMATS, trace_names
from .options import (
    CALIBRATED_FIX,
    TORCH_NOTE,
    Default,
    Parser,
    add_backend_option,
    add_design_options,
    add_evaluator_options,
    assumptions_line,
    backend_from_args,
    check_outputs,
    design_from_args,
    evaluator_from_args,
    nonempty_text,
    number,
    path_value,
    predictors_from_args,
    set_overrides,
    torch_runs_otherwise,
)
from .progress import StatusLine

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["add_parsers", "write_search_report"]


def add_parsers(commands) -> None:
    rp = commands.add_parser(
        "report", help=help_of("report"),
        description="Evaluate models under formats on one accelerator and write a report folder: "
                    "a self-contained index.html (works offline), PNG and SVG of every chart, "
                    "and the data as CSV. Charts: the Sparsity Roofline (accuracy from the "
                    "accuracy table against speedup), the per-layer roofline, the bound mix by "
                    "format and the feature share of DRAM traffic across the batch sizes; for a "
                    "language model's decode step (--phase decode), also tokens/s against "
                    "batch with each format's memory-fit limit.")
    add_design_options(rp, single=("--fusion",), quantisation=True)
    rp.add_argument("--accuracy-table", type=path_value, metavar="CSV",
                    help="accuracy table (default: the shipped one; for language models the "
                         "shipped table of published figures)")
    rp.add_argument("--out", type=path_value, required=True, metavar="DIR", help="report folder")
    rp.add_argument("--calibrated", type=nonempty_text(CALIBRATED_FIX), metavar="DEVICE",
                    help="draw the expectation beside the bound: expected points on the "
                         "per-layer roofline and an expected curve on the Sparsity Roofline, "
                         "from the kernel predictors of DEVICE (shipped: h100-sxm, "
                         "cpu-amd-epyc-2c; or a file written by dse calibrate --out), with "
                         "the measured kernels of its dataset")
    rp.add_argument("--measured", metavar="DATASET",
                    type=nonempty_text("a shipped dataset or a file written by dse measure"),
                    help="with --calibrated: the measured kernels to draw (a shipped dataset "
                         "or a file written by dse measure; default: the dataset the "
                         "predictors were trained on)")
    rp.set_defaults(run=_cmd_report)

    cp = commands.add_parser(
        "compare", help=help_of("compare"),
        description="Evaluate the same models and formats on several accelerators (catalog "
                    "names or spec files, comma-separated or repeated) and print latency, "
                    "speedup, bound mix and feature share side by side.")
    add_design_options(cp, quantisation=True)
    cp.add_argument("--out", type=path_value, metavar="FILE", help="results .csv/.parquet/.json")
    cp.add_argument("--report", type=path_value, metavar="DIR", help="also write a report folder")
    cp.add_argument("--calibrated", type=nonempty_text(CALIBRATED_FIX), metavar="DEVICE",
                    help="add the expectation beside the bound on every accelerator: "
                         "expected_latency_s, expected_speedup and fraction_of_sol from the "
                         "kernel predictors of DEVICE (shipped: h100-sxm, cpu-amd-epyc-2c; or "
                         "a file written by dse calibrate --out), in the table, --out and the "
                         "--report charts. Kernels one op at a time (unfused) whatever "
                         "--fusion; accelerators other than DEVICE keep its fraction of the "
                         "speed of light. An expectation, not a bound")
    add_backend_option(cp)
    cp.set_defaults(run=_cmd_compare)

    sw = commands.add_parser(
        "sweep", help=help_of("sweep"),
        description="Evaluate every combination of the --vary dimensions. NAME=V1,V2,... or "
                    "NAME=LOW..HIGH:N (N evenly spaced points; add :log for log spacing). "
                    "Names: batch, hw.FIELD (any numeric hardware field, see `dse hw show "
                    "a100`), format.sparsity, format.block.",
        epilog="Example: dse sweep --model convnext_tiny --hw a100 --format 2:4 --vary "
               "batch=1,2,4,8,16,32,64,128,256 --vary hw.dram_bandwidth_bytes_per_s="
               "1e12..8e12:8 --out sweep.parquet")
    add_design_options(sw, quantisation=True)
    sw.add_argument("--vary", action="append", required=True, metavar="NAME=VALUES",
                    type=nonempty_text("a dimension NAME=V1,V2,... or NAME=LOW..HIGH:N"),
                    help="a dimension to sweep; repeatable")
    sw.add_argument("--out", type=path_value, required=True, metavar="FILE",
                    help="results .parquet/.csv/.json (written atomically)")
    sw.add_argument("--report", type=path_value, metavar="DIR", help="also write a report folder")
    add_evaluator_options(sw, workers=True, dask=True)
    sw.add_argument("--calibrated", type=nonempty_text(CALIBRATED_FIX), metavar="DEVICE",
                    help="add the expectation beside the bound on every swept design: "
                         "expected_latency_s, expected_speedup, fraction_of_sol, "
                         "validated_rmspe, predictors and calibration from the kernel "
                         "predictors of DEVICE (shipped: h100-sxm, cpu-amd-epyc-2c; or a file "
                         "written by dse calibrate --out), as dse search --calibrated prices "
                         "them. Kernels one op at a time (unfused) whatever --fusion; hardware "
                         "points other than DEVICE keep its fraction of the speed of light. An "
                         "expectation, not a bound; not with --evaluator simulate")
    sw.set_defaults(run=_cmd_sweep)

    st = commands.add_parser("study", help=help_of("study"),
                             description="Built-in studies, each writing a report folder.")
    studies = st.add_subparsers(dest="study", required=True, parser_class=Parser,
                                metavar="STUDY")
    fo = studies.add_parser(
        "feature-overhead", help="feature share of DRAM traffic and speedup against batch size",
        description="For every shipped model (or --model): the share of DRAM traffic that is "
                    "features against batch size, each format's speedup against batch size, "
                    "the batch at which each format's speedup drops below --threshold, and a "
                    "tornado of how a reference design's speedup responds to each hardware "
                    "field (halved and doubled). Unless --set names sparse_tensor.patterns, "
                    "the sparse tensor core runs every N:M format of the study.")
    add_design_options(
        fo, single=("--hw", "--fusion"),
        models=Default(tuple(n for n in trace_names() if n != "toy_hybrid"),
                       "every shipped model except the toy"),
        hardware=Default(("a100",), "a100"),
        formats=Default(DEFAULT_FORMATS, ", ".join(DEFAULT_FORMATS).replace("%", "%%")),
        batches=Default(DEFAULT_BATCHES, "1, 2, 4, ..., 256"))
    fo.add_argument("--threshold", type=number(0.0, 1000.0, above=True), default=1.1,
                    help="speedup whose crossing is reported (default 1.1)")
    fo.add_argument("--tornado-format", default="2:4", metavar="F",
                    type=nonempty_text("a sparse format, e.g. 2:4"),
                    help="the design the tornado perturbs, at batch 1 (default 2:4)")
    fo.add_argument("--tornado-model", metavar="NAME",
                    type=nonempty_text("a model of the study, e.g. convnext_tiny"),
                    help="the model the tornado perturbs (default convnext_tiny)")
    fo.add_argument("--out", type=path_value, required=True, metavar="DIR", help="report folder")
    fo.set_defaults(run=_cmd_feature_overhead)


# --- commands ---------------------------------------------------------------------------------

def _cmd_report(args: argparse.Namespace) -> int:
    check_outputs(folders=[("--out", args.out)],
                  inputs=[("--accuracy-table", args.accuracy_table, "file")])
    if args.measured and not args.calibrated:
        from ..calibrate.predictor import CalibrationError

        raise CalibrationError("--measured draws measured kernels beside the expectation; "
                               "give --calibrated DEVICE too")
    d = design_from_args(args)
    from reports.design_report import accuracy_table_for, design_report

    from ..calibrate.predictor import CalibrationError
    from .evaluate import check_quantisation

    check_quantisation(args, d)
    predictors = predictors_from_args(args)
    # The inputs design_report reads only once it runs, read first: a bad accuracy table or
    # --measured is refused before the first run's note, not after it.
    table = accuracy_table_for(d.traces, args.accuracy_table)
    if args.measured is not None:
        from ..measure.dataset import load_dataset, shipped_datasets

        if args.measured not in shipped_datasets():
            load_dataset(args.measured)  # the user's file: there and a dataset
    evaluation_begins(args)  # every input checked: the first run's note, if any
    report = design_report(d.traces, d.hardware, d.formats, d.batches, fusion=d.fusions[0],
                           scope=d.scope, numerics=d.numerics,
                           calibrated=predictors, measured=args.measured,
                           accuracy_table=table)
    assumed = assumptions_line(d.hardware_labels, d.numerics, batches=d.batches,
                               fusions=d.fusions[:1], scope=d.scope,
                               fixed=set_overrides(d.overrides))
    # The page says it first too (the Designs table carries the same as columns).
    report = dataclasses.replace(report, intro=(assumed, *report.intro))
    # A language model's expectation: which GEMMs the predictors never timed (issue 24).
    extrapolated = [] if report.expected is None else \
        _extrapolated_notes(d, report.expected, report.predictors)
    report = dataclasses.replace(report, intro=(*report.intro, *extrapolated))
    index = report.write(args.out, command=args.command_line)
    print(assumed)
    decode, several = len(report.decode_fits), len(report.hardware)
    print(f"wrote {index} ({len(report.sections)} charts"
          + (f", 4 for each of {several} accelerators" if several > 1 else "")
          + (f", {decode} of decode tokens/s" if decode else "") + ")")
    for line in report.decode_fits:
        print(line)
    for line in extrapolated:
        print(line)
    measured = report.measured
    if report.predictors is not None:
        print(f"expected: kernel predictors {report.predictors.name}, an expectation, not a "
              "bound" + (f"; measured: {len(measured)} points of dataset {report.dataset}"
                         f" ({measured['match'].iloc[0]})" if measured is not None
                         and len(measured) else ""))
    return 0


def _comparison_text(frame: pd.DataFrame) -> str:
    import pandas as pd

    from .evaluate import fallback_summary
    from .tables import energy_cell, missing

    shown = pd.DataFrame({
        "model": frame["model"], "format": frame["format"], "batch": frame["batch"],
        **({"fusion": frame["fusion"]} if frame["fusion"].nunique() > 1 else {}),
        "hardware": frame["hardware"],
        "latency": frame["latency_s"].map(lambda v: f"{v * 1e3:.4f} ms"),
        "speedup": frame["speedup"].map(lambda v: f"{v:.3f}"),
    })
    if "expected_latency_s" in frame:  # the expectation beside the bound
        shown["expected"] = frame["expected_latency_s"].map(lambda v: f"{v * 1e3:.4f} ms")
        shown["exp. speedup"] = frame["expected_speedup"].map(lambda v: f"{v:.3f}")
        shown["frac of SOL"] = frame["fraction_of_sol"].map(lambda v: f"{v:.2f}")
    # A language model's decode step: its rate (a prefill's latency is its time to first token).
    if "tokens_per_s" in frame and frame["tokens_per_s"].notna().any():
        shown["tokens/s"] = frame["tokens_per_s"].map(
            lambda v: missing() if pd.isna(v) else f"{v:,.1f}")
    shown["bound mix"] = [f"{m}/{n} mem" for m, n in zip(frame["memory_bound_ops"],
                                                         frame["ops"], strict=True)]
    shown["feature share"] = frame["feature_bytes_share"].map(lambda v: f"{v:.1%}")
    shown["fallbacks"] = [fallback_summary(r.shape_fallback_ops, r.hw_fallback,
                                           r.hw_fallback_ops) for r in frame.itertuples()]
    if "energy_per_inference_j" in frame:
        shown["energy/inf"] = frame["energy_per_inference_j"].map(
            lambda v: energy_cell(v * 1e3, "{:.4g} mJ"))
        shown["avg power"] = frame["avg_power_w"].map(lambda v: energy_cell(v, "{:.0f} W"))
        shown["power cap"] = [f"active: {c * 1e3:.4f} ms" if capped else "-" for capped, c in
                              zip(frame["power_capped"], frame["capped_latency_s"], strict=True)]
    if "peak_memory_bytes" in frame:
        shown["peak memory"] = frame["peak_memory_bytes"].map(lambda v: f"{v / 2**30:.3g} GiB")
        shown["fits"] = [missing() if pd.isna(v) else ("yes" if v else "NO")
                         for v in frame["fits"]]
    return shown.to_string(index=False)


def _extrapolated_notes(d, expected: pd.DataFrame, predictors) -> list[str]:
    """Per language-model step, the line saying which of its GEMMs the expectation
    extrapolates (:func:`dse.calibrate.coverage.coverage_note`)."""
    from ..calibrate.coverage import coverage, coverage_note

    return [coverage_note(coverage(expected[expected["model"] == t.model], t, predictors,
                                   d.numerics.dtype), predictors.name, t.model)
            for t in d.traces if t.provenance.get("phase")]


def _cmd_compare(args: argparse.Namespace) -> int:
    check_outputs(files=[("--out", args.out)], folders=[("--report", args.report)])
    d = design_from_args(args)
    from ..comparison import compare
    from ..output import write_table
    from .evaluate import check_quantisation, unfit_at_batch_1
    from .tables import calibration_note, energy_notes

    check_quantisation(args, d)
    backend = backend_from_args(args, d.traces)
    predictors = predictors_from_args(args)
    evaluation_begins(args)  # every input checked: the first run's note, if any
    c = compare(d.traces, d.hardware, d.formats, d.batches, fusion=d.fusions, scope=d.scope,
                numerics=d.numerics, calibrated=predictors, backend=backend)
    frame, expected, predictors = c.frame(), c.expected, c.predictors
    print(assumptions_line(d.hardware_labels, d.numerics, batches=d.batches, fusions=d.fusions,
                           scope=d.scope, fixed=set_overrides(d.overrides)))
    print(_comparison_text(frame))
    for line in unfit_at_batch_1(frame):
        print(line)
    if expected is not None:
        print(calibration_note(expected, predictors))
        for line in _extrapolated_notes(d, expected, predictors):
            print(line)
        if args.backend is None and any(torch_runs_otherwise(t) for t in d.traces):
            print(TORCH_NOTE)
    for line in energy_notes(c.designs):
        print(line)
    if args.out is not None:  # with the number types it priced, as the first line says
        write_table(frame, args.out)
        print(f"wrote {len(frame)} rows to {args.out}")
    if args.report is not None:
        from reports.design_report import comparison_report

        index = comparison_report(c).write(args.report, command=args.command_line)
        print(f"wrote {index}")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    check_outputs(files=[("--out", args.out)], folders=[("--report", args.report)])
    from ..calibrate.coverage import coverage_note
    from ..explore import Calibrated, SweepError, parse_vary, sweep
    from ..explore.sweep import sweep_coverage

    varies = [parse_vary(v) for v in args.vary]
    d = design_from_args(args)  # a bad --hw, --set or --format fails before sweeping
    from ..output import FileSet, write_table
    from .evaluate import check_quantisation
    from .tables import expectation_line, predictors_used

    check_quantisation(args, d)
    evaluator = evaluator_from_args(args)
    predictors = predictors_from_args(args)
    if predictors is not None:
        if evaluator.name == "simulate":
            raise SweepError(f"--calibrated {args.calibrated} prices kernels one op at a time "
                             "beside the bound, --evaluator simulate replaces the bound by "
                             "simulated latencies: give one of them")
        evaluator = Calibrated(predictors)
    evaluation_begins(args)  # every input checked: the first run's note, if any
    frame = sweep(d.traces, d.hardware_names, d.overrides, d.formats, varies, d.batches,
                  fusion=d.fusions, scope=d.scope, numerics=d.numerics,
                  evaluator=evaluator, progress=StatusLine("swept"))
    # What every row assumed: in the file (the sweep's dtype columns, as dse evaluate's and
    # dse compare's files; hardware, batch and fusion are columns already) and on the screen.
    assumed = assumptions_line(
        d.hardware_labels, d.numerics, fusions=d.fusions, scope=d.scope,
        batches=() if any(v.name == "batch" for v in varies) else d.batches,
        fixed=set_overrides(d.overrides), varied=[v.name for v in varies])
    # A language model's expectation: which GEMMs the predictors never timed (issue 24).
    extrapolated = [] if predictors is None else [
        coverage_note(cov, predictors.name, model) for model, cov in sweep_coverage(
            d.traces, d.hardware_names, d.overrides, d.formats, varies, d.batches,
            scope=d.scope, numerics=d.numerics, predictors=predictors).items()]
    # --out and --report are one set (dse.output.FileSet): both complete, or neither there.
    with FileSet() as files:
        write_table(frame, args.out)
        if args.report is not None:
            _sweep_report(files.folder(args.report), frame, varies, predictors,
                          assumed=assumed, command=args.command_line, notes=extrapolated)
    print(assumed)
    print(_sweep_summary(frame, varies))
    if predictors is not None:
        print("\n".join([expectation_line(predictors), *predictors_used(frame, predictors),
                         *extrapolated]))
    print(f"wrote {len(frame)} rows ({len(varies)} varied dimensions) to {args.out}")
    if args.report is not None:
        print(f"wrote {args.report / 'index.html'}")
    return 0


def _sweep_report(folder, frame: pd.DataFrame, varies, predictors, assumed: str = "",
                  command: str | None = None, notes=()) -> None:
    """The sweep's report, written into ``folder``; ``assumed``: what it priced
    (:func:`~dse.cli.options.assumptions_line`), the page's first paragraph; ``notes``: the
    expectation's lines after the predictors' (which GEMMs it extrapolates)."""
    import reports

    from .tables import predictors_used

    beside = "" if predictors is None else \
        f": bound and expected (predictors {predictors.name})"
    sections = []
    if any(v.name == "batch" for v in varies):
        # One hardware point: the feature share does not depend on it, the speedup may.
        first = frame[frame["hardware"] == frame["hardware"].iloc[0]]
        first = first.drop_duplicates(["model", "format", "batch"])
        data = reports.feature_share_data(first)
        sections.append(reports.Section("feature-share", "Feature share and speedup by "
                                        f"batch{beside}",
                                        reports.feature_share_chart(data), data))
    data = reports.hardware_comparison_data(frame)
    sections.append(reports.Section("designs", f"Speedup of every swept design{beside}",
                                    reports.hardware_comparison_chart(data), data))
    tables, intro = [("Sweep", frame)], [assumed] if assumed else []
    if predictors is not None:
        intro += [reports.predictors_text(predictors),
                 *[line.strip() for line in predictors_used(frame, predictors)], *notes]
        tables.append((f"Kernel predictors {predictors.name} and their held-out errors",
                       reports.predictor_table(predictors)))
    reports.write_report(folder, "dse sweep", sections, tables=tables, intro=intro,
                         command=command)


def _sweep_summary(frame: pd.DataFrame, varies) -> str:
    """What a sweep covered and the range of what it found, per model and format."""
    import pandas as pd

    dims = "; ".join(f"{v.name} {len(v.values)} values, {min(v.values):g} to {max(v.values):g}"
                     for v in varies)
    rows = []
    for (model, fmt), group in frame.groupby(["model", "format"], sort=False, observed=True):
        if str(fmt) == "dense":
            continue
        where = [v.column for v in varies if v.column in group.columns]
        row = {"model": model, "format": fmt, "designs": len(group)}
        # The bound's range, and with --calibrated the expectation's beside it.
        for column, tag in (("speedup", ""), ("expected_speedup", "exp. ")):
            if column not in group:
                continue
            worst = group.loc[group[column].idxmin()]
            best = group.loc[group[column].idxmax()]
            row.update({f"{tag}speedup min": f"{worst[column]:.3f}x",
                        f"where ({tag}min)": _at(worst, where),
                        f"{tag}speedup max": f"{best[column]:.3f}x",
                        f"where ({tag}max)": _at(best, where)})
        rows.append(row)
    table = pd.DataFrame(rows).to_string(index=False) if rows else "(dense only)"
    return f"swept {dims}\n{table}" + _fits_summary(frame, varies)


#: Rows of the "largest swept batch that fits" table a sweep prints (all are in its file).
_FITS_SHOWN = 40


def _fits_summary(frame: pd.DataFrame, varies) -> str:
    """The largest swept batch that fits in DRAM, per model, format and hardware point."""
    import pandas as pd

    from .tables import missing

    if "fits" not in frame or frame["fits"].isna().all():
        return ""
    knobs = [v.column for v in varies if v.name.startswith("hw.") and v.column in frame]
    keys = ["model", "format", "hardware", *knobs]
    rows = []
    for key, group in frame.groupby(keys, sort=False, observed=True, dropna=False):
        fits = group["fits"]
        fitting = group[fits.fillna(False).to_numpy(dtype=bool)]
        row = dict(zip(keys, key, strict=True))
        if fits.isna().all():
            largest, peak = "no capacity in the spec", missing()
        elif fitting.empty:
            largest, peak = f"none (from {int(group['batch'].min())})", missing()
        else:
            best = fitting.loc[fitting["batch"].idxmax()]
            largest = (f"{int(best['batch'])} (all swept)" if len(fitting) == len(group)
                       else str(int(best["batch"])))
            peak = f"{best['peak_memory_bytes'] / 2**30:.3g} GiB"
        row.update({"largest batch that fits": largest, "its peak memory": peak})
        rows.append(row)
    table = pd.DataFrame(rows).rename(columns={k: k[5:] for k in knobs})
    more = len(table) - _FITS_SHOWN
    return ("\nlargest swept batch that fits in DRAM (peak memory <= dram_capacity_bytes):\n"
            + table.head(_FITS_SHOWN).to_string(index=False)
            + (f"\n... ({more} more rows: see the fits column of the file)" if more > 0
               else ""))


def _at(row, columns) -> str:
    return ", ".join(f"{c[5:]}={row[c]:g}" if isinstance(row[c], int | float) else
                     f"{c[5:]}={row[c]}" for c in columns) or "-"


def _cmd_feature_overhead(args: argparse.Namespace) -> int:
    check_outputs(folders=[("--out", args.out)])
    d = design_from_args(args)
    import accelerator_models
    import reports

    from ..explore import feature_overhead
    from .tables import missing, share

    _check_tornado(args, d)
    evaluation_begins(args)  # every input checked: the first run's note, if any
    study = feature_overhead(d.traces, d.hardware_names[0], d.overrides, d.formats, d.batches,
                             args.threshold, args.tornado_format,
                             tornado_model=args.tornado_model, fusion=d.fusions[0],
                             scope=d.scope, numerics=d.numerics)
    shares = reports.feature_share_data(study.evaluated)
    model = study.tornado["model"].iloc[0]
    base = study.evaluated[(study.evaluated["model"] == model)
                           & (study.evaluated["format"] == args.tornado_format)
                           & (study.evaluated["batch"] == 1)]
    design = {"hardware": study.evaluated["hardware"].iloc[0], "fusion": d.fusions[0],
              "scope": d.scope}
    if len(base):
        design.update({k: base[k].iloc[0] for k in reports.FALLBACK_FIELDS})
    torn = reports.tornado_data(study.tornado.assign(**design))
    sections = [
        reports.Section("feature-share", "Feature share of DRAM traffic and speedup against "
                        "batch size", reports.feature_share_chart(shares), shares),
        reports.Section("tornado", f"Speedup of {args.tornado_format} on "
                        f"{study.tornado['model'].iloc[0]} at batch 1 with each hardware field "
                        "halved and doubled", reports.tornado_chart(torn), torn),
    ]
    crossover = study.crossover.rename(columns={
        "first_batch_below": f"first batch below {study.threshold:g}x"})
    # The study's overrides: --set's and the sparse tensor core's patterns it adds.
    assumed = assumptions_line(d.hardware_labels, d.numerics, batches=d.batches,
                               fusions=d.fusions[:1], scope=d.scope,
                               fixed=set_overrides(study.overrides))
    index = reports.write_report(args.out, "Feature overhead against batch size", sections,
                                 tables=[("Feature share at batch 1 and 32", study.shares),
                                         (f"Where speedup drops below {study.threshold:g}x",
                                          crossover)],
                                 command=args.command_line,
                                 hardware=[accelerator_models.load(d.hardware_names[0],
                                                                   study.overrides)],
                                 intro=[assumed])
    print(assumed)
    shares_shown = study.shares.copy()
    names = {"feature_share_batch_1": "traffic, batch 1",
             "feature_share_batch_32": "traffic, batch 32",
             "feature_energy_share_batch_1": "energy, batch 1",
             "feature_energy_share_batch_32": "energy, batch 32"}
    for column in names:
        shares_shown[column] = shares_shown[column].map(share)
    print("features' share of DRAM traffic and of energy:")
    print(shares_shown.rename(columns=names).to_string(index=False))
    print()
    shown = crossover.astype(object).where(crossover.notna(), missing())
    shown["speedup_at_smallest_batch"] = crossover["speedup_at_smallest_batch"].map(
        lambda v: f"{v:.3f}x")
    print(shown.rename(columns={"speedup_at_smallest_batch": "speedup at the smallest batch",
                                "largest_batch": "largest batch"}).to_string(index=False))
    print(f"\nwrote {index}")
    return 0


def _check_tornado(args: argparse.Namespace, d) -> None:
    """The tornado's model and format, checked before the study evaluates every model (the
    study itself finds a bad one only after that work)."""
    from formats import parse as parse_format

    from ..roofline import EvaluationError

    parse_format(args.tornado_format)
    models = [t.model for t in d.traces]
    if args.tornado_model is not None and args.tornado_model not in models:
        raise EvaluationError(f"--tornado-model {args.tornado_model}: not among the studied "
                              f"models ({', '.join(models)})")


def write_search_report(folder: Path, results: pd.DataFrame, title: str,
                        command: str | None = None, target=None) -> Path:
    """The report of a search (:func:`reports.design_report.search_report`: its Pareto front
    and its target results) written into ``folder``; ``command`` is recorded on the page."""
    from reports.design_report import search_report

    return search_report(results, title, target).write(folder, command=command)
