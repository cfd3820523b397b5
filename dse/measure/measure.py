"""``dse measure``: real kernels for the shapes of a trace, and beyond them.

:func:`measure` times, on the machine at hand, every implementation the device has for each
asked format family (always dense too) on every distinct prunable shape of the trace at every
batch, plus the trace's vector ops, then spends what is left of the budget on new kernel
configurations chosen by adaptive sampling (:mod:`dse.measure.sampling`). Every row carries its
speed-of-light time on the given spec (dse's roofline, unfused, the op's own features) and the
fraction of it the kernel reached. Timing follows :mod:`dse.measure.timing`.

Budget arithmetic: the trace's own shapes are always measured (they are the point of the run);
sampling then adds configurations while the time left (``budget_s`` minus what the run has
spent, by ``clock``) covers the next one, estimated as the slowest of the last three sampled
configurations (or the mean trace shape before any). The trace's shapes are timed once
whatever the budget, so a budget they cannot fit is refused before the first of them: its floor
(every cold timing's ``min_repeats`` cache flushes, the flush's cost estimated on a small buffer,
then measured; :func:`dse.measure.budget.check_first_round_fits`); and once three of them are
timed, a round whose pace projects the run past 1.5 times the budget stops there, naming the
budget it needs (:func:`dse.measure.budget.check_first_round_pace`). Library code:
it never prints; progress goes through ``progress(done, total)``.

Rounds (``rounds``; default 4 on the CPU, 1 on CUDA): every configuration of the first round
(trace shapes, vector ops, whole models, sampled configurations) is timed again in each later
round, in a shuffled order, so its timings lie minutes apart; each row carries its ``round``.
Why: a shared CPU host changes speed for seconds at a time (the same 2-thread GEMM measured
5.6 ms or 8.8 ms, in runs of seconds each; a single-threaded CSR product 21 ms or 33 ms, at other
times), so one round's median is right or ~1.6x slow by the luck of when it ran, and two rounds
of the same kernel differed by more than 10% in 30-60% of pairs; the minimum over rounds of the
round medians is the machine's own speed with high probability (min of 2 rounds: 4% of GEMM
pairs over 10%). Calibration takes that minimum (:func:`dse.calibrate.features.training_rows`).
The sampler stops when the first round has spent ``budget_s / rounds``; a later round runs only
while the budget has room for it, each estimated at the first round's time
(:func:`dse.measure.budget.rounds_within`), so the run takes about the budget even when the
trace's own shapes alone take more than their share (they are always timed once); the
provenance keeps the rounds asked and run.

Warm timings (``warm``): each trace shape and vector op is also timed without the flush, its
inputs and weights left in the caches by the previous call. Inside a model an op reads the
activations the op before it just wrote, and on a virtual machine a cold start costs far more
than the bytes: after a flush the page-table walks are cold too (two-dimensional under nested
paging), so on this project's CPU VM a 150k-element GELU took 223 us cold and 30 us warm, a
96x384x196 GEMM 231 us and 89 us, a small scipy CSR product 240 us and 100 us; at 1 ms the two
differ by 15%. Cold rows are the isolated kernel the roofline's DRAM traffic assumes; warm rows
are nearer what the kernel costs inside a model.

Whole models (``whole_models``; always on CUDA, asked for on the CPU): the trace's timm model
itself, eval mode, at the trace's input size and each batch, timed by the same method with warm
caches (no flush between forward passes): on CUDA eager and as a CUDA graph
(``torch_eager``, ``torch_cudagraph``, fp16, dense); on the CPU eager in fp32, dense and, per
asked block or unstructured format, with every linear the format applies to masked and run as a
torch sparse ``W @ X`` (convolutions stay dense: torch has no CPU sparse convolution). They are
rows of family ``model`` (``whole_model_rows`` turns them into the ``model, variant, batch,
median_s`` table ``dse calibrate --whole-models`` reads); their speed of light is dse's unfused
bound of the whole trace (scope all), with only the linears that ran sparse priced sparse.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from ..output import check_output_path, write_atomic, write_table
from ..roofline import Numerics, evaluate, evaluate_layers
from . import host
from .budget import (
    Budget,
    check_first_round_fits,
    check_first_round_pace,
    duration_text,
    parse_duration,
    rounds_within,
)
from .dataset import SCHEMA, validate
from .errors import MeasureError
from .sol import sol_columns, sol_from_layers
from .timing import Timing, TimingMethod, time_kernel

__all__ = [
    "Budget",
    "DEFAULT_ROUNDS",
    "DEVICE_FAMILIES",
    "MeasureError",
    "MeasureResult",
    "check_inputs",
    "check_memory",
    "check_wait_idle",
    "kernel_bytes",
    "measure",
    "blank_row",
    "parse_budget",
    "sol_columns",
    "timing_row",
    "whole_model_trace",
    "write_dataset",
]

#: Format families each device has kernels for (dense is always measured as the baseline).
#: The timing method of a run unless one is given.
DEFAULT_METHOD = TimingMethod()

DEVICE_FAMILIES = {"cpu": ("dense", "block", "unstructured"),
                   "cuda": ("dense", "nm", "block", "unstructured")}

#: Rounds per configuration unless asked (module docstring): GPU event timers are repeatable
#: within a run; a shared CPU host is not.
DEFAULT_ROUNDS = {"cpu": 4, "cuda": 1}


# --- inputs -----------------------------------------------------------------------------------

def parse_budget(text: str | float | int) -> float:
    """``"10m"``, ``"90s"``, ``"1.5h"`` or a number of seconds -> seconds (> 0); refusals are
    :class:`MeasureError` (see :func:`dse.measure.budget.parse_duration`)."""
    return parse_duration(text, "--budget", MeasureError)



def _formats(texts: Sequence[str], device: str):
    import formats

    parsed = []
    for text in texts:
        try:
            fmt = formats.parse(text) if isinstance(text, str) else text
        except formats.FormatError as exc:
            raise MeasureError(f"--format {text!r}: {exc}") from None
        have = DEVICE_FAMILIES[device]
        if fmt.family not in have:
            hint = " (use --device cuda for 2:4 through cuSPARSELt)" if fmt.family == "nm" \
                else ""
            raise MeasureError(f"--format {fmt.name}: no {device} kernel runs the {fmt.family} "
                               f"family; {device} has {', '.join(have)}{hint}")
        if fmt.family == "nm" and (fmt.n, fmt.m) != (2, 4):
            raise MeasureError(f"--format {fmt.name}: CUDA runs N:M only as 2:4 "
                               "(cuSPARSELt); use --format 2:4")
        if fmt.family != "dense" and fmt not in parsed:
            parsed.append(fmt)
    return parsed


def _inputs(trace, hw, batches, device):
    import accelerator_models
    import workloads

    if device not in DEVICE_FAMILIES:
        raise MeasureError(f"--device {device!r}: use cpu or cuda")
    try:
        import torch  # noqa: F401  (the kernels are torch's and scipy's)
    except ImportError:
        raise MeasureError("dse measure needs torch; install 'sparsity-dse[export]'") from None
    if device == "cuda":
        try:
            import torch
            available = torch.cuda.is_available()
        except ImportError:
            available = False
        if not available:
            raise MeasureError("--device cuda: no CUDA device is visible here; use --device cpu")
    if isinstance(trace, str):
        try:
            trace = workloads.load_trace(trace)
        except (workloads.TraceError, ValueError) as exc:
            raise MeasureError(f"--model {trace}: {exc}") from None
    if isinstance(hw, str | Path):
        try:
            hw = accelerator_models.load(str(hw))
        except accelerator_models.SpecError as exc:
            raise MeasureError(f"--hw {hw}: {exc}") from None
    batches = [batches] if isinstance(batches, int) else list(batches)
    if not batches or any(isinstance(b, bool) or not isinstance(b, int | np.integer) or b < 1
                          for b in batches):
        raise MeasureError(f"--batch {batches!r}: give whole batch sizes >= 1")
    return trace, hw, sorted(set(int(b) for b in batches))


def _numerics(device: str, hw):
    # CPU kernels run fp32: dse prices them with the tf32 slot (4-byte values), which
    # `dse hw probe` fills with the fp32 BLAS rate, and fp32 vector and CSR rates.
    numerics = (Numerics(dtype="tf32", vector_dtype="fp32", csr_dtype="fp32")
                if device == "cpu" else Numerics(dtype="fp16", vector_dtype="fp16",
                                                 csr_dtype="fp32"))
    for table, dtype in (("tensor_flops_per_s", numerics.dtype),
                         ("vector_flops_per_s", numerics.vector_dtype)):
        if dtype not in getattr(hw, table):
            raise MeasureError(f"--hw {hw.name}: has no {table}.{dtype}, which {device} "
                               f"kernels are priced at; probe this machine with `dse hw probe` "
                               f"or --set {table}.{dtype}=VALUE")
    return numerics


# --- result -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class MeasureResult:
    """The dataset and what the command prints."""

    frame: pd.DataFrame  #: one row per kernel measurement (:data:`dse.measure.dataset.SCHEMA`)
    budget_s: float
    spent_s: float
    trace_configs: int
    sampled_configs: int
    provenance: dict = field(default_factory=dict)

    def summary(self) -> pd.DataFrame:
        """Per family and implementation: timed rows, median / p10 / p90 fraction of the speed
        of light, rows taken while the machine was not idle."""
        return family_summary(self.frame)

    def worst(self, per_family: int = 3) -> pd.DataFrame:
        """The trace shapes with the lowest fraction of the speed of light, per family (the
        best implementation of each shape)."""
        return worst_shapes(self.frame, per_family)

    def _rounds_text(self) -> str:
        rounds = int(self.provenance.get("rounds", 1))
        asked = int(self.provenance.get("rounds_asked", rounds))
        text = f", each timed in {rounds} rounds" if rounds > 1 else ""
        if asked > rounds:  # --budget honoured: later rounds that would overrun it not run
            text += (f" ({rounds} of the {asked} asked: the budget had no room for the "
                     "others)")
        return text

    def _overrun_text(self) -> str:
        # Said, not hidden: the trace's shapes are timed once whatever they cost; the budget
        # was checked against their floor before them, their real time can be more.
        if self.spent_s <= self.budget_s * 1.05:
            return ""
        return (" (over it: the trace's own shapes are always timed once, and took longer "
                "than their floor; a longer --budget leaves room for sampling)")

    def summary_text(self) -> str:
        """The summary ``dse measure`` prints."""
        f = self.frame
        ok = f[f["error"] == ""]
        lines = [
            f"measured {len(f)} kernel rows ({len(ok)} timed, {len(f) - len(ok)} not run) on "
            f"{f['device_name'].iloc[0] if len(f) else '?'}: {self.trace_configs} trace "
            f"configurations, {self.sampled_configs} sampled"
            f"{self._rounds_text()}; {self.spent_s:.0f} s of a {self.budget_s:.0f} s budget"
            f"{self._overrun_text()}",
        ]
        not_idle = int((ok["idle"] == False).sum())  # noqa: E712 (nullable boolean)
        if not_idle:
            lines.append(f"NOT IDLE: {not_idle} rows were timed while other processes kept "
                         "cores busy (column idle); rerun on an idle machine to trust them")
        lines.append("fraction of the speed of light (sol_s / median_s; 1 = on the roofline),"
                     f" hw {f['hw'].iloc[0] if len(f) else '?'}:")
        summary = self.summary()
        lines.append(f"  {'family':<13}{'implementation':<16}{'rows':>6}{'median':>9}"
                     f"{'p10':>9}{'p90':>9}")
        for r in summary.itertuples(index=False):
            lines.append(f"  {r.family:<13}{r.implementation:<16}{r.rows:>6}"
                         f"{r.median:>9.3f}{r.p10:>9.3f}{r.p90:>9.3f}")
        models = ok[ok["family"] == "model"]
        if len(models):
            lines.append("whole models (median of the forward passes; warm caches):")
            for r in models.itertuples(index=False):
                lines.append(f"  {r.model} {r.format} {r.implementation} b={r.batch}: "
                             f"{r.median_s * 1e3:.3f} ms (spread {r.spread:.0%}, {r.repeats} "
                             f"repeats, {r.threads} threads"
                             f"{'' if pd.isna(r.idle) or bool(r.idle) else ', NOT IDLE'})")
        worst = self.worst()
        if len(worst):
            lines.append("worst trace shapes (best implementation of each):")
            for r in worst.itertuples(index=False):
                lines.append(f"  {r.family:<13}{r.format:<18} M={r.m} K={r.k} N={r.n} "
                             f"g={r.groups} b={r.batch}: {r.sol_fraction:.3f} "
                             f"({r.implementation}, {r.op})")
        return "\n".join(lines)


def family_summary(frame: pd.DataFrame) -> pd.DataFrame:
    ok = frame[(frame["error"] == "") & frame["sol_fraction"].notna()]
    rows = []
    for (family, impl), g in ok.groupby(["family", "implementation"], sort=True):
        q = g["sol_fraction"].quantile([0.1, 0.5, 0.9])
        rows.append({"family": family, "implementation": impl, "rows": len(g),
                     "median": q[0.5], "p10": q[0.1], "p90": q[0.9],
                     "not_idle": int((g["idle"] == False).sum())})  # noqa: E712
    return pd.DataFrame(rows, columns=["family", "implementation", "rows", "median", "p10",
                                       "p90", "not_idle"])


def worst_shapes(frame: pd.DataFrame, per_family: int = 3) -> pd.DataFrame:
    ok = frame[(frame["error"] == "") & frame["sol_fraction"].notna()
               & (frame["source"] == "trace") & ~frame["family"].isin(["vector", "model"])]
    if ok.empty:
        return ok
    keys = ["family", "format", "m", "k", "n", "groups", "batch"]
    best = ok.loc[ok.groupby(keys)["sol_fraction"].idxmax()]
    return (best.sort_values("sol_fraction").groupby("family", sort=True)
            .head(per_family).sort_values(["family", "sol_fraction"]).reset_index(drop=True))


# --- the trace's shapes -----------------------------------------------------------------------


def _conv_geometries(trace) -> dict:
    """Real geometry of the trace's convolutions from the timm model of the same name, built
    on the meta device (no weights); {} when timm or the model is missing."""
    from .kernels_cpu import ConvGeometry

    try:
        import timm
        import torch
        with torch.device("meta"):
            model = timm.create_model(trace.model, pretrained=False)
    except Exception:  # no timm, an unknown or custom model: time the GEMMs only
        return {}
    geometries = {}
    for op in trace.ops[trace.ops["kind"] == "conv"].itertuples(index=False):
        try:
            module = model.get_submodule(op.name)
        except AttributeError:
            continue
        if not isinstance(module, torch.nn.Conv2d):
            continue
        spatial = op.input_elems // module.in_channels
        side = math.isqrt(spatial)
        if side * side != spatial or isinstance(module.padding, str):
            continue
        geometries[op.name] = ConvGeometry(
            module.in_channels, module.out_channels, tuple(module.kernel_size),
            tuple(module.stride), tuple(module.padding), module.groups, side, side)
    return geometries


def _distinct_shapes(trace) -> pd.DataFrame:
    ops = trace.ops[trace.ops["prunable"]]
    keys = ["kind", "m", "k", "n", "groups", "input_elems", "output_elems"]
    first = ops.groupby(keys, sort=False).agg(op=("name", "first"), count=("name", "size"))
    return first.reset_index()


def _distinct_vector_ops(trace) -> pd.DataFrame:
    from .kernels_cpu import activation

    ops = trace.ops[~trace.ops["kind"].isin(["conv", "linear", "matmul", "other"])].copy()
    ops["act"] = [(activation(n)[1] if k == "activation" else "")
                  for n, k in zip(ops["name"], ops["kind"], strict=True)]
    keys = ["kind", "act", "input_elems", "output_elems", "weight_elems"]
    return ops.groupby(keys, sort=False).agg(op=("name", "first"),
                                             count=("name", "size")).reset_index()


# --- rows -------------------------------------------------------------------------------------


def timing_row(t: Timing) -> dict:
    """The dataset columns of a timing."""
    return {"threads": t.threads, "warmup": t.warmup, "repeats": t.repeats, "stable": t.stable,
            "min_s": t.min_s, "median_s": t.median_s, "p90_s": t.p90_s, "spread": t.spread,
            "idle": t.idle if t.other_cores is not None else pd.NA,
            "other_cores": t.other_cores if t.other_cores is not None else np.nan}


def blank_row(run: dict) -> dict:
    """Every schema column at its empty value, then the run's shared ones (``run``)."""
    row = {c: (np.nan if SCHEMA[c][0] == "float64" else 0 if SCHEMA[c][0] == "int64"
               else pd.NA if SCHEMA[c][0] == "boolean" else "") for c in SCHEMA}
    row.update(run)
    return row


