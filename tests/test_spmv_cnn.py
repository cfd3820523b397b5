"""The blockwise SpMV estimator (issue 16, part 3): the numpy network is torch's network, it
learns a known structure from synthetic blocks, a file round-trips, held-out validation
leaves whole matrices out, and the command says what it validated. Checked on synthetic data
with known structure, never on timings."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from dse.calibrate.predictor import CalibrationError
from dse.calibrate.spmv_cnn import (
    CONV_CHANNELS,
    HIDDEN,
    KERNEL,
    BlockInputs,
    SpmvCnn,
    _conv1d,
    _fit,
    _groups,
    error_summary,
    load_spmv_cnn,
    shipped_spmv_cnns,
    spmv_cnn_json,
)
from dse.spmv.blocks import BLOCK_NNZ, CHANNELS, block_context, block_features
from dse.spmv.matrices import MatrixSpec

torch = pytest.importorskip("torch")


def _random_net(seed=0) -> SpmvCnn:
    rng = np.random.default_rng(seed)

    def r(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    weights = {"conv1_w": r(CONV_CHANNELS, CHANNELS, KERNEL), "conv1_b": r(CONV_CHANNELS),
               "conv2_w": r(CONV_CHANNELS, CONV_CHANNELS, KERNEL), "conv2_b": r(CONV_CHANNELS),
               "fc1_w": r(HIDDEN, 2 * CONV_CHANNELS + 3), "fc1_b": r(HIDDEN),
               "fc2_w": r(1, HIDDEN), "fc2_b": np.array([-15.0], dtype=np.float32)}
    return SpmvCnn(weights, np.array([10, 20, 1], dtype=np.float32),
                   np.array([2, 3, 0.1], dtype=np.float32))


def test_the_numpy_convolution_is_torchs():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4, 17)).astype(np.float32)
    w = rng.standard_normal((5, 4, KERNEL)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    expected = torch.nn.functional.conv1d(torch.from_numpy(x), torch.from_numpy(w),
                                          torch.from_numpy(b), padding=KERNEL // 2).numpy()
    got = _conv1d(np.ascontiguousarray(x.transpose(0, 2, 1)), w, b).transpose(0, 2, 1)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_numpy_and_torch_predict_the_same_blocks():
    net = _random_net()
    a = MatrixSpec("blocked", 1024, 8, 2, 2, None, 2).build()
    features = block_features(a)
    context = block_context(a.shape[0], a.shape[1], a.nnz)
    numpy_s = net.predict_blocks(features, context)
    torch_s = net.predict_blocks(features, context, backend="torch")
    np.testing.assert_allclose(numpy_s, torch_s, rtol=1e-4)
    assert net.predict_matrix(a) == pytest.approx(numpy_s.sum(), rel=1e-9)


def _synthetic_blocks(count: int, seed: int):
    """Blocks whose time is known: 40 ns a row start plus 1 ns per nonzero times (1 + the
    mean log2 column delta / 4), a structure the network has to read off the sequence."""
    rng = np.random.default_rng(seed)
    features = np.zeros((count, CHANNELS, BLOCK_NNZ), dtype=np.float32)
    spread = rng.uniform(0, 14, count)
    features[:, 0] = rng.uniform(0, 1, (count, BLOCK_NNZ)) * spread[:, None]
    starts = rng.random((count, BLOCK_NNZ)) < rng.uniform(0.005, 0.2, count)[:, None]
    features[:, 1] = starts
    context = np.column_stack([np.full(count, 12.0), np.full(count, 20.0),
                               np.ones(count)]).astype(np.float32)
    seconds = (40e-9 * starts.sum(axis=1)
               + 1e-9 * BLOCK_NNZ * (1 + features[:, 0].mean(axis=1) / 4))
    return features, context, np.log(seconds)


def test_the_network_learns_a_known_structure():
    features, context, target = _synthetic_blocks(3000, 0)
    net = _fit(features, context, target, epochs=15, seed=0)
    test_f, test_c, test_t = _synthetic_blocks(500, 1)
    error = net.predict_blocks(test_f, test_c) / np.exp(test_t) - 1
    summary = error_summary(error)
    assert summary["median"] < 0.05 and summary["within_10"] > 0.8, summary
    # The prediction moves with the structure: more row starts, more time.
    few, many = test_f.copy(), test_f.copy()
    few[:, 1] = 0
    many[:, 1] = 0
    many[:, 1, ::10] = 1
    assert (net.predict_blocks(many, test_c) > net.predict_blocks(few, test_c)).mean() > 0.95


def test_a_file_round_trips_and_bad_files_are_one_line(tmp_path):
    net = _random_net()
    net = SpmvCnn(net.weights, net.context_mean, net.context_std, {"command": "x"},
                  {"per_matrix": {"median": 0.1}})
    path = tmp_path / "e.json"
    path.write_text(spmv_cnn_json(net))
    back = load_spmv_cnn(path)
    features, context, _ = _synthetic_blocks(20, 3)
    np.testing.assert_allclose(back.predict_blocks(features, context),
                               net.predict_blocks(features, context), rtol=1e-6)
    assert back.provenance == {"command": "x"} and back.validated["per_matrix"]["median"] == 0.1
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    with pytest.raises(CalibrationError, match="not a dse-spmv-cnn/1 estimator"):
        load_spmv_cnn(tmp_path / "bad.json")
    with pytest.raises(CalibrationError, match="no such file or shipped estimator"):
        load_spmv_cnn("nowhere")


def test_validation_holds_a_pruned_layer_out_with_all_its_masks():
    matrices = pd.DataFrame({
        "matrix": [0, 1, 2, 3], "source": ["bebop", "bebop", "pruned", "pruned"],
        "model": ["", "", "m", "m"], "rows": [10, 10, 64, 64], "cols": [10, 10, 32, 32]})
    groups = _groups(matrices)
    assert groups[0] != groups[1] and groups[2] == groups[3]


def test_block_inputs_select_rows_by_matrix():
    inputs = BlockInputs(np.zeros((4, CHANNELS, BLOCK_NNZ)), np.zeros((4, 3)),
                         np.zeros(4), np.array([5, 5, 6, 7]))
    np.testing.assert_array_equal(inputs.rows([5, 7]), [True, True, False, True])


def test_the_shipped_estimator_predicts_and_says_how_it_validated():
    assert "cpu-amd-epyc-2c" in shipped_spmv_cnns()
    net = load_spmv_cnn("cpu-amd-epyc-2c")
    assert net.provenance["command"].startswith("dse calibrate --estimator spmv-cnn")
    assert 0 <= net.validated["per_matrix"]["median"] < 1
    small = MatrixSpec("blocked", 512, 8, 1, 1, None, 1).build()
    large = MatrixSpec("blocked", 8192, 8, 1, 1, None, 1).build()
    assert 0 < net.predict_matrix(small) < net.predict_matrix(large)


def _dse(*argv, cwd):
    return subprocess.run([sys.executable, "-m", "dse", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def test_the_command_validates_and_writes_an_estimator(tmp_path):
    made = _dse("bench", "spmv-blocks", "--budget", "5s", "--max-dim", "1024", "--models",
                "toy_hybrid", "--repeats", "3", "--sample", "8", "--out", "b.parquet",
                cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    done = _dse("calibrate", "--estimator", "spmv-cnn", "--data", "b.parquet", "--epochs", "1",
                "--folds", "2", "--validate", "--out", "e.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for needle in ("per block (in context)", "per matrix, all",
                   "this estimator follows reported 0.5% to 14%", "noise floor", "energy head"):
        assert needle in done.stdout, done.stdout
    assert load_spmv_cnn(tmp_path / "e.json").provenance["dataset"] == "b.parquet"


@pytest.mark.parametrize("argv, needle", [
    (["--estimator", "spmv-cnn"], "give --validate, --out MODEL.json or both"),
    (["--estimator", "spmv-cnn", "--validate", "--whole-models", "x=y.csv"],
     "does not go with --estimator spmv-cnn"),
    (["--estimator", "spmv-cnn", "--validate", "--folds", "1"], "--folds 1: give at least 2"),
    (["--estimator", "spmv-cnn", "--validate", "--data", "nowhere"],
     "no such file or shipped dataset"),
])
def test_bad_estimator_options_are_one_line(argv, needle, tmp_path):
    done = _dse("calibrate", *argv, cwd=tmp_path)
    assert done.returncode == 2 and needle in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
