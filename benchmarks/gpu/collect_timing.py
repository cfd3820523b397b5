"""How ``collect`` times one call, on a GPU or on the CPU, and which kernels the call ran.

The statistics (warm-up, repeats until the median settles, min / median / p90, idle check) are
:func:`dse.measure.timing.time_kernel`'s; this module adds what a GPU needs around it:

* **cold**: before every timed call the last-level cache is flushed by sweeping a buffer of
  4x the GPU's L2 (at least 256 MiB; on the CPU 2x the last-level cache). ``read`` (default)
  sums the buffer: it evicts L2 and leaves no dirty lines, so the timed kernel pays no
  write-backs of the flush, the method of the shipped H100 rows. ``write`` zero-fills it
  instead (``triton.testing.do_bench``'s way): it also evicts, but the buffer's dirty lines
  are written back while the next kernel runs.
* **warm**: no flush; the previous call left its operands in L2 (timed calls follow each other
  back to back, each still timed on its own).
* **host issue time hidden** (GPU): before each timed call the GPU spins (``torch.cuda._sleep``)
  for ``max(150 us, 1.5 x host issue time + 50 us)`` so that the host has queued the whole call
  before the GPU reaches the start event: the event pair then times the kernels, not Python's
  dispatch (eager 2:4 through ``to_sparse_semi_structured`` spends ~0.8 ms of host time per
  call on an H100 against ~10 us of kernel). ``host_call_s`` and ``steady_s`` keep the host's
  view.
* **kernel identity**: one more warm call of each implementation under ``torch.profiler``
  (one session per configuration); on CUDA the device kernels' names and summed duration, on
  the CPU the aten operators (the CPU profiler sees no kernels).

torch is imported when a :class:`DeviceClock` is made, never at import time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from dse.measure import host
from dse.measure.timing import Timing, TimingMethod, cuda_event_clock, time_kernel

__all__ = ["FLUSHES", "DeviceClock", "Identity"]

#: Cache flushes a run can use (module docstring).
FLUSHES = ("read", "write")

#: Timing methods: GPU event timers are repeatable, a smoke run only has to exercise the path.
METHODS = {
    "cuda": TimingMethod(warmup=3, min_repeats=10, max_repeats=40, window=3, rel_tol=0.02,
                         max_time_s=0.6),
    "cpu": TimingMethod(warmup=2, min_repeats=5, max_repeats=30, window=3, rel_tol=0.02,
                        max_time_s=0.5),
    "smoke": TimingMethod(warmup=1, min_repeats=1, max_repeats=2, window=1, rel_tol=0.05,
                          max_time_s=0.01),
}

#: The GPU spin before a timed call: at least this, at most that (module docstring).
_MIN_PAD_S, _MAX_PAD_S = 150e-6, 20e-3
#: Prefix of the profiler labels that tell the implementations of one session apart.
_LABEL = "collect::"


@dataclass(frozen=True)
class Identity:
    """What the profiler saw of one call: kernel (CUDA) or operator (CPU) names, in order of
    first appearance, and on CUDA the kernels' summed device seconds (NaN on the CPU)."""

    names: tuple[str, ...]
    device_s: float


