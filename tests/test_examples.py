"""The example files the README uses exist and do what it says."""

from __future__ import annotations

from pathlib import Path

import accelerator_models
from search import SearchRequest, run_search

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_my_gpu_is_the_readme_gpu():
    gpu = accelerator_models.load(str(EXAMPLES / "my_gpu.toml"))
    a100 = accelerator_models.load("a100")
    assert gpu.name == "a100-nm" and gpu.dram_bandwidth_bytes_per_s == 3.0e12
    assert gpu.sparse_tensor.patterns == ((2, 4), (1, 4), (2, 8), (2, 16))
    assert gpu.tensor_flops_per_s == a100.tensor_flops_per_s


def test_my_space_answers_its_question(tmp_path):
    outcome = run_search(SearchRequest(space=EXAMPLES / "my_space.toml", target="1.2x_over_2:4",
                                       minimize="dram_bandwidth_bytes_per_s", out=tmp_path / "s",
                                       study="example"))
    ranked = outcome.ranked
    assert len(ranked) > 0
    # The least bandwidth that meets the target, as the README says: the top of the range.
    assert ranked["hw.dram_bandwidth_bytes_per_s"].min() == 3.2e12
