"""reports: every chart builder's frame checked by value, every chart rendered by vl-convert,
and write_report's files, offline page, atomicity and errors."""

from __future__ import annotations

import math
import os
import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import vl_convert

import accelerator_models
import dse
import reports
from dse.accuracy.table import DEFAULT_TABLE, load_accuracy_table
from reports import html as report_html
from search.scoring import VERDICTS, rank, score
from search.target import make_objective, parse_target

MODEL = "convnext_tiny"
FORMATS = ["2:4", "1:4", "2:8", "2:16", "block4@75%", "block4@87.5%", "block16@87.5%",
           "unstructured@75%", "unstructured@90%"]
PATTERNS = ["sparse_tensor.patterns=2:4,1:4,2:8,2:16"]


# --- end-to-end inputs: real evaluations of the shipped trace on an A100 ------------------------

@pytest.fixture(scope="module")
def a100():
    return accelerator_models.load("a100", PATTERNS)


@pytest.fixture(scope="module")
def evaluated(a100):
    return dse.evaluate(MODEL, a100, FORMATS, [1, 8, 32], "unfused", "gemm")


@pytest.fixture(scope="module")
def layers(a100):
    return dse.evaluate_layers(MODEL, a100, FORMATS, 1, "unfused", "all")


@pytest.fixture(scope="module")
def accuracy():
    table = load_accuracy_table(DEFAULT_TABLE)
    found = table.lookup_many(MODEL, ["dense", *FORMATS])
    return {f: (a, s) for f, a, s in zip(found["format"], found["accuracy"], found["status"],
                                         strict=True)}


@pytest.fixture(scope="module")
def with_accuracy(evaluated, accuracy):
    rows = evaluated[evaluated["batch"] == 1].copy()
    rows["accuracy"] = rows["format"].map(lambda f: accuracy[f][0])
    return rows


@pytest.fixture(scope="module")
def results(a100, accuracy):
    """Search results as `dse search` builds them: categorical labels, scored, ranked."""
    rows = dse.evaluate(MODEL, a100, FORMATS, [1, 32], "unfused", "gemm", categorical=True)
    rows["hw_point"] = 0
    scored = score(rows, set(FORMATS) - {"2:4"}, accuracy, parse_target("1.3x_over_2:4"))
    return rank(scored, make_objective("pareto", None))


def render_svg(chart) -> str:
    svg = vl_convert.vegalite_to_svg(chart.to_json())
    assert svg.lstrip().startswith("<svg")
    return svg


# --- 1. Sparsity Roofline -----------------------------------------------------------------------

def test_sparsity_roofline_data_by_value():
    frame = pd.DataFrame({
        "model": ["m", "m", "m", "m", "m", "m"],
        "format": ["unstructured@90%", "block16@75%", "2:4", "dense", "block4@87.5%", "1:4"],
        "family": ["unstructured", "block", "nm", "dense", "block", "nm"],
        "sparsity": [0.9, 0.75, 0.5, 0.0, 0.875, 0.75],
        "speedup": [0.8, 1.5, 1.3, 1.0, 1.7, 1.4],
        "accuracy": [90.0, 94.0, 95.0, 96.0, 93.0, math.nan],
    })
    data = reports.sparsity_roofline_data(frame)
    assert list(data.columns) == ["model", "format", "group", "sparsity", "sparsity_label",
                                  "speedup", "accuracy", "label"]
    # each point labelled with its format; dense, the reference, with none
    assert list(data["label"]) == ["", "2:4", "block4@87.5%", "block16@75%", "unstructured@90%"]
    # 1:4 has no accuracy and is dropped; order: dense, N:M, block4, block16, unstructured.
    assert list(data["format"]) == ["dense", "2:4", "block4@87.5%", "block16@75%",
                                    "unstructured@90%"]
    assert list(data["group"]) == ["dense", "N:M", "block4", "block16", "unstructured"]
    assert list(data["sparsity_label"]) == ["0%", "50%", "87.5%", "75%", "90%"]
    assert list(data["speedup"]) == [1.0, 1.3, 1.7, 1.5, 0.8]
    assert list(data["accuracy"]) == [96.0, 95.0, 93.0, 94.0, 90.0]


