"""Reliability, fourth round (issues 26 and 24): on a first run (an empty compile cache) a bad
input is told alone, the note that the kernels compile comes only once evaluation begins; two
outputs on one path, a worker's missing study database, a language model's name where a trace
is shown, and a layer count that would fill memory are refused in one line.

Each refusal: exit 2, exactly one line on stderr naming the input, no traceback, no compile
note, no file left behind. Refusals run in this process (tests.cli_run) with a tripwire where
evaluation begins (the first run's note is asked for there): a refusal must come before it,
whatever numba has loaded already. The note itself is checked in fresh processes with an
empty NUMBA_CACHE_DIR.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dse.cli.first_run import first_run_done
from tests.cli_run import run_cli
from workloads.llm import LLM_CONFIGS_DIR, MAX_LAYERS

ROOT = Path(__file__).resolve().parents[1]
NOTE = "dse: compiling the evaluator's kernels"
TOOK = first_run_done(1.0).split("1.0")[0]  # "dse: this first run took "
STATUS = re.compile(r"^dse: [\w -]+ \d+/\d+\b")

TOY = ["--model", "toy_hybrid", "--hw", "a100", "--format", "2:4"]
LLAMA = ["--model", "llama-3-8b", "--phase", "decode", "--context", "128", "--hw", "h100-sxm",
         "--format", "2:4"]


class EvaluationBegan(Exception):
    """Raised by the tripwire: the command reached the point where evaluation begins."""


@pytest.fixture
def first_run(tmp_path, monkeypatch):
    """A working folder, current, an empty compile cache folder beside it, and the tripwire:
    asking for the first run's note (what a command does once its inputs are checked)
    raises :class:`EvaluationBegan`, which no refusal may meet."""
    from dse.cli import first_run as note

    cache = tmp_path / "numba-cache"
    cache.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(cache))
    monkeypatch.chdir(work)

    def tripwire():
        raise EvaluationBegan("the command began evaluating before refusing")

    monkeypatch.setattr(note, "note_first_compile", tripwire)
    return work


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _refused(argv: list[str], folder: Path, capsys) -> str:
    """Run ``dse argv``; assert exit 2, one line on stderr and nothing written; the line."""
    before = _files(folder)
    code = run_cli(argv)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err and NOTE not in err, err
    assert _files(folder) == before, "a file was left behind"
    return lines[0]


# --- the first run's note comes after every input is checked ---------------------------------

BAD_HW = ["--hw", "no-such-hw"]
BAD_MODEL = ["--model", "no-such-model"]

#: (case, argv, what the one line names): every command that prints the note.
FIRST_RUN_REFUSALS = [
    ("evaluate --hw", ["evaluate", "--model", "toy_hybrid", *BAD_HW], "'no-such-hw'"),
    ("evaluate --model", ["evaluate", *BAD_MODEL, "--hw", "a100"], "'no-such-model'"),
    ("evaluate --context", ["evaluate", *LLAMA[:5], "100000", *LLAMA[6:]],
     "context 100000 tokens"),
    ("simulate --hw", ["simulate", "--model", "toy_hybrid", *BAD_HW], "'no-such-hw'"),
    ("simulate --model", ["simulate", *BAD_MODEL, "--hw", "a100"], "'no-such-model'"),
    ("compare --hw", ["compare", "--model", "toy_hybrid", "--hw", "a100,no-such-hw",
                      "--format", "2:4"], "'no-such-hw'"),
    ("compare --model", ["compare", *BAD_MODEL, "--hw", "a100", "--format", "2:4"],
     "'no-such-model'"),
    ("sweep --hw", ["sweep", "--model", "toy_hybrid", *BAD_HW, "--format", "2:4", "--vary",
                    "batch=1,2", "--out", "s.csv"], "'no-such-hw'"),
    ("sweep --model", ["sweep", *BAD_MODEL, "--hw", "a100", "--format", "2:4", "--vary",
                       "batch=1,2", "--out", "s.csv"], "'no-such-model'"),
    ("report --hw", ["report", "--model", "toy_hybrid", *BAD_HW, "--format", "2:4", "--out",
                     "r"], "'no-such-hw'"),
    ("report --model", ["report", *BAD_MODEL, "--hw", "a100", "--format", "2:4", "--out", "r"],
     "'no-such-model'"),
    ("study --hw", ["study", "feature-overhead", "--model", "toy_hybrid", *BAD_HW, "--out",
                    "r"], "'no-such-hw'"),
    ("study --model", ["study", "feature-overhead", *BAD_MODEL, "--out", "r"],
     "'no-such-model'"),
    ("search --hw", ["search", *BAD_HW, "--out", "o"], "'no-such-hw'"),
    ("search --model", ["search", *BAD_MODEL, "--out", "o"], "'no-such-model'"),
    ("measure --hw", ["measure", "--model", "toy_hybrid", *BAD_HW, "--out", "m.parquet"],
     "'no-such-hw'"),
    ("measure --model", ["measure", *BAD_MODEL, "--hw", "a100", "--out", "m.parquet"],
     "'no-such-model'"),
    # Read by the command only once it ran, before this round: after the note.
    ("report --accuracy-table", ["report", *TOY, "--out", "r", "--accuracy-table",
                                 "table.json"], "table.json"),
    ("report --measured", ["report", *TOY, "--out", "r", "--calibrated", "h100-sxm",
                           "--measured", "no-such-dataset"], "no-such-dataset"),
    ("study --tornado-model", ["study", "feature-overhead", "--model", "toy_hybrid",
                               "--tornado-model", "resnet50", "--out", "r"],
     "--tornado-model resnet50: not among the studied models (toy_hybrid)"),
    ("study --tornado-format", ["study", "feature-overhead", "--model", "toy_hybrid",
                                "--tornado-format", "3:2", "--out", "r"], "'3:2'"),
    ("measure --format", ["measure", "--model", "toy_hybrid", "--hw", "a100", "--format",
                          "2:4", "--out", "m.parquet"], "--format 2:4: no cpu kernel"),
]


@pytest.mark.parametrize("case, argv, named", FIRST_RUN_REFUSALS,
                         ids=[c[0] for c in FIRST_RUN_REFUSALS])
def test_a_bad_input_on_a_first_run_is_told_alone(case, argv, named, first_run, capsys):
    (first_run / "table.json").write_text("{not a table")
    line = _refused(argv, first_run, capsys)
    assert line.startswith("dse: error: ") and named in line, line


def _fresh(argv: list[str], cache: Path, cwd: Path) -> subprocess.CompletedProcess:
    """``dse argv`` in a new process, with ``cache`` as numba's (empty) cache folder."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    return subprocess.run([sys.executable, "-m", "dse", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


