"""Issue 25, second audit: the examples a newcomer meets outside the Markdown pages, what
`dse hw probe` says to run next, and a calibrated search that says first when the designs within
the accuracy limit are all slower than dense.

- The API reference page renders docstrings, and their ``>>>`` examples with them: they run here
  (tests/test_docs.py runs the pages' fenced blocks, not the docstrings).
- The ``Example:`` line of a command's help (on ``dse COMMAND --help`` and on the site's CLI
  page) parses as printed, its formats included, and the cheap ones run.
- ``dse hw probe --out h.toml`` prints ``use it as --hw h.toml``; ``dse evaluate --hw h.toml
  --model convnext_tiny`` then works on a spec without an fp16 (or bf16) tensor rate, says the
  dtype it assumed, and prices exactly what ``dse.evaluate`` prices at that dtype.
"""

from __future__ import annotations

import doctest
import importlib
import re
import shlex
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dse
import formats
from tests.cli_run import run_cli
from tests.test_docs import resolve

ROOT = Path(__file__).resolve().parent.parent
API_PAGE = ROOT / "docs" / "reference" / "api.md"


# --- docstring examples on the API reference page ------------------------------------------


def _rendered_doctests() -> list[doctest.DocTest]:
    """The doctests of every object the API page renders (``::: NAME``; a module with its
    members, as mkdocstrings shows them), and of the ``dse`` package, the front door."""
    names = ["dse", *re.findall(r"^:::\s+(\S+)", API_PAGE.read_text(encoding="utf-8"), re.M)]
    finder = doctest.DocTestFinder()
    found: dict[str, doctest.DocTest] = {}
    for name in names:
        obj = resolve(name)
        module = obj if isinstance(obj, types.ModuleType) else importlib.import_module(
            getattr(obj, "__module__", name.rsplit(".", 1)[0]))
        for test in finder.find(obj, name, module=module):
            if test.examples:
                found.setdefault(f"{test.filename}:{test.lineno}", test)
    return list(found.values())


def test_docstring_examples_the_api_page_renders_run():
    tests = _rendered_doctests()
    # By hand: dse (3 examples), dse.design_columns (5), accelerator_models (3), formats (3),
    # workloads (3). A finder that finds nothing would pass everything below.
    assert sum(len(t.examples) for t in tests) >= 17, [t.name for t in tests]
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    failures = []
    for test in tests:
        out: list[str] = []
        runner = doctest.DocTestRunner(optionflags=flags)
        result = runner.run(test, out=out.append)
        if result.failed:
            failures.append("".join(out))
    assert not failures, "\n".join(failures)


def test_a_wrong_docstring_example_is_caught():
    bad = doctest.DocTestParser().get_doctest(">>> 1 + 1\n3\n", {}, "bad", "bad.py", 0)
    result = doctest.DocTestRunner().run(bad, out=lambda _: None)
    assert result.failed == 1


# --- the `Example:` line of each command's help ----------------------------------------------


def _help_pages() -> list[tuple[str, object]]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks_generated",
                                                  ROOT / "docs" / "hooks" / "generated.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    from dse.cli.main import build_parser

    return [(" ".join(path), sub) for path, sub in hooks.commands(build_parser(), ("dse",))]


def _help_examples() -> list[tuple[str, list[list[str]]]]:
    """Each ``Example:`` of a command's epilog, as the argv lists its ``&&`` chain runs."""
    found = []
    for name, sub in _help_pages():
        match = re.search(r"Example: (.*)", sub.epilog or "", re.S)
        if match:
            text = re.split(r"\.\s+(?=[A-Z])", " ".join(match.group(1).split()))[0].rstrip(".")
            found.append((name, [shlex.split(part) for part in text.split("&&")]))
    return found


def test_help_shows_no_doubled_percent_signs():
    """argparse formats an argument's help with %, never a description or an epilog: a ``%%``
    there reaches the reader as typed (it once showed ``--format block4@87.5%%``)."""
    doubled = [name for name, sub in _help_pages() if "%%" in sub.format_help()]
    assert not doubled, f"help with '%%' in it: {doubled}"


def test_help_examples_parse_as_printed():
    from dse.cli.main import build_parser

    examples = _help_examples()
    assert {"dse simulate", "dse sweep", "dse measure", "dse fusion-rules"} <= {
        name for name, _ in examples}
    for name, chain in examples:
        for argv in chain:
            assert argv[0] == "dse", (name, argv)
            build_parser().parse_args(argv[1:])  # SystemExit(2) on a bad option or value
            for i, word in enumerate(argv[:-1]):
                if word == "--format":
                    formats.parse(argv[i + 1])  # FormatError on '87.5%%'


