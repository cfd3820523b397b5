"""`dse hw`: the hardware catalog (list, show)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .commands import help_of
from .options import (
    MAX_WAIT_S,
    InputError,
    Parser,
    add_set_option,
    check_outputs,
    identifier,
    integer,
    nonempty_text,
    number,
    path_value,
)
from .progress import StatusLine

__all__ = ["add_parsers"]


def add_parsers(commands) -> None:
    hw = commands.add_parser("hw", help=help_of("hw"),
                             description="List and show accelerator specs; probe this "
                                         "machine's ceilings into a spec.")
    hw_commands = hw.add_subparsers(dest="hw_command", required=True, parser_class=Parser,
                                    metavar="COMMAND")
    hw_list = hw_commands.add_parser("list", help="catalog entries and their headline figures",
                                     description="List the shipped accelerator specs.")
    hw_list.set_defaults(run=_cmd_hw_list)
    hw_show = hw_commands.add_parser("show", help="one spec, every field, with sources",
                                     description="Show one spec (catalog name, alias or "
                                                 ".toml path), after any --set overrides.")
    hw_show.add_argument("name", metavar="NAME|PATH",
                         type=nonempty_text("a catalog name (dse hw list) or a spec .toml"))
    add_set_option(hw_show)
    hw_show.set_defaults(run=_cmd_hw_show)
    hw_probe = hw_commands.add_parser(
        "probe", help="measure this machine's ceilings and write them as a spec",
        description="Measure the machine at hand and write an accelerator spec that every "
                    "command takes (--hw FILE): sustained DRAM bandwidth (a STREAM triad over "
                    "arrays far beyond the last-level cache, all cores), GEMM FLOP/s per dtype "
                    "through torch's BLAS (fp32 in the tf32 slot; bf16 and fp16 where the CPU "
                    "runs them natively), vector FLOP/s (an FMA loop in numba), cores and cache "
                    "sizes from the OS; on CUDA the achieved tensor-core peak per dtype, copy "
                    "bandwidth, SMs, shared memory and L2 (the catalog's datasheet figures "
                    "stay where nothing was measured). Every figure's method, repeats and spread "
                    "go into the file's [provenance]. Needs torch: pip install "
                    "'sparsity-dse[export]'.",
        epilog="Then: dse evaluate --hw host.toml --dtype tf32 --vector-dtype fp32 ... (a CPU "
               "spec has no fp16 rate unless the CPU runs fp16 natively).")
    # Each option takes one value: Parser refuses a second, different one.
    hw_probe.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                          help="what to probe (default cpu)")
    hw_probe.add_argument("--out", type=path_value, default=Path("host.toml"),
                          metavar="FILE.toml", help="spec to write (default host.toml)")
    hw_probe.add_argument("--name", default="host", type=identifier("a spec name"),
                          help="the spec's name (default host; not a catalog spec's name)")
    hw_probe.add_argument("--repeats", type=integer(3, 1000), default=7, metavar="N",
                          help="repeats per figure, at least 3 (default 7)")
    hw_probe.add_argument("--wait-idle", type=number(0.0, MAX_WAIT_S, unit=" s"), default=0.0,
                          metavar="SECONDS",
                          help="first wait up to this long for other processes to leave the "
                               "cores alone (default 0)")
    hw_probe.set_defaults(run=_cmd_hw_probe)


def _cmd_hw_list(args: argparse.Namespace) -> int:
    import pandas as pd

    import accelerator_models

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
    import accelerator_models
    from accelerator_models import FIELDS

    acc = accelerator_models.load(args.name, args.overrides)
    print(f"name: {acc.name}")
    if acc.description:
        print(f"description: {acc.description}")
    if acc.aliases:
        print(f"aliases: {', '.join(acc.aliases)}")
    print("figures: " + ("peak (datasheet rates: the roofline on them is a bound)"
                         if acc.is_bound else "ceiling (measured: the roofline on them is an "
                         "estimate that some runs beat, not a bound)"))
    print(f"in short: {_in_short(acc)}")
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


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes:.0f} B"


def _in_short(acc) -> str:
    """The spec in human units: TB/s, TFLOP/s, MiB, us."""
    parts = [f"DRAM {acc.dram_bandwidth_bytes_per_s / 1e12:.4g} TB/s"]
    parts += [f"tensor {d} {v / 1e12:.4g} {'TOP/s' if d == 'int8' else 'TFLOP/s'}"
              for d, v in acc.tensor_flops_per_s.items()]
    parts += [f"vector {d} {v / 1e12:.4g} TFLOP/s" for d, v in acc.vector_flops_per_s.items()]
    if acc.sparse_tensor is not None:
        patterns = ",".join(f"{n}:{m}" for n, m in acc.sparse_tensor.patterns)
        parts.append(f"sparse tensor core {patterns} at {acc.nonzero_rate:g}x the dense rate "
                     "on nonzeros")
    if acc.sm_count is not None:
        parts.append(f"{acc.sm_count} SMs")
    if acc.shared_memory_per_sm_bytes is not None:
        parts.append(f"{_size(acc.shared_memory_per_sm_bytes)} shared memory per SM")
    if acc.l2_bytes is not None:
        parts.append(f"L2 {_size(acc.l2_bytes)}")
    if acc.kernel_launch_overhead_s is not None:
        parts.append(f"launch {acc.kernel_launch_overhead_s * 1e6:.3g} us")
    return "; ".join(parts)


def _check_probe_name(args: argparse.Namespace) -> None:
    """--name checked against the catalog: a probe
    named ``a100`` labelled every row and chart of its figures as the catalog's A100
    (``dse compare --hw a100,host.toml`` showed two a100 rows), exit 0."""
    import accelerator_models

    taken = {n.lower(): n for n in accelerator_models.catalog_names()}
    taken.update({a.lower(): f"an alias of {n}" for a, n in accelerator_models.aliases().items()})
    if args.name.lower() in taken:
        raise InputError(f"--name {args.name}: the name of a catalog spec "
                         f"({taken[args.name.lower()]}; see dse hw list): the probed figures "
                         "would be labelled as that spec's in every table; give another, e.g. "
                         f"--name {args.name}-probed")


def _cmd_hw_probe(args: argparse.Namespace) -> int:
    import accelerator_models

    from ..measure.probe import probe, probe_spec_toml
    from ..output import write_atomic

    _check_probe_name(args)
    check_outputs(files=[("--out", args.out, (".toml",))])
    result = probe(args.device, args.repeats, progress=StatusLine("probed", "figures"),
                   wait_idle_s=args.wait_idle)
    text = probe_spec_toml(result, args.name, command=args.command_line)
    write_atomic(args.out, lambda handle: handle.write(text.encode()))
    try:
        accelerator_models.load(str(args.out))  # what was written must load as a spec
    except accelerator_models.SpecError:
        args.out.unlink()
        raise
    print(f"probed {result.facts.get('device_name', result.facts.get('cpu_model', '?'))} in "
          f"{result.elapsed_s:.0f} s (idle: {result.facts.get('idle')}); spread = (max - min) / "
          "median over the repeats:")
    for name, figure in result.figures.items():
        print(f"  {name:<28} {figure.value:>12.4g} {figure.unit:<9} spread "
              f"{100 * figure.spread:4.1f}% over {figure.repeats}  ({figure.method})")
    for note in result.notes:
        print(f"note: {note}")
    print(f"wrote {args.out}; use it as --hw {args.out}")
    return 0
