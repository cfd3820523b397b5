"""What a first-touch page fault costs on this host, and what a page of regrown heap costs.

    python -m benchmarks.cpu.page_faults --out benchmarks/cpu/results/page_faults.txt

Under glibc's defaults a CPU sparse whole model at batch 8 trims its heap's top and grows it
again every forward (``benchmarks/cpu/results/malloc_log.md``): each regrown page is mapped
by ``brk``, faulted in (the kernel zeroes it) at its first write, and given back by the next
trim. This script times those steps on fresh anonymous memory, per 4 KiB page, fastest of
``--repeats`` at each size:

- ``mmap touch``: one byte written per page of a fresh ``mmap`` (numpy, one thread), minus
  the same writes once the pages are resident: the fault alone;
- ``brk regrow``: ``malloc`` of a block served from the heap's top (``mallopt``: mmap
  threshold 32 MiB, trim threshold 128 KiB), one byte written per page, ``free`` (which
  trims the top); minus the same cycle with trimming off (the pages stay): what one regrown
  page costs, the ``brk`` calls and the trim included. This is how the sparse path's pages
  fault (``benchmarks/cpu/results/allocator_trace.csv``);
- ``fill N threads``: torch ``fill_`` of fresh pages minus ``fill_`` of resident ones, with
  torch's thread count N (the whole models ran with 2): what an op that writes fresh pages
  pays beyond the same op on resident ones, faults taken by N threads at once.

``benchmarks/cpu/faults_per_forward.py`` counts the pages a whole model faults per forward;
times these figures give what the faults cost it (the whole-model expectation does not charge
them: issue 23).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from dse.cli.parser import Parser

from .allocator_effect import host_cpu

PAGE = 4096
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3


def _touch(view) -> None:
    view[::PAGE] = 1


FAULTS: list[int] = []  # minor faults of the latest _best's runs, per run


def _minflt() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _best(fn, repeats: int) -> float:
    best, before = float("inf"), _minflt()
    for _ in range(repeats):
        best = min(best, fn())
    FAULTS.append((_minflt() - before) // repeats)
    return best


def mmap_touch(size: int, repeats: int) -> tuple[float, float]:
    """(fresh, resident): seconds to write one byte per page of a fresh mapping, and of the
    same mapping again."""
    import numpy as np

    def fresh() -> float:
        m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        view = np.frombuffer(m, dtype=np.uint8)
        t = time.perf_counter()
        _touch(view)
        t = time.perf_counter() - t
        del view
        m.close()
        return t

    kept = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    pages = [np.frombuffer(kept, dtype=np.uint8)]
    _touch(pages[0])

    def resident() -> float:
        t = time.perf_counter()
        _touch(pages[0])
        return time.perf_counter() - t

    out = (_best(fresh, repeats), _best(resident, repeats))
    pages.clear()
    kept.close()
    return out


def brk_cycle(size: int, repeats: int, trim: bool, threads: int = 0) -> tuple[float, bool]:
    """Seconds of ``malloc``, one byte written per page (``threads`` 0) or a torch ``fill_``
    with that many threads, ``free`` of a heap block (trimmed after each free when ``trim``),
    and whether the block came from the heap (below the program break)."""
    import numpy as np
    import torch

    if threads:
        torch.set_num_threads(threads)

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.sbrk.restype = ctypes.c_void_p
    libc.sbrk.argtypes = [ctypes.c_long]
    libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)
    libc.mallopt(M_TOP_PAD, 128 << 10)
    libc.mallopt(M_TRIM_THRESHOLD, (128 << 10) if trim else (1 << 30))
    in_heap = True

    def cycle() -> float:
        nonlocal in_heap
        t = time.perf_counter()
        p = libc.malloc(size)
        view = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(p))
        if threads:
            torch.from_numpy(view).fill_(1)
        else:
            _touch(view)
        del view
        libc.free(p)
        t = time.perf_counter() - t
        in_heap = in_heap and p < libc.sbrk(0)
        return t

    cycle()  # the heap's first growth to this size, either way
    return _best(cycle, repeats), in_heap


def torch_fill(size: int, repeats: int, threads: int) -> tuple[float, float]:
    """(fresh, resident): seconds of torch ``fill_`` over a fresh mapping and a resident one."""
    import torch

    torch.set_num_threads(threads)

    def fresh() -> float:
        m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        x = torch.frombuffer(m, dtype=torch.float32)
        t = time.perf_counter()
        x.fill_(1.0)
        t = time.perf_counter() - t
        del x
        m.close()
        return t

    kept = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    tensors = [torch.frombuffer(kept, dtype=torch.float32)]
    tensors[0].fill_(0.0)

    def resident() -> float:
        t = time.perf_counter()
        tensors[0].fill_(1.0)
        return time.perf_counter() - t

    out = (_best(fresh, repeats), _best(resident, repeats))
    tensors.clear()
    kept.close()
    return out


def _one(method: str, size: int, repeats: int, threads: int) -> tuple:
    """(fresh s, resident s, whether in the heap, faults per fresh run) of one method."""
    FAULTS.clear()
    if method == "touch":
        return (*mmap_touch(size, repeats), True, FAULTS[0])
    if method == "fill":
        return (*torch_fill(size, repeats, threads), True, FAULTS[0])
    trimmed, in_heap = brk_cycle(size, repeats, trim=True, threads=threads)
    kept, in_heap_kept = brk_cycle(size, repeats, trim=False, threads=threads)
    return trimmed, kept, in_heap and in_heap_kept, FAULTS[0]


def _child(method: str, size: int, repeats: int, threads: int) -> tuple:
    """:func:`_one` in a fresh process: a clean heap, glibc's settings as it starts."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.cpu.page_faults", "--one",
                          f"{method},{size},{repeats},{threads}"], check=True,
                         capture_output=True, text=True).stdout
    return tuple(json.loads(out.strip().splitlines()[-1]))


