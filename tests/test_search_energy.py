"""Energy objectives and the DRAM-capacity check in the search (issue 17), by value."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.cli.main import main
from dse.roofline import evaluate_energy, evaluate_memory
from search.problem import Problem
from search.study import SearchRequest, new_settings, run_search
from search.target import Objective, make_objective
from tests.search_spaces import space_text, write_space

FORMATS = 'list = ["2:4", "1:8", "block4@87.5%", "unstructured@87.5%"]'


@pytest.mark.parametrize(("objective", "column"), [("energy", "energy_per_inference_j"),
                                                   ("edp", "edp_js")])
def test_energy_ranking_equals_sorting_evaluate_energy(tmp_path, objective, column):
    path = write_space(tmp_path, space_text(formats=FORMATS))
    outcome = run_search(SearchRequest(space=path, objective=objective, out=tmp_path / "o",
                                       study=objective))
    ranked = outcome.ranked
    assert list(ranked["rank"]) == [1, 2, 3, 4]
    problem = outcome.problem
    energy = evaluate_energy("convnext_tiny", problem.builder.build(0, ()),
                             ["2:4", "1:8", "block4@87.5%", "unstructured@87.5%"], [1])
    energy = energy[energy["format"] != "dense"].sort_values(column, kind="stable")
    assert list(ranked["format"].astype(str)) == list(energy["format"])
    np.testing.assert_allclose(ranked[column].to_numpy(), energy[column].to_numpy(), rtol=1e-12)


def test_minimize_takes_energy_columns(tmp_path):
    assert make_objective(None, "avg_power_w").column == "avg_power_w"
    assert make_objective(None, "hw.dram_bandwidth_bytes_per_s").column == \
        "hw.dram_bandwidth_bytes_per_s"
    assert make_objective("energy", None) == Objective("energy")
    path = write_space(tmp_path, space_text(formats=FORMATS))
    outcome = run_search(SearchRequest(space=path, minimize="avg_power_w", out=tmp_path / "o",
                                       study="power"))
    power = outcome.ranked["avg_power_w"].to_numpy()
    assert (np.diff(power) >= 0).all() and len(power) == 4


def test_search_memory_equals_evaluate_memory(tmp_path):
    """The search's closed-form peak memory is memory_frame's, on every format and batch."""
    text = space_text(formats=FORMATS).replace("batches = [1]", "batches = [1, 64]")
    path = write_space(tmp_path, text)
    problem = Problem(new_settings(SearchRequest(space=path)))
    rows = problem.evaluate_points(0, list(problem.space.hardware_points()), 0)
    memory = evaluate_memory("convnext_tiny", problem.builder.build(0, ()),
                             list(problem.evaluated), [1, 64])
    key = ["format", "batch"]
    merged = rows[key + ["peak_memory_bytes", "fits"]].astype({"format": str}).merge(
        memory[key + ["peak_memory_bytes", "fits"]], on=key, suffixes=("", "_ref"))
    assert len(merged) == len(rows) == 2 * 5
    np.testing.assert_allclose(merged["peak_memory_bytes"], merged["peak_memory_bytes_ref"],
                               rtol=1e-12)
    assert (merged["fits"] == merged["fits_ref"]).all()


def _tiny_space(tmp_path, capacity: float):
    extra = f"dram_capacity_bytes = {capacity:g}"
    return write_space(tmp_path, space_text(extra_hw=extra, formats=FORMATS))


def test_a_design_that_does_not_fit_is_marked_and_never_ranked(tmp_path, capsys):
    # 30 MB: 2:4 (about 33 MB of ConvNeXt-T weights) does not fit; 87.5% sparse formats do.
    path = _tiny_space(tmp_path, 30e6)
    outcome = run_search(SearchRequest(space=path, objective="energy", out=tmp_path / "o",
                                       study="tiny"))
    results = outcome.results
    unfit = results[results["fits"].eq(False) & (results["role"] == "candidate")]
    assert list(unfit["format"].astype(str)) == ["2:4"]
    assert set(unfit["verdict"].astype(str)) == {"does not fit"}
    assert unfit["rank"].isna().all() and not unfit["meets_target"].any()
    assert "2:4" not in set(outcome.ranked["format"].astype(str))
    assert len(outcome.ranked) == 3
    # With a target too, the verdict says it; the printed table says so.
    rc = main(["search", "--space", str(path), "--target", "0.5x_over_1:8", "--out",
               str(tmp_path / "p"), "--study", "tinyp"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "1 candidate designs do not fit in DRAM" in out
    assert "does not fit in DRAM, never ranked (1): 2:4" in out


def test_optuna_records_a_design_that_does_not_fit_at_the_worst_value(tmp_path):
    import optuna

    path = _tiny_space(tmp_path, 30e6)
    outcome = run_search(SearchRequest(space=path, objective="energy", engine="optuna",
                                       trials=8, seed=1, out=tmp_path / "o", study="opt"))
    handle = optuna.load_study(study_name="opt", storage=outcome.storage)
    trials = handle.get_trials(deepcopy=False)
    assert trials
    for trial in trials:
        if trial.params["format"] == "2:4":
            assert trial.user_attrs["fits"] is False and trial.values == [np.inf]
        else:
            assert trial.user_attrs["fits"] is True
            assert trial.values[0] == pytest.approx(trial.user_attrs["energy_per_inference_j"],
                                                    rel=1e-6)
    assert "2:4" not in set(outcome.ranked["format"].astype(str))


@pytest.mark.parametrize(("argv", "needle"), [
    (["--objective", "joules"], "invalid choice: 'joules'"),
    (["--minimize", "watts"], "--minimize watts: unknown hardware field"),
    (["--objective", "energy", "--minimize", "avg_power_w"], "exclude each other"),
])
def test_bad_objectives_are_one_line_errors(tmp_path, capsys, argv, needle):
    with pytest.raises(SystemExit) as exc:
        code = main(["search", *argv, "--out", str(tmp_path / "x")])
        raise SystemExit(code)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_results_are_a_frame_of_plain_columns(tmp_path):
    path = write_space(tmp_path, space_text(formats=FORMATS))
    outcome = run_search(SearchRequest(space=path, out=tmp_path / "o", study="plain"))
    assert "fits" in outcome.results and "energy_per_inference_j" not in outcome.results
    assert isinstance(outcome.results["fits"].dtype, pd.BooleanDtype)
