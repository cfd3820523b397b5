"""A small search's fast paths (issue 27): a study of a small space is priced in numpy, never
loading numba, with the numbers of the compiled kernels to 1e-12 and every label, count, rank
and verdict the same; its Optuna record is the same rows the plain Optuna storage writes; its
database connections are closed when it ends; and ``python -m dse`` skips the interpreter's
last garbage collections after a command that succeeded."""

from __future__ import annotations

import math
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest

import search.problem as search_problem
from search import optuna_engine as opt
from search.problem import Problem
from search.storage import open_storage, sqlite_url
from search.study import SearchRequest, new_settings, run_search
from tests.search_spaces import space_text, write_space

ROOT = Path(__file__).resolve().parents[1]


def _scored_rows(problem: Problem) -> pd.DataFrame:
    points = list(problem.space.hardware_points())
    return pd.concat([problem.evaluate_points(m, points, 0) for m in range(len(problem.traces))],
                     ignore_index=True)


def _problem(target: str | None = "1.3x_over_2:4", space: Path | None = None) -> Problem:
    return Problem(new_settings(SearchRequest(space=space, target=target)))


def test_the_default_study_is_priced_in_numpy_and_a_larger_one_is_not(monkeypatch):
    # 86 designs x 53-59 GEMMs: a few thousand op-evaluations per model.
    assert _problem().in_numpy
    monkeypatch.setattr(search_problem, "NUMPY_STUDY_OP_EVALS", 1_000)
    assert not _problem().in_numpy


def test_simulated_studies_are_not_priced_in_numpy():
    settings = new_settings(SearchRequest(target="1.3x_over_2:4", evaluator="simulate"))
    assert not Problem(settings).in_numpy


@pytest.mark.parametrize("target", ["1.3x_over_2:4", None])
def test_numpy_and_numba_give_the_same_scored_rows(monkeypatch, target):
    """Every design of the default space, both models, scored: floats to 1e-12 relative,
    every other column (labels, counts, ranks, verdicts, the fits) identical."""
    in_numpy = _problem(target)
    assert in_numpy.in_numpy  # decided once per problem
    monkeypatch.setattr(search_problem, "NUMPY_STUDY_OP_EVALS", 0)
    by_numba = _problem(target)
    assert not by_numba.in_numpy
    got, want = _scored_rows(in_numpy), _scored_rows(by_numba)
    assert list(got.columns) == list(want.columns) and (got.dtypes == want.dtypes).all()
    floats = [c for c in got.columns if got[c].dtype.kind == "f"]
    assert {"latency_s", "speedup", "memory_s", "dram_bytes"} <= set(floats)
    for column in got.columns:
        if column in floats:
            np.testing.assert_allclose(got[column].to_numpy(), want[column].to_numpy(),
                                       rtol=1e-12, atol=0, err_msg=column)
        else:
            pd.testing.assert_series_equal(got[column], want[column], check_exact=True)
    if target is not None:
        assert int(got["meets_target"].sum()) == 6  # three designs meet it on each model


def test_a_numpy_study_with_fusion_rules_and_energy(monkeypatch, tmp_path):
    """The per-op path (energy columns), a rule table's fused features and formats the A100
    cannot run, in numpy and by numba: the same to 1e-12."""
    text = space_text(head='fusion = "rules:inductor-cpu"\nscope = "all"',
                      formats='list = ["2:4", "1:8", "block16@75%", "unstructured@90%"]')
    # A V100 beside the A100: no sparse tensor cores, so its N:M designs fall back.
    path = write_space(tmp_path, text.replace('base = ["a100"]', 'base = ["a100", "v100"]')
                       .replace('"sparse_tensor.patterns" = "candidates"\n', "")
                       .replace('"sparse_tensor.nonzero_rate" = 1.0\n', ""))
    settings = new_settings(SearchRequest(space=path, objective="energy"))
    in_numpy = Problem(settings)
    assert in_numpy.in_numpy
    monkeypatch.setattr(search_problem, "NUMPY_STUDY_OP_EVALS", 0)
    by_numba = Problem(settings)
    assert not by_numba.in_numpy
    got, want = _scored_rows(in_numpy), _scored_rows(by_numba)
    assert "energy_per_inference_j" in got
    assert set(want["hw_fallback"].astype(str)) == {"", "dense", "csr"}
    for column in got.columns:
        if got[column].dtype.kind == "f":
            np.testing.assert_allclose(got[column].to_numpy(), want[column].to_numpy(),
                                       rtol=1e-12, atol=0, err_msg=column)
        else:
            pd.testing.assert_series_equal(got[column], want[column], check_exact=True)


