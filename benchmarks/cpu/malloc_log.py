"""Every malloc call of one CPU forward pass, and what glibc's rules make of them.

    python -m benchmarks.cpu.malloc_log --out benchmarks/cpu/results/malloc_log.csv

:mod:`benchmarks.cpu.allocator_trace` showed that a sparse timm model's extra page faults
come from the main heap's top being trimmed by ``brk`` and grown again within each forward.
This script records what the allocator is asked: it builds ``malloc_log.c`` (an
``LD_PRELOAD`` wrapper of glibc's malloc, free, calloc, realloc, memalign, posix_memalign,
aligned_alloc, valloc and pvalloc) with ``gcc`` into a temporary folder, and runs each
configuration in a fresh process under it. The process builds the model
(:func:`dse.measure.kernels_cpu.build_model`), then runs three forwards, each after a marker
record (codes 1, 2 and 3; code 4 closes the third). With ``--hooks``, every module's forward
also writes a marker before and after it (code ``1000 + 2 * index`` and ``+ 1``; the
modules' names go beside the log), so that each block can be tied to the module that asked
for it; the hooks add a few small calls of their own.

Every record keeps the call, the thread, the request, the address, glibc's chunk size word
and the program break after the call, so the brk regrowth of a forward is read off the
records themselves; after the third forward glibc's own ``malloc_info`` goes beside the log
(``.malloc_info.xml``). Each row of ``--out`` is one configuration's third forward: its
calls, its blocks by size, the bytes asked in blocks over 128 KiB, its peak live bytes, the
recorded brk growth (and the first two forwards'), and three models of it from
:mod:`benchmarks.cpu.heap_replay`:

- ``replay_*``: glibc's rules over the whole recorded sequence, from the process's start;
- ``state_*``: the same rules from the heap as the records leave it before the first forward
  (live chunks at their recorded addresses; glibc's internal fragments, such as the lead
  and tail that ``posix_memalign`` frees into the tcache, are not in the records, so this
  heap is less fragmented than the real one);
- ``blocks_only_grown_bytes``: only the forward's blocks over 64 KiB (sizes and lifetimes),
  plain ``malloc`` on an empty heap, the trim threshold the records imply, third of three
  forwards: the model a trace of tensor sizes and lifetimes could feed.

``--large`` lists the forward's blocks over 128 KiB with their lifetimes (and modules, with
``--hooks``). The raw logs (about 200 MB each, mostly the imports) stay in a temporary
folder unless ``--keep`` names one; ``--reuse`` analyses the logs already there. Needs
``gcc`` and the ``export`` extra (torch, timm).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.cpu.heap_replay import (
    IS_MMAPPED,
    NON_MAIN_ARENA,
    OP_CALLOC,
    OP_FREE,
    OP_MALLOC,
    OP_MARK,
    OP_MEMALIGN,
    OP_REALLOC,
    TCACHE_STRUCT,
    Heap,
    Settings,
    replay,
    replay_blocks,
)
from dse.cli.parser import Parser

SOURCE = Path(__file__).with_name("malloc_log.c")
RECORD = np.dtype([(name, "<u8") for name in ("seq", "op_tid", "size", "addr", "aux", "head",
                                               "brk", "old_head")])
SIZE_BINS = (("le_1k", 1024), ("le_64k", 65536), ("le_128k", 131072), ("le_1m", 1 << 20),
             ("le_4m", 4 << 20), ("le_16m", 16 << 20), ("gt_16m", None))
LARGE = 128 * 1024
MEDIUM = 64 * 1024  # the blocks the block-only model keeps
FORWARD = (3, 4)  # the third forward lies between markers 3 and 4
HOOK_BASE = 1000
FIELDS = ("model", "batch", "variant", "threads", "hooks", "calls", "allocs", "frees",
          *(f"allocs_{name}" for name, _ in SIZE_BINS), "large_allocs", "large_bytes",
          "peak_live_bytes", "brk_grown_bytes", "brk_shrunk_bytes", "brk_moves",
          "replay_grown_bytes", "replay_shrunk_bytes", "replay_brk_moves",
          "replay_mapped_bytes", "fwd1_brk_grown_bytes", "fwd2_brk_grown_bytes",
          "replay_fwd1_grown_bytes", "replay_fwd2_grown_bytes", "state_grown_bytes",
          "state_fwd1_grown_bytes", "state_fwd2_grown_bytes", "blocks_only_grown_bytes",
          "trim_threshold_bytes",
          "cpu", "date")
LARGE_FIELDS = ("model", "batch", "variant", "index", "request_bytes", "chunk_bytes", "call",
                "freed_after", "module", "brk_before", "brk_after")
ALLOCS = (OP_MALLOC, OP_CALLOC, OP_REALLOC, OP_MEMALIGN)


@dataclass
class MallocLog:
    """A parsed log: one row per call, in sequence order."""

    records: np.ndarray

    @property
    def op(self) -> np.ndarray:
        return (self.records["op_tid"] & 0xFF).astype(np.int64)

    @property
    def tid(self) -> np.ndarray:
        return (self.records["op_tid"] >> 8).astype(np.int64)

    def marks(self) -> dict[int, int]:
        """Marker code -> record index (the first marker of each code)."""
        at = np.nonzero(self.op == OP_MARK)[0]
        out: dict[int, int] = {}
        for i, code in zip(at.tolist(), self.records["size"][at].tolist(), strict=True):
            out.setdefault(int(code), int(i))
        return out

    def window(self, begin: int = FORWARD[0], end: int = FORWARD[1]) -> slice:
        marks = self.marks()
        return slice(marks[begin], marks[end] + 1)

    def events(self):
        """``(op, tid, size, addr, aux, head)`` per record, as :func:`heap_replay.replay`
        takes them."""
        r = self.records
        return zip(self.op.tolist(), self.tid.tolist(), r["size"].tolist(), r["addr"].tolist(),
                   r["aux"].tolist(), r["head"].tolist(), strict=True)

    def main_tid(self) -> int:
        return int(self.tid[0])

    def heap_base(self) -> int:
        """Where the main heap starts: the first main-thread block from the heap sits right
        after malloc's own first chunk (the thread's tcache)."""
        op, tid, head = self.op, self.tid, self.records["head"]
        ok = (np.isin(op, ALLOCS) & (tid == self.main_tid())
              & ((head & (IS_MMAPPED | NON_MAIN_ARENA)) == 0) & (self.records["addr"] != 0))
        first = int(np.argmax(ok))
        return int(self.records["addr"][first]) - 16 - TCACHE_STRUCT

    def brk_moves(self, where: slice) -> dict:
        """The recorded break's moves over ``where`` (from the record before it)."""
        brk = self.records["brk"].astype(np.int64)
        start = max(where.start - 1, 0)
        steps = np.diff(brk[start:where.stop])
        steps = steps[brk[start + 1:where.stop] != 0]
        return {"grown": int(steps[steps > 0].sum()), "shrunk": int(-steps[steps < 0].sum()),
                "moves": int((steps != 0).sum())}


