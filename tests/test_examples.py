"""The example files the documentation uses exist and do what it says."""

from __future__ import annotations

from pathlib import Path

import accelerator_models
from search import SearchRequest, run_search
from tests.cli_run import run_cli

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_my_gpu_is_the_readme_gpu():
    gpu = accelerator_models.load(str(EXAMPLES / "my_gpu.toml"))
    a100 = accelerator_models.load("a100")
    assert gpu.name == "a100-nm" and gpu.dram_bandwidth_bytes_per_s == 3.0e12
    assert gpu.sparse_tensor.patterns == ((2, 4), (1, 4), (2, 8), (2, 16))
    assert gpu.tensor_flops_per_s == a100.tensor_flops_per_s


def test_my_gpu_keeps_the_a100s_unverified_marks():
    """A file that extends a catalog entry keeps the marks of the figures it does not set (the
    A100's derived energies), adds its own, and drops those of figures it sets itself."""
    gpu = accelerator_models.load(str(EXAMPLES / "my_gpu.toml"))
    a100 = accelerator_models.load("a100")
    assert "tensor_pj_per_flop.fp16" in a100.unverified
    assert set(gpu.unverified) == set(a100.unverified) | {"dram_bandwidth_bytes_per_s",
                                                          "sparse_tensor.patterns"}


def test_a_set_figure_loses_the_parents_mark(tmp_path):
    spec = tmp_path / "measured.toml"
    spec.write_text('name = "a100-measured"\nextends = "a100"\n'
                    "[tensor_pj_per_flop]\nfp16 = 1.0\n")
    gpu = accelerator_models.load(str(spec))
    assert "tensor_pj_per_flop.fp16" not in gpu.unverified
    assert "tensor_pj_per_flop.bf16" in gpu.unverified


def test_my_space_answers_its_question(tmp_path):
    outcome = run_search(SearchRequest(space=EXAMPLES / "my_space.toml", target="1.2x_over_2:4",
                                       minimize="dram_bandwidth_bytes_per_s", out=tmp_path / "s",
                                       study="example"))
    ranked = outcome.ranked
    assert len(ranked) > 0
    # The least bandwidth that meets the target, as docs/how-to/target-search.md says: the top
    # of the range.
    assert ranked["hw.dram_bandwidth_bytes_per_s"].min() == 3.2e12


def test_messages_count_one_as_one(tmp_path, capsys):
    """The small space is one chunk, and one design meets its target at the least bandwidth:
    the messages say "1 chunk" and "1 meets", not "1 chunks" and "1 meet"."""
    code = run_cli(["search", "--space", str(EXAMPLES / "my_space.toml"),
                    "--target", "1.2x_over_2:4", "--minimize", "dram_bandwidth_bytes_per_s",
                    "--top", "1", "--out", str(tmp_path / "s")])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "in 1 chunk" in printed.err and "1 chunks" not in printed.err