def test_sparsity_roofline_data_refuses_mixed_batches_and_missing_columns(evaluated):
    with pytest.raises(ValueError, match="batch"):
        reports.sparsity_roofline_data(evaluated.assign(accuracy=90.0))
    with pytest.raises(ValueError, match="accuracy"):
        reports.sparsity_roofline_data(evaluated[evaluated["batch"] == 1])


def test_sparsity_roofline_end_to_end(with_accuracy):
    data = reports.sparsity_roofline_data(with_accuracy)
    assert len(data) == len(FORMATS) + 1
    dense = data[data["format"] == "dense"].iloc[0]
    assert dense["group"] == "dense" and dense["speedup"] == 1.0
    assert set(data["group"]) == {"dense", "N:M", "block4", "block16", "unstructured"}
    merged = data.merge(with_accuracy, on="format", suffixes=("", "_in"))
    np.testing.assert_array_equal(merged["speedup"], merged["speedup_in"])
    svg = render_svg(reports.sparsity_roofline_chart(data))
    assert "mark-symbol" in svg and "mark-line" in svg and "87.5%" in svg


# --- 2. roofline --------------------------------------------------------------------------------

def fake_accelerator(nonzero_rate=1.0):
    rates = {"fp16": 100.0, "fp32": 25.0}
    return SimpleNamespace(name="fake", dram_bandwidth_bytes_per_s=10.0,
                           tensor_rate=lambda d: 400.0, vector_rate=lambda d: rates[d],
                           nonzero_rate=nonzero_rate, sparse_tensor=object(), cache_levels=())


def test_roofline_data_by_value():
    layers = pd.DataFrame({
        "model": "m", "hardware": "fake", "format": ["dense", "2:4", "dense", "dense"],
        "op": ["a", "b", "no-bytes", "no-flops"],
        "unit": ["tensor", "sparse_tensor", "tensor", "vector"],
        "bound": ["memory", "compute", "compute", "memory"],
        "flops": [300.0, 8000.0, 50.0, 0.0], "dram_bytes": [30.0, 16.0, 0.0, 12.0],
        "time_s": [3.0, 10.0, 0.125, 1.2]})
    data = reports.roofline_data(layers, fake_accelerator(2.0))
    ops = data[data["series"] == "op"]
    assert list(ops["op"]) == ["a", "b"]  # zero bytes and zero FLOPs dropped
    assert list(ops["intensity"]) == [10.0, 500.0]
    assert list(ops["flops_per_s"]) == [100.0, 800.0]
    knees = data[data["series"] == "knee"].set_index("roof")
    assert knees["intensity"].to_dict() == {
        "tensor fp16": 40.0, "sparse tensor fp16 (x2)": 80.0, "vector fp16": 10.0,
        "vector fp32 (CSR)": 2.5}
    assert knees["flops_per_s"].to_dict() == {
        "tensor fp16": 400.0, "sparse tensor fp16 (x2)": 800.0, "vector fp16": 100.0,
        "vector fp32 (CSR)": 25.0}
    peaks = knees["flops_per_s"]
    for name, line in data[data["series"] == "roof"].groupby("roof"):
        x = line["intensity"].to_numpy()
        np.testing.assert_allclose(line["flops_per_s"], np.minimum(peaks[name], 10.0 * x),
                                   rtol=1e-15)
        assert knees.loc[name, "intensity"] in set(x)  # the corner is sampled exactly
        assert np.all(np.diff(x) > 0)
        # Covers the ops (2x each way) and every knee's flat part.
        assert x.min() <= 10.0 / 2 and x.max() >= 4 * 80.0


def test_roofline_data_without_sparse_roof_when_rate_is_one():
    layers = pd.DataFrame({"model": "m", "format": ["dense"], "op": ["a"], "unit": ["tensor"],
                           "bound": ["memory"], "flops": [1.0], "dram_bytes": [1.0],
                           "time_s": [1.0]})
    data = reports.roofline_data(layers, fake_accelerator(1.0), dse.Numerics(csr_dtype="fp16"))
    assert set(data["roof"].dropna()) == {"tensor fp16", "vector fp16"}
    with pytest.raises(ValueError, match="hardware"):
        reports.roofline_data(pd.concat([layers.assign(hardware="x"),
                                         layers.assign(hardware="y")]), fake_accelerator())