def _cold_timings(shapes: pd.DataFrame, vec: pd.DataFrame, fmts, batches) -> int:
    """Kernels the first round times after a cache flush: per batch, every trace shape in
    every format that applies to it (a shape fallback is a row, not a timing) and every
    vector op; at least one implementation each."""
    per_batch = len(vec) + sum(
        1 for shape in shapes.itertuples(index=False) for fmt in fmts
        if fmt.family == "dense" or bool(fmt.applies_to(shape.m, shape.k)))
    return per_batch * len(batches)


#: The buffer the CPU flush's cost is estimated on before its own is set up.
_PROBE_BYTES = 64 * 2**20


def _flush_bytes() -> int:
    """The CPU flush buffer: twice the last-level cache."""
    return 2 * max(host.cache_sizes().values(), default=32 * 2**20)


def _flush_estimate() -> tuple[float, float]:
    """Seconds to set up the CPU flush buffer and to read it once, scaled from a buffer of at
    most :data:`_PROBE_BYTES` (a small buffer reads from a cache at least as fast as a large
    one from memory: a lower bound, as the budget's floor needs)."""
    probe = min(_flush_bytes(), _PROBE_BYTES)
    start = time.perf_counter()
    buf = np.ones(probe // 8)
    setup = time.perf_counter() - start
    reads = []
    for _ in range(2):
        start = time.perf_counter()
        buf.sum()
        reads.append(time.perf_counter() - start)
    scale = _flush_bytes() / probe
    return setup * scale, min(reads) * scale


class _Flush:
    """Read a buffer of twice the last-level cache: the next call starts cold."""

    def __init__(self, device: str):
        self.device = device
        if device == "cuda":
            import torch

            props = torch.cuda.get_device_properties(0)
            l2 = int(getattr(props, "L2_cache_size", 50 * 2**20) or 50 * 2**20)
            self.buf = torch.empty(max(256 * 2**20, 4 * l2) // 2, dtype=torch.float16,
                                   device="cuda")
            self.seconds = 0.0  # asynchronous on the GPU: not priced in the budget's floor
        else:
            self.buf = np.ones(_flush_bytes() // 8)
            # What one flush costs (real seconds, as kernels are timed): the floor of a cold
            # timing, which the budget must fit (budget.check_first_round_fits). On a VM
            # reporting a 480 MiB L3 a flush reads 1 GB: 57 ms, five per cold timing.
            self.seconds = min(self._timed() for _ in range(2))

    def _timed(self) -> float:
        start = time.perf_counter()
        self()
        return time.perf_counter() - start

    def __call__(self) -> None:
        self.buf.sum()


@dataclass
class _Run:
    """State shared by the measuring helpers of one run."""

    device: str
    hw: object
    numerics: object
    method: TimingMethod
    flush: _Flush
    base: dict
    kernels: dict
    rows: list = field(default_factory=list)

    def time_at(self, kernel, cache: str, measure_one) -> Timing:
        """Time ``kernel`` by the run's method, cold (the flush before every call) or warm."""
        return time_kernel(kernel.fn, self.method, threads=kernel.threads,
                           before=self.flush if cache == "cold" else None,
                           measure_one=measure_one)

    def time_gemm(self, case, source: dict, sol: Callable[[object], tuple] | None,
                  caches: tuple[str, ...] = ("cold",)) -> int:
        """Measure every implementation of the case's family; append one row each and cache
        state (``cold``: the last-level cache flushed before every call; ``warm``: not)."""
        from . import kernels_cpu

        if self.device == "cuda":
            from . import kernels_cuda
            built = kernels_cuda.build_gemm(case)
            measure_one = kernels_cuda.event_clock
        else:
            built = kernels_cpu.build_gemm(case, self.kernels[case.fmt.family])
            measure_one = None
        for impl, kernel in built.items():
            for cache in caches if not isinstance(kernel, Exception) else caches[:1]:
                self._time_built(case, source, sol, impl, kernel, cache, measure_one)
        return len(built)

    def _time_built(self, case, source, sol, impl, kernel, cache, measure_one) -> None:
        """One row: ``impl`` of ``case`` timed at one cache state."""
        row = blank_row(self.base)
        row.update(source)
        row.update({"family": case.fmt.family, "implementation": impl,
                    "format": case.fmt.name, "sparsity": float(case.fmt.sparsity),
                    "block": _block_of(case.fmt), "m": case.m, "k": case.k,
                    "n": case.n, "groups": case.groups, "batch": case.batch,
                    "cache": cache})
        if isinstance(kernel, Exception):
            row.update({"error": f"{type(kernel).__name__}: "
                                 f"{str(kernel).splitlines()[0] if str(kernel) else ''}"[:300],
                        "dtype": "fp32" if self.device == "cpu" else "fp16"})
            self.rows.append(row)
            return
        timing = self.time_at(kernel, cache, measure_one)
        row.update(timing_row(timing))
        row.update({"kernel": kernel.kernel, "nnz": kernel.nnz, "dtype": kernel.dtype,
                    "index_dtype": kernel.index_dtype, "rel_err": kernel.rel_err,
                    "note": "; ".join(p for p in (source.get("note", ""), kernel.note)
                                      if p)})
        if sol is not None:
            time_s, bound, flops, dram = sol(case)
            row.update({"hw": self.hw.name, "sol_s": time_s, "sol_bound": bound,
                        "flops": flops, "bytes": dram,
                        "sol_fraction": time_s / timing.median_s})
        self.rows.append(row)


def _block_of(fmt) -> int:
    if fmt.family == "block":
        return int(fmt.block)
    if fmt.family == "nm":
        return int(fmt.m)
    return 1 if fmt.family == "unstructured" else 0


def _run_base(device: str, trace_name: str) -> tuple[dict, dict]:
    facts = host.fingerprint(device)
    date = str(facts["date"])
    base = {"run_id": f"{facts['device_name']}:{date}:{trace_name}", "date": date,
            "device": device, "device_name": str(facts["device_name"]),
            "fingerprint": json.dumps(facts, sort_keys=True, default=str)}
    return base, facts


def check_wait_idle(wait_idle_s: float, budget_s: float) -> None:
    """The wait for an idle machine counts in the budget: one as long as the budget or longer
    would spend all of it waiting (``--wait-idle 100 --budget 5s`` waited 100 s)."""
    if wait_idle_s > 0 and wait_idle_s >= budget_s:
        raise MeasureError(f"--wait-idle {wait_idle_s:g}: the wait counts in --budget "
                           f"{duration_text(budget_s)} and would leave nothing to measure; "
                           "give a shorter --wait-idle or a longer --budget")


#: Share of main memory the largest kernel's tensors may take (:func:`check_memory`): its
#: implementations copy them (X transposed, the sparse weight beside the dense one).
MEMORY_SHARE = 0.5
#: The copies an implementation holds beside a kernel's inputs and outputs, counted as a factor.
_COPIES = 2


def kernel_bytes(trace, batch: int, dtype_bytes: int = 4) -> tuple[int, str]:
    """About the bytes the largest kernel of ``trace`` at ``batch`` holds while timed: its
    input (im2col width for convolutions), output and weight, times the copies its
    implementations make; with the op that needs them. Whole models are not counted."""
    ops = trace.ops
    gemm = ops[ops["prunable"]]
    per_sample = ((gemm["groups"] * (gemm["k"] + gemm["m"]) * gemm["n"]).clip(lower=0)
                  .combine(gemm["input_elems"] + gemm["output_elems"], max))
    weights = gemm["groups"] * gemm["m"] * gemm["k"]
    vector = ops[~ops["kind"].isin(["conv", "linear", "matmul", "other"])]
    sizes = [(int(per) * batch + int(w), str(name)) for per, w, name in zip(
        per_sample, weights, gemm["name"], strict=True)]
    sizes += [((int(i) + int(o)) * batch, str(name)) for i, o, name in zip(
        vector["input_elems"], vector["output_elems"], vector["name"], strict=True)]
    if not sizes:
        return 0, ""
    elements, name = max(sizes)
    return _COPIES * dtype_bytes * elements, name


def check_memory(trace, batches: Sequence[int], device: str = "cpu",
                 memory: int | None = None) -> None:
    """Refuse a batch whose largest kernel cannot fit in :data:`MEMORY_SHARE` of this machine's
    memory (``memory`` bytes; default its main memory), with the estimate and the largest batch
    that fits, before anything is allocated (``--batch 16777216`` asked torch for 464 GB and
    ended in a traceback). CUDA kernels are checked against main memory too: their inputs are
    built there first."""
    memory = host.memory_bytes() if memory is None else memory
    if not memory:
        return
    limit = MEMORY_SHARE * memory
    dtype_bytes = 4 if device == "cpu" else 2
    for batch in sorted(set(int(b) for b in batches), reverse=True):
        need, op = kernel_bytes(trace, batch, dtype_bytes)
        if need <= limit:
            return
        fits = 0
        lo, hi = 1, batch
        while lo <= hi:  # the largest batch whose kernels fit (bytes grow with the batch)
            mid = (lo + hi) // 2
            if kernel_bytes(trace, mid, dtype_bytes)[0] <= limit:
                fits, lo = mid, mid + 1
            else:
                hi = mid - 1
        fix = (f"give --batch {fits:,} or less" if fits else
               "no batch fits: measure on a machine with more memory")
        raise MeasureError(f"--batch {batch:,}: the largest kernel of {trace.model} at this "
                           f"batch ({op}) needs about {need / 2**30:,.1f} GiB, beyond "
                           f"{MEMORY_SHARE:.0%} of this machine's {memory / 2**30:,.1f} GiB; "
                           f"{fix}")


def check_inputs(trace, hw, formats: Sequence[str], batches, device: str) -> None:
    """Refuse, with :class:`MeasureError`, what :func:`measure` would refuse before measuring
    anything (the device, the formats it has kernels for, the dtypes the spec must rate): a
    command line checks its inputs with this before it announces any work."""
    checked_trace, checked_hw, batch_list = _inputs(trace, hw, batches, device)
    _formats(formats, device)
    _numerics(device, checked_hw)
    check_memory(checked_trace, batch_list, device)


def measure(
    trace,
    hw,
    formats: Sequence[str],
    batches: int | Sequence[int] = 1,
    device: str = "cpu",
    budget_s: float = 300.0,
    progress: Callable[[int, int], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    method: TimingMethod = DEFAULT_METHOD,
    threads: int | None = None,
    vector_ops: bool = True,
    whole_models: bool | None = None,
    wait_idle_s: float = 0.0,
    seed: int = 0,
    kernels: bool = True,
    rounds: int | None = None,
    warm: bool = False,
    real_clock: Callable[[], float] | None = None,
) -> MeasureResult:
    """Measure real kernels for ``trace`` (a Trace or shipped name) on ``device`` and price them
    on ``hw`` (an Accelerator, a catalog name or a spec path, e.g. the ``dse hw probe`` file).

    ``formats``: format strings (``block4@87.5%``, ``unstructured@90%``, ``2:4`` on CUDA);
    dense is always measured. ``budget_s``: seconds for the whole run (see the module
    docstring). ``threads``: torch and numba threads, default all usable cores (recorded per
    row). ``whole_models``: also time the trace's whole timm model (module docstring; default:
    on CUDA only). ``kernels=False``: time the whole models only (no kernel shapes, no
    sampling). ``wait_idle_s``: first wait up to that long for other processes to leave the
    cores alone (counted in the budget). ``rounds``: times each configuration is timed, spread
    over the run (module docstring; default :data:`DEFAULT_ROUNDS`). ``warm``: also time
    every trace shape and vector op without the cache flush (rows with ``cache = "warm"``;
    sampled configurations stay cold). ``real_clock``: a clock of real seconds, by which the
    budget's floor and the first round's pace are judged (module docstring; default ``clock``
    when it is :func:`time.perf_counter`, else none: the readings of an injected ``clock`` are
    not seconds, and are checked against neither). Raises :class:`MeasureError` for input it
    cannot use.
    """
    budget = Budget(budget_s, clock, MeasureError)  # refuses budget <= 0 first: it costs nothing
    check_wait_idle(wait_idle_s, budget.total_s)
    rounds = DEFAULT_ROUNDS.get(device, 1) if rounds is None else rounds
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise MeasureError(f"--rounds {rounds!r}: give a whole number of rounds, 1 or more")
    trace, hw, batch_list = _inputs(trace, hw, batches, device)
    fmts = _formats(formats, device)
    numerics = _numerics(device, hw)
    time_kernels = bool(kernels)  # `kernels` names the device's kernel table below
    if time_kernels:
        check_memory(trace, batch_list, device)
    if whole_models is None:
        whole_models = device == "cuda"
    if not time_kernels and not whole_models:
        raise MeasureError("nothing to measure: kernels off and whole models off; drop "
                           "--whole-models-only or ask for --whole-models")
    if device == "cuda":
        from . import kernels_cuda
        kernels = kernels_cuda.CUDA_KERNELS
    else:
        from . import kernels_cpu
        kernels = kernels_cpu.CPU_KERNELS
    import torch

    import formats as formats_pkg

    if wait_idle_s > 0:
        host.wait_idle(wait_idle_s)
    threads = threads or host.core_count()
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        base, facts = _run_base(device, trace.model)
        base["round"] = 0
        dense = formats_pkg.parse("dense")
        all_fmts = [dense, *fmts]
        shapes = _distinct_shapes(trace)
        shapes = shapes if time_kernels else shapes.iloc[:0]
        vec = _distinct_vector_ops(trace) if vector_ops and time_kernels else pd.DataFrame()
        # Kernels timed after a cache flush in the first round: its floor, checked against the
        # budget before the flush buffer is set up (seconds on a large last-level cache), with
        # the flush's cost estimated on a small buffer, then again once it is measured.
        cold_timings = _cold_timings(shapes, vec, all_fmts, batch_list)
        real_clock = real_clock or (clock if clock is time.perf_counter else None)
        if device == "cpu" and cold_timings and real_clock is not None:
            setup_s, flush_s = _flush_estimate()
            check_first_round_fits(budget.total_s, budget.spent(), cold_timings,
                                   method.min_repeats, flush_s, MeasureError, setup_s)
        run = _Run(device, hw, numerics, method, _Flush(device), base, kernels)
        geometries = _conv_geometries(trace) if device == "cpu" and time_kernels else {}
        model_fmts = ([dense, *[f for f in fmts if f.family in ("block", "unstructured")]]
                      if device == "cpu" else [dense]) if whole_models else []
        caches = ("cold", "warm") if warm else ("cold",)
        # One job per configuration of the first round: each later round calls them again.
        jobs: list[Callable[[], object]] = []
        for batch in batch_list:
            layers = evaluate_layers(trace, hw, all_fmts, batches=batch, fusion="unfused",
                                     scope="all", numerics=numerics)
            sols = {f.name: sol_from_layers(layers[layers["format"] == f.name])
                    for f in all_fmts}
            for shape in shapes.itertuples(index=False):
                geo = geometries.get(shape.op)
                for fmt in all_fmts:
                    source = {"source": "trace", "model": trace.model, "op": shape.op,
                              "kind": shape.kind, "why": "a prunable shape of the trace",
                              "note": (f"{shape.count} ops share this shape"
                                       if shape.count > 1 else "")}
                    case = _trace_case(shape, fmt, batch, geo, seed)
                    if fmt.family != "dense" and not bool(fmt.applies_to(shape.m, shape.k)):
                        row = blank_row(base)
                        row.update(source)
                        row.update({"family": fmt.family, "implementation": "-",
                                    "format": fmt.name, "sparsity": float(fmt.sparsity),
                                    "block": _block_of(fmt), "m": shape.m, "k": shape.k,
                                    "n": shape.n * batch, "groups": shape.groups,
                                    "batch": batch, "error": f"shape fallback: M={shape.m}, "
                                    f"K={shape.k} cannot take {fmt.name}; the layer stays "
                                    "dense (see the dense rows)"})
                        run.rows.append(row)
                        jobs.append(None)  # nothing to time again; counted for progress
                    else:
                        op_sol = sols[fmt.name][shape.op]
                        jobs.append(partial(run.time_gemm, case, source,
                                            partial(_known_sol, op_sol), caches))
            for op in vec.itertuples(index=False):
                jobs.append(partial(_time_vector, run, op, batch, sols["dense"].get(op.op),
                                    trace, caches))
            if device == "cuda" and whole_models:
                jobs.append(partial(_time_whole_model, run, trace, batch, numerics))
            elif whole_models:
                for fmt in model_fmts:
                    jobs.append(partial(_time_whole_model_cpu, run, trace, batch, fmt, seed))
        trace_configs = len(jobs)
        total = rounds * trace_configs
        trace_started = clock()
        # The trace's shapes are always timed once: a budget they cannot fit is refused
        # before the first of them, not overrun (no extra reading of the clock).
        if real_clock is not None:
            check_first_round_fits(budget.total_s, trace_started - budget.start, cold_timings,
                                   method.min_repeats, run.flush.seconds, MeasureError)
        # Its pace (stopped early when the run would end far past the budget), by the real
        # clock: an injected run clock counts the readings the budget arithmetic names.
        room = budget.total_s - (trace_started - budget.start)
        pace_start = real_clock() if real_clock is not None else 0.0
        for done, job in enumerate(jobs, 1):
            if job is not None and not _timed_any(run, job):
                jobs[done - 1] = None  # it could not run: said once, not again each round
            if real_clock is not None:
                check_first_round_pace(real_clock() - pace_start, done, trace_configs, room,
                                       budget.total_s, trace_started - budget.start,
                                       MeasureError)
            if progress is not None:
                progress(done, total)
        per_config = (clock() - trace_started) / max(1, trace_configs)
        # The trace's shapes count in the first round's share.
        first_round = Budget(budget.total_s / rounds, clock, MeasureError, start=budget.start)
        sampled = (_sample(run, fmts, first_round, per_config, seed, jobs, progress,
                           trace_configs, rounds) if time_kernels else 0)
        jobs = [job for job in jobs if job is not None]
        # Later rounds only while the budget has room for one more, each estimated at the
        # first round's time: --budget bounds the run, whatever the trace's shapes cost.
        asked, rounds = rounds, 1 + rounds_within(budget, clock() - trace_started, rounds)
        done = trace_configs + sampled
        total = done + (rounds - 1) * len(jobs)
        for later in range(1, rounds):
            run.base["round"] = later
            order = np.random.default_rng(seed + later).permutation(len(jobs))
            for i in order:
                jobs[int(i)]()
                done += 1
                if progress is not None:
                    progress(done, total)
    finally:
        torch.set_num_threads(old_threads)
    frame = validate(pd.DataFrame(run.rows), "measured rows")
    spent = budget.spent()
    prov = {"facts": facts, "timing_method": method.as_dict(), "budget_s": budget.total_s,
            "spent_s": spent, "hw": hw.name, "numerics": {
                "dtype": numerics.dtype, "vector_dtype": numerics.vector_dtype,
                "csr_dtype": numerics.csr_dtype, "index_width_bytes":
                numerics.index_width_bytes},
            "formats": [f.name for f in fmts], "batches": batch_list, "trace": trace.model,
            "threads": threads, "kernels": time_kernels, "whole_models": bool(whole_models),
            "rounds": rounds, "rounds_asked": asked, "caches": list(caches)}
    return MeasureResult(frame, budget.total_s, spent, trace_configs, sampled, prov)


def _known_sol(sol: tuple, _case) -> tuple:
    """The speed of light of a trace shape, priced before timing (``_Run.time_gemm``'s
    ``sol``)."""
    return sol


def _timed_any(run: _Run, job: Callable[[], object]) -> bool:
    """Run ``job``; whether any row it added was timed (not an error)."""
    before = len(run.rows)
    job()
    return any(row["error"] == "" for row in run.rows[before:])


def _trace_case(shape, fmt, batch: int, geo, seed: int):
    from .kernels_cpu import GemmCase

    return GemmCase(int(shape.m), int(shape.k), int(shape.n) * batch, int(shape.groups), fmt,
                    batch, geo, seed)


def _time_vector(run: _Run, op, batch: int, sol, trace,
                 caches: tuple[str, ...] = ("cold",)) -> None:
    from workloads import norm_width

    from .kernels_cpu import VectorCase, build_vector

    case = VectorCase(op.kind, op.op, int(op.input_elems) * batch,
                      int(op.output_elems) * batch, int(op.weight_elems), batch)
    if run.device == "cuda":
        from . import kernels_cuda
        kernel = kernels_cuda.build_vector(case)
        measure_one = kernels_cuda.event_clock
    else:
        kernel = build_vector(case)
        measure_one = None
    for cache in caches if kernel is not None else caches[:1]:
        row = blank_row(run.base)
        row.update({"source": "trace", "model": trace.model, "op": op.op, "kind": op.kind,
                    "why": "a vector op of the trace", "family": "vector",
                    "implementation": "torch_vector" if run.device == "cpu"
                    else "torch_cuda_vector",
                    "format": "dense", "n": int(op.output_elems) * batch, "groups": 1,
                    # a norm's K: the width it normalises over (what predictors learn from)
                    "k": norm_width(op.op, int(op.weight_elems)) if op.kind == "norm" else 0,
                    "batch": batch,
                    "dtype": "fp32" if run.device == "cpu" else "fp16", "cache": cache,
                    "note": f"{op.count} ops share this shape" if op.count > 1 else ""})
        if kernel is None:
            row["error"] = f"no kernel for a {op.kind} op of these sizes"
            run.rows.append(row)
            return
        timing = run.time_at(kernel, cache, measure_one)
        row.update(timing_row(timing))
        row["kernel"] = kernel.kernel
        row["note"] = "; ".join(p for p in (row["note"], kernel.note) if p)
        if sol is not None:
            time_s, bound, _flops, dram = sol
            vflops = float(trace.ops.loc[trace.ops["name"] == op.op, "vector_flops"].iloc[0]
                           ) * batch
            row.update({"hw": run.hw.name, "sol_s": time_s, "sol_bound": bound,
                        "flops": vflops, "bytes": dram, "sol_fraction": time_s / timing.median_s})
        run.rows.append(row)


def _time_whole_model(run: _Run, trace, batch: int, numerics) -> None:
    """Whole-model rows (CUDA): eager and CUDA-graph forward passes against dse's unfused
    speed of light of the whole trace (scope all)."""

    from . import kernels_cuda

    sol = evaluate(trace, run.hw, "dense", batches=batch, fusion="unfused", scope="all",
                       numerics=numerics)
    sol = sol[sol["format"] == "dense"].iloc[0]
    try:
        stats = kernels_cuda.time_model(trace.model, batch)
        error = ""
    except Exception as exc:  # no timm, an unknown model, out of memory
        stats, error = {"eager": {}, "cudagraph": {}}, f"{type(exc).__name__}: {exc}"[:300]
    for impl, s in stats.items():
        row = blank_row(run.base)
        row.update({"source": "trace", "model": trace.model, "op": "(whole model)",
                    "kind": "model", "why": "the whole model of the trace", "family": "model",
                    "implementation": f"torch_{impl}", "format": "dense", "batch": batch,
                    "groups": 1,
                    "dtype": "fp16", "cache": "warm", "error": error, "hw": run.hw.name,
                    "sol_s": float(sol["latency_s"]), "sol_bound": str(sol["bound"]),
                    "flops": float(sol["flops"]), "bytes": float(sol["dram_bytes"])})
        if s:
            row.update({"min_s": s["min_s"], "median_s": s["median_s"], "p90_s": s["p90_s"],
                        "repeats": int(s["repeats"]), "warmup": 3, "threads": 1,
                        "spread": (s["p90_s"] - s["min_s"]) / s["median_s"],
                        "sol_fraction": float(sol["latency_s"]) / s["median_s"]})
        run.rows.append(row)


def whole_model_trace(trace, fmt):
    """``trace`` with only the linears a CPU whole model runs sparse in ``fmt`` left prunable
    (:func:`dse.measure.kernels_cpu.sparse_linear_applies`): what a sparse whole-model row of
    ``dse measure`` measured, for its speed of light and its expectation."""
    import workloads

    from .kernels_cpu import sparse_linear_applies

    records = trace.to_json()["ops"]
    for r in records:
        if r["prunable"] and not (r["kind"] == "linear"
                                  and sparse_linear_applies(fmt, r["m"], r["k"])):
            r["prunable"] = False
    return workloads.Trace.from_records(trace.model, trace.input_shape, records,
                                        provenance=dict(trace.provenance))


def _time_whole_model_cpu(run: _Run, trace, batch: int, fmt, seed: int) -> None:
    """One whole-model row (CPU): the trace's timm model, eager, fp32, at ``batch``; dense, or
    with the linears ``fmt`` applies to on a torch sparse path (module docstring)."""
    from .kernels_cpu import build_model

    dense = fmt.family == "dense"
    priced = trace if dense else whole_model_trace(trace, fmt)
    row = blank_row(run.base)
    row.update({"source": "trace", "model": trace.model, "op": "(whole model)",
                "kind": "model", "why": "the whole model of the trace", "family": "model",
                "implementation": "torch_eager", "format": fmt.name,
                "sparsity": 0.0 if dense else float(fmt.sparsity), "block": _block_of(fmt),
                "batch": batch, "groups": 1, "dtype": "fp32", "cache": "warm"})
    try:
        kernel = build_model(trace.model, tuple(trace.input_shape), batch,
                             None if dense else fmt, seed)
        # Timing runs the model: out of memory or a sparse path torch refuses at run time is
        # the row's error, as a failed build is, not a traceback that ends the measurement.
        timing = time_kernel(kernel.fn, run.method, threads=kernel.threads)
    except Exception as exc:  # no timm, an unknown or custom model, out of memory
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[
            :300]
        run.rows.append(row)
        return
    del kernel.fn  # the model and its input: free them before the next one is built
    sol = evaluate(priced, run.hw, fmt, batches=batch, fusion="unfused", scope="all",
                   numerics=run.numerics)
    sol = sol[sol["format"] == fmt.name].iloc[0]
    row.update(timing_row(timing))
    row.update({"kernel": kernel.kernel, "nnz": kernel.nnz, "index_dtype": kernel.index_dtype,
                "rel_err": kernel.rel_err, "note": kernel.note, "hw": run.hw.name,
                "sol_s": float(sol["latency_s"]), "sol_bound": str(sol["bound"]),
                "flops": float(sol["flops"]), "bytes": float(sol["dram_bytes"]),
                "sol_fraction": float(sol["latency_s"]) / timing.median_s})
    run.rows.append(row)


def _time_sample(run: _Run, case, source: dict) -> None:
    """Time a sampled configuration and price its rows (their speed of light is not known
    from the trace's layers)."""
    before = len(run.rows)
    run.time_gemm(case, source, None)
    new = pd.DataFrame(run.rows[before:])
    ok = new["error"] == ""
    if ok.any():
        priced = sol_columns(new[ok], run.hw, run.numerics.dtype, run.numerics.vector_dtype,
                             run.numerics.csr_dtype)
        for offset, (_, row) in zip(np.flatnonzero(ok.to_numpy()), priced.iterrows(),
                                    strict=True):
            run.rows[before + int(offset)] = row.to_dict()


def _sample(run: _Run, fmts, budget: Budget, per_config: float, seed: int,
            jobs: list, progress, done: int, rounds: int) -> int:
    """Adaptive sampling until the budget is spent; returns the configurations measured and
    appends to ``jobs`` one job per configuration that times it again."""
    from .kernels_cpu import GemmCase
    from .sampling import AdaptiveSampler

    families = ["dense", *sorted({f.family for f in fmts})]
    sampler = AdaptiveSampler(families, seed=seed, device=run.device)
    costs: list[float] = []
    count = 0
    pending = []
    while True:
        estimate = max(costs[-3:]) if costs else per_config
        if not budget.affords(estimate):
            break
        if not pending:
            measured = pd.DataFrame(run.rows)
            pending = sampler.next_configs(measured, count=4)
            if not pending:
                break
        config = pending.pop(0)
        started = budget.clock()
        case = GemmCase(config.m, config.k, config.n, config.groups, config.format(), 1, None,
                        seed + 1000 + count)
        source = {"source": "sample", "kind": "linear" if config.groups == 1 else "conv",
                  "why": config.why}
        job = partial(_time_sample, run, case, source)
        if _timed_any(run, job):
            jobs.append(job)
        costs.append(budget.clock() - started)
        count += 1
        if progress is not None:
            progress(done + count, rounds * (done + count + len(pending)))
    return count


def write_dataset(result: MeasureResult, path: str | Path, command: str) -> Path:
    """Write the dataset (Parquet, or CSV by suffix) atomically, with ``<path>.json`` beside
    it holding the command, date, machine and method."""
    out = check_output_path(Path(path), (".parquet", ".csv"))
    frame = validate(result.frame, str(out))
    prov = dict(result.provenance)
    prov.update({"command": command, "rows": len(frame), "schema": "dse-measurements/1",
                 "trace_configs": result.trace_configs,
                 "sampled_configs": result.sampled_configs})
    write_table(frame, out)
    text = json.dumps(prov, indent=1, default=str) + "\n"
    write_atomic(out.with_suffix(".json"), lambda handle: handle.write(text.encode()))
    return out

