"""The Optuna engine: large or continuous spaces, sampled by TPE (NSGA-II for Pareto fronts).

A trial is one design (format, base hardware, a value per knob) evaluated on every model and
batch of the space. Its value aggregates over them (the geometric mean of the speedups, the mean
accuracy, the minimized hardware field, or the geometric mean of a minimized design column:
``energy_per_inference_j`` for ``--objective energy``, ``edp_js`` for ``edp``) and the target
becomes two Optuna constraints (speed and accuracy, each <= 0 when met) on the worst model and
batch. A design that does not fit in DRAM on some model and batch is recorded at the worst value
too (the constraints stay the target's two), and its user attribute ``fits`` is false.

The trial budget is exact across workers: a worker takes the study lock, counts the trials that
count (complete, running, pruned), asks for a new one only below the budget and takes a lease on
it, and releases the lock; it reports the trial under the lock too. A running trial whose lease
expired or is missing (its worker died between asking and leasing), or whose worker is a
vanished process of this machine, is marked failed (user attribute ``interrupted``) under the
lock by any other worker, and its design is queued again, so completed trials are never lost or
repeated. Optuna's own heartbeat (``RDBStorage(heartbeat_interval=...)``, ``fail_stale_trials``)
is not used: it runs only inside ``study.optimize``, takes whole seconds, judges staleness by the
reader's grace period rather than the holder's, and would fail trials outside the study lock.

Studies open in Optuna's tools (optuna-dashboard, ``optuna.load_study``) as they are: the metric
names are set (``geomean_speedup``, ``mean_accuracy`` or the minimized ``hw.FIELD``), and the
target's two constraints are the list that Optuna and optuna-dashboard read (system attribute
``constraints``, ``[speed, accuracy]``: feasible when both are <= 0; named in the study's user
attribute ``constraints``). A design that misses the target is recorded at the worst value (-inf
when maximizing, +inf when minimizing): Optuna's samplers rank infeasible trials by their
constraints alone, never by their values, and optuna-dashboard, which picks its best trials by
value, then shows the best designs that meet it. The design's own figures are user attributes
(``speedup``, ``accuracy``, the worst ``speedup_over_baseline`` and ``accuracy_drop`` and, per
model and batch, a one-line summary). An exhaustive study is written, once complete, as an
Optuna study of the same name with one completed trial per recorded design (:func:`write_designs`).

A calibrated study (``--calibrated DEVICE``) takes the expected speedup (kernels as they exist)
wherever the above says speedup: the value (``geomean_expected_speedup``), the speed constraint
and the ranking; the bound's geometric-mean speedup stays a user attribute (``speedup``) beside
``expected_speedup``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import math
import sqlite3
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import optuna
import pandas as pd
import sqlalchemy as sa
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from .problem import Problem
from .scoring import pareto_mask
from .space import CANDIDATES, HardwarePoint
from .storage import LEASE_S, Storage, gc_paused, process_gone, worker_id

__all__ = ["close", "design_table", "designs_frame", "distributions", "ensure", "holders", "label",
           "metric_names", "optuna_storage", "params_of", "quiet", "reclaim", "run_trials",
           "write_designs"]

COUNTED = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.PRUNED)
#: Optuna constraints (feasible when <= 0): the worst model-and-batch's shortfall against the
#: target's speed ratio, and its accuracy drop beyond the allowed one.
_CONSTRAINTS = ("speed", "accuracy")
#: The system attribute Optuna (its list form) and optuna-dashboard read constraints from.
CONSTRAINTS_ATTR = "constraints"
_INTERRUPTED = "interrupted"
#: Accuracy drop (points) taken for a design whose accuracy is unknown: it cannot meet a target.
_UNKNOWN_DROP = 100.0


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Hold Optuna's log level at WARNING or above while the block runs (its INFO lines, one
    per trial, would print from library code), then restore the caller's."""
    before = optuna.logging.get_verbosity()
    if before < logging.WARNING:
        optuna.logging.set_verbosity(logging.WARNING)
    try:
        yield
    finally:
        if before < logging.WARNING:
            optuna.logging.set_verbosity(before)


# One Optuna connection per study database and process: building one checks the schema.
_BACKENDS: weakref.WeakKeyDictionary[Storage, optuna.storages.RDBStorage] = (
    weakref.WeakKeyDictionary())