#: Commands that evaluate, each with a valid design: the note first, the measured time last.
FIRST_RUNS = [
    ("evaluate llm", ["evaluate", *LLAMA, "--weight-dtype", "int4", "--kv-dtype", "fp8"]),
    ("simulate", ["simulate", *TOY]),
    ("compare", ["compare", *TOY]),
    ("sweep", ["sweep", *TOY, "--vary", "batch=1,2", "--out", "s.csv"]),
]


@pytest.mark.parametrize("case, argv", FIRST_RUNS, ids=[c[0] for c in FIRST_RUNS])
def test_a_first_run_still_says_it_compiles(case, argv, tmp_path):
    run = _fresh(argv, tmp_path / "cache", tmp_path)
    assert run.returncode == 0, run.stderr
    # A long sweep also writes its periodic status line (dse.cli.progress: "dse: VERB 2/2 ...")
    # once it has run 2 s, which a loaded machine reaches: not part of what is checked here.
    lines = [x for x in run.stderr.splitlines() if not STATUS.match(x)]
    assert len(lines) == 2, lines
    assert lines[0].startswith(NOTE) and str(tmp_path / "cache") in lines[0], lines
    assert lines[1].startswith(TOOK), lines


def test_a_bad_hardware_on_a_first_run_is_one_line_from_the_console_script(tmp_path):
    """End to end, in a fresh process with an empty cache folder: the error alone."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "dse", "evaluate", "--model", "toy_hybrid",
                           "--hw", "nonexistent"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == ("dse: error: unknown hardware 'nonexistent'; see `dse hw list`, or "
                           "give a path to a .toml spec\n")
    assert proc.stdout == "" and list(tmp_path.iterdir()) == []


# --- two outputs on one path ------------------------------------------------------------------

SAME_PATH = [
    ("simulate --out --timeline", ["simulate", *TOY, "--out", "x.csv", "--timeline", "x.csv"],
     "--out x.csv and --timeline x.csv"),
    ("simulate --out --report", ["simulate", *TOY, "--out", "x.csv", "--report", "x.csv"],
     "--out x.csv and --report x.csv"),
    ("compare --out --report", ["compare", *TOY, "--out", "r.csv", "--report",
                                "../work/r.csv"], "--out r.csv and --report ../work/r.csv"),
    ("sweep --out --report", ["sweep", *TOY, "--vary", "batch=1,2", "--out", "s.csv",
                              "--report", "s.csv"], "--out s.csv and --report s.csv"),
]


@pytest.mark.parametrize("case, argv, named", SAME_PATH, ids=[c[0] for c in SAME_PATH])
def test_two_outputs_on_one_path_are_refused_before_any_work(case, argv, named, first_run,
                                                             capsys):
    """simulate --out X --timeline X wrote the timeline over the per-op results and exited 0;
    compare --out X --report X wrote X, then failed on it and left it behind."""
    line = _refused(argv, first_run, capsys)
    assert line == f"dse: error: {named} are one path; give each output its own", line


def test_two_folders_may_be_one():
    """A search's results folder and its report folder may be one (their files differ)."""
    from dse.cli.options import check_outputs

    check_outputs(folders=[("--report", Path("o")), ("--out", Path("o"))])


