"""The glibc main-arena replay and the malloc log reader, on hand-built sequences (no torch).

The expected figures are worked out by hand in the comments from glibc's rules: a request
of n bytes takes a chunk of align16(n + 8) bytes (at least 32); the heap grows by
``nb + top_pad + 32 - top``, rounded up to 4096; a free that leaves the top at or above the
trim threshold gives back ``align_down(top - 33 - top_pad, 4096)``.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.cpu.heap_replay import (
    OP_FREE,
    OP_MALLOC,
    OP_MARK,
    OP_MEMALIGN,
    Heap,
    Settings,
    replay,
    request_size,
)
from benchmarks.cpu.malloc_log import RECORD, MallocLog, blocks, module_at, read_log, summarise

BASE = 0x55550000  # page-aligned, as the initial program break is
PAD = 131072


def test_request_size():
    assert request_size(0) == 32
    assert request_size(24) == 32
    assert request_size(25) == 48
    assert request_size(200000) == 200016


def test_grow_trim_and_dynamic_threshold_by_hand():
    heap = Heap(BASE)
    # 200016 >= the 128 KiB mmap threshold and the top is empty: mapped, 49 pages.
    a = heap.malloc(200000)
    assert heap.mapped_bytes == 49 * 4096 and heap.grown_bytes == 0
    # Freeing it raises the mmap threshold to 200704 and the trim threshold to 401408.
    heap.free(a)
    assert (heap.mmap_threshold, heap.trim_threshold) == (200704, 401408)
    # Now 200016 < 200704: brk by 200016 + 131072 + 32 = 331120 -> 81 pages = 331776.
    b = heap.malloc(200000)
    assert b == BASE + 16 and heap.grown_bytes == 331776
    # Freed into the top: 331776 < 401408, no trim.
    heap.free(b)
    assert heap.shrunk_bytes == 0 and heap.brk == BASE + 331776
    c = heap.malloc(300000)  # 300016 from the top, no growth
    assert c == BASE + 16 and heap.grown_bytes == 331776
    # Top left 31760 < 100016 + 32: grow by 100016 + 131072 + 32 - 31760 = 199360 -> 49 pages.
    d = heap.malloc(100000)
    assert d == BASE + 300016 + 16 and heap.grown_bytes == 331776 + 200704
    assert heap.brk == BASE + 532480
    # c freed: not next to the top, so it becomes a free chunk; the top (132448) is small.
    heap.free(c)
    assert heap.shrunk_bytes == 0 and heap.free_at == {BASE: 300016}
    # d freed: coalesces with c and the top, top = 532480 >= 401408: trim
    # align_down(532480 - 33 - 131072, 4096) = 97 pages = 397312.
    heap.free(d)
    assert heap.shrunk_bytes == 397312 and heap.brk == BASE + 135168
    assert heap.top == BASE and heap.free_at == {}
    assert heap.brk_calls == 3


def test_small_frees_stay_in_the_tcache_and_pin_the_top():
    heap = Heap(BASE, Settings(mmap_threshold_bytes=1 << 30, trim_threshold_bytes=PAD,
                               dynamic=False))
    big = heap.malloc(300000)  # 300016 at BASE; brk 300016 + 131104 -> 106 pages
    small = heap.malloc(24)  # 32 bytes right after it
    assert small == BASE + 300016 + 16 and heap.grown_bytes == 106 * 4096
    heap.free(small)  # to the tcache: still in use for the arena
    heap.free(big)  # cannot reach the top past the cached chunk: no trim
    assert heap.shrunk_bytes == 0 and heap.free_at == {BASE: 300016}
    assert heap.malloc(24) == small  # the tcache hands the same chunk back (LIFO)


def test_eighth_small_free_goes_to_a_fastbin_and_consolidates_on_a_large_free():
    heap = Heap(BASE, Settings(mmap_threshold_bytes=1 << 30, trim_threshold_bytes=PAD,
                               dynamic=False))
    # The first 32 bytes grow the heap by 32 + 131072 + 32 -> 33 pages; 8 x 32 at BASE ..
    smalls = [heap.malloc(24) for _ in range(8)]
    # 200016 after them: top 135168 - 256 = 134912 is short by
    # 200016 + 131072 + 32 - 134912 = 196208 -> 48 pages.
    big = heap.malloc(200000)
    assert heap.grown_bytes == (33 + 48) * 4096
    for p in smalls:
        heap.free(p)  # 7 to the tcache, the 8th (the last) to a fastbin
    assert sum(len(v) for v in heap.tcache[0].values()) == 7 and heap.fast == {32: [BASE + 224]}
    # Freeing the big chunk: into the top (>= 64 KiB), so the fastbin is consolidated (the
    # 8th chunk joins the top too), and the top = 331776 - 224 >= 128 KiB: trim
    # align_down(331552 - 33 - 131072, 4096) = 48 pages.
    heap.free(big)
    assert heap.fast == {} and heap.top == BASE + 224
    assert heap.shrunk_bytes == 48 * 4096


def test_memalign_frees_its_lead_to_the_tcache():
    heap = Heap(BASE, Settings(mmap_threshold_bytes=1 << 30, dynamic=False))
    heap.malloc(8)  # a 32-byte chunk at BASE: the next chunk's memory is BASE + 48
    # 64-aligned memory: BASE + 48 -> BASE + 64 is 16 bytes away (< 32), so BASE + 128;
    # the lead (BASE + 32 .. BASE + 112) is an 80-byte chunk, cached.
    p = heap.memalign(64, 1000)
    assert p == BASE + 128 and p % 64 == 0
    assert heap.tcache[0] == {80: [BASE + 32]}
    # it took 1008 + 64 + 32 = 1104 bytes; after the 80-byte lead 1024 are left, not more
    # than 1008 + 32: the tail stays with the block.
    assert heap.used[BASE + 112] == 1024


def _events(*rows):
    return [tuple(r) for r in rows]


def test_replay_counts_growth_between_markers():
    # tcache struct 656 bytes first: the heap's first growth is 656 + 131104 -> 33 pages.
    events = _events(
        (OP_MARK, 1, 1, 0, 0, 0),
        (OP_MALLOC, 1, 200000, 0xA000, 0, 0x30D51),  # mapped (>= 128 KiB, top short)
        (OP_FREE, 1, 0, 0xA000, 0, 0x30D52 | 2),  # threshold 200704, trim 401408
        (OP_MARK, 1, 2, 0, 0, 0),
        (OP_MALLOC, 1, 199000, 0xB000, 0, 0x30961),  # 199008 < 200704: brk
        (OP_MARK, 1, 3, 0, 0, 0),
    )
    heap, marks = replay(events, BASE)
    assert [m["code"] for m in marks] == [1, 2, 3]
    assert marks[0]["grown_bytes"] == 33 * 4096
    assert marks[1]["grown_bytes"] == 33 * 4096 and heap.mapped_bytes == 49 * 4096
    # top left 135168 - 656 = 134512; 199008 + 131072 + 32 - 134512 = 195600 -> 48 pages
    assert marks[2]["grown_bytes"] - marks[1]["grown_bytes"] == 48 * 4096


def test_replay_skips_other_arenas():
    events = _events((OP_MALLOC, 2, 100, 0xC000, 0, 0x75),  # NON_MAIN_ARENA set
                     (OP_FREE, 2, 0, 0xC000, 0, 0x75))
    heap, _ = replay(events, BASE)
    assert set(heap.used) == {BASE}  # only the tcache struct


def _log(rows) -> MallocLog:
    data = np.zeros(len(rows), dtype=RECORD)
    for i, (op, size, addr, aux, head, brk) in enumerate(rows):
        data[i] = (i, op | (7 << 8), size, addr, aux, head, brk, 0)
    return MallocLog(data)


ROWS = [
    (OP_MALLOC, 24, 0x1010, 0, 0x31, 0x21000),
    (OP_MARK, 3, 0, 0, 0, 0x21000),
    (OP_MALLOC, 300000, 0x2010, 0, 0x493E1, 0x80000),  # brk +0x5F000
    (OP_MARK, 1001, 0, 0, 0, 0x80000),  # after module 0
    (OP_MEMALIGN, 1000, 0x80040, 64, 0x401, 0x80000),
    (OP_FREE, 0, 0x2010, 0, 0x493E1, 0x40000),  # brk -0x40000
    (OP_FREE, 0, 0x80040, 0, 0x401, 0x40000),
    (OP_MARK, 4, 0, 0, 0, 0x40000),
]


def test_log_reader_round_trip(tmp_path):
    path = tmp_path / "log.bin"
    _log(ROWS).records.tofile(path)
    log = read_log(path)
    assert len(log.records) == 8 and log.tid.tolist() == [7] * 8
    assert log.marks() == {3: 1, 1001: 3, 4: 7}
    assert log.window() == slice(1, 8)
    assert log.brk_moves(log.window()) == {"grown": 0x5F000, "shrunk": 0x40000, "moves": 2}


def test_blocks_and_summary_by_hand():
    log = _log(ROWS)
    made = blocks(log, log.window())
    assert [(b["index"], b["request_bytes"], b["call"], b["freed_after"]) for b in made] == \
        [(1, 300000, "malloc", 4), (3, 1000, "memalign", 5)]
    s = summarise(log, log.window())
    assert s["calls"] == 4 and s["allocs"] == 2 and s["frees"] == 2
    assert s["allocs_le_1k"] == 1 and s["allocs_le_1m"] == 1 and s["large_allocs"] == 1
    assert s["large_bytes"] == 300000 and s["peak_live_bytes"] == 301000


def test_module_markers():
    rows = [(OP_MARK, 1000, 0, 0, 0, 0), (OP_MALLOC, 8, 0x10, 0, 0x21, 0),
            (OP_MARK, 1002, 0, 0, 0, 0), (OP_MALLOC, 8, 0x30, 0, 0x21, 0),
            (OP_MARK, 1003, 0, 0, 0, 0), (OP_MARK, 1001, 0, 0, 0, 0),
            (OP_MALLOC, 8, 0x50, 0, 0x21, 0)]
    log = _log(rows)
    got = module_at(log, slice(0, 7), ["model", "blocks.0"])
    assert got == ["model", "model", "blocks.0", "blocks.0", "model", "", ""]


@pytest.mark.parametrize("n", [1, 1000, 1 << 20])
def test_request_size_is_sixteen_aligned(n):
    assert request_size(n) % 16 == 0 and request_size(n) >= n + 8


def test_replay_blocks_regrows_what_each_forward_trims():
    from benchmarks.cpu.heap_replay import replay_blocks

    # Two 200000-byte blocks (chunks 200016) live together, trim threshold 400 KiB (so the
    # mmap threshold, 200 KiB, is above them). Forward 1: a grows the empty heap by
    # 200016 + 131104 -> 81 pages; b finds 331776 - 200016 = 131760 left and grows it by
    # 200016 + 131104 - 131760 = 199360 -> 49 pages (brk 532480). a freed: not at the top.
    # b freed: both and the top make 532480 >= 409600, trimmed by
    # align_down(532480 - 33 - 131072, 4096) = 97 pages, leaving 33. Each later forward
    # grows 135168 -> 331776 (48 pages) -> 532480 (49 pages) again: 97 pages.
    blocks = [(200000, 0, 2), (200000, 1, 3)]
    assert replay_blocks(blocks, 409600) == [130 * 4096, 97 * 4096, 97 * 4096]
    # With a threshold above the heap nothing is trimmed: one growth, never again.
    assert replay_blocks(blocks, 1 << 30) == [130 * 4096, 0, 0]


def test_mmap_threshold_from_the_frees_of_mapped_chunks():
    from benchmarks.cpu.malloc_log import mmap_threshold_at

    rows = [(OP_FREE, 0, 0x10, 0, 0x30002, 0),  # mapped 196608: raises it
            (OP_FREE, 0, 0x20, 0, 0x50001, 0),  # 327680, not mapped: no effect
            (OP_FREE, 0, 0x30, 0, (40 << 20) | 2, 0),  # mapped but over 32 MiB: no effect
            (OP_FREE, 0, 0x40, 0, 0x28002, 0)]  # mapped, smaller: no effect
    log = _log(rows)
    assert mmap_threshold_at(log, 0) == 131072
    assert mmap_threshold_at(log, 4) == 0x30000