def state_at(log: MallocLog, stop: int) -> dict:
    """The main heap as the recorded process left it before record ``stop``: its live
    chunks (address -> size, from glibc's size words), the chunks each thread's tcache
    holds (glibc's rules over the recorded frees: a thread's first 7 frees of a chunk of at
    most 1040 bytes are cached until a malloc of that size takes them back), the break, and
    the mmap and trim thresholds (raised by each free of a mapped chunk bigger than the
    threshold, up to 32 MiB)."""
    r = log.records[:stop]
    ops, tids = log.op[:stop].tolist(), log.tid[:stop].tolist()
    addrs, heads, aux = r["addr"].tolist(), r["head"].tolist(), r["aux"].tolist()
    old_heads = r["old_head"].tolist()
    live: dict[int, int] = {}
    cached: dict[int, dict[int, list[int]]] = {}
    where_cached: dict[int, list[int]] = {}
    threshold = 128 * 1024
    for o, tid, addr, head, a, old in zip(ops, tids, addrs, heads, aux, old_heads, strict=True):
        if o == OP_MARK:
            continue
        if o == OP_FREE or (o == OP_REALLOC and a):
            gone, word = (addr, head) if o == OP_FREE else (a, old)
            if word & IS_MMAPPED:
                size = word & ~7
                if threshold < size <= 32 << 20:
                    threshold = size
                continue
            p = gone - 16
            size = live.pop(p, None)
            if size is None:
                continue
            bins = cached.setdefault(tid, {}).setdefault(size, [])
            if o == OP_FREE and size <= 1040 and len(bins) < 7:
                bins.append(p)
                where_cached[p] = bins
                live[p] = size  # cached chunks stay in use for the arena
        if o != OP_FREE and addr and not head & (IS_MMAPPED | NON_MAIN_ARENA):
            p, size = addr - 16, head & ~7
            bins = where_cached.pop(p, None)
            if bins is not None:  # taken back (or never cached: glibc's count was full)
                bins.remove(p)
            live[p] = size
    return {"live": live, "cached": cached, "brk": int(log.records["brk"][stop - 1]),
            "mmap_threshold": threshold, "trim_threshold": 2 * threshold}


