"""Many simulations at once: in this process, over local processes, or on a Dask cluster.

Sweeps and searches evaluate with the roofline first (it gives every column they report), then
``simulated(frame, ...)`` replaces each row's latency, dense latency and speedup by the
simulator's, keeping the roofline's as ``roofline_latency_s`` and ``roofline_speedup``. Each
distinct design (model, hardware, format, batch, fusion, scope) is simulated once, its dense
baseline included. The simulations are independent, so they fan out: ``workers`` local
processes, or a Dask cluster (``dask="local"`` starts a LocalCluster of ``workers`` processes;
``dask="tcp://host:port"`` uses a running scheduler, whose workers need this package installed).
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from accelerator_models import Accelerator
from formats import Dense, Format
from workloads import Trace

from ..roofline.numerics import Numerics
from .simulate import SimConfig, SimulationError, simulate

__all__ = ["LOCAL", "SIMULATED_COLUMNS", "FanoutError", "Progress", "SimTask",
           "simulate_designs", "simulated"]

#: ``progress(done, total)``, called as designs finish (the command line prints it).
Progress = Callable[[int, int], None]

#: Seconds to wait for a remote scheduler: a reachable one answers in milliseconds.
CONNECT_TIMEOUT_S = 5
#: ``dask=LOCAL`` starts a Dask LocalCluster on this machine.
LOCAL = "local"
#: Columns a simulated row adds to the roofline's, from the simulation's summary keys.
SIM_COLUMNS = {"gap_s": "gap_s", "gap_launch_s": "gap_launch_s", "gap_buffer_s": "gap_buffer_s",
               "gap_fill_drain_s": "gap_fill_drain_s", "kernels": "kernels", "tiles": "tiles",
               "dram_bytes": "sim_dram_bytes", "events": "events"}
#: Every column ``simulated`` adds, in order.
SIMULATED_COLUMNS = ("roofline_latency_s", "roofline_speedup", *SIM_COLUMNS.values(), "evaluator")


class FanoutError(ValueError):
    """A cluster that cannot be reached or used; the message names it and the fix."""


@dataclass(frozen=True)
class SimTask:
    """One design to simulate; everything a worker process needs (picklable)."""

    trace: Trace
    accelerator: Accelerator
    format: Format
    batch: int
    fusion: str
    scope: str
    config: SimConfig
    numerics: Numerics


def run_task(task: SimTask) -> dict:
    """Simulate one task and return its summary row (module level, so workers can import it)."""
    result = simulate(task.trace, task.accelerator, task.format, task.batch, task.fusion,
                      task.scope, task.config, task.numerics)
    return result.summary()


def simulate_designs(tasks: Sequence[SimTask], workers: int = 1, dask: str | None = None,
                     progress: Progress | None = None) -> list[dict]:
    """Summaries of ``tasks``, in order; ``progress(done, total)`` after each."""
    if workers < 1:
        raise FanoutError(f"workers {workers}: give at least 1")
    meter = _Counter(len(tasks), progress) if progress is not None else None
    if dask is not None:
        return _on_dask(list(tasks), workers, dask, meter)
    if workers == 1 or len(tasks) <= 1:
        out = []
        for task in tasks:
            out.append(run_task(task))
            if meter:
                meter.tick()
        return out
    return _on_processes(list(tasks), workers, meter)


class _Counter:
    """Counts finished designs for a ``progress(done, total)`` callback."""

    def __init__(self, total: int, progress: Progress) -> None:
        self.total, self.progress, self.done = total, progress, 0

    def tick(self) -> None:
        self.done += 1
        self.progress(self.done, self.total)


def _ignore_interrupts() -> None:
    """Worker processes leave Ctrl-C to the parent (a terminal sends SIGINT to the whole
    process group): the parent cancels what is queued and stops with one line."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_indexed(item: tuple[int, SimTask]) -> tuple[int, dict]:
    return item[0], run_task(item[1])


