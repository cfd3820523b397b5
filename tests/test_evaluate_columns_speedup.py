"""``dse.evaluate``'s columns built at once from arrays (``dse.design_columns.design_table``)
against the frames' path it replaced, kept here as it was (``_reference_evaluate``: the bound's
DataFrame, the layer frames joined to it by their printed keys, the energy, memory and
language-model columns added to it, then the number types by ``assign`` and a reorder): the
same DataFrame, bit for bit, with the same dtypes, array types, column order and index."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dse
import dse.api
import dse.design_columns as design_columns
from dse.design_columns import accelerators, design_table
from dse.roofline.energy import (
    ENERGY_COLUMNS,
    PJ,
    _figure,
    accelerator_table,
    has_energy_figures,
    op_figures,
)
from dse.roofline.layer_sums import _pandas_group_sums, group_sums
from dse.roofline.memory import activation_peak
from dse.roofline.numerics import DTYPE_COLUMNS, with_dtype_columns
from dse.roofline.pricing import weight_bytes_dense, weight_read_share
from formats import Dense
from formats import parse as parse_format
from workloads import MAX_BATCH, load_model, load_trace

# --- the frames' path, as it was before design_table (reference only) ----------------------

KEYS = ("hardware", "format", "batch", "fusion", "scope")
SUMS = ("tensor_flops", "sparse_tensor_flops", "csr_flops", "elementwise_flops", "value_bytes",
        "index_bytes", "feature_dram_bytes", "feature_onchip_bytes")


def _key_labels(designs, layers):
    if designs.dtype != layers.dtype or isinstance(designs.dtype, pd.CategoricalDtype):
        designs, layers = designs.astype(str), layers.astype(str)
    of_layers, uniques = pd.factorize(layers)
    return uniques.get_indexer(designs), of_layers, len(uniques)


def _layer_rows(designs, layers, trace):
    n = len(designs)
    codes = np.zeros(n + len(layers), dtype=np.int64)
    missing = np.zeros(n + len(layers), dtype=bool)
    bound = 1
    for key in KEYS:
        of_designs, of_layers, size = _key_labels(designs[key], layers[key])
        labels = np.concatenate([of_designs, of_layers])
        missing |= labels < 0
        if bound * max(size, 1) >= 2**62:
            codes, kept = pd.factorize(codes)
            bound = len(kept)
        codes = codes * size + np.maximum(labels, 0)
        bound *= max(size, 1)
    codes, kept = pd.factorize(codes)
    count = len(kept)
    of_designs, of_layers = codes[:n], codes[n:]
    of_designs[missing[:n]] = count
    of_layers[missing[n:]] = -1
    of_rows, names = pd.factorize(layers["op"].astype(str))
    positions = pd.Index(trace.ops["name"]).get_indexer(names)
    op = np.where(of_rows >= 0, positions[of_rows], -1)
    return of_designs, of_layers, count + 1, op


def _design_sums(values, rows, keep=None):
    of_designs, codes, count, _ = rows
    keep = codes >= 0 if keep is None else keep & (codes >= 0)
    if not keep.all():
        values, codes = values[keep], codes[keep]
    out = np.full((count, values.shape[1]), np.nan)
    if len(codes):
        sums = pd.DataFrame(values, copy=False).groupby(codes, sort=False).sum()
        out[sums.index.to_numpy(dtype=np.int64)] = sums.to_numpy(dtype=np.float64)
    return out[of_designs]


def _with_columns(frame, columns):
    out = frame.copy(deep=False)
    for name in [c for c in columns if c in frame.columns]:
        out[name] = columns[name]
    added = {c: v.array if isinstance(v, pd.Series) else v
             for c, v in columns.items() if c not in frame.columns}
    if not added:
        return out
    return pd.concat([out, pd.DataFrame(added, index=frame.index)], axis=1)


def _traffic(layers, trace, numerics, j):
    per_op = op_figures(trace)
    batch = layers["batch"].to_numpy(dtype=np.float64)
    vb = float(numerics.value_bytes)
    wb = float(numerics.weight_value_bytes)
    m, k, g = (per_op[c][j] for c in ("m", "k", "groups"))
    gw = g * per_op["weight_sets"][j]
    scales = np.where(per_op["gemm_weights"][j], gw * numerics.scale_bytes(m, k), 0.0)
    weight_elems = per_op["weight_elems"][j]
    layer_density = per_op["density"][j]
    prunable = per_op["prunable"][j]
    weight_bytes = layers["weight_bytes"].to_numpy(dtype=np.float64)
    names = layers["format"].astype(str).to_numpy(dtype=object)
    fallback = layers["fallback"].astype(str).to_numpy(dtype=object)
    values = weight_bytes.copy()
    share = weight_read_share(trace, j, batch)
    share = 1.0 if share is None else share
    for name in pd.unique(names):
        fmt = parse_format(name)
        if isinstance(fmt, Dense):
            continue
        rows = (names == name) & prunable & ~np.isin(fallback, ["shape", "hw:dense"])
        density = np.full(len(rows), fmt.density)
        if fmt.takes_layer_density:
            density = np.where(np.isnan(layer_density), density, layer_density)
        stored = vb * (weight_elems - gw * m * k) + wb * gw * fmt.nnz(m, k, density) + scales
        values = np.where(rows, stored * share, values)
    unit = layers["unit"].astype(str).to_numpy(dtype=object)
    flops = layers["flops"].to_numpy(dtype=np.float64)
    features = per_op["input_elems"][j] + per_op["output_elems"][j]
    cached = per_op["cache_read"][j]
    return {
        "tensor_flops": np.where(unit == "tensor", flops, 0.0),
        "sparse_tensor_flops": np.where(unit == "sparse_tensor", flops, 0.0),
        "csr_flops": np.where(unit == "vector", flops, 0.0),
        "elementwise_flops": per_op["vector_flops"][j] * batch,
        "value_bytes": values,
        "index_bytes": np.maximum(weight_bytes - values, 0.0),
        "feature_dram_bytes": layers["dram_bytes"].to_numpy(dtype=np.float64) - weight_bytes,
        "feature_onchip_bytes": (vb * features + (numerics.kv_value_bytes - vb) * cached) * batch,
    }


def _energy(designs, layers, trace, accs, numerics, rows):
    traffic = _traffic(layers, trace, numerics, rows[3])
    sums = _design_sums(np.column_stack([traffic[c] for c in SUMS]), rows)
    assert not np.isnan(sums).any()
    s = {c: sums[:, i] for i, c in enumerate(SUMS)}
    n = len(designs)
    cols = {c: np.zeros(n) for c in ("e_tensor", "e_sparse", "e_csr", "e_vector", "dram",
                                    "onchip", "static", "board")}
    gaps = np.empty(n, dtype=object)
    for i in range(n):
        gaps[i] = []
    unknown = np.zeros(n, dtype=bool)
    traffic = s["value_bytes"] + s["index_bytes"] + s["feature_onchip_bytes"]
    always = np.ones(n)
    hw_names = designs["hardware"].astype(str).to_numpy(dtype=object)
    dt, cd, vd = numerics.dtype, numerics.csr_dtype, numerics.vector_dtype
    for name in pd.unique(hw_names):
        acc = accs[name]
        rows = hw_names == name
        if not has_energy_figures(acc):
            unknown |= rows
        tensor_work = s["tensor_flops"] + s["sparse_tensor_flops"]
        figures = {
            "e_tensor": _figure(acc, f"tensor_pj_per_flop.{dt}", tensor_work, gaps, rows),
            "e_csr": _figure(acc, f"vector_pj_per_flop.{cd}", s["csr_flops"], gaps, rows),
            "e_vector": _figure(acc, f"vector_pj_per_flop.{vd}", s["elementwise_flops"], gaps,
                                rows),
            "dram": _figure(acc, "dram_pj_per_byte", traffic, gaps, rows),
            "onchip": _figure(acc, "onchip_pj_per_byte", traffic, gaps, rows),
            "static": _figure(acc, "static_power_w", always, gaps, rows),
        }
        figures["e_sparse"] = _figure(acc, f"sparse_tensor_pj_per_flop.{dt}",
                                      s["sparse_tensor_flops"], gaps, rows,
                                      note="dense tensor figure used")
        if figures["e_sparse"] is None:
            figures["e_sparse"] = figures["e_tensor"]
        for column, value in figures.items():
            cols[column][rows] = 0.0 if value is None else value
        cols["board"][rows] = np.nan if acc.board_power_w is None else acc.board_power_w
    unpriced = np.array(["; ".join(g) for g in gaps], dtype=object)
    tensor = PJ * s["tensor_flops"] * cols["e_tensor"]
    sparse = PJ * s["sparse_tensor_flops"] * cols["e_sparse"]
    vector = PJ * (s["csr_flops"] * cols["e_csr"] + s["elementwise_flops"] * cols["e_vector"])
    per_byte = PJ * (cols["dram"] + cols["onchip"])
    weights = s["value_bytes"] * per_byte
    index = s["index_bytes"] * per_byte
    features = PJ * (s["feature_dram_bytes"] * cols["dram"]
                     + s["feature_onchip_bytes"] * cols["onchip"])
    dram = PJ * cols["dram"] * (s["value_bytes"] + s["index_bytes"] + s["feature_dram_bytes"])
    onchip = PJ * cols["onchip"] * (s["value_bytes"] + s["index_bytes"]
                                    + s["feature_onchip_bytes"])
    dynamic = tensor + sparse + vector + weights + index + features
    latency = designs["latency_s"].to_numpy(dtype=np.float64)
    headroom = cols["board"] - cols["static"]
    with np.errstate(invalid="ignore"):
        capped_at = np.where(np.isnan(headroom), 0.0, dynamic / headroom)
    capped = capped_at > latency
    capped_latency = np.where(capped, capped_at, latency)
    static = cols["static"] * capped_latency
    energy = dynamic + static
    batch = designs["batch"].to_numpy(dtype=np.float64)
    new = {
        "energy_j": energy, "energy_per_inference_j": energy / batch,
        "avg_power_w": energy / capped_latency, "edp_js": energy * capped_latency,
        "power_capped": capped, "capped_latency_s": capped_latency,
        "energy_tensor_j": tensor, "energy_sparse_tensor_j": sparse, "energy_vector_j": vector,
        "energy_weights_j": weights, "energy_index_j": index, "energy_features_j": features,
        "energy_dram_j": dram, "energy_onchip_j": onchip, "energy_static_j": static,
        "energy_feature_share": np.divide(features, energy, out=np.full(n, np.nan),
                                          where=energy > 0),
        "energy_unpriced": unpriced,
    }
    if unknown.any():
        for column, values in new.items():
            if column.startswith(("energy_", "avg_power", "edp")) and column != "energy_unpriced":
                new[column] = np.where(unknown, np.nan, values)
    return {column: new[column] for column in ENERGY_COLUMNS}


def _memory(designs, layers, trace, accs, numerics, rows):
    ops = trace.ops
    vb = float(numerics.value_bytes)
    is_prunable = ops["prunable"].to_numpy(dtype=bool)
    fixed = float(weight_bytes_dense(trace, numerics)[~is_prunable].sum())
    op = rows[3]
    in_trace = op >= 0
    prunable = np.zeros(len(layers), dtype=bool)
    prunable[in_trace] = is_prunable[op[in_trace]]
    weight_bytes = layers["weight_bytes"].to_numpy(dtype=np.float64)
    share = weight_read_share(trace, op[prunable],
                              layers["batch"].to_numpy(dtype=np.float64)[prunable])
    if share is not None:
        weight_bytes = weight_bytes.copy()
        weight_bytes[prunable] = weight_bytes[prunable] / share
    stored = _design_sums(weight_bytes[:, None], rows, keep=prunable)[:, 0]
    weights = fixed + np.where(np.isnan(stored), 0.0, stored)
    batch = designs["batch"].to_numpy(dtype=np.float64)
    fusions = designs["fusion"].astype(str).to_numpy(dtype=object)
    per_sample = np.array([activation_peak(trace, f).dram_elems for f in fusions]) * vb
    onchip = np.array([activation_peak(trace, f).onchip_elems for f in fusions]) * vb * batch
    activations = per_sample * batch
    peak = weights + activations
    names = designs["hardware"].astype(str).to_numpy(dtype=object)
    capacity = np.array([np.nan if accs[h].dram_capacity_bytes is None
                         else accs[h].dram_capacity_bytes for h in names])
    l2 = np.array([np.nan if accs[h].l2_bytes is None else accs[h].l2_bytes for h in names])
    known = ~np.isnan(capacity)
    room = np.where(known, capacity - weights, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        largest = np.where(per_sample > 0, np.floor(room / per_sample), MAX_BATCH)
    largest = np.where(room < 0, 0, np.clip(largest, 0, MAX_BATCH))
    on_chip_unknown = np.isnan(l2) & (onchip > 0)
    return {
        "weight_storage_bytes": weights, "activation_peak_bytes": activations,
        "onchip_peak_bytes": onchip, "peak_memory_bytes": peak,
        "dram_capacity_bytes": capacity,
        "fits": pd.arrays.BooleanArray(np.where(known, peak <= capacity, False), ~known),
        "largest_batch_that_fits": pd.arrays.IntegerArray(largest.astype(np.int64), ~known),
        "fits_on_chip": pd.arrays.BooleanArray(onchip <= np.nan_to_num(l2, nan=np.inf),
                                               on_chip_unknown),
    }


def _language(table, trace, value_bytes, kv_dtype_bytes):
    p = trace.provenance
    kvb = value_bytes if kv_dtype_bytes is None else kv_dtype_bytes
    decode = p["phase"] == "decode"
    latency = table["latency_s"]
    nothing = pd.Series(float("nan"), index=table.index)
    batch = table["batch"].to_numpy(dtype=np.float64)
    weights = (table["weight_storage_bytes"].to_numpy(dtype=np.float64)
               + (p["resident_weight_elems"] - trace.params) * value_bytes)
    kv_per_request = p["kv_cache_elems"] * kvb
    per_request = table["activation_peak_bytes"].to_numpy(dtype=np.float64) / batch \
        + kv_per_request
    peak = weights + per_request * batch
    capacity = table["dram_capacity_bytes"].to_numpy(dtype=np.float64)
    known = ~np.isnan(capacity)
    with np.errstate(invalid="ignore"):
        largest = np.clip(np.floor((capacity - weights) / per_request), 0, MAX_BATCH)
    columns = {
        "phase": p["phase"], "context": p["context"],
        "tokens_per_s": table["batch"] / latency if decode else nothing,
        "time_per_token_s": latency if decode else nothing,
        "ttft_s": nothing if decode else latency,
        "kv_bytes_per_token": p["kv_elems_per_token"] * kvb,
        "kv_cache_bytes": batch * kv_per_request, "params": p["params"],
        "weight_storage_bytes": weights, "peak_memory_bytes": peak}
    largest = pd.arrays.IntegerArray(np.where(known, largest, 0).astype(np.int64), ~known)
    columns.update({
        "fits": pd.arrays.BooleanArray(np.where(known, peak <= capacity, False), ~known),
        "largest_batch_that_fits": largest, "max_batch": largest.copy()})
    return columns


def _dtypes(table, numerics, language):
    out = table.assign(dtype=numerics.dtype, vector_dtype=numerics.vector_dtype,
                       csr_dtype=numerics.csr_dtype, index_bytes=numerics.index_width_bytes,
                       weight_dtype=numerics.weight_label)
    rows = [language] * len(out) if isinstance(language, bool) else list(language)
    if any(rows):
        kv = numerics.kv_dtype or numerics.dtype
        out["kv_dtype"] = [kv if r else None for r in rows]
    last = [c for c in DTYPE_COLUMNS if c in out]
    return out[[c for c in out if c not in last] + last]


def _reference_evaluate(trace, hardware, formats, batches, fusion="unfused", scope="gemm",
                        numerics=dse.roofline.DEFAULT_NUMERICS):
    """``dse.evaluate`` as the frames built it (uncalibrated)."""
    trace = load_trace(trace) if isinstance(trace, str) else trace
    accs = accelerators(hardware)
    formats = [formats] if isinstance(formats, str) else list(formats)
    batches = [batches] if isinstance(batches, int) else list(batches)
    fusions = [fusion] if isinstance(fusion, str) else list(fusion)
    scopes = [scope] if isinstance(scope, str) else list(scope)
    language = bool(trace.provenance.get("phase"))
    table = dse.roofline.evaluate(trace, accs, formats, batches, fusion=fusions, scope=scopes,
                                  numerics=numerics)
    layers = pd.concat([dse.roofline.evaluate_layers(trace, accs, formats, batches, fusion=f,
                                                     scope=s, numerics=numerics)
                        for f in dict.fromkeys(fusions) for s in dict.fromkeys(scopes)],
                       ignore_index=True)
    by_name = accelerator_table(accs)
    rows = _layer_rows(table, layers, trace)
    table = _with_columns(table, _energy(table, layers, trace, by_name, numerics, rows)
                          | _memory(table, layers, trace, by_name, numerics, rows))
    if language:
        table = _with_columns(table, _language(table, trace, numerics.value_bytes,
                                               numerics.kv_value_bytes)
                              | {"weight_dtype": numerics.weight_label,
                                 "kv_dtype": numerics.kv_dtype or numerics.dtype})
    return _dtypes(table, numerics, language)


# --- the comparisons ----------------------------------------------------------------------------


def assert_same_frame(mine: pd.DataFrame, theirs: pd.DataFrame) -> None:
    """Equal bit for bit: values (floats by their bytes), dtypes, array types, column order and
    the index's and columns' types."""
    pd.testing.assert_frame_equal(mine, theirs, check_exact=True)
    assert type(mine.index) is type(theirs.index)
    assert mine.columns.dtype == theirs.columns.dtype
    assert list(mine.columns) == list(theirs.columns)
    for c in theirs.columns:
        assert mine[c].dtype == theirs[c].dtype, c
        assert type(mine[c].array) is type(theirs[c].array), c
        if theirs[c].dtype.kind == "f":
            assert mine[c].to_numpy().tobytes() == theirs[c].to_numpy().tobytes(), c


LLAMA_DECODE = load_model("llama-3-8b", "decode", 2048)
LLAMA_PREFILL = load_model("llama-3-8b", "prefill", 512)
HARDWARE = ["a100", "h100-sxm"]
FORMATS = ["dense", "2:4", "block4@87.5%", "unstructured@0.875"]
INT4 = dse.Numerics(weight_dtype="int4")
KV_FP8 = dse.Numerics(kv_dtype="fp8")
INT4_KV_FP8 = dse.Numerics(weight_dtype="int4", kv_dtype="fp8")

CASES = [
    pytest.param(("resnet50", "a100", ["dense", "2:4"], [1]), {}, id="resnet50-2-designs"),
    *[pytest.param((model, HARDWARE, FORMATS, [1, 8]), {}, id=f"{model}-grid")
      for model in ("resnet50", "convnext_tiny", "deit_small")],
    pytest.param(("resnet50", HARDWARE, FORMATS, [1, 8]), {"numerics": INT4, "scope": "all"},
                 id="resnet50-int4-all"),
    pytest.param(("deit_small", "h100-sxm", ["2:4", "unstructured@0.9"], [8]),
                 {"fusion": ["unfused", "fused", "fused_prefetched"], "scope": ["gemm", "all"]},
                 id="deit-fusions-scopes"),
    pytest.param(("toy_hybrid", ["v100", "a100"], FORMATS, [1, 4]),
                 {"fusion": ["rules:inductor-cpu", "unfused"]}, id="toy-fallbacks-rules"),
    *[pytest.param((model, hardware, ["1:4", "2:8", "block4@0.99"], [1, 8]), {},
                   id=f"{model}-csr-and-dense-hw-fallbacks")
      for model, hardware in (("toy_hybrid", ["h100-sxm", "v100"]),
                              ("resnet50", ["a100", "l4"]))],
    # Above 64 designs: the bound's general path, and the table through pd.DataFrame.
    pytest.param(("toy_hybrid", ["a100", "h100-sxm", "v100"], FORMATS, [1, 2, 4, 8, 16, 32]),
                 {"fusion": ["unfused", "fused"]}, id="toy-144-rows"),
    pytest.param(("toy_hybrid", "epyc-zen5-2c", ["2:4", "unstructured@0.5"], [1]),
                 {"numerics": dse.Numerics(dtype="bf16", vector_dtype="fp32")},
                 id="toy-cpu-spec"),
    pytest.param((LLAMA_DECODE, "h100-sxm", ["2:4"], [1, 16]), {"scope": "all"},
                 id="llm-decode"),
    pytest.param((LLAMA_DECODE, HARDWARE, FORMATS, [1, 8]), {"numerics": INT4_KV_FP8},
                 id="llm-decode-int4-kv-fp8"),
    pytest.param((LLAMA_PREFILL, HARDWARE, FORMATS, [1, 8]),
                 {"numerics": KV_FP8, "scope": ["gemm", "all"]}, id="llm-prefill-kv-fp8"),
    pytest.param((LLAMA_PREFILL, "a100", ["2:4"], [1]), {"fusion": ["fused", "unfused"]},
                 id="llm-prefill-fused"),
    # Routed experts: the weights a step reads depend on the batch, all of them resident.
    pytest.param((load_model("mixtral-8x7b", "decode", 2048), "h100-sxm",
                  ["2:4", "unstructured@0.7"], [1, 8]), {"numerics": INT4, "scope": "all"},
                 id="mixtral-decode-int4"),
]


@pytest.mark.parametrize(("args", "kwargs"), CASES)
def test_evaluate_is_the_frames_table_bit_for_bit(args, kwargs, monkeypatch):
    taken = []
    real = dse.api.design_table

    def spy(*a, **k):
        taken.append(real(*a, **k) is not None)
        return real(*a, **k)

    monkeypatch.setattr(dse.api, "design_table", spy)
    mine = dse.evaluate(*args, **kwargs)
    assert taken == [True]  # the arrays' path, not the frames' one
    assert_same_frame(mine, _reference_evaluate(*args, **kwargs))


@pytest.mark.parametrize(("args", "kwargs"), [
    pytest.param(("toy_hybrid", "a100", ["2:4"], [1, 1]), {}, id="a-batch-twice"),
    pytest.param(("toy_hybrid", ["a100", "a100"], ["2:4"], [1]), {}, id="a-spec-twice"),
])
def test_keys_naming_several_designs_take_the_frames_path(args, kwargs):
    # Each design sums every layer row its printed keys match, its twin's too: the frames'
    # path gives that, so design_table declines.
    trace, hardware, formats, batches = args
    assert design_table(load_trace(trace), accelerators(hardware), formats, batches,
                        ["unfused"], ["gemm"]) is None
    assert_same_frame(dse.evaluate(*args, **kwargs), _reference_evaluate(*args, **kwargs))


def test_categorical_and_refusals_are_as_before():
    table = dse.evaluate("toy_hybrid", HARDWARE, FORMATS, [1, 4], categorical=True)
    reference = _reference_evaluate("toy_hybrid", HARDWARE, FORMATS, [1, 4])
    assert isinstance(table["hardware"].dtype, pd.CategoricalDtype)
    pd.testing.assert_frame_equal(table.astype({c: str for c in table if
                                                isinstance(table[c].dtype,
                                                           pd.CategoricalDtype)}),
                                  reference, check_exact=True)
    with pytest.raises(dse.roofline.EvaluationError, match="unknown fusion 'nope'"):
        dse.evaluate("toy_hybrid", "a100", "2:4", fusion="nope")
    with pytest.raises(dse.roofline.EvaluationError, match="batch size 0"):
        dse.evaluate("toy_hybrid", "a100", "2:4", 0)


def test_a_returned_table_is_the_callers_own():
    # The string columns share pandas' immutable storage with a cache: writing to one table
    # changes neither the cache nor the next table.
    first = dse.evaluate("toy_hybrid", "a100", ["2:4"], [1])
    first.loc[0, "dtype"] = "changed"
    first.loc[0, "hardware"] = "changed"
    first["latency_s"] *= 2
    second = dse.evaluate("toy_hybrid", "a100", ["2:4"], [1])
    assert_same_frame(second, _reference_evaluate("toy_hybrid", "a100", ["2:4"], [1]))


@pytest.mark.parametrize("contiguous", [True, False])
@pytest.mark.parametrize("nan", [True, False])
def test_group_sums_are_groupbys(contiguous, nan):
    # pandas sums contiguous groups without NaN by reduceat, the others compensated: the bits
    # of either, as DataFrame.groupby(sort=False).sum() gives them.
    rng = np.random.default_rng(7)
    for _ in range(40):
        n, c, g = int(rng.integers(1, 1500)), int(rng.integers(1, 9)), int(rng.integers(1, 12))
        values = rng.standard_normal((n, c)) * 10.0 ** rng.integers(-4, 17, (n, c))
        if nan:
            values[rng.random((n, c)) < 0.02] = np.nan
        labels = rng.integers(-1, g, n)
        if contiguous:
            labels = np.sort(labels)
        kept = labels >= 0
        expected = _pandas_group_sums(np.ascontiguousarray(values[kept]), labels[kept], g)
        assert group_sums(values, labels, g).tobytes() == expected.tobytes()


def test_frame_is_pandas_own():
    columns = {"s": np.array(["a100", "", "h100"], dtype=object), "c": "fp16", "i": 4,
               "x": 2.5, "f": np.array([1.0, np.nan, -0.0]), "n": np.array([3, 2, 1]),
               "b": np.array([False, True, True]),
               "k": pd.arrays.BooleanArray(np.array([True, False, True]),
                                           np.array([False, True, False])),
               "m": pd.arrays.IntegerArray(np.array([0, 5, 1]), np.array([True, False, False])),
               "o": np.array(["x", None, "y"], dtype=object)}
    assert_same_frame(design_columns._frame(columns, 3), pd.DataFrame(columns))
    del columns["o"]  # a None: through pd.DataFrame itself; without, the direct path
    assert design_columns._direct_frames()
    assert_same_frame(design_columns._direct_frame(columns, 3), pd.DataFrame(columns))


#: One column of each kind a table may hand _frame, three rows each: those the direct path
#: builds itself, and those it must hand to pd.DataFrame (objects that are not all strings).
_KINDS = {
    "strings": np.array(["a100", "", "h100"], dtype=object), "string": "fp16", "int": 4,
    "float": 2.5, "floats": np.array([1.0, np.nan, -0.0]), "ints": np.array([3, 2, 1]),
    "bools": np.array([False, True, True]),
    "nullable bools": pd.arrays.BooleanArray(np.array([True, False, True]),
                                             np.array([False, True, False])),
    "nullable ints": pd.arrays.IntegerArray(np.array([0, 5, 1]), np.array([True, False, False])),
    "all None": np.array([None, None, None], dtype=object),
    "ints as objects": np.array([1, 2, 3], dtype=object),
    "a string and a None": np.array(["x", None, "y"], dtype=object)}


@pytest.mark.parametrize("kind", list(_KINDS))
def test_frame_is_pandas_own_for_each_kind_of_column_alone_and_first(kind):
    """_frame's contract, one kind of column at a time, alone and ahead of the others (the
    direct path looks at the columns in order, and hands the whole frame to pd.DataFrame at
    the first it does not build): always pd.DataFrame's frame with a RangeIndex of its rows."""
    alone = {kind: _KINDS[kind]}
    first = {kind: _KINDS[kind], **{k: v for k, v in _KINDS.items() if k != kind}}
    for columns in (alone, first):  # the index given, as pd.DataFrame needs for scalars alone
        assert_same_frame(design_columns._frame(columns, 3),
                          pd.DataFrame(columns, index=pd.RangeIndex(3)))


