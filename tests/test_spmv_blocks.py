"""Per-block SpMV timings (issue 16, part 3): the instrumented kernel computes the product, its
stamps cut the nonzeros into blocks of 250, the features read the structure, and every matrix
of the dataset is rebuilt exactly from its row. Checked by value, never on timing values."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import workloads
from dse.measure.errors import BenchError
from dse.spmv.blocks import (
    BLOCK_NNZ,
    DATASETS_DIR,
    PrunedSpec,
    block_context,
    block_features,
    build,
    drift_factor,
    load_block_dataset,
    measure_matrix,
    pruned_specs,
    run_block_benchmark,
    shipped_block_datasets,
    spec_from_row,
    spec_row,
    synthetic_specs,
    timed_csr_spmv,
)
from dse.spmv.matrices import MatrixSpec


def _csr(dense) -> sp.csr_matrix:
    m = sp.csr_matrix(np.asarray(dense, dtype=np.float64))
    m.indices = m.indices.astype(np.int32)
    m.indptr = m.indptr.astype(np.int32)
    return m


def _random_with_empty_rows(rows=60, cols=50, seed=1) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    dense = rng.standard_normal((rows, cols)) * (rng.random((rows, cols)) < 0.3)
    dense[:3] = 0.0      # empty rows first,
    dense[20:25] = 0.0   # in the middle,
    dense[-4:] = 0.0     # and last
    return _csr(dense)


@pytest.mark.parametrize("block", [1, 7, 250, 10_000])
def test_the_instrumented_kernel_computes_the_product(block):
    a = _random_with_empty_rows()
    x = np.random.default_rng(2).standard_normal(a.shape[1])
    y = np.full(a.shape[0], np.nan)
    blocks = -(-a.nnz // block)
    stamps = np.zeros(blocks + 1, dtype=np.uint64)
    timed_csr_spmv(a.indptr, a.indices, a.data, x, y, block, stamps)
    np.testing.assert_allclose(y, a @ x, rtol=1e-12, atol=1e-12)
    assert (np.diff(stamps.astype(np.int64)) >= 0).all() and stamps[-1] > 0


def test_features_are_the_log_column_deltas_and_row_starts():
    # Row 0: columns 0, 3, 4; row 1 empty; row 2: columns 1, 9.
    a = _csr([[1, 0, 0, 1, 1, 0, 0, 0, 0, 0],
              [0] * 10,
              [0, 1, 0, 0, 0, 0, 0, 0, 0, 1]])
    f = block_features(a, block=4)
    assert f.shape == (2, 2, 4)
    deltas = np.log2(1 + np.array([0, 3, 1, 3, 8, 0, 0, 0], dtype=float))  # |1 - 4| = 3
    np.testing.assert_allclose(f[:, 0, :].ravel(), deltas, rtol=1e-6)
    np.testing.assert_array_equal(f[:, 1, :].ravel(), [1, 0, 0, 1, 0, 0, 0, 0])


def test_context_is_cache_footprint_and_the_last_block_share():
    c = block_context(rows=100, cols=64, nnz=600)
    assert c.shape == (3, 3)
    np.testing.assert_allclose(c[:, 0], np.log2(64 * 8))
    np.testing.assert_allclose(c[:, 1], np.log2(600 * 12 + 101 * 4))
    np.testing.assert_allclose(c[:, 2], [1.0, 1.0, 100 / 250])


def _spec(mask, sparsity=0.75, rows=32, cols=64, threshold=float("nan")):
    return PrunedSpec("m", "op", rows, cols, mask, sparsity, 7, threshold)


def test_masks_keep_what_they_promise():
    nm = _spec("2:4").build().toarray() != 0
    assert (nm.reshape(32, -1, 4).sum(axis=2) == 2).all()
    blocks = _spec("block8").build().toarray() != 0
    tiles = blocks.reshape(4, 8, 8, 8).transpose(0, 2, 1, 3).reshape(32, 64)
    assert set(tiles.sum(axis=1)) <= {0, 64}                 # whole 8x8 blocks
    assert abs(blocks.mean() - 0.25) <= 1 / 32                # 75% of the blocks gone
    magnitude = _spec("magnitude", 0.9).build()
    assert abs(magnitude.nnz / (32 * 64) - 0.1) < 0.01
    # Log-normal row scales: a magnitude mask leaves rows of unequal density.
    assert np.diff(magnitude.indptr).std() > 1.0
    w = np.abs(_spec("magnitude").weights())
    kept = _spec("global", threshold=float(np.median(w))).build()
    assert abs(kept.nnz / w.size - 0.5) < 0.01


def test_a_global_mask_shares_one_threshold_per_model():
    trace = workloads.load_trace("convnext_tiny")
    specs = [s for s in pruned_specs([trace]) if s.mask == "global" and s.sparsity == 0.9]
    assert len({s.threshold for s in specs}) == 1 and len(specs) > 3
    # Layers initialized with a wider fan-in keep more (or fewer) weights than the average.
    kept = [s.build().nnz / (s.rows * s.cols) for s in specs]
    assert max(kept) - min(kept) > 0.02


@pytest.mark.parametrize("spec", [
    MatrixSpec("blocked", 512, 8, 2, 2, None, 3),
    MatrixSpec("banded", 512, 8, 1, 1, 64, 4),
    PrunedSpec("resnet50", "fc", 100, 64, "2:8", 0.75, 11),
    PrunedSpec("resnet50", "fc", 100, 64, "global", 0.5, 11, 0.01),
])
def test_a_dataset_row_rebuilds_its_matrix_exactly(spec):
    built = spec.build()
    row = spec_row(spec) | {"rows": built.shape[0], "cols": built.shape[1]}
    assert spec_from_row(row) == spec
    again = build(row)
    assert (again != sp.csr_matrix(built)).nnz == 0


def test_the_synthetic_space_covers_sizes_blocks_and_bands():
    specs = synthetic_specs(2048)
    assert {s.n for s in specs} == {512, 1024, 2048}
    assert {s.family for s in specs} == {"blocked", "banded"}
    assert {(s.r, s.c) for s in specs} >= {(1, 1), (8, 8), (3, 3)}
    assert len({s.seed for s in specs}) == len(specs)


def test_measuring_a_matrix_returns_a_sample_of_its_blocks():
    a = MatrixSpec("blocked", 1024, 16, 1, 1, None, 5).build()
    result = measure_matrix(a, repeats=3, sample=10)
    assert result["blocks"] == -(-a.nnz // BLOCK_NNZ)
    assert result["block"][0] == 0 and result["block"][-1] == result["blocks"] - 1
    assert len(result["block"]) == 10 and (result["block_s"] > 0).all()
    assert result["spmv_s"] > 0 and result["instrumented_s"] > 0 and result["tsc_hz"] > 1e8


def test_a_budget_run_writes_a_dataset_that_loads_back(tmp_path):
    specs = [MatrixSpec("blocked", 512, 4, 1, 1, None, i) for i in range(3)]
    specs.append(PrunedSpec("toy", "fc", 40, 40, "magnitude", 0.5, 1))
    heard = []
    data = run_block_benchmark(specs, 60, repeats=3, sample=4,
                               progress=lambda d, t: heard.append((d, t)))
    assert len(data.matrices) == 4 and data.skipped == 0 and heard[-1] == (4, 4)
    assert (data.matrices["reference_s"] > 0).all()
    path = tmp_path / "blocks.parquet"
    data.frame().to_parquet(path)
    back = load_block_dataset(path)
    pd.testing.assert_frame_equal(back.blocks, data.blocks, check_dtype=False)
    assert sorted(back.matrices["source"]) == ["bebop"] * 3 + ["pruned"]
    for row in back.matrices.to_dict("records"):
        assert build(row).nnz == row["nnz"]


def test_drift_brings_every_matrix_to_the_machines_typical_speed():
    matrices = pd.DataFrame({"reference_s": [1.0, 2.0, 1.0, 4.0, 1.0]})
    np.testing.assert_allclose(drift_factor(matrices), [1.0, 0.5, 1.0, 0.25, 1.0])
    np.testing.assert_array_equal(drift_factor(pd.DataFrame({"x": [1, 2]})), [1.0, 1.0])


def test_a_file_that_is_no_block_dataset_is_one_clear_error(tmp_path):
    path = tmp_path / "other.parquet"
    pd.DataFrame({"matrix": [0], "block_s": [1.0]}).to_parquet(path)
    with pytest.raises(BenchError, match="missing columns .*dse bench spmv-blocks"):
        load_block_dataset(path)
    with pytest.raises(BenchError, match="no such file or shipped dataset"):
        load_block_dataset("nowhere")
    with pytest.raises(BenchError, match="positive time budget"):
        run_block_benchmark([], 0)


def test_the_shipped_dataset_rebuilds_and_records_its_command():
    assert "cpu-amd-epyc-2c" in shipped_block_datasets()
    data = load_block_dataset("cpu-amd-epyc-2c")
    assert set(data.matrices["source"]) == {"bebop", "pruned"}
    assert len(data.matrices) > 1000 and (data.blocks["block_s"] > 0).all()
    side = json.loads((DATASETS_DIR / "cpu-amd-epyc-2c.json").read_text())
    assert side["command"].startswith("dse bench spmv-blocks")
    small = data.matrices.sort_values("nnz").iloc[0].to_dict()
    assert build(small).nnz == small["nnz"]


def _dse(*argv, cwd):
    return subprocess.run([sys.executable, "-m", "dse", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_the_command_writes_the_dataset_and_its_provenance(tmp_path):
    done = _dse("bench", "spmv-blocks", "--budget", "5s", "--max-dim", "512", "--models",
                "toy_hybrid", "--repeats", "3", "--out", "b.parquet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    side = json.loads((tmp_path / "b.json").read_text())
    assert side["command"].startswith("dse bench spmv-blocks --budget 5s")
    assert side["reference_p90_over_p10"] >= 1.0
    assert load_block_dataset(tmp_path / "b.parquet").matrices["nnz"].min() > 0
    bad = _dse("bench", "spmv-blocks", "--repeats", "1", "--out", "c.parquet", cwd=tmp_path)
    assert bad.returncode == 2 and "--repeats 1: give at least 3" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "c.parquet").exists()