def _on_processes(tasks: list[SimTask], workers: int, meter: _Counter | None) -> list[dict]:
    results: list[dict | None] = [None] * len(tasks)
    # A multiprocessing pool, not concurrent.futures: leaving the `with` block on an interrupt
    # or a failure terminates the workers, where an executor would wait for every running
    # simulation to end (minutes, for large designs).
    with multiprocessing.Pool(min(workers, len(tasks)),
                              initializer=_ignore_interrupts) as pool:
        for i, summary in pool.imap_unordered(_run_indexed, enumerate(tasks)):
            results[i] = summary
            if meter:
                meter.tick()
    return results  # type: ignore[return-value]


def _on_dask(tasks: list[SimTask], workers: int, address: str,
             meter: _Counter | None) -> list[dict]:
    try:
        from distributed import Client, LocalCluster
        from distributed import as_completed as dask_completed
    except ImportError:
        raise FanoutError("--dask needs Dask's distributed package, an extra of dse: pip "
                          "install 'sparsity-dse[dask]'") from None
    cluster = None
    try:
        if address == LOCAL:
            # Quiet workers: a failed design is reported once, as the command's one-line error.
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=None, silence_logs=logging.CRITICAL)
            client = Client(cluster)
        else:
            try:
                client = Client(address, timeout=f"{CONNECT_TIMEOUT_S}s")
            except (OSError, TimeoutError, ValueError) as exc:
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise FanoutError(f"--dask {address}: cannot reach a Dask scheduler ({reason}); "
                                  "start one (`dask scheduler` and `dask worker ADDRESS`) or "
                                  "give --dask alone for a local cluster") from None
        with client:
            futures = client.map(run_task, tasks, pure=False)
            index = {f.key: i for i, f in enumerate(futures)}
            results: list[dict | None] = [None] * len(tasks)
            for future in dask_completed(futures):
                results[index[future.key]] = future.result()
                if meter:
                    meter.tick()
            return results  # type: ignore[return-value]
    finally:
        if cluster is not None:
            cluster.close()


def simulated(frame: pd.DataFrame, traces: Mapping[str, Trace],
              accelerators: Mapping[str, Accelerator], formats: Mapping[str, Format],
              config: SimConfig, numerics: Numerics, workers: int = 1,
              dask: str | None = None, progress: Progress | None = None) -> pd.DataFrame:
    """``frame`` (rows of ``dse.evaluate``) with the simulator's latencies and speedups.

    ``traces``, ``accelerators`` and ``formats`` map the frame's model, hardware and format
    names to the objects to simulate.
    """
    keys = ["model", "hardware", "format", "batch", "fusion", "scope"]
    rows = frame[keys].astype({"model": str, "hardware": str, "format": str, "fusion": str,
                               "scope": str})
    dense = rows.assign(format="dense")
    designs = pd.concat([rows, dense], ignore_index=True).drop_duplicates(ignore_index=True)
    tasks = []
    for model, hw, fmt, batch, fusion, scope in designs.itertuples(index=False):
        target = formats.get(fmt) or Dense()  # only dense may be missing: the baseline
        tasks.append(SimTask(traces[model], accelerators[hw], target, int(batch), fusion,
                             scope, config, numerics))
    summaries = simulate_designs(tasks, workers=workers, dask=dask, progress=progress)
    sim = designs.assign(sim_latency_s=[s["latency_s"] for s in summaries],
                         **{column: [s[key] for s in summaries]
                            for key, column in SIM_COLUMNS.items()})
    index = pd.MultiIndex.from_frame(sim[keys])
    own = index.get_indexer(pd.MultiIndex.from_frame(rows))
    base = index.get_indexer(pd.MultiIndex.from_frame(dense))
    if (own < 0).any() or (base < 0).any():  # pragma: no cover - designs come from the rows
        raise SimulationError("internal: a simulated design is missing")
    out = frame.copy()
    latency = sim["sim_latency_s"].to_numpy()
    out["roofline_latency_s"] = out["latency_s"]
    out["roofline_speedup"] = out["speedup"]
    out["latency_s"] = latency[own]
    out["dense_latency_s"] = latency[base]
    out["speedup"] = latency[base] / latency[own]
    for column in SIM_COLUMNS.values():
        out[column] = sim[column].to_numpy()[own]
    out["evaluator"] = "simulate"
    return out