# --- the study database -------------------------------------------------------------------

_OPTUNA_TABLES = ("studies", "study_directions", "study_user_attributes",
                  "study_system_attributes", "trials", "trial_params", "trial_values",
                  "trial_user_attributes", "trial_system_attributes",
                  "trial_intermediate_values", "trial_heartbeats", "version_info",
                  "alembic_version")
#: Wall-clock times, the only cells two writes of the same designs may differ in.
_CLOCK = {"datetime_start", "datetime_complete"}


def _rows(database: Path, table: str) -> list[tuple]:
    with sqlite3.connect(database) as conn:
        names = [r[1] for r in conn.execute(f"PRAGMA table_info('{table}')")]
        keep = [n for n in names if n not in _CLOCK]
        return conn.execute(f"SELECT {', '.join(keep)} FROM '{table}' ORDER BY 1").fetchall()


def _schema(database: Path) -> list[tuple]:
    with sqlite3.connect(database) as conn:
        return conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                            "ORDER BY name").fetchall()


def _plain_rdb_storage(storage):
    """Optuna's storage as the search opened it before: no settings of ours."""
    backend = opt._BACKENDS.get(storage)
    if backend is None:
        backend = opt._BACKENDS[storage] = optuna.storages.RDBStorage(
            storage.url, engine_kwargs={"connect_args": {"timeout": 60}})
    return backend


def test_the_optuna_record_is_what_plain_optuna_writes(tmp_path, monkeypatch):
    """The default search's study database against the same designs written through a plain
    Optuna storage: the same tables, indexes and rows (trials' clock times aside), and
    optuna.load_study reads the same trials back."""
    outcome = run_search(SearchRequest(target="1.3x_over_2:4", out=tmp_path / "new",
                                       study="s"))
    new = tmp_path / "new" / "study.db"
    plain_db = tmp_path / "plain" / "study.db"
    plain_db.parent.mkdir()
    storage = open_storage(sqlite_url(plain_db))
    monkeypatch.setattr(opt, "optuna_storage", _plain_rdb_storage)
    monkeypatch.setattr(opt, "_insert_trials", lambda *args: False)  # Study.add_trials
    with opt.quiet():
        written = opt.write_designs(outcome.problem, storage, "s", outcome.results, 10)
    opt.close(storage)
    storage.dispose()
    assert written == 10
    assert _schema(new) == _schema(plain_db)
    for table in _OPTUNA_TABLES:
        assert _rows(new, table) == _rows(plain_db, table), table
    assert len(_rows(new, "trial_user_attributes")) > 10 * 5  # the designs' figures are there
    studies = [optuna.load_study(study_name="s", storage=sqlite_url(db)) for db in (new, plain_db)]
    for a, b in zip(*(s.get_trials(deepcopy=False) for s in studies), strict=True):
        assert (a.number, a.state, a.values, a.params, a.user_attrs, a.system_attrs) == (
            b.number, b.state, b.values, b.params, b.user_attrs, b.system_attrs)
    assert studies[0].user_attrs == studies[1].user_attrs
    assert studies[0].metric_names == studies[1].metric_names


def _finished_trials() -> list[optuna.trial.FrozenTrial]:
    """Trials of every kind of value the record stores: finite and infinite values, the three
    distributions, attributes of several JSON types, with and without system attributes."""
    dists = {"format": optuna.distributions.CategoricalDistribution(["2:4", "1:8", "dense"]),
             "hw.bw": optuna.distributions.FloatDistribution(1e11, 1e13, log=True),
             "block": optuna.distributions.IntDistribution(1, 64)}
    trials = []
    for i, values in enumerate([[1.5, 99.1], [-math.inf, 97.0], [math.inf, -math.inf],
                                [0.25, 0.0]]):
        trials.append(optuna.trial.create_trial(
            params={"format": ["2:4", "1:8", "dense"][i % 3], "hw.bw": 2.0e12 * (i + 1),
                    "block": 4 * (i + 1)},
            distributions=dists, values=values,
            user_attrs={"speedup": 1.25 * i, "fits": i % 2 == 0, "line": f"rank {i}, ok",
                        "none": None, "nested": {"z": [1, 2.5, "x"], "a": {"k": i}}},
            system_attrs={"constraints": [0.5 - i, -1.0]} if i != 2 else None))
    return trials


