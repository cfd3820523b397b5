"""Part ``energy``: joules per call of dense and 2:4 GEMMs, vector ops, a depthwise convolution and
whole models, read from the GPU's energy counter (NVML ``nvmlDeviceGetTotalEnergyConsumption``,
millijoules since the driver loaded; Volta and newer) or, on the CPU, from RAPL
(:mod:`dse.measure.rapl`). Rows follow :data:`ENERGY_SCHEMA`.

Method: each workload is warmed up, its call time estimated, then called back to back for about
``TARGET_S`` seconds (the counter advances in steps of milliseconds, so a reading needs runs of
seconds) between two counter readings; the idle power, read once over a second of an idle
device, gives the dynamic share. NVML is reached through ``pynvml`` (nvidia-ml-py) where it is
installed, else through the driver's own ``libnvidia-ml.so.1`` with ctypes. Where neither the
counter nor RAPL can be read, every workload gets a row with status ``unavailable`` and the
reason; nothing is estimated in its place.
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from .collect_items import Item
from .collect_rows import Bench, error_text

__all__ = ["ENERGY_SCHEMA", "Meter", "Workload", "items", "open_meter", "run"]

#: Column -> (pandas dtype, meaning and unit) of the energy table.
ENERGY_SCHEMA: dict[str, tuple[str, str]] = {
    "run_id": ("string", "the run (as in the kernel dataset)"),
    "date": ("string", "ISO date and time the run started"),
    "device": ("string", "cuda | cpu"),
    "device_name": ("string", "GPU name or CPU model"),
    "item": ("string", "the workload's key"),
    "kind": ("string", "gemm | vector | conv | model"),
    "implementation": ("string", "as in the kernel dataset (cublas, cusparselt, torch_eager, ...)"),
    "format": ("string", "dense | 2:4"),
    "m": ("int64", "GEMM M (0 for others)"),
    "k": ("int64", "GEMM K (0 for others)"),
    "n": ("int64", "GEMM N, or a vector op's output elements"),
    "model": ("string", "timm model of a whole-model workload, else empty"),
    "batch": ("int64", "batch size (1 for kernels)"),
    "dtype": ("string", "fp16 (GPU) | fp32 (CPU)"),
    "calls": ("int64", "back-to-back calls between the two counter readings"),
    "seconds": ("float64", "wall seconds between the readings"),
    "joules": ("float64", "energy the counter advanced by, J"),
    "joules_per_call": ("float64", "joules / calls"),
    "watts": ("float64", "joules / seconds"),
    "idle_watts": ("float64", "the device's power over a second of idling, W"),
    "dynamic_joules_per_call": ("float64", "(joules - idle_watts x seconds) / calls"),
    "meter": ("string", "nvml (pynvml) | nvml (ctypes) | rapl"),
    "status": ("string", "ok | unavailable (no counter; see reason) | error (the workload "
               "failed; see reason)"),
    "reason": ("string", "why there is no reading, else empty"),
}

TARGET_S = {False: 2.0, True: 0.05}


@dataclass(frozen=True)
class Workload:
    kind: str  #: gemm | vector | conv | model
    implementation: str  #: how it runs: mm (dense) / sparse (2:4), a vector op, a model
    fmt: str
    m: int = 0
    k: int = 0
    n: int = 0
    model: str = ""
    batch: int = 1

    @property
    def key(self) -> str:
        shape = f"{self.model}-b{self.batch}" if self.model else f"{self.m}x{self.k}x{self.n}"
        return f"{self.kind}-{self.implementation}-{self.fmt.replace(':', '')}-{shape}"


def workloads(smoke: bool = False) -> list[Workload]:
    if smoke:
        return [Workload("gemm", "mm", "dense", 64, 128, 8),
                Workload("gemm", "mm", "2:4", 64, 128, 8),
                Workload("vector", "gelu", "dense", n=4096)]
    gemms = ((4096, 4096, 16), (14336, 4096, 16), (28672, 8192, 64), (4096, 4096, 2048),
             (8192, 8192, 8192))
    out = [Workload("gemm", "mm", fmt, m, k, n) for m, k, n in gemms for fmt in ("dense", "2:4")]
    out += [Workload("vector", "layer_norm", "dense", n=12608 * 768),
            Workload("vector", "gelu", "dense", n=2**26),
            # ConvNeXt-T's first 7x7 depthwise stage at batch 128, as a GEMM: M=1, K=49.
            Workload("conv", "dw7", "dense", 1, 49, 128 * 56 * 56, batch=128)]
    out += [Workload("model", "eager", fmt, model=m, batch=128)
            for m in ("deit_small_patch16_224", "vit_base_patch16_224") for fmt in ("dense", "2:4")]
    return out


def items(smoke: bool = False) -> list[Item]:
    return [Item(w.key, w) for w in workloads(smoke)]


# --- meters -----------------------------------------------------------------------------------


class _Nvml:
    """The GPU's cumulative energy counter, in joules."""

    def __init__(self, uuid: str | None):
        try:
            import pynvml
        except ImportError:
            pynvml = None
        if pynvml is not None:
            pynvml.nvmlInit()
            handle = self._pynvml_handle(pynvml, uuid)
            self._read = lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            self.name = "nvml (pynvml)"
        else:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            lib.nvmlErrorString.restype = ctypes.c_char_p
            self._check(lib, lib.nvmlInit_v2(), "nvmlInit_v2")
            handle = ctypes.c_void_p()
            found = uuid is not None and lib.nvmlDeviceGetHandleByUUID(
                ctypes.c_char_p(uuid.encode()), ctypes.byref(handle)) == 0
            if not found:
                self._check(lib, lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(0),
                                                                   ctypes.byref(handle)),
                            "nvmlDeviceGetHandleByIndex_v2")
            value = ctypes.c_ulonglong()

            def read() -> int:
                self._check(lib, lib.nvmlDeviceGetTotalEnergyConsumption(
                    handle, ctypes.byref(value)), "nvmlDeviceGetTotalEnergyConsumption")
                return value.value

            self._read = read
            self.name = "nvml (ctypes)"
        self.joules()  # the first reading: NOT_SUPPORTED shows here

    @staticmethod
    def _pynvml_handle(pynvml, uuid):
        if uuid is not None:
            try:
                return pynvml.nvmlDeviceGetHandleByUUID(uuid)
            except pynvml.NVMLError:
                pass
        return pynvml.nvmlDeviceGetHandleByIndex(0)

    @staticmethod
    def _check(lib, code: int, call: str) -> None:
        if code != 0:
            raise RuntimeError(f"{call}: {lib.nvmlErrorString(code).decode()} (code {code})")

    def joules(self) -> float:
        return self._read() * 1e-3


