"""The first compile of the kernels is announced, later runs are silent about it."""

from __future__ import annotations

import sys

from dse.cli import first_run


def test_note_until_the_kernels_are_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    note = first_run.note_first_compile()
    assert note is not None and "compiling" in note and str(tmp_path) in note
    folder = tmp_path / first_run._cache_folder().rsplit("/", 1)[-1]
    folder.mkdir()
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    (folder / f"kernels._design_totals_serial-121.{tag}.nbi").write_bytes(b"")
    assert first_run.kernels_cached() and first_run.note_first_compile() is None


def test_the_first_run_says_how_long_it_took(tmp_path):
    """In a fresh cache folder a command compiles the kernels: it says so before, and after
    it the seconds it measured; the second run says neither."""
    import os
    import subprocess

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    argv = [sys.executable, "-m", "dse", "evaluate", "--model", "toy_hybrid", "--hw", "a100",
            "--format", "2:4"]
    first = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    lines = first.stderr.splitlines()
    assert lines[0].startswith("dse: compiling the evaluator's kernels")
    seconds = float(lines[-1].split("took ")[1].split(" s,")[0])
    assert lines[-1].startswith("dse: this first run took ") and seconds > 0
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "compil" not in again.stderr and "took" not in again.stderr
