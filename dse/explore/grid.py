"""One grid evaluation, shared by sweeps and searches, with the evaluator as a value.

A grid is a list of :class:`Block`: one trace on a run of accelerators under a set of formats;
every block is evaluated at the same batches, fusion models and scope. The evaluator is a value
the caller passes: :class:`Roofline` (the speed of light, the default) or :class:`Simulator`
(the event-level simulator: the roofline gives every column first, then each design's latency,
dense latency and speedup become the simulated ones, the roofline's kept as
``roofline_latency_s`` and ``roofline_speedup``). All the simulations of a grid fan out together,
over local processes or a Dask cluster. :class:`Calibrated` is the roofline with the
expectation beside it: kernel predictors (:mod:`dse.calibrate`) price every op of every design,
one op at a time, and each design gains ``expected_latency_s``, ``expected_speedup`` and
``fraction_of_sol``; the bound's columns stay as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from accelerator_models import Accelerator
from formats import Format
from formats import parse as parse_format
from workloads import Trace

from ..calibrate.expected import expected_layers
from ..calibrate.predictor import CalibrationError, DevicePredictors, reference_hardware
from ..roofline import DEFAULT_NUMERICS, Numerics, evaluate, evaluate_layers
from ..roofline.evaluator import label_column
from ..roofline.pricing import stack_formats
from ..sim import SimConfig, simulated
from ..sim.fanout import Progress

__all__ = ["EVALUATORS", "EXPECTED_COLUMNS", "ROOFLINE", "Block", "Calibrated", "Evaluator",
           "Roofline", "Simulator", "evaluate_grid"]


@dataclass(frozen=True)
class Block:
    """One trace on ``accelerators`` under ``formats`` (dense is always added)."""

    trace: Trace
    accelerators: tuple[Accelerator, ...]
    formats: tuple[Format | str, ...]


@dataclass(frozen=True)
class Roofline:
    """The speed-of-light evaluator (:func:`dse.evaluate`)."""

    name = "roofline"

    def refine(self, frames: list[pd.DataFrame], blocks: Sequence[Block],
               numerics: Numerics) -> list[pd.DataFrame]:
        """The roofline's frames are its answer."""
        return frames


@dataclass(frozen=True)
class Simulator:
    """The event-level simulator with ``config``, fanned out over ``workers`` local processes
    or a Dask cluster (``dask``: ``"local"`` or ``tcp://host:port``); ``progress(done, total)``
    hears of each finished design."""

    config: SimConfig = field(default_factory=SimConfig)
    workers: int = 1
    dask: str | None = None
    progress: Progress | None = None

    name = "simulate"

    def refine(self, frames: list[pd.DataFrame], blocks: Sequence[Block],
               numerics: Numerics) -> list[pd.DataFrame]:
        """The frames with simulated latencies. Accelerators are told apart by their position in
        the grid, not their names: a search's hardware points share their base's name."""
        keyed, traces, accelerators, formats = [], {}, {}, {}
        for i, (frame, block) in enumerate(zip(frames, blocks, strict=True)):
            keys = [f"{i}:{j}" for j in range(len(block.accelerators))]
            accelerators.update(zip(keys, block.accelerators, strict=True))
            traces[block.trace.model] = block.trace
            formats.update((f.name, f) for f in _parsed(block.formats))
            keyed.append(frame.assign(hardware=np.array(keys, dtype=object)[
                _hardware_index(frame, block)]))
        sizes = [len(f) for f in frames]
        out = simulated(pd.concat(keyed, ignore_index=True), traces, accelerators, formats,
                        self.config, numerics, workers=self.workers, dask=self.dask,
                        progress=self.progress)
        parts = np.split(np.arange(len(out)), np.cumsum(sizes)[:-1])
        result = []
        for frame, rows in zip(frames, parts, strict=True):
            part = out.iloc[rows].reset_index(drop=True)
            part["hardware"] = frame["hardware"].to_numpy()  # the names, not the keys
            for column in frame.columns:  # keep the categoricals the engines expect
                if isinstance(frame[column].dtype, pd.CategoricalDtype):
                    part[column] = part[column].astype(frame[column].dtype)
            result.append(part)
        return result


#: Columns :class:`Calibrated` adds to every design row, in order.
EXPECTED_COLUMNS = ("expected_latency_s", "expected_speedup", "fraction_of_sol",
                    "validated_rmspe", "predictors", "calibration")
#: Op rows (designs x ops) the calibrated evaluator prices at once: bounds its memory (about
#: 1 KB a row) whatever the number of hardware points of a block.
_EXPECTED_ROWS = 200_000