def optuna_storage(storage: Storage) -> optuna.storages.RDBStorage:
    backend = _BACKENDS.get(storage)
    if backend is None:
        kwargs: dict[str, Any] = {}
        if storage.backend == "sqlite":
            kwargs["connect_args"] = {"timeout": 60, "factory": _SQLiteConnection}
        else:
            kwargs["pool_pre_ping"] = True
        # A database Optuna never wrote to gets its tables from this Optuna, stamped with its
        # schema's revision: checking that they are the revision this Optuna reads (its
        # migration scripts loaded again) could only pass.
        fresh = not sa.inspect(storage.engine).has_table("studies")
        with gc_paused():  # imports (Alembic's among them) and Optuna's schema
            backend = _BACKENDS[storage] = optuna.storages.RDBStorage(
                storage.url, engine_kwargs=kwargs, skip_compatibility_check=fresh)
    return backend


class _SQLiteConnection(sqlite3.Connection):
    """Optuna's connections to a SQLite study with the study's own setting
    (``search.storage``): in WAL mode, synced to disk at each checkpoint rather than at each
    commit (Optuna commits every attribute it sets and every trial it tells: ~1 ms each of
    waiting for the disk on this VM)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.execute("PRAGMA synchronous=NORMAL")


def close(storage: Storage) -> None:
    """Close the Optuna connections to ``storage``'s database, if any were opened."""
    backend = _BACKENDS.pop(storage, None)
    if backend is not None:
        backend.engine.dispose()


def _encode(value: Any) -> Any:
    """Optuna's categorical choices are scalars: pattern lists travel as "2:4,1:4"."""
    return ",".join(value) if isinstance(value, tuple) else value


def distributions(problem: Problem) -> dict[str, BaseDistribution]:
    space = problem.space
    dists: dict[str, BaseDistribution] = {
        "format": CategoricalDistribution(list(problem.candidates))}
    if len(space.hardware) > 1:
        dists["hardware"] = CategoricalDistribution(list(range(len(space.hardware))))
    for knob in space.knobs:
        if knob.finite:
            dists[knob.column] = CategoricalDistribution([_encode(v) for v in knob.values])
        elif knob.path == "block_sparse.min_block_size":
            dists[knob.column] = IntDistribution(int(knob.low), int(knob.high), log=knob.log)
        else:
            dists[knob.column] = FloatDistribution(knob.low, knob.high, log=knob.log)
    return dists


def params_of(problem: Problem, fmt: str, point: HardwarePoint) -> dict[str, Any]:
    """The Optuna parameters of a design (the inverse of :func:`design_of`)."""
    params: dict[str, Any] = {"format": fmt}
    if len(problem.space.hardware) > 1:
        params["hardware"] = point.base
    for knob, value in zip(problem.space.knobs, point.values, strict=True):
        params[knob.column] = _encode(value)
    return params


def design_of(problem: Problem, params: dict[str, Any]) -> tuple[str, HardwarePoint]:
    values = []
    for knob in problem.space.knobs:
        value = params[knob.column]
        if knob.path == "sparse_tensor.patterns" and value != CANDIDATES:
            value = tuple(p for p in value.split(",") if p)
        values.append(value)
    return params["format"], HardwarePoint(int(params.get("hardware", 0)), tuple(values))


def directions(problem: Problem) -> list[str]:
    kind = problem.objective.kind
    if kind == "pareto":
        return ["maximize", "maximize"]
    return ["minimize"] if problem.objective.column is not None else ["maximize"]


def _sampler(problem: Problem, seed: int) -> optuna.samplers.BaseSampler:
    # Constraints reach the samplers through the trials' ``constraints`` system attribute,
    # set by run_trials.
    if problem.objective.kind == "pareto":
        return optuna.samplers.NSGAIISampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def metric_names(problem: Problem) -> list[str]:
    """The names of a study's values, as Optuna and optuna-dashboard show them."""
    kind = problem.objective.kind
    if kind == "accuracy":
        return ["mean_accuracy"]
    speed = f"geomean_{problem.speed}"
    if kind == "pareto":
        return [speed, "mean_accuracy"]
    if problem.objective.per_row:
        return [f"geomean_{problem.objective.column}"]
    if kind == "cost":
        return [str(problem.objective.column)]
    return [speed]


