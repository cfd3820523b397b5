"""`dse workloads`: model traces (list, show, export from timm)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from search.credentials import mask_credentials

from .commands import help_of
from .options import Parser, check_outputs, integer, nonempty_text, path_value

__all__ = ["add_parsers"]


def add_parsers(commands) -> None:
    wl = commands.add_parser("workloads", help=help_of("workloads"),
                             description="Per-sample op traces of models: the shipped ones, "
                                         "and export of new ones from timm.")
    wl_commands = wl.add_subparsers(dest="workloads_command", required=True,
                                    parser_class=Parser, metavar="COMMAND")
    wl_list = wl_commands.add_parser("list", help="the shipped traces",
                                     description="List the shipped traces and their aliases.")
    wl_list.set_defaults(run=_cmd_workloads_list)
    wl_show = wl_commands.add_parser(
        "show", help="one trace: provenance, shares of FLOPs and bytes by op kind",
        description="Show a trace: provenance, op count, parameters, MACs, the prunable share, "
                    "and FLOPs and DRAM bytes by op kind (batch 1, dense, unfused, fp16).")
    wl_show.add_argument("name", metavar="NAME|PATH", type=nonempty_text(
        "a shipped trace name (dse workloads list) or a trace .json"))
    wl_show.set_defaults(run=_cmd_workloads_show)
    wl_export = wl_commands.add_parser(
        "export", help="trace a timm model (needs the torch/timm extra)",
        description="Build a timm model on the meta device (no weights, no download), run one "
                    "forward and write its per-sample op trace as JSON. Needs: pip install "
                    "'sparsity-dse[export]'.")
    wl_export.add_argument("model", metavar="MODEL", help="timm model name, e.g. convnext_tiny",
                           type=nonempty_text("a timm model name, e.g. convnext_tiny"))
    wl_export.add_argument("--img-size", type=integer(1, 4096), metavar="N",
                           help="input height and width in pixels (default: the model's own)")
    wl_export.add_argument("--out", type=path_value, metavar="PATH",
                           help="trace file to write (default: MODEL.json here)")
    wl_export.add_argument("--trace-batch", type=integer(1, 1024), default=2, metavar="B",
                           help="batch to trace at; figures are stored per sample (default 2: "
                                "at batch 1 PyTorch skips layout copies every larger batch "
                                "makes)")
    wl_export.add_argument("--num-classes", type=integer(1, 1_000_000), metavar="N",
                           help="classifier width (default: the model's own), e.g. to match "
                                "a checkpoint from `dse accuracy`")
    wl_export.add_argument("--sparsity-from", metavar="CHECKPOINT",
                           type=nonempty_text("a saved state dict (.pt)"),
                           help="a state dict whose zeros define each prunable layer's "
                                "density, recorded in the trace (loaded weights-only)")
    wl_export.set_defaults(run=_cmd_workloads_export)



def _cmd_workloads_list(args: argparse.Namespace) -> int:
    import pandas as pd

    import workloads
    from workloads import load_trace, trace_names

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
    import pandas as pd

    import workloads
    from workloads import TraceError, load_trace
    from workloads.llm import load_llm_config
    from workloads.registry import is_language_model

    if is_language_model(args.name.strip()):
        # Told as what it is, not as an unknown trace: its ops depend on the phase and context
        # (a configuration with a fault is told that fault first).
        load_llm_config(args.name.strip())
        raise TraceError(f"{args.name.strip()} is a language model: its trace depends on the "
                         "phase and the context length; see its ops with dse evaluate --model "
                         f"{args.name.strip()} --phase prefill|decode --context TOKENS "
                         "--per-layer")
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
    from workloads import TraceError
    from workloads.registry import is_language_model

    if is_language_model(args.model.strip()):
        # Was: "unknown timm model 'llama-3-8b'", after importing timm.
        raise TraceError(f"{args.model.strip()} is a language model, not a timm model: dse "
                         "builds its trace from its configuration for each phase and context; "
                         f"see it with dse evaluate --model {args.model.strip()} --phase "
                         "prefill|decode --context TOKENS --per-layer --out FILE.csv")
    from workloads.export import export_trace

    from ..output import write_atomic

    out = args.out or Path(f"{args.model}.json")
    check_outputs(files=[("--out", out, (".json",))],
                  inputs=[("--sparsity-from", args.sparsity_from, "file")])
    options = [("--img-size", args.img_size), ("--num-classes", args.num_classes),
               ("--out", args.out),
               ("--trace-batch", args.trace_batch if args.trace_batch != 2 else None),
               ("--sparsity-from", args.sparsity_from)]
    command = mask_credentials(" ".join(
        ["dse workloads export", args.model]
        + [f"{flag} {value}" for flag, value in options if value is not None]))
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
