"""The Sparsity Roofline of a language-model report draws the published perplexity increase
(lower is better, so its axis runs down) from the table of published figures, names the
formats without a figure, and refuses a trained-accuracy table for language models."""

from __future__ import annotations

from dataclasses import replace

import pytest

import accelerator_models
from dse.accuracy import AccuracyTableError, load_accuracy_table
from dse.accuracy.llm_table import LLMAccuracyTable
from reports.charts.sparsity_roofline import accuracy_axis
from reports.design_report import accuracy_table_for, design_report
from tests.cli_run import run_cli
from workloads import load_model, load_trace


@pytest.fixture(scope="module")
def llama2():
    return load_model("llama-2-7b", "decode", 2048)


@pytest.fixture(scope="module")
def nm_gpu():
    # A sparse core that runs 4:8 and 1:4 at 2:4's rate, as the docs' LLaMA-2 search assumes.
    h100 = accelerator_models.load("h100-sxm")
    return replace(h100, sparse_tensor=replace(h100.sparse_tensor,
                                               patterns=("2:4", "4:8", "1:4")))


def _roofline(report):
    (section,) = [s for s in report.sections if s.name.startswith("sparsity-roofline")]
    return section


def test_the_published_increase_is_drawn_on_a_reversed_axis(llama2, nm_gpu):
    report = design_report(llama2, nm_gpu, ["2:4", "4:8", "1:4"], [1], scope="all")
    section = _roofline(report)
    data = section.data.set_index("format")
    # MaskLLM's learned 2:4 mask: 6.78 against 5.12; Wanda's 4:8: 7.97 against 5.12; dense 0.
    assert data.loc["2:4", "accuracy"] == pytest.approx(1.66, abs=1e-9)
    assert data.loc["4:8", "accuracy"] == pytest.approx(2.85, abs=1e-9)
    assert data.loc["dense", "accuracy"] == 0.0
    assert "1:4" not in data.index  # nothing published: not drawn, never guessed
    assert accuracy_axis(section.data) == ("perplexity increase (lower is better)", True)
    spec = section.chart.to_dict()
    y = spec["spec"]["layer"][0]["encoding"]["y"]
    assert y["scale"]["reverse"] is True and y["title"] == "perplexity increase (lower is better)"
    caption = " ".join(spec["title"]["subtitle"])
    assert "no figure, not drawn: llama-2-7b.decode.2048 1:4" in caption
    assert "fp16 weights" in caption
    assert spec["title"]["text"].startswith("Sparsity Roofline: perplexity increase")


def test_a_vision_report_keeps_accuracy_upwards():
    report = design_report("convnext_tiny", "a100", ["2:4"], [1])
    section = _roofline(report)
    assert set(section.data["format"]) == {"dense", "2:4"}
    assert accuracy_axis(section.data) == ("accuracy (%)", False)
    y = section.chart.to_dict()["spec"]["layer"][0]["encoding"]["y"]
    assert not y["scale"].get("reverse", False) and y["title"] == "accuracy (%)"


def test_a_model_without_figures_is_named_not_drawn():
    qwen = load_model("qwen2.5-7b", "decode", 2048)
    section = _roofline(design_report(qwen, "h100-sxm", ["2:4"], [1], scope="all"))
    assert len(section.data) == 0
    assert section.note.startswith("Not drawn: qwen2.5-7b.decode.2048 (no accuracy in ")
    assert "accuracy_llm.csv" in section.note


def test_the_table_follows_the_models():
    llm = [load_model("llama-2-7b", "decode", 2048)]
    assert isinstance(accuracy_table_for(llm), LLMAccuracyTable)
    assert not isinstance(accuracy_table_for([load_trace("toy_hybrid")]), LLMAccuracyTable)
    with pytest.raises(AccuracyTableError, match="language models take a table of published"):
        accuracy_table_for(llm, load_accuracy_table())


def test_the_command_refuses_a_trained_table_for_a_language_model(tmp_path, capsys):
    from dse.accuracy import DEFAULT_TABLE

    out = tmp_path / "r"
    code = run_cli(["report", "--model", "llama-2-7b", "--phase", "decode", "--context", "2048",
                    "--hw", "h100-sxm", "--format", "2:4", "--accuracy-table",
                    str(DEFAULT_TABLE), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "accuracy_default.csv, row 1: the header must be model,pattern,weights" in err