def label(problem: Problem, handle: optuna.Study, engine: str) -> None:
    """Name the study's values and say, in user attributes, what a trial is."""
    with warnings.catch_warnings():  # experimental since Optuna 3.2, and stable in use
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        handle.set_metric_names(metric_names(problem))
    attrs: dict[str, Any] = {
        "engine": engine, "objective": problem.objective.text,
        "trial": "one design (format, hardware point) on every model and batch",
        "target": None if problem.target is None else problem.target.text}
    if problem.target is not None:
        attrs["max_acc_drop"] = problem.target.max_acc_drop
        attrs[CONSTRAINTS_ATTR] = list(_CONSTRAINTS)
    for key, value in attrs.items():
        handle.set_user_attr(key, value)


def create(problem: Problem, storage: Storage, study: str) -> None:
    handle = optuna.create_study(study_name=study, storage=optuna_storage(storage),
                                 directions=directions(problem))
    label(problem, handle, "optuna")


def ensure(problem: Problem, storage: Storage, study: str) -> bool:
    """Create the Optuna study if it is missing (a kill between storing the study's settings
    and creating it); True when it was."""
    try:
        optuna_storage(storage).get_study_id_from_name(study)
        return False
    except KeyError:
        handle = optuna.create_study(study_name=study, storage=optuna_storage(storage),
                                     directions=directions(problem), load_if_exists=True)
        label(problem, handle, "optuna")
        return True


def load(problem: Problem, storage: Storage, study: str, seed: int) -> optuna.Study:
    return optuna.load_study(study_name=study, storage=optuna_storage(storage),
                             sampler=_sampler(problem, seed))


def objective_values(problem: Problem, rows: pd.DataFrame) -> tuple[list[float], list[float]]:
    """A design's values and constraints from its scored rows (one per model and batch)."""
    speedup = float(np.exp(np.mean(np.log(rows[problem.speed].to_numpy(dtype=np.float64)))))
    accuracy = float(np.mean(rows["accuracy"].to_numpy()))
    kind = problem.objective.kind
    if kind == "pareto":
        values = [speedup, accuracy]
    elif kind == "accuracy":
        values = [accuracy]
    elif problem.objective.per_row:
        values = [_geomean(rows[problem.objective.column].to_numpy(dtype=np.float64))]
    elif kind == "cost":
        values = [float(rows[problem.objective.column].iloc[0])]
    else:
        values = [speedup]
    constraints: list[float] = []
    if problem.target is not None:
        speed_gap = problem.target.ratio - rows["speedup_over_baseline"].to_numpy()
        drop = np.nan_to_num(rows["accuracy_drop"].to_numpy(dtype=np.float64),
                             nan=_UNKNOWN_DROP)
        acc_gap = drop - problem.target.max_acc_drop
        constraints = [float(speed_gap.max()), float(acc_gap.max())]
    return values, constraints


def _geomean(values: np.ndarray) -> float:
    """The geometric mean of positive figures (0 when one is 0: an unpriced energy)."""
    if (values <= 0).any():
        return 0.0
    return float(np.exp(np.mean(np.log(values))))


def fits_everywhere(rows: pd.DataFrame) -> bool:
    """Whether a design fits the DRAM on every model and batch (a spec without a capacity
    counts as fitting)."""
    return "fits" not in rows or bool(rows["fits"].to_numpy(dtype=bool, na_value=True).all())


def recorded_values(problem: Problem, values: list[float], constraints: list[float],
                    fits: bool = True) -> list[float]:
    """The values a trial records: its own when it meets the target and fits in DRAM, the
    worst otherwise (see the module's docstring)."""
    if fits and all(c <= 0 for c in constraints):
        return values
    return [-math.inf if d == "maximize" else math.inf for d in directions(problem)]


def _number(value: Any, digits: int = 6) -> float | None:
    value = float(value)
    return round(value, digits) if math.isfinite(value) else None


