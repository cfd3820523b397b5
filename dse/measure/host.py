"""Facts about the machine at hand, read from the OS, and the check that it is idle.

Everything here is standard library: no torch, no numba, so the SpMV benchmark, the probe and
the dataset loader can all use it cheaply. Linux paths are read where they exist
(``/sys/devices/system/cpu``, ``/proc/cpuinfo``, ``/proc/stat``, ``/proc/meminfo``); elsewhere
the functions return what ``os``/``platform`` know and leave the rest out, never guess.

The idle check: other processes' CPU use is the machine's busy CPU time (``/proc/stat``) minus
this process's own (``os.times``), per second of wall time. A measurement taken while other
processes kept more than :data:`IDLE_THRESHOLD_CORES` cores busy on average is flagged.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

__all__ = [
    "IDLE_THRESHOLD_CORES",
    "cache_sizes",
    "core_count",
    "cpu_clock",
    "cpu_flags",
    "cpu_model",
    "allocator_settings",
    "fingerprint",
    "memory_bytes",
    "other_cores",
    "wait_idle",
]

#: Average cores kept busy by other processes above which a measurement is flagged not idle.
IDLE_THRESHOLD_CORES = 0.15

_CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)i?B?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def _parse_size(text: str) -> int | None:
    match = _SIZE.match(text)
    if match is None:
        return None
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def _sysfs_caches(root: Path) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for index in sorted(root.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = _parse_size((index / "size").read_text())
        except OSError:
            continue
        if size is None or kind == "Instruction":
            continue
        key = "l1d" if level == "1" else f"l{level}"
        sizes[key] = size
    return sizes


def _getconf_caches() -> dict[str, int]:
    names = {"l1d": "LEVEL1_DCACHE_SIZE", "l2": "LEVEL2_CACHE_SIZE", "l3": "LEVEL3_CACHE_SIZE"}
    sizes: dict[str, int] = {}
    for key, name in names.items():
        try:
            out = subprocess.run(["getconf", name], capture_output=True, text=True, timeout=5,
                                 check=False).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return sizes
        if out.isdigit() and int(out) > 0:
            sizes[key] = int(out)
    return sizes


def cache_sizes() -> dict[str, int]:
    """Data-cache sizes in bytes of one core's view: keys ``'l1d'``, ``'l2'``, ``'l3'`` where
    known (a shared level is its whole size, not a per-core share).

    Read from ``/sys/devices/system/cpu/cpu0/cache`` (what the VM or OS exposes to this
    machine); ``getconf`` only when sysfs has nothing, because inside a VM it may report the
    host's caches.
    """
    sizes = _sysfs_caches(_CACHE_DIR)
    return sizes or _getconf_caches()


def core_count() -> int:
    """Cores this process may run on (the affinity mask), else ``os.cpu_count()``."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _cpuinfo_field(name: str) -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(name):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    """The CPU model string (``/proc/cpuinfo`` ``model name``), else ``platform.processor()``."""
    return _cpuinfo_field("model name") or platform.processor() or "unknown"


def cpu_flags() -> frozenset[str]:
    """The CPU feature flags (``avx512f``, ``avx512_bf16``, ``amx_bf16``, ...); empty if unknown."""
    flags = _cpuinfo_field("flags")
    return frozenset(flags.split()) if flags else frozenset()


def memory_bytes() -> int | None:
    """Total main memory in bytes (``/proc/meminfo`` MemTotal), or None."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cpu_clock() -> tuple[float, float, float] | None:
    """(wall seconds, busy CPU seconds of the whole machine, CPU seconds of this process);
    None where ``/proc/stat`` is missing (not Linux)."""
    try:
        with open("/proc/stat", encoding="utf-8") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    ticks = os.sysconf("SC_CLK_TCK")
    own = os.times()
    return time.perf_counter(), (sum(fields[:8]) - idle) / ticks, own.user + own.system


def other_cores(since: tuple[float, float, float] | None) -> float | None:
    """Cores that other processes kept busy, on average, since ``since`` (a :func:`cpu_clock`
    reading); None when unknown. Above :data:`IDLE_THRESHOLD_CORES` the machine was not idle."""
    now = cpu_clock()
    if since is None or now is None or now[0] <= since[0]:
        return None
    return max(0.0, ((now[1] - since[1]) - (now[2] - since[2])) / (now[0] - since[0]))


def wait_idle(max_s: float) -> float:
    """Wait (up to ``max_s`` seconds) until other processes have left the cores alone for a
    second; returns the seconds waited. A no-op when ``max_s`` is 0 or /proc/stat is missing."""
    start = time.perf_counter()
    calm = 0
    while max_s > 0 and time.perf_counter() - start < max_s and calm < 2:
        clock = cpu_clock()
        if clock is None:
            break
        time.sleep(0.5)
        calm = calm + 1 if (other_cores(clock) or 0.0) < 0.1 else 0
    return time.perf_counter() - start


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _torch_facts() -> dict[str, object]:
    """Versions and backends of torch, only if it is already imported (never imports it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    facts: dict[str, object] = {
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "mkldnn": bool(torch.backends.mkldnn.is_available()),
        "mkl": bool(torch.backends.mkl.is_available()),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        facts.update({
            "gpu": props.name,
            "gpu_sm_count": props.multi_processor_count,
            "gpu_capability": f"{props.major}.{props.minor}",
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
        })
        cusparselt = getattr(torch.backends, "cusparselt", None)
        if cusparselt is not None and cusparselt.is_available():
            facts["cusparselt"] = cusparselt.version()
        driver = _nvidia_driver()
        if driver:
            facts["driver"] = driver
    return facts


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=10, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0] if out else None


#: Environment variables that change how the C allocator serves a process's memory (glibc's
#: tunables, a preloaded allocator such as jemalloc or tcmalloc).
ALLOCATOR_VARIABLES = ("LD_PRELOAD", "GLIBC_TUNABLES", "MALLOC_ARENA_MAX",
                       "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                       "MALLOC_MMAP_MAX_", "MALLOC_CONF", "TCMALLOC_RELEASE_RATE")


def allocator_settings(environ=None) -> dict[str, str]:
    """The allocator settings of this process's environment (:data:`ALLOCATOR_VARIABLES`
    that are set): on a CPU they change a sparse whole model's time by 1.6x or more with the
    same kernels (``python -m benchmarks.cpu.allocator_effect``), so a measurement records
    them. Empty: the C library's defaults."""
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in ALLOCATOR_VARIABLES if environ.get(name)}


def fingerprint(device: str = "cpu") -> dict[str, object]:
    """The machine and software a measurement ran on: CPU model, cores, caches, memory, OS,
    Python and library versions (torch, scipy, numba, numpy only where installed; torch's
    backends and the GPU only if torch is already imported), and the date.

    ``device`` is recorded as given (``"cpu"`` or ``"cuda"``); the ``device_name`` key is the
    GPU name on CUDA, the CPU model otherwise.
    """
    facts: dict[str, object] = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "device": device,
        "cpu_model": cpu_model(),
        "machine": platform.machine(),
        "cores": core_count(),
        "cpu_count": os.cpu_count(),
        "caches_bytes": cache_sizes(),
        "memory_bytes": memory_bytes(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }
    for dist in ("numpy", "scipy", "numba", "pandas", "sparsity-dse"):
        version = _version(dist)
        if version:
            facts[dist] = version
    facts.update(_torch_facts())
    facts["allocator"] = allocator_settings()
    facts["device_name"] = facts.get("gpu", facts["cpu_model"]) if device == "cuda" \
        else facts["cpu_model"]
    return facts