def build_parser() -> Parser:
    p = Parser(description=__doc__.split("\n\n")[0],
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes-mib", default="4,16,30", help="block sizes, MiB (at most 32: "
                   "glibc serves larger blocks by mmap whatever its threshold)")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--threads", default="1,2", help="torch thread counts for the fill rows")
    p.add_argument("--out", type=Path)
    p.add_argument("--one", help=argparse.SUPPRESS)  # a child's job: METHOD,SIZE,REPEATS,N
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.one:
        method, size, repeats, n = args.one.split(",")
        print(json.dumps(_one(method, int(size), int(repeats), int(n))))
        return 0
    if args.out is None:
        print("page_faults: give --out FILE (the results text)", file=sys.stderr)
        return 2
    try:
        sizes = [int(float(s) * (1 << 20)) for s in args.sizes_mib.split(",")]
        threads = [int(t) for t in args.threads.split(",")]
    except ValueError:
        print("page_faults: --sizes-mib and --threads take comma-separated numbers, e.g. 4,16",
              file=sys.stderr)
        return 2
    if not sizes or any(s <= 0 or s > 32 << 20 for s in sizes) or any(t < 1 for t in threads):
        print("page_faults: give --sizes-mib in (0, 32] and --threads >= 1", file=sys.stderr)
        return 2
    rows = []
    for size in sizes:
        jobs = [("mmap touch", "touch", 0), ("brk regrow", "brk", 0)]
        for n in threads:
            jobs += [(f"brk fill {n} thr", "brk", n), (f"fill {n} thr", "fill", n)]
        for label, method, n in jobs:
            rows.append((label, size, size // PAGE, *_child(method, size, args.repeats, n)))
    command = "python -m benchmarks.cpu.page_faults " + " ".join(
        argv if argv is not None else sys.argv[1:])
    lines = [f"$ {command}",
             f"host: {host_cpu()}, {os.cpu_count()} CPUs, {platform.platform()}, "
             f"glibc {platform.libc_ver()[1]}; fastest of {args.repeats} per row; "
             f"load average {os.getloadavg()[0]:.2f} at the end",
             "",
             f"{'method':<16}{'MiB':>6}{'pages':>8}{'fresh ms':>10}{'resident ms':>13}"
             f"{'us per page':>13}{'faults':>8}{'in heap':>9}"]
    per_page: dict[str, list[float]] = {}
    for method, size, pages, fresh, resident, heap, faults in rows:
        us = (fresh - resident) / pages * 1e6
        per_page.setdefault(method, []).append(us)
        lines.append(f"{method:<16}{size / (1 << 20):>6.0f}{pages:>8}{fresh * 1e3:>10.3f}"
                     f"{resident * 1e3:>13.3f}{us:>13.3f}{faults:>8}{'yes' if heap else 'NO':>9}")
    lines.append("")
    lines.append("faults: minor page faults per fresh run (getrusage). us per page: "
                 "(fresh - resident) / pages; median over sizes: " + ", ".join(
        f"{m} {sorted(v)[len(v) // 2]:.3f}" for m, v in per_page.items()))
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
