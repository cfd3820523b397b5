"""Shared studies finish complete or say they did not (issue 13).

A real PostgreSQL server, real `dse search` and `dse search worker` processes, killed with
SIGKILL while they hold work. Workers are frozen (SIGSTOP) and looked at before they are killed,
so that "killed while holding a chunk or trial" is certain, not a matter of timing. A worker on
another machine that vanished is played by this test: it takes a lease under a foreign worker
name and never renews it.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pandas as pd
import pytest
import sqlalchemy as sa

from search.errors import StorageError
from search.storage import open_storage, process_gone
from search.study import SearchRequest, resume_command, run_search
from tests.test_search_studies import MANY_POINTS, dse, start, write_space

LEASE = "2"  # seconds: how long the main process's and workers' leases last in these tests
GONE = "elsewhere.invalid:4242"  # a worker on another machine that vanished
POINTS = 150  # hardware points: one chunk each with --chunk-points 1


@pytest.fixture(scope="module")
def pg(postgres_url):
    engine = sa.create_engine(postgres_url)
    yield engine
    engine.dispose()


def count(engine: sa.Engine, query: str, **params) -> int:
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(query), params).scalar() or 0)
    except sa.exc.ProgrammingError:  # Optuna's tables are not there yet
        return 0


def wait_until(check, proc: subprocess.Popen | None = None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"process ended too early: {proc.stderr.read()}")
        time.sleep(0.02)
    pytest.fail("the search made no progress")


def stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "tT"


def freeze_when(proc: subprocess.Popen, check, timeout: float = 120) -> None:
    """SIGSTOP ``proc`` at a moment when ``check()`` holds (it is left stopped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"process ended before it could be frozen: {proc.stderr.read()}")
        os.kill(proc.pid, signal.SIGSTOP)
        while not stopped(proc.pid):
            time.sleep(0.001)
        if check():
            return
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.01)
    pytest.fail("never caught the process in the wanted state")


def holds(engine: sa.Engine, study: str, pid: int, unit: str) -> bool:
    worker = f"{socket.gethostname()}:{pid}"
    if unit == "chunk":
        return count(engine, "SELECT count(*) FROM dse_chunks WHERE study = :s AND "
                     "state = 'running' AND worker = :w", s=study, w=worker) > 0
    return count(engine, "SELECT count(*) FROM dse_leases l JOIN trials t ON t.number = l.item "
                 "JOIN studies s ON s.study_id = t.study_id AND s.study_name = l.study "
                 "WHERE l.study = :s AND l.unit = 'trial' AND l.worker = :w "
                 "AND t.state = 'RUNNING'", s=study, w=worker) > 0


def no_advisory_lock(engine: sa.Engine) -> bool:
    return count(engine, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                 "AND granted") == 0