@pytest.mark.parametrize("language", [False, True, [True, False, True, False]])
def test_dtype_columns_are_the_assigns(language):
    numerics = dse.Numerics(weight_dtype="int4", kv_dtype="fp8")
    bound = dse.roofline.evaluate("toy_hybrid", "a100", ["2:4"], [1, 2])
    tables = [bound, bound.iloc[:0], bound.set_axis([5, 5, 7, 7]),
              bound.assign(kv_dtype="fp16", dtype="x"), bound.assign(weight_dtype="fp16")]
    for table in tables:
        flags = language if isinstance(language, bool) else language[:len(table)]
        assert_same_frame(with_dtype_columns(table, numerics, flags),
                          _dtypes(table, numerics, flags))
    layers = dse.roofline.evaluate_layers("toy_hybrid", "a100", ["2:4"], [1, 2])
    assert_same_frame(with_dtype_columns(layers, numerics, True),
                      _dtypes(layers, numerics, True))


@pytest.mark.parametrize("model", ["llama-3-8b", "resnet50"])
def test_a_design_fits_at_exactly_its_peak_memory(model):
    # The memory fit's edge, on the table built from arrays: a device whose DRAM holds the
    # design's peak memory to the byte fits it; one byte less does not.
    import dataclasses

    import accelerator_models

    trace = load_model(model, "decode", 2048) if model.startswith("llama") else model
    h100 = accelerator_models.load("h100-sxm")
    peak = float(dse.evaluate(trace, h100, "2:4", 4).set_index("format")
                 .loc["2:4", "peak_memory_bytes"])
    for capacity, fits in ((peak, True), (np.nextafter(peak, 0.0), False)):
        hw = dataclasses.replace(h100, dram_capacity_bytes=capacity)
        row = dse.evaluate(trace, hw, "2:4", 4).set_index("format").loc["2:4"]
        assert row["peak_memory_bytes"] == peak and bool(row["fits"]) is fits