def test_roofline_end_to_end_ops_sit_on_their_roofs(layers, a100):
    data = reports.roofline_data(layers, a100)
    ops = data[data["series"] == "op"]
    priced = (layers["flops"] > 0) & (layers["dram_bytes"] > 0)
    assert len(ops) == int(priced.sum()) and (~priced).any()  # scope "all": vector ops w/o GEMM
    bw = a100.dram_bandwidth_bytes_per_s
    assert data.loc[data["series"] == "knee"].set_index("roof").loc[
        "tensor fp16", "intensity"] == a100.tensor_rate("fp16") / bw
    roof = np.minimum(a100.tensor_rate("fp16"), bw * ops["intensity"])
    on_tensor = ops["unit"].isin(["tensor", "sparse_tensor"]).to_numpy()
    # Speed of light: an op on the tensor cores attains exactly min(peak, bw x intensity)
    # (the A100's nonzero_rate is 1); vector-core ops stay under the fastest vector roof.
    np.testing.assert_allclose(ops["flops_per_s"][on_tensor], roof[on_tensor], rtol=1e-9)
    vector_roof = np.minimum(a100.vector_rate("fp16"), bw * ops["intensity"])
    assert np.all(ops["flops_per_s"][~on_tensor] <= vector_roof[~on_tensor] * (1 + 1e-9))
    svg = render_svg(reports.roofline_chart(data))
    assert "mark-symbol" in svg and "mark-line" in svg and "knee 201 FLOP/B" in svg


# --- 3. bound mix -------------------------------------------------------------------------------

def test_bound_mix_data_by_value():
    layers = pd.DataFrame({
        "model": "m", "batch": 1,
        "format": ["dense", "dense", "dense", "block4@50%", "block4@50%"],
        "bound": ["memory", "compute", "memory", "memory", "memory"],
        "time_s": [1.0, 2.0, 5.0, 3.0, 1.0]})
    data = reports.bound_mix_data(layers)
    assert list(data.columns) == ["model", "format", "block_size", "bound", "ops", "time_s",
                                  "op_share", "time_share", "batch"]
    assert list(data["batch"]) == [1, 1, 1]
    assert list(data["format"]) == ["dense", "dense", "block4@50%"]
    assert list(data["bound"]) == ["compute", "memory", "memory"]
    assert list(data["ops"]) == [1, 2, 2]
    assert list(data["time_s"]) == [2.0, 6.0, 4.0]
    assert list(data["op_share"]) == [1 / 3, 2 / 3, 1.0]
    assert list(data["time_share"]) == [0.25, 0.75, 1.0]
    assert math.isnan(data["block_size"][0]) and data["block_size"][2] == 4.0


def test_bound_mix_end_to_end(layers):
    data = reports.bound_mix_data(layers)
    per_format = data.groupby("format")
    np.testing.assert_allclose(per_format["op_share"].sum(), 1.0, rtol=1e-12)
    np.testing.assert_allclose(per_format["time_share"].sum(), 1.0, rtol=1e-12)
    assert (per_format["ops"].sum() == layers.groupby("format").size()).all()
    assert set(data.loc[data["format"].str.startswith("block"), "block_size"]) == {4.0, 16.0}
    assert data.loc[~data["format"].str.startswith("block"), "block_size"].isna().all()
    svg = render_svg(reports.bound_mix_chart(data))
    assert "mark-rect" in svg
    render_svg(reports.bound_mix_chart(data, share="op_share"))


# --- 4. feature share ---------------------------------------------------------------------------

def test_feature_share_data_by_value():
    frame = pd.DataFrame({"model": "m", "hardware": "h", "format": ["2:4", "dense", "2:4"],
                          "batch": [8, 1, 1], "feature_bytes_share": [0.9, 0.5, 0.6],
                          "speedup": [1.1, 1.0, 1.3], "latency_s": 1.0})
    data = reports.feature_share_data(frame)
    assert list(data.columns) == ["model", "format", "batch", "feature_bytes_share", "speedup",
                                  "segment", "hardware"]
    assert data.to_dict("list") == {"model": ["m"] * 3, "format": ["dense", "2:4", "2:4"],
                                    "batch": [1, 1, 8], "feature_bytes_share": [0.5, 0.6, 0.9],
                                    "speedup": [1.0, 1.3, 1.1],
                                    # 1 -> 8 more than doubles: no line joins them
                                    "segment": [1, 2, 3], "hardware": ["h"] * 3}
    joined = reports.feature_share_data(frame.assign(batch=[2, 1, 1]))
    assert list(joined["segment"]) == [1, 2, 2]  # 1 -> 2: one line


