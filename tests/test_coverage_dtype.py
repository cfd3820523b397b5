"""The shapes the expectation counts as timed are those of the dtype the predictors' kernels
really ran in, whatever compute dtype is asked for (a dtype never timed is said apart, as
``fp8 compute``).

The CPU's shipped dataset stores its GEMMs as fp32 rows, priced in the tf32 slot: a tf32
evaluation found none of them and called every GEMM's shape never timed. It timed the dense
1000 x 512 classifier head at N = 1-8, the LM head of a one-layer LLaMA of hidden size 512 and a
1000-token vocabulary (q 512x512, k and v 256x512, scores and context, o 512x512, gate and up
1024x512, down 512x1024, LM head 1000x512: 10 GEMMs); none of the others at N = 1, so decode at
batch 1 has 9 of its 10 GEMMs extrapolated for their shape, not 10.

The H100's shipped collection timed LLaMA-3-8B's linears in fp16 at N = 1-2048
(tests/test_llm_acceptance.py), never its 128256 x 4096 LM head nor its attention products
(scores and context, 8 KV heads): in fp8 every GEMM is extrapolated (``fp8 compute``), and the
shapes never timed are those three alone, as in fp16; they listed the timed linears.
"""

from __future__ import annotations

import pandas as pd
import pytest

from dse import Numerics
from dse.api import expected_ops
from dse.calibrate.coverage import coverage, coverage_note, measured_shapes
from dse.calibrate.predictor import load_predictors
from workloads import load_model
from workloads.llm import llm_config_from_dict, llm_trace

SMALL = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024,
         "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 128, "vocab_size": 1000, "max_position_embeddings": 256}
SHAPE = ["family", "sparsity", "m", "k", "groups"]


@pytest.fixture(scope="module")
def cpu():
    return load_predictors("cpu-amd-epyc-2c")


@pytest.fixture(scope="module")
def h100():
    return load_predictors("h100-sxm")


def test_cpu_fp32_rows_answer_to_tf32(cpu):
    tf32 = measured_shapes(cpu, "tf32").set_index(SHAPE)
    assert len(tf32) == len(measured_shapes(cpu, "fp32")) > 0
    head = tf32.loc[("dense", 0.0, 1000, 512, 1)]
    assert (head["n_min"], head["n_max"]) == (1, 8)
    assert measured_shapes(cpu, "fp16").empty  # nothing timed in fp16 on the CPU


def test_cpu_tf32_decode_prices_the_timed_lm_head_as_measured(cpu):
    step = llm_trace(llm_config_from_dict(SMALL, name="small"), "decode", 64)
    expected = expected_ops(step, "epyc-zen5-2c", ["dense"], [1], cpu, scope="all",
                            numerics=Numerics(dtype="tf32", vector_dtype="fp32"))
    cov = coverage(expected, step, cpu, "tf32", examples=20)
    assert cov.known and cov.dtypes == () and cov.dtype == "tf32"
    d = cov.designs
    assert (list(d["gemms"]), list(d["extrapolated"])) == ([10], [9])
    assert not any(e.startswith("lm_head") for e in cov.examples)
    assert sorted(e.split(":")[0] for e in cov.examples) == sorted([
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.scores",
        "self_attn.context", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
        "mlp.down_proj"])


@pytest.mark.parametrize("dtype", ["fp16", "fp8"])
def test_h100_shapes_never_timed_are_shapes_whatever_the_dtype(h100, dtype):
    step = load_model("llama-3-8b", "decode", 1024)
    expected = expected_ops(step, "h100-sxm", ["dense"], [1], h100, scope="all",
                            numerics=Numerics(dtype=dtype))
    cov = coverage(expected, step, h100, dtype, examples=20)
    assert cov.dtype == "fp16"
    assert cov.examples == ["lm_head: 128256x4096 at N=1",
                            "self_attn.context: 128x1024 x 8 at N=4",
                            "self_attn.scores: 1024x128 x 8 at N=4"]
    d = cov.designs
    assert list(d["gemms"]) == [32 * 9 + 1]
    # fp8: every GEMM computes in a dtype never timed; fp16: the 2 x 32 + 1 shapes above.
    assert list(d["extrapolated"]) == [289 if dtype == "fp8" else 65]
    assert cov.dtypes == (("fp8 compute",) if dtype == "fp8" else ())


