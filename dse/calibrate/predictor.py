"""Kernel predictors: per (device, kernel family), a physical model with a learned residual.

Physical model: ``t_phys = floor_s + sol_s / ceiling`` (a per-family floor, the time of the
smallest kernel, plus the speed of light divided by the best fraction of it that family
reaches). Residual: gradient-boosted trees on the configuration's features
(:mod:`.features`), trained with scikit-learn and exported to plain arrays, so that a shipped
predictor loads and predicts with numpy alone (the base install). Two targets:

* ``fraction``: the trees learn ``log(t / t_phys)``; the prediction is
  ``t_phys * exp(residual)``. ``sol_s`` is recomputed on the hardware the design is evaluated
  on, so the fraction of the speed of light carries over to hypothetical variants of the device.
* ``time``: the trees learn ``log(t)`` directly from the features (no physical model); the
  prediction does not move with the hardware.

Training needs scikit-learn (the ``accuracy`` extra); prediction does not.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from ..output import write_atomic
from .features import FEATURES, IMPL, feature_matrix

__all__ = ["MONOTONE", "RESIDUALS", "CalibrationError", "DevicePredictors", "FamilyPredictor",
           "Trees",
           "check_predictor_document", "fit_family", "fit_physical", "load_predictors",
           "probed_spec", "reference_hardware", "save_predictors", "shipped_predictors",
           "MODELS_DIR"]

MODELS_DIR = Path(__file__).parent / "models"
FORMAT_VERSION = "dse-kernel-predictors/1"


class CalibrationError(ValueError):
    """A user's error in calibration input: one line naming the input and the fix."""


#: Rows x trees walked per pass of :meth:`Trees.predict` (memory: ~8 bytes each, a few times).
_WALK_CELLS = 1 << 21


