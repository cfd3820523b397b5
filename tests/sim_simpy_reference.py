"""The simulator's SimPy model as it was before issue 27 (commit 11c09f5), on SimPy's own
resources (``PriorityResource``, ``Resource``, ``Container``, ``Store``), a ``step`` override
counting events and a generator layer per tile phase: the slow, obviously SimPy reference that
``dse.sim.engine`` (which replays those resources with plain events) must reproduce exactly."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import simpy

from dse.sim.engine import (
    COMPUTE,
    DRAM,
    LOAD,
    MAX_PREFETCH_PIECES,
    PREFETCH,
    STORE,
    TENSOR,
    VECTOR,
    EventLog,
)
from dse.sim.plan import Plan

_OP_PRIORITY, _PREFETCH_PRIORITY = 0, 1


class CountingEnvironment(simpy.Environment):
    """An environment that counts the events it processes (the benchmark's unit of work)."""

    def __init__(self) -> None:
        super().__init__()
        self.processed = 0

    def step(self) -> None:
        super().step()  # raises EmptySchedule when nothing is left: not an event
        self.processed += 1


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


def run(plan: Plan, overlap: str = "pipelined", prefetch_depth: int = 1) -> EventLog:
    """``dse.sim.engine.run`` as it was, on SimPy's own resources."""
    return _Model(plan, overlap, prefetch_depth).run()
