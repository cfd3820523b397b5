"""A replay of glibc's main-arena malloc rules (2.36, x86-64) over a recorded call sequence.

    python -m benchmarks.cpu.malloc_log --replay LOG.bin   # a log malloc_log --keep kept

It answers one question: how far does the heap's end (the program break, moved by ``brk``)
rise and fall over a sequence of malloc calls, under glibc's default settings? The rules,
from glibc's ``malloc/malloc.c`` (2.36; Debian's ``GLIBC 2.36-9``):

- a request of ``n`` bytes takes a chunk of ``max(32, align16(n + 8))`` bytes;
- ``free`` of a chunk of at most 1040 bytes goes to the calling thread's tcache (7 per size)
  and stays in use for the arena; past that, chunks of at most 128 bytes go to a fastbin
  (also still in use, no coalescing) until a consolidation;
- ``malloc`` takes from the tcache first (not ``calloc``, ``realloc`` or ``memalign``,
  which call ``_int_malloc``); then a fastbin; for a request of 1024 bytes or more any
  fastbin chunks are consolidated first; then the smallest free chunk that fits (glibc's
  bins give a best fit, split with the remainder left free); then the top chunk; if the top
  is short and fastbin chunks exist, they are consolidated and the search repeats;
- a request the top cannot serve is mapped by ``mmap`` if at least the mmap threshold
  (128 KiB at start), else the heap grows by ``brk``: ``nb + top_pad + MINSIZE`` minus the
  top's size, rounded up to a page (``top_pad`` is 128 KiB);
- ``free`` of a mapped chunk bigger than the mmap threshold (and at most 32 MiB) raises the
  threshold to that chunk's size and the trim threshold to twice it;
- ``free`` of a heap chunk coalesces it with free neighbours (into the top if it borders
  it); if the result is at least 64 KiB (``FASTBIN_CONSOLIDATION_THRESHOLD``), fastbins are
  consolidated, and if the top chunk is then at least the trim threshold, the heap is
  trimmed to ``top_pad`` (``systrim``: ``align_down(top - 32 - 1 - top_pad, page)``
  returned);
- ``memalign`` (``posix_memalign``, ``aligned_alloc``) with an alignment above 16 takes
  ``nb + align + 32`` and frees the misaligned lead and any tail above 32 bytes (``_int_free``:
  both can land in the tcache);
- ``realloc`` shrinks in place, grows into the top or a free next chunk, or moves.

Also modelled: the unsorted bin (frees and split remainders go there; a malloc scans it
oldest first, takes an exact fit, uses the last remainder for a lone small request, and bins
the rest), a small bin's exact fit (oldest first, the rest of the bin stashed in the
tcache), and fastbin chunks handed back through the tcache.

Left out: glibc's exact order among binned chunks of one size (small bins oldest first,
large bins newest first here), and other arenas (calls whose recorded chunk carries glibc's
``NON_MAIN_ARENA`` flag are skipped; a worker thread's frees of main-arena chunks count).

What decides a forward's regrowth is whether the free space at the top reaches the trim
threshold, and that hangs on small chunks: torch allocates every tensor with
``posix_memalign(64)``, whose lead and tail fragments land in the tcache when it has room (in
use for the arena, so they pin the big chunks beside them) or in a fastbin (consolidated at
the next large request, so they do not). Which of the two happens depends on every small
allocation before it; a replay that drifts from the real process in those details (over
millions of calls, mostly at import) keeps the mechanism but not the exact figure.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

__all__ = ["Heap", "Settings", "replay", "replay_blocks", "request_size", "OP_MALLOC",
           "OP_FREE", "OP_CALLOC", "OP_REALLOC", "OP_MEMALIGN", "OP_MARK"]

OP_MALLOC, OP_FREE, OP_CALLOC, OP_REALLOC, OP_MEMALIGN, OP_MARK = 1, 2, 3, 4, 5, 6
MINSIZE = 32
HEADER = 16  # the chunk's prev_size and size words before the user's pointer
TCACHE_MAX_CHUNK = 1040  # 64 tcache bins: chunks of 32 .. 1040 bytes
MAX_FAST = 128  # DEFAULT_MXFAST on 64-bit: chunks of 32 .. 128 bytes
MIN_LARGE = 1024  # MIN_LARGE_SIZE: smaller chunks are in the small bins
CONSOLIDATION = 65536  # FASTBIN_CONSOLIDATION_THRESHOLD
MMAP_THRESHOLD_MAX = 32 << 20  # DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
NON_MAIN_ARENA, IS_MMAPPED = 4, 2
TCACHE_STRUCT = 0x290  # the main thread's tcache_perthread_struct, malloc's first chunk


def request_size(n: int) -> int:
    """glibc's ``request2size``: the chunk size, header included, of an ``n``-byte request."""
    return max(MINSIZE, (n + 8 + 15) & ~15)


