"""Studies: storage, resume after SIGKILL, shared PostgreSQL studies with several workers, and
the command line's handling of bad input. Real SQLite files, a real PostgreSQL server (started
by the postgres_url fixture), real worker processes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest

from search.storage import open_storage
from search.study import SearchRequest, run_search
from tests.search_spaces import space_text
from tests.search_spaces import write_space as write_text

REPO = Path(__file__).resolve().parents[1]

# Many hardware points, so that one design point per chunk makes hundreds of chunks.
MANY_POINTS = ('[hardware.vary]\n"dram_bandwidth_bytes_per_s" = { min = 0.5e12, max = 4.0e12, '
               'steps = %d }')
NM_FORMATS = 'list = ["2:4", "1:4", "2:8", "1:8", "2:16", "4:32"]'


def write_space(folder: Path, models='"convnext_tiny"', formats=NM_FORMATS, vary="") -> Path:
    return write_text(folder, space_text(vary, formats, f"[{models}]"))


def dse(*argv: str, cwd: Path, env: dict | None = None, timeout: float = 300):
    return subprocess.run([sys.executable, "-m", "dse", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=env)


def start(*argv: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dse", *argv], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(query: str, db: Path, at_least: int, proc: subprocess.Popen,
             timeout: float = 120) -> int:
    """Poll the study database until ``query`` counts ``at_least`` rows."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"search ended before it could be killed: {proc.stderr.read()}")
        if db.exists():
            try:
                with sqlite3.connect(db, timeout=5) as conn:
                    n = conn.execute(query).fetchone()[0]
            except sqlite3.OperationalError:  # tables not created yet
                n = 0
            if n >= at_least:
                return n
        time.sleep(0.02)
    pytest.fail("search made no progress")


def result_key(frame: pd.DataFrame) -> pd.DataFrame:
    columns = ["model", "hw_point", "format", "batch", "speedup", "accuracy", "verdict", "rank"]
    out = frame[columns].astype({"model": str, "format": str, "verdict": str})
    return out.sort_values(["model", "hw_point", "format"]).reset_index(drop=True)


# --- crash safety -----------------------------------------------------------------------------

