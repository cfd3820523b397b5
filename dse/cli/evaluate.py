"""`dse evaluate`: speed-of-light latency and speedup of formats on hardware."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from formats import GRAMMAR_HELP

from .commands import help_of
from .first_run import evaluation_begins
from .names import llm_names, trace_names
from .options import (
    CALIBRATED_FIX,
    TORCH_NOTE,
    Default,
    InputError,
    add_backend_option,
    add_design_options,
    assumed_dtypes,
    backend_from_args,
    check_outputs,
    design_from_args,
    dtypes_text,
    nonempty_text,
    path_value,
    predictors_from_args,
    torch_runs_otherwise,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["add_parsers", "check_quantisation", "fallback_summary", "language_model_columns"]


def add_parsers(commands) -> None:
    ev = commands.add_parser(
        "evaluate", help=help_of("evaluate"),
        description="Evaluate a model trace under sparse formats on one or more accelerators "
                    "with the roofline (speed-of-light) model, and print latency, dense "
                    "latency, speedup, bound mix, feature share of DRAM traffic and fallbacks.",
        epilog=f"Format grammar: {GRAMMAR_HELP}. Shipped models: {', '.join(trace_names())}; "
               f"language models (with --phase and --context): {', '.join(llm_names())}.")
    add_design_options(ev, formats=Default(("dense",), "dense alone"), quantisation=True)
    ev.add_argument("--per-layer", action="store_true",
                    help="print (and write with --out) one row per op and design")
    ev.add_argument("--out", type=path_value, metavar="FILE",
                    help="write results to FILE.csv, FILE.parquet or FILE.json (atomically)")
    ev.add_argument("--calibrated", type=nonempty_text(CALIBRATED_FIX), metavar="DEVICE",
                    help="add the expectation beside the bound: expected_latency_s, "
                         "expected_speedup and fraction_of_sol from the kernel predictors of "
                         "DEVICE (shipped: h100-sxm, cpu-amd-epyc-2c; or a file written by "
                         "dse calibrate --out), with the predictor used and its held-out error")
    add_backend_option(ev)
    ev.set_defaults(run=_cmd_evaluate)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    check_outputs(files=[("--out", args.out)])
    d = design_from_args(args)
    import pandas as pd

    from ..api import evaluation
    from ..calibrate.coverage import coverage_note
    from ..output import write_table
    from .tables import calibration_note

    check_quantisation(args, d)
    predictors = predictors_from_args(args)
    backend = backend_from_args(args, d.traces)
    evaluation_begins(args)  # every input checked: the first run's note, if any
    assumed = assumed_dtypes(args, d.numerics)
    if assumed:
        print(assumed)
    frames = []
    for trace in d.traces:
        # Every column of the --out file comes from the library; this prints them.
        result = evaluation(trace, d.hardware, d.formats, d.batches, fusion=d.fusions,
                            scope=d.scope, numerics=d.numerics, calibrated=predictors,
                            backend=backend, per_layer=args.per_layer)
        table = result.table
        if args.per_layer:
            # The dtypes, as the design table's heading says them (the rest are columns).
            print(f"model {trace.model}, scope {d.scope}, {dtypes_text(d.numerics)}: "
                  "speed-of-light time per layer (roofline)")
            print(_layer_table(table))
        else:
            print(_design_table(table, trace, d.numerics))
            print(_energy_table(table))
            if trace.provenance.get("phase"):
                print(_language_model_table(table, trace))
        if result.expected is not None:
            print(calibration_note(result.expected, predictors))
            if result.coverage is not None:  # GEMMs the predictors never timed (issue 24)
                print(coverage_note(result.coverage, predictors.name, trace.model))
            if args.backend is None and torch_runs_otherwise(trace):
                print(TORCH_NOTE)
        frames.append(table)
    table = pd.concat(frames, ignore_index=True)
    if args.out is not None:
        write_table(table, args.out)
        print(f"wrote {len(table)} rows to {args.out}")
    return 0


def check_quantisation(args: argparse.Namespace, d) -> None:
    """Refuse, in one line, what the quantisation options cannot price: a KV-cache dtype for
    a trace without a KV cache. With --calibrated, quantised weights and another KV-cache
    dtype are priced and said to be extrapolated (dse.calibrate.expected)."""
    if args.kv_dtype is not None:
        plain = [t.model for t in d.traces if not t.provenance.get("phase")]
        if plain:
            raise InputError(f"--kv-dtype {args.kv_dtype}: {plain[0]} has no KV cache; the "
                             "option is for language models (--model NAME --phase --context)")


def _language_model_table(table: pd.DataFrame, trace) -> str:
    import pandas as pd

    from .tables import seconds_column

    p = trace.provenance
    decode = p["phase"] == "decode"
    shown = pd.DataFrame({
        "hardware": table["hardware"], "format": table["format"], "batch": table["batch"],
        "fusion": table["fusion"]})
    if decode:
        shown["tokens/s"] = table["tokens_per_s"].map(lambda x: f"{x:,.1f}")
        name, cells = seconds_column(table["time_per_token_s"], "time/token")
    else:
        name, cells = seconds_column(table["ttft_s"], "TTFT")
    shown[name] = cells
    if "expected_tokens_per_s" in table:  # calibrated: the expectation beside the bound
        if decode:
            shown["expected tokens/s"] = table["expected_tokens_per_s"].map(
                lambda x: f"{x:,.1f}")
            name, cells = seconds_column(table["expected_time_per_token_s"], "expected")
        else:
            name, cells = seconds_column(table["expected_ttft_s"], "expected TTFT")
        shown[name] = cells
    shown["weights read (GB)"] = table["weight_bytes"].map(lambda x: f"{x / 1e9:.3g}")
    shown["KV cache (GB)"] = table["kv_cache_bytes"].map(lambda x: f"{x / 1e9:.3g}")
    what = (f"decode at context {p['context']}: one new token per request per step" if decode
            else f"prefill of {p['context']} prompt tokens per request, to the first token")
    stored = ""
    if "weight_dtype" in table:
        stored = (f"; weights {table['weight_dtype'].iloc[0]}, KV cache "
                  f"{table['kv_dtype'].iloc[0]}")
    return (f"language model {p['config']}, {what}; {p['params']:,} parameters, "
            f"{int(table['kv_bytes_per_token'].iloc[0]):,} KV-cache bytes per token{stored}:\n"
            + shown.to_string(index=False)
            + "".join("\n" + line for line in unfit_at_batch_1(table)))


def unfit_at_batch_1(table: pd.DataFrame) -> list[str]:
    """One line per language model and device that some design cannot hold even at batch 1
    (``largest_batch_that_fits`` 0): its weights and one request's KV cache at the context,
    against the device's DRAM, the formats that do fit, and the fix."""
    import pandas as pd

    if "largest_batch_that_fits" not in table or "phase" not in table:
        return []
    lines = []
    rows = table[table["phase"].notna() & table["largest_batch_that_fits"].notna()]
    for (model, hardware), group in rows.groupby(["model", "hardware"], sort=False):
        unfit = group[group["largest_batch_that_fits"] == 0].drop_duplicates("format")
        if unfit.empty:
            continue
        r = unfit.iloc[0]
        request = (r["peak_memory_bytes"] - r["weight_storage_bytes"]) / r["batch"]
        fit = [str(f) for f in pd.unique(group.loc[group["largest_batch_that_fits"] > 0,
                                                   "format"])]
        formats = ", ".join(str(f) for f in unfit["format"])
        lines.append(
            f"{str(model).rsplit('.', 2)[0]} does not fit {hardware} at batch 1 in {formats}: "
            f"{r['weight_storage_bytes'] / 1e9:.3g} GB of weights and "
            f"{request / 1e9:.3g} GB for one request (KV cache at context {int(r['context']):,} "
            f"and activations) against {r['dram_capacity_bytes'] / 2**30:.3g} GiB of DRAM"
            + (f" ({', '.join(fit)} fit{'s' if len(fit) == 1 else ''})" if fit else "")
            + "; give a narrower --weight-dtype (int8, fp8, int4), a sparse --format or a "
              "device with more DRAM")
    return lines


