"""Speed of `dse search`: the default command, and an exhaustive space of 10^6 design points.

Run from the repository root::

    python -m benchmarks.search_speed [--repeats N]

Each figure is the median wall time of whole `dse search` commands in new processes (imports,
study creation in SQLite, evaluation, ranking, result files, printing), after one untimed run
that warms numba's on-disk cache. References measured in the same run: `dse --help` (the
command line's import cost) and, for the big space, the evaluator alone on the same design
points in process (`dse.evaluate` over every model, batch and hardware point): the search's
ratio to it is its overhead. Targets (issue 5): default command under 3 s; 10^6 points under 5 s.
A calibrated search (`--calibrated h100-sxm`: every op of every design priced by the kernel
predictors as well) of spaces/calibrated.toml (6,880 designs) is reported against the plain
search of the same space, as microseconds per op and design of the extra work; no target yet.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dse.cli.parser import Parser

HERE = Path(__file__).resolve().parent
MILLION = HERE / "spaces" / "million.toml"
CALIBRATED = HERE / "spaces" / "calibrated.toml"
TARGETS = {"default": 3.0, "million": 5.0}


def timed(argv: list[str], cwd: str) -> float:
    # Bytecode as an installed package has it: with PYTHONDONTWRITEBYTECODE set (as on the
    # project's VMs) a checkout's own modules were compiled from source in every process
    # (~0.1-0.2 s); their .pyc files go to a folder beside the run instead, written by the
    # untimed first run.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(cwd, "pycache")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dse", *argv], cwd=cwd, check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def median_of(argv_for, repeats: int, cwd: str) -> float:
    timed(argv_for(-1), cwd)  # warm numba's cache and the page cache
    return statistics.median(timed(argv_for(i), cwd) for i in range(repeats))


def evaluator_alone() -> tuple[float, int]:
    """The evaluator on the million-point space's designs, in process (imports excluded)."""
    from search.problem import Problem
    from search.study import SearchRequest, new_settings

    problem = Problem(new_settings(SearchRequest(space=MILLION, target="1.3x_over_2:4")))
    points = list(problem.space.hardware_points())
    accelerators = [problem.builder.build(p.base, p.values) for p in points]
    from dse import evaluate

    start = time.perf_counter()
    rows = 0
    for trace in problem.traces:
        frame = evaluate(trace, accelerators, list(problem.evaluated),
                         list(problem.space.batches), fusion=problem.space.fusion,
                         scope=problem.space.scope, categorical=True)
        rows += len(frame)
    return time.perf_counter() - start, rows


def op_designs(space: Path) -> int:
    """Ops x designs of a space: what a calibrated search prices beyond the bound."""
    from search.problem import Problem
    from search.study import SearchRequest, new_settings

    problem = Problem(new_settings(SearchRequest(space=space, target="1.3x_over_2:4")))
    designs = (len(list(problem.space.hardware_points())) * len(problem.evaluated)
               * len(problem.space.batches))
    return sum(len(trace.ops) for trace in problem.traces) * designs


def build_parser() -> Parser:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    with tempfile.TemporaryDirectory() as cwd:
        help_s = median_of(lambda i: ["--help"], args.repeats, cwd)
        default_s = median_of(lambda i: ["search", "--target", "1.3x_over_2:4", "--study",
                                         f"d{i}"], args.repeats, cwd)
        million_s = median_of(lambda i: ["search", "--space", str(MILLION), "--target",
                                         "1.3x_over_2:4", "--study", f"m{i}"], args.repeats,
                              cwd)
        plain_s = median_of(lambda i: ["search", "--space", str(CALIBRATED), "--target",
                                       "1.3x_over_2:4", "--study", f"p{i}"], args.repeats, cwd)
        calibrated_s = median_of(lambda i: ["search", "--space", str(CALIBRATED), "--target",
                                            "1.3x_over_2:4", "--calibrated", "h100-sxm",
                                            "--study", f"c{i}"], args.repeats, cwd)
    evaluate_s, rows = evaluator_alone()
    priced = op_designs(CALIBRATED)
    print(f"dse --help (imports):                    {help_s:6.2f} s")
    print(f"dse search --target 1.3x_over_2:4:       {default_s:6.2f} s  "
          f"(target < {TARGETS['default']:g} s: {'met' if default_s < 3 else 'MISSED'}; "
          f"{default_s / help_s:.1f}x `dse --help`)")
    print(f"million-point space ({rows:,} designs): {million_s:6.2f} s  "
          f"(target < {TARGETS['million']:g} s: {'met' if million_s < 5 else 'MISSED'}; "
          f"{rows / million_s / 1e6:.2f} M designs/s)")
    print(f"  evaluator alone on those designs:      {evaluate_s:6.2f} s  "
          f"(the search takes {million_s / evaluate_s:.1f}x: imports, storage, scoring, "
          "ranking, files)")
    extra = max(calibrated_s - plain_s, 0.0)
    print(f"spaces/calibrated.toml, plain:           {plain_s:6.2f} s")
    print(f"  with --calibrated h100-sxm:            {calibrated_s:6.2f} s  "
          f"({calibrated_s / plain_s:.1f}x; {extra / priced * 1e6:.2f} us per op and design "
          f"over {priced:,} op-designs)")


if __name__ == "__main__":
    main()