def test_help_examples_that_are_quick_run_as_printed(tmp_path, monkeypatch, capsys):
    """dse simulate's and dse sweep's examples run (the others measure for minutes)."""
    monkeypatch.chdir(tmp_path)
    ran = 0
    for name, chain in _help_examples():
        if name not in ("dse simulate", "dse sweep"):
            continue
        for argv in chain:
            assert run_cli(argv[1:]) == 0, (argv, capsys.readouterr().err)
            ran += 1
    capsys.readouterr()
    assert ran == 2
    assert (tmp_path / "sim-report" / "index.html").is_file()
    sweep = pd.read_parquet(tmp_path / "sweep.parquet")
    # By hand: 9 batches x 8 bandwidths, each design with its dense row beside it.
    assert len(sweep) == 9 * 8 * 2


# --- what `dse hw probe` says to run next ----------------------------------------------------


def _probed(tensor: dict[str, float]):
    """A hand-made probe result of a CPU with the given tensor rates (no fp16 among them)."""
    from tests.test_probe import _figure as figure
    from tests.test_probe import cpu_result

    figures = {"dram_triad": figure(20e9, "B/s"), "vector_fma_fp32": figure(140e9),
               "launch_overhead": figure(2e-6, "s")}
    sources = {"dram_bandwidth_bytes_per_s": "dram_triad",
               "vector_flops_per_s.fp32": "vector_fma_fp32",
               "kernel_launch_overhead_s": "launch_overhead"}
    for dtype, rate in tensor.items():
        figures[f"gemm_{dtype}"] = figure(rate)
        sources[f"tensor_flops_per_s.{dtype}"] = f"gemm_{dtype}"
    return cpu_result(figures, sources)


