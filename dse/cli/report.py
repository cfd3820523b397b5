"""`dse report`, `dse compare`, `dse sweep` and `dse study`: reports and sensitivity studies."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd

from workloads import trace_names

from ..accuracy import DEFAULT_TABLE, attach_accuracy, load_accuracy_table
from ..calibrate.expected import expected_designs
from ..calibrate.predictor import CalibrationError
from ..explore import Calibrated, SweepError, feature_overhead, parse_vary, sweep
from ..explore.studies import DEFAULT_BATCHES, DEFAULT_FORMATS
from ..measure.dataset import concat, load_dataset
from ..measure.errors import DatasetError
from ..output import write_table
from ..roofline import (
    evaluate,
    evaluate_layers,
)
from .evaluate import (
    check_quantisation,
    fallback_summary,
    language_model_columns,
    with_energy_and_memory,
)
from .options import (
    CALIBRATED_FIX,
    Default,
    Parser,
    add_design_options,
    add_evaluator_options,
    check_outputs,
    design_from_args,
    evaluator_from_args,
    expected_ops,
    nonempty_text,
    number,
    path_value,
    predictors_from_args,
)
from .progress import StatusLine
from .tables import calibration_note, expectation_line, missing, predictors_used, share

__all__ = ["add_parsers", "write_search_report"]


def add_parsers(commands) -> None:
    rp = commands.add_parser(
        "report", help="an HTML report: Sparsity Roofline, roofline, bound mix, feature share",
        description="Evaluate models under formats on one accelerator and write a report folder: "
                    "a self-contained index.html (works offline), PNG and SVG of every chart, "
                    "and the data as CSV. Charts: the Sparsity Roofline (accuracy from the "
                    "accuracy table against speedup), the per-layer roofline, the bound mix by "
                    "format and the feature share of DRAM traffic across the batch sizes; for a "
                    "language model's decode step (--phase decode), also tokens/s against "
                    "batch with each format's memory-fit limit.")
    add_design_options(rp, single=("--fusion",), quantisation=True)
    rp.add_argument("--accuracy-table", type=path_value, metavar="CSV",
                    help="accuracy table (default: the shipped one)")
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
        "compare", help="real and hypothetical GPUs side by side",
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

    st = commands.add_parser("study", help="built-in sensitivity studies",
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
    import reports

    check_outputs(folders=[("--out", args.out)],
                  inputs=[("--accuracy-table", args.accuracy_table, "file")])
    if args.measured and not args.calibrated:
        raise CalibrationError("--measured draws measured kernels beside the expectation; "
                               "give --calibrated DEVICE too")
    d = design_from_args(args)
    check_quantisation(args, d)
    predictors = predictors_from_args(args)
    dataset_name, dataset = _measured_dataset(args.measured, predictors)
    table = load_accuracy_table(args.accuracy_table or DEFAULT_TABLE)  # before any work
    fusion = d.fusions[0]
    frames, expected = [], []
    for t in d.traces:
        frame = evaluate(t, d.hardware, d.formats, d.batches, fusion=fusion, scope=d.scope,
                         numerics=d.numerics)
        if predictors is not None:
            exp = expected_ops(t, d, predictors)
            frame = expected_designs(frame, exp)
            expected.append(exp)
        frames.append(frame)
    decode = _decode_sections(d, frames)
    evaluated = pd.concat(frames, ignore_index=True)
    expected = pd.concat(expected, ignore_index=True) if expected else None
    # Every accelerator of --hw gets its four charts (names suffixed by the accelerator
    # where there are several); every requested batch is charted on each.
    sections, measured = [], None
    for hw in d.hardware:
        charts, drawn = _hardware_sections(hw, d, evaluated, expected, table, predictors,
                                           dataset, dataset_name, several=len(d.hardware) > 1)
        sections += charts
        measured = drawn if measured is None else measured
    sections += [section for section, _ in decode]
    tables, intro = [("Designs", evaluated)], []
    if predictors is not None:
        intro = reports.calibration_text(predictors, expected, measured, dataset_name)
        if dataset_name is not None and dataset is None:
            intro.append(f"Measured points: none (dataset {dataset_name} of the predictors "
                         "cannot be found here; give one with --measured).")
        tables += _calibration_tables(predictors, expected)
    index = reports.write_report(args.out, "dse report", sections, tables=tables,
                                 command=args.command_line, hardware=d.hardware, intro=intro)
    print(f"wrote {index} ({len(sections)} charts"
          + (f", 4 for each of {len(d.hardware)} accelerators" if len(d.hardware) > 1 else "")
          + (f", {len(decode)} of decode tokens/s" if decode else "") + ")")
    for _, line in decode:
        print(line)
    if predictors is not None:
        print(f"expected: kernel predictors {predictors.name}, an expectation, not a bound"
              + (f"; measured: {len(measured)} points of dataset {dataset_name}"
                 f" ({measured['match'].iloc[0]})" if measured is not None and len(measured)
                 else ""))
    return 0


def _decode_sections(d, frames: list[pd.DataFrame]) -> list[tuple]:
    """For each decode trace and accelerator: the chart of tokens/s against batch with the
    memory-fit limits (``reports.decode_chart``), and the line the command prints of it."""
    import reports

    out = []
    several = len(d.hardware) > 1 or sum(
        t.provenance.get("phase") == "decode" for t in d.traces) > 1
    for trace, frame in zip(d.traces, frames, strict=True):
        if trace.provenance.get("phase") != "decode":
            continue
        table = language_model_columns(with_energy_and_memory(frame, trace, d), trace,
                                       d.numerics.value_bytes, d.numerics.kv_value_bytes)
        table = table.assign(weight_dtype=d.numerics.weight_label,
                             kv_dtype=d.numerics.kv_dtype or d.numerics.dtype)
        for hw in d.hardware:
            data = reports.decode_data(table[table["hardware"] == hw.name])
            name = f"decode-{_slug(trace.model)}-{_slug(hw.name)}" if several else "decode"
            title = (f"Decode tokens/s against batch, {trace.provenance['config']} on "
                     f"{hw.name} at context {trace.provenance['context']:,}")
            limits = data.drop_duplicates("series")
            fit = "; ".join(f"{r.series} " + (missing() if pd.isna(r.largest_batch_that_fits)
                                               else f"{int(r.largest_batch_that_fits):,}")
                            for r in limits.itertuples())
            out.append((reports.Section(name, title, reports.decode_chart(data), data),
                        f"{name}: largest batch that fits in DRAM (speed-of-light tokens/s "
                        f"drawn against batch): {fit}"))
    return out


def _slug(name: str) -> str:
    """An accelerator's name as a section name (``[a-z0-9][a-z0-9_-]*``)."""
    slug = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-_")
    return slug[:40] or "hw"