def test_feature_share_end_to_end(evaluated):
    data = reports.feature_share_data(evaluated)
    assert len(data) == len(evaluated) and set(data["batch"]) == {1, 8, 32}
    dense = data[data["format"] == "dense"]
    assert (dense["speedup"] == 1.0).all()
    # Features cannot be pruned: their share of traffic grows with batch.
    assert dense["feature_bytes_share"].is_monotonic_increasing
    svg = render_svg(reports.feature_share_chart(data))
    assert svg.count("mark-line") >= 2  # one line layer per panel, its segments in it
    assert "lines join batches at most 2x apart" in svg and "a100" in svg


# --- 5. hardware comparison ---------------------------------------------------------------------

def test_hardware_comparison_data_by_value():
    frame = pd.DataFrame({"hardware": ["h2", "h1", "h1"], "model": "m",
                          "format": ["2:4", "2:4", "dense"], "batch": 1, "fusion": "unfused",
                          "latency_s": [1.0, 2.0, 3.0], "speedup": [1.5, 1.5, 1.0],
                          "memory_bound_ops": [3, 1, 0], "ops": [4, 4, 0],
                          "feature_bytes_share": [0.5, 0.6, 0.4]})
    data = reports.hardware_comparison_data(frame)
    assert list(data.columns) == ["hardware", "model", "format", "batch", "latency_s",
                                  "speedup", "memory_bound_share", "feature_bytes_share",
                                  "fusion"]
    assert list(data["hardware"]) == ["h1", "h1", "h2"]
    assert list(data["format"]) == ["dense", "2:4", "2:4"]
    assert math.isnan(data["memory_bound_share"][0])  # no ops: no share, not 0/0
    assert list(data["memory_bound_share"][1:]) == [0.25, 0.75]


def test_hardware_comparison_end_to_end():
    frame = dse.evaluate(MODEL, ["a100", "h100"], ["2:4", "block4@87.5%"], [1, 32], "unfused")
    data = reports.hardware_comparison_data(frame)
    assert set(data["hardware"]) == {"a100-40gb", "h100-sxm"} and len(data) == 12
    expected = frame["memory_bound_ops"] / frame["ops"]
    merged = data.merge(frame.assign(expected=expected),
                        on=["hardware", "format", "batch"])
    np.testing.assert_array_equal(merged["memory_bound_share"], merged["expected"])
    assert data["memory_bound_share"].between(0, 1).all()
    svg = render_svg(reports.hardware_comparison_chart(data))
    assert "mark-rect" in svg and "h100-sxm" in svg
    # Absolute latency is charted too (dense included): that is what differs between GPUs.
    assert "latency (ms)" in svg and "Speed-of-light latency" in svg
    assert {"hw_fallback", "hw_fallback_ops", "fallback"} <= set(data.columns)


# --- 6. Pareto ----------------------------------------------------------------------------------

def brute_force_front(speedup, accuracy):
    front = []
    for i in range(len(speedup)):
        if math.isnan(accuracy[i]):
            front.append(False)
            continue
        dominated = any(
            speedup[j] >= speedup[i] and accuracy[j] >= accuracy[i]
            and (speedup[j] > speedup[i] or accuracy[j] > accuracy[i])
            for j in range(len(speedup)) if not math.isnan(accuracy[j]))
        front.append(not dominated)
    return front


def test_pareto_data_matches_brute_force():
    rng = np.random.default_rng(7)
    n = 120
    frame = pd.DataFrame({
        "model": rng.choice(["a", "b"], n), "batch": rng.choice([1, 8], n),
        "format": rng.choice(["2:4", "block4@75%", "unstructured@90%"], n),
        # Coarse values, so ties and exact duplicates occur.
        "speedup": rng.integers(0, 6, n) / 2.0, "accuracy": rng.integers(0, 6, n) + 90.0})
    frame.loc[[3, 50], "accuracy"] = np.nan
    data = reports.pareto_data(frame)
    assert list(data.columns) == ["model", "hardware", "batch", "format", "group", "speedup",
                                  "accuracy", "pareto", "verdict"]
    expected = np.zeros(n, dtype=bool)
    for _, g in frame.groupby(["model", "batch"]):
        expected[g.index] = brute_force_front(g["speedup"].tolist(), g["accuracy"].tolist())
    np.testing.assert_array_equal(data["pareto"], expected)
    assert expected.sum() >= 4 and not data["pareto"][[3, 50]].any()
    assert set(data["verdict"]) == {"no target"}


