"""``dse hw probe``: the machine at hand measured as an accelerator spec.

CPU figures (all cores, threads fixed to :func:`dse.measure.host.core_count`):

* ``dram_bandwidth_bytes_per_s``: a STREAM triad ``a = b + s * c`` in numba over three float64
  arrays of ``max(8 x LLC, 256 MiB)`` each, 24 bytes an element (STREAM's count).
* ``tensor_flops_per_s.*``: square ``torch.mm`` (the BLAS the CPU kernels use: MKL / oneDNN),
  best median over the sizes tried. A CPU has no fp32 mode below full precision, so the fp32
  GEMM rate goes in the ``tf32`` slot (dse stores tf32 as 4 bytes, which fp32 is); ``bf16`` and
  ``fp16`` are written only where the CPU has native instructions for them (``avx512_bf16`` /
  ``amx_bf16``, ``avx512_fp16`` / ``amx_fp16``); otherwise their measured (emulated) rate stays
  in ``[provenance]`` only, and evaluating with that dtype is an error naming the dtypes the file
  has. fp64 GEMM has no spec slot and is recorded in ``[provenance]``.
* ``vector_flops_per_s.fp32``: a numba loop of 8 dependent FMAs per element over L1-resident
  float32 rows, one per core. No fp16/bf16 vector rate is written (these CPUs widen to fp32).
* ``sm_count`` = cores, ``shared_memory_per_sm_bytes`` = the private L2 of one core,
  ``l2_bytes`` = the last-level (shared) cache: the simulator's per-unit and shared buffers.
* ``kernel_launch_overhead_s``: median of a one-element ``torch.add`` (the eager dispatch cost
  every CPU op pays).
* ``block_sparse`` supported from block 1 (the bound: blocks at the GEMM rate); no
  ``sparse_tensor`` (no CPU runs N:M natively).

CUDA (when ``torch.cuda.is_available()``): device-to-device copy bandwidth (read + write), the
achieved dense GEMM peak per dtype (fp16, bf16, tf32) at 8192^3, SM count, shared memory per
SM and L2 from the device properties. The file ``extends`` the catalog entry of the same GPU, so
its datasheet figures (vector rates, the sparse tensor core) stay where nothing was measured.

Every figure carries its provenance in the TOML's ``[provenance]`` table: method, repeats,
min/median/max and spread ``(max - min) / median`` over the repeats, with the date, command and
library versions once for the file.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import host
from .errors import ProbeError

__all__ = ["Figure", "ProbeError", "ProbeResult", "probe", "probe_spec_toml"]

_MIB = 2**20


@dataclass(frozen=True)
class Figure:
    """One measured figure: ``value`` (the best of ``repeats``: the highest rate, the shortest
    time), its median and its spread."""

    value: float
    unit: str
    method: str
    repeats: int
    min: float
    max: float
    median: float = float("nan")

    @property
    def spread(self) -> float:
        """(max - min) / median over the repeats: how much reruns may differ."""
        middle = self.median if math.isfinite(self.median) else self.value
        return (self.max - self.min) / middle if middle else float("nan")


@dataclass(frozen=True)
class ProbeResult:
    """The probed ceilings. ``fields``: spec field path -> value (what the TOML sets);
    ``figures``: every measured figure by name, the fields' and the extra ones; ``facts``: the
    machine fingerprint; ``notes``: decisions a reader needs (why a dtype is missing)."""

    device: str
    fields: dict[str, Any]
    figures: dict[str, Figure]
    facts: dict[str, Any]
    notes: tuple[str, ...] = ()
    extends: str | None = None
    elapsed_s: float = 0.0
    sources: dict[str, str] = field(default_factory=dict)  # field path -> figure name


def _figure(samples: list[float], unit: str, method: str) -> Figure:
    # A ceiling is the best of the repeats (the most a rate reached, the least a time took),
    # not one moment of a shared machine; the median and spread stay in the provenance.
    best = min(samples) if unit == "s" else max(samples)
    return Figure(best, unit, method, len(samples), min(samples), max(samples),
                  statistics.median(samples))


# --- CPU ------------------------------------------------------------------------------------


def _triad_kernel():
    import numba

    @numba.njit(parallel=True, cache=False)
    def triad(a, b, c, scalar):
        for i in numba.prange(a.shape[0]):
            a[i] = b[i] + scalar * c[i]

    return triad


def _fma_kernel():
    import numba

    @numba.njit(parallel=True, fastmath=True, cache=False)
    def fma(x, a, b, reps):
        for t in numba.prange(x.shape[0]):
            row = x[t]
            for _ in range(reps):
                for i in range(row.shape[0]):
                    v = row[i]
                    v = v * a + b
                    v = v * a + b
                    v = v * a + b
                    v = v * a + b
                    v = v * a + b
                    v = v * a + b
                    v = v * a + b
                    v = v * a + b
                    row[i] = v

    return fma


def _samples(fn: Callable[[], object], repeats: int, warmup: int = 1) -> list[float]:
    """Seconds of each of ``repeats`` calls after ``warmup`` untimed ones (every sample kept:
    a figure reports its min, median and max)."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _read_kernel():
    import numba

    @numba.njit(parallel=True, fastmath=True, cache=False)
    def read(x, reps):
        # Each thread sums its own row `reps` times: the row stays in the cache level it fits.
        total = 0.0
        for t in numba.prange(x.shape[0]):
            row = x[t]
            acc = 0.0
            for _ in range(reps):
                for i in range(row.shape[0]):
                    acc += row[i]
            total += acc
        return total

    return read


