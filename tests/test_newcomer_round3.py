"""Issue 25, third audit: output that says what it assumed, energy that says when it is unknown,
study names that say what was asked, and the torch backend's parity made exact.

- ``dse sweep``, ``dse report`` and ``dse compare`` print one line naming the hardware, the
  dtypes, the batches, the fusion and every ``--set`` override (the line ``dse search`` prints,
  from one function: ``dse.cli.options.assumptions_line``), and their files carry the same
  (the dtype columns beside hardware, batch and fusion; the report pages say it first).
- A spec without energy figures (``dse hw probe`` measures none) has no energy: ``n/a`` in the
  tables, NaN (null in JSON) in the files, never 0, and ``--objective energy`` refuses it.
- A study not named with ``--study`` is named after its target or objective, models and
  hardware, never after the space file (the built-in space is called ``nm-over-2-4``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import accelerator_models
import dse
from tests.cli_run import run_cli

ROOT = Path(__file__).resolve().parent.parent
TOY = ["--model", "toy_hybrid", "--format", "2:4"]


# --- one line of what was assumed ---------------------------------------------------------


def test_the_assumptions_line_by_hand():
    from dse.cli.options import assumptions_line, set_overrides
    from dse.roofline import Numerics

    numerics = Numerics(dtype="bf16", vector_dtype="fp32")
    assert assumptions_line(["a100-40gb", "host (h.toml)"], numerics, batches=[1, 8],
                            fusions=["unfused"], scope="gemm",
                            fixed=set_overrides(["sparse_tensor.patterns=2:4,1:4"]),
                            varied=["hw.dram_bandwidth_bytes_per_s"]) == (
        "hardware: a100-40gb, host (h.toml) at bf16 (vector ops fp32); batch 1, 8; fusion "
        "unfused, scope gemm; set sparse_tensor.patterns = 2:4,1:4; varied "
        "hw.dram_bandwidth_bytes_per_s")
    # The search's form: no batches or fusion (on lines of their own), a space's tuple value.
    assert assumptions_line(["a100"], Numerics(), fixed=[("sparse_tensor.patterns",
                                                          ("2:4", "1:8"))]) == (
        "hardware: a100 at fp16 (vector ops fp16); set sparse_tensor.patterns = [2:4, 1:8]")


def test_sweep_says_what_it_assumed_on_screen_in_its_file_and_its_report(tmp_path, capsys):
    out, report = tmp_path / "sweep.json", tmp_path / "rep"
    assert run_cli(["sweep", *TOY, "--hw", "a100", "--dtype", "bf16", "--set",
                    "sparse_tensor.patterns=2:4", "--vary", "batch=1,2", "--out", str(out),
                    "--report", str(report)]) == 0
    printed = capsys.readouterr().out.splitlines()
    line = ("hardware: a100-40gb at bf16 (vector ops fp16); fusion unfused, scope gemm; set "
            "sparse_tensor.patterns = 2:4; varied batch")
    assert printed[0] == line
    rows = json.loads(out.read_text())
    # By hand: toy_hybrid, dense and 2:4, at batches 1 and 2.
    assert len(rows) == 4
    assert {(r["format"], r["batch"]) for r in rows} == {(f, b) for f in ("dense", "2:4")
                                                         for b in (1, 2)}
    for row in rows:
        assert row["hardware"] == "a100-40gb[sparse_tensor.patterns=2:4]", row
        assert row["base_hardware"] == "a100-40gb"
        assert (row["dtype"], row["vector_dtype"]) == ("bf16", "fp16")
        assert (row["fusion"], row["scope"]) == ("unfused", "gemm")
    page = (report / "index.html").read_text()
    assert line in page
    assert "--set sparse_tensor.patterns=2:4" in page  # the command, recorded on the page
    table = pd.read_csv(report / "table-sweep.csv")
    assert set(table["dtype"]) == {"bf16"}


def test_report_says_what_it_assumed(tmp_path, capsys):
    out = tmp_path / "rep"
    assert run_cli(["report", *TOY, "--hw", "a100", "--batch", "1", "--batch", "8", "--dtype",
                    "bf16", "--fusion", "fused", "--set", "dram_bandwidth_bytes_per_s=1e12",
                    "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    line = ("hardware: a100-40gb at bf16 (vector ops fp16); batch 1, 8; fusion fused, scope "
            "gemm; set dram_bandwidth_bytes_per_s = 1e12")
    assert line in printed
    assert line in (out / "index.html").read_text()
    designs = pd.read_csv(out / "table-designs.csv")
    assert set(designs["dtype"]) == {"bf16"} and set(designs["vector_dtype"]) == {"fp16"}
    assert set(designs["batch"]) == {1, 8} and set(designs["fusion"]) == {"fused"}
    assert set(designs["hardware"]) == {"a100-40gb[dram_bandwidth_bytes_per_s=1e12]"}


def test_report_from_python_names_its_dtypes_too():
    from reports.design_report import design_report

    got = design_report("toy_hybrid", "a100", ["2:4"], [1],
                        numerics=dse.Numerics(dtype="bf16"))
    assert list(got.frame()["dtype"]) == ["bf16", "bf16"]  # dense and 2:4


def test_compare_says_what_it_assumed(tmp_path, capsys):
    assert run_cli(["compare", *TOY, "--hw", "a100,h100", "--batch", "4"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == ("hardware: a100-40gb, h100-sxm at fp16 (vector ops fp16); batch 4; "
                     "fusion unfused, scope gemm")


# --- energy on a spec without energy figures -----------------------------------------------


@pytest.fixture
def host(tmp_path, monkeypatch, capsys) -> Path:
    """The spec `dse hw probe --out h.toml` writes on a CPU (hand-made probe result): no
    energy figure at all."""
    import dse.measure.probe as probe_module
    from tests.test_newcomer_round2 import _probed

    monkeypatch.setattr(probe_module, "probe", lambda *a, **k: _probed({"bf16": 300e9}))
    monkeypatch.chdir(tmp_path)
    assert run_cli(["hw", "probe", "--out", "h.toml"]) == 0
    capsys.readouterr()
    return tmp_path / "h.toml"


def test_a_probed_spec_has_no_energy_figures(host):
    from dse.roofline import has_energy_figures

    assert not has_energy_figures(accelerator_models.load(str(host)))
    assert has_energy_figures(accelerator_models.load("a100"))
    assert has_energy_figures(accelerator_models.load(str(host), ["static_power_w=100"]))


def test_evaluate_says_energy_is_unknown_not_zero(host, capsys):
    assert run_cli(["evaluate", *TOY, "--hw", "h.toml", "--out", "e.json"]) == 0
    out = capsys.readouterr().out
    rows = json.loads(Path("e.json").read_text())
    assert len(rows) == 2
    for row in rows:
        for column in ("energy_j", "energy_per_inference_j", "avg_power_w", "edp_js",
                       "energy_tensor_j", "energy_dram_j", "energy_static_j"):
            assert row[column] is None, (column, row[column])  # null, not 0
        assert row["latency_s"] > 0 and row["power_capped"] is False
        assert "dram_pj_per_byte" in row["energy_unpriced"]  # what it would need
    assert ("energy and power n/a (spec has no energy figures) on host: add dram_pj_per_byte, "
            "tensor_pj_per_flop.DTYPE, ... to its spec to price them") in out
    table = out.split("energy per inference", 1)[1].splitlines()[2:4]
    assert all(line.split()[4:6] == ["n/a", "n/a"] for line in table), table
    assert "lower bound" not in out  # nothing is a bound of an unknown


def test_one_energy_figure_prices_what_it_can(host, capsys):
    """By hand: static power only, no board limit: energy = 100 W x latency, all static."""
    assert run_cli(["evaluate", *TOY, "--hw", "h.toml", "--set", "static_power_w=100",
                    "--batch", "4", "--out", "s.json"]) == 0
    capsys.readouterr()
    for row in json.loads(Path("s.json").read_text()):
        assert row["energy_j"] == pytest.approx(100.0 * row["latency_s"], rel=1e-12)
        assert row["energy_static_j"] == pytest.approx(row["energy_j"], rel=1e-12)
        assert row["energy_per_inference_j"] == pytest.approx(row["energy_j"] / 4, rel=1e-12)
        assert row["avg_power_w"] == pytest.approx(100.0, rel=1e-12)


def test_compare_keeps_the_known_energy_and_says_which_is_not(host, capsys):
    assert run_cli(["compare", *TOY, "--hw", "h.toml,a100", "--out", "c.csv", "--report",
                    "rep"]) == 0
    out = capsys.readouterr().out
    table = pd.read_csv("c.csv")
    probed = table[table["hardware"] == "host"]
    a100 = table[table["hardware"] == "a100-40gb"]
    assert len(probed) == len(a100) == 2
    assert probed["energy_per_inference_j"].isna().all()
    assert (a100["energy_per_inference_j"] > 0).all()
    # The A100's energy is the library's, unchanged by the probed spec beside it.
    alone = dse.roofline.evaluate_energy("toy_hybrid", accelerator_models.load("a100"),
                                         ["2:4"], [1])
    np.testing.assert_allclose(np.sort(a100["energy_j"]), np.sort(alone["energy_j"]),
                               rtol=1e-12)
    host_rows = [line for line in out.splitlines() if line.startswith("toy_hybrid")
                 and " host " in line]
    assert host_rows and all(line.count("n/a") == 2 for line in host_rows), host_rows
    assert " 0 mJ" not in out
    assert "energy and power n/a (spec has no energy figures) on host" in out
    drawn = pd.read_csv(Path("rep") / "energy.csv")
    assert set(drawn["hardware"]) == {"a100-40gb"}  # the unknown left out of the chart ...
    assert "Not shown: host, energy n/a (spec has no energy figures)." in (
        Path("rep") / "index.html").read_text()  # ... and said


def test_an_energy_search_refuses_a_spec_without_energy(host, capsys):
    code = run_cli(["search", "--hw", "h.toml", "--objective", "energy", "--out", "s",
                    "--study", "s"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "hardware h.toml has no energy figures" in err
    assert not Path("s").exists()  # nothing half-written


def test_energy_frame_gives_nan_on_a_spec_without_figures(host):
    from dse.roofline import ENERGY_COLUMNS, evaluate_energy

    frame = evaluate_energy("toy_hybrid", accelerator_models.load(str(host)), ["2:4"], [1],
                            numerics=dse.Numerics(dtype="bf16", vector_dtype="fp32"))
    numeric = [c for c in ENERGY_COLUMNS
               if c not in ("power_capped", "capped_latency_s", "energy_unpriced")]
    assert frame[numeric].isna().all().all()
    assert np.array_equal(frame["capped_latency_s"], frame["latency_s"])


# --- study names ------------------------------------------------------------------------------


@pytest.mark.parametrize("request_fields, start", [
    ({"objective": "pareto"}, "pareto-convnext_tiny+swin_tiny-a100-"),
    ({"target": "1.3x_over_2:4"}, "1.3x_over_2-4-convnext_tiny+swin_tiny-a100-"),
    ({"target": "1.3x_over_2:4", "calibrated": "h100-sxm",
      "overrides": {"hardware": ["h100-sxm"]}},
     "1.3x_over_2-4-convnext_tiny+swin_tiny-h100-sxm-calibrated-h100-sxm-"),
    # The shipped example space (its file calls it bandwidth-for-nm).
    ({"space": ROOT / "examples" / "my_space.toml", "minimize": "dram_bandwidth_bytes_per_s",
      "target": "1.2x_over_2:4"},
     "1.2x_over_2-4-least-dram_bandwidth_bytes_per_s-convnext_tiny-a100-"),
    ({"target": "1.3x_over_2:4", "objective": "energy"},
     "1.3x_over_2-4-energy-convnext_tiny+swin_tiny-a100-"),
    ({"overrides": {"models": ["a", "b", "c"]}}, "speedup-3-models-a100-"),
])
def test_a_default_study_name_says_what_was_asked(request_fields, start):
    import re

    from search.study import _NAME, SearchRequest, _study_name

    name = _study_name(SearchRequest(**request_fields))
    assert name.startswith(start), name
    assert re.fullmatch(re.escape(start) + r"\d{8}-\d{6}", name), name
    assert _NAME.match(name) and "nm-over" not in name and "bandwidth-for-nm" not in name


def test_a_long_study_name_is_cut_to_the_limit():
    from search.study import _NAME, SearchRequest, _study_name

    name = _study_name(SearchRequest(target="1.3x_over_2:4",
                                     overrides={"models": ["x" * 150, "y" * 150]}))
    assert len(name) <= 200 and _NAME.match(name), name


# --- the torch backend: the command and the library, to 1e-12 ---------------------------------


def test_backend_torch_file_equals_the_library_to_1e_12(tmp_path, capsys):
    """tests/test_backend_torch.py compares the printed cell (3 decimals); the file carries the
    full float, and it is the library's: one code path."""
    from dse import api
    from dse.calibrate.predictor import load_predictors

    out = tmp_path / "torch.parquet"
    assert run_cli(["evaluate", "--model", "vit_base_patch16_224", "--hw", "h100-sxm",
                    "--format", "2:4", "--calibrated", "h100-sxm", "--backend", "torch",
                    "--batch", "128", "--scope", "all", "--out", str(out)]) == 0
    capsys.readouterr()
    cli = pd.read_parquet(out).set_index("format")
    lib = api.evaluate("vit_base_patch16_224", "h100-sxm", ["2:4"], [128], scope="all",
                       calibrated=load_predictors("h100-sxm"),
                       backend="torch").set_index("format")
    for column in ("latency_s", "expected_latency_s", "expected_speedup", "fraction_of_sol"):
        want = lib.loc["2:4", column]
        assert math.isfinite(want)
        assert cli.loc["2:4", column] == pytest.approx(want, rel=1e-12, abs=0), column


def test_the_feature_overhead_study_says_what_it_assumed(tmp_path, capsys):
    out = tmp_path / "fo"
    assert run_cli(["study", "feature-overhead", "--model", "toy_hybrid", "--tornado-model",
                    "toy_hybrid", "--batch", "1", "--batch", "32", "--out", str(out)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    # The study adds the sparse tensor core's N:M patterns of its formats (2:4 and 1:4).
    line = ("hardware: a100-40gb at fp16 (vector ops fp16); batch 1, 32; fusion unfused, "
            "scope gemm; set sparse_tensor.patterns = 2:4,1:4")
    assert first == line
    assert line in (out / "index.html").read_text()


def test_evaluate_per_layer_names_its_dtypes(capsys):
    assert run_cli(["evaluate", *TOY, "--hw", "a100", "--dtype", "bf16", "--per-layer"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == ("model toy_hybrid, scope gemm, bf16 (vector ops fp16): speed-of-light "
                     "time per layer (roofline)")