def design_attrs(problem: Problem, rows: pd.DataFrame) -> dict[str, Any]:
    """A design's user attributes from its scored rows (one per model and batch): its
    geometric-mean speedup and mean accuracy, the worst speedup over the baseline and accuracy
    drop, whether it meets the target, and a line per model and batch."""
    speedup = rows["speedup"].to_numpy(dtype=np.float64)
    accuracy = rows["accuracy"].to_numpy(dtype=np.float64)
    attrs: dict[str, Any] = {"speedup": _number(np.exp(np.mean(np.log(speedup)))),
                             "accuracy": _number(np.mean(accuracy))}
    expected = problem.speed != "speedup"
    if expected:
        attrs["expected_speedup"] = _number(np.exp(np.mean(np.log(
            rows[problem.speed].to_numpy(dtype=np.float64)))))
    if problem.objective.per_row:
        attrs[problem.objective.column] = _number(
            _geomean(rows[problem.objective.column].to_numpy(dtype=np.float64)), 9)
    attrs["fits"] = fits_everywhere(rows)
    if problem.target is not None:
        attrs["speedup_over_baseline"] = _number(rows["speedup_over_baseline"].min())
        attrs["accuracy_drop"] = _number(rows["accuracy_drop"].max())
        attrs["meets_target"] = bool(rows["meets_target"].all())
    ranks = rows["rank"] if "rank" in rows else None
    if ranks is not None and ranks.notna().any():
        attrs["best_rank"] = int(ranks.min())
    baseline = "" if problem.target is None else problem.target.baseline.name
    for i, row in enumerate(rows.itertuples(index=False)):
        parts = [f"{row.speedup:.3f}x"]
        if expected:
            parts = [f"expected {row.expected_speedup:.3f}x", f"bound {row.speedup:.3f}x"]
        if problem.target is not None:
            parts.append(f"{row.speedup_over_baseline:.3f}x {baseline}")
        parts.append(f"accuracy {row.accuracy:.2f}")
        if problem.target is not None:
            parts.append(f"drop {row.accuracy_drop:+.2f}")
        parts.append(str(row.verdict))
        if ranks is not None and not pd.isna(ranks.iloc[i]):
            parts.insert(0, f"rank {int(ranks.iloc[i])}")
        attrs[f"{row.model}@{row.batch}"] = ", ".join(parts)
    return attrs


def evaluate_design(problem: Problem, fmt: str, point: HardwarePoint) -> pd.DataFrame:
    """The design's scored rows on every model and batch (its baseline rows dropped)."""
    formats = (fmt,) if problem.target is None else tuple(
        dict.fromkeys((fmt, problem.target.baseline.name)))
    frames = []
    for model in range(len(problem.traces)):
        rows = problem.evaluate_points(model, [point], 0, formats)
        frames.append(rows[rows["format"] == fmt])
    return pd.concat(frames, ignore_index=True)


def run_trials(problem: Problem, storage: Storage, study: str, budget: int, seed: int,
               progress: Callable[[int], None] | None = None, worker: str | None = None,
               lease_s: float = LEASE_S) -> int:
    """Run trials while the study holds fewer than ``budget`` counted trials; returns how many
    ran here. Trials other workers run may still be running when it returns."""
    me = worker or worker_id()
    handle = load(problem, storage, study, seed)
    backend = optuna_storage(storage)
    study_id = backend.get_study_id_from_name(study)
    dists = distributions(problem)
    ran = 0
    while True:
        with storage.lock(study):
            counted = len(handle.get_trials(deepcopy=False, states=COUNTED))
            if counted >= budget:
                return ran
            trial = handle.ask(dists)
            storage.take_lease(study, "trial", trial.number, me, lease_s)
        fmt, point = design_of(problem, trial.params)
        rows = evaluate_design(problem, fmt, point)
        values, constraints = objective_values(problem, rows)
        recorded = recorded_values(problem, values, constraints, fits_everywhere(rows))
        with storage.lock(study):  # never beside a reclaim of this very trial
            try:
                for key, value in design_attrs(problem, rows).items():
                    trial.set_user_attr(key, value)
                if constraints:
                    backend.set_trial_system_attr(
                        backend.get_trial_id_from_study_id_trial_number(study_id, trial.number),
                        CONSTRAINTS_ATTR, constraints)
                handle.tell(trial, recorded if len(recorded) > 1 else recorded[0])
            except (RuntimeError, ValueError, UpdateFinishedTrialError):
                # Another worker took this trial for lost (our lease ran out) and queued its
                # design again; that queued trial will record it, so this one is dropped.
                continue
            finally:
                storage.drop_lease(study, "trial", trial.number)
        ran += 1
        if progress is not None:
            progress(1)