def _energy_table(table: pd.DataFrame) -> str:
    """Energy, power and memory per design: what an architect weighs against latency."""
    import pandas as pd

    from ..output import format_seconds
    from .tables import energy_cell, energy_notes, missing

    def fits(value) -> str:
        return missing() if pd.isna(value) else ("yes" if value else "NO")

    shown = pd.DataFrame({
        "hardware": table["hardware"], "format": table["format"], "batch": table["batch"],
        "fusion": table["fusion"],
        "energy/inference (mJ)": [energy_cell(v * 1e3, "{:.4g}")
                                  for v in table["energy_per_inference_j"]],
        "avg power (W)": [energy_cell(v, "{:.0f}") for v in table["avg_power_w"]],
        "power cap": [f"active: {format_seconds(c)}" if capped else "-"
                      for capped, c in zip(table["power_capped"], table["capped_latency_s"],
                                           strict=True)],
        "peak memory (GiB)": [f"{v / 2**30:.3g}" for v in table["peak_memory_bytes"]],
        "fits": [fits(v) for v in table["fits"]],
        "largest batch that fits": [missing() if pd.isna(v) else f"{int(v):,}"
                                    for v in table["largest_batch_that_fits"]],
    })
    note = "".join("\n" + line for line in energy_notes(table))
    return ("energy per inference (dynamic by unit and traffic, plus static power x latency), "
            "average power, power cap (latency when the board limit binds), memory:\n"
            + shown.to_string(index=False) + note)


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