@dataclass(frozen=True)
class Calibrated:
    """The roofline with the expectation beside it: every op of every design priced by the
    kernel predictors of one measured device (``dse.calibrate``), as ``dse evaluate
    --calibrated`` prices them.

    Adds :data:`EXPECTED_COLUMNS` to the roofline's rows: ``expected_latency_s`` (the sum of
    the ops' expected kernel times: kernels as they exist run one op at a time, so the
    expectation is unfused whatever the rows' fusion model), ``expected_speedup`` (expected
    dense / expected latency, same hardware point and batch), ``fraction_of_sol`` (the row's
    bound latency / expected latency), ``validated_rmspe`` (held-out RMSPE of the predictors
    used, weighted by expected time), ``predictors`` (which predictors priced the design's
    ops) and ``calibration`` (ops priced without their own family's data, and hardware the
    predictors were not measured on: there the fraction of the speed of light carries over).
    Accelerators are told apart by their position in the grid, as a search's hardware points
    share their base's name; one equal to the predictors' reference spec counts as that
    device, any other as a variant of it."""

    predictors: DevicePredictors

    name = "calibrated"

    def refine(self, frames: list[pd.DataFrame], blocks: Sequence[Block],
               numerics: Numerics) -> list[pd.DataFrame]:
        reference = _reference_spec(self.predictors)
        return [with_expected(frame, block, self.predictors, numerics, reference)
                for frame, block in zip(frames, blocks, strict=True)]


def _reference_spec(predictors: DevicePredictors) -> Accelerator | None:
    """The spec the predictors were measured on, as ``dse calibrate`` resolves it
    (:func:`~dse.calibrate.predictor.reference_hardware`): a catalog name, or the probed spec
    (a CPU's ``host``) the training dataset's provenance keeps. None when neither is found:
    then nothing equals it."""
    sources = [s for s in (predictors.provenance.get("dataset"), predictors.name) if s]
    try:
        return reference_hardware(predictors, list(dict.fromkeys(str(s) for s in sources)))
    except CalibrationError:
        return None


def _as_device(accelerators: Sequence[Accelerator], reference: Accelerator | None,
               device: str) -> list[Accelerator]:
    """The accelerators named so that ``expected_layers`` tells the predictors' own device
    (equal to its spec, whatever its name and the overrides that made it: a sweep's point at
    the device's own value is the device) from variants of it (any other name)."""
    out = []
    for a in accelerators:
        same = reference is not None and dataclasses.replace(
            a, name=reference.name, overrides=reference.overrides) == reference
        name = device if same else (a.name if a.name != device else f"{a.name} (varied)")
        out.append(a if a.name == name else dataclasses.replace(a, name=name))
    return out


def _sets(labels: np.ndarray, used: np.ndarray, n_designs: int) -> np.ndarray:
    """Per design (``labels`` and ``used`` hold ``n_designs`` equal runs of op rows), the
    distinct "; "-separated parts of the labels of its used rows, sorted and joined."""
    codes, names = pd.factorize(pd.Series(labels, dtype=object))
    names = [str(n) for n in names]
    if len(names) > 62:  # beyond a bit mask: per design, in Python (never seen in practice)
        per = codes.reshape(n_designs, -1)
        keep = used.reshape(n_designs, -1)
        return np.array([_join({names[c] for c in row[k]})
                         for row, k in zip(per, keep, strict=True)], dtype=object)
    bits = np.where(used, np.left_shift(np.int64(1), codes.astype(np.int64)), 0)
    masks = np.bitwise_or.reduce(bits.reshape(n_designs, -1), axis=1)
    unique, inverse = np.unique(masks, return_inverse=True)
    text = [_join({names[c] for c in range(len(names)) if int(m) >> c & 1}) for m in unique]
    return np.array(text, dtype=object)[inverse]


def _join(labels: set[str]) -> str:
    return "; ".join(sorted({p for label in labels for p in label.split("; ") if p}))


