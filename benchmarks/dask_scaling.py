"""A million-design calibrated search on a local Dask cluster of 2 workers against one process.

Run from the repository root::

    python -m benchmarks.dask_scaling [--designs N] [--workers W] [--chunk-points C]
                                      [--calibrated DEVICE] [--json PATH]

The space is ``benchmarks/spaces/million.toml`` on an H100 SXM (its 42 formats plus dense, two
models, four batch sizes, a grid of DRAM bandwidth x fp16 tensor-core peak; the peak's steps
chosen so the space holds about ``--designs`` designs, default 1,000,000), searched for
``1.3x_over_2:4`` with ``--calibrated h100-sxm``: every op of every design priced by the kernel
predictors beside the bound, as ``dse search --calibrated`` does. The exhaustive engine's own
unit of work is timed: what ``search.exhaustive.evaluate_chunk`` does on each chunk, then the
chunk's rows encoded as the study stores them (``to_bytes``). Two runs of the same chunks:

* **one process** (the reference): every chunk in turn, here;
* **Dask**: a ``distributed.LocalCluster`` of ``--workers`` processes (one thread each), one
  task per chunk; each worker builds the problem once (as a worker of a shared study does) and
  returns the chunk's size, not its rows (a worker stores its rows itself).

Printed: designs/s of both (problem set-up and cluster start apart, and not in the rate), the
scaling ratio (ideal: the number of workers, on a machine with that many idle cores), and, for a
study of 1e9 designs (every N:M pattern with M <= 317: 50,086 patterns x 100 hypothetical GPUs x
10 batches x 20 models), the rate it needs to finish in a day and in an hour, and how long it
would take at the measured rate on 1 to 1,000 machines like this one (machines assumed to add
linearly, as chunks are independent). ``--designs 20000`` gives a quick run.
See ``benchmarks/README.md``.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

from dse.cli.parser import Parser

HERE = Path(__file__).resolve().parent
MILLION = HERE / "spaces" / "million.toml"
BANDWIDTH_STEPS = 30  # the million space's DRAM-bandwidth steps; the peak's steps vary
TARGET = "1.3x_over_2:4"
BIG_STUDY = {"patterns": sum(m - 1 for m in range(2, 318)), "gpus": 100, "batches": 10,
             "models": 20}
BIG_DESIGNS = math.prod(BIG_STUDY.values())
#: Goals: the 2-worker cluster at least 1.8x one process (2 would be perfect), and the
#: 1e9-design study within a day on the machines one lab has (say 100 like this one).
GOAL_SCALING = 1.8
GOAL_STUDY_S, GOAL_MACHINES = 86_400.0, 100
MACHINES = (1, 10, 100, 1000)


def space_text(peak_steps: int) -> str:
    text = MILLION.read_text(encoding="utf-8")
    for old, new in (('base = ["a100"]', 'base = ["h100-sxm"]'),
                     ("steps = 100", f"steps = {peak_steps}"),
                     ("steps = 30", f"steps = {BANDWIDTH_STEPS}")):
        if old not in text:
            raise SystemExit(f"benchmarks: {MILLION} no longer holds {old!r}; update "
                             "benchmarks/dask_scaling.py")
        text = text.replace(old, new)
    return text


def settings_for(designs: int, chunk_points: int, calibrated: str, folder: Path):
    """Settings of the search space nearest ``designs`` (whole steps of the peak)."""
    from search.problem import Problem
    from search.study import SearchRequest, new_settings

    def settings(steps: int):
        path = folder / f"space_{steps}.toml"
        path.write_text(space_text(steps), encoding="utf-8")
        return new_settings(SearchRequest(space=path, target=TARGET, engine="exhaustive",
                                          calibrated=calibrated, chunk_points=chunk_points))

    from search.exhaustive import size
    per_step = size(Problem(settings(2))) // 2  # designs per step of the peak (30 bandwidths)
    steps = max(2, round(designs / per_step))  # a varied knob takes at least 2 steps
    return settings(steps)


# --- what a worker runs ----------------------------------------------------------------------

_WORKER: dict = {}


def _problem(settings_json: dict):
    """The problem and its hardware points, built once per process for these settings."""
    key = json.dumps(settings_json, sort_keys=True)
    if _WORKER.get("key") != key:
        from search.problem import Problem, Settings

        problem = Problem(Settings.from_json(settings_json))
        _WORKER.update(key=key, problem=problem, points=list(problem.space.hardware_points()))
    return _WORKER["problem"], _WORKER["points"]


def warm(settings_json: dict) -> float:
    """Build the problem in this process and price one hardware point of each model (a
    worker's set-up: numba's cache, the predictors and each model's first pricing); its
    seconds."""
    start = time.perf_counter()
    problem, points = _problem(settings_json)
    for model in range(len(problem.traces)):
        problem.evaluate_points(model, points[:1], 0)
    return time.perf_counter() - start


class CpuMeter:
    """Cores this process and its descendants (the Dask scheduler and workers) kept busy, and
    cores all other processes of the machine did, since construction (Linux; else None)."""

    def __init__(self) -> None:
        self.start = self._read()

    @staticmethod
    def _read() -> tuple[float, float, float] | None:
        try:
            import psutil

            with open("/proc/stat", encoding="utf-8") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
            busy = (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
            me = psutil.Process()
            mine = 0.0
            for proc in [me, *me.children(recursive=True)]:
                try:
                    t = proc.cpu_times()
                    mine += t.user + t.system
                except psutil.Error:
                    pass
            return time.perf_counter(), busy, mine
        except (ImportError, OSError, ValueError):
            return None

    def cores(self) -> tuple[float | None, float | None]:
        """(ours, others) in cores, averaged since construction. Descendants that ended in
        between are missed from ours (and counted as others')."""
        now = self._read()
        if self.start is None or now is None or now[0] <= self.start[0]:
            return None, None
        wall = now[0] - self.start[0]
        ours = (now[2] - self.start[2]) / wall
        return ours, max(0.0, (now[1] - self.start[1]) / wall - ours)


def run_chunk(settings_json: dict, index: int) -> tuple[int, int]:
    """Evaluate chunk ``index`` as ``search.exhaustive.evaluate_chunk`` does and encode its rows
    as the study stores them: (rows, bytes)."""
    from search.exhaustive import plan_chunks, to_bytes

    problem, points = _problem(settings_json)
    chunk = plan_chunks(problem)[index]
    frame = problem.evaluate_points(chunk.model, points[chunk.first:chunk.stop], chunk.first)
    return len(frame), len(to_bytes(frame))


# --- the two runs ----------------------------------------------------------------------------

def one_process(settings_json: dict, chunks: int) -> dict:
    setup = warm(settings_json)
    meter = CpuMeter()
    start = time.perf_counter()
    rows = nbytes = 0
    for i in range(chunks):
        r, b = run_chunk(settings_json, i)
        rows, nbytes = rows + r, nbytes + b
    seconds = time.perf_counter() - start
    ours, others = meter.cores()
    return {"setup_s": setup, "seconds": seconds, "designs": rows, "bytes": nbytes,
            "designs_per_s": rows / seconds, "our_cores": ours, "other_cores": others}


def on_dask(settings_json: dict, chunks: int, workers: int, malloc_trim: bool) -> dict:
    import dask
    from distributed import Client, LocalCluster, wait

    # By name, not by value: run as ``python -m`` this module is __main__, whose functions
    # Dask would pickle with their globals (the problem itself).
    from benchmarks.dask_scaling import run_chunk, warm

    # Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536 (return freed memory to the
    # system early). For this work, large short-lived numpy and Arrow buffers, that costs 1.5x
    # the CPU (most of it page faults in system time); unset unless --malloc-trim.
    trim = {} if malloc_trim else {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_":
                                   None}
    start = time.perf_counter()
    with dask.config.set(trim), LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True,
            dashboard_address=None) as cluster, Client(cluster) as client:
        started = time.perf_counter() - start
        names = list(client.scheduler_info()["workers"])
        setups = [client.submit(warm, settings_json, workers=[w], pure=False) for w in names]
        wait(setups)
        setup = max(f.result() for f in setups)
        meter = CpuMeter()
        start = time.perf_counter()
        futures = client.map(run_chunk, [settings_json] * chunks, range(chunks), pure=False)
        results = client.gather(futures)
        seconds = time.perf_counter() - start
        ours, others = meter.cores()
    rows = sum(r for r, _ in results)
    return {"workers": workers, "malloc_trim": malloc_trim, "cluster_start_s": started,
            "setup_s": setup,
            "seconds": seconds, "designs": rows, "bytes": sum(b for _, b in results),
            "designs_per_s": rows / seconds, "our_cores": ours, "other_cores": others}


def _rate(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.0f}"


def _cores(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def duration(seconds: float) -> str:
    for unit, size in (("years", 365 * 86_400), ("days", 86_400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def report(env: dict, r: dict) -> str:
    lines = []
    out = lines.append
    one, dask = r["one_process"], r["dask"]
    out(f"dse calibrated search on Dask ({r['designs']:,} designs: {r['chunks']} chunks of up to "
        f"{r['chunk_points']:,}; target {TARGET}, --calibrated {r['calibrated']})")
    out(f"  {env['processor']}, {env['cpu_count']} CPUs; python {env['python']}, dask "
        f"{env['dask']}; load average before {env['load_before'][0]:.2f}, after "
        f"{env['load_after'][0]:.2f}; {env['date']}")
    out("")
    out(f"  {'':34}{'set-up s':>9}{'run s':>9}{'designs/s':>11}{'vs one':>8}{'ours':>6}"
        f"{'others':>8}{'per core-s':>11}")
    label = (f"Dask LocalCluster, {dask['workers']} workers"
             + (" (trim)" if dask["malloc_trim"] else ""))
    for name, x, ratio in (("reference: one process", one, 1.0), (label, dask, r["scaling"])):
        out(f"  {name:34}{x['setup_s']:>9.2f}{x['seconds']:>9.2f}{x['designs_per_s']:>11,.0f}"
            f"{ratio:>8.2f}{_cores(x['our_cores']):>6}{_cores(x['other_cores']):>8}"
            f"{_rate(x.get('designs_per_core_s')):>11}")
    out("  ours/others: cores this benchmark (with its Dask processes) and all other processes "
        "kept busy; per core-s: designs per CPU second of ours")
    if r.get("scaling_idle") is not None:
        out(f"  on {dask['workers']} idle cores (from the per-core-second rates, one process "
            f"holding one core): about {r['scaling_idle']:.2f}x one process")
    out(f"  (cluster start {dask['cluster_start_s']:.1f} s; set-up: building the problem, per "
        f"worker in parallel; neither in the rate; {one['bytes'] / 2**20:.0f} MiB of encoded rows)")
    out("")
    rate = dask["designs_per_s"]
    day, hour = BIG_DESIGNS / GOAL_STUDY_S, BIG_DESIGNS / 3600
    out(f"1e9-design study: {BIG_STUDY['patterns']:,} N:M patterns (M <= 317) x "
        f"{BIG_STUDY['gpus']} GPUs x {BIG_STUDY['batches']} batches x {BIG_STUDY['models']} "
        f"models = {BIG_DESIGNS:,} designs")
    out(f"  needs {day:,.0f} designs/s to finish in a day, {hour:,.0f} in an hour; measured here "
        f"{rate:,.0f} per machine ({dask['workers']} workers)")
    out("  at the measured rate: " + "; ".join(
        f"{n:,} machine{'s' if n > 1 else ''} {duration(BIG_DESIGNS / (rate * n))}"
        for n in MACHINES))
    machines = math.ceil(day / rate)
    out(f"  machines like this one for a day: {machines:,}")
    out("")
    out("goals:")
    out(f"  scaling on {dask['workers']} workers >= {GOAL_SCALING:g}x one process: "
        f"{r['scaling']:.2f}x  -> {'PASS' if r['scaling'] >= GOAL_SCALING else 'FAIL'}")
    out(f"  1e9 designs in a day on {GOAL_MACHINES} machines like this one: "
        f"{duration(BIG_DESIGNS / (rate * GOAL_MACHINES))}  -> "
        f"{'PASS' if machines <= GOAL_MACHINES else 'FAIL'}")
    return "\n".join(lines)


def environment() -> dict:
    import datetime
    import platform

    import dask

    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), model)
    except OSError:
        pass
    return {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "python": platform.python_version(), "dask": dask.__version__,
            "cpu_count": os.cpu_count(), "processor": model}


def build_parser() -> Parser:
    parser = Parser(prog="python -m benchmarks.dask_scaling",
                    description=__doc__.split("\n\n")[0])
    parser.add_argument("--designs", type=float, default=1e6,
                        help="about how many designs to search (default 1e6; 2e4 is quick)")
    parser.add_argument("--workers", type=int, default=2, help="Dask workers (default 2)")
    parser.add_argument("--chunk-points", type=int, default=50_000,
                        help="designs per chunk (default 50,000: about 10 chunks per worker "
                             "for a million designs)")
    parser.add_argument("--calibrated", default="h100-sxm",
                        help="kernel predictors (default h100-sxm; cpu-amd-epyc-2c also ships)")
    parser.add_argument("--malloc-trim", action="store_true",
                        help="keep Dask's default MALLOC_TRIM_THRESHOLD_=65536 in the workers "
                             "(1.5x the CPU here; unset by default)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON here")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.designs < 1 or args.workers < 1 or args.chunk_points < 1:
        parser.error("--designs, --workers and --chunk-points must be >= 1")

    from search.exhaustive import chunk_count, size

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        settings = settings_for(int(args.designs), args.chunk_points, args.calibrated,
                                Path(folder))
        from search.problem import Problem
        problem = Problem(settings)
        designs, chunks = size(problem), chunk_count(problem)
        del problem
        settings_json = settings.to_json()
        r = {"designs": designs, "chunks": chunks, "chunk_points": args.chunk_points,
             "calibrated": args.calibrated}
        r["one_process"] = one_process(settings_json, chunks)
        r["dask"] = on_dask(settings_json, chunks, args.workers, args.malloc_trim)
    for key in ("one_process", "dask"):
        if r[key]["designs"] != designs:
            raise SystemExit(f"benchmarks: {key} evaluated {r[key]['designs']} designs, not "
                             f"{designs}")
    r["scaling"] = r["dask"]["designs_per_s"] / r["one_process"]["designs_per_s"]
    for key in ("one_process", "dask"):
        x = r[key]
        x["designs_per_core_s"] = (x["designs"] / (x["our_cores"] * x["seconds"])
                                   if x["our_cores"] else None)
    one_rate, dask_rate = (r[k]["designs_per_core_s"] for k in ("one_process", "dask"))
    r["scaling_idle"] = (None if one_rate is None or dask_rate is None else
                         min(args.workers, os.cpu_count() or 1) * dask_rate / one_rate)
    rate = r["dask"]["designs_per_s"]
    r["big_study"] = {**BIG_STUDY, "designs": BIG_DESIGNS,
                      "needed_per_s_day": BIG_DESIGNS / GOAL_STUDY_S,
                      "needed_per_s_hour": BIG_DESIGNS / 3600,
                      "seconds_on": {n: BIG_DESIGNS / (rate * n) for n in MACHINES}}
    env = {**environment(), "load_before": load_before, "load_after": os.getloadavg()}
    print(report(env, r))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"benchmark": "dask_scaling", "environment": env, **r}, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