class DeviceClock:
    """Timing of single calls on ``device`` (``"cuda"`` or ``"cpu"``), cold or warm."""

    def __init__(self, device: str, flush: str = "read", method: TimingMethod | None = None):
        import torch

        if flush not in FLUSHES:
            raise ValueError(f"flush {flush!r}: use one of {', '.join(FLUSHES)}")
        self.torch = torch
        self.device = device
        self.flush_mode = flush
        self.method = method or METHODS[device]
        if device == "cuda":
            props = torch.cuda.get_device_properties(0)
            l2 = int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)
            self.flush_bytes = max(256 * 2**20, 4 * l2)
            self.sleep_cycles_per_s = self._calibrate_sleep()
        else:
            llc = max(host.cache_sizes().values(), default=32 * 2**20)
            self.flush_bytes = 2 * llc
            self.sleep_cycles_per_s = float("nan")
        self._buf = None  # made at the first flush: a run with nothing cold to time needs none

    # --- the pieces -------------------------------------------------------------------------

    def describe(self) -> dict[str, object]:
        """The method, for the provenance of every row."""
        return {"flush": self.flush_mode, "flush_bytes": self.flush_bytes,
                "sleep_cycles_per_s": self.sleep_cycles_per_s,
                "timing_method": self.method.as_dict(),
                "pad": "GPU spin of max(150 us, 1.5 x host_call_s + 50 us) before each timed "
                       "call (CUDA)" if self.device == "cuda" else "none (host clock)"}

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def flush(self) -> None:
        if self._buf is None:
            torch = self.torch
            self._buf = (torch.zeros(self.flush_bytes // 2, dtype=torch.float16, device="cuda")
                         if self.device == "cuda"
                         else torch.ones(self.flush_bytes // 4, dtype=torch.float32))
        if self.flush_mode == "read":
            self._buf.sum()
        else:
            self._buf.fill_(0.0)

    def _calibrate_sleep(self) -> float:
        torch = self.torch
        torch.cuda._sleep(1000)
        cycles = 2_000_000
        seconds = cuda_event_clock(lambda: torch.cuda._sleep(cycles))
        return cycles / seconds if seconds > 0 else 1.8e9

    def _spin(self, seconds: float) -> None:
        self.torch.cuda._sleep(int(seconds * self.sleep_cycles_per_s))

    def host_call_s(self, fn: Callable[[], object]) -> float:
        """Host seconds to issue one call while the GPU is kept busy (NaN on the CPU)."""
        if self.device != "cuda":
            return float("nan")
        self.sync()
        samples = []
        for _ in range(3):
            self._spin(4e-3)
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
            self.sync()
        return sorted(samples)[1]

    def steady_s(self, fn: Callable[[], object], calls: int = 10) -> float:
        """Mean seconds per call of ``calls`` back-to-back calls, host overhead included, warm
        caches (CUDA; NaN on the CPU, where every timing is already the host's view)."""
        if self.device != "cuda":
            return float("nan")
        fn()
        self.sync()
        return cuda_event_clock(lambda: [fn() for _ in range(calls)]) / calls

    def time(self, fn: Callable[[], object], cache: str, host_s: float = float("nan"),
             threads: int = 1) -> Timing:
        """Time ``fn`` by the run's method, ``cache`` ``"cold"`` (flushed before every call) or
        ``"warm"``; on CUDA each call is padded so that ``host_s`` of issue time is hidden."""
        if cache not in ("cold", "warm"):
            raise ValueError(f"cache {cache!r}: use cold or warm")
        before = self.flush if cache == "cold" else None
        measure_one = None
        if self.device == "cuda":
            pad = _MIN_PAD_S if not math.isfinite(host_s) else min(
                _MAX_PAD_S, max(_MIN_PAD_S, 1.5 * host_s + 50e-6))

            def measure_one(call: Callable[[], object]) -> float:
                self._spin(pad)  # queued before the start event: the host catches up meanwhile
                return cuda_event_clock(call)

        return time_kernel(fn, self.method, threads=threads, before=before,
                           measure_one=measure_one)

    def time_latency(self, fn: Callable[[], object], method: TimingMethod | None = None,
                     threads: int = 1) -> Timing:
        """Warm, unpadded: each call's latency as its caller sees it from an idle device, the
        host's issue time included (whole models: what eager PyTorch costs)."""
        return time_kernel(fn, method or self.method, threads=threads,
                           measure_one=cuda_event_clock if self.device == "cuda" else None)

    def identify(self, calls: dict[str, Callable[[], object]],
                 limit: int = 6) -> dict[str, Identity]:
        """What one warm call of each of ``calls`` ran, from one profiler session (each call
        under its own ``record_function`` label, so that what it ran is told apart): on CUDA the
        kernels it launched and their summed device seconds, on the CPU the aten operators. A
        profiler that fails gives its error as the name."""
        from torch.profiler import ProfilerActivity, profile, record_function

        activities = [ProfilerActivity.CPU]
        if self.device == "cuda":
            activities.append(ProfilerActivity.CUDA)
        try:
            self.sync()
            with profile(activities=activities) as prof:
                for name, call in calls.items():
                    with record_function(f"{_LABEL}{name}"):
                        call()
                self.sync()
            events = list(prof.events())
        except Exception as exc:  # the profiler is a diagnostic: never lose the rows over it
            failed = Identity((f"(profiler failed: {type(exc).__name__})",), float("nan"))
            return {name: failed for name in calls}
        names: dict[str, list[str]] = {name: [] for name in calls}
        seconds = dict.fromkeys(calls, 0.0)
        for e in events:
            if not str(e.device_type).endswith("CPU") or e.name.startswith(_LABEL):
                continue
            up = e.cpu_parent
            while up is not None and not up.name.startswith(_LABEL):
                up = up.cpu_parent
            label = up.name[len(_LABEL):] if up is not None else None
            if label not in names:
                continue
            found = ([k.name for k in e.kernels] if self.device == "cuda"
                     else [e.name] if "::" in e.name else [])
            seconds[label] += sum(k.duration for k in e.kernels) * 1e-6
            names[label] += [n for n in found if n not in names[label]]
        return {name: Identity(tuple(n[:120] for n in names[name][:limit]),
                               seconds[name] if self.device == "cuda" else float("nan"))
                for name in calls}
