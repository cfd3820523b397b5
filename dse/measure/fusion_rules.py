"""Fusion-rule detection: which producer-consumer pairs of op kinds a backend fuses.

nn-Meter's method, on the machine at hand. For every (producer kind, consumer kind) pair that
occurs in the shipped traces, one representative occurrence (the one with the median
intermediate size) becomes two small torch modules, A (the producer) and B (the consumer), with
the occurrence's shapes at batch :data:`BATCH`. Three graphs are compiled with
``torch.compile(backend="inductor", fullgraph=True, dynamic=False)``: A alone and B alone (each
returns, so materializes, its output) and A->B as one graph (the intermediate is internal). Each
is timed by :func:`dse.measure.timing.time_kernel` (warm-up, repeats until the median settles),
in :data:`ROUNDS` interleaved rounds (A, B, A->B, A, B, A->B, ...) so that all three see the
same load on a shared machine, on :data:`THREADS` thread (a loaded machine preempts a team of
threads at every barrier); each graph's time is the median of its rounds' medians. ``o``, the
call time of a compiled one-element graph, is the fixed cost of calling a graph; the pair fuses
when

    (joined - o) < THRESHOLD * ((a - o) + (b - o))

i.e. the joined graph's own work is clearly below the two graphs' work (``o`` is taken out so
that saving one graph call does not count as fusion). Pairs not measured (budget spent, a
module that could not be built or compiled) are recorded, with the reason, and do not fuse.

Compiles are slow (seconds each); ``budget_s`` bounds a run: pairs run most frequent first and a
pair starts only while the budget affords the slowest pair so far. ``torch._dynamo.reset()``
runs before and after every pair, so no compiled graph outlives its pair. Needs torch (imported
on use).
"""

from __future__ import annotations

import datetime as _dt
import math
import platform
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from workloads import GEMM_KINDS, MODEL_INPUT, Trace, load_trace, trace_names

from ..roofline.fusion_rules import FusionRulesError, RuleTable
from .budget import Budget
from .timing import Timing, TimingMethod, time_kernel

__all__ = ["BACKENDS", "BATCH", "METHOD", "ROUNDS", "THREADS", "THRESHOLD", "PairSite", "decide",
           "detect_rules", "rule_table", "summary_counts", "trace_pairs"]

#: The joined graph must take below this share of the two graphs' work to count as fused.
THRESHOLD = 0.85
#: Samples per graph call: large enough that an op's work, not the call, dominates.
BATCH = 4
#: Timing of every graph, per round: 3 warm-up calls, then 10 to 60 repeats until the median
#: settles within 2% (or 2 s).
METHOD = TimingMethod(warmup=3, min_repeats=10, max_repeats=60, window=3, rel_tol=0.02,
                      max_time_s=2.0)
#: Interleaved rounds per graph.
ROUNDS = 9
#: Torch threads while timing.
THREADS = 1
#: Backend name -> torch device.
BACKENDS = {"inductor-cpu": "cpu", "inductor-cuda": "cuda"}


@dataclass(frozen=True)
class PairSite:
    """One (producer kind, consumer kind) pair of the traces and its representative occurrence."""

    producer: str
    consumer: str
    occurrences: int
    model: str
    producer_op: str
    consumer_op: str


