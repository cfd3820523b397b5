"""Weight-only quantisation (``--weight-dtype``, ``--weight-group-size``) and the KV-cache dtype
(``--kv-dtype``) of language-model designs, by value on a tiny GQA configuration (issue 24).

The tiny model: hidden 256, 2 layers, 4 query heads and 2 KV heads of head_dim 64, MLP 512,
vocabulary 1000, untied embeddings. Per layer its linear weights are q 256x256, k and v
128x256, o 256x256, gate and up 512x256, down 256x512: 589,824 weights in 2,048 rows, every K
a multiple of 128. Two layers: 1,179,648 prunable weights (4,096 rows); the LM head 1000x256:
256,000 weights (1,000 rows), kept dense; norms 2 x 2 x 256 + 256 = 1,280 weights (fp16).
Weights a decode step reads: 1,435,648 linear + 1,280 norm.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import accelerator_models
import dse
from dse.roofline.energy import op_traffic
from tests.cli_run import run_cli
from workloads import load_trace
from workloads.llm import llm_config_from_dict, llm_trace

TINY = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 64, "vocab_size": 1000, "max_position_embeddings": 256}
CONTEXT = 64

LINEAR = 1_179_648 + 256_000  # prunable linear weights + the LM head
ROWS = 4_096 + 1_000  # output channels of those
NORMS = 2 * 1_280  # norm weights stay in the compute dtype (fp16)

#: The weight bytes a decode step reads, by hand (see the module docstring).
WEIGHT_BYTES = {
    # (format, weight dtype, group size): bytes
    ("dense", None, None): 2 * LINEAR + NORMS,  # 2,873,856
    # int8 and fp8: one byte a value and one fp16 scale per output channel.
    ("dense", "int8", None): LINEAR + 2 * ROWS + NORMS,  # 1,448,400
    ("dense", "fp8", None): LINEAR + 2 * ROWS + NORMS,
    # int4: half a byte a value and one fp16 scale per 128 weights along K.
    ("dense", "int4", None): LINEAR // 2 + 2 * (LINEAR // 128) + NORMS,  # 742,816
    ("dense", "int4", 64): LINEAR // 2 + 2 * (LINEAR // 64) + NORMS,  # 765,248
    # Group 100: ceil(256 / 100) = 3 scales a row where K = 256 (q, k, v, o, gate, up: 1,792
    # rows a layer; the LM head's 1,000), ceil(512 / 100) = 6 where K = 512 (down: 256 rows).
    ("dense", "int4", 100): LINEAR // 2 + 2 * (3 * (2 * 1_792 + 1_000) + 6 * 2 * 256) + NORMS,
    # 2:4 keeps half the prunable weights (589,824 values) with 2 bits of metadata each
    # (147,456 bytes); the scales cover the dense K; the LM head stays dense.
    ("2:4", None, None): 2 * 589_824 + 147_456 + 2 * 256_000 + NORMS,  # 1,841,664
    ("2:4", "int4", None): (589_824 // 2 + 147_456 + 2 * (1_179_648 // 128)
                            + 256_000 // 2 + 2 * (256_000 // 128) + NORMS),  # 595,360
    ("2:4", "fp8", None): 589_824 + 147_456 + 2 * 4_096 + 256_000 + 2 * 1_000 + NORMS,
}

#: Feature bytes of the decode step at fp16 (every op's inputs and outputs, unfused), of which
#: the KV cache: per layer the scores and the context op each read 64 tokens x 128 (2 KV heads
#: x 64) keys or values.
FEATURE_BYTES = 116_178
KV_READ_ELEMS = 2 * 2 * CONTEXT * 128  # 32,768


@pytest.fixture(scope="module")
def trace():
    return llm_trace(llm_config_from_dict(TINY, name="tiny"), "decode", CONTEXT)


@pytest.fixture(scope="module")
def h100():
    return accelerator_models.load("h100-sxm")


def design(trace, hw, fmt="dense", **numerics) -> pd.Series:
    table = dse.evaluate(trace, hw, [fmt], [1], scope="all", numerics=dse.Numerics(**numerics))
    return table[table["format"] == fmt].iloc[0]


def test_hand_figures_add_up():
    assert WEIGHT_BYTES[("dense", None, None)] == 2_873_856
    assert WEIGHT_BYTES[("dense", "int8", None)] == 1_448_400
    assert WEIGHT_BYTES[("dense", "int4", None)] == 742_816
    assert WEIGHT_BYTES[("dense", "int4", 100)] == 754_032
    assert WEIGHT_BYTES[("2:4", "int4", None)] == 595_360
    assert WEIGHT_BYTES[("2:4", "fp8", None)] == 1_006_032


@pytest.mark.parametrize("key", list(WEIGHT_BYTES), ids=str)
def test_weight_bytes_by_value(trace, h100, key):
    fmt, dtype, group = key
    row = design(trace, h100, fmt, weight_dtype=dtype, weight_group_size=group)
    assert row["weight_bytes"] == WEIGHT_BYTES[key]
    # Features (activations, the KV cache) stay in the compute dtype.
    assert row["dram_bytes"] - row["weight_bytes"] == FEATURE_BYTES


def test_weight_dtype_equal_to_compute_dtype_is_the_default(trace, h100):
    assert design(trace, h100, weight_dtype="fp8", dtype="fp8")["weight_bytes"] \
        == (LINEAR + NORMS // 2)  # no scales: the compute dtype's own storage
    assert design(trace, h100, "2:4", weight_dtype="int4")["flops"] \
        == design(trace, h100, "2:4")["flops"]  # FLOPs do not change


def test_energy_splits_values_from_metadata(trace, h100):
    numerics = dse.Numerics(weight_dtype="int4")
    layers = dse.evaluate_layers(trace, h100, ["2:4"], [1], scope="all", numerics=numerics)
    traffic = op_traffic(layers[layers["format"] == "2:4"], trace, numerics)
    assert traffic["index_bytes"].sum() == pytest.approx(147_456, abs=1e-6)  # 2:4 metadata
    assert traffic["value_bytes"].sum() == pytest.approx(595_360 - 147_456, abs=1e-6)


def test_kv_read_at_the_kv_dtype(trace, h100):
    layers = {kv: dse.evaluate_layers(trace, h100, ["dense"], [1], scope="all",
                                      numerics=dse.Numerics(kv_dtype=kv)).set_index("op")
              for kv in ("fp16", "fp8")}
    # Scores: 256 query elements in, 4 heads x 64 scores out (fp16), and 64 x 128 keys.
    scores = "model.layers.0.self_attn.scores"
    assert layers["fp16"].loc[scores, "dram_bytes"] == 2 * 256 + 2 * 256 + 2 * 8_192
    assert layers["fp8"].loc[scores, "dram_bytes"] == 2 * 256 + 2 * 256 + 1 * 8_192
    # Only the four cache-reading ops change, by one byte per cached element.
    change = layers["fp16"]["dram_bytes"] - layers["fp8"]["dram_bytes"]
    assert change.sum() == KV_READ_ELEMS
    assert set(change[change != 0].index) == {f"model.layers.{i}.self_attn.{op}"
                                              for i in (0, 1) for op in ("scores", "context")}
    row = design(trace, h100, kv_dtype="fp8")
    assert row["dram_bytes"] == WEIGHT_BYTES[("dense", None, None)] + FEATURE_BYTES \
        - KV_READ_ELEMS


def test_decode_gets_faster_by_the_byte_ratio(trace, h100):
    """At batch 1 every op of the step is memory-bound on an H100, so the latency is the
    bytes over the bandwidth and quantisation speeds it up by the ratio of the bytes."""
    bandwidth = h100.dram_bandwidth_bytes_per_s
    fp16 = design(trace, h100)
    assert fp16["memory_bound_ops"] == fp16["ops"]
    assert fp16["latency_s"] == pytest.approx((2_873_856 + FEATURE_BYTES) / bandwidth,
                                              rel=1e-12)
    for fmt, dtype, kv in (("dense", "int4", None), ("2:4", "int4", "fp8"),
                           ("dense", "int8", "fp8")):
        row = design(trace, h100, fmt, weight_dtype=dtype, kv_dtype=kv)
        features = FEATURE_BYTES - (KV_READ_ELEMS if kv == "fp8" else 0)
        expected = (2_873_856 + FEATURE_BYTES) / (WEIGHT_BYTES[(fmt, dtype, None)] + features)
        assert fp16["latency_s"] / row["latency_s"] == pytest.approx(expected, rel=1e-12)
    # int4 alone: 2,990,034 / 858,994 bytes, 3.48x.
    assert fp16["latency_s"] / design(trace, h100, weight_dtype="int4")["latency_s"] \
        == pytest.approx(3.4808555, rel=1e-7)


def test_a_non_language_trace_takes_the_weight_dtype(h100):
    trace = load_trace("resnet50")
    fp16 = dse.evaluate(trace, h100, ["dense"], [1]).iloc[0]
    int8 = dse.evaluate(trace, h100, ["dense"], [1],
                        numerics=dse.Numerics(weight_dtype="int8")).iloc[0]
    ops = trace.ops[trace.ops["prunable"]]
    gemm = float((ops["groups"] * ops["m"] * ops["k"]).sum())
    rows = float((ops["groups"] * ops["m"]).sum())
    # The prunable convolutions' and linear layers' weights: 2 bytes -> 1 byte + a scale a row.
    assert fp16["weight_bytes"] - int8["weight_bytes"] == gemm - 2 * rows


@pytest.mark.parametrize("numerics, message", [
    ({"weight_dtype": "int2"}, "weight dtype 'int2' is not a weight-only quantisation"),
    ({"weight_dtype": "int4", "weight_group_size": 0}, "must be a whole number of weights >= 1"),
    ({"weight_group_size": 64}, "needs a quantised weight dtype"),
    ({"weight_dtype": "int8", "dtype": "fp8"}, "no narrower than the compute dtype fp8"),
    ({"kv_dtype": "int4"}, "KV-cache dtype 'int4' is not known"),
])
def test_numerics_refuses(numerics, message):
    with pytest.raises(dse.NumericsError, match=message):
        dse.Numerics(**numerics)


# --- the command line --------------------------------------------------------------------------


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "tiny" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(TINY))
    return str(path)


def test_evaluate_writes_quantised_figures(config, tmp_path, capsys):
    out = tmp_path / "r.json"
    common = ["evaluate", "--model", config, "--phase", "decode", "--context", str(CONTEXT),
              "--batch", "1", "--batch", "4", "--hw", "h100-sxm", "--format", "2:4"]
    assert run_cli([*common, "--weight-dtype", "int4", "--kv-dtype", "fp8",
                    "--out", str(out)]) == 0
    assert "weights int4 (group 128), KV cache fp8" in capsys.readouterr().out
    table = pd.read_json(out).set_index(["format", "batch"])
    assert run_cli([*common, "--out", str(tmp_path / "fp16.json")]) == 0
    fp16 = pd.read_json(tmp_path / "fp16.json").set_index(["format", "batch"])
    for fmt in ("dense", "2:4"):
        key = (fmt, "int4", None)
        assert (table.loc[fmt, "weight_bytes"] == WEIGHT_BYTES[key]).all()
        # Resident: the untied 1000 x 256 embedding table stays fp16 (it is not quantised).
        assert (table.loc[fmt, "weight_storage_bytes"] == WEIGHT_BYTES[key] + 512_000).all()
    assert set(table["weight_dtype"]) == {"int4 (group 128)"}
    assert set(table["kv_dtype"]) == {"fp8"} and set(fp16["kv_dtype"]) == {"fp16"}
    # KV cache: 2 layers x 2 KV heads x 64 x (key, value) = 512 elements a token, 1 byte each.
    assert (table["kv_bytes_per_token"] == 512).all() and (fp16["kv_bytes_per_token"] == 1024).all()
    batch = np.array([b for _, b in table.index])
    assert (table["kv_cache_bytes"].to_numpy() == batch * CONTEXT * 512).all()
    # The memory fit: activations unchanged, weights and the KV cache smaller.
    rest = table["peak_memory_bytes"] - table["weight_storage_bytes"] - table["kv_cache_bytes"]
    rest16 = fp16["peak_memory_bytes"] - fp16["weight_storage_bytes"] - fp16["kv_cache_bytes"]
    assert (rest == rest16.loc[rest.index]).all()
    assert (table["largest_batch_that_fits"] > fp16["largest_batch_that_fits"]).all()
    assert (table["tokens_per_s"] > fp16["tokens_per_s"]).all()


@pytest.mark.parametrize("args, message", [
    (["--weight-dtype", "int3"], "argument --weight-dtype: invalid choice: 'int3'"),
    (["--weight-dtype", "int4", "--weight-group-size", "0"], "--weight-group-size 0: give at "
                                                             "least 1"),
    (["--weight-group-size", "64"], "--weight-group-size 64: a group size is for quantised"),
    (["--kv-dtype", "fp4"], "argument --kv-dtype: invalid choice: 'fp4'"),
    (["--dtype", "fp8", "--weight-dtype", "fp8", "--weight-group-size", "32"],
     "--weight-dtype fp8 is the compute dtype (--dtype fp8), so the weights take no scales"),
    (["--dtype", "int8", "--weight-dtype", "fp8"], "no narrower than the compute dtype int8"),
])
def test_evaluate_refuses_in_one_line(config, args, message, tmp_path, capsys):
    out = tmp_path / "r.json"
    code = run_cli(["evaluate", "--model", config, "--phase", "decode", "--context", "8",
                    "--hw", "h100-sxm", *args, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1
    assert "Traceback" not in err and not out.exists()


def test_kv_dtype_needs_a_language_model(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert run_cli(["evaluate", "--model", "resnet50", "--hw", "h100-sxm", "--kv-dtype", "fp8",
                    "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--kv-dtype fp8: resnet50 has no KV cache" in err and err.count("\n") == 1
    assert not out.exists()


def test_compare_and_sweep_price_quantised_designs_as_evaluate_does(tmp_path, capsys):
    """--weight-dtype and --kv-dtype reach compare and sweep: the same latencies, to the bit,
    as dse evaluate for the same designs; and the same refusal for a trace without KV cache."""
    design = ["--model", "llama-3-8b", "--phase", "decode", "--context", "2048", "--hw",
              "h100-sxm", "--format", "2:4", "--weight-dtype", "int4", "--kv-dtype", "fp8"]
    out = {name: tmp_path / f"{name}.csv" for name in ("evaluate", "compare", "sweep")}
    assert run_cli(["evaluate", *design, "--batch", "1", "--batch", "8",
                    "--out", str(out["evaluate"])]) == 0
    assert run_cli(["compare", *design, "--batch", "1", "--batch", "8",
                    "--out", str(out["compare"])]) == 0
    assert run_cli(["sweep", *design, "--vary", "batch=1,8", "--out", str(out["sweep"])]) == 0
    key = ["format", "batch"]
    want = pd.read_csv(out["evaluate"]).set_index(key)["latency_s"].sort_index()
    for name in ("compare", "sweep"):
        got = pd.read_csv(out[name]).set_index(key)["latency_s"].sort_index()
        pd.testing.assert_series_equal(got, want, check_exact=True)
    # int4 weights with an fp8 KV cache: faster than the fp16 design at every batch
    plain = tmp_path / "fp16.csv"
    assert run_cli(["evaluate", *design[:-4], "--batch", "1", "--batch", "8",
                    "--out", str(plain)]) == 0
    fp16 = pd.read_csv(plain).set_index(key)["latency_s"].sort_index()
    assert (want < fp16).all()
    capsys.readouterr()
    assert run_cli(["compare", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4",
                    "--kv-dtype", "fp8"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "has no KV cache" in err
