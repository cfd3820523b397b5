"""The SimPy model: DRAM and the compute units as resources, tiles as load/compute/store.

It plays out a :class:`dse.sim.plan.Plan` in time and returns the event log. Two overlap models:

* ``pipelined`` (realistic): per op a loader, a computer and a storer process hand tiles down a
  pipeline. A tile's compute waits for its load and its store for its compute; ``depth`` buffer
  stages bound how far loads run ahead of stores (1 = no overlap within an op, 2 = double
  buffering). Loads and stores share DRAM in request order; prefetches of later ops' weights
  use DRAM only when no load or store of the running op waits for it.
* ``full``: the roofline's assumption. An op's compute and its DRAM traffic proceed
  independently, each at its unit's full rate, and the op ends when both are done; ops are
  sequential, so each op takes ``max(compute, memory)`` of its own traffic. With
  ``fused_prefetched`` the DRAM stream may run up to ``prefetch_depth`` ops ahead of compute
  (without limit it is one roofline over the whole graph).

Every kernel starts with the launch overhead, during which its units idle. The log holds one
record per busy interval of a resource.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import simpy

from .plan import Plan

__all__ = ["OVERLAPS", "PHASES", "RESOURCES", "CountingEnvironment", "EventLog", "run"]

OVERLAPS = ("pipelined", "full")
RESOURCES = ("dram", "tensor", "sparse_tensor", "vector")
PHASES = ("load", "compute", "store", "prefetch")
DRAM, TENSOR, SPARSE, VECTOR = range(4)
LOAD, COMPUTE, STORE, PREFETCH = range(4)
#: Prefetches wait for DRAM behind the running op's loads and stores.
_OP_PRIORITY, _PREFETCH_PRIORITY = 0, 1
#: A prefetch moves in at most this many pieces, so the running op's loads wait for one piece.
MAX_PREFETCH_PIECES = 64


class CountingEnvironment(simpy.Environment):
    """An environment that counts the events it processes (the benchmark's unit of work)."""

    def __init__(self) -> None:
        super().__init__()
        self.processed = 0

    def step(self) -> None:
        super().step()  # raises EmptySchedule when nothing is left: not an event
        self.processed += 1


@dataclass(frozen=True, eq=False)
class EventLog:
    """What happened: busy intervals and per-op start, launch and end times (seconds)."""

    # One row per busy interval: resource, op position, tile (-1 for prefetch), phase,
    # start, end, DRAM bytes.
    resource: np.ndarray
    op: np.ndarray
    tile: np.ndarray
    phase: np.ndarray
    start: np.ndarray
    end: np.ndarray
    bytes: np.ndarray
    op_begin: np.ndarray  # when the op's turn came (before its launch overhead)
    op_launch: np.ndarray  # launch overhead paid by the op
    op_end: np.ndarray  # when its last activity finished
    events: int  # SimPy events processed

    @property
    def latency_s(self) -> float:
        return float(self.op_end[-1]) if len(self.op_end) else 0.0


class _Model:
    def __init__(self, plan: Plan, overlap: str, prefetch_depth: int,
                 progress: Callable[[int, int], None] | None = None) -> None:
        self.plan = plan
        self.progress = progress
        self.overlap = overlap
        self.prefetch_depth = prefetch_depth
        self.env = env = CountingEnvironment()
        self.dram = simpy.PriorityResource(env, capacity=1)
        self.units = (None, simpy.Resource(env, 1), simpy.Resource(env, 1),
                      simpy.Resource(env, 1))
        self.log: list[tuple] = []
        s = len(plan.ops)
        self.inv_bw = plan.work.inv_bw
        self.tensor_s = plan.tensor_s.tolist()
        self.vector_s = plan.vector_s.tolist()
        self.tensor_code = (TENSOR + plan.tensor_unit).tolist()
        self.tiles = plan.tiles.tolist()
        self.load = (plan.load_bytes - plan.prefetch_bytes).tolist()
        self.total_load = plan.load_bytes.tolist()
        self.store = plan.store_bytes.tolist()
        self.launch = np.where(plan.kernel_start, plan.launch_overhead_s, 0.0).tolist()
        self.begin = [0.0] * s
        self.end = [0.0] * s
        self.prefetched = [env.event() if b > 0 else None for b in plan.prefetch_bytes]
        self.prefetch_at: list[list[int]] = [[] for _ in range(s)]
        for j in np.flatnonzero(plan.prefetch_bytes > 0):
            self.prefetch_at[int(plan.prefetch_from[j])].append(int(j))

    # --- building blocks ----------------------------------------------------------------------

    def _dram(self, op: int, tile: int, phase: int, nbytes: float, priority: int = _OP_PRIORITY):
        env = self.env
        with self.dram.request(priority=priority) as req:
            yield req
            start = env.now
            yield env.timeout(nbytes * self.inv_bw)
            self.log.append((DRAM, op, tile, phase, start, env.now, nbytes))

    def _compute(self, op: int, tile: int, tensor_s: float, vector_s: float):
        """Tensor-unit and vector work of one tile, side by side; done when both are."""
        env = self.env
        code = self.tensor_code[op]
        if tensor_s > 0 and vector_s > 0:
            unit, vec = self.units[code], self.units[VECTOR]
            with unit.request() as r1, vec.request() as r2:
                yield r1 & r2
                start = env.now
                yield env.timeout(max(tensor_s, vector_s))
                self.log.append((code, op, tile, COMPUTE, start, start + tensor_s, 0.0))
                self.log.append((VECTOR, op, tile, COMPUTE, start, start + vector_s, 0.0))
        elif tensor_s > 0 or vector_s > 0:
            code, busy = (code, tensor_s) if tensor_s > 0 else (VECTOR, vector_s)
            with self.units[code].request() as req:
                yield req
                start = env.now
                yield env.timeout(busy)
                self.log.append((code, op, tile, COMPUTE, start, env.now, 0.0))

    def _prefetch(self, j: int, pieces: int):
        nbytes = float(self.plan.prefetch_bytes[j])
        piece = nbytes / pieces
        for _ in range(pieces):
            yield from self._dram(j, -1, PREFETCH, piece, _PREFETCH_PRIORITY)
        self.prefetched[j].succeed()

    # --- pipelined ------------------------------------------------------------------------

    def _op_serial(self, op: int):
        """One tile, or no double buffering: load, compute, store, tile after tile."""
        n = self.tiles[op]
        load, store = self.load[op] / n, self.store[op] / n
        tensor_s, vector_s = self.tensor_s[op] / n, self.vector_s[op] / n
        for t in range(n):
            if load > 0:
                yield from self._dram(op, t, LOAD, load)
            yield from self._compute(op, t, tensor_s, vector_s)
            if store > 0:
                yield from self._dram(op, t, STORE, store)

    def _op_pipelined(self, op: int, depth: int):
        env = self.env
        n = self.tiles[op]
        slots = simpy.Container(env, capacity=depth, init=depth)
        loaded, computed = simpy.Store(env), simpy.Store(env)
        load, store = self.load[op] / n, self.store[op] / n
        tensor_s, vector_s = self.tensor_s[op] / n, self.vector_s[op] / n

        def loader():
            for t in range(n):
                yield slots.get(1)
                if load > 0:
                    yield from self._dram(op, t, LOAD, load)
                loaded.put(t)

        def computer():
            for _ in range(n):
                t = yield loaded.get()
                yield from self._compute(op, t, tensor_s, vector_s)
                computed.put(t)

        def storer():
            for _ in range(n):
                t = yield computed.get()
                if store > 0:
                    yield from self._dram(op, t, STORE, store)
                slots.put(1)

        env.process(loader())
        env.process(computer())
        yield env.process(storer())

    def _run_pipelined(self):
        env, depth = self.env, self.plan.depth
        pieces_cap = MAX_PREFETCH_PIECES
        for op in range(len(self.tiles)):
            self.begin[op] = env.now
            if self.launch[op] > 0:
                yield env.timeout(self.launch[op])
            for j in self.prefetch_at[op]:
                env.process(self._prefetch(j, min(self.tiles[op], pieces_cap)))
            if self.prefetched[op] is not None:
                yield self.prefetched[op]
            if self.tiles[op] == 1 or depth == 1:
                yield from self._op_serial(op)
            else:
                yield from self._op_pipelined(op, depth)
            self.end[op] = env.now
            if self.progress is not None:
                self.progress(op + 1, len(self.tiles))

    # --- full overlap ---------------------------------------------------------------------------

    def _run_full(self):
        env = self.env
        s = len(self.tiles)
        ahead = self.prefetch_depth if self.plan.work.fusion == "fused_prefetched" else 0
        compute_started = [env.event() for _ in range(s)]
        compute_done = [env.event() for _ in range(s)]
        dram_done = [env.event() for _ in range(s)]

        def compute_chain():
            for op in range(s):
                if op:
                    yield compute_done[op - 1]
                    if ahead == 0:
                        yield dram_done[op - 1]
                self.begin[op] = env.now
                if self.launch[op] > 0:
                    yield env.timeout(self.launch[op])
                compute_started[op].succeed()
                n = self.tiles[op]
                for t in range(n):
                    yield from self._compute(op, t, self.tensor_s[op] / n, self.vector_s[op] / n)
                compute_done[op].succeed(env.now)
                if self.progress is not None:
                    self.progress(op + 1, s)

        def dram_chain():
            for op in range(s):
                # Without prefetch an op's traffic starts with the op; with it, when the op
                # `ahead` places earlier has started computing.
                yield compute_started[max(op - ahead, 0) if ahead else op]
                if op:
                    yield dram_done[op - 1]
                n = self.tiles[op]
                # The stream running ahead is the prefetch here: the op moves all its bytes.
                nbytes = (self.total_load[op] + self.store[op]) / n
                if nbytes > 0:
                    for t in range(n):
                        yield from self._dram(op, t, LOAD, nbytes)
                dram_done[op].succeed(env.now)

        env.process(dram_chain())
        yield env.process(compute_chain())
        for op in range(s):
            if not dram_done[op].triggered:
                yield dram_done[op]
        # An op ends when both of its streams have (never before the op before it).
        for op in range(s):
            self.end[op] = max(compute_done[op].value, dram_done[op].value,
                               self.end[op - 1] if op else 0.0)

    def run(self) -> EventLog:
        runner = self._run_pipelined if self.overlap == "pipelined" else self._run_full
        self.env.run(self.env.process(runner()))
        log = self.log
        columns = list(zip(*log, strict=True)) if log else [()] * 7
        as_int = [np.array(c, dtype=np.int64) for c in columns[:4]]
        as_float = [np.array(c, dtype=np.float64) for c in columns[4:]]
        return EventLog(*as_int, *as_float, op_begin=np.array(self.begin),
                        op_launch=np.array(self.launch), op_end=np.array(self.end),
                        events=self.env.processed)


def run(plan: Plan, overlap: str = "pipelined", prefetch_depth: int = 1,
        progress: Callable[[int, int], None] | None = None) -> EventLog:
    """Simulate ``plan``; see the module docstring for the overlap models. ``progress(done,
    total)`` is called as ops finish (their compute, under full overlap)."""
    if overlap not in OVERLAPS:
        raise ValueError(f"unknown overlap {overlap!r}; use one of {', '.join(OVERLAPS)}")
    return _Model(plan, overlap, prefetch_depth, progress).run()