# --- a search worker, a language model shown, an absurd configuration -------------------------

def test_a_worker_without_a_study_database_creates_none(first_run, capsys):
    line = _refused(["search", "worker", "--storage", "sqlite:///gone.db", "--study", "s"],
                    first_run, capsys)
    assert line == ("dse: error: --storage sqlite:///gone.db: no study database at gone.db; "
                    "give the --storage the study was created with")


def test_a_worker_for_a_study_not_in_the_database_is_refused_first(first_run, capsys):
    from search.storage import open_storage

    open_storage("sqlite:///studies.db").dispose()  # a database that holds no study
    line = _refused(["search", "worker", "--storage", "sqlite:///studies.db", "--study", "s"],
                    first_run, capsys)
    assert line.startswith("dse: error: no study 's' in sqlite:///studies.db"), line


@pytest.mark.parametrize("model, named", [
    ("no-such-model", "unknown model 'no-such-model'"),
    ("Llama-3-8B", "unknown model 'Llama-3-8B'"),
    ("broken.json", "broken.json: malformed JSON"),
])
def test_phase_and_context_with_no_model_say_what_is_wrong_with_it(model, named, first_run,
                                                                    capsys):
    """Was: "--phase and --context are for language models ...; X is a trace", for a name or
    file that is no trace either."""
    (first_run / "broken.json").write_text("{not json")
    line = _refused(["evaluate", "--model", model, "--phase", "decode", "--context", "16",
                     "--hw", "a100"], first_run, capsys)
    assert named in line and "is a trace" not in line, line


def test_phase_and_context_with_a_trace_are_still_refused(first_run, capsys):
    line = _refused(["evaluate", "--model", "toy_hybrid", "--phase", "decode", "--context",
                     "16", "--hw", "a100"], first_run, capsys)
    assert line.endswith("toy_hybrid is a trace"), line


