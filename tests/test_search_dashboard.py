"""Studies open in the Optuna ecosystem (issue 14, part 3).

optuna-dashboard's own server (its WSGI app, on loopback) reads an exhaustive and an Optuna
study from the study database exactly as `optuna-dashboard sqlite:///.../study.db` would, and
its JSON API must show completed trials with their parameters, the metric names, the
constraints where it reads them, and best trials that meet the target.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

import optuna
import pandas as pd
import pytest

from search.study import SearchRequest, run_search
from tests.search_spaces import space_text, write_space

optuna_dashboard = pytest.importorskip("optuna_dashboard")

ROOT = Path(__file__).resolve().parents[1]
# Two models, two DRAM bandwidths, a format that meets 1.3x_over_2:4 (1:8), one faster than it
# that is too inaccurate (block4@87.5%) and one that misses both (unstructured@90%).
SPACE = space_text(
    extra_hw='[hardware.vary]\n"dram_bandwidth_bytes_per_s" = [1.0e12, 2.0e12]\n',
    formats='list = ["2:4", "1:8", "block4@87.5%", "unstructured@90%"]',
    models='["convnext_tiny", "swin_tiny"]')
TARGET = "1.3x_over_2:4"


class _Quiet(WSGIRequestHandler):
    def log_message(self, *_args) -> None:  # no access log in the test output
        pass


@contextmanager
def dashboard(db: Path) -> Iterator[str]:
    """optuna-dashboard's server on the study database, on a free loopback port."""
    app = optuna_dashboard.wsgi(f"sqlite:///{db}")
    server = make_server("127.0.0.1", 0, app, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def get(base: str, path: str) -> dict:
    with urllib.request.urlopen(base + path, timeout=30) as response:
        assert response.status == 200
        return json.loads(response.read())


def study_detail(db: Path, name: str) -> dict:
    with dashboard(db) as base:
        studies = get(base, "/api/studies")["study_summaries"]
        (study_id,) = [s["study_id"] for s in studies if s["study_name"] == name]
        return get(base, f"/api/studies/{study_id}")


def feasible(trial: dict) -> bool:
    return all(c <= 0 for c in trial["constraints"])


def attrs(trial: dict) -> dict[str, str]:
    return {a["key"]: a["value"] for a in trial["user_attrs"]}


def params(trial: dict) -> dict[str, str]:
    return {p["name"]: p["param_external_value"] for p in trial["params"]}


def test_exhaustive_study_opens_in_optuna_dashboard_with_its_ranked_designs(tmp_path):
    space = write_space(tmp_path, SPACE)
    out = tmp_path / "ex"
    outcome = run_search(SearchRequest(space=space, target=TARGET, study="ex", out=out))
    assert outcome.engine == "exhaustive"
    detail = study_detail(out / "study.db", "ex")

    assert detail["objective_names"] == ["geomean_speedup"]
    assert detail["directions"] == ["maximize"]
    trials = detail["trials"]
    # Every candidate design of this small space: 4 formats x 2 bandwidths.
    assert len(trials) == 8
    assert all(t["state"] == "Complete" for t in trials)
    assert {params(t)["format"] for t in trials} == {"2:4", "1:8", "block4@87.5%",
                                                     "unstructured@90%"}
    assert all(len(t["constraints"]) == 2 for t in trials)
    # The best trials are the designs that meet the target on every model: 1:8, ranked first.
    best = detail["best_trials"]
    assert best and all(feasible(t) for t in best)
    assert {params(t)["format"] for t in best} == {"1:8"}
    assert attrs(best[0])["best_rank"] == "1"
    assert attrs(best[0])["meets_target"] == "True"
    # A faster design breaks the accuracy budget: infeasible, and not the best.
    faster = [t for t in trials if params(t)["format"] == "block4@87.5%"]
    assert faster and not any(feasible(t) for t in faster)
    assert float(attrs(faster[0])["speedup"]) > float(attrs(best[0])["speedup"])
    rank1 = outcome.ranked[outcome.ranked["rank"] == 1]
    assert set(rank1["format"].astype(str)) == {"1:8"}

    # The results, one row per design point, in SQL.
    url = f"sqlite:///{out / 'study.db'}"
    rows = pd.read_sql("SELECT * FROM dse_results WHERE study = 'ex' ORDER BY row", url)
    assert len(rows) == len(outcome.results)
    assert list(rows["format"]) == list(outcome.results["format"].astype(str))
    assert rows["speedup"].tolist() == pytest.approx(outcome.results["speedup"].tolist())
    points = pd.read_sql("SELECT * FROM dse_hw_points WHERE study = 'ex'", url)
    assert sorted(json.loads(k)["hw.dram_bandwidth_bytes_per_s"] for k in points["knobs"]) == [
        1.0e12, 2.0e12]

    # Resuming the complete study writes the same trials again, not twice.
    run_search(SearchRequest(resume=True, study="ex", out=out))
    loaded = optuna.load_study(study_name="ex", storage=url)
    assert len(loaded.trials) == 8


def test_optuna_study_shows_feasible_best_trials_and_named_metrics(tmp_path):
    space = write_space(tmp_path, SPACE)
    out = tmp_path / "op"
    outcome = run_search(SearchRequest(space=space, target=TARGET, study="op", engine="optuna",
                                       trials=12, out=out))
    detail = study_detail(out / "study.db", "op")

    assert detail["objective_names"] == ["geomean_speedup"]
    trials = detail["trials"]
    assert len(trials) == 12 and all(t["state"] == "Complete" for t in trials)
    assert all(len(t["constraints"]) == 2 for t in trials)
    infeasible = [t for t in trials if not feasible(t)]
    assert infeasible, "the space has designs that miss the target"
    assert all(t["values"] == ["-inf"] for t in infeasible)
    best = detail["best_trials"]
    assert best and all(feasible(t) for t in best)
    top = max(float(attrs(t)["speedup"]) for t in trials if feasible(t))
    assert float(attrs(best[0])["speedup"]) == pytest.approx(top)
    assert best[0]["values"][0] == pytest.approx(top, rel=1e-5)
    assert params(best[0])["format"] == str(outcome.ranked.iloc[0]["format"])
    # The infeasible designs keep their own figures as user attributes.
    assert all(float(attrs(t)["speedup"]) > 0 for t in infeasible)
    rows = pd.read_sql("SELECT count(*) AS n FROM dse_results WHERE study = 'op'",
                       f"sqlite:///{out / 'study.db'}")
    assert int(rows["n"].iloc[0]) == len(outcome.results)


def test_exhaustive_pareto_study_shows_its_front(tmp_path):
    space = write_space(tmp_path, SPACE)
    out = tmp_path / "pa"
    run_search(SearchRequest(space=space, target=TARGET, objective="pareto", study="pa",
                             out=out))
    detail = study_detail(out / "study.db", "pa")
    assert detail["objective_names"] == ["geomean_speedup", "mean_accuracy"]
    assert detail["directions"] == ["maximize", "maximize"]
    best = detail["best_trials"]
    assert best and all(feasible(t) for t in best)


def test_importing_search_leaves_optunas_log_level_alone():
    code = ("import logging, optuna\n"
            "optuna.logging.set_verbosity(logging.INFO)\n"
            "import search.optuna_engine, search.study, dse.cli.search\n"
            "assert optuna.logging.get_verbosity() == logging.INFO\n"
            "from search.optuna_engine import quiet\n"
            "with quiet():\n"
            "    assert optuna.logging.get_verbosity() == logging.WARNING\n"
            "assert optuna.logging.get_verbosity() == logging.INFO\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for path in (ROOT / "search").glob("*.py"):
        assert "._trial_id" not in path.read_text(), path  # Optuna's private attribute