def reclaim(problem: Problem, storage: Storage, study: str,
            gone: frozenset[str] = frozenset()) -> dict[str, int]:
    """Fail the running trials whose worker is gone (lease expired or missing, a vanished
    process of this machine, or in ``gone``) and queue their designs again; how many per
    worker."""
    handle = load(problem, storage, study, seed=0)
    backend = optuna_storage(storage)
    study_id = backend.get_study_id_from_name(study)
    names = set(distributions(problem))
    lost: dict[str, int] = {}
    with storage.lock(study):
        running = handle.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if not running:
            return lost
        leases = storage.leases(study, "trial")
        for trial in running:
            holder, left = leases.get(trial.number, ("an unknown worker", -1.0))
            if left >= 0 and holder not in gone and not process_gone(holder):
                continue
            trial_id = backend.get_trial_id_from_study_id_trial_number(study_id, trial.number)
            try:
                backend.set_trial_user_attr(trial_id, _INTERRUPTED, True)
                backend.set_trial_state_values(trial_id, TrialState.FAIL)
            except UpdateFinishedTrialError:
                continue  # it finished after all
            if set(trial.params) == names:
                handle.enqueue_trial(trial.params)
            storage.drop_lease(study, "trial", trial.number)
            lost[holder] = lost.get(holder, 0) + 1
    return lost


def holders(storage: Storage, study: str) -> dict[str, int]:
    """worker -> how many of the study's trials it runs now."""
    handle = optuna.load_study(study_name=study, storage=optuna_storage(storage))
    leases = storage.leases(study, "trial")
    found: dict[str, int] = {}
    for trial in handle.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        holder = leases.get(trial.number, ("an unknown worker", 0.0))[0]
        found[holder] = found.get(holder, 0) + 1
    return found


def counts(storage: Storage, study: str) -> dict[str, int]:
    handle = optuna.load_study(study_name=study, storage=optuna_storage(storage))
    found: dict[str, int] = {}
    for trial in handle.get_trials(deepcopy=False):
        found[trial.state.name.lower()] = found.get(trial.state.name.lower(), 0) + 1
    return found


def designs_frame(problem: Problem, storage: Storage, study: str) -> pd.DataFrame:
    """Scored rows of every distinct design the completed trials sampled.

    All sampled designs are evaluated again in one vectorized call per model (hardware points x
    formats), then only the sampled pairs are kept, each with the first trial that sampled it
    and how many did.
    """
    handle = optuna.load_study(study_name=study, storage=optuna_storage(storage))
    trials = handle.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not trials:
        return pd.DataFrame()
    points: dict[HardwarePoint, int] = {}
    pairs: dict[tuple[int, str], list[int]] = {}
    for trial in sorted(trials, key=lambda t: t.number):
        fmt, point = design_of(problem, trial.params)
        index = points.setdefault(point, len(points))
        pairs.setdefault((index, fmt), []).append(trial.number)
    formats = tuple(dict.fromkeys([f for _, f in pairs] + (
        [problem.target.baseline.name] if problem.target is not None else [])))
    keep = pd.DataFrame([(i, f, numbers[0], len(numbers)) for (i, f), numbers in pairs.items()],
                        columns=["hw_point", "format", "trial", "trials"])
    frames = []
    for model in range(len(problem.traces)):
        rows = problem.evaluate_points(model, list(points), 0, formats)
        frames.append(rows.merge(keep, on=["hw_point", "format"], how="inner"))
    out = pd.concat(frames, ignore_index=True)
    out["trial"] = out["trial"].astype(np.int64)
    return out



# --- every study's designs as Optuna trials ---------------------------------------------------

def _candidate_rows(problem: Problem, results: pd.DataFrame) -> np.ndarray:
    """Which rows are candidate designs (on the format's categories when it has them: fast)."""
    formats = results["format"]
    if isinstance(formats.dtype, pd.CategoricalDtype):
        wanted = np.array([str(c) in set(problem.candidates) for c in formats.cat.categories])
        return wanted[formats.cat.codes.to_numpy()] & (formats.cat.codes.to_numpy() >= 0)
    return formats.astype(str).isin(problem.candidates).to_numpy()


