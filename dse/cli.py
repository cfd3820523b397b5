"""The ``dse`` command line. Errors a user can cause print one line and exit with code 2."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

import accelerator_models
import workloads
from accelerator_models import FIELDS, SpecError
from formats import GRAMMAR_HELP, FormatError
from formats import parse as parse_format
from search import DEFAULT_TABLE, AccuracyTable, AccuracyTableError, load_accuracy_table
from search.errors import SearchError, SearchInterrupted
from workloads import TraceError, load_trace, trace_names

from .accuracy.data import AccuracyError
from .accuracy.pipeline import DEFAULT_LEVELS, DEFAULT_PATTERNS
from .cli_report import add_report_parsers
from .cli_search import add_search_parser
from .cli_simulate import add_simulate_parser
from .evaluator import FUSIONS, SCOPES, EvaluationError, evaluate, evaluate_layers
from .numerics import Numerics, NumericsError
from .output import OutputError, check_output_path, format_seconds, write_atomic, write_table
from .sim_fanout import FanoutError
from .simulate import SimulationError
from .sweep import SweepError

__all__ = ["main"]

USER_ERRORS = (SpecError, FormatError, TraceError, EvaluationError, NumericsError, OutputError,
               AccuracyError, AccuracyTableError, SearchError, SweepError, SimulationError,
               FanoutError)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the command and pointing at --help."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _add_hw_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
        help="override a hardware field, e.g. --set dram_bandwidth_bytes_per_s=3e12 or "
             "--set sparse_tensor.patterns=2:4,1:4,2:8,2:16 (repeatable; fields: "
             "see `dse hw show`)")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dse",
        description="Speed-of-light design-space exploration of sparse neural-network "
                    "inference: what a sparsity pattern, on given hardware, could buy.")
    parser.add_argument("--version", action="version", version="dse 0.1.0")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser,
                                     metavar="COMMAND")

    ev = commands.add_parser(
        "evaluate", help="speed-of-light latency and speedup of formats on hardware",
        description="Evaluate a model trace under sparse formats on one or more accelerators "
                    "with the roofline (speed-of-light) model, and print latency, dense "
                    "latency, speedup, bound mix, feature share of DRAM traffic and fallbacks.",
        epilog=f"Format grammar: {GRAMMAR_HELP}. Shipped models: {', '.join(trace_names())}.")
    ev.add_argument("--model", dest="models", action="append", required=True,
                    metavar="NAME|PATH",
                    help="shipped trace name or alias (`dse workloads list`) or a trace .json "
                         "path; repeatable")
    ev.add_argument("--hw", dest="hardware", action="append", required=True,
                    metavar="NAME|PATH",
                    help="catalog name (`dse hw list`) or a spec .toml; repeatable")
    _add_hw_arguments(ev)
    ev.add_argument("--format", dest="formats", action="append", required=True, metavar="F",
                    help="sparse format, e.g. 2:4, block4@87.5%%, unstructured@0.875; "
                         "repeatable; dense is always evaluated as the baseline")
    ev.add_argument("--batch", dest="batches", action="append", type=_positive_int,
                    metavar="B", help="batch size; repeatable (default 1)")
    ev.add_argument("--fusion", dest="fusions", action="append", choices=FUSIONS,
                    help="fusion model; repeatable (default unfused)")
    ev.add_argument("--scope", choices=SCOPES, default="gemm",
                    help="gemm: prunable weight GEMMs only; all: every op (default gemm)")
    ev.add_argument("--per-layer", action="store_true",
                    help="print (and write with --out) one row per op and design")
    ev.add_argument("--out", type=Path, metavar="FILE",
                    help="write results to FILE.csv, FILE.parquet or FILE.json (atomically)")
    ev.add_argument("--dtype", default="fp16",
                    help="tensor-core dtype; values and features are stored in it "
                         "(default fp16)")
    ev.add_argument("--vector-dtype", default="fp16",
                    help="dtype of elementwise ops on the vector cores (default fp16)")
    ev.add_argument("--csr-dtype", default="fp32",
                    help="dtype of CSR kernels on the vector cores (default fp32: sparse "
                         "libraries accumulate in FP32)")
    ev.add_argument("--index-bytes", type=int, default=4,
                    help="CSR/BSR index width in bytes (default 4)")
    ev.set_defaults(run=_cmd_evaluate)

    wl = commands.add_parser("workloads", help="model traces: list, show, export from timm",
                             description="Per-sample op traces of models: the shipped ones, "
                                         "and export of new ones from timm.")
    wl_commands = wl.add_subparsers(dest="workloads_command", required=True,
                                    parser_class=_Parser, metavar="COMMAND")
    wl_list = wl_commands.add_parser("list", help="the shipped traces",
                                     description="List the shipped traces and their aliases.")
    wl_list.set_defaults(run=_cmd_workloads_list)
    wl_show = wl_commands.add_parser(
        "show", help="one trace: provenance, shares of FLOPs and bytes by op kind",
        description="Show a trace: provenance, op count, parameters, MACs, the prunable share, "
                    "and FLOPs and DRAM bytes by op kind (batch 1, dense, unfused, fp16).")
    wl_show.add_argument("name", metavar="NAME|PATH")
    wl_show.set_defaults(run=_cmd_workloads_show)
    wl_export = wl_commands.add_parser(
        "export", help="trace a timm model (needs the torch/timm extra)",
        description="Build a timm model on the meta device (no weights, no download), run one "
                    "forward and write its per-sample op trace as JSON. Needs: pip install "
                    "'sparsity-dse[export]'.")
    wl_export.add_argument("model", metavar="MODEL", help="timm model name, e.g. convnext_tiny")
    wl_export.add_argument("--img-size", type=_positive_int, metavar="N",
                           help="input height and width in pixels (default: the model's own)")
    wl_export.add_argument("--out", type=Path, metavar="PATH",
                           help="trace file to write (default: MODEL.json here)")
    wl_export.add_argument("--trace-batch", type=_positive_int, default=2, metavar="B",
                           help="batch to trace at; figures are stored per sample (default 2: "
                                "at batch 1 PyTorch skips layout copies every larger batch "
                                "makes)")
    wl_export.add_argument("--num-classes", type=_positive_int, metavar="N",
                           help="classifier width (default: the model's own), e.g. to match "
                                "a checkpoint from `dse accuracy`")
    wl_export.add_argument("--sparsity-from", metavar="CHECKPOINT",
                           help="a state dict whose zeros define each prunable layer's "
                                "density, recorded in the trace (loaded weights-only)")
    wl_export.set_defaults(run=_cmd_workloads_export)

    acc = commands.add_parser(
        "accuracy", help="measure accuracy of sparse patterns by pruning and fine-tuning",
        description="Train a dense baseline of each model (or load --checkpoint), then for "
                    "each pattern prune by global magnitude and fine-tune level by level with "
                    "learning-rate rewinding, masks fixed; write an accuracy table (CSV) and "
                    "its provenance (JSON beside it). Resumable: rerun the same command to "
                    "continue. Needs: pip install 'sparsity-dse[accuracy]'.")
    acc.add_argument("--model", dest="models", action="append", required=True, metavar="NAME",
                     help="timm model name (swin_tiny is accepted); repeatable")
    acc.add_argument("--img-size", type=_positive_int, default=32, metavar="N",
                     help="input size in pixels (default 32)")
    acc.add_argument("--dataset", default="digits", metavar="digits|PATH",
                     help="'digits' (scikit-learn's, upsampled; no download) or an ImageFolder "
                          "tree (default digits)")
    acc.add_argument("--patterns", default=",".join(DEFAULT_PATTERNS), metavar="P,P,...",
                     help="unstructured, blockB, N:M (default: %(default)s)")
    acc.add_argument("--levels", default=",".join(f"{x:g}" for x in DEFAULT_LEVELS),
                     metavar="S,S,...", help="sparsity levels of block and unstructured "
                                             "patterns (default: %(default)s)")
    acc.add_argument("--dense-epochs", type=_positive_int, default=30, metavar="E",
                     help="epochs of the dense baseline (default 30)")
    acc.add_argument("--finetune-epochs", type=_positive_int, default=3, metavar="E",
                     help="fine-tuning epochs per level; the last E epochs of the dense "
                          "schedule are replayed (default 3)")
    acc.add_argument("--lr", type=float, default=1e-3, help="peak AdamW learning rate")
    acc.add_argument("--batch-size", type=_positive_int, default=64, metavar="B")
    acc.add_argument("--seed", type=int, default=0)
    acc.add_argument("--checkpoint", metavar="PATH",
                     help="dense weights to start from instead of training")
    acc.add_argument("--train-limit", type=_positive_int, metavar="N",
                     help="use only N training images (quick trials)")
    acc.add_argument("--work-dir", type=Path, default=Path("dse-accuracy-work"),
                     help="progress and weights, for resuming (default dse-accuracy-work)")
    acc.add_argument("--out", type=Path, default=Path("accuracy.csv"),
                     help="table to write (default accuracy.csv); provenance goes to "
                          "OUT.json")
    acc.add_argument("--save-checkpoints", type=Path, metavar="DIR",
                     help="also write each pruned model's state dict there (readable by "
                          "`dse workloads export --sparsity-from`)")
    acc.set_defaults(run=_cmd_accuracy)

    table = commands.add_parser(
        "accuracy-table", help="check an accuracy table and look formats up in it",
        description="Validate an accuracy table (CSV), summarize it per model, and look "
                    "formats up: measured, interpolated within the pattern family, or out of "
                    "range (never extrapolated). Default table: the shipped one.")
    table.add_argument("path", nargs="?", type=Path, default=DEFAULT_TABLE,
                       metavar="TABLE.csv", help="default: the shipped table")
    table.add_argument("--model", metavar="NAME", help="only this model (alias swin_tiny ok)")
    table.add_argument("--format", dest="formats", action="append", default=[], metavar="F",
                       help="look this format up for the model(s); repeatable")
    table.add_argument("--metric", default="top1")
    table.set_defaults(run=_cmd_accuracy_table)

    hw = commands.add_parser("hw", help="the hardware catalog",
                             description="List and show accelerator specs.")
    hw_commands = hw.add_subparsers(dest="hw_command", required=True, parser_class=_Parser,
                                    metavar="COMMAND")
    hw_list = hw_commands.add_parser("list", help="catalog entries and their headline figures",
                                     description="List the shipped accelerator specs.")
    hw_list.set_defaults(run=_cmd_hw_list)
    hw_show = hw_commands.add_parser("show", help="one spec, every field, with sources",
                                     description="Show one spec (catalog name, alias or "
                                                 ".toml path), after any --set overrides.")
    hw_show.add_argument("name", metavar="NAME|PATH")
    _add_hw_arguments(hw_show)
    hw_show.set_defaults(run=_cmd_hw_show)
    add_simulate_parser(commands, _positive_int)
    add_search_parser(commands, _Parser, _positive_int)
    add_report_parsers(commands, _Parser, _positive_int)
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


# --- commands ---------------------------------------------------------------------------------


def _cmd_evaluate(args: argparse.Namespace) -> int:
    if args.out is not None:
        check_output_path(args.out)
    numerics = Numerics(dtype=args.dtype, vector_dtype=args.vector_dtype,
                        csr_dtype=args.csr_dtype, index_width_bytes=args.index_bytes)
    traces = [load_trace(m) for m in dict.fromkeys(args.models)]
    hardware = [accelerator_models.load(h, args.overrides) for h in args.hardware]
    batches = args.batches or [1]
    fusions = args.fusions or ["unfused"]
    frames = []
    for trace in traces:
        if args.per_layer:
            table = pd.concat([evaluate_layers(trace, hardware, args.formats, batches, fusion=f,
                                               scope=args.scope, numerics=numerics)
                               for f in fusions], ignore_index=True)
            print(_layer_table(table))
        else:
            table = evaluate(trace, hardware, args.formats, batches, fusion=fusions,
                             scope=args.scope, numerics=numerics)
            print(_design_table(table, trace))
        frames.append(table)
    table = pd.concat(frames, ignore_index=True)
    if args.out is not None:
        write_table(table, args.out)
        print(f"wrote {len(table)} rows to {args.out}")
    return 0


def _fallbacks(row) -> str:
    parts = []
    if row.shape_fallback_ops:
        parts.append(f"{row.shape_fallback_ops} shape->dense")
    if row.hw_fallback_ops:
        parts.append(f"{row.hw_fallback_ops} hw->{row.hw_fallback}")
    return ", ".join(parts) or "-"


def _design_table(table: pd.DataFrame, trace) -> str:
    shown = pd.DataFrame({
        "hardware": table["hardware"],
        "format": table["format"],
        "batch": table["batch"],
        "fusion": table["fusion"],
        "latency": table["latency_s"].map(format_seconds),
        "dense": table["dense_latency_s"].map(format_seconds),
        "speedup": table["speedup"].map(lambda x: f"{x:.3f}x"),
        "mem-bound ops": [f"{a}/{b}" for a, b in zip(table["memory_bound_ops"], table["ops"],
                                                     strict=True)],
        "feature share": table["feature_bytes_share"].map(lambda x: f"{x:.1%}"),
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
    shown["compute"] = table["compute_s"].map(format_seconds)
    shown["memory"] = table["memory_s"].map(format_seconds)
    shown["time"] = table["time_s"].map(format_seconds)
    shown["fallback"] = shown["fallback"].replace("", "-")
    return shown.to_string(index=False)


def _cmd_workloads_list(args: argparse.Namespace) -> int:
    aliases = {}
    for alias, name in workloads.ALIASES.items():
        aliases.setdefault(name, []).append(alias)
    rows = []
    for name in trace_names():
        trace = load_trace(name)
        size = trace.provenance.get("input_size", list(trace.input_shape))
        rows.append({"name": name, "aliases": ",".join(aliases.get(name, [])) or "-",
                     "ops": len(trace), "params (M)": f"{trace.params / 1e6:.2f}",
                     "GMACs/sample": f"{trace.macs_per_sample / 1e9:.3f}",
                     "input": "x".join(str(d) for d in size),
                     "source": "timm " + str(trace.provenance["timm"])
                     if "timm" in trace.provenance else "hand-written"})
    print(pd.DataFrame(rows).to_string(index=False))
    return 0


def _cmd_workloads_show(args: argparse.Namespace) -> int:
    trace = load_trace(args.name)
    print(f"model: {trace.model}")
    print(f"input (per sample): {'x'.join(str(d) for d in trace.input_shape)}")
    print(f"ops: {len(trace)} ({int(trace.ops['prunable'].sum())} prunable)")
    print(f"parameters: {trace.params:,}")
    print(f"MACs per sample: {trace.macs_per_sample:,}")
    shares = workloads.prunable_shares(trace)
    print(f"prunable share: {shares['params']:.1%} of parameters, {shares['flops']:.1%} of "
          f"FLOPs, {shares['bytes']:.1%} of DRAM bytes (batch 1, dense, unfused, fp16)")
    if trace.has_density:
        density = trace.ops["density"].dropna()
        print(f"per-layer densities: {len(density)} layers, {density.min():.3f} to "
              f"{density.max():.3f}")
    print("provenance:")
    for key, value in trace.provenance.items():
        print(f"  {key}: {value}")
    table = workloads.kind_summary(trace)
    shown = pd.DataFrame({
        "kind": table["kind"], "ops": table["ops"],
        "GFLOPs": table["flops"].map(lambda x: f"{x / 1e9:.4g}"),
        "FLOPs share": table["flops_share"].map(lambda x: f"{x:.1%}"),
        "MB": table["bytes"].map(lambda x: f"{x / 1e6:.4g}"),
        "bytes share": table["bytes_share"].map(lambda x: f"{x:.1%}"),
    })
    print(shown.to_string(index=False))
    return 0


def _cmd_workloads_export(args: argparse.Namespace) -> int:
    from workloads.export import export_trace

    out = args.out or Path(f"{args.model}.json")
    check_output_path(out, (".json",))
    options = [("--img-size", args.img_size), ("--num-classes", args.num_classes),
               ("--out", args.out),
               ("--trace-batch", args.trace_batch if args.trace_batch != 2 else None),
               ("--sparsity-from", args.sparsity_from)]
    command = " ".join(["dse workloads export", args.model]
                       + [f"{flag} {value}" for flag, value in options if value is not None])
    trace = export_trace(args.model, img_size=args.img_size, batch=args.trace_batch,
                         sparsity_from=args.sparsity_from, num_classes=args.num_classes,
                         command=command)
    text = json.dumps(trace.to_json(), indent=None, separators=(",", ":"))
    write_atomic(out, lambda handle: handle.write(_one_op_per_line(text).encode()))
    print(f"wrote {trace.model}: {len(trace)} ops, {trace.params:,} parameters, "
          f"{trace.macs_per_sample:,} MACs per sample, to {out}")
    return 0


def _one_op_per_line(compact: str) -> str:
    """The trace JSON with one op record a line: small, and diffs stay readable."""
    document = json.loads(compact)
    ops = document.pop("ops")
    head = json.dumps(document, indent=1)[:-2]
    body = ",\n".join("  " + json.dumps(op) for op in ops)
    return f'{head},\n "ops": [\n{body}\n ]\n}}\n'


def _floats(text: str, flag: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise AccuracyError(f"{flag} {text!r}: expected numbers separated by commas, "
                            "e.g. 0.5,0.75") from None


def _cmd_accuracy(args: argparse.Namespace) -> int:
    import datetime
    import time

    from dse.accuracy import AccuracyConfig, environment, run_accuracy, table_frame

    check_output_path(args.out, (".csv",))
    config = AccuracyConfig(
        models=tuple(args.models), img_size=args.img_size, dataset=args.dataset,
        patterns=tuple(p.strip() for p in args.patterns.split(",") if p.strip()),
        levels=_floats(args.levels, "--levels"), dense_epochs=args.dense_epochs,
        finetune_epochs=args.finetune_epochs, lr=args.lr, weight_decay=0.05,
        batch_size=args.batch_size, seed=args.seed, checkpoint=args.checkpoint,
        train_limit=args.train_limit)
    _check_timm_models(config.models)
    command = "dse accuracy " + " ".join(
        [f"--model {m}" for m in config.models]
        + [f"--{k.replace('_', '-')} {v}" for k, v in (
            ("img_size", args.img_size), ("dataset", args.dataset),
            ("patterns", args.patterns), ("levels", args.levels),
            ("dense_epochs", args.dense_epochs), ("finetune_epochs", args.finetune_epochs),
            ("lr", args.lr), ("batch_size", args.batch_size), ("seed", args.seed),
            ("checkpoint", args.checkpoint), ("train_limit", args.train_limit))
           if v is not None])
    start = time.perf_counter()
    rows = run_accuracy(config, args.work_dir, log=lambda line: print(line, flush=True),
                        checkpoints_dir=args.save_checkpoints)
    table = AccuracyTable.from_frame(table_frame(rows, command), where=str(args.out))
    table.to_csv(args.out)
    state = json.loads((args.work_dir / "state.json").read_text())
    provenance = {
        "command": command, "seed": args.seed, "config": state["config"],
        "environment": environment(),
        "finished": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "wall_s_this_invocation": round(time.perf_counter() - start, 1),
        "wall_s": {model: {"dense": record["dense"]["wall_s"],
                           **{chain: c["wall_s"] for chain, c in record["chains"].items()}}
                   for model, record in state["models"].items()},
    }
    sidecar = args.out.with_suffix(".json")
    write_atomic(sidecar, lambda h: h.write((json.dumps(provenance, indent=1) + "\n").encode()))
    print(f"wrote {len(table)} rows to {args.out} and provenance to {sidecar}")
    return 0


def _cmd_accuracy_table(args: argparse.Namespace) -> int:
    from dse.accuracy.pipeline import MODEL_ALIASES

    table = load_accuracy_table(args.path)
    models = table.models()
    if args.model is not None:
        model = MODEL_ALIASES.get(args.model, args.model)
        if model not in models:
            raise AccuracyTableError(f"{args.path}: no rows for model {args.model!r}; it has "
                                     f"{', '.join(models)}")
        models = [model]
    frame = table.frame
    print(f"{args.path}: {len(table)} rows, {len(table.models())} models")
    for model in models:
        rows = frame[(frame["model"] == model) & (frame["metric"] == args.metric)]
        datasets = ", ".join(sorted(rows["dataset"].unique()))
        print(f"\n{model} ({args.metric}, {datasets})")
        grid = rows.assign(column=rows["pattern"].map(_family_label)).pivot_table(
            index="sparsity", columns="column", values="value", aggfunc="first")
        grid.index = [f"{s:.2%}" for s in grid.index]
        print(grid.to_string(float_format=lambda v: f"{v:.2f}", na_rep="-"))
        if args.formats:
            found = table.lookup_many(model, args.formats, metric=args.metric)
            print(found.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    return 0


def _family_label(pattern: str) -> str:
    fmt = parse_format(pattern)
    if fmt.family == "block":
        return f"block{fmt.block}"
    return {"nm": "N:M", "dense": "dense", "unstructured": "unstructured"}[fmt.family]


def _check_timm_models(models) -> None:
    import difflib

    try:
        import timm
    except ImportError:
        raise AccuracyError("dse accuracy needs torch, timm and scikit-learn: "
                            "pip install 'sparsity-dse[accuracy]'") from None
    from dse.accuracy.pipeline import MODEL_ALIASES

    known = set(timm.list_models())
    for model in models:
        if MODEL_ALIASES.get(model, model) not in known:
            close = difflib.get_close_matches(model, known, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise AccuracyError(f"unknown timm model {model!r}{hint}")


def _cmd_hw_list(args: argparse.Namespace) -> int:
    rows = []
    for name in accelerator_models.catalog_names():
        acc = accelerator_models.load(name)
        patterns = (",".join(f"{n}:{m}" for n, m in acc.sparse_tensor.patterns)
                    if acc.sparse_tensor else "-")
        rows.append({
            "name": name,
            "aliases": ",".join(acc.aliases) or "-",
            "DRAM TB/s": f"{acc.dram_bandwidth_bytes_per_s / 1e12:g}",
            "fp16 TC TFLOP/s": f"{acc.tensor_flops_per_s.get('fp16', float('nan')) / 1e12:g}",
            "fp32 vector TFLOP/s": f"{acc.vector_flops_per_s.get('fp32', float('nan')) / 1e12:g}",
            "sparse TC": patterns,
            "description": acc.description,
        })
    print(pd.DataFrame(rows).to_string(index=False))
    return 0


def _cmd_hw_show(args: argparse.Namespace) -> int:
    acc = accelerator_models.load(args.name, args.overrides)
    print(f"name: {acc.name}")
    if acc.description:
        print(f"description: {acc.description}")
    if acc.aliases:
        print(f"aliases: {', '.join(acc.aliases)}")
    print("fields:")
    for path in FIELDS:
        value = _field_value(acc, path)
        if value is None:
            continue
        mark = "  (unverified)" if path in acc.unverified else ""
        print(f"  {path} = {value}{mark}")
    if acc.sources:
        print("sources:")
        for source in acc.sources:
            print(f"  - {source}")
    return 0


def _field_value(acc, path: str):
    head, _, tail = path.partition(".")
    if head in ("tensor_flops_per_s", "vector_flops_per_s"):
        value = getattr(acc, head).get(tail)
        return None if value is None else f"{value:.6g}"
    if head == "sparse_tensor":
        if acc.sparse_tensor is None:
            return "[]" if tail == "patterns" else None
        if tail == "patterns":
            return "[" + ", ".join(f'"{n}:{m}"' for n, m in acc.sparse_tensor.patterns) + "]"
        return f"{acc.sparse_tensor.nonzero_rate:g}"
    if head == "block_sparse":
        value = getattr(acc.block_sparse, tail)
        return str(value).lower() if isinstance(value, bool) else str(value)
    value = getattr(acc, path)
    if value is None:  # an optional field (on-chip sizes, launch overhead) the spec leaves out
        return None
    if isinstance(value, int) or path.endswith("_bytes"):
        # Counts and byte sizes in full: 6 digits would print 40 MiB as 4.1943e+07.
        return f"{value:.15g}"
    return f"{value:.6g}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except SearchInterrupted as exc:
        print(f"dse: {exc}", file=sys.stderr)
        return 130
    except USER_ERRORS as exc:
        print(f"dse: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `dse ... | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