@pytest.mark.parametrize("tensor, assumed", [
    ({"tf32": 100e9, "bf16": 300e9}, "bf16"),
    ({"tf32": 100e9}, "tf32"),  # a CPU without reduced-precision units at all
])
def test_what_hw_probe_says_to_run_next_works_as_printed(tmp_path, monkeypatch, capsys,
                                                        tensor, assumed):
    import dse.measure.probe as probe_module

    monkeypatch.setattr(probe_module, "probe", lambda *args, **kwargs: _probed(tensor))
    monkeypatch.chdir(tmp_path)
    assert run_cli(["hw", "probe", "--out", "h.toml"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert printed == "wrote h.toml; use it as --hw h.toml"
    hint = shlex.split(printed.split("use it as ", 1)[1])
    assert run_cli(["evaluate", *hint, "--model", "convnext_tiny"]) == 0
    out = capsys.readouterr().out
    assert (f"note: the hardware has no fp16 rate, so this run assumed --dtype {assumed} "
            "--vector-dtype fp32") in out
    assert f"{assumed} (vector ops fp32)" in out  # the table's heading names it too
    # What it priced is dse.evaluate at that dtype, to 1e-12.
    assert run_cli(["evaluate", *hint, "--model", "convnext_tiny", "--out", "cli.parquet"]) == 0
    capsys.readouterr()
    cli = pd.read_parquet("cli.parquet")
    api = dse.evaluate("convnext_tiny", "h.toml", ["dense"], [1],
                       numerics=dse.Numerics(dtype=assumed, vector_dtype="fp32"))
    assert len(cli) == len(api) == 1
    np.testing.assert_allclose(cli["latency_s"], api["latency_s"], rtol=1e-12)
    # At fp16 the same spec is refused in one line, naming the missing rate.
    assert run_cli(["evaluate", *hint, "--model", "convnext_tiny", "--dtype", "fp16"]) == 2
    err = capsys.readouterr().err
    assert "tensor_flops_per_s.fp16" in err and len(err.strip().splitlines()) == 1


# --- a calibrated search that says first when nothing accurate beats dense ------------------


def _results(rows: list[tuple[str, str, float, bool]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["format", "role", "expected_speedup", "meets_accuracy"])


def test_the_dense_first_line_looks_at_the_formats_within_the_accuracy_limit():
    from dse.cli.search import _dense_first

    problem = types.SimpleNamespace(speed="expected_speedup")
    results = _results([
        ("dense", "dense", 1.0, False),
        ("2:4", "baseline", 0.40, True),
        ("block32@50%", "candidate", 0.68, True),
        ("1:8", "candidate", 0.55, True),
        ("block32@96.875%", "candidate", 1.06, False),  # faster than dense, far too inaccurate
    ])
    here = np.ones(len(results), dtype=bool)
    assert _dense_first(results, here, problem) == [
        "  no sparse format within the accuracy limit is expected to beat dense here: the "
        "fastest, block32@50%, runs at 0.680x of dense by the expectation; only formats that "
        "lose more accuracy are faster (the fastest, block32@96.875%, at 1.060x)"]
    # One accurate format faster than dense: nothing to say.
    faster = results.copy()
    faster.loc[3, "expected_speedup"] = 1.02
    assert _dense_first(faster, here, problem) == []
    # No sparse format faster than dense at all: the line that says so, unchanged.
    slow = results.copy()
    slow.loc[4, "expected_speedup"] = 0.9
    assert _dense_first(slow, here, problem) == [
        "  no sparse format is expected to beat dense here: the fastest, block32@96.875%, runs "
        "at 0.900x of dense by the expectation (the bound's speedups are beside it)"]
    # Without a target there is no accuracy limit: only the first line's rule applies.
    assert _dense_first(results.drop(columns="meets_accuracy"), here, problem) == []


def test_a_calibrated_search_on_the_h100_says_it_before_the_designs(tmp_path, capsys):
    """The issue's own case: `--calibrated h100-sxm --hw h100-sxm`, a target met only by
    designs slower than dense. Checked against the results the search wrote."""
    assert run_cli(["search", "--calibrated", "h100-sxm", "--hw", "h100-sxm", "--target",
                    "1.3x_over_2:4", "--out", str(tmp_path / "s"), "--study", "s"]) == 0
    out = capsys.readouterr().out
    results = pd.read_parquet(tmp_path / "s" / "results.parquet")
    blocks = out.split("\n\n")
    for (model, batch), group in results.groupby(["model", "batch"], observed=True):
        block = next(b for b in blocks if b.startswith(f"{model}, batch {batch}:"))
        lines = block.splitlines()
        sparse = group[(group["role"] == "candidate") & (group["format"] != "dense")]
        accurate = sparse[sparse["meets_accuracy"]]
        best = accurate.loc[accurate["expected_speedup"].idxmax()]
        says = "no sparse format within the accuracy limit is expected to beat dense"
        wanted = best["expected_speedup"] < 1.0 <= sparse["expected_speedup"].max()
        assert (says in block) == wanted, block
        if wanted:  # first, before the baseline and the designs
            assert lines[1].startswith(f"  {says} here: the fastest, {best['format']}, runs "
                                       f"at {best['expected_speedup']:.3f}x"), block
        met = group[group["meets_target"]]
        if len(met) and (met["expected_speedup"] < 1.0).all():
            assert "beat dense" in lines[1], block  # a target met, and still said first



# --- a format that meets the target at one hardware point and misses it at another ---------


def test_a_miss_line_names_apart_the_formats_that_meet_it_elsewhere():
    from dse.cli.search import _misses

    fmts = pd.Categorical(["1:4", "1:4", "4:8", "4:8", "2:8", "2:8"])
    verdicts = pd.Categorical(["meets", "too slow", "too slow", "too slow", "too inaccurate",
                               "too slow"])
    met = np.array([True, False, False, False, False, False])
    missed = ~met
    assert _misses(missed, fmts, verdicts, met=met) == [
        "  5 miss it:",
        "    too slow (4): 4:8, 2:8; and 1:4 at the hardware points where they miss it (they "
        "meet it at another)",
        "    too inaccurate (1): 2:8",
    ]
    # Without the met rows (one hardware point), the line is as before.
    assert _misses(missed, fmts, verdicts)[1] == "    too slow (4): 1:4, 4:8, 2:8"


def test_the_shipped_example_space_lists_no_format_as_both_meeting_and_missing(tmp_path,
                                                                                capsys):
    """examples/my_space.toml varies the DRAM bandwidth: a format meets the target at some
    points and is too slow at others (the issue saw it under both headings)."""
    space = ROOT / "examples" / "my_space.toml"
    assert run_cli(["search", "--space", str(space), "--target", "1.2x_over_2:4",
                    "--minimize", "dram_bandwidth_bytes_per_s", "--out", str(tmp_path / "s"),
                    "--study", "s"]) == 0
    out = capsys.readouterr().out
    results = pd.read_parquet(tmp_path / "s" / "results.parquet")
    met = set(results.loc[results["meets_target"], "format"].astype(str))
    missed = set(results.loc[(results["role"] == "candidate") & ~results["meets_target"],
                             "format"].astype(str))
    assert met & missed, "the space no longer has a format on both sides: the test is moot"
    for line in out.splitlines():
        if line.startswith("    too "):
            plain = line.split(": ", 1)[1].split("; and ")[0]
            if " at the hardware points where they miss it" in plain:
                continue  # only formats that meet it elsewhere
            assert not set(plain.split(", ")) & met, line
            assert set(plain.split(", ")) <= missed, line


# --- dse bench spmv: the estimate it prints is what its progress counts to -----------------


class _Sentinel(Exception):
    pass


def test_the_spmv_estimate_printed_is_the_total_its_progress_counts_to(tmp_path, monkeypatch,
                                                                       capsys):
    """The issue saw the progress count to "80/80 s" under a header of 90 s: the header added
    the calibration, already done when it prints. A plan built by hand: three matrices of
    1.7, 3.0 and 4.6 predicted seconds (9.3 s, shown as 9), after 11.4 s of calibration."""
    import dse.cli.bench as cli_bench
    import dse.spmv.bench as spmv_bench

    costs = pd.DataFrame({"matrix": [0, 0, 1, 2], "seconds": [1.2, 0.5, 3.0, 4.6]})
    plan = types.SimpleNamespace(
        costs=costs, matrices=["a", "b", "c"], space=["a", "b", "c", "d", "e"],
        pruning=types.SimpleNamespace(dropped=[("nnz_per_row=34", 1.0)], predicted_s=9.3),
        calibration=types.SimpleNamespace(seconds=11.4), predicted_s=20.7)
    given = {}

    def plan_spmv_benchmark(budget_s, **kwargs):
        given.update(kwargs, budget_s=budget_s)
        return plan

    def run_spmv_plan(plan, progress):
        for i in range(len(plan.matrices)):
            progress(i + 1, len(plan.matrices))
        raise _Sentinel  # the run is not what this test is about

    counted = []

    class Meter:
        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, done, total, unit=None):
            counted.append((done, total))

    monkeypatch.setattr(spmv_bench, "plan_spmv_benchmark", plan_spmv_benchmark)
    monkeypatch.setattr(spmv_bench, "run_spmv_plan", run_spmv_plan)
    monkeypatch.setattr(cli_bench, "StatusLine", Meter)
    with pytest.raises(_Sentinel):
        run_cli(["bench", "spmv", "--budget", "60s", "--out", str(tmp_path / "run")])
    header = capsys.readouterr().out.strip().splitlines()[0]
    assert header == ("estimate: 9 s of benchmarking for 3 of 5 matrices, after 11 s of "
                      "calibration; with 10 s for writing the results and the report, the run "
                      "ends within the 60 s budget; pruned: nnz_per_row 34")
    assert counted == [(2, 9), (5, 9), (9, 9)]
    # The whole budget goes to the plan, with what is kept for after the run named apart.
    assert given["budget_s"] == 60 and given["reserve_s"] == cli_bench.AFTER_RUN_S
    assert not (tmp_path / "run").exists()  # a failed run leaves no folder behind


def test_a_too_short_spmv_budget_is_refused_naming_the_budget_given():
    """Planning 12 s with 10 s kept for after the run: the refusal names --budget 12s (it
    named the 2 s left), and the least budget it asks for counts the 10 s kept."""
    import itertools
    import math

    from dse.measure.errors import BenchError
    from dse.spmv import bench as spmv_bench

    ticks = itertools.count(0.0, 1000.0)  # a clock on which calibration takes forever
    with pytest.raises(BenchError) as caught:
        spmv_bench.plan_spmv_benchmark(12, reserve_s=10, max_dim=512, blocks=(1, 2),
                                       cache_sizes={"l2": 2**20, "l3": 32 * 2**20},
                                       clock=lambda: next(ticks))
    message = str(caught.value)
    assert message.startswith("--budget 12s: "), message
    compiling = re.search(r"compiling (\d+) BCSR kernels .* give at least (\d+)s", message)
    if compiling:  # kernels not compiled yet in this process: refused before calibrating
        kernels = int(compiling.group(1))
        least = math.ceil(2 * kernels * spmv_bench.TYPICAL_COMPILE_S / spmv_bench.PLAN_SHARE
                          + 10)
        assert int(compiling.group(2)) == least
    else:
        assert "calibration alone took" in message