def with_expected(frame: pd.DataFrame, block: Block, predictors: DevicePredictors,
                  numerics: Numerics = DEFAULT_NUMERICS,
                  reference: Accelerator | None = None) -> pd.DataFrame:
    """``frame`` (``dse.evaluate`` rows of ``block``: one scope, any fusion models) with
    :data:`EXPECTED_COLUMNS` (see :class:`Calibrated`). ``reference``: the spec of the
    predictors' device (resolved as ``dse calibrate`` does when None)."""
    if reference is None:
        reference = _reference_spec(predictors)
    scopes = pd.unique(frame["scope"].astype(object))
    if len(scopes) != 1:
        raise ValueError(f"with_expected takes rows of one scope, not {list(scopes)}")
    batches = [int(b) for b in pd.unique(frame["batch"])]
    accelerators = _as_device(block.accelerators, reference, predictors.reference_hw)
    # Dense first, then the formats without repeats: the order of evaluate's designs.
    stacked = [f.name for f in stack_formats(_parsed(block.formats))]
    per_hw = len(stacked) * len(batches)
    # Hardware points in groups, so that the op rows priced at once stay bounded.
    step = max(1, _EXPECTED_ROWS // (per_hw * max(1, len(block.trace.ops))))
    parts: dict[str, list[np.ndarray]] = {c: [] for c in EXPECTED_COLUMNS
                                          if c != "fraction_of_sol"}
    for first in range(0, len(accelerators), step):
        group = accelerators[first:first + step]
        n = len(group) * per_hw
        layers = evaluate_layers(block.trace, group, stacked, batches, fusion="unfused",
                                 scope=str(scopes[0]), numerics=numerics)
        if len(layers) == 0:  # no op in scope: nothing to price
            for column in parts:
                parts[column].append(np.full(n, "", dtype=object)
                                     if column in ("predictors", "calibration")
                                     else np.full(n, np.nan))
            continue
        priced = expected_layers(layers, block.trace, predictors, numerics=numerics)
        seconds = priced["expected_s"].to_numpy(dtype=np.float64).reshape(n, -1)
        rmspe = priced["validated_rmspe"].to_numpy(dtype=np.float64).reshape(n, -1)
        weights = np.where(np.isnan(rmspe), 0.0, seconds)
        total = seconds.sum(axis=1)
        expected = total.reshape(len(group), len(stacked), len(batches))
        with np.errstate(divide="ignore", invalid="ignore"):
            parts["expected_speedup"].append((expected[:, :1, :] / expected).ravel())
            parts["validated_rmspe"].append(np.where(
                weights.sum(axis=1) > 0, (np.nan_to_num(rmspe) * weights).sum(axis=1)
                / weights.sum(axis=1), np.nan))
        parts["expected_latency_s"].append(total)
        used = priced["expected_s"].to_numpy() > 0
        parts["predictors"].append(_sets(priced["predictor"].to_numpy(dtype=object), used, n))
        parts["calibration"].append(_sets(priced["calibration"].to_numpy(dtype=object), used, n))
    per_design = {c: np.concatenate(v) for c, v in parts.items()}
    # evaluate's rows: per fusion model, every design in (hardware, format, batch) order, as
    # evaluate_layers runs them; the formats check that the two agree.
    designs = len(accelerators) * per_hw
    design = np.tile(np.arange(designs), len(frame) // max(designs, 1))
    names = np.tile(np.repeat(np.array(stacked, dtype=object), len(batches)), len(accelerators))
    if len(design) != len(frame) or not np.array_equal(
            frame["format"].to_numpy(dtype=object), names[design]):
        raise ValueError("with_expected: the rows are not dse.evaluate's rows of the block")
    out = frame.copy()
    categorical = isinstance(frame["format"].dtype, pd.CategoricalDtype)
    for column in EXPECTED_COLUMNS:
        if column == "fraction_of_sol":
            with np.errstate(divide="ignore", invalid="ignore"):
                out[column] = (out["latency_s"].to_numpy(dtype=np.float64)
                               / out["expected_latency_s"].to_numpy(dtype=np.float64))
        elif column in ("predictors", "calibration"):
            codes, labels = pd.factorize(per_design[column])
            out[column] = label_column(codes[design], [str(x) for x in labels], categorical)
        else:
            out[column] = per_design[column][design]
    return out


Evaluator = Roofline | Simulator | Calibrated
ROOFLINE = Roofline()
#: The evaluators by their command-line name.
EVALUATORS = ("roofline", "simulate")


def _parsed(fmts: Sequence[Format | str]) -> list[Format]:
    return [f if isinstance(f, Format) else parse_format(f) for f in fmts]


def _hardware_index(frame: pd.DataFrame, block: Block) -> np.ndarray:
    """Each row's accelerator position: ``evaluate`` runs fusion-major, then hardware-major."""
    per_fusion = len(frame) // frame["fusion"].nunique()
    per_hw = per_fusion // len(block.accelerators)
    return np.tile(np.repeat(np.arange(len(block.accelerators)), per_hw),
                   len(frame) // per_fusion)


def evaluate_grid(blocks: Sequence[Block], batches: Sequence[int],
                  fusion: str | Sequence[str] = "unfused", scope: str = "gemm",
                  numerics: Numerics = DEFAULT_NUMERICS, evaluator: Evaluator = ROOFLINE,
                  categorical: bool = False) -> list[pd.DataFrame]:
    """One frame per block (``dse.evaluate``'s columns and row order), from ``evaluator``."""
    frames = [evaluate(b.trace, list(b.accelerators), list(b.formats), list(batches),
                       fusion=fusion, scope=scope, numerics=numerics, categorical=categorical)
              for b in blocks]
    return evaluator.refine(frames, blocks, numerics)
