"""A refused argument comes back without loading the engines (issue 27): every command's
bad-argument refusal exits 2 with one line on stderr, and leaves pandas, numba, the engines
and the optional back ends unimported. And dse.cli.names, which the parsers read in place of
the engines, says what the engines say."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dse.cli import names
from dse.cli.commands import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "numba", "dse.api", "dse.roofline", "optuna", "sqlalchemy", "altair",
         "simpy", "scipy", "torch")

_RUN = ("import atexit, sys\n"
        "atexit.register(lambda: print('IMPORTED', "
        "[m for m in {heavy!r} if m in sys.modules], flush=True))\n"
        "from dse.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n")


def _refuse(argv: list[str], env: dict | None = None) -> tuple[int, str, list[str]]:
    proc = subprocess.run([sys.executable, "-c", _RUN.format(heavy=HEAVY), *argv], cwd=ROOT,
                          capture_output=True, text=True, env=env)
    imported = eval(proc.stdout.split("IMPORTED", 1)[1].strip())  # noqa: S307 - our own list
    return proc.returncode, proc.stderr, imported


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_bad_argument_loads_no_engine(command):
    code, err, imported = _refuse([command, "--no-such-option"])
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1 and "error" in lines[0], err
    assert imported == [], imported


@pytest.mark.parametrize("argv, message", [
    (["hw", "probe", "--repeats", "1"],
     "dse hw probe: error: --repeats 1: give at least 3 (and at most 1,000) "
     "(see dse hw probe --help)\n"),
    (["workloads", "export", "m", "--img-size", "0"],
     "dse workloads export: error: --img-size 0: give at least 1 (and at most 4,096) "
     "(see dse workloads export --help)\n"),
    (["accuracy", "--model", "m", "--img-size", "513"],
     "dse accuracy: error: --img-size 513: give at most 512 (and at least 1) "
     "(see dse accuracy --help)\n"),
    (["accuracy-table", "--bogus"],
     "dse: error: unrecognized arguments: --bogus (see dse --help)\n"),
    (["bench", "spmv", "--blocks", "99"],
     "dse bench spmv: error: --blocks '99': give block edges from 1 to 64 separated by "
     "commas, e.g. 1,2,4 (see dse bench spmv --help)\n"),
    (["fusion-rules", "--out", "x.json", "--threshold", "2"],
     "dse fusion-rules: error: --threshold 2.0: give a number above 0 and at most 1 "
     "(see dse fusion-rules --help)\n"),
])
def test_a_table_command_refuses_a_bad_value_without_pandas(argv, message):
    """The commands over the trace, hardware and accuracy tables refuse a bad value of a
    subcommand as before, with none of those tables (pandas) loaded."""
    assert _refuse(argv) == (2, message, [])


def test_the_search_refusal_reads_as_before():
    code, err, imported = _refuse(["search", "--bogus"])
    assert (code, err) == (2, "dse: error: unrecognized arguments: --bogus (see dse --help)\n")
    assert imported == []


def test_an_unknown_hardware_loads_neither_numba_nor_the_engines(tmp_path):
    """Found once the command runs: the trace is loaded first (pandas), the engines are not.
    On an empty compile cache too, the error is the only line: the first run's note comes
    once the inputs are checked and evaluation begins, never before a refusal."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    code, err, imported = _refuse(["evaluate", "--hw", "no-such-hw", "--model", "convnext_tiny"],
                                  env)
    assert (code, err) == (2, "dse: error: unknown hardware 'no-such-hw'; see `dse hw list`, or "
                              "give a path to a .toml spec\n")
    assert not set(imported) - {"pandas"}, imported


def test_the_names_are_the_engines_names():
    import workloads
    from dse.accuracy import DEFAULT_TABLE
    from dse.accuracy.llm_table import LLM_METRICS
    from dse.accuracy.pipeline import DEFAULT_LEVELS, DEFAULT_PATTERNS, MAX_IMG_SIZE
    from dse.calibrate.predictor import RESIDUALS
    from dse.calibrate.spmv_cnn import EPOCHS
    from dse.explore import EVALUATORS
    from dse.explore.studies import DEFAULT_BATCHES, DEFAULT_FORMATS
    from dse.measure.dataset import shipped_datasets
    from dse.roofline import FUSIONS, SCOPES
    from dse.roofline.evaluator import fusion_models
    from dse.roofline.numerics import DEFAULT_INT4_GROUP, DTYPE_BYTES, WEIGHT_DTYPE_BYTES
    from dse.sim import LOCAL
    from search.target import DEFAULT_MAX_ACC_DROP, OBJECTIVES
    from workloads.llm import PHASES

    assert names.MAX_BATCH == workloads.MAX_BATCH
    assert names.PHASES == PHASES
    assert (names.SCOPES, names.FUSIONS) == (SCOPES, FUSIONS)
    assert names.fusion_models() == fusion_models()
    assert names.DTYPES == tuple(DTYPE_BYTES)
    assert names.WEIGHT_DTYPES == tuple(WEIGHT_DTYPE_BYTES)
    assert names.DEFAULT_INT4_GROUP == DEFAULT_INT4_GROUP
    assert names.EVALUATORS == EVALUATORS
    assert names.LOCAL == LOCAL
    assert (names.OBJECTIVES, names.DEFAULT_MAX_ACC_DROP) == (OBJECTIVES, DEFAULT_MAX_ACC_DROP)
    assert names.LLM_METRICS == tuple(LLM_METRICS)
    assert (names.DEFAULT_FORMATS, names.DEFAULT_BATCHES) == (DEFAULT_FORMATS, DEFAULT_BATCHES)
    assert (names.RESIDUALS, names.SPMV_CNN_EPOCHS) == (RESIDUALS, EPOCHS)
    assert names.shipped_datasets() == shipped_datasets()
    assert names.trace_names() == workloads.trace_names()
    assert names.llm_names() == workloads.llm_names()
    assert names.trace_names() and names.llm_names() and names.shipped_datasets()
    assert (names.ACCURACY_PATTERNS, names.ACCURACY_LEVELS) == (DEFAULT_PATTERNS, DEFAULT_LEVELS)
    assert names.MAX_IMG_SIZE == MAX_IMG_SIZE
    assert names.ACCURACY_TABLE == DEFAULT_TABLE and names.ACCURACY_TABLE.is_file()