def design_table(problem: Problem, results: pd.DataFrame) -> pd.DataFrame:
    """One row per candidate design (``hw_point``, ``format``) of a study's scored results,
    aggregated over models and batches as an Optuna trial is: ``speedup`` (geometric mean; of
    the expected speedups in a calibrated study),
    ``accuracy`` (mean), ``cost`` (the minimized field), the two constraints ``speed`` and
    ``accuracy_gap`` (NaN without a target), ``feasible`` and ``best_rank`` (the design's best
    rank over models and batches, NaN when it meets the target on none); best designs first."""
    return _design_table(problem, results, np.flatnonzero(_candidate_rows(problem, results)))


def _design_table(problem: Problem, results: pd.DataFrame, pick: np.ndarray) -> pd.DataFrame:
    """:func:`design_table` of the rows ``pick`` (positions, in order) of ``results``: only the
    columns it aggregates are read, never a copy of every column of millions of rows."""

    def column(name: str, dtype: Any = np.float64, **kwargs: Any) -> np.ndarray:
        return results[name].to_numpy(dtype=dtype, **kwargs)[pick]

    frame = pd.DataFrame({
        "hw_point": column("hw_point", np.int64),
        "format": pd.Categorical(results["format"].iloc[pick]),
        "log_speedup": np.log(column(problem.speed)),
        "accuracy": column("accuracy"),
        "rank": column("rank", na_value=np.nan)})
    frame["accuracy_missing"] = np.isnan(frame["accuracy"].to_numpy())
    frame["fits"] = (column("fits", bool, na_value=True) if "fits" in results
                     else np.ones(len(pick), dtype=bool))
    if problem.objective.per_row:
        # As objective_values: the geometric mean over models and batches (0 if one is 0).
        with np.errstate(divide="ignore"):
            frame["cost"] = np.log(column(problem.objective.column))
    elif problem.objective.column is not None:
        frame["cost"] = column(problem.objective.column)
    target = problem.target
    if target is not None:
        frame["speed"] = target.ratio - column("speedup_over_baseline")
        frame["accuracy_gap"] = np.nan_to_num(column("accuracy_drop"),
                                              nan=_UNKNOWN_DROP) - target.max_acc_drop
    groups = frame.groupby(["hw_point", "format"], sort=False, observed=True)
    table = groups.agg(log_speedup=("log_speedup", "mean"), accuracy=("accuracy", "mean"),
                       accuracy_missing=("accuracy_missing", "max"),
                       best_rank=("rank", "min"), fits=("fits", "min"),
                       **({"cost": ("cost", "mean" if problem.objective.per_row else "first")}
                          if "cost" in frame else {}),
                       **({"speed": ("speed", "max"), "accuracy_gap": ("accuracy_gap", "max")}
                          if target is not None else {})).reset_index()
    table["speedup"] = np.exp(table.pop("log_speedup"))
    # As objective_values: one unknown accuracy makes the mean unknown.
    table.loc[table.pop("accuracy_missing").astype(bool), "accuracy"] = np.nan
    if problem.objective.per_row:
        table["cost"] = np.exp(table["cost"])
    fits = table.pop("fits").astype(bool)
    if target is None:
        table["speed"] = table["accuracy_gap"] = np.nan
        table["feasible"] = fits
    else:
        table["feasible"] = (table["speed"] <= 0) & (table["accuracy_gap"] <= 0) & fits
    kind = problem.objective.kind
    if kind == "pareto":
        front = np.zeros(len(table), dtype=bool)
        ok = np.flatnonzero(table["feasible"].to_numpy() & table["accuracy"].notna().to_numpy())
        front[ok] = pareto_mask(table["speedup"].to_numpy()[ok],
                                table["accuracy"].to_numpy()[ok])
        table["front"] = front
        keys, ascending = ["feasible", "front", "speedup", "accuracy"], [False] * 4
    elif kind == "accuracy":
        keys, ascending = ["feasible", "accuracy", "speedup"], [False, False, False]
    elif problem.objective.column is not None:
        keys, ascending = ["feasible", "cost", "speedup"], [False, True, False]
    else:
        keys, ascending = ["feasible", "speedup", "accuracy"], [False, False, False]
    return table.sort_values(keys, ascending=ascending, kind="stable",
                             na_position="last").reset_index(drop=True)


