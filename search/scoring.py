"""Scoring evaluated designs against a target, and ranking them. Pure functions on DataFrames.

``score`` adds, to rows from :func:`dse.evaluate` (one model, hardware points in ``hw_point``),
the baseline's speedup on the same model, hardware point and batch, the accuracy and its drop,
and why a design misses the target. ``rank`` orders the designs that meet it, per model and
batch, by the objective.

Both take the column that holds the speed: ``speedup`` (the bound's, the default) or
``expected_speedup`` (a calibrated search: kernels as they exist). With the expected one the
target and the ranking use it, and the bound's own answer rides along in ``bound_*`` columns
(``bound_speedup_over_baseline``, ``bound_meets_target``, ``bound_rank``), so that a report can
set the two answers side by side.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from dse.accuracy import attach_accuracy
from dse.roofline.evaluator import label_column

from .target import Objective, Target

__all__ = ["VERDICTS", "pareto_mask", "rank", "score"]

VERDICTS = ("meets", "too slow", "too inaccurate", "too slow and too inaccurate", "no target",
            "does not fit", "no accuracy")
# A design at exactly r times the baseline meets the target; floating-point noise in the two
# latencies must not decide that (2:4 at 1.0x_over_2:4 is 1.0 to the last bit, by construction).
_RELATIVE_TOLERANCE = 1e-12


def score(rows: pd.DataFrame, candidates: set[str], accuracy: Mapping[str, tuple[float, str]],
          target: Target | None, speed: str = "speedup",
          lower_is_better: bool = False) -> pd.DataFrame:
    """Add target and accuracy columns to one model's evaluated rows, in place; returns them.

    ``rows`` needs ``format``, ``hw_point``, ``batch`` and ``speedup``; every (hw_point, batch)
    must hold the baseline format's row when there is a target. ``accuracy`` maps a format name
    to (percent, status); missing formats get NaN and status ``missing``. Label columns come
    out as categoricals (built from codes: millions of rows in milliseconds). Where ``rows``
    has ``fits`` (from the memory model), a design whose peak memory exceeds the DRAM capacity
    (``fits`` False; NA, no capacity in the spec, counts as fitting) gets the verdict ``does
    not fit`` and never meets the target, whatever its speed and accuracy.

    ``speed``: the column the target compares (``speedup`` or ``expected_speedup``); with
    ``expected_speedup`` and a target, the bound's verdict is added as
    ``bound_baseline_speedup``, ``bound_speedup_over_baseline`` and ``bound_meets_target``.

    ``lower_is_better``: the accuracy is a degradation (a language model's perplexity increase
    over dense), so ``accuracy_drop`` is the candidate's minus the baseline's. Either way
    ``accuracy_drop`` is how much worse than the baseline, and the target allows at most
    ``target.max_acc_drop`` of it. A candidate with no accuracy (NaN) gets the verdict ``no
    accuracy`` and never meets a target: it is kept in the results, not dropped or guessed.
    """
    out = attach_accuracy(rows, accuracy)
    formats = pd.Categorical(out["format"])
    names = [str(n) for n in formats.categories]
    codes = formats.codes.astype(np.int64)
    baseline = None if target is None else target.baseline.name
    roles = ["baseline" if n == baseline else "candidate" if n in candidates
             else "dense" if n == "dense" else "baseline" for n in names]
    is_candidate = np.array([r == "candidate" for r in roles])[codes]
    out["role"] = label_column(codes, roles)
    speedup = out[speed].to_numpy(dtype=np.float64)
    fits = (out["fits"].to_numpy(dtype=bool, na_value=True) if "fits" in out
            else np.ones(len(out), dtype=bool))
    if target is None:
        out["verdict"] = label_column((~fits).astype(np.int64), ["no target", "does not fit"])
        out["meets_target"] = is_candidate & fits
        return out
    hw = out["hw_point"].to_numpy(dtype=np.int64)
    batches, batch_idx = np.unique(out["batch"].to_numpy(), return_inverse=True)
    key = hw * len(batches) + batch_idx
    is_base = codes == names.index(baseline) if baseline in names else np.zeros(len(out), bool)
    base_speed = np.full(int(key.max()) + 1, np.nan)
    base_speed[key[is_base]] = speedup[is_base]
    baseline_speedup = base_speed[key]
    if np.isnan(baseline_speedup).any():
        raise ValueError(f"rows lack the baseline {baseline} for some hardware point and batch")
    base_acc = accuracy.get(baseline, (np.nan, "missing"))[0]
    ratio = speedup / baseline_speedup
    values = out["accuracy"].to_numpy(dtype=np.float64)
    drop = values - base_acc if lower_is_better else base_acc - values
    meets_speed = ratio >= target.ratio * (1.0 - _RELATIVE_TOLERANCE)
    meets_acc = drop <= target.max_acc_drop + 1e-9
    out["baseline"] = label_column(np.zeros(len(out), dtype=np.int64), [baseline])
    out["baseline_speedup"] = baseline_speedup
    out["speedup_over_baseline"] = ratio
    out["baseline_accuracy"] = base_acc
    out["accuracy_drop"] = drop
    out["meets_speed"] = meets_speed
    out["meets_accuracy"] = meets_acc
    out["meets_target"] = meets_speed & meets_acc & is_candidate & fits
    if speed != "speedup":  # the bound's answer beside the expectation's
        bound = out["speedup"].to_numpy(dtype=np.float64)
        bound_base = np.full(int(key.max()) + 1, np.nan)
        bound_base[key[is_base]] = bound[is_base]
        bound_ratio = bound / bound_base[key]
        out["bound_baseline_speedup"] = bound_base[key]
        out["bound_speedup_over_baseline"] = bound_ratio
        out["bound_meets_target"] = ((bound_ratio >= target.ratio * (1.0 - _RELATIVE_TOLERANCE))
                                     & meets_acc & is_candidate & fits)
    # Codes: 0 meets, 1 too slow, 2 too inaccurate, 3 both; 4 does not fit; 5 no accuracy.
    verdict = (~meets_speed).astype(np.int64) + 2 * (~meets_acc).astype(np.int64)
    verdict = np.where(np.isnan(values) & is_candidate, 5, verdict)
    verdict = np.where(fits, verdict, 4)
    out["verdict"] = label_column(verdict, [*VERDICTS[:4], "does not fit", "no accuracy"])
    return out


def pareto_mask(speedup: np.ndarray, accuracy: np.ndarray) -> np.ndarray:
    """True where no other point is at least as good in both and better in one (maximizing
    both); a point equal to a front point in both is on the front too."""
    n = len(speedup)
    if n == 0:
        return np.zeros(0, dtype=bool)
    order = np.lexsort((-accuracy, -speedup))  # speedup descending, then accuracy descending
    s, a = speedup[order], accuracy[order]
    # Walking down in speedup, a point is on the front when it is more accurate than every
    # faster (or equally fast) point before it, or the twin of the point that set that record.
    best_before = np.concatenate(([-np.inf], np.maximum.accumulate(a)[:-1]))
    strict = a > best_before
    setter = np.maximum.accumulate(np.where(strict, np.arange(n), -1))
    setter_before = np.concatenate(([-1], setter[:-1]))
    j = np.maximum(setter_before, 0)
    twin = ~strict & (setter_before >= 0) & (a == a[j]) & (s == s[j])
    keep = np.zeros(n, dtype=bool)
    keep[order] = strict | twin
    return keep


def rank(scored: pd.DataFrame, objective: Objective, speed: str = "speedup",
         lower_is_better: bool = False) -> pd.DataFrame:
    """Add ``rank`` (1 = best, per model and batch, among candidates meeting the target; NA
    elsewhere) and, for the pareto objective, ``pareto``; in place, row order kept. ``speed``
    is the speed column ranked by (see :func:`score`); with ``expected_speedup`` the bound's
    ranking is added too, as ``bound_rank`` (and ``bound_pareto``). ``lower_is_better``: the
    accuracy is a degradation (see :func:`score`), so less of it ranks first."""
    out = scored
    model = pd.Categorical(out["model"]).codes.astype(np.int64)
    _, batch = np.unique(out["batch"].to_numpy(), return_inverse=True)
    group = model * (int(batch.max()) + 1) + batch if len(out) else model
    ranks, front = _ranks(out, objective, speed, "meets_target", group, lower_is_better)
    out["rank"] = pd.arrays.IntegerArray(ranks, mask=ranks == 0)
    if objective.kind == "pareto":
        out["pareto"] = front
    if speed != "speedup":
        meets = "bound_meets_target" if "bound_meets_target" in out else "meets_target"
        ranks, front = _ranks(out, objective, "speedup", meets, group, lower_is_better)
        out["bound_rank"] = pd.arrays.IntegerArray(ranks, mask=ranks == 0)
        if objective.kind == "pareto":
            out["bound_pareto"] = front
    return out


def _ranks(out: pd.DataFrame, objective: Objective, speed: str, meets: str,
           group: np.ndarray, lower_is_better: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(rank, 0 where unranked; on the Pareto front) of every row, by ``speed``, among the
    rows where ``meets`` holds."""
    eligible = out[meets].to_numpy(dtype=bool)
    if objective.needs_accuracy:
        eligible = eligible & out["accuracy"].notna().to_numpy()
    keys, desc = _sort_keys(objective, speed)
    values = {k: out[k].to_numpy(dtype=np.float64) for k in {*keys, speed, "accuracy"}}
    if lower_is_better:  # rank and build fronts on "goodness": less degradation is better
        values["accuracy"] = -values["accuracy"]
    ranks = np.zeros(len(out), dtype=np.int64)
    front = np.zeros(len(out), dtype=bool)
    for g in np.unique(group[eligible]):
        pick = np.flatnonzero(eligible & (group == g))
        if objective.kind == "pareto":
            on_front = pareto_mask(values[speed][pick], values["accuracy"][pick])
            pick = pick[on_front]
            front[pick] = True
        order = _order({k: v[pick] for k, v in values.items()}, keys, desc)
        ranks[pick[order]] = np.arange(1, len(order) + 1)
    return ranks, front


def _sort_keys(objective: Objective, speed: str = "speedup") -> tuple[list[str], list[bool]]:
    if objective.kind == "accuracy":
        return ["accuracy", speed], [True, True]
    if objective.column is not None:
        return [objective.column, speed, "accuracy"], [False, True, True]
    return [speed, "accuracy"], [True, True]


def _order(values: Mapping[str, np.ndarray], keys: list[str], desc: list[bool]) -> np.ndarray:
    """Stable order by ``keys`` (NaN last); ties keep the designs' enumeration order."""
    columns = []
    for key, d in zip(keys, desc, strict=True):
        v = values[key]
        columns.append(np.where(np.isnan(v), np.inf, -v if d else v))
    return np.lexsort(tuple(reversed(columns)))