def test_bulk_insert_writes_what_add_trials_writes(tmp_path):
    """The same finished trials into two new studies, through Study.add_trials and through
    the record's bulk insert: every table the same, row for row, clock times included."""
    databases, trials = [], _finished_trials()
    for way in ("add_trials", "bulk"):
        url = sqlite_url(tmp_path / f"{way}.db")
        storage = open_storage(url)
        backend = opt.optuna_storage(storage)
        with opt.quiet():
            handle = optuna.create_study(study_name="s", storage=backend,
                                         directions=["maximize", "maximize"])
        if way == "bulk":
            assert opt._insert_trials(backend, backend.get_study_id_from_name("s"), trials)
        else:
            handle.add_trials(trials)
        opt.close(storage)
        storage.dispose()
        databases.append(tmp_path / f"{way}.db")
    for table in _OPTUNA_TABLES:
        rows = []
        for database in databases:
            with sqlite3.connect(database) as conn:
                rows.append(conn.execute(f"SELECT * FROM '{table}' ORDER BY 1").fetchall())
        assert rows[0] == rows[1], table
    back = optuna.load_study(study_name="s", storage=sqlite_url(databases[1])).trials
    for got, want in zip(back, trials, strict=True):
        assert (got.values, got.params, got.user_attrs, got.system_attrs, got.datetime_start,
                got.datetime_complete) == (want.values, want.params, want.user_attrs,
                                           want.system_attrs, want.datetime_start,
                                           want.datetime_complete)


def test_bulk_insert_leaves_a_study_with_trials_to_optuna(tmp_path):
    storage = open_storage(sqlite_url(tmp_path / "s.db"))
    backend = opt.optuna_storage(storage)
    with opt.quiet():
        handle = optuna.create_study(study_name="s", storage=backend,
                                     directions=["maximize", "maximize"])
    handle.add_trials(_finished_trials()[:1])
    assert not opt._insert_trials(backend, backend.get_study_id_from_name("s"),
                                  _finished_trials())
    assert len(handle.trials) == 1  # nothing written
    opt.close(storage)
    storage.dispose()


def test_only_a_database_without_optuna_tables_skips_the_schema_check(tmp_path, monkeypatch):
    seen = []
    original = optuna.storages.RDBStorage

    def spy(*args, **kwargs):
        seen.append(kwargs["skip_compatibility_check"])
        return original(*args, **kwargs)

    monkeypatch.setattr(optuna.storages, "RDBStorage", spy)
    url = sqlite_url(tmp_path / "study.db")
    for _ in range(2):
        storage = open_storage(url)
        opt.optuna_storage(storage)
        opt.close(storage)
        storage.dispose()
    assert seen == [True, False]


def test_a_search_closes_its_database(tmp_path):
    """SQLite folds its write-ahead log into the database as the last connection closes: when
    the search returns, only the database is left beside the results."""
    outcome = run_search(SearchRequest(target="1.3x_over_2:4", out=tmp_path / "r", study="s"))
    assert sorted(p.name for p in outcome.out.iterdir()) == [
        "ranked.parquet", "results.parquet", "study.db", "summary.json"]


_EXIT = """
import gc, sys
sys.path.insert(0, {root!r})
import dse.cli
import dse.__main__ as entry
dse.cli.main = lambda: {code}
code = entry.run()
print(gc.get_freeze_count() > 0, code)
"""


@pytest.mark.parametrize("code", [0, 2])
def test_the_exit_skips_the_last_collections_after_a_success_only(code):
    out = subprocess.run([sys.executable, "-c", _EXIT.format(root=str(ROOT), code=code)],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(code == 0), str(code)]