def _contenders(problem: Problem, results: pd.DataFrame, candidate: np.ndarray,
                hw_point: np.ndarray, codes: np.ndarray, top: int) -> pd.DataFrame:
    """:func:`design_table` cut to the designs :func:`_chosen` can pick, with the same rows in
    the same order for those: the designs that meet the target on some model and batch.

    Every design ranked on some model and batch is one of them, and so is every feasible design
    (it meets the target wherever its speed is known, and fits everywhere): so is the whole
    Pareto front, and, when at least ``top`` designs are feasible, the ``top`` best (feasible
    designs sort first; the designs' relative order is the full table's). With fewer feasible
    designs the best include infeasible ones, and the table is built over every design."""
    pick = np.flatnonzero(candidate)
    if "meets_target" in results and len(pick) and codes.min() >= 0 and hw_point.min() >= 0:
        n_codes = int(codes.max()) + 1
        key = hw_point[pick] * n_codes + codes[pick].astype(np.int64)
        meets = results["meets_target"].to_numpy(dtype=bool, na_value=False)[pick]
        wanted = np.zeros(int(key.max()) + 1, dtype=bool)
        wanted[key[meets]] = True
        table = _design_table(problem, results, pick[wanted[key]])
        if int(table["feasible"].sum()) >= top:
            return table
    return _design_table(problem, results, pick)


def _chosen(problem: Problem, table: pd.DataFrame, top: int) -> pd.DataFrame:
    """The designs an exhaustive study records as trials: those ranked within ``top`` on some
    model and batch, the ``top`` best overall (the table's order), and, for the pareto
    objective, every design on the overall front of those that meet the target."""
    keep = table["best_rank"].to_numpy() <= top
    keep[:top] = True
    if "front" in table:
        keep |= table["front"].to_numpy()
    values = table["accuracy"] if problem.objective.kind in ("accuracy", "pareto") else (
        table["cost"] if problem.objective.column is not None else table["speedup"])
    keep &= np.isfinite(values.to_numpy(dtype=np.float64))  # Optuna takes no NaN value
    if problem.objective.kind == "pareto":
        keep &= np.isfinite(table["speedup"].to_numpy())
    return table[keep]


def write_designs(problem: Problem, storage: Storage, study: str, results: pd.DataFrame,
                  top: int = 10) -> int:
    """Record a complete exhaustive study's designs as completed trials of an Optuna study of
    the same name (replacing one a previous call left): the designs ranked within ``top`` on
    some model and batch, the ``top`` best over all models and batches, and for the pareto
    objective the whole front; best first. A trial is one design on every model and batch,
    with the values, constraints and user attributes an Optuna-engine trial has (``best_rank``
    too). Returns how many trials the study holds; a study already written is left as it is."""
    top = max(1, top)
    candidate = _candidate_rows(problem, results)
    hw_point = results["hw_point"].to_numpy(dtype=np.int64)
    fmt = pd.Categorical(results["format"])
    chosen = _chosen(problem, _contenders(problem, results, candidate, hw_point, fmt.codes, top),
                     top)
    backend = optuna_storage(storage)
    # PostgreSQL studies may be finished by several processes at once: take the study lock.
    # A SQLite study's lock is a file beside it that exhaustive studies do not otherwise need;
    # two processes finishing one at the same moment meet at create_study instead.
    guard = storage.lock(study) if storage.backend == "postgresql" else contextlib.nullcontext()
    with guard, gc_paused():  # Optuna's ORM objects, all freed by reference count
        try:
            handle = optuna.load_study(study_name=study, storage=backend)
            if handle.user_attrs.get("designs") == len(chosen) and len(
                    handle.get_trials(deepcopy=False)) == len(chosen):
                return len(chosen)
            optuna.delete_study(study_name=study, storage=backend)
        except KeyError:
            pass
        try:
            handle = optuna.create_study(study_name=study, storage=backend,
                                         directions=directions(problem))
        except optuna.exceptions.DuplicatedStudyError:
            return len(chosen)  # another process is writing the same designs
        label(problem, handle, "exhaustive")
        points = list(problem.space.hardware_points())
        dists = distributions(problem)
        trials = []
        for design in chosen.itertuples(index=False):
            # The design's rows by comparison, not a groupby over every row (nor a copy of the
            # candidate rows): a study may hold millions of rows for a handful of chosen designs.
            code = fmt.categories.get_loc(str(design.format))
            at = np.flatnonzero(hw_point == design.hw_point)
            rows = results.iloc[at[(fmt.codes[at] == code) & candidate[at]]]
            values, constraints = objective_values(problem, rows)
            trials.append(optuna.trial.create_trial(
                params=params_of(problem, design.format, points[design.hw_point]),
                distributions=dists,
                values=recorded_values(problem, values, constraints, fits_everywhere(rows)),
                user_attrs={**design_attrs(problem, rows), "hw_point": int(design.hw_point)},
                system_attrs={CONSTRAINTS_ATTR: constraints} if constraints else None))
        if not _insert_trials(backend, backend.get_study_id_from_name(study), trials):
            handle.add_trials(trials)
        handle.set_user_attr("designs", len(trials))
    return len(trials)


