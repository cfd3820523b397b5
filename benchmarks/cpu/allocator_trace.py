"""Which system calls give a CPU sparse model's page faults: ``brk`` or ``mmap``.

    python -m benchmarks.cpu.allocator_trace --out benchmarks/cpu/results/allocator_trace.csv

:mod:`benchmarks.cpu.allocator_effect` showed that under glibc's defaults a sparse timm model
at batch 8 takes several times the dense model's minor page faults per forward, and that the
faults go away when ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` are set above
any block. Two mechanisms could give them: large blocks served by ``mmap`` and returned by
``munmap``, or the main heap's top trimmed by ``brk`` when its free tail exceeds the trim
threshold (twice the adaptive mmap threshold), then grown again by the next block. This
script tells them apart: each configuration runs in a fresh process under ``strace -f``,
which records ``brk``, ``mmap``, ``munmap``, ``madvise`` and ``mremap`` over one forward
after two warm-up ones (the forward is bracketed by two marker writes to stderr), and
reports, per forward, how many calls each mechanism made and how many bytes ``brk`` grew the
heap by (the pages that fault again on first touch) or ``mmap`` mapped. Needs ``strace``
and the ``export`` extra (torch, timm).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.cpu.allocator_effect import SETTINGS, host_cpu
from dse.cli.parser import Parser

FIELDS = ("model", "batch", "variant", "allocator", "brk_calls", "brk_grown_bytes",
          "brk_shrunk_bytes", "mmap_calls", "mmap_bytes", "munmap_calls", "munmap_bytes",
          "madvise_calls", "threads", "cpu", "date")
BEGIN, END = b"dse-allocator-trace-begin\n", b"dse-allocator-trace-end\n"
_CALL = re.compile(r"^\d+\s+(\w+)\((.*)\)\s+=\s+(\S+)")


def _child(model: str, batch: int, variant: str, threads: int) -> None:
    """Two warm-up forwards, then one between the markers (run under strace)."""
    import torch

    import formats
    from dse.measure.kernels_cpu import build_model

    torch.set_num_threads(threads)
    fmt = None if variant == "dense" else formats.parse(variant)
    kernel = build_model(model, (3, 224, 224), batch, fmt)
    kernel.fn()
    kernel.fn()
    os.write(2, BEGIN)
    kernel.fn()
    os.write(2, END)


def count_calls(lines: list[str]) -> dict:
    """Per-forward counts from ``strace -f`` output lines: the calls between the two marker
    writes, and the heap's growth and shrinkage from the ``brk`` results (the heap's end
    before the forward is the last ``brk`` result before the first marker)."""
    begin = next(i for i, line in enumerate(lines) if "dse-allocator-trace-begin" in line)
    end = next(i for i, line in enumerate(lines) if "dse-allocator-trace-end" in line)
    out = dict.fromkeys(("brk_calls", "brk_grown_bytes", "brk_shrunk_bytes", "mmap_calls",
                         "mmap_bytes", "munmap_calls", "munmap_bytes", "madvise_calls"), 0)
    heap_end = None
    for i, line in enumerate(lines[:end]):
        found = _CALL.match(line)
        if not found:
            continue
        call, args, result = found.groups()
        if call == "brk":
            value = int(result, 16)
            if i > begin and heap_end is not None:
                out["brk_calls"] += 1
                out["brk_grown_bytes"] += max(value - heap_end, 0)
                out["brk_shrunk_bytes"] += max(heap_end - value, 0)
            heap_end = value
        elif i > begin and call in ("mmap", "munmap"):
            out[f"{call}_calls"] += 1
            out[f"{call}_bytes"] += int(args.split(",")[1])
        elif i > begin and call == "madvise":
            out["madvise_calls"] += 1
    return out


def build_parser() -> Parser:
    p = Parser(description=__doc__.split("\n\n")[0],
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="deit_small_patch16_224,vit_base_patch16_224")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--variants", default="dense,block4@87.5%")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, required=True, help="CSV to write (rows appended)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.child:
        model, batch, variant = args.child.split("|")
        _child(model, int(batch), variant, args.threads)
        return 0
    if shutil.which("strace") is None:
        print("allocator_trace: strace is not installed; install it (apt install strace)",
              file=sys.stderr)
        return 2
    configs = [(m, int(b), v) for m in args.models.split(",") for b in args.batches.split(",")
               for v in args.variants.split(",")]
    cpu = host_cpu()
    new = not args.out.exists()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a", newline="") as f, tempfile.TemporaryDirectory() as tmp:
        writer = csv.DictWriter(f, FIELDS)
        if new:
            writer.writeheader()
        for model, batch, variant in configs:
            for setting, env in SETTINGS.items():
                log = Path(tmp) / "strace.txt"
                child = ["strace", "-f", "-e", "trace=brk,mmap,munmap,madvise,mremap,write",
                         "-o", str(log), sys.executable, "-m", "benchmarks.cpu.allocator_trace",
                         "--child", f"{model}|{batch}|{variant}", "--threads",
                         str(args.threads), "--out", "-"]
                done = subprocess.run(child, env={**os.environ, **env}, text=True,
                                      capture_output=True, check=False)
                if done.returncode != 0:
                    print(done.stderr, file=sys.stderr)
                    return 1
                row = count_calls(log.read_text().splitlines())
                row.update(model=model, batch=batch, variant=variant, allocator=setting,
                           threads=args.threads, cpu=cpu,
                           date=datetime.datetime.now(datetime.UTC).isoformat(
                               timespec="seconds"))
                writer.writerow(row)
                f.flush()
                print(f"{model} b{batch} {variant:>14} {setting:>8}: brk {row['brk_calls']:4d} "
                      f"calls, grew {row['brk_grown_bytes'] / 1e6:7.1f} MB; mmap "
                      f"{row['mmap_calls']:3d} calls, {row['mmap_bytes'] / 1e6:6.1f} MB",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