@dataclass(frozen=True)
class Meter:
    """``measure(work) -> (joules, seconds)``: run ``work`` once between two counter readings."""

    name: str
    measure: Callable[[Callable[[], object]], tuple[float, float]]


def open_meter(bench: Bench) -> Meter | str:
    """An energy meter for the run's device, or the reason there is none."""
    if bench.device == "cuda":
        torch = bench.torch
        uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
        uuid = f"GPU-{uuid}" if uuid is not None and not str(uuid).startswith("GPU-") else uuid
        try:
            nvml = _Nvml(None if uuid is None else str(uuid))
        except Exception as exc:  # no library, an old GPU, a VM without the counter
            return f"NVML energy counter unavailable: {error_text(exc)}"

        def measure(work: Callable[[], object]) -> tuple[float, float]:
            before, start = nvml.joules(), time.perf_counter()
            work()
            return nvml.joules() - before, time.perf_counter() - start

        return Meter(nvml.name, measure)
    from dse.measure import rapl

    try:
        zones = rapl.read_zones()
    except rapl.RaplError as exc:
        return f"RAPL unavailable: {exc}"
    packages = [z.name for z in zones if z.name.startswith("package")] or [
        z.name for z in zones]

    def measure(work: Callable[[], object]) -> tuple[float, float]:
        reading = rapl.measure_energy(work)
        return sum(reading.joules[n] for n in packages), reading.seconds

    return Meter("rapl", measure)


# --- workloads --------------------------------------------------------------------------------


