"""Speed of the SimPy event-level simulator: event throughput, batch-1 latency, cost per tile.

Run from the repository root::

    python -m benchmarks.simulator_speed [--repeats N] [--json PATH] [--strict] [--wait-idle S]

Three figures, each against a target of the issue and a reference measured in the same run:

1. **Event throughput**: convnext_tiny, a100, 2:4, batch 32, unfused, scope all, a 5e5-byte
   buffer (about 47,000 tiles, 0.8 M SimPy events). The SimPy run alone
   (``dse.sim.engine.run`` on a plan made beforehand by ``dse.sim.plan.work`` + ``plan``) and
   ``dse.sim.simulate`` end to end, in events per second. Reference: a bare SimPy loop (one process
   yielding as many timeouts, plain ``simpy.Environment``): the engine's ceiling here, timed
   alternately with the run alone. Issue 27's goal: the run alone at half the bare loop's rate.
   Beside them, timed alternately too: the run as it was before issue 27, the same model on
   SimPy's own resources (``tests/sim_simpy_reference.py``, which the tests hold it equal to).
2. **Batch 1, default tiling**: ``simulate(convnext_tiny, a100, 2:4, 1, unfused, scope)`` with
   ``SimConfig()`` for scope all and gemm, in process (first call and warm median), and the
   ``dse simulate ... --scope all`` command in a new process (reference: ``dse --help``).
3. **Cost linear in tiles**: the run alone on the same design at three buffer sizes (about 11x
   apart in tiles): seconds per tile and per event, the ratio of the largest to the smallest
   per-tile cost, and the slope of log(run seconds) against log(tiles) (1 = linear).

Timings are medians of ``--repeats`` runs. Exit status 0; with ``--strict``, 2 if a target is
missed (benchmarks report, tests judge). See ``benchmarks/README.md``.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
import simpy

import accelerator_models
from benchmarks.evaluator_throughput import parse_benchmark_args
from dse.measure.host import cpu_clock, other_cores, wait_idle
from dse.roofline.numerics import Numerics
from dse.sim.engine import count_events, run
from dse.sim.plan import plan, work
from dse.sim.simulate import SimConfig, resolve_launch, simulate
from formats import parse as parse_format
from workloads import load_trace

try:  # the model as it was before issue 27, on SimPy's own resources (a test's reference)
    from tests.sim_simpy_reference import run as reference_run
except ImportError:  # not in a source checkout
    reference_run = None

# Targets from the issue.
TARGET_EVENTS_PER_S = 2e5  # simulated events per second
TARGET_OF_BARE = 0.5  # issue 27: the run alone at half of bare SimPy's events per second
TARGET_BATCH1_S = 5.0  # convnext_tiny, batch 1, default tiling
# "Linear in tiles": this benchmark calls it met when the costliest per-tile figure of the three
# sizes is within 1.5x of the cheapest (and prints the ratio and the log-log slope).
TARGET_PER_TILE_SPREAD = 1.5

MODEL, HARDWARE, FORMAT = "convnext_tiny", "a100", "2:4"
FUSION, OVERLAP, DEPTH, PREFETCH_DEPTH = "unfused", "pipelined", 2, 1
THROUGHPUT_BATCH, THROUGHPUT_BUFFER = 32, 5e5
LINEAR_BATCH, LINEAR_BUFFERS = 32, (8e6, 2e6, 1e6)
CLI = ["simulate", "--model", MODEL, "--hw", HARDWARE, "--format", FORMAT, "--scope", "all"]
BATCH1_MIN_CALLS = 10  # the batch-1 calls are short: at least this many


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def run_alone(trace, acc, batch: int, buffer_bytes: float, repeats: int) -> dict:
    """Plan once, then time ``dse.sim.engine.run`` alone ``repeats`` times (median)."""
    clock = cpu_clock()
    launch = resolve_launch(acc, SimConfig())
    plan_s, p = timed(lambda: plan(work(trace, acc, parse_format(FORMAT), batch, FUSION, "all",
                                        Numerics()), buffer_bytes, DEPTH, launch,
                                   PREFETCH_DEPTH))
    times, events = [], set()
    for _ in range(repeats):
        seconds, log = timed(lambda: run(p, OVERLAP, PREFETCH_DEPTH))
        times.append(seconds)
        events.add(log.events)
    if len(events) != 1:
        raise SystemExit(f"benchmarks: the same plan gave different event counts {events}")
    tiles, n_events, run_s = int(p.tiles.sum()), events.pop(), statistics.median(times)
    return {"batch": batch, "buffer_bytes": buffer_bytes, "tiles": tiles, "events": n_events,
            "events_per_tile": n_events / tiles, "plan_s": plan_s, "run_s": run_s,
            "run_min_s": min(times), "run_s_per_tile": run_s / tiles,
            "run_s_per_event": run_s / n_events, "run_events_per_s": n_events / run_s,
            "other_processes_cores": other_cores(clock)}


def end_to_end(trace, acc, batch: int, config: SimConfig, scope: str, repeats: int) -> dict:
    """``simulate(...)`` called ``repeats`` times (median); its ``wall_s`` is planning + run."""
    clock = cpu_clock()
    times, walls, events, tiles = [], [], set(), set()
    for _ in range(repeats):
        seconds, sim = timed(lambda: simulate(trace, acc, FORMAT, batch, FUSION, scope, config))
        times.append(seconds)
        walls.append(sim.wall_s)
        events.add(sim.events)
        tiles.add(sim.tiles)
    n_events = events.pop()
    median = statistics.median(times)
    return {"scope": scope, "batch": batch, "tiles": tiles.pop(), "events": n_events,
            "buffer_bytes": sim.buffer_bytes, "simulate_s": median, "simulate_min_s": min(times),
            "plan_and_run_s": statistics.median(walls),
            "simulate_events_per_s": n_events / median,
            "other_processes_cores": other_cores(clock)}


def _bare_loop(events: int, counted: bool) -> tuple[float, int | None]:
    """A plain SimPy process yielding timeouts, ``events`` events in all as the simulator
    counts them: the engine's ceiling (``env.run()``); or the same loop run by the simulator's
    counting loop (``dse.sim.engine.count_events``), which returns the count."""
    # + the process's Initialize and its termination.
    timeouts = events - 2

    def loop(env):
        for _ in range(timeouts):
            yield env.timeout(1e-9)

    env = simpy.Environment()
    process = env.process(loop(env))
    if counted:
        return timed(lambda: count_events(env, process))
    return timed(env.run)[0], None


def throughput_and_bare(trace, acc, repeats: int) -> tuple[dict, dict]:
    """Figure 1's run alone and the bare SimPy loop of as many events, timed alternately (run,
    bare loop, counted loop; ``repeats`` times) so that a load that comes and goes on a shared
    machine weighs on both alike."""
    first = run_alone(trace, acc, THROUGHPUT_BATCH, THROUGHPUT_BUFFER, 1)
    events = first["events"]
    clock = cpu_clock()
    runs, plain, counting, simpy_resources = [], [], [], []
    launch = resolve_launch(acc, SimConfig())
    p = plan(work(trace, acc, parse_format(FORMAT), THROUGHPUT_BATCH, FUSION, "all",
                  Numerics()), THROUGHPUT_BUFFER, DEPTH, launch, PREFETCH_DEPTH)
    for _ in range(repeats):
        seconds, log = timed(lambda: run(p, OVERLAP, PREFETCH_DEPTH))
        if log.events != events:
            raise SystemExit(f"benchmarks: the same plan gave {log.events} and {events} events")
        runs.append(seconds)
        plain.append(_bare_loop(events, False)[0])
        seconds, n = _bare_loop(events, True)
        # The loop's last event is the process itself, which count_events stops on, uncounted.
        if n != events - 1:
            raise SystemExit(f"benchmarks: the bare loop counted {n} events, not {events - 1}")
        counting.append(seconds)
        if reference_run is not None:
            simpy_resources.append(timed(lambda: reference_run(p, OVERLAP, PREFETCH_DEPTH))[0])
    others = other_cores(clock)
    run_s = statistics.median(runs)
    tiles = first["tiles"]
    throughput = {**first, "run_s": run_s, "run_min_s": min(runs),
                  "run_s_per_tile": run_s / tiles, "run_s_per_event": run_s / events,
                  "run_events_per_s": events / run_s, "other_processes_cores": others}
    plain_s, counting_s = statistics.median(plain), statistics.median(counting)
    bare = {"events": events, "plain_s": plain_s, "plain_events_per_s": events / plain_s,
            "counting_s": counting_s, "counting_events_per_s": events / counting_s,
            "other_processes_cores": others}
    if simpy_resources:
        before = statistics.median(simpy_resources)
        bare |= {"simpy_resources_s": before, "simpy_resources_events_per_s": events / before}
    return throughput, bare


def cli_times(repeats: int) -> dict:
    """Whole commands in new processes, after one untimed run each (page cache, numba cache)."""
    def one(argv: list[str], cwd: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dse", *argv], cwd=cwd, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - start

    clock, children, start = cpu_clock(), _children_cpu(), time.perf_counter()
    out = {}
    with tempfile.TemporaryDirectory() as cwd:
        for key, argv in (("help_s", ["--help"]), ("simulate_s", CLI)):
            one(argv, cwd)
            out[key] = statistics.median(one(argv, cwd) for _ in range(repeats))
    out["command"] = "dse " + " ".join(CLI)
    others = other_cores(clock)
    if others is not None:  # the commands themselves are not other processes
        mine = (_children_cpu() - children) / (time.perf_counter() - start)
        others = max(0.0, others - mine)
    out["other_processes_cores"] = others
    return out


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def environment() -> dict:
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), model)
    except OSError:
        pass
    return {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "python": platform.python_version(), "simpy": simpy.__version__,
            "numpy": np.__version__, "cpu_count": os.cpu_count(), "processor": model}


def _cores(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _mark(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def report(env: dict, r: dict) -> tuple[str, dict]:
    lines = []
    out = lines.append
    out(f"dse simulator speed ({MODEL}, {HARDWARE}, {FORMAT}, {FUSION}, {OVERLAP}, "
        f"depth {DEPTH}; medians of {r['repeats']})")
    out(f"  date {env['date']}; {env['processor']}; cpu_count {env['cpu_count']}; "
        f"python {env['python']}, simpy {env['simpy']}, numpy {env['numpy']}")
    busy = [x["other_processes_cores"] for x in r["sections"]]
    if None not in busy:
        out(f"  other processes kept up to {max(busy):.2f} cores busy during a measurement"
            + (" -- NOT IDLE: figures are pessimistic; rerun (--wait-idle 60)"
               if max(busy) > 0.15 else " (idle enough)"))
    out("")

    t, e2e, bare = r["throughput"], r["throughput_e2e"], r["bare"]
    out(f"1. event throughput: batch {t['batch']}, scope all, buffer {t['buffer_bytes']:.0e} B: "
        f"{t['tiles']:,} tiles, {t['events']:,} events")
    out(f"   {'':44}{'seconds':>10}{'events/s':>11}{'of bare':>9}{'others':>8}")

    def row(label: str, seconds: float, rate: float, others: float | None) -> None:
        out(f"   {label:44}{seconds:>10.3f}{rate:>11.3g}"
            f"{rate / bare['plain_events_per_s']:>8.0%} {_cores(others):>7}")

    row("SimPy run alone (dse.sim.engine.run)", t["run_s"], t["run_events_per_s"],
        t["other_processes_cores"])
    row("simulate() end to end", e2e["simulate_s"], e2e["simulate_events_per_s"],
        e2e["other_processes_cores"])
    out(f"   {'  of which plan + run (Simulation.wall_s)':44}{e2e['plan_and_run_s']:>10.3f}")
    row("reference: bare SimPy timeout loop", bare["plain_s"], bare["plain_events_per_s"],
        bare["other_processes_cores"])
    row("  same loop, run by count_events", bare["counting_s"], bare["counting_events_per_s"],
        None)
    if "simpy_resources_s" in bare:
        row("before: the run on SimPy's resources", bare["simpy_resources_s"],
            bare["simpy_resources_events_per_s"], None)
    out("")

    b1, cli = r["batch1"], r["cli"]
    out("2. batch 1, default tiling (SimConfig(): buffer = shared memory x SMs, "
        f"{b1[0]['buffer_bytes'] / 2**20:.1f} MiB)")
    out(f"   {'':44}{'tiles':>7}{'events':>8}{'first s':>9}{'median s':>10}")
    for x in b1:
        out(f"   {'simulate(), scope ' + x['scope']:44}{x['tiles']:>7,}{x['events']:>8,}"
            f"{x['first_s']:>9.3f}{x['simulate_s']:>10.4f}")
    out(f"   {'CLI: dse simulate ... --scope all':44}{'':>24}{cli['simulate_s']:>10.2f}")
    out(f"   {'reference: dse --help (imports)':44}{'':>24}{cli['help_s']:>10.2f}")
    out("   first: the first call in the process, imports done (numba's cache load, pricing)")
    out("")

    lin = r["linear"]
    out(f"3. cost against tiles: batch {LINEAR_BATCH}, scope all, the run alone")
    out(f"   {'buffer B':>10}{'tiles':>8}{'events':>10}{'ev/tile':>8}{'run s':>9}"
        f"{'us/tile':>9}{'us/event':>10}{'others':>8}")
    for x in lin:
        out(f"   {x['buffer_bytes']:>10.0e}{x['tiles']:>8,}{x['events']:>10,}"
            f"{x['events_per_tile']:>8.1f}{x['run_s']:>9.3f}{x['run_s_per_tile'] * 1e6:>9.1f}"
            f"{x['run_s_per_event'] * 1e6:>10.2f}{_cores(x['other_processes_cores']):>8}")
    out(f"   tiles spread {r['tile_spread']:.1f}x; per-tile cost max/min "
        f"{r['per_tile_ratio']:.2f}, per-event max/min {r['per_event_ratio']:.2f}; "
        f"slope of log(run s) on log(tiles) {r['loglog_slope']:.3f}")
    out("")

    worst_b1 = max([x["simulate_s"] for x in b1] + [x["first_s"] for x in b1]
                   + [cli["simulate_s"]])
    targets = {
        "events_per_s": {"target": TARGET_EVENTS_PER_S, "measured": t["run_events_per_s"],
                         "end_to_end": e2e["simulate_events_per_s"],
                         "met": min(t["run_events_per_s"], e2e["simulate_events_per_s"])
                         >= TARGET_EVENTS_PER_S},
        "of_bare": {"target": TARGET_OF_BARE,
                    "measured": t["run_events_per_s"] / bare["plain_events_per_s"],
                    "met": t["run_events_per_s"] / bare["plain_events_per_s"] >= TARGET_OF_BARE},
        "batch1_s": {"target": TARGET_BATCH1_S, "measured": worst_b1,
                     "met": worst_b1 < TARGET_BATCH1_S},
        "linear": {"target": TARGET_PER_TILE_SPREAD, "measured": r["per_tile_ratio"],
                   "slope": r["loglog_slope"],
                   "met": r["per_tile_ratio"] <= TARGET_PER_TILE_SPREAD},
    }
    out("targets:")
    out(f"  >= {TARGET_EVENTS_PER_S:.0e} events/s: run alone {t['run_events_per_s']:.3g}, "
        f"end to end {e2e['simulate_events_per_s']:.3g} "
        f"({min(t['run_events_per_s'], e2e['simulate_events_per_s']) / TARGET_EVENTS_PER_S:.2f}x"
        f" the target)  -> {_mark(targets['events_per_s']['met'])}")
    out(f"  run alone >= {TARGET_OF_BARE:.0%} of bare SimPy's events/s (issue 27): "
        f"{targets['of_bare']['measured']:.0%}  -> {_mark(targets['of_bare']['met'])}")
    out(f"  convnext_tiny batch 1 under {TARGET_BATCH1_S:g} s: slowest figure {worst_b1:.2f} s "
        f"(warm, first call or CLI; {worst_b1 / TARGET_BATCH1_S:.1%} of the budget)  "
        f"-> {_mark(targets['batch1_s']['met'])}")
    out(f"  cost linear in tiles (per-tile cost max/min <= {TARGET_PER_TILE_SPREAD:g}): "
        f"{r['per_tile_ratio']:.2f}, log-log slope {r['loglog_slope']:.3f}  "
        f"-> {_mark(targets['linear']['met'])}")
    return "\n".join(lines), targets


def main(argv: list[str] | None = None) -> int:
    args = parse_benchmark_args(
        "python -m benchmarks.simulator_speed", __doc__, 3,
        "timed runs per figure, median reported (default 3; the short batch-1 calls run at "
        f"least {BATCH1_MIN_CALLS} times)", "exit 2 when a target is missed", argv)

    wall = time.perf_counter()
    waited = 0.0
    trace = load_trace(MODEL)
    acc = accelerator_models.load(HARDWARE)
    r: dict = {"repeats": args.repeats}

    # 2 first: the first simulate() call in the process pays numba's cache load and warm-up.
    waited += wait_idle(args.wait_idle)
    batch1 = []
    for scope in ("all", "gemm"):
        first_s, _ = timed(lambda s=scope: simulate(trace, acc, FORMAT, 1, FUSION, s,
                                                    SimConfig()))
        row = end_to_end(trace, acc, 1, SimConfig(), scope, max(args.repeats, BATCH1_MIN_CALLS))
        batch1.append({"first_s": first_s, **row})
    r["batch1"] = batch1
    waited += wait_idle(args.wait_idle)
    r["cli"] = cli_times(args.repeats)

    waited += wait_idle(args.wait_idle)
    r["throughput"], r["bare"] = throughput_and_bare(trace, acc, args.repeats)
    waited += wait_idle(args.wait_idle)
    r["throughput_e2e"] = end_to_end(trace, acc, THROUGHPUT_BATCH,
                                     SimConfig(buffer_bytes=THROUGHPUT_BUFFER), "all",
                                     args.repeats)
    if r["throughput_e2e"]["events"] != r["throughput"]["events"]:
        raise SystemExit("benchmarks: simulate() and run() counted different events "
                         f"({r['throughput_e2e']['events']} vs {r['throughput']['events']})")

    linear = []
    for buffer_bytes in LINEAR_BUFFERS:
        waited += wait_idle(args.wait_idle)
        linear.append(run_alone(trace, acc, LINEAR_BATCH, buffer_bytes, args.repeats))
    r["linear"] = linear
    per_tile = [x["run_s_per_tile"] for x in linear]
    per_event = [x["run_s_per_event"] for x in linear]
    tiles = [x["tiles"] for x in linear]
    r["tile_spread"] = max(tiles) / min(tiles)
    r["per_tile_ratio"] = max(per_tile) / min(per_tile)
    r["per_event_ratio"] = max(per_event) / min(per_event)
    r["loglog_slope"] = float(np.polyfit(np.log(tiles), np.log([x["run_s"] for x in linear]),
                                         1)[0])
    r["sections"] = [*batch1, r["cli"], r["throughput"], r["throughput_e2e"], r["bare"], *linear]

    env = environment()
    text, targets = report(env, r)
    wall = time.perf_counter() - wall
    print(text)
    print(f"(benchmark wall time {wall:.1f} s, of which {waited:.1f} s waiting for idle cores)")
    if args.json:
        doc = {"benchmark": "simulator_speed", "environment": env,
               "design": {"model": MODEL, "hardware": HARDWARE, "format": FORMAT,
                          "fusion": FUSION, "overlap": OVERLAP, "depth": DEPTH,
                          "prefetch_depth": PREFETCH_DEPTH},
               **{k: v for k, v in r.items() if k != "sections"},
               "targets": targets, "wall_s": wall, "waited_for_idle_s": waited}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    if args.strict and not all(t["met"] for t in targets.values()):
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