@pytest.mark.parametrize("model", ["llama-3-8b", "config.json"])
def test_workloads_show_tells_a_language_model_as_one(model, first_run, capsys):
    """Was: "unknown model 'llama-3-8b'; ... language models: ..., llama-3-8b, ..."."""
    config = json.loads((LLM_CONFIGS_DIR / "llama-3-8b.json").read_text())
    (first_run / "config.json").write_text(json.dumps(config))
    line = _refused(["workloads", "show", model], first_run, capsys)
    assert line.startswith(f"dse: error: {model} is a language model: ") and \
        f"dse evaluate --model {model} --phase" in line, line


def test_a_layer_count_that_would_fill_memory_is_refused(first_run, capsys):
    """num_hidden_layers 1e9 built ops until the process was killed (exit 137, no message)."""
    config = json.loads((LLM_CONFIGS_DIR / "llama-3-8b.json").read_text())
    config["num_hidden_layers"] = 10**9
    (first_run / "big.json").write_text(json.dumps(config))
    line = _refused(["evaluate", "--model", "big.json", "--phase", "decode", "--context", "16",
                     "--hw", "h100-sxm"], first_run, capsys)
    assert line == (f"dse: error: big.json: field 'num_hidden_layers' is 1,000,000,000, above "
                    f"the {MAX_LAYERS:,} layers a trace is built for (the largest public "
                    "models have about 130); give the model's own layer count")


def test_the_largest_layer_count_still_builds():
    from workloads.llm import llm_config_from_dict, llm_trace, load_llm_config

    config = json.loads((LLM_CONFIGS_DIR / "llama-3-8b.json").read_text())
    config["num_hidden_layers"] = MAX_LAYERS
    trace = llm_trace(llm_config_from_dict(config), "decode", 16)
    small = llm_trace(load_llm_config("llama-3-8b"), "decode", 16)
    per_layer = (len(small) - 3) // 32  # embedding, final norm and LM head besides the layers
    assert len(trace) == 3 + per_layer * MAX_LAYERS


def test_workloads_show_tells_a_faulty_configuration_its_fault(first_run, capsys):
    config = json.loads((LLM_CONFIGS_DIR / "llama-3-8b.json").read_text())
    del config["hidden_size"]
    (first_run / "config.json").write_text(json.dumps(config))
    line = _refused(["workloads", "show", "config.json"], first_run, capsys)
    assert line.startswith("dse: error: config.json: missing field 'hidden_size'"), line


# --- a set of files: a folder in the way of one of them -----------------------------------------

@pytest.mark.parametrize("side", ["m.json", "m.models.csv"])
def test_measure_refuses_a_folder_in_the_way_of_its_side_files_before_measuring(side, first_run,
                                                                                capsys):
    """Was: the whole budget measured, then m.parquet written and the provenance refused
    (exit 2 with a partial set of files left)."""
    (first_run / side).mkdir()
    line = _refused(["measure", "--model", "toy_hybrid", "--hw", "a100", "--out", "m.parquet"],
                    first_run, capsys)
    assert line.startswith(f"dse: error: --out m.parquet: {side}, where its ") and \
        line.endswith("is a folder; remove it or choose another --out"), line


def test_a_file_set_with_a_folder_in_the_way_writes_none_of_it(tmp_path):
    from dse.output import FileSet, OutputError, write_atomic

    (tmp_path / "b.json").mkdir()
    with pytest.raises(OutputError) as caught, FileSet():
        write_atomic(tmp_path / "a.csv", lambda handle: handle.write(b"a"))
        write_atomic(tmp_path / "b.json", lambda handle: handle.write(b"b"))
    assert str(caught.value) == (f"{tmp_path / 'b.json'}: a folder is in the way of the file; "
                                 "remove it or choose another name; written: none")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]  # no a.csv, no temporaries