def test_pareto_data_keeps_the_search_front(results):
    data = reports.pareto_data(results)
    np.testing.assert_array_equal(data["pareto"], results["pareto"].to_numpy())
    assert list(data["format"]) == [str(f) for f in results["format"]]
    computed = reports.pareto_data(results.drop(columns="pareto"))
    for _, g in computed.groupby("batch"):
        np.testing.assert_array_equal(
            g["pareto"], brute_force_front(g["speedup"].tolist(), g["accuracy"].tolist()))
    assert set(computed["verdict"]) <= set(VERDICTS)
    svg = render_svg(reports.pareto_chart(computed))
    assert "mark-symbol" in svg and "mark-line" in svg


# --- 7. target ----------------------------------------------------------------------------------

def test_target_data_by_value():
    results = pd.DataFrame({
        "model": "m", "batch": 1,
        "role": pd.Categorical(["dense", "baseline", "candidate", "candidate", "candidate"]),
        "format": ["dense", "2:4", "1:4", "2:8", "2:16"],
        "speedup_over_baseline": [0.7, 1.0, 1.2, 1.5, 1.4],
        "accuracy_drop": [-0.5, 0.0, 0.3, 0.1, 0.2],
        "verdict": ["too slow", "too slow", "too slow", "meets", "meets"],
        "rank": pd.array([pd.NA, pd.NA, pd.NA, 1, 2], dtype="Int64")})
    data = reports.target_data(results)
    assert list(data.columns) == ["model", "hardware", "batch", "format", "group",
                                  "speedup_over_baseline", "accuracy_drop", "verdict", "rank"]
    assert list(data["format"]) == ["2:8", "2:16", "1:4"]  # ranked first, then NA
    assert list(data["rank"].astype("float").fillna(0)) == [1, 2, 0]
    assert list(data["speedup_over_baseline"]) == [1.5, 1.4, 1.2]
    assert list(data["verdict"]) == ["meets", "meets", "too slow"]


def test_target_end_to_end(results):
    data = reports.target_data(results)
    assert len(data) == int((results["role"] == "candidate").sum())
    assert "2:4" not in set(data["format"]) and "dense" not in set(data["format"])
    ranked = data[data["rank"].notna()]
    assert len(ranked) >= 1 and set(ranked["verdict"]) == {"meets"}
    assert set(data["verdict"]) <= set(VERDICTS)
    svg = render_svg(reports.target_chart(data, ratio=1.3, max_acc_drop=1.0))
    assert "mark-symbol" in svg and "mark-rule" in svg


# --- 8. tornado ---------------------------------------------------------------------------------

def test_tornado_data_by_value():
    rows = pd.DataFrame({
        "field": ["bandwidth", "tensor_rate", "nonzero_rate", "index_bytes"],
        "low_value": [1.0, 2.0, 0.5, 2.0], "high_value": [2.0, 4.0, 2.0, 8.0],
        "low_speedup": [1.2, 1.25, 1.0, 1.3], "high_speedup": [1.4, 1.3, 1.6, 1.2],
        "base_speedup": 1.25})
    data = reports.tornado_data(rows)
    assert list(data.columns) == ["field", "side", "value", "speedup", "delta"]
    # max |delta|: nonzero_rate 0.35, bandwidth 0.15, tensor_rate 0.05, index_bytes 0.05
    # (a tie: input order kept).
    assert list(data["field"]) == ["nonzero_rate"] * 2 + ["bandwidth"] * 2 + \
        ["tensor_rate"] * 2 + ["index_bytes"] * 2
    assert list(data["side"]) == ["low", "high"] * 4
    assert list(data["value"]) == [0.5, 2.0, 1.0, 2.0, 2.0, 4.0, 2.0, 8.0]
    np.testing.assert_allclose(data["delta"], data["speedup"] - 1.25, rtol=0, atol=0)
    np.testing.assert_allclose(data["delta"], [-0.25, 0.35, -0.05, 0.15, 0, 0.05, 0.05, -0.05],
                               atol=1e-12)
    svg = render_svg(reports.tornado_chart(data))
    assert "mark-rect" in svg and "nonzero_rate" in svg