def _design_table(table: pd.DataFrame, trace, numerics) -> str:
    import pandas as pd

    from .tables import seconds_column, share

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
    if "expected_latency_s" in table:
        expected = seconds_column(table["expected_latency_s"], "expected")
        shown[expected[0]] = expected[1]
        shown["exp. speedup"] = table["expected_speedup"].map(lambda x: f"{x:.3f}x")
        shown["frac of SOL"] = table["fraction_of_sol"].map(lambda x: f"{x:.2f}")
    scope = table["scope"].iloc[0]
    header = (f"model {trace.model}, scope {scope}, {dtypes_text(numerics)}: speed-of-light "
              "latency (roofline)")
    if table["per_layer_density"].any():
        formats = ", ".join(table.loc[table["per_layer_density"], "format"].unique())
        header += (f"\nper-layer densities from the trace replace the sparsity of {formats} "
                   f"(weight sparsity: "
                   + ", ".join(f"{f} {s:.1%}" for f, s in table.loc[
                       table["per_layer_density"], ["format", "weight_sparsity"]]
                       .drop_duplicates().itertuples(index=False)) + ")")
    return header + "\n" + shown.to_string(index=False)


def _layer_table(table: pd.DataFrame) -> str:
    import pandas as pd

    from .tables import missing, seconds_column

    shown = table[["hardware", "format", "batch", "fusion", "op", "kind", "unit", "fallback",
                   "bound"]].copy()
    for column in ("compute", "memory", "time"):
        name, cells = seconds_column(table[f"{column}_s"], column)
        shown[name] = cells
    if "expected_s" in table:
        name, cells = seconds_column(table["expected_s"], "expected")
        shown[name] = cells
        shown["frac of SOL"] = table["fraction_of_sol"].map(
            lambda x: missing() if pd.isna(x) else f"{x:.2f}")
        shown["predictor"] = table["predictor"].str.split(":").str[1:].str.join(":")
    shown["fallback"] = shown["fallback"].replace("", missing())
    return shown.to_string(index=False)


def language_model_columns(*args, **kwargs):
    """:func:`dse.design_columns.language_model_columns`, imported when called (it loads the
    roofline engine)."""
    from ..design_columns import language_model_columns as columns

    return columns(*args, **kwargs)