def test_each_untimed_dtype_is_named_once(h100):
    """fp8 compute with int4 weights: the projections are marked with both, the attention
    products with fp8 compute alone; the line names each mark once."""
    step = load_model("llama-3-8b", "prefill", 512)
    numerics = Numerics(dtype="fp8", weight_dtype="int4")
    expected = expected_ops(step, "h100-sxm", ["dense"], [1], h100, scope="all",
                            numerics=numerics)
    cov = coverage(expected, step, h100, "fp8")
    assert cov.dtypes == ("fp8 compute", "int4 weights")
    assert "they compute or read fp8 compute and int4 weights (its kernels" in coverage_note(
        cov, "h100-sxm", step.model)


def test_the_line_quotes_the_kernels_timed_since_in_that_dtype(tmp_path, monkeypatch):
    """A dtype with a shipped check (models/dtype_check/DEVICE.json) is quoted with its
    kernel and median at the step's phase; none for another phase, device or dtype."""
    import json

    from dse.calibrate import coverage as cov_module

    doc = {"device": "dev", "command": "c", "data": [],
           "kernels": {"int4 weights": "tinygemm", "fp8 compute": "scaled_mm"},
           "checks": {"int4 weights": {"decode": {"shapes": 12,
                                                  "median_measured_over_expected": 4.686}},
                      "fp8 compute": {"decode": {"shapes": 3,
                                                 "median_measured_over_expected": 1.0}}}}
    (tmp_path / "dev.json").write_text(json.dumps(doc))
    monkeypatch.setattr(cov_module, "DTYPE_CHECK_DIR", tmp_path)
    check = cov_module.dtype_checks
    assert check("dev", ("int4 weights, fp8 KV cache",), "decode") == (
        "int4 weights (tinygemm) took 4.69x this expectation at decode (median of 12 shapes)",)
    assert len(check("dev", ("fp8 compute", "fp8 compute, int4 weights"), "decode")) == 2
    assert check("dev", ("int4 weights",), "prefill") == ()  # no prefill figure
    assert check("dev", ("int4 weights",), None) == ()  # not a language-model step
    assert check("other", ("int4 weights",), "decode") == ()
    note = cov_module.coverage_note(
        cov_module.Coverage(pd.DataFrame({"extrapolated": [1], "gemms": [1], "expected_s": [1.0],
                                          "extrapolated_s": [1.0]}), [], True,
                            ("int4 weights",), "fp16",
                            check("dev", ("int4 weights",), "decode")), "dev", "step")
    assert note.endswith("timed since on dev (python -m benchmarks.gpu.compare_dtype), not "
                         "trained on: int4 weights (tinygemm) took 4.69x this expectation at "
                         "decode (median of 12 shapes)")


def test_the_shipped_h100_check_names_every_dense_dtype_it_timed():
    import json

    from dse.calibrate.coverage import DTYPE_CHECK_DIR

    doc = json.loads((DTYPE_CHECK_DIR / "h100-sxm.json").read_text())
    assert doc["command"] == "python -m benchmarks.gpu.compare_dtype --ship"
    assert set(doc["checks"]) == set(doc["kernels"]) == {
        "bf16 compute", "fp8 compute", "int8 compute", "int4 weights", "int8 weights"}
    for phases in doc["checks"].values():
        assert set(phases) == {"decode", "prefill"}
        assert all(p["shapes"] > 0 and p["median_measured_over_expected"] > 0
                   for p in phases.values())