def _hardware_sections(hw, d, evaluated, expected, table, predictors, dataset, dataset_name,
                       several: bool):
    """The report's four charts on one accelerator (Sparsity Roofline, per-layer roofline,
    bound mix, feature share) and the measured points drawn on it."""
    import reports

    fusion, batches = d.fusions[0], ", ".join(map(str, d.batches))
    exp_hw = None if expected is None else \
        expected[expected["hardware"] == hw.name].reset_index(drop=True)
    layers = pd.concat([evaluate_layers(t, hw, d.formats, d.batches, fusion=fusion,
                                        scope=d.scope, numerics=d.numerics) for t in d.traces],
                       ignore_index=True)
    on_hw = evaluated[evaluated["hardware"] == hw.name]
    with_accuracy = attach_accuracy(on_hw.copy(), table)
    roof = pd.concat([reports.sparsity_roofline_data(
        with_accuracy[with_accuracy["batch"] == b],
        None if exp_hw is None else exp_hw[exp_hw["batch"] == b])
        for b in d.batches], ignore_index=True)
    measured = None if dataset is None else reports.measured_data(
        dataset, layers, d.traces, name=dataset_name)
    per_layer = reports.roofline_data(layers, hw, d.numerics, expected=exp_hw,
                                      measured=measured)
    mix = pd.concat([reports.bound_mix_data(layers[layers["batch"] == b]) for b in d.batches],
                    ignore_index=True)
    shares = reports.feature_share_data(on_hw)
    where = f"on {hw.name}"
    beside = roof_beside = ""
    if predictors is not None:
        roof_beside = f": bound and expected (predictors {predictors.name})"
        beside = (f": bound, expected (predictors {predictors.name})"
                  + (f" and measured (dataset {dataset_name})" if measured is not None else ""))
    lacking = [t.model for t in d.traces if t.model not in set(roof["model"])]
    suffix = f"-{_slug(hw.name)}" if several else ""
    return [
        reports.Section(f"sparsity-roofline{suffix}",
                        f"Sparsity Roofline {where}, batch {batches}{roof_beside}",
                        reports.sparsity_roofline_chart(roof), roof,
                        note=f"Not drawn: {', '.join(lacking)} (no accuracy in the accuracy "
                             "table; give one with --accuracy-table)" if lacking else ""),
        reports.Section(f"roofline{suffix}",
                        f"Per-layer roofline {where}, batch {batches}{beside}",
                        reports.roofline_chart(per_layer), per_layer),
        reports.Section(f"bound-mix{suffix}", f"Memory- and compute-bound share of time by "
                        f"format {where}, batch {batches}", reports.bound_mix_chart(mix), mix),
        reports.Section(f"feature-share{suffix}", f"Feature share of DRAM traffic and speedup "
                        f"by batch {where}", reports.feature_share_chart(shares), shares),
    ], measured


