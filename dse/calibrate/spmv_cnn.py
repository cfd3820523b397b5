"""The blockwise SpMV estimator: a small 1D convolutional network that reads a CSR matrix's
structure block by block and predicts its SpMV time (the "CNN SpMV seed").

A matrix is split into blocks of 250 consecutive nonzeros (``dse.spmv.blocks``); each
nonzero contributes log2(1 + |column delta|) and a row-start flag. Two convolutions (ReLU),
mean and max pooling over the block, the block's context (log2 bytes of ``x`` and of the
matrix: whether they stay in cache; the share of the block that holds nonzeros) and two
dense layers give log(seconds) per block. The matrix's time is the sum over its blocks.

Training learns per-block times measured in context (``dse bench spmv-blocks``) with torch on
the CPU; prediction runs the same network in numpy, so a shipped estimator loads and predicts
without torch. Validation leaves whole matrices out (a pruned layer's every mask together):
per-block and per-matrix relative errors, beside the seed's reported 0.5-14% per matrix.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .predictor import MODELS_DIR, CalibrationError

__all__ = ["BLOCKS_PER_MATRIX", "EPOCHS", "ESTIMATORS_DIR", "FORMAT_VERSION", "SEED_RANGE",
           "BlockInputs", "SpmvCnn", "block_inputs", "cross_validate", "csr_predictor_times",
           "error_summary", "load_spmv_cnn", "matrix_errors", "matrix_inputs", "shipped_spmv_cnns",
           "spmv_cnn_json", "train_spmv_cnn"]

FORMAT_VERSION = "dse-spmv-cnn/1"
#: The seed's reported relative error per matrix (low, high).
SEED_RANGE = (0.005, 0.14)
#: Training epochs and measured blocks kept per matrix (bounds training to minutes on 2 cores).
EPOCHS, BLOCKS_PER_MATRIX = 10, 64
#: Convolution channels and kernel width; dense hidden width.
CONV_CHANNELS, KERNEL, HIDDEN = 12, 5, 32
_DELTA_SCALE = 1.0 / 16.0  # log2 deltas of up to 2^16 columns land in [0, 1]

Progress = Callable[[int, int], None]


def _blocks():
    """:mod:`dse.spmv.blocks`, imported where it is used: it imports scipy and numba,
    which importing this module (the command line builds ``dse --help`` with it) must not."""
    from ..spmv import blocks as spmv_blocks

    return spmv_blocks


@dataclass(frozen=True)
class SpmvCnn:
    """The network's weights as numpy arrays (``conv1_w [C, CHANNELS, K]``, ``conv1_b``,
    ``conv2_w [C, C, K]``, ``conv2_b``, ``fc1_w [H, 2C + 3]``, ``fc1_b``, ``fc2_w [1, H]``,
    ``fc2_b``), the context's standardization (``context_mean``, ``context_std``), and what
    it was trained on and how it validated."""

    weights: dict[str, np.ndarray]
    context_mean: np.ndarray
    context_std: np.ndarray
    provenance: dict = field(default_factory=dict)
    validated: dict = field(default_factory=dict)

    def predict_blocks(self, features: np.ndarray, context: np.ndarray,
                       chunk: int = 1024, backend: str = "numpy") -> np.ndarray:
        """Seconds per block: ``features [blocks, CHANNELS, BLOCK_NNZ]``, ``context
        [blocks, 3]`` (``dse.spmv.blocks.block_features`` and ``block_context``).
        ``backend="torch"`` runs the same network with torch (about 5x faster; used by
        validation, which predicts millions of blocks; tested to agree with numpy)."""
        forward = self._forward if backend == "numpy" else self._forward_torch
        out = np.empty(len(features))
        for lo in range(0, len(features), chunk):
            out[lo:lo + chunk] = np.exp(forward(features[lo:lo + chunk],
                                                context[lo:lo + chunk]))
        return out

    def predict_matrix(self, matrix, backend: str = "numpy") -> float:
        """Expected SpMV time (seconds) of a CSR matrix: the sum of its blocks' times."""
        features, context = matrix_inputs(matrix)
        return float(self.predict_blocks(features, context, backend=backend).sum())

    def _forward_torch(self, features: np.ndarray, context: np.ndarray) -> np.ndarray:
        torch = _require_torch()
        from torch.nn import functional

        w = {k: torch.from_numpy(v) for k, v in self.weights.items()}
        with torch.inference_mode():
            h = torch.from_numpy(np.asarray(features, dtype=np.float32)).clone()
            h[:, 0] *= _DELTA_SCALE
            h = torch.relu(functional.conv1d(h, w["conv1_w"], w["conv1_b"], padding=KERNEL // 2))
            h = torch.relu(functional.conv1d(h, w["conv2_w"], w["conv2_b"], padding=KERNEL // 2))
            ctx = torch.from_numpy((np.asarray(context, dtype=np.float32) - self.context_mean)
                                   / self.context_std)
            z = torch.cat([h.mean(dim=2), h.amax(dim=2), ctx], dim=1)
            z = torch.relu(functional.linear(z, w["fc1_w"], w["fc1_b"]))
            return functional.linear(z, w["fc2_w"], w["fc2_b"])[:, 0].double().numpy()

    def _forward(self, features: np.ndarray, context: np.ndarray) -> np.ndarray:
        w = self.weights
        # Channels last ([blocks, positions, channels]): each convolution is one matrix
        # product over every position and tap (see _conv1d).
        h = np.ascontiguousarray(np.asarray(features, dtype=np.float32).transpose(0, 2, 1))
        h[:, :, 0] *= _DELTA_SCALE
        h = np.maximum(_conv1d(h, w["conv1_w"], w["conv1_b"]), 0.0)
        h = np.maximum(_conv1d(h, w["conv2_w"], w["conv2_b"]), 0.0)
        ctx = (np.asarray(context, dtype=np.float32) - self.context_mean) / self.context_std
        z = np.concatenate([h.mean(axis=1), h.max(axis=1), ctx], axis=1)
        z = np.maximum(z @ w["fc1_w"].T + w["fc1_b"], 0.0)
        return (z @ w["fc2_w"].T + w["fc2_b"])[:, 0].astype(float)


def _conv1d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """torch's ``Conv1d(padding=K // 2)`` on channels-last input: ``x [B, L, Cin]``,
    ``weight [Cout, Cin, K]`` -> ``[B, L, Cout]``. One product gives every tap's
    contribution at every padded position; each output sums its K taps, shifted."""
    blocks, length, cin = x.shape
    cout, _, k = weight.shape
    pad = k // 2
    padded = np.zeros((blocks, length + 2 * pad, cin), dtype=np.float32)
    padded[:, pad:pad + length] = x
    taps = weight.transpose(1, 2, 0).reshape(cin, k * cout)  # [Cin, K * Cout]
    every = (padded.reshape(-1, cin) @ taps).reshape(blocks, length + 2 * pad, k, cout)
    out = np.broadcast_to(bias.astype(np.float32), (blocks, length, cout)).copy()
    for j in range(k):
        out += every[:, j:j + length, j, :]
    return out


def matrix_inputs(matrix) -> tuple[np.ndarray, np.ndarray]:
    """(features, context) of every block of a CSR matrix."""
    blocks = _blocks()
    features = blocks.block_features(matrix)
    rows, cols = matrix.shape
    return features, blocks.block_context(rows, cols, int(matrix.nnz))


# --- training (torch) ---------------------------------------------------------------------


def _require_torch():
    try:
        import torch
    except ImportError:
        raise CalibrationError("training the SpMV estimator needs torch: pip install "
                               "'sparsity-dse[accuracy]' (predicting with a trained one does "
                               "not)") from None
    return torch


@dataclass(frozen=True)
class BlockInputs:
    """Every measured block's network inputs, computed once (rebuilding a matrix and reading
    its structure is the slow part): ``features``, ``context``, ``target`` (log seconds)
    and the ``matrix`` each row belongs to."""

    features: np.ndarray
    context: np.ndarray
    target: np.ndarray
    matrix: np.ndarray

    def rows(self, matrices) -> np.ndarray:
        return np.isin(self.matrix, np.asarray(matrices))


def block_inputs(matrices: pd.DataFrame, blocks: pd.DataFrame, per_matrix: int | None = None,
                 seed: int = 0, progress: Progress | None = None) -> BlockInputs:
    """The inputs of the measured blocks of ``matrices``; ``per_matrix`` keeps at most that
    many of each matrix's measured blocks (a seeded choice), to bound training time. Targets
    are drift-corrected (``dse.spmv.blocks.drift_factor``): the time each block
    takes on the machine at its typical speed."""
    rng = np.random.default_rng(seed)
    feats, ctxs, targets, ids = [], [], [], []
    by_matrix = dict(tuple(blocks.groupby("matrix")))
    records = matrices.to_dict("records")
    spmv_blocks = _blocks()
    drift = spmv_blocks.drift_factor(matrices)
    for i, row in enumerate(records):
        measured = by_matrix[row["matrix"]]
        if per_matrix is not None and len(measured) > per_matrix:
            measured = measured.iloc[np.sort(rng.choice(len(measured), per_matrix,
                                                        replace=False))]
        features, context = matrix_inputs(spmv_blocks.build(row))
        index = measured["block"].to_numpy()
        feats.append(features[index])
        ctxs.append(context[index])
        targets.append(np.log(measured["block_s"].to_numpy() * drift[i]))
        ids.append(np.full(len(index), row["matrix"]))
        if progress is not None:
            progress(i + 1, len(records))
    return BlockInputs(np.concatenate(feats), np.concatenate(ctxs), np.concatenate(targets),
                       np.concatenate(ids))


def _fit(features: np.ndarray, context: np.ndarray, target: np.ndarray, *, epochs: int,
         seed: int, progress: Progress | None = None) -> SpmvCnn:
    torch = _require_torch()
    from torch import nn

    channels = _blocks().CHANNELS
    torch.manual_seed(seed)
    mean = context.mean(axis=0).astype(np.float32)
    std = np.maximum(context.std(axis=0), 1e-3).astype(np.float32)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv1d(channels, CONV_CHANNELS, KERNEL, padding=KERNEL // 2)
            self.conv2 = nn.Conv1d(CONV_CHANNELS, CONV_CHANNELS, KERNEL, padding=KERNEL // 2)
            self.fc1 = nn.Linear(2 * CONV_CHANNELS + context.shape[1], HIDDEN)
            self.fc2 = nn.Linear(HIDDEN, 1)

        def forward(self, x, c):
            h = torch.relu(self.conv2(torch.relu(self.conv1(x))))
            z = torch.cat([h.mean(dim=2), h.amax(dim=2), c], dim=1)
            return self.fc2(torch.relu(self.fc1(z)))[:, 0]

    net = Net()
    x = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32))
    x[:, 0] *= _DELTA_SCALE
    c = torch.from_numpy(((context - mean) / std).astype(np.float32))
    y = torch.from_numpy(target.astype(np.float32))
    # Start the output bias at the mean log time: the network learns the differences.
    with torch.no_grad():
        net.fc2.bias.fill_(float(y.mean()))
    optimizer = torch.optim.Adam(net.parameters(), lr=3e-3)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    generator = torch.Generator().manual_seed(seed)
    batch = 256
    for epoch in range(epochs):
        order = torch.randperm(len(y), generator=generator)
        for lo in range(0, len(y), batch):
            index = order[lo:lo + batch]
            loss = torch.mean((net(x[index], c[index]) - y[index]) ** 2)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        schedule.step()
        if progress is not None:
            progress(epoch + 1, epochs)
    weights = {name.replace(".", "_").replace("_weight", "_w").replace("_bias", "_b"):
               value.detach().numpy().astype(np.float32)
               for name, value in net.state_dict().items()}
    return SpmvCnn(weights, mean, std)


def _groups(matrices: pd.DataFrame) -> np.ndarray:
    """What is held out together: a BeBOP matrix alone; a pruned layer's shape under every
    mask (its masks share the weights, so one would give the others away)."""
    return np.where(matrices["source"] == "pruned",
                    matrices["model"].astype(str) + ":" + matrices["rows"].astype(str) + "x"
                    + matrices["cols"].astype(str),
                    "bebop:" + matrices["matrix"].astype(str)).astype(object)


def matrix_errors(estimator: SpmvCnn, matrices: pd.DataFrame, backend: str = "numpy",
                  progress: Progress | None = None) -> pd.DataFrame:
    """Per matrix: the estimator's sum over every block against the measured SpMV time
    (``spmv_s``) and the instrumented total (``instrumented_s``), both drift-corrected
    (``rel_err``, ``rel_err_instrumented``), and against the raw ``spmv_s``
    (``rel_err_raw``: the moment's speed of a shared machine included)."""
    out = []
    spmv_blocks = _blocks()
    drift = spmv_blocks.drift_factor(matrices)
    for i, row in enumerate(matrices.to_dict("records")):
        predicted = estimator.predict_matrix(spmv_blocks.build(row), backend=backend)
        out.append({"matrix": row["matrix"], "predicted_s": predicted,
                    "rel_err": predicted / (row["spmv_s"] * drift[i]) - 1.0,
                    "rel_err_instrumented": predicted / (row["instrumented_s"] * drift[i])
                    - 1.0,
                    "rel_err_raw": predicted / row["spmv_s"] - 1.0})
        if progress is not None:
            progress(i + 1, len(matrices))
    return pd.DataFrame(out)


def cross_validate(matrices: pd.DataFrame, inputs: BlockInputs, *, folds: int = 5,
                   epochs: int = EPOCHS, seed: int = 0,
                   progress: Progress | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Held-out predictions, leaving whole matrices out (``_groups``) in ``folds`` folds:
    (per measured block: matrix, measured and predicted seconds, fold; per matrix:
    ``matrix_errors`` rows with the fold). ``progress`` counts epochs and held-out matrices."""
    groups = _groups(matrices)
    names = np.unique(groups)
    rng = np.random.default_rng(seed)
    fold_of = dict(zip(rng.permutation(names), np.arange(len(names)) % folds, strict=True))
    fold = np.array([fold_of[g] for g in groups])
    ids = matrices["matrix"].to_numpy()
    total = folds * epochs + len(matrices)
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    block_rows, matrix_rows = [], []
    for f in range(folds):
        train = inputs.rows(ids[fold != f])
        estimator = _fit(inputs.features[train], inputs.context[train], inputs.target[train],
                         epochs=epochs, seed=seed + f, progress=lambda d, t: tick(1))
        held = inputs.rows(ids[fold == f])
        block_rows.append(pd.DataFrame({
            "matrix": inputs.matrix[held], "measured_s": np.exp(inputs.target[held]),  # corrected
            "predicted_s": estimator.predict_blocks(inputs.features[held],
                                                    inputs.context[held], backend="torch"),
            "fold": f}))
        per_matrix = matrix_errors(estimator, matrices[fold == f], backend="torch",
                                   progress=lambda d, t: tick(1))
        per_matrix["fold"] = f
        matrix_rows.append(per_matrix)
    return pd.concat(block_rows, ignore_index=True), pd.concat(matrix_rows, ignore_index=True)


def error_summary(relative: np.ndarray) -> dict[str, float]:
    """Median, mean, 90th percentile and share within 5/10/25% of |relative error|."""
    a = np.abs(np.asarray(relative, dtype=float))
    return {"n": int(a.size), "median": float(np.median(a)), "mean": float(a.mean()),
            "p90": float(np.quantile(a, 0.9)), "within_5": float((a <= 0.05).mean()),
            "within_10": float((a <= 0.10).mean()), "within_25": float((a <= 0.25).mean())}


def train_spmv_cnn(inputs: BlockInputs, *, epochs: int = EPOCHS, seed: int = 0,
                   provenance: dict | None = None, validated: dict | None = None,
                   progress: Progress | None = None) -> SpmvCnn:
    """The estimator trained on every block of ``inputs``."""
    if len(inputs.target) == 0:
        raise CalibrationError("the SpMV block dataset has no measured blocks; measure some "
                               "with dse bench spmv-blocks")
    fitted = _fit(inputs.features, inputs.context, inputs.target, epochs=epochs, seed=seed,
                  progress=progress)
    return SpmvCnn(fitted.weights, fitted.context_mean, fitted.context_std,
                   dict(provenance or {}), dict(validated or {}))


# --- files --------------------------------------------------------------------------------


#: Where the shipped estimators live (one per measured machine).
ESTIMATORS_DIR = MODELS_DIR / "spmv"


def shipped_spmv_cnns() -> list[str]:
    """Names of the shipped SpMV estimators (``load_spmv_cnn(name)``)."""
    return sorted(p.stem for p in ESTIMATORS_DIR.glob("*.json"))


def spmv_cnn_json(estimator: SpmvCnn) -> str:
    """The estimator as JSON text (weights as nested lists); the caller writes it."""
    payload = {"format": FORMAT_VERSION, "block_nnz": _blocks().BLOCK_NNZ,
               "weights": {k: v.tolist() for k, v in estimator.weights.items()},
               "context_mean": estimator.context_mean.tolist(),
               "context_std": estimator.context_std.tolist(),
               "provenance": estimator.provenance, "validated": estimator.validated}
    return json.dumps(payload, indent=None, separators=(",", ":")) + "\n"


def load_spmv_cnn(path_or_name: str | Path) -> SpmvCnn:
    """A shipped estimator by name (the machine it was measured on, e.g.
    ``cpu-amd-epyc-2c``) or a file."""
    path = Path(path_or_name)
    if not path.is_file():
        path = ESTIMATORS_DIR / f"{path_or_name}.json"
    if not path.is_file():
        shipped = shipped_spmv_cnns()
        raise CalibrationError(f"SpMV estimator {path_or_name}: no such file or shipped "
                               f"estimator; shipped: {', '.join(shipped) or 'none'}")
    try:
        payload = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CalibrationError(f"{path}: not a readable estimator ({exc})") from None
    block_nnz = _blocks().BLOCK_NNZ
    if not isinstance(payload, dict) or payload.get("format") != FORMAT_VERSION \
            or payload.get("block_nnz") != block_nnz:
        raise CalibrationError(f"{path}: not a {FORMAT_VERSION} estimator with blocks of "
                               f"{block_nnz} nonzeros; train one with dse calibrate "
                               "--estimator spmv-cnn")
    weights, mean, std = _checked_arrays(payload, path)
    return SpmvCnn(weights, mean, std, payload.get("provenance", {}),
                   payload.get("validated", {}))


#: The estimator's arrays: name -> its shape in the sizes C (convolution channels), K
#: (kernel width, odd), H (hidden width); the input has CHANNELS channels and 3 context values.
_SHAPES = {"conv1_w": ("C", "in", "K"), "conv1_b": ("C",), "conv2_w": ("C", "C", "K"),
           "conv2_b": ("C",), "fc1_w": ("H", "2C+3"), "fc1_b": ("H",), "fc2_w": (1, "H"),
           "fc2_b": (1,)}


def _checked_arrays(payload: dict, path: Path) -> tuple[dict, np.ndarray, np.ndarray]:
    """The weights and the context's standardization, checked: every array present, of
    shapes that fit together, finite, and a positive spread for each context value; a wrong
    file is refused in one line naming the key, never run to give NaN or garbage."""
    def fail(key: str, problem: str):
        raise CalibrationError(f"{path}: {key} {problem}; train the estimator again with dse "
                               "calibrate --estimator spmv-cnn --out FILE") from None

    weights = payload.get("weights")
    if not isinstance(weights, dict):
        fail("weights", "is missing or not an object")
    unknown = sorted(set(weights) - set(_SHAPES))
    if unknown:
        fail(f"weights.{unknown[0]}", f"is not a weight of the network ({', '.join(_SHAPES)})")
    arrays = {}
    for key in (*_SHAPES, "context_mean", "context_std"):
        source = payload.get(key) if key.startswith("context") else weights.get(key)
        where = key if key.startswith("context") else f"weights.{key}"
        if source is None:
            fail(where, "is missing")
        try:
            arrays[key] = np.asarray(source, dtype=np.float64)
        except (TypeError, ValueError):
            fail(where, "is not an array of numbers")
        if not np.isfinite(arrays[key]).all():
            fail(where, "holds NaN or infinity; every weight must be finite")
    c, k = arrays["conv1_w"].shape[0] if arrays["conv1_w"].ndim == 3 else -1, \
        arrays["conv1_w"].shape[-1]
    h = arrays["fc1_b"].shape[0] if arrays["fc1_b"].ndim == 1 else -1
    sizes = {"C": c, "K": k, "H": h, "in": _blocks().CHANNELS, "2C+3": 2 * c + 3}
    for key, shape in _SHAPES.items():
        wanted = tuple(sizes[d] if isinstance(d, str) else d for d in shape)
        if arrays[key].shape != wanted or min(wanted) < 1:
            fail(f"weights.{key}", f"has shape {list(arrays[key].shape)}, not {list(wanted)}")
    if k % 2 == 0:
        fail("weights.conv1_w", f"has an even kernel width {k}; the network pads K // 2")
    for key in ("context_mean", "context_std"):
        if arrays[key].shape != (3,):
            fail(key, f"has shape {list(arrays[key].shape)}, not [3]")
    if (arrays["context_std"] <= 0).any():
        fail("context_std", "holds a value <= 0; each is a standard deviation")
    return ({key: arrays[key].astype(np.float32) for key in _SHAPES},
            arrays["context_mean"].astype(np.float32), arrays["context_std"].astype(np.float32))


def csr_predictor_times(matrices: pd.DataFrame, predictors, hardware) -> np.ndarray:
    """What the CSR kernel predictor of the device (``dse calibrate``, family ``csr``)
    expects for each matrix's SpMV (``m x k`` weights, one column, the fastest of its
    implementations), to compare the two estimators on the same matrices. That predictor
    learned scipy's and torch's CSR SpMM on the trace shapes; numba's SpMV is not one of
    them, so its error here includes the kernel's difference."""
    from ..measure.sol import sol_columns

    family = predictors.families.get("csr")
    if family is None:
        raise CalibrationError(f"{predictors.name}: no CSR kernel predictor to compare with")
    sparsity = 1.0 - matrices["nnz"] / (matrices["rows"] * matrices["cols"])
    frame = pd.DataFrame({
        "family": "unstructured", "kind": "linear", "m": matrices["rows"].to_numpy(),
        "k": matrices["cols"].to_numpy(), "n": 1, "groups": 1,
        "sparsity": sparsity.to_numpy(), "block": 1,
        "format": [f"unstructured@{100 * v:.6g}%" for v in sparsity],
        "index_dtype": "int32", "median_s": np.nan})
    frame = sol_columns(frame, hardware)
    features = predictors.features(frame)
    times, _ = family.predict_best_s(features, frame["sol_s"].to_numpy())
    return times
