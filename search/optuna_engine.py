"""The Optuna engine: large or continuous spaces, sampled by TPE (NSGA-II for Pareto fronts).

A trial is one design (format, base hardware, a value per knob) evaluated on every model and
batch of the space. Its value aggregates over them (the geometric mean of the speedups, the mean
accuracy, or the minimized hardware field) and the target becomes two Optuna constraints (speed
and accuracy, each <= 0 when met) on the worst model and batch.

The trial budget is exact across workers: a worker takes the study lock, counts the trials that
count (complete, running, pruned), asks for a new one only below the budget and takes a lease on
it, and releases the lock; it reports the trial under the lock too. A running trial whose lease
expired or is missing (its worker died between asking and leasing), or whose worker is a
vanished process of this machine, is marked failed (user attribute ``interrupted``) under the
lock by any other worker, and its design is queued again, so completed trials are never lost or
repeated. Optuna's own heartbeat (``RDBStorage(heartbeat_interval=...)``, ``fail_stale_trials``)
is not used: it runs only inside ``study.optimize``, takes whole seconds, judges staleness by the
reader's grace period rather than the holder's, and would fail trials outside the study lock.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import optuna
import pandas as pd
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from .problem import Problem
from .space import CANDIDATES, HardwarePoint
from .storage import LEASE_S, Storage, process_gone, worker_id

__all__ = ["designs_frame", "distributions", "ensure", "holders", "reclaim", "run_trials",
           "optuna_storage"]

COUNTED = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.PRUNED)
#: Optuna constraints (feasible when <= 0): the worst model-and-batch's shortfall against the
#: target's speed ratio, and its accuracy drop beyond the allowed one.
_CONSTRAINTS = ("speed", "accuracy")
_INTERRUPTED = "interrupted"

optuna.logging.set_verbosity(logging.WARNING)


# One Optuna connection per study database and process: building one checks the schema.
_BACKENDS: weakref.WeakKeyDictionary[Storage, optuna.storages.RDBStorage] = (
    weakref.WeakKeyDictionary())


def optuna_storage(storage: Storage) -> optuna.storages.RDBStorage:
    backend = _BACKENDS.get(storage)
    if backend is None:
        kwargs: dict[str, Any] = {}
        if storage.backend == "sqlite":
            kwargs["connect_args"] = {"timeout": 60}
        else:
            kwargs["pool_pre_ping"] = True
        backend = _BACKENDS[storage] = optuna.storages.RDBStorage(storage.url,
                                                                   engine_kwargs=kwargs)
    return backend


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
    return ["minimize"] if kind == "cost" else ["maximize"]


def _sampler(problem: Problem, seed: int) -> optuna.samplers.BaseSampler:
    # Constraints reach the samplers through Trial.set_constraint (Optuna 5).
    if problem.objective.kind == "pareto":
        return optuna.samplers.NSGAIISampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def create(problem: Problem, storage: Storage, study: str) -> None:
    optuna.create_study(study_name=study, storage=optuna_storage(storage),
                        directions=directions(problem))


def ensure(problem: Problem, storage: Storage, study: str) -> bool:
    """Create the Optuna study if it is missing (a kill between storing the study's settings
    and creating it); True when it was."""
    try:
        optuna_storage(storage).get_study_id_from_name(study)
        return False
    except KeyError:
        optuna.create_study(study_name=study, storage=optuna_storage(storage),
                            directions=directions(problem), load_if_exists=True)
        return True


def load(problem: Problem, storage: Storage, study: str, seed: int) -> optuna.Study:
    return optuna.load_study(study_name=study, storage=optuna_storage(storage),
                             sampler=_sampler(problem, seed))


def objective_values(problem: Problem, rows: pd.DataFrame) -> tuple[list[float], list[float]]:
    """A design's values and constraints from its scored rows (one per model and batch)."""
    speedup = float(np.exp(np.mean(np.log(rows["speedup"].to_numpy()))))
    accuracy = float(np.mean(rows["accuracy"].to_numpy()))
    kind = problem.objective.kind
    if kind == "pareto":
        values = [speedup, accuracy]
    elif kind == "accuracy":
        values = [accuracy]
    elif kind == "cost":
        values = [float(rows[problem.objective.column].iloc[0])]
    else:
        values = [speedup]
    constraints: list[float] = []
    if problem.target is not None:
        speed_gap = problem.target.ratio - rows["speedup_over_baseline"].to_numpy()
        acc_gap = rows["accuracy_drop"].to_numpy() - problem.target.max_acc_drop
        constraints = [float(speed_gap.max()), float(acc_gap.max())]
    return values, constraints


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
        for name, value in zip(_CONSTRAINTS, constraints, strict=False):
            trial.set_constraint(name, value)
        with storage.lock(study):  # never beside a reclaim of this very trial
            try:
                handle.tell(trial, values if len(values) > 1 else values[0])
            except (RuntimeError, ValueError):
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
            try:
                backend.set_trial_user_attr(trial._trial_id, _INTERRUPTED, True)
                backend.set_trial_state_values(trial._trial_id, TrialState.FAIL)
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

