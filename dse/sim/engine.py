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

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from heapq import heappop, heappush
from itertools import count

import numpy as np
import simpy
from simpy.core import EmptySchedule, StopSimulation
from simpy.events import Event

from .plan import Plan

__all__ = ["OVERLAPS", "PHASES", "RESOURCES", "EventLog", "count_events", "run"]

OVERLAPS = ("pipelined", "full")
RESOURCES = ("dram", "tensor", "sparse_tensor", "vector")
PHASES = ("load", "compute", "store", "prefetch")
DRAM, TENSOR, SPARSE, VECTOR = range(4)
LOAD, COMPUTE, STORE, PREFETCH = range(4)
#: Prefetches wait for DRAM behind the running op's loads and stores.
_OP_PRIORITY, _PREFETCH_PRIORITY = 0, 1
#: A prefetch moves in at most this many pieces, so the running op's loads wait for one piece.
MAX_PREFETCH_PIECES = 64


def count_events(env: simpy.Environment, until: Event) -> int:
    """Run ``env`` until ``until`` is processed, as ``env.run(until)`` does, and return how
    many events were processed (the benchmark's unit of work; ``until`` itself not counted).
    A local counter: overriding ``step`` to count cost ~9% of the simulator's time."""
    if until.callbacks is None:
        return 0
    until.callbacks.append(StopSimulation.callback)
    step = env.step
    n = 0
    try:
        while True:
            step()
            n += 1
    except StopSimulation:
        return n
    except EmptySchedule:
        raise RuntimeError(f"no scheduled events left but {until} was not triggered") from None


# --- SimPy's resources, replayed ------------------------------------------------------------------
# The simulator once used simpy.PriorityResource, Resource, Container and Store. Their events
# cost 3-4x a bare timeout (a chain of constructors, BoundClass, queue scans, a sort per request,
# context managers). These classes schedule the very same events (plain simpy Events) at the same
# moments and in the same order as those did in this model, so the event queue, and with it every
# time, the event count and the log, is unchanged (tests/test_sim_speed_equivalence.py). What
# SimPy ran as a callback of a processed event is a callback here too. Callbacks that could never
# act here are left out: a processed request's scan of pending releases (a release is granted as
# it is made), a processed get's scan of pending puts (puts never wait: a store is unbounded and a
# slot is only put back after it was taken).


class _Now(Event):
    """An event triggered as it is made, as ``Event(env).succeed()`` triggers one (scheduled
    now, at normal priority), in one constructor: SimPy's own ``Timeout`` without the delay."""

    def __init__(self, env: simpy.Environment, callback: Callable | None = None) -> None:
        self.env = env
        self.callbacks = [] if callback is None else [callback]
        self._ok = True
        self._value = None
        env.schedule(self)


class _Unit:
    """``simpy.Resource(env, 1)``: FIFO requests; a release frees the unit at once and the next
    request is granted when the release event is processed."""

    __slots__ = ("env", "grant", "queue", "user")

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.queue: deque[Event] = deque()
        self.user: Event | None = None
        self.grant = self._grant  # bound once: a release event's callback

    def request(self) -> Event:
        if self.user is None and not self.queue:
            self.user = req = _Now(self.env)
        else:
            req = Event(self.env)
            self.queue.append(req)
            if self.user is None:  # a release not yet processed: the head goes first
                self.user = head = self.queue.popleft()
                head.succeed()
        return req

    def release(self) -> None:
        self.user = None
        _Now(self.env, self.grant)

    def _grant(self, _event: Event) -> None:
        if self.queue and self.user is None:
            self.user = head = self.queue.popleft()
            head.succeed()


class _Dram(_Unit):
    """``simpy.PriorityResource(env, 1)``: requests ordered by (priority, time of request),
    ties in request order (SimPy's stable sort)."""

    __slots__ = ("waiting", "seq")

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__(env)
        self.waiting: list[tuple] = []
        self.seq = count()

    def request(self, priority: int = _OP_PRIORITY) -> Event:  # type: ignore[override]
        waiting = self.waiting
        if self.user is None and not waiting:
            self.user = req = _Now(self.env)
        else:
            req = Event(self.env)
            heappush(waiting, (priority, self.env.now, next(self.seq), req))
            if self.user is None:
                self.user = head = heappop(waiting)[3]
                head.succeed()
        return req

    def _grant(self, _event: Event) -> None:
        if self.waiting and self.user is None:
            self.user = head = heappop(self.waiting)[3]
            head.succeed()


class _Store:
    """``simpy.Store(env)`` with one getting process: a put is stored at once, and a waiting get
    is served when the put event is processed."""

    __slots__ = ("env", "getters", "items", "serve")

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.items: deque = deque()
        self.getters: deque[Event] = deque()
        self.serve = self._serve  # bound once: a put event's callback

    def put(self, item: object) -> None:
        self.items.append(item)
        _Now(self.env, self.serve)

    def get(self) -> Event:
        ev = Event(self.env)
        self.getters.append(ev)
        self._serve(None)
        return ev

    def _serve(self, _event: Event | None) -> None:
        if self.getters and self.items:
            self.getters.popleft().succeed(self.items.popleft())