def between_transactions(engine: sa.Engine) -> bool:
    """No advisory lock held and no other connection inside a transaction: a process frozen
    now holds no lock (row or advisory) that the test's own queries would wait on forever."""
    return no_advisory_lock(engine) and count(
        engine, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND state IN ('active', 'idle in transaction', "
                "'idle in transaction (aborted)')") == 0


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def finish(proc: subprocess.Popen, timeout: float = 180) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def worker(url: str, study: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dse", "search", "worker", "--study", study,
         "--lease-seconds", LEASE], cwd=cwd, env=dict(os.environ, DSE_SEARCH_STORAGE=url),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def complete_exhaustive(results: pd.DataFrame, points: int) -> None:
    assert len(results) == points * 7  # six formats and dense per hardware point
    keys = results[["model", "hw_point", "format", "batch"]].astype(str)
    assert not keys.duplicated().any()
    assert sorted(results["hw_point"].unique()) == list(range(points))


# --- the main process with external workers, one killed mid-run ---------------------------------

def test_exhaustive_study_with_a_killed_and_a_vanished_worker_completes(tmp_path, postgres_url,
                                                                        pg):
    space = write_space(tmp_path, vary=MANY_POINTS % POINTS)
    out = tmp_path / "out"
    main = start("search", "--space", str(space), "--target", "1.3x_over_2:4", "--study", "xk",
                 "--storage", postgres_url, "--chunk-points", "1", "--lease-seconds", LEASE,
                 "--out", str(out), cwd=tmp_path)
    wait_until(lambda: count(pg, "SELECT count(*) FROM dse_chunks WHERE study = 'xk'"), main)
    assert count(pg, "SELECT count(*) FROM dse_chunks WHERE study = 'xk'") == POINTS  # at once
    # Let the others start before the main one is done (frozen between transactions: frozen
    # inside one, its row locks would make every other worker, and the test, wait forever).
    freeze_when(main, lambda: between_transactions(pg))
    storage = open_storage(postgres_url)
    taken = storage.claim_chunk("xk", GONE, lease_s=1.0)  # ... and never finished
    assert taken is not None
    helper = worker(postgres_url, "xk", tmp_path)
    freeze_when(helper, lambda: holds(pg, "xk", helper.pid, "chunk"))
    kill(helper)  # killed while it held a chunk
    os.kill(main.pid, signal.SIGCONT)

    code, _, err = finish(main)
    assert code == 0, err
    took = "\n".join(line for line in err.splitlines() if "took back" in line)
    assert f"1 by {GONE}" in took, err  # its lease ran out
    assert f"1 by {socket.gethostname()}:{helper.pid}" in took, err  # its process ended
    assert count(pg, "SELECT count(*) FROM dse_chunks WHERE study = 'xk' AND state = 'done'"
                 ) == POINTS
    complete_exhaustive(pd.read_parquet(out / "results.parquet"), POINTS)
    storage.dispose()


def test_optuna_study_with_a_killed_and_a_vanished_worker_keeps_its_exact_budget(
        tmp_path, postgres_url, pg):
    space = write_space(tmp_path)
    out = tmp_path / "out"
    budget = 40
    main = start("search", "--space", str(space), "--target", "1.3x_over_2:4", "--study", "ok",
                 "--engine", "optuna", "--trials", str(budget), "--storage", postgres_url,
                 "--lease-seconds", LEASE, "--out", str(out), cwd=tmp_path)
    wait_until(lambda: count(pg, "SELECT count(*) FROM studies WHERE study_name = 'ok'"), main)
    freeze_when(main, lambda: between_transactions(pg))  # not inside a transaction or lock
    storage = open_storage(postgres_url)
    study = optuna.load_study(study_name="ok", storage=postgres_url)
    with storage.lock("ok"):  # a worker elsewhere asks for a trial, then vanishes
        lost = study.ask()
        storage.take_lease("ok", "trial", lost.number, GONE, 1.0)
    helper = worker(postgres_url, "ok", tmp_path)
    freeze_when(helper, lambda: holds(pg, "ok", helper.pid, "trial"))
    kill(helper)  # killed while it held a trial
    os.kill(main.pid, signal.SIGCONT)

    code, _, err = finish(main)
    assert code == 0, err
    took = "\n".join(line for line in err.splitlines() if "took back" in line)
    assert f"1 by {GONE}" in took and f"1 by {socket.gethostname()}:{helper.pid}" in took, err
    trials = optuna.load_study(study_name="ok", storage=postgres_url).get_trials()
    states = [t.state for t in trials]
    assert states.count(optuna.trial.TrialState.COMPLETE) == budget  # exactly the budget
    assert optuna.trial.TrialState.RUNNING not in states
    failed = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
    assert len(failed) == 2 and all(t.user_attrs["interrupted"] for t in failed)
    assert lost.number in {t.number for t in failed}
    results = pd.read_parquet(out / "results.parquet")
    assert results["trials"].sum() == budget
    storage.dispose()


# --- a study that cannot finish says so, and the command it prints works ------------------------

def test_dead_local_workers_fail_the_search_and_the_printed_resume_command_works(
        tmp_path, postgres_url, pg):
    space = write_space(tmp_path, vary=MANY_POINTS % POINTS)
    out = tmp_path / "out"
    main = start("search", "--space", str(space), "--target", "1.3x_over_2:4", "--study", "rc",
                 "--storage", postgres_url, "--workers", "2", "--chunk-points", "1",
                 "--out", str(out), cwd=tmp_path)
    wait_until(lambda: count(pg, "SELECT count(*) FROM dse_chunks WHERE study = 'rc' "
                                 "AND state = 'done'") >= 5, main)
    children = Path(f"/proc/{main.pid}/task/{main.pid}/children").read_text().split()
    assert len(children) == 2
    for pid in children:
        os.kill(int(pid), signal.SIGKILL)
    code, stdout, err = finish(main)
    assert code == 2 and "Traceback" not in err, err
    line = err.strip().splitlines()[-1]  # after the progress lines, one line says why
    assert line.startswith("dse: error: ") and err.count("error") == 1, err
    assert "worker 0 exited with code -9" in line or "worker 1 exited with code -9" in line
    assert re.search(rf"\d+ of {POINTS} chunks are not stored", line), line
    password = postgres_url.split(":")[2].split("@")[0]
    assert password not in stdout + err
    assert not (out / "results.parquet").exists() and not (out / "summary.json").exists()

    command = re.search(r"`([^`]+)`", line).group(1)
    assert "--out" in command and '--storage "$DSE_SEARCH_STORAGE"' in command
    assert "DSE_SEARCH_STORAGE set to postgresql://dse:***@" in line
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, DSE_SEARCH_STORAGE=postgres_url,
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    again = subprocess.run(["bash", "-c", command], cwd=elsewhere, env=env, capture_output=True,
                           text=True, timeout=180)
    assert again.returncode == 0, again.stderr
    complete_exhaustive(pd.read_parquet(out / "results.parquet"), POINTS)
    # The killed workers' (empty) logs are gone with the successful run.
    assert sorted(p.name for p in out.iterdir()) == ["ranked.parquet", "results.parquet",
                                                    "summary.json"]


def test_resume_command_hides_the_password():
    line = resume_command("s", Path("/tmp/o u t"), "postgresql://bob:pw-123@db:5432/studies")
    assert "pw-123" not in line
    assert line.startswith("`dse search --resume --study s --out '/tmp/o u t' "
                           '--storage "$DSE_SEARCH_STORAGE"`')
    assert line.endswith("with DSE_SEARCH_STORAGE set to postgresql://bob:***@db:5432/studies")
    plain = resume_command("s", None, "sqlite:////data/study.db")
    assert plain == "`dse search --resume --study s --storage sqlite:////data/study.db`"


# --- leases ---------------------------------------------------------------------------------------

def test_only_expired_or_vanished_holders_lose_their_chunks(tmp_path, postgres_url):
    storage = open_storage(postgres_url)
    storage.create_study("leases", {}, chunks=4)
    with subprocess.Popen(["true"]) as proc:
        proc.wait()
        dead = f"{socket.gethostname()}:{proc.pid}"
    assert process_gone(dead) and not process_gone(f"{socket.gethostname()}:{os.getpid()}")
    assert storage.claim_chunk("leases", "far.invalid:1", lease_s=3600) == 0  # live, remote
    assert storage.claim_chunk("leases", "far.invalid:2", lease_s=1e-6) == 1  # expired
    assert storage.claim_chunk("leases", dead, lease_s=3600) == 2  # vanished, this machine
    assert storage.reclaim_chunks("leases") == {"far.invalid:2": 1, dead: 1}
    assert storage.chunk_holders("leases") == {"far.invalid:1": 1}
    # A worker whose lease ran out still stores its chunk if nobody did; the first one stays.
    assert storage.claim_chunk("leases", "far.invalid:3", lease_s=3600) == 1
    assert storage.finish_chunk("leases", 1, "far.invalid:2", b"late")
    assert not storage.finish_chunk("leases", 1, "far.invalid:3", b"again")
    storage.renew("far.invalid:1", 3600)
    assert storage.reclaim_chunks("leases") == {}
    storage.dispose()


# --- creation interrupted, leftovers, bad inputs ----------------------------------------------

def test_resume_rebuilds_what_an_interrupted_creation_left_out(tmp_path):
    space = write_space(tmp_path, vary=MANY_POINTS % 5)
    out = tmp_path / "ex"
    run_search(SearchRequest(space=space, target="1.3x_over_2:4", study="ex", out=out,
                             chunk_points=7))
    storage = open_storage(f"sqlite:///{out / 'study.db'}")
    with storage.engine.begin() as conn:  # as if killed after the settings, before the chunks
        conn.execute(sa.text("DELETE FROM dse_chunks"))
    resumed = run_search(SearchRequest(resume=True, study="ex", out=out))
    complete_exhaustive(resumed.results, 5)

    out = tmp_path / "op"
    run_search(SearchRequest(space=space, target="1.3x_over_2:4", engine="optuna", trials=6,
                             study="op", out=out))
    optuna.delete_study(study_name="op", storage=f"sqlite:///{out / 'study.db'}")
    resumed = run_search(SearchRequest(resume=True, study="op", out=out))
    assert resumed.results["trials"].sum() == 6
    storage.dispose()


def test_the_next_successful_run_removes_leftovers_of_killed_ones(tmp_path):
    space = write_space(tmp_path)
    out = tmp_path / "o"
    run_search(SearchRequest(space=space, target="1.3x_over_2:4", study="l", out=out))
    leftovers = [out / ".results.parquet.k2j3.tmp", out / ".summary.json.x1.tmp",
                 out / "worker-3.log"]
    kept = out / "worker-1.log"
    for path in leftovers:
        path.write_bytes(b"partial" if path.suffix == ".tmp" else b"")
    kept.write_text("worker 1: error: out of memory\n")
    past = time.time() - 60
    for path in [*leftovers, kept]:
        os.utime(path, (past, past))
    run_search(SearchRequest(resume=True, study="l", out=out))
    assert not any(p.exists() for p in leftovers)
    assert kept.exists()  # it says why a worker failed


@pytest.mark.parametrize("argv, needle", [
    (["search", "--resume", "--study", "nope", "--storage", "{url}", "--out", "{out}"],
     "no study 'nope'"),
    (["search", "worker", "--study", "nope", "--storage", "{url}"], "no study 'nope'"),
    (["search", "--resume", "--study", "x", "--storage", "", "--out", "{out}"],
     "--storage is empty"),
    (["search", "--lease-seconds", "0", "--out", "{out}"], "'0'"),
    (["search", "worker", "--study", "x", "--storage", "{url}", "--lease-seconds", "soon"],
     "'soon'"),
])
def test_bad_inputs_are_one_line_and_leave_nothing(tmp_path, postgres_url, argv, needle):
    out = tmp_path / "o"
    result = dse(*[a.format(url=postgres_url, out=out) for a in argv], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert needle in line and "Traceback" not in result.stderr
    assert postgres_url.split(":")[2].split("@")[0] not in line
    assert not out.exists()


def test_an_unusable_storage_url_is_named(tmp_path):
    with pytest.raises(StorageError, match="--storage is empty"):
        open_storage("  ")


def test_postgres_without_its_extra_names_the_extra(monkeypatch):
    from search.storage import StorageError, open_storage

    for name in ("psycopg", "psycopg2"):
        monkeypatch.setitem(sys.modules, name, None)  # as if the extra were not installed
    with pytest.raises(StorageError, match=r"sparsity-dse\[postgres\]") as caught:
        open_storage("postgresql://user:secret@127.0.0.1:1/db")
    assert "secret" not in str(caught.value)