def _calibration_tables(predictors, expected: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The tables a calibrated report adds: the predictors with their held-out errors, and
    the ops priced without their family's kernel data (when there are any)."""
    import reports

    tables = [(f"Kernel predictors {predictors.name} and their held-out errors",
               reports.predictor_table(predictors, expected))]
    fallbacks = reports.calibration_fallbacks(expected)
    if len(fallbacks):
        tables.append(("Expected: ops priced without their family's kernel data", fallbacks))
    return tables


def _measured_dataset(name: str | None, predictors) -> tuple[str | None, pd.DataFrame | None]:
    """The measured kernels to draw: ``--measured`` (its errors are the user's), else the
    dataset the predictors were trained on, when it can be loaded here."""
    if predictors is None:
        return None, None
    if name:
        return name, load_dataset(name)
    name = predictors.provenance.get("dataset") or None
    if name is None:
        return None, None
    try:  # predictors trained on several datasets name them "a, b"
        frames = [load_dataset(part.strip()) for part in str(name).split(",")]
    except DatasetError:
        return name, None
    return name, frames[0] if len(frames) == 1 else concat(frames)


def _comparison_text(frame: pd.DataFrame) -> str:
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
    shown["bound mix"] = [f"{m}/{n} mem" for m, n in zip(frame["memory_bound_ops"],
                                                         frame["ops"], strict=True)]
    shown["feature share"] = frame["feature_bytes_share"].map(lambda v: f"{v:.1%}")
    shown["fallbacks"] = [fallback_summary(r.shape_fallback_ops, r.hw_fallback,
                                           r.hw_fallback_ops) for r in frame.itertuples()]
    if "energy_per_inference_j" in frame:
        shown["energy/inf"] = frame["energy_per_inference_j"].map(lambda v: f"{v * 1e3:.4g} mJ")
        shown["avg power"] = frame["avg_power_w"].map(lambda v: f"{v:.0f} W")
        shown["power cap"] = [f"active: {c * 1e3:.4f} ms" if capped else "-" for capped, c in
                              zip(frame["power_capped"], frame["capped_latency_s"], strict=True)]
    if "peak_memory_bytes" in frame:
        shown["peak memory"] = frame["peak_memory_bytes"].map(lambda v: f"{v / 2**30:.3g} GiB")
        shown["fits"] = [missing() if pd.isna(v) else ("yes" if v else "NO")
                         for v in frame["fits"]]
    return shown.to_string(index=False)


#: What a calibrated report's energy chart says of itself: energy has no expected counterpart.
_ENERGY_IS_THE_BOUNDS = ("Energy comes from the bound (the speed-of-light latency and its "
                         "traffic); the kernel predictors price time only, so this chart has no "
                         "expected series.")


def _cmd_compare(args: argparse.Namespace) -> int:
    check_outputs(files=[("--out", args.out)], folders=[("--report", args.report)])
    d = design_from_args(args)
    check_quantisation(args, d)
    predictors = predictors_from_args(args)
    frames, expected = [], []
    for t in d.traces:
        frame = evaluate(t, d.hardware, d.formats, d.batches, fusion=d.fusions, scope=d.scope,
                         numerics=d.numerics)
        if predictors is not None:
            expected.append(expected_ops(t, d, predictors))
            frame = expected_designs(frame, expected[-1])
        frames.append(with_energy_and_memory(frame, t, d))
    frame = pd.concat(frames, ignore_index=True)
    frame = frame.sort_values(["model", "batch", "format", "hardware"], kind="stable")
    expected = pd.concat(expected, ignore_index=True) if expected else None
    print(_comparison_text(frame))
    if expected is not None:
        print(calibration_note(expected, predictors))
    unpriced = sorted({g.strip() for gaps in frame["energy_unpriced"]
                       for g in str(gaps).split(";") if g.strip()})
    if unpriced:
        print("energy leaves out what the spec has no figure for (a lower bound there): "
              + ", ".join(unpriced))
    if args.out is not None:
        write_table(frame, args.out)
        print(f"wrote {len(frame)} rows to {args.out}")
    if args.report is not None:
        import reports

        data = reports.hardware_comparison_data(frame)
        beside = "" if predictors is None else \
            f": bound and expected (predictors {predictors.name})"
        sections = [reports.Section("hardware-comparison",
                                    f"Latency and speedup by accelerator{beside}",
                                    reports.hardware_comparison_chart(data), data)]
        for (model, fusion), rows in frame.groupby(["model", "fusion"], sort=False):
            energy = reports.energy_breakdown_data(rows)
            name = "energy" + ("" if len(d.traces) * len(d.fusions) == 1
                               else f"-{model}-{fusion}")
            sections.append(reports.Section(
                name, f"Energy per inference by unit and traffic class, {model}, {fusion}",
                reports.energy_breakdown_chart(energy), energy,
                note=_ENERGY_IS_THE_BOUNDS if predictors is not None else ""))
        tables, intro = [("Designs", frame)], []
        if predictors is not None:
            intro = reports.calibration_text(predictors, expected, marked=None,
                                             draws_measured=False)
            tables += _calibration_tables(predictors, expected)
        index = reports.write_report(args.report, "dse compare", sections, tables=tables,
                                     command=args.command_line, hardware=d.hardware,
                                     intro=intro)
        print(f"wrote {index}")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    check_outputs(files=[("--out", args.out)], folders=[("--report", args.report)])
    varies = [parse_vary(v) for v in args.vary]
    d = design_from_args(args)  # a bad --hw, --set or --format fails before sweeping
    check_quantisation(args, d)
    evaluator = evaluator_from_args(args)
    predictors = predictors_from_args(args)
    if predictors is not None:
        if evaluator.name == "simulate":
            raise SweepError(f"--calibrated {args.calibrated} prices kernels one op at a time "
                             "beside the bound, --evaluator simulate replaces the bound by "
                             "simulated latencies: give one of them")
        evaluator = Calibrated(predictors)
    frame = sweep(d.traces, d.hardware_names, d.overrides, d.formats, varies, d.batches,
                  fusion=d.fusions, scope=d.scope, numerics=d.numerics,
                  evaluator=evaluator, progress=StatusLine("swept"))
    write_table(frame, args.out)
    print(_sweep_summary(frame, varies))
    if predictors is not None:
        print("\n".join([expectation_line(predictors), *predictors_used(frame, predictors)]))
    print(f"wrote {len(frame)} rows ({len(varies)} varied dimensions) to {args.out}")
    if args.report is not None:
        import reports

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
        tables, intro = [("Sweep", frame)], []
        if predictors is not None:
            intro = [reports.predictors_text(predictors),
                     *[line.strip() for line in predictors_used(frame, predictors)]]
            tables.append((f"Kernel predictors {predictors.name} and their held-out errors",
                           reports.predictor_table(predictors)))
        index = reports.write_report(args.report, "dse sweep", sections, tables=tables,
                                     intro=intro)
        print(f"wrote {index}")
    return 0


def _sweep_summary(frame: pd.DataFrame, varies) -> str:
    """What a sweep covered and the range of what it found, per model and format."""
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
    import accelerator_models
    import reports

    check_outputs(folders=[("--out", args.out)])
    d = design_from_args(args)
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
    index = reports.write_report(args.out, "Feature overhead against batch size", sections,
                                 tables=[("Feature share at batch 1 and 32", study.shares),
                                         (f"Where speedup drops below {study.threshold:g}x",
                                          crossover)],
                                 command=args.command_line,
                                 hardware=[accelerator_models.load(d.hardware_names[0],
                                                                   study.overrides)])
    print(f"hardware: {d.hardware_names[0]}"
          + (f" with {'; '.join(study.overrides)}" if study.overrides else ""))
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


def write_search_report(folder: Path, results: pd.DataFrame, title: str,
                        command: str | None = None, target=None) -> Path:
    """The report of a search: its Pareto front and its target results (``target``: the
    search's :class:`search.target.Target`, drawn as the chart's edges); ``command`` is
    recorded on the page. A calibrated search's charts draw the expectation it ranked by
    beside the bound."""
    import reports

    beside = ": bound and expected" if "expected_speedup" in results.columns else ""
    pareto = reports.pareto_data(results)
    sections = [reports.Section("pareto", f"Accuracy against speedup, Pareto front{beside}",
                                reports.pareto_chart(pareto), pareto)]
    if "speedup_over_baseline" in results.columns:
        data = reports.target_data(results)
        chart = (reports.target_chart(data) if target is None else
                 reports.target_chart(data, target.ratio, target.max_acc_drop, target.text))
        sections.append(reports.Section("target", "Speedup over the baseline against accuracy "
                                        f"drop{beside}", chart, data))
    return reports.write_report(folder, title, sections, command=command)
