"""How one kernel is timed: warm-up, then repeats until the median is stable (or a cap).

The method, the same on every device:

1. ``warmup`` untimed calls (first-call allocation, JIT, autotuning and page faults out of the
   way);
2. timed repeats, each one call, preceded by ``before()`` (a cache flush: a read sweep of a
   buffer of twice the last-level cache, so every repeat starts cold, as the DRAM roofline
   assumes); after ``min_repeats`` the run stops as soon as the median of all repeats differs
   from the median without the last ``window`` repeats by less than ``rel_tol`` (stable), or at
   ``max_repeats`` or ``max_time_s`` (``stable`` False);
3. min, median, p90, mean, ``spread = (p90 - min) / median`` and the repeat count are kept,
   with the threads the kernel was allowed and the cores other processes kept busy meanwhile
   (:func:`dse.measure.host.other_cores`): above :data:`~dse.measure.host.IDLE_THRESHOLD_CORES`
   the row is flagged ``idle = False``.

On CUDA, :func:`cuda_event_clock` times each repeat with a pair of CUDA events (GPU time, host
dispatch excluded) instead of the host clock; the rest of the method is unchanged.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from . import host

__all__ = ["Timing", "TimingMethod", "cuda_event_clock", "time_kernel"]


@dataclass(frozen=True)
class TimingMethod:
    """Parameters of :func:`time_kernel`; recorded with every dataset."""

    warmup: int = 2
    min_repeats: int = 5
    max_repeats: int = 50
    window: int = 3
    rel_tol: float = 0.02
    max_time_s: float = 1.0

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.min_repeats < 1 or self.max_repeats < self.min_repeats:
            raise ValueError("timing needs warmup >= 0 and 1 <= min_repeats <= max_repeats")
        if self.window < 1 or self.window >= self.min_repeats + 1 or self.rel_tol <= 0:
            raise ValueError("timing needs 1 <= window <= min_repeats and rel_tol > 0")

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class Timing:
    """Statistics of one kernel's repeats, in seconds per call."""

    min_s: float
    median_s: float
    p90_s: float
    mean_s: float
    spread: float  #: (p90 - min) / median
    repeats: int
    warmup: int
    stable: bool  #: the median settled within rel_tol before a cap
    elapsed_s: float  #: wall time of the whole measurement, warm-up and flushes included
    threads: int
    other_cores: float | None  #: cores other processes kept busy meanwhile (None: unknown)
    idle: bool  #: other_cores below host.IDLE_THRESHOLD_CORES (True when unknown)


def _settled(samples: list[float], window: int, rel_tol: float) -> bool:
    now = statistics.median(samples)
    before = statistics.median(samples[:-window])
    return now > 0 and abs(now - before) / now < rel_tol


def _p90(ordered: list[float]) -> float:
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def time_kernel(
    fn: Callable[[], object],
    method: TimingMethod = TimingMethod(),
    *,
    threads: int = 1,
    before: Callable[[], object] | None = None,
    measure_one: Callable[[Callable[[], object]], float] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Time ``fn`` (one kernel call) by the method above.

    ``before``: run untimed before every timed call (a cache flush). ``measure_one(fn) ->
    seconds``: how one call is timed; default the host clock around ``fn()`` (on CUDA pass
    :func:`cuda_event_clock`). ``threads`` is recorded as given: the caller fixes them.
    """
    start = clock()
    load = host.cpu_clock()
    for _ in range(method.warmup):
        fn()
    if measure_one is None:
        def measure_one(call: Callable[[], object]) -> float:
            t0 = clock()
            call()
            return clock() - t0
    samples: list[float] = []
    stable = False
    while len(samples) < method.max_repeats:
        if before is not None:
            before()
        samples.append(measure_one(fn))
        if len(samples) >= method.min_repeats:
            if len(samples) > method.window and _settled(samples, method.window,
                                                          method.rel_tol):
                stable = True
                break
            if clock() - start > method.max_time_s:
                break
    ordered = sorted(samples)
    median = statistics.median(ordered)
    others = host.other_cores(load)
    return Timing(
        min_s=ordered[0],
        median_s=median,
        p90_s=_p90(ordered),
        mean_s=statistics.fmean(ordered),
        spread=(_p90(ordered) - ordered[0]) / median if median > 0 else float("nan"),
        repeats=len(samples),
        warmup=method.warmup,
        stable=stable,
        elapsed_s=clock() - start,
        threads=threads,
        other_cores=others,
        idle=others is None or others < host.IDLE_THRESHOLD_CORES,
    )


def cuda_event_clock(call: Callable[[], object]) -> float:
    """GPU seconds of one call, between two CUDA events (needs torch with CUDA)."""
    import torch

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e-3