def mmap_threshold_at(log: MallocLog, stop: int) -> int:
    """glibc's mmap threshold before record ``stop``: 128 KiB raised to each freed mapped
    chunk bigger than it, up to 32 MiB (the trim threshold is twice it)."""
    r = log.records[:stop]
    mapped = (log.op[:stop] == OP_FREE) & ((r["head"] & IS_MMAPPED) != 0)
    sizes = (r["head"][mapped] & ~np.uint64(7)).astype(np.int64)
    sizes = sizes[sizes <= 32 << 20]
    return int(max(128 * 1024, sizes.max(initial=0)))


def read_log(path: Path) -> MallocLog:
    """A log written by ``malloc_log.c``'s ``mlog_dump``."""
    data = np.fromfile(path, dtype=RECORD)
    return MallocLog(data)


def blocks(log: MallocLog, where: slice) -> list[dict]:
    """Every block allocated in ``where``: its index (from the window's start), request,
    chunk size, call, and the index of the call that freed it (None if it outlived the
    window)."""
    r = log.records[where]
    op = log.op[where].tolist()
    sizes, addrs = r["size"].tolist(), r["addr"].tolist()
    heads, aux = r["head"].tolist(), r["aux"].tolist()
    open_: dict[int, dict] = {}
    out = []
    for i, o in enumerate(op):
        if o == OP_FREE or (o == OP_REALLOC and aux[i]):
            gone = open_.pop(addrs[i] if o == OP_FREE else aux[i], None)
            if gone is not None:
                gone["freed_after"] = i
        if o in ALLOCS and addrs[i]:
            block = {"index": i, "request_bytes": sizes[i], "chunk_bytes": heads[i] & ~7,
                     "call": {OP_MALLOC: "malloc", OP_CALLOC: "calloc", OP_REALLOC: "realloc",
                              OP_MEMALIGN: "memalign"}[o], "freed_after": None,
                     "mapped": bool(heads[i] & IS_MMAPPED)}
            open_[addrs[i]] = block
            out.append(block)
    return out


def summarise(log: MallocLog, where: slice) -> dict:
    """Counts for one window: calls, blocks by request size, blocks over 128 KiB and their
    bytes, and the peak of the bytes live in blocks allocated in the window."""
    op = log.op[where]
    made = blocks(log, where)
    sizes = np.array([b["request_bytes"] for b in made], dtype=np.int64)
    out = {"calls": int((op != OP_MARK).sum()), "allocs": len(made),
           "frees": int((op == OP_FREE).sum())}
    lower = 0
    for name, upper in SIZE_BINS:
        hi = np.inf if upper is None else upper
        out[f"allocs_{name}"] = int(((sizes > lower) & (sizes <= hi)).sum())
        lower = upper or lower
    out["large_allocs"] = int((sizes > LARGE).sum())
    out["large_bytes"] = int(sizes[sizes > LARGE].sum())
    delta = np.zeros(where.stop - where.start + 1, dtype=np.int64)
    for b in made:
        delta[b["index"]] += b["request_bytes"]
        if b["freed_after"] is not None:
            delta[b["freed_after"]] -= b["request_bytes"]
    out["peak_live_bytes"] = int(np.cumsum(delta).max()) if len(made) else 0
    return out


def module_at(log: MallocLog, where: slice, names: list[str]) -> list[str]:
    """The innermost module whose hooks bracket each record of ``where`` ('' outside)."""
    op = log.op[where].tolist()
    codes = log.records["size"][where].tolist()
    stack: list[str] = []
    out = []
    for o, code in zip(op, codes, strict=True):
        if o == OP_MARK and code >= HOOK_BASE:
            index, post = divmod(code - HOOK_BASE, 2)
            if post:
                if stack:
                    stack.pop()
            else:
                stack.append(names[index])
        out.append(stack[-1] if stack else "")
    return out