@dataclass(frozen=True)
class Trees:
    """Gradient-boosted regression trees as arrays: ``init + rate * sum_t value_t[leaf]``.
    Each tree: ``feature``, ``threshold``, ``left``, ``right`` (-1 at leaves), ``value``."""

    init: float
    rate: float
    trees: tuple[dict, ...]

    @cached_property
    def _flat(self) -> tuple[np.ndarray, ...]:
        """Every tree's nodes in one set of arrays (children as global indices), made once:
        rows walk all trees at once, one numpy step per depth rather than per tree."""
        sizes = [len(t["feature"]) for t in self.trees]
        roots = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

        def children(side: str) -> np.ndarray:
            return np.concatenate([np.where(np.asarray(t[side]) >= 0,
                                            np.asarray(t[side]) + root, -1)
                                   for t, root in zip(self.trees, roots, strict=True)])

        return (roots, np.concatenate([np.asarray(t["feature"]) for t in self.trees]),
                np.concatenate([np.asarray(t["threshold"], dtype=float) for t in self.trees]),
                children("left"), children("right"),
                np.concatenate([np.asarray(t["value"], dtype=float) for t in self.trees]))

    def predict(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        if not self.trees:
            return np.full(len(x), self.init, dtype=float)
        roots, feature, threshold, left, right, value = self._flat
        out = np.empty(len(x), dtype=float)
        step = max(1, _WALK_CELLS // len(roots))  # rows per pass: bounded rows x trees
        for start in range(0, len(x), step):
            part = x[start:start + step]
            rows = np.arange(len(part))[:, None]
            node = np.repeat(roots[None, :], len(part), axis=0)
            for _ in range(64):
                inner = left[node] >= 0
                if not inner.any():
                    break
                go_left = part[rows, np.maximum(feature[node], 0)] <= threshold[node]
                node = np.where(inner, np.where(go_left, left[node], right[node]), node)
            out[start:start + step] = self.init + self.rate * value[node].sum(axis=1)
        return out

    @classmethod
    def from_sklearn(cls, model) -> Trees:
        """Export a fitted ``GradientBoostingRegressor`` (squared error loss)."""
        trees = []
        for estimator in model.estimators_[:, 0]:
            t = estimator.tree_
            trees.append({"feature": t.feature.tolist(),
                          "threshold": [float(f"{v:.9g}") for v in t.threshold],
                          "left": t.children_left.tolist(), "right": t.children_right.tolist(),
                          "value": [float(f"{v:.6g}") for v in t.value[:, 0, 0]]})
        init = float(np.ravel(model.init_.constant_)[0])
        return cls(init, float(model.learning_rate), tuple(trees))


    @classmethod
    def from_histogram_boosting(cls, model) -> Trees:
        """Export a fitted ``HistGradientBoostingRegressor`` (squared error, numeric features
        without missing values): its leaf values already carry the learning rate, and a row
        goes left where its feature is at most the node's threshold, as in :meth:`predict`."""
        trees = []
        for (predictor,) in model._predictors:
            nodes = predictor.nodes
            leaf = nodes["is_leaf"].astype(bool)
            index = {c: nodes[c].astype(np.int64) for c in ("feature_idx", "left", "right")}
            trees.append({"feature": np.where(leaf, -2, index["feature_idx"]).tolist(),
                          "threshold": [float(f"{v:.9g}") for v in nodes["num_threshold"]],
                          "left": np.where(leaf, -1, index["left"]).tolist(),
                          "right": np.where(leaf, -1, index["right"]).tolist(),
                          "value": [float(f"{v:.6g}") for v in nodes["value"]]})
        init = float(np.ravel(model._baseline_prediction)[0])
        return cls(init, 1.0, tuple(trees))


def _distinct_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows, index of each row's distinct row). Hashes each row to one float (a dot
    product with fixed random weights) and groups by it, which is linear where
    ``np.unique(axis=0)`` sorts; the result is checked and the sort used if two different
    rows ever shared a hash."""
    if len(x) == 0:
        return x, np.zeros(0, dtype=np.int64)
    weights = np.random.default_rng(12345).uniform(1.0, 2.0, x.shape[1])
    codes, _ = pd.factorize(np.nan_to_num(x, nan=-1e300) @ weights)
    firsts = np.unique(codes, return_index=True)[1]
    unique = x[firsts]
    if np.array_equal(unique[codes], x, equal_nan=True):
        return unique, codes
    unique, inverse = np.unique(x, axis=0, return_inverse=True)
    return unique, inverse.reshape(-1)


@dataclass(frozen=True)
class FamilyPredictor:
    """One kernel family's predictor on one device. Times in seconds.

    ``target``: ``fraction`` (physical model times a learned residual; the fraction of the
    speed of light carries over to other hardware) or ``time`` (time learned directly).
    ``validated``: held-out errors of this predictor (``rmspe``, ``within_10``, ...), filled
    in by ``dse calibrate``. ``implementations``: the kernels of the family measured on the
    device, in the order of the ``impl`` feature."""

    key: str
    target: str
    floor_s: float
    ceiling: float
    residual: Trees | None
    rows: int
    shapes: int
    validated: dict = field(default_factory=dict)
    implementations: tuple[str, ...] = ()

    def physical_s(self, sol_s: np.ndarray) -> np.ndarray:
        return self.floor_s + np.asarray(sol_s, dtype=float) / self.ceiling

    def _learned(self, features: np.ndarray) -> np.ndarray:
        """The residual (log) of each row; 0 without trees."""
        if self.residual is None:
            return np.zeros(len(features))
        return self.residual.predict(features)

    def _seconds(self, learned: np.ndarray, physical: np.ndarray) -> np.ndarray:
        return np.exp(learned) if self.target == "time" else physical * np.exp(learned)

    def predict_s(self, features: np.ndarray, sol_s: np.ndarray) -> np.ndarray:
        """Expected kernel time of each row (``features`` from :func:`feature_matrix`)."""
        return self._seconds(self._learned(features), self.physical_s(sol_s))

    def predict_best_s(self, features: np.ndarray,
                       sol_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The fastest of the family's implementations per row (what a user would pick):
        (expected time, implementation name)."""
        names = self.implementations or ("",)
        sol_s = np.broadcast_to(np.asarray(sol_s, dtype=float), (len(features),))
        # Hardware points of a search share every feature (the speed of light is not one):
        # the trees see each distinct configuration once.
        unique, inverse = _distinct_rows(np.asarray(features, dtype=float))
        physical = self.physical_s(sol_s)
        times = []
        for code in range(len(names)):
            x = unique.copy()
            x[:, IMPL] = code
            times.append(self._seconds(self._learned(x)[inverse], physical))
        times = np.array(times).reshape(len(names), len(features))
        best = np.argmin(times, axis=0)
        return times[best, np.arange(len(features))], np.array(names, dtype=object)[best]


@dataclass(frozen=True)
class DevicePredictors:
    """Every family's predictor for one measured device, with what it was trained on.

    ``reference_hw``: the accelerator spec whose speed of light the fractions refer to;
    ``device``: cuda or cpu; ``units``: SMs or cores; ``launch_floor_s``: the smallest kernel
    time measured on the device (what a family without data costs at least).

    ``context``: empty, or constants fitted on measured whole models (see
    ``validate.fit_context``): ``shift_s`` taken off each measured-family kernel (isolated,
    cold-cache kernels against the same kernels inside a model's CUDA graph),
    ``unmeasured_floor_s`` and ``unmeasured_ceiling`` pricing families without kernel data as
    ``floor + sol / ceiling``, and ``source``.

    ``warm_capacity_bytes``: the last-level cache of the measured device
    (:func:`warm_capacity`), where its warm timings were taken. An op inside a model is priced
    warm only when its working set fits it; a larger one finds most of its bytes in DRAM, as
    a cold kernel does. 0: not known (every op priced warm)."""

    name: str
    reference_hw: str
    device: str
    units: int
    tile: int
    launch_floor_s: float
    families: dict[str, FamilyPredictor]
    provenance: dict
    context: dict = field(default_factory=dict)
    warm_capacity_bytes: float = 0.0

    def features(self, frame: pd.DataFrame) -> np.ndarray:
        return feature_matrix(frame, self.units, self.tile)


def warm_capacity(hardware) -> float:
    """The bytes a warm op's working set may take and still be found where the op before it
    left them on ``hardware`` (an Accelerator or a catalog name): its last-level cache (the
    last of ``cache_levels``, else ``l2_bytes``, which a CPU's probed spec gives as its
    last-level cache). Faster levels are left out: a GPU's L1 does not keep data from one
    kernel to the next. 0 for a spec with neither."""
    if isinstance(hardware, str):
        import accelerator_models

        hardware = accelerator_models.load(hardware)
    if hardware.cache_levels:
        return float(hardware.cache_levels[-1].capacity_bytes)
    return float(hardware.l2_bytes or 0.0)


def _require_sklearn():
    try:
        import sklearn  # noqa: F401
        from sklearn.ensemble import GradientBoostingRegressor
    except ImportError:
        raise CalibrationError("training predictors needs scikit-learn; install the accuracy "
                               "extra: pip install 'sparsity-dse[accuracy]'") from None
    return GradientBoostingRegressor


def fit_physical(time_s: np.ndarray, sol_s: np.ndarray) -> tuple[float, float]:
    """(floor_s, ceiling) minimizing the squared log error of ``floor + sol / ceiling``; the
    ceiling is capped at 1 (no kernel beats the speed of light)."""
    from scipy.optimize import least_squares

    t, sol = np.asarray(time_s, float), np.asarray(sol_s, float)
    floor0 = max(float(np.quantile(t, 0.05)) * 0.5, 1e-9)
    ceiling0 = min(max(float(np.quantile(sol / t, 0.9)), 1e-4), 1.0)

    def residuals(p):
        return np.log(t) - np.log(np.exp(p[0]) + sol / np.exp(p[1]))

    fit = least_squares(residuals, [math.log(floor0), math.log(ceiling0)],
                        bounds=([math.log(1e-9), math.log(1e-5)], [math.log(1.0), 0.0]))
    return float(math.exp(fit.x[0])), float(math.exp(fit.x[1]))


#: The residual learners ``dse calibrate --residual`` takes: ``trees`` (gradient boosting,
#: unconstrained; the default: it validates better held out, see docs/fidelity.md) and
#: ``monotone`` (histogram gradient boosting under :data:`MONOTONE`'s constraints).
RESIDUALS = ("trees", "monotone")

#: Directions physics gives, per target: a less padded tile or a fuller last wave never makes
#: a kernel slower (``pad_eff``, ``wave_eff``: -1), and for the time target more FLOPs or
#: bytes never make it faster (+1).
MONOTONE = {
    "fraction": {"wave_eff": -1, "pad_eff": -1},
    "time": {"wave_eff": -1, "pad_eff": -1, "log_flops": 1, "log_bytes": 1},
}


#: The residual trees' size. Deeper trees with larger leaves (300 trees of 6 levels, 5 rows a
#: leaf, rate 0.05) were tried on the H100 data: kernels held out by weight shape 64% -> 66%
#: within 10% (vector ops 66% -> 73%, convolutions 35% -> 42%), whole models held out 7% -> 8%,
#: in-sample 93% -> 99% (more memorised), and a predictor file 3.5x as large (3.8 MB) that
#: loaded in 0.82 s against 0.11 s, in every calibrated command. Not worth it; kept as below.
BOOSTING = {"trees": 150, "depth": 4, "leaf": 2, "rate": 0.06}


def fit_family(key: str, features: np.ndarray, time_s: np.ndarray, sol_s: np.ndarray,
               shapes: int, target: str = "fraction", seed: int = 0,
               weights: np.ndarray | None = None,
               implementations: tuple[str, ...] = (), residual: str = "trees") -> FamilyPredictor:
    """Fit one family: the physical model, then trees on the residual (``fraction``) or on
    ``log(time)`` (``time``), unconstrained or, with ``residual="monotone"``, under
    :data:`MONOTONE`'s directions. Needs scikit-learn."""
    if target not in ("fraction", "time"):
        raise ValueError(f"target must be fraction or time, not {target!r}")
    if residual not in RESIDUALS:
        raise ValueError(f"residual must be one of {', '.join(RESIDUALS)}, not {residual!r}")
    gbr = _require_sklearn()
    time_s = np.asarray(time_s, float)
    floor_s, ceiling = fit_physical(time_s, sol_s)
    base = floor_s + np.asarray(sol_s, float) / ceiling
    y = np.log(time_s / base) if target == "fraction" else np.log(time_s)
    learned = None
    if len(y) >= 6 and residual == "monotone":
        from sklearn.ensemble import HistGradientBoostingRegressor

        model = HistGradientBoostingRegressor(
            max_iter=BOOSTING["trees"], max_depth=BOOSTING["depth"],
            learning_rate=BOOSTING["rate"], min_samples_leaf=BOOSTING["leaf"],
            max_bins=255, early_stopping=False, random_state=seed,
            monotonic_cst=[MONOTONE[target].get(f, 0) for f in FEATURES])
        model.fit(features, y, sample_weight=weights)
        learned = Trees.from_histogram_boosting(model)
    elif len(y) >= 6:
        model = gbr(n_estimators=BOOSTING["trees"], max_depth=BOOSTING["depth"],
                    learning_rate=BOOSTING["rate"], subsample=0.8,
                    min_samples_leaf=BOOSTING["leaf"], random_state=seed)
        model.fit(features, y, sample_weight=weights)
        learned = Trees.from_sklearn(model)
    elif target == "time":
        learned = Trees(float(np.mean(y)), 1.0, ())
    return FamilyPredictor(key, target, floor_s, ceiling, learned, len(y), shapes,
                           implementations=tuple(implementations))


# --- files: JSON, numbers and trees only (no pickle) -------------------------------------------

def save_predictors(predictors: DevicePredictors, path: str | Path) -> None:
    """Write ``predictors`` as JSON (atomically: a temporary file renamed into place)."""
    data = {"format": FORMAT_VERSION, **asdict(predictors)}
    text = json.dumps(data, separators=(",", ":"))
    write_atomic(Path(path), lambda handle: handle.write(text.encode("utf-8")))


def shipped_predictors() -> list[str]:
    """Names of the predictors shipped with dse (one per shipped dataset)."""
    return sorted(p.stem for p in MODELS_DIR.glob("*.json"))


def probed_spec(source: str):
    """The probed spec (a machine's measured ceilings, a CPU's ``host``) that a dataset's
    provenance keeps as ``probe_spec_toml``, loaded; None where it keeps none."""
    import tempfile

    import accelerator_models

    from ..measure.dataset import provenance

    text = provenance(source).get("probe_spec_toml")
    if not text:
        return None
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "probe.toml"
        path.write_text(text, encoding="utf-8")
        return accelerator_models.load(str(path))


def reference_hardware(predictors: DevicePredictors, sources: list[str]):
    """The spec the predictors' fractions refer to: a catalog name, or a probed spec (a CPU's
    ``host``) from the ``probe_spec_toml`` a dataset's provenance keeps."""
    import accelerator_models

    try:
        return accelerator_models.load(predictors.reference_hw)
    except Exception:  # not a catalog name: look for the probed spec in the provenance
        pass
    for source in sources:
        spec = probed_spec(source)
        if spec is not None:
            return spec
    raise CalibrationError(f"{predictors.name}: the predictors refer to the spec "
                           f"{predictors.reference_hw!r}, which is no catalog name, and no "
                           "dataset keeps its probe (probe_spec_toml in the dataset's .json)")


def load_predictors(path_or_name: str | Path) -> DevicePredictors:
    """A shipped predictor set by name (``h100-sxm``, ``cpu-amd-epyc-2c``) or a JSON file
    written by ``dse calibrate --out``. Needs numpy only. The file is checked against its
    schema and physical ranges before use (:func:`check_predictor_document`): a wrong one is
    refused in one line naming the file, the key and the fix, never used to give a silently
    wrong expectation."""
    text = str(path_or_name)
    path = MODELS_DIR / f"{text}.json" if text in shipped_predictors() else Path(text)
    if not path.is_file():
        raise CalibrationError(f"{text}: no such predictor file or shipped predictor (shipped: "
                               f"{', '.join(shipped_predictors()) or 'none'}); give one of "
                               "those or a file written by dse calibrate --out")
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CalibrationError(f"{path}: not a predictor file ({_first_line(exc)}); write one "
                               "with dse calibrate --data DATASET --out FILE") from None
    check_predictor_document(data, str(path), text)
    data = dict(data)
    data.pop("format")
    families = {}
    for key, fam in data.pop("families").items():
        fam = dict(fam)
        res = fam.pop("residual")
        trees = Trees(res["init"], res["rate"], tuple(res["trees"])) if res else None
        fam["implementations"] = tuple(fam.get("implementations", ()))
        families[key] = FamilyPredictor(residual=trees, **fam)
    return DevicePredictors(families=families, **data)


# --- the file's schema and physical ranges --------------------------------------------------

_FIX = "write the file again with dse calibrate --data DATASET --out FILE"
#: Top-level keys: required, then optional.
_TOP = ("format", "name", "reference_hw", "device", "units", "tile", "launch_floor_s",
        "families", "provenance")
_TOP_OPTIONAL = ("context", "warm_capacity_bytes")
_FAMILY = ("key", "target", "floor_s", "ceiling", "residual", "rows", "shapes")
_FAMILY_OPTIONAL = ("validated", "implementations")
_TREE = ("feature", "threshold", "left", "right", "value")
#: The whole-model constants (``validate.fit_context``) and their ranges.
_CONTEXT = {"shift_s": (0.0, 1.0), "unmeasured_floor_s": (0.0, 1.0),
            "unmeasured_ceiling": (1e-9, 1.0), "grouped_conv_ceiling": (1e-9, 1.0)}
#: The longest a kernel's floor may be: a second (the slowest measured are milliseconds).
_MAX_FLOOR_S = 1.0


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _non_finite(value, where: str) -> str | None:
    """The key path of the first NaN or infinity inside ``value``, or None (lists of numbers,
    the trees' arrays, are checked whole with numpy)."""
    if isinstance(value, float) and not math.isfinite(value):
        return where
    if isinstance(value, dict):
        for key, item in value.items():
            found = _non_finite(item, f"{where}.{key}")
            if found:
                return found
    elif isinstance(value, list):
        try:
            numbers = np.asarray(value, dtype=float)
        except (TypeError, ValueError):
            numbers = None
        if numbers is not None and numbers.ndim == 1:
            bad = np.flatnonzero(~np.isfinite(numbers))
            return f"{where}[{int(bad[0])}]" if len(bad) else None
        for index, item in enumerate(value):
            found = _non_finite(item, f"{where}[{index}]")
            if found:
                return found
    return None


#: Tokens through which a non-finite number enters JSON: NaN, Infinity and literals past
#: float64's range (1e999 parses as inf).
_NON_FINITE_TOKEN = re.compile(r"NaN|Infinity|[eE]\+?\d{3,}|\d{300,}")


def check_predictor_document(data, where: str, text: str | None = None) -> None:
    """Refuse a predictor file (its parsed JSON) that would give wrong expectations: unknown,
    missing or mistyped keys, NaN or infinity anywhere, a negative floor or launch floor, a
    ceiling outside (0, 1] (no kernel beats the speed of light), trees whose nodes point
    outside them. Raises :class:`CalibrationError` naming ``where``, the key and the fix.
    ``text``: the file's text, when at hand: the search for a non-finite number then walks
    the document only when the text holds a token that can make one."""
    def fail(key: str, problem: str):
        raise CalibrationError(f"{where}: not a predictor file dse can use: {key} {problem}; "
                               f"{_FIX}")

    if not isinstance(data, dict):
        fail("(the document)", "is not a JSON object")
    if data.get("format") != FORMAT_VERSION:
        fail("format", f"is {data.get('format')!r}, not {FORMAT_VERSION!r}")
    _keys(data, _TOP, _TOP_OPTIONAL, "", fail)
    found = _non_finite(data, "") if text is None or _NON_FINITE_TOKEN.search(text) else None
    if found:
        fail(found.lstrip("."), "is NaN or infinite; every number must be finite")
    for key in ("name", "reference_hw"):
        if not isinstance(data[key], str) or not data[key].strip():
            fail(key, "must be a non-empty string")
    if data["device"] not in ("cpu", "cuda"):
        fail("device", f"is {data['device']!r}; use cpu or cuda")
    for key in ("units", "tile"):
        _whole(data[key], key, 1, 1 << 20, fail)
    _number(data["launch_floor_s"], "launch_floor_s", 0.0, _MAX_FLOOR_S, fail)
    for key in ("provenance", "context"):
        if not isinstance(data.get(key, {}), dict):
            fail(key, "must be an object")
    if "warm_capacity_bytes" in data:  # a cache of up to 1 TB; 0: not known
        _number(data["warm_capacity_bytes"], "warm_capacity_bytes", 0.0, 1e12, fail)
    context = data.get("context") or {}
    if context:
        for key, (low, high) in _CONTEXT.items():
            if key not in context:
                fail(f"context.{key}", "is missing")
            _number(context[key], f"context.{key}", low, high, fail)
    families = data["families"]
    if not isinstance(families, dict) or not families:
        fail("families", "must be an object with one predictor per kernel family")
    for key, family in families.items():
        _check_family(key, family, fail)


def _keys(table: dict, required, optional, prefix: str, fail) -> None:
    missing = [k for k in required if k not in table]
    if missing:
        fail(f"{prefix}{missing[0]}", "is missing")
    unknown = sorted(set(table) - set(required) - set(optional))
    if unknown:
        fail(f"{prefix}{unknown[0]}", f"is not a key of this file (keys: "
                                      f"{', '.join((*required, *optional))})")


def _whole(value, key: str, low: int, high: int, fail) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        fail(key, f"is {value!r}; give a whole number from {low:,} to {high:,}")


def _number(value, key: str, low: float, high: float, fail, above: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < low \
            or value > high or (above and value == low):
        bound = f"above {low:g}" if above else f"from {low:g}"
        fail(key, f"is {value!r}; give a number {bound} to {high:g}")


def _check_family(key: str, family, fail) -> None:
    at = f"families.{key}"
    if not isinstance(family, dict):
        fail(at, "must be an object")
    _keys(family, _FAMILY, _FAMILY_OPTIONAL, f"{at}.", fail)
    if family["key"] != key:
        fail(f"{at}.key", f"is {family['key']!r}, not the family's name {key!r}")
    if family["target"] not in ("fraction", "time"):
        fail(f"{at}.target", f"is {family['target']!r}; use fraction or time")
    _number(family["floor_s"], f"{at}.floor_s", 0.0, _MAX_FLOOR_S, fail)
    # A ceiling is the best fraction of the speed of light the family reaches: (0, 1].
    _number(family["ceiling"], f"{at}.ceiling", 0.0, 1.0, fail, above=True)
    for count in ("rows", "shapes"):
        _whole(family[count], f"{at}.{count}", 0, 1 << 53, fail)
    if not isinstance(family.get("validated", {}), dict):
        fail(f"{at}.validated", "must be an object")
    names = family.get("implementations", [])
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        fail(f"{at}.implementations", "must be a list of implementation names")
    residual = family["residual"]
    if residual is None:
        if family["target"] == "time":
            fail(f"{at}.residual", "is null, but a time-target family is its trees")
        return
    if not isinstance(residual, dict):
        fail(f"{at}.residual", "must be an object or null")
    _keys(residual, ("init", "rate", "trees"), (), f"{at}.residual.", fail)
    _number(residual["init"], f"{at}.residual.init", -1e3, 1e3, fail)
    _number(residual["rate"], f"{at}.residual.rate", 0.0, 1e3, fail, above=True)
    if not isinstance(residual["trees"], list):
        fail(f"{at}.residual.trees", "must be a list of trees")
    _check_trees(residual["trees"], f"{at}.residual.trees", fail)


def _check_trees(trees: list, at: str, fail) -> None:
    """Each tree: arrays of equal length; children -1 (a leaf) or a later node of the same
    tree, so that every walk ends at a leaf; an inner node's feature a feature index (sklearn
    marks leaves with -2). A family's trees are checked at once, as one set of arrays."""
    for index, tree in enumerate(trees):
        if not isinstance(tree, dict):
            fail(f"{at}[{index}]", "must be an object")
        _keys(tree, _TREE, (), f"{at}[{index}].", fail)
        if not all(isinstance(tree[k], list) for k in _TREE):
            fail(f"{at}[{index}]", f"must hold the lists {', '.join(_TREE)}")
        nodes = len(tree["feature"])
        if nodes == 0 or any(len(tree[k]) != nodes for k in _TREE):
            fail(f"{at}[{index}]", f"lists {', '.join(_TREE)} must be non-empty and of one "
                                   "length")
    if not trees:
        return
    sizes = np.array([len(t["feature"]) for t in trees])
    arrays = {}
    for side, kinds in (("feature", "i"), ("left", "i"), ("right", "i"),
                        ("threshold", "if"), ("value", "if")):
        try:
            arrays[side] = np.asarray(list(itertools.chain.from_iterable(
                t[side] for t in trees)))
        except (TypeError, ValueError):
            arrays[side] = np.asarray([None])
        if arrays[side].ndim != 1 or arrays[side].dtype.kind not in kinds:
            fail(f"{at}[*].{side}", "must hold " + ("whole numbers" if kinds == "i"
                                                     else "numbers"))
    tree_of = np.repeat(np.arange(len(trees)), sizes)
    node = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    nodes = sizes[tree_of]
    left, right, feature = arrays["left"], arrays["right"], arrays["feature"]
    leaf = left == -1

    def refuse(bad: np.ndarray, side: str, problem: str) -> None:
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            fail(f"{at}[{int(tree_of[i])}].{side}[{int(node[i])}]", problem.format(
                left=int(left[i]), right=int(right[i]), feature=int(feature[i])))

    refuse(leaf != (right == -1), "left", "and right must both be -1 (a leaf) or both nodes")
    refuse(~leaf & ((left <= node) | (left >= nodes) | (right <= node) | (right >= nodes)),
           "left", "points outside the tree ({left}, {right}); children are later nodes of "
                   "the same tree")
    refuse(~leaf & ((feature < 0) | (feature >= len(FEATURES))), "feature",
           "is {feature} at an inner node; give a feature index from 0 to "
           f"{len(FEATURES) - 1}")