def trace_pairs(traces: Sequence[Trace] | None = None) -> list[PairSite]:
    """Every producer-consumer pair of op kinds in ``traces`` (default: the shipped ones), most
    frequent first; each with the occurrence of median intermediate size."""
    traces = [load_trace(n) for n in trace_names()] if traces is None else list(traces)
    seen: dict[tuple[str, str], list[tuple[int, str, str, str]]] = defaultdict(list)
    for trace in traces:
        ops = trace.ops
        kind = dict(zip(ops["name"], ops["kind"], strict=True))
        size = dict(zip(ops["name"], ops["output_elems"], strict=True))
        for name, k, producers in zip(ops["name"], ops["kind"], ops["producers"], strict=True):
            for p in dict.fromkeys(producers):
                if p != MODEL_INPUT:
                    seen[(kind[p], k)].append((int(size[p]), trace.model, p, name))
    sites = []
    for (a, b), found in seen.items():
        found.sort()
        _, model, p, c = found[(len(found) - 1) // 2]
        sites.append(PairSite(a, b, len(found), model, p, c))
    return sorted(sites, key=lambda s: (-s.occurrences, s.producer, s.consumer))


def decide(a_s: float, b_s: float, joined_s: float, overhead_s: float,
           threshold: float = THRESHOLD) -> tuple[bool, float]:
    """(fused, ratio): ``ratio = (joined - o) / ((a - o) + (b - o))``, fused when below
    ``threshold``. ``o`` is capped at half the faster graph so the work never goes negative."""
    o = min(max(overhead_s, 0.0), 0.5 * min(a_s, b_s))
    work = (a_s - o) + (b_s - o)
    ratio = (joined_s - o) / work if work > 0 else math.inf
    return bool(ratio < threshold), float(ratio)


def rule_table(backend: str, records: Sequence[dict], provenance: dict,
               method: dict) -> RuleTable:
    """The table of ``records`` (one per pair, ``fused`` decided): the fused pairs are the rules."""
    rules = [(r["producer"], r["consumer"]) for r in records if r.get("fused")]
    return RuleTable.of(backend, rules, provenance=provenance, method=method,
                        pairs=tuple(records))


def detect_rules(backend: str = "inductor-cpu", *, threshold: float = THRESHOLD,
                 batch: int = BATCH, method: TimingMethod = METHOD, rounds: int = ROUNDS,
                 threads: int = THREADS, budget_s: float | None = None,
                 traces: Sequence[Trace] | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 command: str = "") -> RuleTable:
    """Detect the fusion rules of ``backend`` (see the module docstring) on this machine.

    ``progress(done, total)`` hears of every pair; ``command`` is recorded as provenance."""
    if backend not in BACKENDS:
        raise FusionRulesError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if not (0 < threshold <= 1):
        raise FusionRulesError(f"threshold {threshold!r}: give a share in (0, 1], e.g. 0.85")
    try:
        import torch
    except ImportError:
        raise FusionRulesError("detecting fusion rules needs torch: pip install "
                               "'sparsity-dse[export]'") from None
    device = BACKENDS[backend]
    if device == "cuda" and not torch.cuda.is_available():
        raise FusionRulesError(f"backend {backend!r} needs a CUDA device; none is available")
    if rounds < 1 or threads < 1:
        raise FusionRulesError("rounds and threads must be at least 1")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _detect(torch, backend, device, threshold, batch, method, rounds, budget_s,
                       traces, progress, command)
    finally:
        torch.set_num_threads(before)


def _detect(torch, backend, device, threshold, batch, method, rounds, budget_s, traces,
            progress, command) -> RuleTable:
    budget = Budget(budget_s if budget_s is not None else 1e12, error=FusionRulesError)
    traces = [load_trace(n) for n in trace_names()] if traces is None else list(traces)
    by_model = {t.model: t for t in traces}
    sites = trace_pairs(traces)
    bench = _Bench(torch, device, method, rounds)
    overhead = bench.overhead()
    records, slowest = [], 0.0
    for i, site in enumerate(sites):
        record = asdict(site)
        if not budget.affords(slowest):
            record.update(status="skipped: budget spent", fused=False)
        else:
            started = time.perf_counter()
            try:
                a, b, joined, x = _pair_modules(torch, by_model[site.model], site, batch, device)
                with torch.no_grad():
                    mid = a(x)
                timings = bench.time_together({"a": (a, x), "b": (b, mid),
                                               "joined": (joined, x)})
                times = {f"{k}_s": statistics.median(t.median_s for t in ts)
                         for k, ts in timings.items()}
                detail = {"rounds_s": {k: [t.median_s for t in ts] for k, ts in timings.items()},
                          "repeats": {k: sum(t.repeats for t in ts) for k, ts in timings.items()},
                          "spread": {k: round(max(t.spread for t in ts), 4)
                                     for k, ts in timings.items()},
                          "idle": all(t.idle for ts in timings.values() for t in ts)}
            except Exception as exc:  # a module torch cannot build or inductor cannot compile
                record.update(status=f"failed: {type(exc).__name__}: {str(exc)[:200]}",
                              fused=False)
            else:
                fused, ratio = decide(times["a_s"], times["b_s"], times["joined_s"], overhead,
                                      threshold)
                record.update(status="measured", **times, overhead_s=overhead, ratio=ratio,
                              fused=fused, **detail)
            record["seconds"] = time.perf_counter() - started
            slowest = max(slowest, record["seconds"])
        records.append(record)
        if progress is not None:
            progress(i + 1, len(sites))
    provenance = {
        "command": command, "date": _dt.datetime.now(_dt.UTC).isoformat(
            timespec="seconds"),
        "torch": torch.__version__, "python": platform.python_version(),
        "machine": platform.machine(), "processor": platform.processor() or platform.machine(),
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "threads": torch.get_num_threads(), "traces": sorted(by_model),
        "seconds": budget.spent(), "measured": sum(r["status"] == "measured" for r in records),
        "pairs": len(records),
    }
    method_record = {
        "threshold": threshold, "batch": batch, "timing": method.as_dict(), "rounds": rounds,
        "statistic": "median over rounds of each round's median",
        "overhead_s": overhead,
        "criterion": "(joined - overhead) < threshold * ((a - overhead) + (b - overhead))",
        "compile": "torch.compile(backend='inductor', fullgraph=True, dynamic=False)",
    }
    return rule_table(backend, records, provenance, method_record)


class _Bench:
    """Compiles and times graphs on one device; nothing compiled outlives a pair."""

    def __init__(self, torch, device: str, method: TimingMethod, rounds: int):
        self.torch, self.device, self.method, self.rounds = torch, device, method, rounds

    def time_together(self, graphs: dict) -> dict[str, list[Timing]]:
        """Compile every (module, input) of ``graphs``, then time them in interleaved rounds."""
        torch = self.torch
        torch._dynamo.reset()
        measure_one = None
        if self.device == "cuda":
            from .timing import cuda_event_clock

            measure_one = cuda_event_clock
        calls = {}
        with torch.no_grad():
            for key, (module, x) in graphs.items():
                graph = torch.compile(module, backend="inductor", fullgraph=True,
                                      dynamic=False)
                graph(x)  # compile outside the timed calls
                calls[key] = (lambda g=graph, t=x: g(t))
            out: dict[str, list[Timing]] = {key: [] for key in graphs}
            for _ in range(self.rounds):
                for key, call in calls.items():
                    out[key].append(time_kernel(call, self.method,
                                                threads=torch.get_num_threads(),
                                                measure_one=measure_one))
        torch._dynamo.reset()
        return out

    def overhead(self) -> float:
        x = self.torch.zeros(1, device=self.device)
        rounds = self.time_together({"o": (_Lambda(lambda t: t + 1.0), x)})["o"]
        return statistics.median(t.median_s for t in rounds)


def _pair_modules(torch, trace: Trace, site: PairSite, batch: int, device: str):
    """(A, B, A->B, A's input) for ``site``, shapes from its occurrence in ``trace``."""
    nn = torch.nn
    ops = trace.ops.set_index("name")
    a_row, b_row = ops.loc[site.producer_op], ops.loc[site.consumer_op]
    torch.manual_seed(0)
    if site.producer in GEMM_KINDS:
        a_mod, x = _gemm_module(torch, site.producer, a_row, batch)
        with torch.no_grad():
            mid = tuple(a_mod(x).shape)
    else:
        if site.consumer in GEMM_KINDS:
            mid = _gemm_input_shape(site.consumer, b_row, batch)
        else:
            mid = _generic_shape(trace, site.producer_op, int(a_row["output_elems"]), batch)
        a_mod, in_shape = _vector_module(torch, site.producer, site.producer_op, a_row, mid)
        x = torch.randn(in_shape)
    b_mod = _consumer_module(torch, site.consumer, site.consumer_op, b_row, mid, batch)
    joined = nn.Sequential(a_mod, b_mod)
    for m in (a_mod, b_mod, joined):
        m.eval().to(device)
    return a_mod, b_mod, joined, x.to(device)


class _Lambda:
    """A module from a function (torch imported lazily, so no nn.Module base at import)."""

    def __new__(cls, fn):
        import torch

        class Fn(torch.nn.Module):
            def forward(self, x):
                return fn(x)

        return Fn()


def _split(n: int) -> tuple[int, int]:
    """h x w = n with h the largest divisor of n at most sqrt(n)."""
    h = max(d for d in range(1, math.isqrt(max(n, 1)) + 1) if n % d == 0)
    return h, n // h


def _conv_geometry(row) -> tuple[int, int, int, int]:
    """(in channels, kernel edge, stride, output pixels) of a conv row: the smallest stride,
    then the first kernel edge of 1, 3, 7, 5, 2, 4 that explains k, groups and input_elems."""
    m, k, n, g, inp = (int(row[c]) for c in ("m", "k", "n", "groups", "input_elems"))
    for stride in (1, 2, 4, 8, 16):
        for kh in (1, 3, 7, 5, 2, 4):
            if k % (kh * kh) == 0:
                cin = g * k // (kh * kh)
                if cin and inp % cin == 0 and inp // cin == n * stride * stride:
                    return cin, kh, stride, n
    return g * k, 1, 1, n


def _gemm_input_shape(kind: str, row, batch: int) -> tuple[int, ...]:
    if kind == "conv":
        cin, _, stride, n = _conv_geometry(row)
        h, w = _split(n)
        return (batch, cin, h * stride, w * stride)
    if kind == "linear":
        return (batch, int(row["n"]), int(row["k"]))
    return (batch * int(row["groups"]), int(row["m"]), int(row["k"]))  # matmul: left operand


def _gemm_module(torch, kind: str, row, batch: int):
    """The producer GEMM and its input."""
    shape = _gemm_input_shape(kind, row, batch)
    return _consumer_module(torch, kind, "", row, shape, batch), torch.randn(shape)


def _generic_shape(trace: Trace, op: str, elems: int, batch: int) -> tuple[int, ...]:
    """The layout of the nearest GEMM upstream of ``op``: NCHW after a conv (its channels),
    (tokens, features) after a linear or matmul; else (rows, a divisor <= 1024)."""
    ops = trace.ops.set_index("name")
    todo, seen = [op], set()
    while todo:
        name = todo.pop(0)
        if name in seen or name == MODEL_INPUT:
            continue
        seen.add(name)
        row = ops.loc[name]
        if row["kind"] in GEMM_KINDS:
            channels = int(row["m"]) * (int(row["groups"]) if row["kind"] == "conv" else 1)
            if channels and elems % channels == 0:
                if row["kind"] == "conv":
                    return (batch, channels, *_split(elems // channels))
                return (batch, elems // channels, channels)
            break
        todo.extend(row["producers"])
    last = max(d for d in range(1, min(elems, 1024) + 1) if elems % d == 0)
    return (batch, elems // last, last)


def _activation(torch, name: str):
    nn = torch.nn
    low = name.lower()
    for key, make in (("relu", nn.ReLU), ("silu", nn.SiLU), ("sigmoid", nn.Sigmoid),
                      ("hardswish", nn.Hardswish), ("tanh", nn.Tanh)):
        if key in low:
            return make()
    return nn.GELU()


def _vector_module(torch, kind: str, name: str, row, out: tuple[int, ...]):
    """A non-GEMM producer whose output has shape ``out``, and its input shape."""
    ratio = max(1, round(int(row["input_elems"]) / max(int(row["output_elems"]), 1)))
    if kind in ("pool", "reduce") and ratio > 1:
        if len(out) == 4:
            size = out[2:]
            if "max" in name and ratio == 4:
                return (_Lambda(lambda t: torch.nn.functional.max_pool2d(t, 3, 2, 1)),
                        (*out[:2], 2 * out[2], 2 * out[3]))
            return (_Lambda(lambda t: torch.nn.functional.adaptive_avg_pool2d(t, size)),
                    (*out[:2], out[2] * ratio, out[3]))
        n = out[-2] if len(out) >= 2 else 1
        return (_Lambda(lambda t: t.reshape(*t.shape[:-2], n, ratio, t.shape[-1]).mean(-2)),
                (*out[:-2], n * ratio, out[-1]))
    if kind == "other":
        return _Lambda(lambda t: t.transpose(-1, -2).contiguous()), (*out[:-2], out[-1], out[-2])
    return _same_shape_module(torch, kind, name, out), out


def _same_shape_module(torch, kind: str, name: str, shape: tuple[int, ...]):
    nn = torch.nn
    if kind == "norm":
        return nn.BatchNorm2d(shape[1]) if len(shape) == 4 else nn.LayerNorm(shape[-1])
    if kind == "softmax":
        return nn.Softmax(dim=-1)
    if kind == "activation":
        return _activation(torch, name)
    # elementwise: a residual add of another activation, or a per-channel scale.
    other = torch.randn(shape)
    scale = torch.randn(shape[1] if len(shape) == 4 else shape[-1])
    if len(shape) == 4:
        scale = scale[:, None, None]

    class Elementwise(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("other", other)
            self.register_buffer("scale", scale)

        def forward(self, t):
            return t + self.other if "add" in name else t * self.scale

    return Elementwise()


def _consumer_module(torch, kind: str, name: str, row, shape: tuple[int, ...], batch: int):
    """A module of ``kind`` (shapes from ``row``) that reads a tensor of ``shape``."""
    nn = torch.nn
    numel = math.prod(shape)
    if kind == "conv":
        if len(shape) != 4:
            raise ValueError(f"conv consumer needs NCHW, got {shape}")
        cin, kh, stride, n = _conv_geometry(row)
        cin = shape[1]
        cout, g = int(row["m"]) * int(row["groups"]), int(row["groups"])
        g = g if cin % g == 0 and cout % g == 0 else 1
        if int(row["k"]) * g != cin * kh * kh:
            kh = max(1, math.isqrt(max(int(row["k"]) * g // cin, 1)))
        stride = max(1, round(math.sqrt(shape[2] * shape[3] / max(n, 1))))
        return nn.Conv2d(cin, cout, kh, stride, kh // 2 if kh % 2 else 0, groups=g)
    if kind == "linear":
        k, m = int(row["k"]), int(row["m"])
        if shape[-1] == k:
            return nn.Linear(k, m)
        if numel % (batch * k) == 0:
            return nn.Sequential(_Lambda(lambda t: t.reshape(batch, -1, k)), nn.Linear(k, m))
        return nn.Linear(shape[-1], m)
    if kind == "matmul":
        m, k, n = int(row["m"]), int(row["k"]), int(row["n"])
        left = (numel // (m * k), m, k) if numel % (m * k) == 0 else (numel // shape[-1], 1,
                                                                        shape[-1])
        right = torch.randn(left[0], left[2], n)

        class Matmul(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("right", right)

            def forward(self, t):
                return torch.bmm(t.reshape(left), self.right)

        return Matmul()
    if kind in ("pool", "reduce"):
        if len(shape) == 4:
            if "max" in name:
                return _Lambda(lambda t: torch.nn.functional.max_pool2d(t, 3, 2, 1))
            return _Lambda(lambda t: t.mean((2, 3), keepdim=True))
        return _Lambda(lambda t: t.mean(1, keepdim=True))
    if kind == "other":
        low = name.lower()
        if "pad" in low:
            return _Lambda(lambda t: torch.nn.functional.pad(t, (0, 0, 0, 1)))
        if "roll" in low:
            return _Lambda(lambda t: torch.roll(t, 3, dims=1))
        if "cat" in low:
            return _Lambda(lambda t: torch.cat([t, t], dim=1))
        return _Lambda(lambda t: t.transpose(-1, -2).contiguous())
    return _same_shape_module(torch, kind, name, shape)


def summary_counts(table: RuleTable) -> Counter:
    """How many pairs were measured, skipped or failed (for the command's last line)."""
    return Counter(str(r.get("status", "")).split(":")[0] for r in table.pairs)
