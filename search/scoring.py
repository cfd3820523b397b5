"""Scoring evaluated designs against a target, and ranking them. Pure functions on DataFrames.

``score`` adds, to rows from :func:`dse.evaluate` (one model, hardware points in ``hw_point``),
the baseline's speedup on the same model, hardware point and batch, the accuracy and its drop,
and why a design misses the target. ``rank`` orders the designs that meet it, per model and
batch, by the objective.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from .target import Objective, Target

__all__ = ["VERDICTS", "pareto_mask", "rank", "score"]

VERDICTS = ("meets", "too slow", "too inaccurate", "too slow and too inaccurate", "no target")
# A design at exactly r times the baseline meets the target; floating-point noise in the two
# latencies must not decide that (2:4 at 1.0x_over_2:4 is 1.0 to the last bit, by construction).
_RELATIVE_TOLERANCE = 1e-12


def score(rows: pd.DataFrame, candidates: set[str], accuracy: Mapping[str, tuple[float, str]],
          target: Target | None) -> pd.DataFrame:
    """Add target and accuracy columns to one model's evaluated rows (a new frame).

    ``rows`` needs ``format``, ``hw_point``, ``batch`` and ``speedup``; every (hw_point, batch)
    must hold the baseline format's row when there is a target. ``accuracy`` maps a format name
    to (percent, status); missing formats get NaN and status ``missing``.
    """
    out = rows.copy()
    fmt = out["format"].to_numpy(dtype=object)
    names = pd.unique(fmt)
    acc_of = {n: accuracy.get(n, (np.nan, "missing")) for n in names}
    codes = pd.Categorical(fmt, categories=names).codes
    out["accuracy"] = np.array([acc_of[n][0] for n in names], dtype=np.float64)[codes]
    out["accuracy_status"] = np.array([acc_of[n][1] for n in names], dtype=object)[codes]
    role = np.where(np.isin(fmt, list(candidates)), "candidate",
                    np.where(fmt == "dense", "dense", "baseline"))
    if target is not None and target.baseline.name in candidates:
        role = np.where(fmt == target.baseline.name, "baseline", role)
    out["role"] = role
    speedup = out["speedup"].to_numpy()
    if target is None:
        out["verdict"] = "no target"
        out["meets_target"] = role == "candidate"
        return out
    base = target.baseline.name
    hw = out["hw_point"].to_numpy(dtype=np.int64)
    batches, batch_idx = np.unique(out["batch"].to_numpy(), return_inverse=True)
    key = hw * len(batches) + batch_idx
    is_base = fmt == base
    base_speed = np.full(int(key.max()) + 1, np.nan)
    base_speed[key[is_base]] = speedup[is_base]
    baseline_speedup = base_speed[key]
    if np.isnan(baseline_speedup).any():
        raise ValueError(f"rows lack the baseline {base} for some hardware point and batch")
    base_acc = acc_of.get(base, accuracy.get(base, (np.nan, "missing")))[0]
    ratio = speedup / baseline_speedup
    drop = base_acc - out["accuracy"].to_numpy()
    meets_speed = ratio >= target.ratio * (1.0 - _RELATIVE_TOLERANCE)
    meets_acc = drop <= target.max_acc_drop + 1e-9
    out["baseline"] = base
    out["baseline_speedup"] = baseline_speedup
    out["speedup_over_baseline"] = ratio
    out["baseline_accuracy"] = base_acc
    out["accuracy_drop"] = drop
    out["meets_speed"] = meets_speed
    out["meets_accuracy"] = meets_acc
    out["meets_target"] = meets_speed & meets_acc & (role == "candidate")
    verdict = np.where(meets_speed, np.where(meets_acc, "meets", "too inaccurate"),
                       np.where(meets_acc, "too slow", "too slow and too inaccurate"))
    out["verdict"] = verdict
    return out


def pareto_mask(speedup: np.ndarray, accuracy: np.ndarray) -> np.ndarray:
    """True where no other point is at least as good in both and better in one (maximizing)."""
    n = len(speedup)
    order = np.lexsort((-accuracy, -speedup))  # speedup desc, then accuracy desc
    keep = np.zeros(n, dtype=bool)
    best_acc = -np.inf
    last = (np.nan, np.nan)
    for i in order:
        s, a = speedup[i], accuracy[i]
        if a > best_acc:
            keep[i] = True
            best_acc = a
            last = (s, a)
        elif a == last[1] and s == last[0]:
            keep[i] = True  # an equal point is not dominated by its twin
    return keep


def rank(scored: pd.DataFrame, objective: Objective) -> pd.DataFrame:
    """Add ``rank`` (1 = best, per model and batch, among candidates meeting the target; NA
    elsewhere) and ``pareto`` (for the pareto objective); sorted by model, batch, rank."""
    out = scored.copy()
    eligible = out["meets_target"].to_numpy(dtype=bool) & out["accuracy"].notna().to_numpy() \
        if objective.needs_accuracy else out["meets_target"].to_numpy(dtype=bool)
    if objective.kind == "pareto":
        out["pareto"] = False
    keys, sort_desc = _sort_keys(objective)
    ranks = np.full(len(out), -1, dtype=np.int64)
    for _, index in out.groupby(["model", "batch"], sort=False).indices.items():
        pick = index[eligible[index]]
        if len(pick) == 0:
            continue
        group = out.iloc[pick]
        if objective.kind == "pareto":
            front = pareto_mask(group["speedup"].to_numpy(), group["accuracy"].to_numpy())
            out.iloc[pick[front], out.columns.get_loc("pareto")] = True
            pick, group = pick[front], group[front]
        order = _order(group, keys, sort_desc)
        ranks[pick[order]] = np.arange(1, len(order) + 1)
    out["rank"] = pd.array(np.where(ranks > 0, ranks, 0), dtype="Int64")
    out.loc[ranks <= 0, "rank"] = pd.NA
    return out


def _sort_keys(objective: Objective) -> tuple[list[str], list[bool]]:
    if objective.kind == "accuracy":
        return ["accuracy", "speedup"], [True, True]
    if objective.kind == "cost":
        return [objective.column, "speedup", "accuracy"], [False, True, True]
    return ["speedup", "accuracy"], [True, True]


def _order(group: pd.DataFrame, keys: list[str], desc: list[bool]) -> np.ndarray:
    """Stable order by ``keys`` (NaN last), ties broken by the design's position."""
    columns = []
    for key, d in zip(keys, desc, strict=True):
        values = group[key].to_numpy(dtype=np.float64)
        values = np.where(np.isnan(values), np.inf, -values if d else values)
        columns.append(values)
    return np.lexsort(tuple(reversed(columns)))