# -- the recorded process ------------------------------------------------------------------
def _child(model: str, batch: int, variant: str, threads: int, hooks: bool, log: Path) -> None:
    import ctypes

    import torch

    import formats
    from dse.measure.kernels_cpu import build_model

    lib = ctypes.CDLL(os.environ["DSE_MALLOC_LOG_SO"])
    lib.mlog_mark.argtypes = [ctypes.c_uint64]
    lib.mlog_mark.restype = None  # a forward pre-hook's result would replace the input
    lib.mlog_dump.argtypes = [ctypes.c_char_p]
    lib.mlog_dump.restype = ctypes.c_long
    torch.set_num_threads(threads)
    fmt = None if variant == "dense" else formats.parse(variant)
    kernel = build_model(model, (3, 224, 224), batch, fmt)
    if hooks:
        net = _model_of(kernel.fn)
        names = []
        for index, (name, module) in enumerate(net.named_modules()):
            names.append(name or "model")
            pre, post = HOOK_BASE + 2 * index, HOOK_BASE + 2 * index + 1
            module.register_forward_pre_hook(lambda *_, c=pre: lib.mlog_mark(c))
            module.register_forward_hook(lambda *_, c=post: lib.mlog_mark(c))
        log.with_suffix(".modules.json").write_text(json.dumps(names))
    for code in (1, 2, 3):
        lib.mlog_mark(code)
        kernel.fn()
    lib.mlog_mark(4)
    # glibc's own account of its arenas (malloc_info's XML), to check a replayed state by
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    stream = libc.fopen(str(log.with_suffix(".malloc_info.xml")).encode(), b"w")
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    lib.mlog_mark(5)
    if lib.mlog_dump(str(log).encode()) < 0:
        raise OSError(f"malloc_log: could not write {log}")


def _model_of(fn):
    """The torch module a :func:`build_model` kernel's ``fn`` closes over."""
    import torch

    cells = [c.cell_contents for c in fn.__closure__ or ()]
    return next(c for c in cells if isinstance(c, torch.nn.Module))


def build_library(folder: Path) -> Path:
    so = folder / "libmalloc_log.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(so), str(SOURCE)], check=True)
    return so


def record(model: str, batch: int, variant: str, threads: int, hooks: bool, so: Path,
           log: Path) -> None:
    env = {**os.environ, "LD_PRELOAD": str(so), "DSE_MALLOC_LOG_SO": str(so)}
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_"):
        env.pop(name, None)
    child = [sys.executable, "-m", "benchmarks.cpu.malloc_log", "--child",
             f"{model}|{batch}|{variant}|{int(hooks)}|{log}", "--threads", str(threads),
             "--out", "-"]
    done = subprocess.run(child, env=env, text=True, capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"malloc_log: the recorded process failed:\n{done.stderr}")


def analyse(log: MallocLog, names: list[str] | None = None) -> tuple[dict, list[dict]]:
    """One configuration's row and its large blocks."""
    where = log.window()
    row = summarise(log, where)
    moves = log.brk_moves(where)
    row.update(brk_grown_bytes=moves["grown"], brk_shrunk_bytes=moves["shrunk"],
               brk_moves=moves["moves"])
    marks = log.marks()
    for k in (1, 2):
        row[f"fwd{k}_brk_grown_bytes"] = log.brk_moves(slice(marks[k], marks[k + 1] + 1))["grown"]
    heap, replay_marks = replay(log.events(), log.heap_base())
    at = {m["code"]: m for m in replay_marks}
    row.update(replay_grown_bytes=at[4]["grown_bytes"] - at[3]["grown_bytes"],
               replay_shrunk_bytes=at[4]["shrunk_bytes"] - at[3]["shrunk_bytes"],
               replay_brk_moves=at[4]["brk_calls"] - at[3]["brk_calls"],
               replay_mapped_bytes=at[4]["mapped_bytes"] - at[3]["mapped_bytes"],
               replay_fwd1_grown_bytes=at[2]["grown_bytes"] - at[1]["grown_bytes"],
               replay_fwd2_grown_bytes=at[3]["grown_bytes"] - at[2]["grown_bytes"])
    start = marks[1]
    state = state_at(log, start)
    base = log.heap_base()
    heap = Heap.from_state(base, state["brk"], state["live"], state["cached"], Settings(),
                           state["mmap_threshold"], state["trim_threshold"])
    live = {p + 16: p + 16 for p in state["live"]}
    tail = MallocLog(log.records[start:])
    _, at = replay(tail.events(), base, heap=heap, live=live)
    at = {m["code"]: m for m in at}
    row.update(state_grown_bytes=at[4]["grown_bytes"] - at[3]["grown_bytes"],
               state_fwd1_grown_bytes=at[2]["grown_bytes"] - at[1]["grown_bytes"],
               state_fwd2_grown_bytes=at[3]["grown_bytes"] - at[2]["grown_bytes"])
    made = [b for b in blocks(log, where) if b["request_bytes"] > MEDIUM and not b["mapped"]]
    trim = 2 * mmap_threshold_at(log, where.start)
    row["blocks_only_grown_bytes"] = replay_blocks(
        [(b["request_bytes"], b["index"], b["freed_after"]) for b in made], trim)[-1]
    row["trim_threshold_bytes"] = trim
    modules = module_at(log, where, names) if names else None
    brk = log.records["brk"][where].astype(np.int64)
    large = []
    for b in blocks(log, where):
        if b["request_bytes"] <= LARGE:
            continue
        i = b["index"]
        large.append({"index": i, "request_bytes": b["request_bytes"],
                      "chunk_bytes": b["chunk_bytes"], "call": b["call"],
                      "freed_after": b["freed_after"],
                      "module": modules[i] if modules else "",
                      "brk_before": int(brk[i - 1] - brk[0]) if i else 0,
                      "brk_after": int(brk[i] - brk[0])})
    return row, large