def test_no_direct_frames_where_pandas_infers_no_str_dtype():
    """The direct frame is built for pandas' ``str`` dtype: with the (pandas 3, deprecated)
    option that turns its inference off, dse builds frames by pd.DataFrame again."""
    import warnings

    assert design_columns._direct_frames() is True  # this pandas: str inferred
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the option's deprecation
        with pd.option_context("future.infer_string", False):
            assert design_columns._direct_frames() is False


def test_frame_is_pandas_own_where_pandas_infers_no_str_dtype():
    """With pandas' (deprecated) option that turns off str inference, a small table is
    pd.DataFrame's own: object columns of strings, not the direct path's str arrays."""
    import warnings

    columns = {"s": np.array(["a100", "h100"], dtype=object), "c": "fp16", "x": 2.5}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the option's deprecation
        with pd.option_context("future.infer_string", False):
            expected = pd.DataFrame(columns)
            got = design_columns._frame(columns, 2)
    assert expected["s"].dtype == object and expected["c"].dtype == object
    assert_same_frame(got, expected)


def test_design_table_adds_no_language_model_columns_unless_asked():
    """design_table (public) of a vision trace, ``language`` left out: no language model
    columns (they would read the trace's phase, which a vision trace has not)."""
    table = design_table(load_trace("toy_hybrid"), accelerators("a100"), ["2:4"], [1],
                         ["unfused"], ["gemm"])
    assert table is not None and "tokens_per_s" not in table and "fits" in table


def test_language_columns_name_the_kv_cache_dtype_or_the_compute_one():
    """with_language_model_columns (the frames' path): kv_dtype is the KV cache's dtype where
    numerics give one (fp8), else the compute dtype (fp16); weight_dtype the weights'."""
    from dse.design_columns import with_language_model_columns

    table = dse.evaluate(LLAMA_DECODE, "h100-sxm", ["2:4"], [1])
    fp8 = with_language_model_columns(table, LLAMA_DECODE, INT4_KV_FP8)
    plain = with_language_model_columns(table, LLAMA_DECODE)
    assert len(table) > 0
    assert set(fp8["kv_dtype"]) == {"fp8"} and set(fp8["weight_dtype"]) == {"int4 (group 128)"}
    assert set(plain["kv_dtype"]) == {"fp16"} and set(plain["weight_dtype"]) == {"fp16"}