class _Slots:
    """``simpy.Container(env, depth, init=depth)``, taken and given back one at a time."""

    __slots__ = ("env", "getters", "level", "serve")

    def __init__(self, env: simpy.Environment, depth: int) -> None:
        self.env = env
        self.level = depth
        self.getters: deque[Event] = deque()
        self.serve = self._serve  # bound once: a put event's callback

    def get(self) -> Event:
        ev = Event(self.env)
        self.getters.append(ev)
        self._serve(None)
        return ev

    def put(self) -> None:
        self.level += 1
        _Now(self.env, self.serve)

    def _serve(self, _event: Event | None) -> None:
        getters = self.getters
        while getters and self.level >= 1:
            self.level -= 1
            getters.popleft().succeed()


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
        self.env = env = simpy.Environment()
        self.dram = _Dram(env)
        self.units = (None, _Unit(env), _Unit(env), _Unit(env))
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
    # Each is the SimPy idiom ``with resource.request() as req: yield req; ...; yield
    # env.timeout(busy)`` (the release as the block ends). The pipelined processes below inline
    # them: a generator layer per tile phase cost ~10% of the run.

    def _dram(self, op: int, tile: int, phase: int, nbytes: float, priority: int = _OP_PRIORITY):
        env, dram = self.env, self.dram
        yield dram.request(priority)
        start = env.now
        yield env.timeout(nbytes * self.inv_bw)
        self.log.append((DRAM, op, tile, phase, start, env.now, nbytes))
        dram.release()

    def _compute(self, op: int, tile: int, tensor_s: float, vector_s: float):
        """Tensor-unit and vector work of one tile, side by side; done when both are."""
        env = self.env
        code = self.tensor_code[op]
        if tensor_s > 0 and vector_s > 0:
            unit, vec = self.units[code], self.units[VECTOR]
            yield unit.request() & vec.request()
            start = env.now
            yield env.timeout(max(tensor_s, vector_s))
            self.log.append((code, op, tile, COMPUTE, start, start + tensor_s, 0.0))
            self.log.append((VECTOR, op, tile, COMPUTE, start, start + vector_s, 0.0))
            vec.release()  # the ``with`` blocks released in reverse order
            unit.release()
        elif tensor_s > 0 or vector_s > 0:
            code, busy = (code, tensor_s) if tensor_s > 0 else (VECTOR, vector_s)
            unit = self.units[code]
            yield unit.request()
            start = env.now
            yield env.timeout(busy)
            self.log.append((code, op, tile, COMPUTE, start, env.now, 0.0))
            unit.release()

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
        slots = _Slots(env, depth)
        loaded, computed = _Store(env), _Store(env)
        load, store = self.load[op] / n, self.store[op] / n
        tensor_s, vector_s = self.tensor_s[op] / n, self.vector_s[op] / n
        # Locals for the per-tile loops (each the inlined building block above).
        timeout, log = env.timeout, self.log.append
        dram_request, dram_release = self.dram.request, self.dram.release
        load_s, store_s = load * self.inv_bw, store * self.inv_bw

        def loader():
            for t in range(n):
                yield slots.get()
                if load > 0:
                    yield dram_request(_OP_PRIORITY)
                    start = env.now
                    yield timeout(load_s)
                    log((DRAM, op, t, LOAD, start, env.now, load))
                    dram_release()
                loaded.put(t)

        def computer():
            code = self.tensor_code[op]
            if tensor_s > 0 and vector_s > 0:
                unit, vec = self.units[code], self.units[VECTOR]
                busy = max(tensor_s, vector_s)
                for _ in range(n):
                    t = yield loaded.get()
                    yield unit.request() & vec.request()
                    start = env.now
                    yield timeout(busy)
                    log((code, op, t, COMPUTE, start, start + tensor_s, 0.0))
                    log((VECTOR, op, t, COMPUTE, start, start + vector_s, 0.0))
                    vec.release()
                    unit.release()
                    computed.put(t)
                return
            code, busy = (code, tensor_s) if tensor_s > 0 else (VECTOR, vector_s)
            if busy > 0:
                unit = self.units[code]
                request, release = unit.request, unit.release
                for _ in range(n):
                    t = yield loaded.get()
                    yield request()
                    start = env.now
                    yield timeout(busy)
                    log((code, op, t, COMPUTE, start, env.now, 0.0))
                    release()
                    computed.put(t)
            else:
                for _ in range(n):
                    t = yield loaded.get()
                    computed.put(t)

        def storer():
            for _ in range(n):
                t = yield computed.get()
                if store > 0:
                    yield dram_request(_OP_PRIORITY)
                    start = env.now
                    yield timeout(store_s)
                    log((DRAM, op, t, STORE, start, env.now, store))
                    dram_release()
                slots.put()

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
        events = count_events(self.env, self.env.process(runner()))
        log = self.log
        columns = list(zip(*log, strict=True)) if log else [()] * 7
        as_int = [np.array(c, dtype=np.int64) for c in columns[:4]]
        as_float = [np.array(c, dtype=np.float64) for c in columns[4:]]
        return EventLog(*as_int, *as_float, op_begin=np.array(self.begin),
                        op_launch=np.array(self.launch), op_end=np.array(self.end),
                        events=events)


def run(plan: Plan, overlap: str = "pipelined", prefetch_depth: int = 1,
        progress: Callable[[int, int], None] | None = None) -> EventLog:
    """Simulate ``plan``; see the module docstring for the overlap models. ``progress(done,
    total)`` is called as ops finish (their compute, under full overlap)."""
    if overlap not in OVERLAPS:
        raise ValueError(f"unknown overlap {overlap!r}; use one of {', '.join(OVERLAPS)}")
    return _Model(plan, overlap, prefetch_depth, progress).run()
