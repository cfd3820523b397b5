"""`dse hw`: the hardware catalog (list, show)."""

from __future__ import annotations

import argparse

import pandas as pd

import accelerator_models
from accelerator_models import FIELDS

from .options import Parser, add_set_option

__all__ = ["add_parsers"]


def add_parsers(commands) -> None:
    hw = commands.add_parser("hw", help="the hardware catalog",
                             description="List and show accelerator specs.")
    hw_commands = hw.add_subparsers(dest="hw_command", required=True, parser_class=Parser,
                                    metavar="COMMAND")
    hw_list = hw_commands.add_parser("list", help="catalog entries and their headline figures",
                                     description="List the shipped accelerator specs.")
    hw_list.set_defaults(run=_cmd_hw_list)
    hw_show = hw_commands.add_parser("show", help="one spec, every field, with sources",
                                     description="Show one spec (catalog name, alias or "
                                                 ".toml path), after any --set overrides.")
    hw_show.add_argument("name", metavar="NAME|PATH")
    add_set_option(hw_show)
    hw_show.set_defaults(run=_cmd_hw_show)


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
