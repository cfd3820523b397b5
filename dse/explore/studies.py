"""Built-in sensitivity studies. Pure functions over the evaluator; reports draw their frames.

``feature_overhead``: how the share of DRAM traffic that is features (activations, which pruning
cannot remove) grows with batch size, what that does to each format's speedup, the batch at which
each format's speedup falls below a threshold, and a tornado of how one reference design's
speedup responds to each hardware field.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

import accelerator_models
from accelerator_models import FIELDS, Accelerator
from formats import NM
from formats import parse as parse_format
from workloads import Trace

from ..roofline import DEFAULT_NUMERICS, EvaluationError, Numerics, evaluate, evaluate_energy

__all__ = ["DEFAULT_BATCHES", "DEFAULT_FORMATS", "FeatureOverhead", "crossover_batches",
           "feature_overhead", "tornado"]

DEFAULT_FORMATS = ("2:4", "1:4", "block16@87.5%", "unstructured@87.5%")
DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Fields a tornado leaves alone: they are not rates, or moving them changes which kernels run.
_NOT_SWEPT = ("sparse_tensor.patterns", "block_sparse.supported", "block_sparse.min_block_size")


@dataclass
class FeatureOverhead:
    evaluated: pd.DataFrame   # every model x format x batch (dense included)
    shares: pd.DataFrame      # model, format, feature share at batch 1 and 32
    crossover: pd.DataFrame   # model, format, first batch with speedup < threshold
    tornado: pd.DataFrame     # model, field, low/high value and speedup, base speedup
    threshold: float
    overrides: tuple[str, ...] = ()  # the hardware overrides the study ran with


def crossover_batches(evaluated: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Per model and format: the smallest batch whose speedup is below ``threshold`` (NA when
    none is), and the speedup at the smallest batch."""
    rows = []
    frame = evaluated[evaluated["format"].astype(str) != "dense"]
    for (model, fmt), group in frame.groupby(["model", "format"], sort=False, observed=True):
        group = group.sort_values("batch")
        below = group[group["speedup"] < threshold]
        rows.append({"model": model, "format": fmt,
                     "speedup_at_smallest_batch": float(group["speedup"].iloc[0]),
                     "first_batch_below": int(below["batch"].iloc[0]) if len(below) else pd.NA,
                     "largest_batch": int(group["batch"].iloc[-1])})
    out = pd.DataFrame(rows)
    out["first_batch_below"] = out["first_batch_below"].astype("Int64")
    return out


def _numeric_fields(acc: Accelerator) -> list[tuple[str, float]]:
    found = [("dram_bandwidth_bytes_per_s", acc.dram_bandwidth_bytes_per_s)]
    found += [(f"tensor_flops_per_s.{k}", v) for k, v in sorted(acc.tensor_flops_per_s.items())]
    found += [(f"vector_flops_per_s.{k}", v) for k, v in sorted(acc.vector_flops_per_s.items())]
    if acc.sparse_tensor is not None:
        found.append(("sparse_tensor.nonzero_rate", acc.sparse_tensor.nonzero_rate))
    return [(f, v) for f, v in found if f in FIELDS and f not in _NOT_SWEPT]


def tornado(trace: Trace, hardware: str, overrides: Sequence[str], fmt: str, batch: int,
            factor: float = 2.0, fusion: str = "unfused", scope: str = "gemm",
            numerics: Numerics = DEFAULT_NUMERICS) -> pd.DataFrame:
    """Speedup of ``fmt`` at ``batch`` with each numeric hardware field divided and multiplied
    by ``factor`` (``nonzero_rate`` capped at 1), one field at a time."""
    base = accelerator_models.load(hardware, overrides)
    base_speedup = float(evaluate(trace, base, fmt, batch, fusion=fusion, scope=scope,
                                  numerics=numerics)
                         .set_index("format").loc[fmt, "speedup"])
    rows = []
    for field, value in _numeric_fields(base):
        low, high = value / factor, value * factor
        if field == "sparse_tensor.nonzero_rate":
            high = min(1.0, high)
        speeds = []
        for v in (low, high):
            acc = accelerator_models.derive(hardware, {field: float(v)}, overrides=overrides)
            frame = evaluate(trace, acc, fmt, batch, fusion=fusion, scope=scope,
                             numerics=numerics)
            speeds.append(float(frame.set_index("format").loc[fmt, "speedup"]))
        rows.append({"model": trace.model, "format": fmt, "batch": batch, "field": field,
                     "value": value, "low_value": low, "high_value": high,
                     "low_speedup": speeds[0], "high_speedup": speeds[1],
                     "base_speedup": base_speedup})
    return pd.DataFrame(rows)


def feature_overhead(traces: Sequence[Trace], hardware: str = "a100",
                     overrides: Sequence[str] = (), formats: Sequence[str] = DEFAULT_FORMATS,
                     batches: Sequence[int] = DEFAULT_BATCHES, threshold: float = 1.1,
                     tornado_format: str = "2:4", tornado_batch: int = 1,
                     fusion: str = "unfused", scope: str = "gemm",
                     tornado_model: str | None = None,
                     numerics: Numerics = DEFAULT_NUMERICS) -> FeatureOverhead:
    """The study over ``traces``; the tornado is drawn for one model: ``tornado_model``
    (default convnext_tiny when studied, else the first)."""
    if not math.isfinite(threshold) or threshold <= 0:
        raise EvaluationError(f"--threshold {threshold}: give a positive speedup, e.g. 1.1")
    if not any(o.strip().startswith("sparse_tensor.patterns") for o in overrides):
        # A stock A100 runs only 2:4; let the sparse tensor core run every N:M format studied,
        # so that 1:4's speedup shows features, not a missing kernel (say so with --set).
        nm = [f for f in formats if isinstance(parse_format(f), NM)]
        if nm:
            overrides = [*overrides, "sparse_tensor.patterns=" + ",".join(nm)]
    acc = accelerator_models.load(hardware, overrides)
    # With energy: the features' share of the energy beside their share of the traffic (where
    # the spec lacks an energy figure, that part is left out and the shares say so in
    # energy_unpriced).
    frames = [evaluate_energy(t, acc, list(formats), list(batches), fusion=fusion, scope=scope,
                              numerics=numerics) for t in traces]
    evaluated = pd.concat(frames, ignore_index=True)
    evaluated["feature_energy_share"] = evaluated["energy_features_j"] / evaluated["energy_j"]
    shares = []
    for model, group in evaluated.groupby("model", sort=False):
        for fmt, rows in group.groupby("format", sort=False):
            by_batch = rows.set_index("batch")["feature_bytes_share"]
            energy = rows.set_index("batch")["feature_energy_share"]
            shares.append({"model": model, "format": fmt,
                           "feature_share_batch_1": by_batch.get(1, np.nan),
                           "feature_share_batch_32": by_batch.get(32, np.nan),
                           "feature_energy_share_batch_1": energy.get(1, np.nan),
                           "feature_energy_share_batch_32": energy.get(32, np.nan)})
    models = [t.model for t in traces]
    pick = tornado_model or ("convnext_tiny" if "convnext_tiny" in models else models[0])
    if pick not in models:
        raise EvaluationError(f"--tornado-model {pick}: not among the studied models "
                              f"({', '.join(models)})")
    torn = tornado(traces[models.index(pick)], hardware, overrides, tornado_format,
                   tornado_batch, fusion=fusion, scope=scope, numerics=numerics)
    return FeatureOverhead(evaluated, pd.DataFrame(shares),
                           crossover_batches(evaluated, threshold), torn, threshold,
                           tuple(overrides))