#: The version of Optuna's table schema :func:`_insert_trials` writes (``models.SCHEMA_VERSION``
#: of Optuna 5.0); under another, ``Study.add_trials`` writes the trials.
_TRIAL_SCHEMA = 12


def _insert_trials(backend: optuna.storages.RDBStorage, study_id: int,
                   trials: list[optuna.trial.FrozenTrial]) -> bool:
    """Store finished ``trials`` in a study that holds none yet, as ``Study.add_trials`` does,
    row for row (tests/test_search_small_space.py compares the two databases), in one
    transaction of a few bulk inserts instead of Optuna's two statements for every
    attribute (~0.1 s of ORM work for ten designs). Uses Optuna's table definitions
    (``optuna.storages._rdb.models``, not public API): only for the schema version it was
    written against, else returns False and writes nothing."""
    from optuna.storages._rdb import models

    if models.SCHEMA_VERSION != _TRIAL_SCHEMA:
        return False
    utc = dt.UTC
    value_type = models.TrialValueModel.value_to_stored_repr
    tables = {model: model.__table__ for model in (
        models.TrialModel, models.TrialValueModel, models.TrialParamModel,
        models.TrialUserAttributeModel, models.TrialSystemAttributeModel)}
    seen: dict[str, BaseDistribution] = {}
    with backend.engine.begin() as conn:
        if conn.execute(sa.select(sa.func.count()).select_from(tables[models.TrialModel])
                        .where(tables[models.TrialModel].c.study_id == study_id)).scalar():
            return False  # Optuna's own path numbers new trials after those there
        rows: dict[Any, list[dict[str, Any]]] = {model: [] for model in tables}
        for number, trial in enumerate(trials):
            # As TrialModel's datetime setters store them: naive UTC.
            start, complete = (None if t is None else t.astimezone(utc).replace(tzinfo=None)
                               for t in (trial.datetime_start, trial.datetime_complete))
            trial_id = conn.execute(tables[models.TrialModel].insert().values(
                number=number, study_id=study_id, state=trial.state, datetime_start=start,
                datetime_complete=complete)).inserted_primary_key[0]
            values = trial.values if trial.values is not None else []
            for objective, value in enumerate(values):
                stored, kind = value_type(value)
                rows[models.TrialValueModel].append(
                    {"trial_id": trial_id, "objective": objective, "value": stored,
                     "value_type": kind})
            for name, value in trial.params.items():
                distribution = trial.distributions[name]
                if name in seen:
                    optuna.distributions.check_distribution_compatibility(seen[name],
                                                                          distribution)
                seen.setdefault(name, distribution)
                rows[models.TrialParamModel].append(
                    {"trial_id": trial_id, "param_name": name,
                     "param_value": distribution.to_internal_repr(value),
                     "distribution_json": optuna.distributions.distribution_to_json(
                         distribution)})
            for model, attrs in ((models.TrialUserAttributeModel, trial.user_attrs),
                                 (models.TrialSystemAttributeModel, trial.system_attrs)):
                rows[model] += [{"trial_id": trial_id, "key": key, "value_json": json.dumps(v)}
                                for key, v in attrs.items()]
        for model, batch in rows.items():
            if batch:
                conn.execute(tables[model].insert(), batch)
    return True