def test_exhaustive_search_killed_and_resumed_loses_and_repeats_nothing(tmp_path):
    space = write_space(tmp_path, models='"convnext_tiny", "swin_tiny"', vary=MANY_POINTS % 400)
    out = tmp_path / "killed"
    proc = start("search", "--space", str(space), "--target", "1.3x_over_2:4", "--study", "k",
                 "--out", str(out), "--chunk-points", "1", cwd=tmp_path)
    db = out / "study.db"
    wait_for("SELECT count(*) FROM dse_chunks WHERE state = 'done'", db, 40, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with sqlite3.connect(db) as conn:
        before = conn.execute("SELECT idx, worker, finished_at FROM dse_chunks "
                              "WHERE state = 'done'").fetchall()
        total = conn.execute("SELECT count(*) FROM dse_chunks").fetchone()[0]
    assert 40 <= len(before) < total == 800  # killed mid-run
    assert not (out / "results.parquet").exists()  # nothing half-written

    resumed = dse("search", "--resume", "--study", "k", "--out", str(out), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    with sqlite3.connect(db) as conn:
        after = conn.execute("SELECT idx, worker, finished_at FROM dse_chunks "
                             "WHERE state = 'done'").fetchall()
    assert set(before) <= set(after)  # completed chunks kept as they were, not redone
    assert len(after) == total
    results = pd.read_parquet(out / "results.parquet")
    keys = results[["model", "hw_point", "format", "batch"]].astype(str)
    assert not keys.duplicated().any()
    assert len(results) == 2 * 400 * (6 + 1)
    fresh = run_search(SearchRequest(space=space, target="1.3x_over_2:4", study="fresh",
                                     out=tmp_path / "fresh"))
    pd.testing.assert_frame_equal(result_key(results), result_key(fresh.results))


def _trials(db: Path) -> dict[int, tuple]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("""
            SELECT t.number, t.state, v.value,
                   (SELECT group_concat(p.param_name || '=' || p.param_value, ';')
                    FROM trial_params p WHERE p.trial_id = t.trial_id)
            FROM trials t LEFT JOIN trial_values v ON v.trial_id = t.trial_id
            ORDER BY t.number""").fetchall()
    return {n: (state, value, params) for n, state, value, params in rows}


def test_optuna_search_killed_and_resumed_loses_and_repeats_nothing(tmp_path):
    space = write_space(tmp_path, formats='nm = { m = [2, 4, 8, 16, 32], sparsity = "table" }',
                        vary='[hardware.vary]\n"dram_bandwidth_bytes_per_s" = '
                             '{ min = 0.5e12, max = 4.0e12, log = true }')
    out = tmp_path / "killed"
    budget = 120
    proc = start("search", "--space", str(space), "--target", "1.3x_over_2:4", "--study", "k",
                 "--out", str(out), "--trials", str(budget), cwd=tmp_path)
    db = out / "study.db"
    wait_for("SELECT count(*) FROM trials WHERE state = 'COMPLETE'", db, 15, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = _trials(db)
    complete_before = {n: t for n, t in before.items() if t[0] == "COMPLETE"}
    running_before = {n: t for n, t in before.items() if t[0] == "RUNNING"}
    assert 15 <= len(complete_before) < budget

    resumed = dse("search", "--resume", "--study", "k", "--out", str(out), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    after = _trials(db)
    for number, trial in complete_before.items():
        assert after[number] == trial  # same state, value and parameters
    complete = [n for n, t in after.items() if t[0] == "COMPLETE"]
    assert len(complete) == budget  # the budget, exactly: nothing lost, nothing repeated
    failed = {n for n, t in after.items() if t[0] == "FAIL"}
    assert failed == set(running_before)  # only the trials the kill interrupted
    study = optuna.load_study(study_name="k", storage=f"sqlite:///{db}")
    for trial in study.get_trials(states=(optuna.trial.TrialState.FAIL,)):
        assert trial.user_attrs["interrupted"] is True
        # Its design, when the kill came after it was sampled (not during the sampling), was
        # queued again and completed by a later trial.
        later = [t.params for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
                 if t.number > trial.number and "fixed_params" in t.system_attrs]
        # (A kill during the sampling can leave some parameters chosen and others not.)
        if set(trial.params) == {"format", "hw.dram_bandwidth_bytes_per_s"}:
            assert trial.params in later, (trial.params, later)
    results = pd.read_parquet(out / "results.parquet")
    assert results["trials"].sum() == budget


def test_resume_keeps_the_stored_settings(tmp_path):
    space = write_space(tmp_path)
    run_search(SearchRequest(space=space, target="1.3x_over_2:4", study="r",
                             out=tmp_path / "r"))
    again = dse("search", "--resume", "--study", "r", "--out", str(tmp_path / "r"),
                "--target", "1.5x_over_2:4", cwd=tmp_path)
    assert again.returncode == 2
    assert "1.3x_over_2:4" in again.stderr and "--resume keeps" in again.stderr
    twice = dse("search", "--space", str(space), "--study", "r", "--out", str(tmp_path / "r"),
                cwd=tmp_path)
    assert twice.returncode == 2 and "already exists" in twice.stderr
    done = dse("search", "--resume", "--study", "r", "--out", str(tmp_path / "r"),
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr  # a finished study resumes to its results


# --- shared studies on PostgreSQL -------------------------------------------------------------

def test_four_workers_share_an_exhaustive_study_on_postgresql(tmp_path, postgres_url):
    space = write_space(tmp_path, vary=MANY_POINTS % 120)
    shared = dse("search", "--space", str(space), "--target", "1.3x_over_2:4", "--study", "ex4",
                 "--storage", postgres_url, "--workers", "4", "--chunk-points", "7",
                 "--out", str(tmp_path / "shared"), cwd=tmp_path)
    assert shared.returncode == 0, shared.stderr
    password = postgres_url.split(":")[2].split("@")[0]
    assert password not in shared.stdout + shared.stderr
    storage = open_storage(postgres_url)
    chunks = pd.read_sql("SELECT idx, state, worker FROM dse_chunks WHERE study = 'ex4'",
                         storage.engine)
    storage.dispose()
    assert (chunks["state"] == "done").all() and chunks["idx"].is_unique
    assert len(chunks) == 120 and chunks["worker"].nunique() > 1  # the work was shared
    single = run_search(SearchRequest(space=space, target="1.3x_over_2:4", study="ex1",
                                      out=tmp_path / "single"))
    results = pd.read_parquet(tmp_path / "shared" / "results.parquet")
    pd.testing.assert_frame_equal(result_key(results), result_key(single.results))


def test_four_optuna_workers_record_every_trial_once_on_postgresql(tmp_path, postgres_url):
    space = write_space(tmp_path)  # six N:M candidates on one A100
    budget = 40
    shared = dse("search", "--space", str(space), "--target", "1.3x_over_2:4", "--study", "op4",
                 "--engine", "optuna", "--trials", str(budget), "--seed", "7",
                 "--storage", postgres_url, "--workers", "4", "--out", str(tmp_path / "shared"),
                 cwd=tmp_path)
    assert shared.returncode == 0, shared.stderr
    study = optuna.load_study(study_name="op4", storage=postgres_url)
    trials = study.get_trials()
    numbers = [t.number for t in trials]
    assert sorted(numbers) == list(range(budget))  # each trial once, none beyond the budget
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert all(len(t.values) == 1 for t in trials)
    storage = open_storage(postgres_url)
    per_trial = pd.read_sql("SELECT trial_id, count(*) AS n FROM trial_values GROUP BY trial_id",
                            storage.engine)
    storage.dispose()
    assert (per_trial["n"] == 1).all()

    single = run_search(SearchRequest(space=space, target="1.3x_over_2:4", engine="optuna",
                                      trials=budget, seed=7, study="op1",
                                      out=tmp_path / "single"))
    shared_best = pd.read_parquet(tmp_path / "shared" / "ranked.parquet")
    best = [(str(r.model), str(r.format), r.speedup) for r in
            shared_best[shared_best["rank"] == 1].itertuples()]
    expected = [(str(r.model), str(r.format), r.speedup) for r in
                single.ranked[single.ranked["rank"] == 1].itertuples()]
    assert best == expected


# --- the command line -------------------------------------------------------------------------

def _one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.mark.parametrize("target", ["1.3x_over_9:4", "fast", "1.3x_over_block4"])
def test_malformed_targets(tmp_path, target):
    line = _one_line_error(dse("search", "--target", target, "--out", str(tmp_path / "o"),
                               cwd=tmp_path))
    assert target in line
    assert not (tmp_path / "o").exists()


def test_unknown_model_in_the_space(tmp_path):
    space = write_space(tmp_path, models='"convnext_tiny", "resnet5O"')
    line = _one_line_error(dse("search", "--space", str(space), "--out", str(tmp_path / "o"),
                               cwd=tmp_path))
    assert "resnet5O" in line and "space.toml" in line
    assert not (tmp_path / "o").exists()


def test_candidate_with_no_accuracy_is_named(tmp_path):
    space = write_space(tmp_path, formats='list = ["2:4", "1:32"]')
    line = _one_line_error(dse("search", "--space", str(space), "--target", "1.3x_over_2:4",
                               "--out", str(tmp_path / "o"), cwd=tmp_path))
    assert "1:32" in line and "no accuracy" in line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("url, needle", [
    ("postgresql://bob:s3cret-pw@127.0.0.1:1/studies", "cannot connect"),
    ("postgresql://bob:s3cret-pw@no-such-host.invalid/studies", "cannot connect"),
    ("mysql://bob:s3cret-pw@localhost/studies", "unsupported database"),
    ("sqlite:////no/such/folder/study.db", "does not exist"),
    ("not a url s3cret-pw", "not a database URL"),
])
def test_unusable_storage_is_reported_without_its_password(tmp_path, url, needle):
    line = _one_line_error(dse("search", "--storage", url, "--out", str(tmp_path / "o"),
                               cwd=tmp_path))
    assert needle in line and "s3cret-pw" not in line
    assert not (tmp_path / "o").exists()


def test_other_bad_search_arguments(tmp_path):
    line = _one_line_error(dse("search", "--resume", cwd=tmp_path))
    assert "--resume needs --study" in line
    line = _one_line_error(dse("search", "--resume", "--study", "nope", cwd=tmp_path))
    assert "no study database" in line
    env = {k: v for k, v in os.environ.items() if k != "DSE_SEARCH_STORAGE"}
    line = _one_line_error(dse("search", "worker", "--study", "x", cwd=tmp_path, env=env))
    assert "--storage" in line
    line = _one_line_error(dse("search", "--minimize", "dram_bandwidth_bytes_per_s",
                               cwd=tmp_path))
    assert "does not vary it" in line
    line = _one_line_error(dse("search", "--space", str(tmp_path / "none.toml"), cwd=tmp_path))
    assert "none.toml" in line


def test_search_help_shows_the_default_accuracy_drop(tmp_path):
    result = dse("search", "--help", cwd=tmp_path)
    assert result.returncode == 0
    assert "--max-acc-drop" in result.stdout and "default 1" in result.stdout
    worker = dse("search", "worker", "--help", cwd=tmp_path)
    assert worker.returncode == 0 and "--study" in worker.stdout


def test_default_command_prints_the_ranked_tables(tmp_path):
    result = dse("search", "--target", "1.3x_over_2:4", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "convnext_tiny, batch 1" in result.stdout
    assert "swin_tiny_patch4_window7_224, batch 1" in result.stdout
    assert "meet the target" in result.stdout and "miss it" in result.stdout
    (folder,) = (tmp_path / "dse-search").iterdir()
    assert f"study {folder.name}" in result.stdout
    assert {p.name for p in folder.iterdir()} == {"study.db", "results.parquet",
                                                 "ranked.parquet", "summary.json"}
    ranked = pd.read_parquet(folder / "ranked.parquet")
    assert np.all(ranked["speedup_over_baseline"] >= 1.3 - 1e-12)


def test_local_workers_share_a_sqlite_study(tmp_path):
    space = write_space(tmp_path, vary=MANY_POINTS % 30)
    shared = dse("search", "--space", str(space), "--target", "1.3x_over_2:4", "--study", "w2",
                 "--workers", "2", "--chunk-points", "7", "--out", str(tmp_path / "w2"),
                 cwd=tmp_path)
    assert shared.returncode == 0, shared.stderr
    assert sorted(p.name for p in (tmp_path / "w2").iterdir()) == [
        "ranked.parquet", "results.parquet", "study.db", "summary.json"]  # worker logs removed
    single = run_search(SearchRequest(space=space, target="1.3x_over_2:4", study="w1",
                                      out=tmp_path / "w1"))
    results = pd.read_parquet(tmp_path / "w2" / "results.parquet")
    pd.testing.assert_frame_equal(result_key(results), result_key(single.results))


def test_a_default_study_name_says_the_question_not_the_space_file():
    """The built-in space is named nm-over-2-4; a Pareto study of it asks no such question
    (issue 25). More cases in tests/test_newcomer_round3.py."""
    from search.study import SearchRequest, _study_name

    built_in = "convnext_tiny+swin_tiny-a100-"
    assert _study_name(SearchRequest(objective="pareto")).startswith(f"pareto-{built_in}")
    assert _study_name(SearchRequest(objective="energy")).startswith(f"energy-{built_in}")
    assert _study_name(SearchRequest()).startswith(f"speedup-{built_in}")
    assert "nm-over" not in _study_name(SearchRequest(objective="pareto"))