def _call(bench: Bench, w: Workload) -> Callable[[], object]:
    """The workload as one call (built by the other parts' builders)."""
    import torch.nn.functional as F

    torch = bench.torch
    if w.kind == "gemm":
        from .collect_gemm import weights

        ops = weights(bench, w.m, w.k)
        x = torch.randn(w.k, w.n, generator=bench.generator(9), device=bench.device,
                        dtype=bench.torch_dtype)
        if w.fmt == "dense":
            dense = ops["w"]
            return lambda: torch.mm(dense, x)
        if isinstance(ops["sparse"], Exception):
            raise ops["sparse"]
        sparse = ops["sparse"]
        return lambda: torch.mm(sparse, x)
    if w.kind == "vector":
        from dse.measure.kernels_cpu import VectorCase, build_vector

        kind, weight = ("norm", 2 * 768) if w.implementation == "layer_norm" else (
            "activation", 0)
        kernel = build_vector(VectorCase(kind, w.implementation, w.n, w.n, weight),
                              device=bench.device, dtype=bench.dtype)
        return kernel.fn
    if w.kind == "conv":  # ConvNeXt-T stage 0: 96 channels at 56 x 56, 7x7 depthwise
        x = torch.randn(w.batch, 96, 56, 56, generator=bench.generator(5), device=bench.device,
                        dtype=bench.torch_dtype).contiguous(memory_format=torch.channels_last)
        wt = torch.randn(96, 1, 7, 7, generator=bench.generator(6), device=bench.device,
                         dtype=bench.torch_dtype).contiguous(memory_format=torch.channels_last)
        return lambda: F.conv2d(x, wt, None, 1, 3, 1, 96)
    from .collect_models import built, model_input

    model = built(bench, w.model, w.fmt)
    if isinstance(model, Exception):
        raise model
    x = model_input(bench, model, w.batch)
    module = model.module

    def forward():
        with torch.inference_mode():
            return module(x)

    return forward


def _row(bench: Bench, w: Workload, **values) -> dict:
    row = {c: bench.base[c] for c in ("run_id", "date", "device", "device_name")}
    impl = {"mm": "cublas" if w.fmt == "dense" else "cusparselt", "eager": "torch_eager",
            "dw7": "cudnn_conv_nhwc"}.get(w.implementation, w.implementation)
    row.update({"item": w.key, "kind": w.kind, "implementation": impl, "format": w.fmt,
                "m": w.m, "k": w.k, "n": w.n, "model": w.model, "batch": w.batch,
                "dtype": bench.dtype, "calls": 0, "seconds": math.nan, "joules": math.nan,
                "joules_per_call": math.nan, "watts": math.nan, "idle_watts": math.nan,
                "dynamic_joules_per_call": math.nan, "meter": "", "status": "ok",
                "reason": ""})
    row.update(values)
    return row


def run(item: Item, bench: Bench) -> dict[str, list[dict]]:
    w: Workload = item.config
    state = bench.scratch.setdefault("energy", {})
    if "meter" not in state:
        state["meter"] = open_meter(bench)
    meter = state["meter"]
    if isinstance(meter, str):
        return {"energy": [_row(bench, w, status="unavailable", reason=meter)]}
    try:
        fn = _call(bench, w)
        for _ in range(3):
            fn()
        bench.clock.sync()
        start = time.perf_counter()
        fn()
        bench.clock.sync()
        one = max(time.perf_counter() - start, 1e-6)
    except Exception as exc:  # the workload cannot run here (2:4 on the CPU): said, not faked
        bench.clock.sync()
        return {"energy": [_row(bench, w, status="error", reason=error_text(exc),
                                meter=meter.name)]}
    if "idle_watts" not in state:
        joules, seconds = meter.measure(lambda: time.sleep(1.0 if not bench.smoke else 0.05))
        state["idle_watts"] = joules / seconds
    calls = max(1, math.ceil(TARGET_S[bench.smoke] / one))

    def work():
        for _ in range(calls):
            fn()
        bench.clock.sync()

    joules, seconds = meter.measure(work)
    idle = state["idle_watts"]
    return {"energy": [_row(bench, w, calls=calls, seconds=seconds, joules=joules,
                            joules_per_call=joules / calls, watts=joules / seconds,
                            idle_watts=idle,
                            dynamic_joules_per_call=(joules - idle * seconds) / calls,
                            meter=meter.name)]}


def finish(bench: Bench) -> None:
    for key in ("energy", "gemm24", "models"):
        bench.scratch.pop(key, None)
    if bench.device == "cuda":
        bench.torch.cuda.empty_cache()
