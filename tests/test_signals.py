"""Signals at a point of a run (issue 26): after SIGKILL or SIGINT, what a command writes is
complete and loadable, or absent; after SIGINT it also exits 130 with one line, no traceback,
and says what exists. (SIGINT and SIGKILL of search and sweep are covered by
tests/test_search_studies.py, tests/test_search_shared.py and tests/test_bad_inputs.py.)

The moment of the signal is drawn from a seeded generator (``SEED``), so a failure repeats.
Temporary files (names starting with a dot) may outlive a SIGKILL, which no program can clean
up after; no file under its final name may be partial.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

SEED = 26

#: command -> (argv after ``dse``, the result files as (path, loader) under ``out``)
COMMANDS = {
    "calibrate": (["calibrate", "--data", "h100-sxm", "--out", "{out}/m.json", "--name", "t"],
                  ["m.json"]),
    "bench spmv": (["bench", "spmv", "--budget", "31s", "--max-dim", "2048", "--out",
                    "{out}/bench"], ["bench/spmv.parquet", "bench/report/index.html"]),
    "measure": (["measure", "--model", "toy_hybrid", "--hw", "a100", "--budget", "20s",
                 "--out", "{out}/d.parquet"], ["d.parquet"]),
    # Both build their result in memory and write it once (dse.output.write_atomic).
    "workloads export": (["workloads", "export", "test_convnext", "--out", "{out}/t.json"],
                         ["t.json"]),
    "fusion-rules": (["fusion-rules", "--budget", "5s", "--out", "{out}/r.json"], ["r.json"]),
}
#: The commands that need torch (the export extra).
TORCH = {"measure", "workloads export", "fusion-rules"}
#: The commands whose Ctrl-C leaves not even a temporary file (docs/reference/guarantees.md).
NO_TEMPORARY = {"workloads export", "fusion-rules"}


def _load(path: Path) -> None:
    """Raise if the result file under its final name is not complete."""
    if path.name in ("t.json", "r.json"):  # a trace's ops, a rule table's pairs
        document = json.loads(path.read_text())
        assert document.get("ops") or document.get("pairs")
    elif path.suffix == ".json":
        from dse.calibrate.predictor import load_predictors

        load_predictors(path)
    elif path.suffix == ".parquet" and path.parent.name == "bench":
        assert len(pd.read_parquet(path)) > 0
    elif path.suffix == ".parquet":
        from dse.measure.dataset import load_dataset

        load_dataset(path)
    elif path.suffix == ".html":
        assert path.read_text().rstrip().endswith("</html>")


def _final_files(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("*") if p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(out).parts))


#: Seen in two of three CI runs (measure printed its exit-130 line and the process still died by
#: SIGINT, status -2): an interrupt landing after main() had decided its outcome (while the
#: line was printed: the user's second Ctrl-C, or the one _InterruptFlag re-sends for a
#: finalizer that swallowed the first) escaped main(). Reproduced without timing by
#: test_an_interrupt_while_the_last_line_is_printed_does_not_change_the_exit below, and fixed in
#: dse/cli/main.py: once the outcome is decided, interrupts are absorbed and none is re-sent.
CASES = [pytest.param(command, sig, id=f"{command}-{sig.name}")
         for command in sorted(COMMANDS) for sig in (signal.SIGKILL, signal.SIGINT)]


@pytest.mark.parametrize("command, sig", CASES)
def test_a_signal_leaves_complete_results_or_none(command, sig, tmp_path):
    if command in TORCH:
        pytest.importorskip("torch")
    argv, results = COMMANDS[command]
    out = tmp_path / "out"
    out.mkdir()
    delay = random.Random(f"{SEED}:{command}:{sig.name}").uniform(2.0, 6.0)
    process = subprocess.Popen(
        [sys.executable, "-m", "dse", *[a.replace("{out}", str(out)) for a in argv]],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"))
    time.sleep(delay)
    process.send_signal(sig)
    try:
        _, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(f"{command}: still running 120 s after {sig.name}") from None
    finished = process.returncode == 0  # it ended before the signal landed
    if sig == signal.SIGINT and not finished:
        assert process.returncode == 130, (delay, err)
        assert "Traceback" not in err, err
    for name in results:
        path = out / name
        if path.exists():
            _load(path)  # complete, never partial
    written = _final_files(out)
    if sig == signal.SIGINT and "no partial result file" in err:
        assert written == [], (err, written)
        if command in NO_TEMPORARY:
            assert os.listdir(out) == [], err
    if finished:
        assert all((out / name).exists() for name in results[:1]), (err, written)


# --- sweep's --out and --report: one set -----------------------------------------------------

SWEEP = ["sweep", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4", "--vary",
         "batch=1,2", "--out", "{out}/s.parquet", "--report", "{out}/rep"]


def _sweep(out: Path, capsys) -> tuple[int, str]:
    from tests.cli_run import run_cli

    code = run_cli([a.replace("{out}", str(out)) for a in SWEEP])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("when", ["report half-written", "report written"])
def test_an_interrupted_sweep_leaves_neither_file_nor_report(when, tmp_path, monkeypatch,
                                                            capsys):
    """Ctrl-C while the report is written (its first file there), or once it is complete but
    before the set is renamed into place: neither --out nor --report exists, nor a temporary
    file or folder, and the one line says so."""
    import reports

    real = reports.write_report

    def interrupted(folder, *args, **kwargs):
        if when == "report written":
            real(folder, *args, **kwargs)
        else:
            (Path(folder) / "designs.svg").write_text("<svg")
        raise KeyboardInterrupt

    monkeypatch.setattr(reports, "write_report", interrupted)
    code, err = _sweep(tmp_path, capsys)
    assert code == 130, err
    assert err.strip() == "dse: interrupted; no partial result file was left", err
    assert sorted(os.listdir(tmp_path)) == []


def test_a_sweep_replaces_an_old_set_whole(tmp_path, capsys):
    """Run twice into the same --out and --report: the second set replaces the first's files
    (a file of the user's in the report folder stays); nothing temporary is left."""
    code, err = _sweep(tmp_path, capsys)
    assert code == 0, err
    (tmp_path / "rep" / "mine.txt").write_text("kept")
    first = (tmp_path / "s.parquet").stat().st_mtime_ns
    code, err = _sweep(tmp_path, capsys)
    assert code == 0, err
    assert (tmp_path / "s.parquet").stat().st_mtime_ns >= first
    assert len(pd.read_parquet(tmp_path / "s.parquet")) == 4  # dense and 2:4, batch 1 and 2
    assert (tmp_path / "rep" / "mine.txt").read_text() == "kept"
    assert (tmp_path / "rep" / "index.html").read_text().rstrip().endswith("</html>")
    assert sorted(os.listdir(tmp_path)) == ["rep", "s.parquet"]


# --- an interrupt after the outcome is decided -------------------------------------------------


class _InterruptedWhileWriting:
    """stderr whose writes are hit by an interrupt: a re-sent one (``_InterruptFlag`` sends
    SIGINT again for one a finalizer swallowed) or the user's second Ctrl-C, landing just as
    the command prints its last line."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        import _thread

        self.text += text
        _thread.interrupt_main(signal.SIGINT)
        return len(text)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("ending", ["interrupt", "user error"])
def test_an_interrupt_while_the_last_line_is_printed_does_not_change_the_exit(ending,
                                                                             monkeypatch):
    """CI saw measure print its exit-130 line and still die by SIGINT (status -2): an interrupt
    that lands after the outcome is decided escaped main(). It is absorbed: the exit code is the
    one the line announced."""
    from dse.cli import main
    from dse.explore import SweepError

    def run(args):
        if ending == "interrupt":
            raise KeyboardInterrupt
        raise SweepError("--vary x: a made-up refusal")

    import dse.cli.evaluate

    monkeypatch.setattr(dse.cli.evaluate, "_cmd_evaluate", run)  # the parser is built per run
    err = _InterruptedWhileWriting()
    monkeypatch.setattr(sys, "stderr", err)
    try:
        code = main(["evaluate", "--model", "toy_hybrid", "--hw", "a100"])
    except KeyboardInterrupt:
        raise AssertionError(f"KeyboardInterrupt escaped main() after {err.text!r}") from None
    assert code == (130 if ending == "interrupt" else 2), err.text
    assert len(err.text.strip().splitlines()) == 1, err.text


#: A SIGINT sent as ``dse.cli`` starts to load: what a Ctrl-C does on a busy machine, where
#: loading dse takes seconds.
_INTERRUPT_WHILE_LOADING = (
    "import builtins, os, runpy, signal, sys\n"
    "real = builtins.__import__\n"
    "def hit(name, *args, **kwargs):\n"
    "    if name == 'cli' or name.startswith('dse.cli'):\n"
    "        builtins.__import__ = real\n"
    "        os.kill(os.getpid(), signal.SIGINT)\n"
    "    return real(name, *args, **kwargs)\n")


@pytest.mark.parametrize("entry", [
    # `python -m dse`
    "builtins.__import__ = hit\nsys.argv = ['dse', '--version']\n"
    "runpy.run_module('dse', run_name='__main__', alter_sys=True)\n",
    # the `dse` console script's entry point
    "from dse.__main__ import run\nbuiltins.__import__ = hit\n"
    "sys.argv = ['dse', '--version']\nsys.exit(run())\n",
], ids=["python -m dse", "console script"])
def test_a_ctrl_c_while_dse_loads_is_told_in_one_line(entry, tmp_path):
    """A SIGINT while dse loads used to end in an import traceback and status -2 (seen in the
    measure-SIGINT case above on a busy machine). Both ways in exit 130 with the one line."""
    done = subprocess.run([sys.executable, "-c", _INTERRUPT_WHILE_LOADING + entry],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr
    assert done.stderr == "dse: interrupted; no partial result file was left\n", done.stderr


def test_the_console_script_enters_where_a_ctrl_c_while_loading_is_caught():
    """``dse`` (the console script) runs ``dse.__main__:run``, which loads the command line
    inside its interrupt handler, as ``python -m dse`` does."""
    import tomllib

    scripts = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(
        encoding="utf-8"))["project"]["scripts"]
    assert scripts["dse"] == "dse.__main__:run"


#: A sitecustomize that sends SIGINT from inside the first string ``exec`` that runs once
#: dse's interrupt handler is in place: where CI's measure-SIGINT runs were hit (a dataclass
#: being built, its methods made by ``exec(str)``), made deterministic.
_INTERRUPT_INSIDE_A_STRING_EXEC = '''
import builtins, signal
real = builtins.exec
def exec_(source, *args, **kwargs):
    handler = signal.getsignal(signal.SIGINT)
    if isinstance(source, str) and args and getattr(handler, "__name__", "") == "_handle":
        builtins.exec = real
        source = "import signal\\nsignal.raise_signal(signal.SIGINT)\\n" + source
    return real(source, *args, **kwargs)
builtins.exec = exec_
'''


def test_a_ctrl_c_inside_a_string_exec_still_exits_130(tmp_path):
    """CI saw measure print its exit-130 line and still die by SIGINT (status -2). CPython
    (3.11, 3.12) marks a KeyboardInterrupt that leaves a string ``exec`` as unhandled even
    when it is caught later, and under ``python -m`` ends the process by SIGINT at exit in
    place of the code given to ``sys.exit``. dse forgets the mark once it has told the
    interrupt."""
    (tmp_path / "sitecustomize.py").write_text(_INTERRUPT_INSIDE_A_STRING_EXEC, encoding="utf-8")
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    done = subprocess.run(
        [sys.executable, "-m", "dse", "evaluate", "--model", "toy_hybrid", "--hw", "a100"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=path))
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert done.stderr.endswith("dse: interrupted; no partial result file was left\n"), \
        done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_a_run_started_with_sigint_ignored_keeps_it_ignored(monkeypatch):
    """A shell starts background jobs (`dse ... &` in a script) with SIGINT ignored: dse
    keeps to that rather than installing its own handler."""
    from dse.cli.main import _InterruptFlag

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        flag = _InterruptFlag()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        flag.restore()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    flag = _InterruptFlag()  # started normally: dse's handler, then the one before it again
    assert getattr(signal.getsignal(signal.SIGINT), "__name__", "") == "_handle"
    flag.restore()
    assert signal.getsignal(signal.SIGINT) == previous
