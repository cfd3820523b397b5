"""benchmarks.cpu.allocator_trace's reading of ``strace -f`` output, on a hand-written log."""

from __future__ import annotations

from benchmarks.cpu.allocator_trace import count_calls

LOG = """\
101 brk(NULL)                               = 0x1000000
101 mmap(NULL, 8392704, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x7f00
101 brk(0x1400000)                          = 0x1400000
101 write(2, "dse-allocator-trace-begin\\n", 26) = 26
101 brk(0x1c00000)                          = 0x1c00000
102 brk(0x1200000)                          = 0x1200000
101 mmap(NULL, 33558528, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x7e00
101 munmap(0x7e00, 33558528)                = 0
102 madvise(0x7d00, 4096, MADV_DONTNEED)    = 0
101 brk(0x1300000)                          = 0x1300000
101 write(2, "dse-allocator-trace-end\\n", 24) = 24
101 brk(0x2000000)                          = 0x2000000
101 mmap(NULL, 4096, PROT_READ, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x7c00
"""


def test_counts_only_the_forward_between_the_markers():
    got = count_calls(LOG.splitlines())
    # the heap ends at 0x1400000 before the forward; inside it grows by 0x800000, shrinks by
    # 0xa00000 (to 0x1200000), grows by 0x100000; calls before the first and after the
    # second marker do not count
    assert got == {"brk_calls": 3, "brk_grown_bytes": 0x800000 + 0x100000,
                   "brk_shrunk_bytes": 0xa00000, "mmap_calls": 1, "mmap_bytes": 33558528,
                   "munmap_calls": 1, "munmap_bytes": 33558528, "madvise_calls": 1}