def test_tornado_end_to_end(a100):
    """A real one-at-a-time sweep: DRAM bandwidth and tensor rate of the A100 at 0.5x and 2x,
    2:4 at batch 1."""
    def speedup(overrides):
        acc = accelerator_models.load("a100", [*PATTERNS, *overrides])
        frame = dse.evaluate(MODEL, acc, "2:4", 1, "unfused")
        return float(frame.loc[frame["format"] == "2:4", "speedup"].iloc[0])

    base = speedup([])
    bw = a100.dram_bandwidth_bytes_per_s
    rows = pd.DataFrame({
        "field": ["dram_bandwidth_bytes_per_s"], "low_value": [bw / 2], "high_value": [bw * 2],
        "low_speedup": [speedup([f"dram_bandwidth_bytes_per_s={bw / 2}"])],
        "high_speedup": [speedup([f"dram_bandwidth_bytes_per_s={bw * 2}"])],
        "base_speedup": [base]})
    data = reports.tornado_data(rows)
    assert list(data["value"]) == [bw / 2, bw * 2]
    np.testing.assert_allclose(data["delta"], data["speedup"] - base, rtol=0, atol=0)


# --- write_report -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sections(with_accuracy, layers, a100, evaluated, results):
    built = [
        ("sparsity-roofline", "Sparsity Roofline", reports.sparsity_roofline_data(with_accuracy),
         reports.sparsity_roofline_chart),
        ("roofline", "Roofline", reports.roofline_data(layers, a100), reports.roofline_chart),
        ("bound-mix", "Bound mix", reports.bound_mix_data(layers), reports.bound_mix_chart),
        ("feature-share", "Feature share", reports.feature_share_data(evaluated),
         reports.feature_share_chart),
        ("pareto", "Pareto front", reports.pareto_data(results), reports.pareto_chart),
        ("target", "Target", reports.target_data(results), reports.target_chart),
    ]
    return [reports.Section(name, title, chart(data), data, note=f"{title} <of> convnext")
            for name, title, data, chart in built]


def assert_same_table(back: pd.DataFrame, data: pd.DataFrame) -> None:
    """Same columns and cells, dtypes aside (a CSV keeps neither categoricals nor nullable
    integers); missing values (None, NaN, NA) and "" alike: a CSV writes all as empty."""
    assert list(back.columns) == list(data.columns)
    assert len(back) == len(data)

    def cell(v):
        if v is None or v is pd.NA or v == "" or (isinstance(v, float) and math.isnan(v)):
            return None
        return v

    for column in data.columns:
        for got, want in zip(back[column].tolist(), data[column].tolist(), strict=True):
            got, want = cell(got), cell(want)
            if isinstance(want, bool | np.bool_) or isinstance(want, str) or want is None:
                assert got == want, (column, got, want)
            else:
                assert math.isclose(got, want, rel_tol=1e-15), (column, got, want)


def snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_write_report_files_offline_page_and_csvs(tmp_path, sections, evaluated):
    folder = tmp_path / "report"
    index = reports.write_report(folder, "ConvNeXt-Tiny <A100>", sections,
                                 tables=[("All designs", evaluated)])
    assert index == folder.resolve() / "index.html"
    names = {s.name for s in sections}
    expected = {f"{n}.{ext}" for n in names for ext in ("png", "svg", "csv")}
    assert set(os.listdir(folder)) == expected | {"index.html", "table-all-designs.csv"}
    for name in names:
        assert (folder / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "<svg" in (folder / f"{name}.svg").read_text()[:200]
    page = index.read_text(encoding="utf-8")
    for name in names:
        assert f'<div class="chart" id="chart-{name}"></div>' in page
    # Nothing fetched at view time: no script or stylesheet from a URL, the libraries inlined.
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.IGNORECASE)
    assert "<script src" not in page.lower()
    assert "window.vegaEmbed=" in page and "window.__dse_rendered" in page
    assert "renderer: \"svg\"" in page and "window.__dse_errors" in page
    assert "ConvNeXt-Tiny &lt;A100&gt;" in page and "&lt;of&gt;" in page  # escaped text
    assert page.lower().count("</script>") == page.lower().count("<script")
    for section in sections:
        assert_same_table(pd.read_csv(folder / f"{section.name}.csv"), section.data)
    assert_same_table(pd.read_csv(folder / "table-all-designs.csv"), evaluated)