def _cache_bandwidths(repeats: int, caches: dict[str, int]) -> dict[str, Figure]:
    """Read bandwidth of each cache level, all threads at once, each reading a row of half its
    share of the level (so that it stays there): ceilings for the warm expectation, never the
    bound's peaks."""
    import numpy as np

    threads = _threads()
    read = _read_kernel()
    out = {}
    # (level, bytes a thread may use): L1d and L2 are per core, L3 is shared.
    levels = [(name, caches[key] // 2 if key != "l3" else caches[key] // (2 * threads))
              for name, key in (("l1", "l1d"), ("l2", "l2"), ("l3", "l3")) if caches.get(key)]
    for name, per_thread in levels:
        n = max(per_thread // 4, 1024)
        x = np.ones((threads, n), np.float32)
        reps = max(1, int(2e9 // (4 * n * threads)) // 10)
        read(x, 1)
        times = _samples(lambda x=x, reps=reps: read(x, reps), repeats)
        out[f"{name}_read"] = _figure(
            [4 * n * threads * reps / t for t in times], "B/s",
            f"numba float32 sum over {threads} rows of {4 * n // 1024} KiB (half a "
            f"{'core' if name != 'l3' else 'thread'}'s share of {name}), {reps} passes, "
            f"{threads} threads")
    return out


def _dram_bandwidth(repeats: int, caches: dict[str, int]) -> Figure:
    import numpy as np

    llc = max(caches.values(), default=32 * _MIB)
    n = max(8 * llc, 256 * _MIB) // 8
    a, b, c = np.zeros(n), np.ones(n), np.full(n, 2.0)
    triad = _triad_kernel()
    times = _samples(lambda: triad(a, b, c, 3.0), repeats)
    rates = [24 * n / t for t in times]
    return _figure(rates, "B/s", f"STREAM triad a = b + 3 c in numba, float64, 3 arrays of "
                   f"{8 * n // _MIB} MiB, 24 bytes an element, {_threads()} threads")


def _vector_fp32(repeats: int) -> Figure:
    import numpy as np

    threads = _threads()
    width = 1024
    x = np.ones((threads, width), np.float32)
    fma = _fma_kernel()
    a, b = np.float32(0.999), np.float32(0.001)
    reps = 50_000
    times = _samples(lambda: fma(x, a, b, reps), repeats)
    flops = 2 * 8 * threads * width * reps
    return _figure([flops / t for t in times], "FLOP/s",
                   f"numba loop of 8 dependent FMAs per float32 element over {threads} "
                   f"L1-resident rows of {width}, fastmath, {threads} threads")


def _gemm(torch, dtype, sizes: tuple[int, ...], repeats: int, device: str = "cpu") -> Figure:
    best: list[float] | None = None
    best_n = 0
    for n in sizes:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        out = torch.empty(n, n, device=device, dtype=dtype)
        if device == "cuda":
            from .timing import cuda_event_clock

            timing_samples = []
            for _ in range(3):
                torch.mm(a, b, out=out)
            for _ in range(repeats):
                timing_samples.append(cuda_event_clock(lambda: torch.mm(a, b, out=out)))  # noqa: B023
            times = timing_samples
        else:
            times = _samples(lambda: torch.mm(a, b, out=out), repeats)  # noqa: B023
        rates = [2 * n**3 / t for t in times]
        if best is None or statistics.median(rates) > statistics.median(best):
            best, best_n = rates, n
    name = str(dtype).replace("torch.", "")
    return _figure(best, "FLOP/s", f"torch.mm {best_n}^3 {name} (best median of sizes "
                   f"{', '.join(map(str, sizes))}), {_threads()} threads")


def _launch_overhead(torch) -> Figure:
    t = torch.ones(1)
    samples = []
    for _ in range(7):  # 7 medians of 200 calls each
        calls = []
        for _ in range(200):
            t0 = time.perf_counter()
            torch.add(t, t)
            calls.append(time.perf_counter() - t0)
        samples.append(statistics.median(calls))
    return _figure(samples, "s", "median of 200 one-element torch.add calls (eager dispatch), "
                   "7 times")


def _threads() -> int:
    return host.core_count()


def _native(flags: frozenset[str], dtype: str) -> bool:
    wanted = {"bf16": ("avx512_bf16", "amx_bf16"), "fp16": ("avx512_fp16", "amx_fp16")}
    return any(f in flags for f in wanted[dtype])


def _probe_cpu(repeats: int, progress: Callable[[int, int], None] | None) -> ProbeResult:
    try:
        import torch
    except ImportError:
        raise ProbeError("dse hw probe needs torch for the GEMM peaks; install "
                         "'sparsity-dse[export]' (torch)") from None
    import numba

    threads = _threads()
    torch.set_num_threads(threads)
    numba.set_num_threads(threads)
    caches = host.cache_sizes()
    flags = host.cpu_flags()
    steps = 7
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, steps)

    figures: dict[str, Figure] = {}
    figures["dram_triad"] = _dram_bandwidth(repeats, caches)
    figures.update(_cache_bandwidths(repeats, caches))
    tick()
    figures["vector_fma_fp32"] = _vector_fp32(repeats)
    tick()
    figures["gemm_fp32"] = _gemm(torch, torch.float32, (1024, 2048), repeats)
    tick()
    figures["gemm_fp64"] = _gemm(torch, torch.float64, (1024, 2048), repeats)
    tick()
    figures["gemm_bf16"] = _gemm(torch, torch.bfloat16,
                                 (1024, 2048) if _native(flags, "bf16") else (256,), repeats)
    tick()
    figures["gemm_fp16"] = _gemm(torch, torch.float16,
                                 (1024, 2048) if _native(flags, "fp16") else (256,), repeats)
    tick()
    figures["launch_overhead"] = _launch_overhead(torch)
    tick()

    sources = {
        "dram_bandwidth_bytes_per_s": "dram_triad",
        "tensor_flops_per_s.tf32": "gemm_fp32",
        "vector_flops_per_s.fp32": "vector_fma_fp32",
        "kernel_launch_overhead_s": "launch_overhead",
    }
    notes = [
        "tensor_flops_per_s.tf32 holds the full-fp32 BLAS GEMM rate: a CPU has no reduced-"
        "precision fp32 mode, and dse stores tf32 as 4 bytes like fp32; evaluate CPU fp32 "
        "kernels with --dtype tf32 --vector-dtype fp32 --csr-dtype fp32",
        "fp64 GEMM has no spec field; its rate is in [provenance.figures.gemm_fp64]",
        "no vector_flops_per_s.fp16/bf16: the CPU widens them to fp32 lanes, no separate rate",
        "sm_count = cores; shared_memory_per_sm_bytes = one core's private L2; "
        "l2_bytes = the last-level cache",
        "no [sparse_tensor]: no CPU runs N:M natively; block sparsity at the GEMM rate is the "
        "bound (min_block_size = 1)",
    ]
    for dtype in ("bf16", "fp16"):
        if _native(flags, dtype):
            sources[f"tensor_flops_per_s.{dtype}"] = f"gemm_{dtype}"
        else:
            notes.append(f"no tensor_flops_per_s.{dtype}: the CPU lacks native {dtype} "
                         f"instructions; torch emulates it at "
                         f"{figures[f'gemm_{dtype}'].value:.3g} FLOP/s (in [provenance])")
    # The cache levels the probe could size and time, as measured ceilings (whole spec:
    # figures = "ceiling"); sizes are totals over the threads for the private levels.
    for level, key in (("l1", "l1d"), ("l2", "l2"), ("l3", "l3")):
        if f"{level}_read" in figures and caches.get(key):
            sources[f"cache.{level}_bandwidth_bytes_per_s"] = f"{level}_read"
    fields: dict[str, Any] = {path: figures[name].value for path, name in sources.items()}
    for level, key in (("l1", "l1d"), ("l2", "l2"), ("l3", "l3")):
        if f"cache.{level}_bandwidth_bytes_per_s" in fields:
            size = caches[key] * (threads if key != "l3" else 1)
            fields[f"cache.{level}_bytes"] = float(size)
    fields["block_sparse.supported"] = True
    fields["block_sparse.min_block_size"] = 1
    fields["sm_count"] = threads
    private = caches.get("l2") or caches.get("l1d")
    if private:
        fields["shared_memory_per_sm_bytes"] = float(private)
    if caches:
        fields["l2_bytes"] = float(caches.get("l3") or max(caches.values()))
    facts = host.fingerprint("cpu")
    facts["threads"] = threads
    facts["numba_threading_layer"] = numba.threading_layer()
    facts["cpu_flags_used"] = sorted(f for f in flags if f.startswith(("avx", "amx", "fma")))
    return ProbeResult("cpu", fields, figures, facts, tuple(notes), sources=sources)


# --- CUDA -----------------------------------------------------------------------------------


def _catalog_match(gpu_name: str) -> str | None:
    """The catalog entry a GPU name belongs to (H100 SXM/PCIe, A100 40/80 GB, ...), or None."""
    import accelerator_models

    name = gpu_name.lower()
    candidates = []
    for entry in accelerator_models.catalog_names():
        acc = accelerator_models.load(entry)
        words = [w for w in entry.lower().replace("-", " ").split() if w]
        if all(w in name or (w == "sxm" and "hbm3" in name) for w in words):
            candidates.append((len(words), entry, acc))
    return max(candidates)[1] if candidates else None


def _copy_bandwidth(torch, repeats: int) -> Figure:
    from .timing import cuda_event_clock

    nbytes = 2 * 2**30
    src = torch.empty(nbytes // 2, dtype=torch.float16, device="cuda").normal_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = [cuda_event_clock(lambda: dst.copy_(src)) for _ in range(max(repeats, 10))]
    return _figure([2 * nbytes / t for t in times], "B/s", "device-to-device tensor.copy_ "
                   "of 2 GiB, bytes = read + write, CUDA events")


def _probe_cuda(repeats: int, progress: Callable[[int, int], None] | None) -> ProbeResult:
    import torch

    if not torch.cuda.is_available():
        raise ProbeError("--device cuda: torch sees no CUDA device here; use --device cpu")
    props = torch.cuda.get_device_properties(0)
    parent = _catalog_match(props.name)
    if parent is None:
        raise ProbeError(f"--device cuda: no catalog entry matches {props.name!r}, and vector "
                         "rates and the sparse core cannot be probed yet; add one to the "
                         "catalog first (see `dse hw list`)")
    steps, done = 4, 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, steps)

    figures: dict[str, Figure] = {"copy_bandwidth": _copy_bandwidth(torch, repeats)}
    tick()
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for dtype, name in ((torch.float16, "fp16"), (torch.bfloat16, "bf16"),
                            (torch.float32, "tf32")):
            torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
            figures[f"gemm_{name}"] = _gemm(torch, dtype, (8192,), max(repeats, 10), "cuda")
            tick()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_tf32
    torch.cuda.empty_cache()
    sources = {"dram_bandwidth_bytes_per_s": "copy_bandwidth",
               **{f"tensor_flops_per_s.{d}": f"gemm_{d}" for d in ("fp16", "bf16", "tf32")}}
    fields: dict[str, Any] = {path: figures[name].value for path, name in sources.items()}
    fields["sm_count"] = props.multi_processor_count
    smem = getattr(props, "shared_memory_per_multiprocessor", None)
    if smem:
        fields["shared_memory_per_sm_bytes"] = float(smem)
    l2 = getattr(props, "L2_cache_size", None)
    if l2:
        fields["l2_bytes"] = float(l2)
    facts = host.fingerprint("cuda")
    notes = (f"extends the catalog entry {parent!r}: its datasheet vector rates, fp8/int8 "
             "rates and sparse tensor core stay; the probe sets what it measured",)
    return ProbeResult("cuda", fields, figures, facts, notes, extends=parent, sources=sources)


def probe(device: str = "cpu", repeats: int = 7,
          progress: Callable[[int, int], None] | None = None,
          wait_idle_s: float = 0.0) -> ProbeResult:
    """Measure the machine's ceilings (see the module docstring); ``progress(done, total)``
    is called after each figure. ``repeats`` >= 3 per figure. ``wait_idle_s``: first wait up
    to that long for other processes to leave the cores alone."""
    if device not in ("cpu", "cuda"):
        raise ProbeError(f"--device {device!r}: use cpu or cuda")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 3:
        raise ProbeError(f"--repeats {repeats!r}: use a whole number >= 3")
    if wait_idle_s > 0:
        host.wait_idle(wait_idle_s)
    start = time.perf_counter()
    load = host.cpu_clock()
    result = _probe_cuda(repeats, progress) if device == "cuda" else _probe_cpu(repeats,
                                                                                 progress)
    others = host.other_cores(load)
    facts = dict(result.facts)
    facts["other_cores"] = others
    facts["idle"] = others is None or others < host.IDLE_THRESHOLD_CORES
    return ProbeResult(result.device, result.fields, result.figures, facts, result.notes,
                       result.extends, time.perf_counter() - start, result.sources)


# --- TOML -----------------------------------------------------------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else '"nan"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if value is None:
        return '"unknown"'
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_toml_value(v)}" for k, v in value.items()) \
            + " }"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
    return f'"{text}"'


def _key(key: str) -> str:
    bare = key.replace("_", "").replace("-", "").isalnum()
    return key if bare else f'"{key}"'


def probe_spec_toml(result: ProbeResult, name: str = "host",
                    command: str = "dse hw probe") -> str:
    """The probed ceilings as an accelerator spec for ``accelerator_models.load(path)``, with
    a ``[provenance]`` table (command, date, versions, every figure's method, repeats and
    spread). ``command`` is recorded as given."""
    facts = result.facts
    device = facts.get("device_name", facts.get("cpu_model", "unknown"))
    lines = [
        f"# Written by `{command}` on {facts.get('date', '')}: measured ceilings of this "
        "machine (the best of the repeats), not a datasheet: the roofline on this spec is an "
        "estimate, not a bound.",
        f"# Reruns on an idle machine agree within the spread given per figure in [provenance]; "
        f"idle during this probe: {facts.get('idle')}.",
        *(f"# {note}" for note in result.notes),
        f"name = {_toml_value(name)}",
        f"description = {_toml_value(f'{device} ({result.device}, probed)')}",
        # Measured ceilings, not peaks: some runs beat them, so the roofline on this spec is an
        # estimate, never a bound (a bound needs a spec of peaks, such as a catalog entry).
        'figures = "ceiling"',
    ]
    if result.extends:
        lines.append(f"extends = {_toml_value(result.extends)}")
    date = facts.get("date", "")
    lines.append(f"sources = {_toml_value([f'{command} ({date})'])}")
    lines.append("")
    tables: dict[str, dict[str, Any]] = {}
    for path, value in result.fields.items():
        table, _, key = path.rpartition(".")
        if table:
            tables.setdefault(table, {})[key] = value
        else:
            lines.append(f"{path} = {_toml_value(value)}")
    for table, values in tables.items():
        lines += ["", f"[{table}]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    lines += ["", "[provenance]", f"command = {_toml_value(command)}",
              f"date = {_toml_value(facts.get('date', ''))}",
              f"probe_seconds = {_toml_value(round(result.elapsed_s, 1))}",
              f"notes = {_toml_value(list(result.notes))}",
              f"spread = {_toml_value('(max - min) / median over the repeats of each figure')}",
              f"fields = {_toml_value(result.sources)}"]
    lines += ["", "[provenance.machine]"]
    for key, value in facts.items():
        lines.append(f"{_key(key)} = {_toml_value(value)}")
    for fig_name, fig in result.figures.items():
        lines += ["", f"[provenance.figures.{fig_name}]",
                  f"value = {_toml_value(fig.value)}", f"unit = {_toml_value(fig.unit)}",
                  f"method = {_toml_value(fig.method)}", f"repeats = {fig.repeats}",
                  f"min = {_toml_value(fig.min)}", f"max = {_toml_value(fig.max)}",
                  *([f"median = {_toml_value(fig.median)}"] if math.isfinite(fig.median)
                    else []),
                  f"spread = {_toml_value(round(fig.spread, 4))}"]
    return "\n".join(lines) + "\n"