def _replay_log(path: Path) -> int:
    """Print the brk growth glibc's rules give between the markers of a kept log."""
    log = read_log(path)
    _, marks = replay(log.events(), log.heap_base())
    marks = [m for m in marks if m["code"] < 1000]  # not the per-module markers of --hooks
    for a, b in zip(marks, marks[1:], strict=False):
        print(f"marker {a['code']}..{b['code']}: replayed brk grew "
              f"{(b['grown_bytes'] - a['grown_bytes']) / 1e6:.1f} MB")
    return 0


def build_parser() -> Parser:
    p = Parser(description=__doc__.split("\n\n")[0],
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="deit_small_patch16_224")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--variants", default="dense,block4@87.5%")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--hooks", action="store_true", help="a marker around every module")
    p.add_argument("--out", type=Path, help="CSV to write (rows appended; needed to record)")
    p.add_argument("--large", type=Path, help="CSV of the blocks over 128 KiB (appended)")
    p.add_argument("--keep", type=Path, help="folder to keep the raw logs in")
    p.add_argument("--reuse", action="store_true",
                   help="analyse the logs already in --keep instead of recording them again")
    p.add_argument("--replay", type=Path, metavar="LOG",
                   help="print glibc's replayed brk growth between the markers of a kept log")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if args.replay is not None:
        return _replay_log(args.replay)
    if args.child:
        model, batch, variant, hooks, log = args.child.split("|")
        _child(model, int(batch), variant, args.threads, hooks == "1", Path(log))
        return 0
    if args.out is None:
        p.error("--out is needed to record (or give --replay LOG)")
    if shutil.which("gcc") is None:
        print("malloc_log: gcc is not installed; install it (apt install gcc)", file=sys.stderr)
        return 2
    from benchmarks.cpu.allocator_effect import host_cpu

    configs = [(m, int(b), v) for m in args.models.split(",") for b in args.batches.split(",")
               for v in args.variants.split(",")]
    cpu = host_cpu()
    with tempfile.TemporaryDirectory() as tmp:
        so = build_library(Path(tmp))
        keep = args.keep or Path(tmp)
        keep.mkdir(parents=True, exist_ok=True)
        for model, batch, variant in configs:
            name = f"{model}_b{batch}_{variant.replace('@', '_').replace('%', 'pc')}"
            log_path = keep / f"{name}{'_hooks' if args.hooks else ''}.bin"
            if not (args.reuse and log_path.exists()):
                try:
                    record(model, batch, variant, args.threads, args.hooks, so, log_path)
                except RuntimeError as err:
                    print(err, file=sys.stderr)
                    return 1
            log = read_log(log_path)
            names_path = log_path.with_suffix(".modules.json")
            names = json.loads(names_path.read_text()) if args.hooks else None
            row, large = analyse(log, names)
            row.update(model=model, batch=batch, variant=variant, threads=args.threads,
                       hooks=int(args.hooks), cpu=cpu,
                       date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"))
            _append(args.out, FIELDS, [row])
            if args.large:
                _append(args.large, LARGE_FIELDS,
                        [{**b, "model": model, "batch": batch, "variant": variant}
                         for b in large])
            print(f"{model} b{batch} {variant:>14}: {row['allocs']} blocks, "
                  f"{row['large_allocs']} over 128 KiB ({row['large_bytes'] / 1e6:.1f} MB); "
                  f"brk grew {row['brk_grown_bytes'] / 1e6:.1f} MB, replay "
                  f"{row['replay_grown_bytes'] / 1e6:.1f} MB, from the recorded state "
                  f"{row['state_grown_bytes'] / 1e6:.1f} MB, blocks over 64 KiB only "
                  f"{row['blocks_only_grown_bytes'] / 1e6:.1f} MB", flush=True)
    return 0


def _append(path: Path, fields, rows) -> None:
    new = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fields, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    raise SystemExit(main())
