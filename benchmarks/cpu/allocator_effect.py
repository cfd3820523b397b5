"""How much of a CPU sparse model's time is the allocator's, not the kernels'.

    python -m benchmarks.cpu.allocator_effect --out benchmarks/cpu/results/allocator_effect.csv

Times whole timm models, dense and with every linear run as torch BSR or CSR (``dse measure
--whole-models``'s way: :func:`dse.measure.kernels_cpu.build_model`), in fresh processes under
two settings of glibc's allocator:

- ``default``: glibc as it starts, which serves large blocks with ``mmap`` and returns them
  with ``munmap`` (its threshold adapts, up to 32 MiB on 64-bit), and trims the heap's top
  with ``brk`` once its free tail passes the trim threshold (twice the adaptive one):
  :mod:`benchmarks.cpu.allocator_trace` shows which of the two a model's faults come from;
- ``no-mmap``: ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` set above any block a
  forward pass asks for, so that every block comes from the heap and stays mapped.

The kernels are the same under both; what differs is the cost of mapping, first-touching and
unmapping the sparse path's fresh buffers (its zero-filled outputs, the copies of X^T, the bias
adds over transposed outputs; ``workloads.backend.torch_cpu_sparse_linears``). Settings and
variants are interleaved, each run in its own process (the allocator reads its environment at
start), and each row keeps the fastest of ``--repeats`` forwards after two warm-up ones, the
minor page faults and system CPU time per forward (``getrusage``), and the machine's load.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from dse.cli.parser import Parser

SETTINGS = {
    "default": {},
    "no-mmap": {"MALLOC_MMAP_THRESHOLD_": str(2**31 - 1), "MALLOC_TRIM_THRESHOLD_": str(2**31 - 1)},
}
FIELDS = ("model", "batch", "variant", "allocator", "round", "min_s", "median_s",
          "minor_faults_per_forward", "sys_s_per_forward", "threads", "load_1min", "cpu",
          "date")


def _one(model: str, batch: int, variant: str, repeats: int, threads: int) -> dict:
    """One process's measurement (run in the child)."""
    import resource
    import statistics
    import time

    import torch

    import formats
    from dse.measure.kernels_cpu import build_model

    torch.set_num_threads(threads)
    fmt = None if variant == "dense" else formats.parse(variant)
    kernel = build_model(model, (3, 224, 224), batch, fmt)
    kernel.fn()
    kernel.fn()
    before = resource.getrusage(resource.RUSAGE_SELF)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        kernel.fn()
        times.append(time.perf_counter() - start)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"min_s": min(times), "median_s": statistics.median(times),
            "minor_faults_per_forward": (after.ru_minflt - before.ru_minflt) / repeats,
            "sys_s_per_forward": (after.ru_stime - before.ru_stime) / repeats}


def host_cpu() -> str:
    """The host CPU's model name (``/proc/cpuinfo``), else the platform's processor."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def build_parser() -> Parser:
    p = Parser(description=__doc__.split("\n\n")[0],
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="deit_small_patch16_224,vit_base_patch16_224")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--variants", default="dense,block4@87.5%")
    p.add_argument("--repeats", type=int, default=5, help="timed forwards per process")
    p.add_argument("--rounds", type=int, default=2, help="processes per configuration")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, required=True, help="CSV to write (rows appended)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.child:  # model, batch, variant: print one JSON line
        model, batch, variant = args.child.split("|")
        print(json.dumps(_one(model, int(batch), variant, args.repeats, args.threads)))
        return 0
    import datetime

    cpu = host_cpu()
    configs = [(m, int(b), v) for m in args.models.split(",") for b in args.batches.split(",")
               for v in args.variants.split(",")]
    new = not args.out.exists()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        if new:
            writer.writeheader()
        for round_ in range(args.rounds):
            for model, batch, variant in configs:
                for setting, env in SETTINGS.items():
                    child = [sys.executable, "-m", "benchmarks.cpu.allocator_effect",
                             "--child", f"{model}|{batch}|{variant}", "--repeats",
                             str(args.repeats), "--threads", str(args.threads), "--out", "-"]
                    done = subprocess.run(child, env={**os.environ, **env}, text=True,
                                          capture_output=True, check=False)
                    if done.returncode != 0:
                        print(done.stderr, file=sys.stderr)
                        return 1
                    row = json.loads(done.stdout.strip().splitlines()[-1])
                    row.update(model=model, batch=batch, variant=variant, allocator=setting,
                               round=round_, threads=args.threads,
                               load_1min=os.getloadavg()[0], cpu=cpu,
                               date=datetime.datetime.now(datetime.UTC).isoformat(
                                   timespec="seconds"))
                    writer.writerow(row)
                    f.flush()
                    print(f"{model} b{batch} {variant:>14} {setting:>8}: "
                          f"{row['min_s'] * 1e3:8.1f} ms, {row['minor_faults_per_forward']:9.0f} "
                          f"faults, sys {row['sys_s_per_forward']:.3f} s, load "
                          f"{row['load_1min']:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