@dataclass(frozen=True)
class Settings:
    """glibc's tunables, in bytes, as a process starts with no ``MALLOC_*`` variables set;
    ``dynamic`` is false when either threshold was set (glibc then stops adapting them)."""

    top_pad_bytes: int = 128 * 1024
    mmap_threshold_bytes: int = 128 * 1024
    trim_threshold_bytes: int = 128 * 1024
    dynamic: bool = True
    page_bytes: int = 4096
    tcache_count: int = 7


@dataclass
class Heap:
    """The main arena: chunk addresses are absolute (the heap starts at ``base``), so a
    replay's placements can be compared with a recorded run's. ``grown_bytes`` and
    ``shrunk_bytes`` count every ``brk`` move; ``mapped_bytes`` every ``mmap``."""

    base: int
    settings: Settings = field(default_factory=Settings)
    grown_bytes: int = 0
    shrunk_bytes: int = 0
    brk_calls: int = 0
    mapped_bytes: int = 0
    mmap_calls: int = 0
    unknown_frees: int = 0

    def __post_init__(self):
        s = self.settings
        self.mmap_threshold, self.trim_threshold = s.mmap_threshold_bytes, s.trim_threshold_bytes
        self.top = self.brk = self.base
        self.used: dict[int, int] = {}  # chunk address -> size (tcache and fastbins too)
        self.free_at: dict[int, int] = {}  # free chunk address -> size
        self.free_end: dict[int, int] = {}  # free chunk end -> address
        self.unsorted: dict[int, None] = {}  # free chunks not yet binned, oldest first
        self.binned: list[tuple[int, int, int]] = []  # (size, order, address), sorted
        self.bin_key: dict[int, tuple[int, int, int]] = {}
        self.last_remainder: int | None = None
        self.clock = 0
        self.tcache: dict[int, dict[int, list[int]]] = {}  # thread -> size -> chunks
        self.fast: dict[int, list[int]] = {}  # size -> chunks
        self.mapped: dict[int, int] = {}  # user address -> mapped size

    @classmethod
    def from_state(cls, base: int, brk: int, live: dict[int, int],
                   cached: dict[int, dict[int, list[int]]], settings: Settings,
                   mmap_threshold: int, trim_threshold: int) -> Heap:
        """A heap as a recorded process left it: ``live`` chunks (address -> size, the
        tcache's included) at their addresses, every gap between them free (binned), the
        top from the last one to ``brk``."""
        heap = cls(base, settings)
        heap.mmap_threshold, heap.trim_threshold = mmap_threshold, trim_threshold
        heap.brk = brk
        at = base
        for p in sorted(live):
            if p > at:
                heap._add_free(at, p - at)
                heap._bin(at)
            heap.used[p] = live[p]
            at = max(at, p + live[p])
        heap.top = at
        heap.tcache = {tid: {size: list(ps) for size, ps in bins.items()}
                       for tid, bins in cached.items()}
        return heap

    # -- the program break ------------------------------------------------------------------
    def _grow(self, nb: int) -> None:
        page = self.settings.page_bytes
        size = nb + self.settings.top_pad_bytes + MINSIZE - (self.brk - self.top)
        size = -(-size // page) * page
        self.brk += size
        self.grown_bytes += size
        self.brk_calls += 1

    def _trim(self) -> None:
        page = self.settings.page_bytes
        area = self.brk - self.top - MINSIZE - 1
        if area <= self.settings.top_pad_bytes:
            return
        extra = (area - self.settings.top_pad_bytes) // page * page
        if extra:
            self.brk -= extra
            self.shrunk_bytes += extra
            self.brk_calls += 1

    # -- free chunks ------------------------------------------------------------------------
    def _add_free(self, p: int, size: int) -> None:
        """A free chunk joins the unsorted bin (``_int_free`` and every split)."""
        self.free_at[p] = size
        self.free_end[p + size] = p
        self.unsorted[p] = None

    def _bin(self, p: int) -> None:
        """Move a chunk from the unsorted bin to its bin: a small bin hands out its oldest
        chunk first, a large bin (1024 bytes and up) of equal sizes its newest."""
        del self.unsorted[p]
        size = self.free_at[p]
        self.clock += 1
        key = (size, self.clock if size < MIN_LARGE else -self.clock, p)
        self.bin_key[p] = key
        bisect.insort(self.binned, key)

    def _remove_free(self, p: int) -> int:
        size = self.free_at.pop(p)
        del self.free_end[p + size]
        if p in self.unsorted:
            del self.unsorted[p]
        else:
            key = self.bin_key.pop(p)
            del self.binned[bisect.bisect_left(self.binned, key)]
        if p == self.last_remainder:
            self.last_remainder = None
        return size

    def _release(self, p: int, size: int) -> int:
        """Coalesce a chunk no longer in use into its free neighbours or the top; the size
        of what it merged into (the top's size when it reached the top)."""
        if p in self.free_end:
            q = self.free_end[p]
            size += self._remove_free(q)
            p = q
        end = p + size
        if end == self.top:
            self.top = p
            return self.brk - self.top
        if end in self.free_at:
            size += self._remove_free(end)
        self._add_free(p, size)
        return size

    def _consolidate(self) -> None:
        chunks = [(p, size) for size, ps in sorted(self.fast.items()) for p in reversed(ps)]
        self.fast.clear()
        for p, size in chunks:
            del self.used[p]
            self._release(p, size)

    def _int_free(self, p: int, tid: int) -> None:
        size = self.used.get(p)
        if size is None:  # a recorded state that glibc's internal frees made stale
            self.unknown_frees += 1
            return
        if size <= TCACHE_MAX_CHUNK:
            bins = self.tcache.setdefault(tid, {}).setdefault(size, [])
            if len(bins) < self.settings.tcache_count:
                bins.append(p)
                return
        if size <= MAX_FAST:
            self.fast.setdefault(size, []).append(p)
            return
        del self.used[p]
        merged = self._release(p, size)
        if merged >= CONSOLIDATION:
            if self.fast:
                self._consolidate()
            if self.brk - self.top >= self.trim_threshold:
                self._trim()

    # -- allocation -------------------------------------------------------------------------
    def _take(self, p: int, nb: int, remember: bool) -> int:
        """Allocate free chunk ``p`` for ``nb`` bytes; a remainder of at least MINSIZE goes
        back to the unsorted bin (as the last remainder when ``remember``)."""
        size = self._remove_free(p)
        if size - nb >= MINSIZE:
            self._add_free(p + nb, size - nb)
            if remember:
                self.last_remainder = p + nb
            size = nb
        self.used[p] = size
        return p

    def _from_bins(self, nb: int, tid: int) -> int | None:
        """``_int_malloc``'s search of its bins: a small bin's exact size, the unsorted bin
        (oldest first: the last remainder for a small request, exact fits, the rest sorted
        into bins), then the smallest binned chunk that fits."""
        small = nb < MIN_LARGE
        if small:
            i = bisect.bisect_left(self.binned, (nb, -(1 << 62), 0))
            if i < len(self.binned) and self.binned[i][0] == nb:
                p = self._take(self.binned[i][2], nb, False)
                if nb <= TCACHE_MAX_CHUNK:  # the rest of the bin fills the tcache
                    bins = self.tcache.setdefault(tid, {}).setdefault(nb, [])
                    while len(bins) < self.settings.tcache_count:
                        i = bisect.bisect_left(self.binned, (nb, -(1 << 62), 0))
                        if i == len(self.binned) or self.binned[i][0] != nb:
                            break
                        q = self._take(self.binned[i][2], nb, False)
                        bins.append(q)
                return p
        cached = False
        for p in list(self.unsorted):
            size = self.free_at[p]
            if (small and len(self.unsorted) == 1 and p == self.last_remainder
                    and size > nb + MINSIZE):
                return self._take(p, nb, True)
            if size == nb:
                bins = self.tcache.setdefault(tid, {}).setdefault(nb, []) \
                    if nb <= TCACHE_MAX_CHUNK else None
                if bins is not None and len(bins) < self.settings.tcache_count:
                    bins.append(self._take(p, nb, False))
                    cached = True
                    continue
                return self._take(p, nb, False)
            self._bin(p)
        if cached:
            return self.tcache[tid][nb].pop()
        i = bisect.bisect_left(self.binned, (nb, -(1 << 62), 0))
        if i == len(self.binned):
            return None
        return self._take(self.binned[i][2], nb, small)

    def _int_malloc(self, nb: int, tid: int) -> int:
        """A chunk address (mapped ones are returned as negative user addresses' chunks in
        ``mapped``; see :meth:`malloc`)."""
        if nb <= MAX_FAST and self.fast.get(nb):
            p = self.fast[nb].pop()
            if not self.fast[nb]:
                del self.fast[nb]
            # glibc stashes the rest of this fastbin into the tcache
            bins = self.tcache.setdefault(tid, {}).setdefault(nb, [])
            rest = self.fast.get(nb, [])
            while rest and len(bins) < self.settings.tcache_count:
                bins.append(rest.pop())
            if nb in self.fast and not self.fast[nb]:
                del self.fast[nb]
            return p
        if nb >= MIN_LARGE and self.fast:
            self._consolidate()
        while True:
            p = self._from_bins(nb, tid)
            if p is not None:
                return p
            if self.brk - self.top >= nb + MINSIZE:
                p, self.top = self.top, self.top + nb
                self.used[p] = nb
                return p
            if not self.fast:
                break
            self._consolidate()
        if nb >= self.mmap_threshold:
            return -1
        self._grow(nb)
        p, self.top = self.top, self.top + nb
        self.used[p] = nb
        return p

    def _map(self, nb: int) -> int:
        page = self.settings.page_bytes
        size = -(-(nb + 8) // page) * page
        self.mapped_bytes += size
        self.mmap_calls += 1
        mem = -self.mmap_calls * (1 << 40)  # never a heap address
        self.mapped[mem] = size
        return mem

    def _alloc(self, n: int, tid: int, tcache: bool) -> int:
        nb = request_size(n)
        if tcache and nb <= TCACHE_MAX_CHUNK:
            bins = self.tcache.get(tid, {}).get(nb)
            if bins:
                return bins.pop() + HEADER
        p = self._int_malloc(nb, tid)
        return self._map(nb) if p < 0 else p + HEADER

    def malloc(self, n: int, tid: int = 0) -> int:
        return self._alloc(n, tid, tcache=True)

    def calloc(self, n: int, tid: int = 0) -> int:
        return self._alloc(n, tid, tcache=False)

    def memalign(self, align: int, n: int, tid: int = 0) -> int:
        if align <= 16:
            return self.malloc(n, tid)
        nb = request_size(n)
        p = self._int_malloc(nb + align + MINSIZE, tid)
        if p < 0:
            return self._map(nb + align + MINSIZE)
        size = self.used[p]
        mem = p + HEADER
        if mem % align:
            q = ((mem + align - 1) // align) * align - HEADER
            if q - p < MINSIZE:
                q += align
            lead = q - p
            self.used[p] = lead
            self.used[q] = size - lead
            self._int_free(p, tid)
            p, size = q, size - lead
        if size > nb + MINSIZE:
            self.used[p] = nb
            self.used[p + nb] = size - nb
            self._int_free(p + nb, tid)
        return p + HEADER

    def free(self, mem: int, tid: int = 0) -> None:
        if mem < 0:
            size = self.mapped.pop(mem)
            if (self.settings.dynamic and size > self.mmap_threshold
                    and size <= MMAP_THRESHOLD_MAX):
                self.mmap_threshold, self.trim_threshold = size, 2 * size
            return
        self._int_free(mem - HEADER, tid)

    def realloc(self, mem: int, n: int, tid: int = 0) -> int:
        if mem == 0:
            return self.malloc(n, tid)
        nb = request_size(n)
        if mem in self.mapped:  # mremap keeps it mapped
            page = self.settings.page_bytes
            self.mapped[mem] = -(-(nb + 8) // page) * page
            return mem
        p = mem - HEADER
        size = self.used[p]
        if size < nb:
            end = p + size
            if end == self.top and self.brk - self.top >= nb - size + MINSIZE:
                self.top = p + nb
                self.used[p] = nb
                return mem
            if end in self.free_at and size + self.free_at[end] >= nb:
                size += self._remove_free(end)
                self.used[p] = size
            else:
                new = self._alloc(n, tid, tcache=False)
                self._int_free(p, tid)
                return new
        if size - nb >= MINSIZE:
            self.used[p] = nb
            self.used[p + nb] = size - nb
            self._int_free(p + nb, tid)
        return mem


def replay(events, base: int, settings: Settings | None = None,
           placed: dict[int, int] | None = None, heap: Heap | None = None,
           live: dict[int, int] | None = None):
    """Replay ``events`` (tuples ``(op, tid, size, addr, aux, head)`` as recorded: ``addr``
    the recorded user address, ``aux`` the alignment or realloc's old address, ``head`` the
    recorded chunk's size word) on a :class:`Heap` starting at ``base``. Returns the heap
    and one dict per marker: the marker's code and the heap's counters when it came.
    ``placed``, if given, receives each replayed block's address by event index (mapped
    blocks get negative addresses), to compare with the recorded ones. ``heap`` and
    ``live`` (its blocks' recorded user address -> replayed one) start the replay from a
    state (:meth:`Heap.from_state`) instead of an empty heap."""
    if heap is None:
        heap = Heap(base, settings or Settings())
        heap.used[heap._int_malloc(TCACHE_STRUCT, 0)] = TCACHE_STRUCT  # malloc's first chunk
    where: dict[int, int] = dict(live or {})  # recorded user address -> replayed one
    marks = []
    for index, (op, tid, size, addr, aux, head) in enumerate(events):
        if op == OP_MARK:
            marks.append({"code": size, "grown_bytes": heap.grown_bytes,
                          "shrunk_bytes": heap.shrunk_bytes, "brk_calls": heap.brk_calls,
                          "mapped_bytes": heap.mapped_bytes, "brk": heap.brk})
            continue
        if op == OP_FREE:
            mine = where.pop(addr, None)
            if mine is not None:
                heap.free(mine, tid)
            continue
        if head & NON_MAIN_ARENA and not head & IS_MMAPPED:
            if op == OP_REALLOC:
                where.pop(aux, None)
            continue
        if op == OP_REALLOC:
            old = where.pop(aux, None) if aux else 0
            if aux and old is None:  # moved out of another arena: treat as a fresh block
                old = 0
            got = heap.realloc(old, size, tid) if size else 0
            if size == 0 and old:
                heap.free(old, tid)
        elif op == OP_MEMALIGN:
            got = heap.memalign(aux, size, tid)
        elif op == OP_CALLOC:
            got = heap.calloc(size, tid)
        else:
            got = heap.malloc(size, tid)
        if addr:
            where[addr] = got
        if placed is not None:
            placed[index] = got
    return heap, marks


def replay_blocks(blocks, trim_threshold_bytes: int, repeats: int = 3) -> list[int]:
    """The brk growth of each of ``repeats`` identical forwards whose only blocks are
    ``blocks``: ``(request_bytes, allocated_at, freed_at)`` in one clock (a block freed at
    the same tick as another is allocated is freed first; ``freed_at`` None: never), on an
    empty heap with glibc's rules, the trim threshold fixed at ``trim_threshold_bytes``
    (the mmap threshold at half of it) and plain ``malloc`` (no alignment fragments). This
    is the model a trace can feed: one block per tensor a forward allocates."""
    settings = Settings(mmap_threshold_bytes=trim_threshold_bytes // 2,
                        trim_threshold_bytes=trim_threshold_bytes, dynamic=False)
    heap = Heap(1 << 40, settings)
    steps = []
    for k, (size, start, end) in enumerate(blocks):
        steps.append((start, 1, k, size))
        if end is not None:
            steps.append((end, 0, k, size))
    steps.sort()
    grown = []
    for _ in range(repeats):
        before, mem, open_ = heap.grown_bytes, {}, set()
        for _, alloc, k, size in steps:
            if alloc:
                mem[k] = heap.malloc(size)
                open_.add(k)
            else:
                heap.free(mem.pop(k))
                open_.discard(k)
        for k in open_:  # the forward's result, dropped before the next forward
            heap.free(mem.pop(k))
        grown.append(heap.grown_bytes - before)
    return grown