def test_write_report_updates_an_existing_folder_in_place(tmp_path, sections):
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    (folder / "index.html").write_text("old page")
    reports.write_report(folder, "first", sections[:1])
    reports.write_report(folder, "second", sections[1:2])
    assert (folder / "notes.txt").read_text() == "mine"
    assert "second" in (folder / "index.html").read_text()
    # The first report's files stay (updated in place, nothing deleted).
    assert (folder / "sparsity-roofline.png").exists() and (folder / "roofline.png").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".report.tmp")]


def test_write_report_failure_midway_leaves_the_folder_as_it_was(tmp_path, sections,
                                                                 monkeypatch):
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "index.html").write_text("old page")
    (folder / "roofline.csv").write_text("old,data\n")
    before = snapshot(folder)
    real = vl_convert.vegalite_to_png
    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("renderer died\nmidway")
        return real(*args, **kwargs)

    monkeypatch.setattr(report_html.vl_convert, "vegalite_to_png", flaky)
    with pytest.raises(reports.ReportError) as err:
        reports.write_report(folder, "t", sections[:4])
    assert "\n" not in str(err.value) and "bound-mix" in str(err.value)
    assert snapshot(folder) == before
    assert [p.name for p in tmp_path.iterdir()] == ["report"]  # the temporary folder is gone
    fresh = tmp_path / "fresh"
    with pytest.raises(reports.ReportError):
        calls.clear()
        reports.write_report(fresh, "t", sections[:4])
    assert not fresh.exists()


def test_write_report_moves_index_html_last(tmp_path, sections, monkeypatch):
    moved = []
    real = os.replace

    def record(src, dst):
        moved.append(os.path.basename(dst))
        return real(src, dst)

    monkeypatch.setattr(report_html.os, "replace", record)
    reports.write_report(tmp_path / "r", "t", sections[:2], tables=[("x", pd.DataFrame())])
    assert moved[-1] == "index.html" and len(moved) == 8


def test_write_report_unwritable_places(tmp_path, sections, monkeypatch):
    in_the_way = tmp_path / "file"
    in_the_way.write_text("x")
    with pytest.raises(reports.ReportError, match="file is in the way"):
        reports.write_report(in_the_way, "t", sections[:1])
    with pytest.raises(reports.ReportError, match="file is in the way"):
        reports.write_report(in_the_way / "report", "t", sections[:1])
    folder = tmp_path / "report"
    (folder / "roofline.png").mkdir(parents=True)
    with pytest.raises(reports.ReportError, match="folder is in the way"):
        reports.write_report(folder, "t", sections[1:2])
    assert not (folder / "index.html").exists()

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    # Root writes anywhere; simulate the permission error the temporary folder would meet.
    monkeypatch.setattr(report_html.tempfile, "mkdtemp", denied)
    with pytest.raises(reports.ReportError, match="Permission denied") as err:
        reports.write_report(tmp_path / "other", "t", sections[:1])
    assert str(tmp_path / "other") in str(err.value)


def test_write_report_rejects_bad_sections(tmp_path, sections):
    s = sections[0]
    bad = [reports.Section("Bad Name", "t", s.chart, s.data),
           reports.Section("index", "t", s.chart, s.data),
           reports.Section("x", "t", 42, s.data),
           reports.Section("x", "t", s.chart, [1, 2])]
    for section in bad:
        with pytest.raises(reports.ReportError):
            reports.write_report(tmp_path / "r", "t", [section])
    with pytest.raises(reports.ReportError, match="twice"):
        reports.write_report(tmp_path / "r", "t", [s, s])
    spec = {"mark": "no-such-mark", "data": {"values": [{"a": 1}]},
            "encoding": {"x": {"field": "a", "type": "quantitative"}}}
    with pytest.raises(reports.ReportError, match=s.name):
        reports.write_report(tmp_path / "r", "t", [reports.Section(s.name, "t", spec, s.data)])
    assert not (tmp_path / "r").exists()
