"""Running a search: create or resume a study, run its workers, rank and write the results.

``run_search`` is what `dse search` calls; ``run_worker`` is `dse search worker`, which joins a
study (any machine that reaches its storage) and works until the study is done.

Every participant (the main process, its local workers, workers from other machines) runs the
same loop: claim and run work; when none is left to claim, reclaim the work of gone workers
(expired lease, or a vanished process of this machine) and run it; wait while live workers still
hold some; stop when every chunk or trial is stored. So results are written only from a complete
study, and a dead worker's work is redone without a manual ``--resume``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dse.calibrate.predictor import load_predictors, shipped_predictors
from dse.design_columns import with_dtype_columns
from dse.explore import EVALUATORS
from dse.output import FileSet, OutputError, write_atomic, write_table
from dse.sim import SimConfig

from . import exhaustive
from . import optuna_engine as opt
from .errors import SearchError, SearchInterrupted, StorageError
from .problem import Problem, Settings
from .scoring import rank
from .space import (
    DEFAULT_SPACE,
    LLM_SPACE,
    OVERRIDABLE,
    SearchSpace,
    load_space,
    with_overrides,
)
from .storage import LEASE_S, Storage, has_password, open_storage, redact, sqlite_url, worker_id
from .target import DEFAULT_MAX_ACC_DROP

__all__ = ["ENGINES", "EXHAUSTIVE_MAX", "LEASE_S", "Notify", "Progress", "SearchOutcome",
           "SearchRequest", "WorkerOutcome", "new_settings", "resume_command", "run_search",
           "run_worker"]

ENGINES = ("auto", "exhaustive", "optuna")
#: Largest finite space `--engine auto` enumerates (design points, dense and baseline included);
#: about 2 GB of results in memory at this size.
EXHAUSTIVE_MAX = 5_000_000
DEFAULT_TRIALS = 200
#: Studies with more design rows keep only their ranked designs in the dse_results table.
SQL_RESULTS_MAX = 100_000
DEFAULT_OUT = Path("dse-search")
STORAGE_ENV = "DSE_SEARCH_STORAGE"
RESULTS_FORMATS = ("parquet", "csv")
#: Seconds between looks at the study while other workers hold the last of its work.
POLL_S = 0.5
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,199}$")


@dataclass
class SearchRequest:
    """What the user asked for. ``None`` means "not given": a default for a new study, the
    stored value when resuming."""

    space: Path | None = None
    target: str | None = None
    max_acc_drop: float | None = None
    objective: str | None = None
    minimize: str | None = None
    engine: str | None = None
    trials: int | None = None
    seed: int | None = None
    storage: str | None = None
    study: str | None = None
    out: Path | None = None
    workers: int = 1
    resume: bool = False
    results_format: str = "parquet"
    top: int = 10
    chunk_points: int | None = None
    #: "roofline" or "simulate"; ``simulation``: the simulator's settings (default SimConfig()).
    evaluator: str | None = None
    simulation: SimConfig | None = None
    #: Seconds a lease on a chunk or trial this search's workers hold lasts without renewal.
    lease_s: float = LEASE_S
    #: Kernel predictors (a shipped name, e.g. "h100-sxm", or a file from `dse calibrate
    #: --out`): rank by the expected speedup of kernels as they exist, the bound's beside it.
    calibrated: str | None = None
    #: The command line's values over the space's (``dse search --model llama-3-8b --phase
    #: decode --context 2048 --batch 8 --hw h100-sxm --weight-dtype int4 --kv-dtype fp8``):
    #: keys of ``search.space.OVERRIDABLE``; None or absent keeps the space's. Without
    #: ``space``, a language model in ``models`` picks the built-in language-model space.
    overrides: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Python callers pass paths as strings as often as Paths; the search needs Paths.
        for name in ("space", "out"):
            value = getattr(self, name)
            if isinstance(value, str):
                setattr(self, name, Path(value))


@dataclass
class SearchOutcome:
    study: str
    storage: str  # redacted
    out: Path
    engine: str
    results: pd.DataFrame
    ranked: pd.DataFrame
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    problem: Problem | None = None
    #: A calibrated search of language models: per model, the one line saying which of its
    #: GEMMs the expectation extrapolates (:func:`expectation_extrapolated`), as ``dse
    #: evaluate --calibrated`` prints it; empty otherwise.
    extrapolated: dict[str, str] = field(default_factory=dict)
    #: The same per model for ``summary.json``: the note, whether the training shapes are
    #: known, and the least and most extrapolated share of a design's expected GEMM time.
    extrapolated_shares: dict[str, dict[str, Any]] = field(default_factory=dict)


#: ``progress(done, total, unit)``: chunks or trials of the study stored so far.
Progress = Callable[[int, int, str], None]
#: ``notify(line)``: what the search is doing, in words (the command line prints it).
Notify = Callable[[str], None]


def _silent(*_args) -> None:
    """The default listener: the library itself never prints."""


class _Tally:
    """Counts finished chunks or trials for a :data:`Progress` listener."""

    def __init__(self, progress: Progress, done: int, total: int, unit: str) -> None:
        self.progress, self.done, self.total, self.unit = progress, done, total, unit

    def __call__(self, designs: int = 0, done: int | None = None) -> None:
        self.done = self.done + 1 if done is None else done
        self.progress(self.done, self.total, self.unit)


# --- settings ---------------------------------------------------------------------------------

def new_settings(request: SearchRequest) -> Settings:
    """The settings a new study stores for ``request`` (defaults filled in, inputs checked)."""
    path = _space_path(request)
    space, text = load_space(path)
    folder = str((Path(path).parent if path is not None else Path(".")).resolve())
    if path is None:
        folder = str(DEFAULT_SPACE.parent)
    trials = DEFAULT_TRIALS if request.trials is None else request.trials
    chunk = exhaustive.CHUNK_POINTS if request.chunk_points is None else request.chunk_points
    return Settings(
        space_text=text, space_where=space.where, space_folder=folder,
        target=request.target,
        max_acc_drop=DEFAULT_MAX_ACC_DROP if request.max_acc_drop is None
        else request.max_acc_drop,
        objective=request.objective, minimize=request.minimize,
        engine=request.engine or "auto", trials=trials,
        seed=0 if request.seed is None else request.seed, chunk_points=chunk,
        extra={**_evaluator_extra(request), **_overrides_extra(request)})


def _space_path(request: SearchRequest) -> Path | None:
    """The space file: ``--space``, else the built-in language-model space when a model given
    on the command line is a language model, else the built-in default (None)."""
    if request.space is None and _language_models(request.overrides.get("models")):
        return LLM_SPACE
    return request.space


def _language_models(models) -> bool:
    from workloads.registry import is_language_model

    return any(is_language_model(str(m)) for m in models or ())


def _overrides_extra(request: SearchRequest) -> dict:
    """``{"overrides": {...}}``: the command line's values over the space's, stored with the
    study so that every worker rebuilds the same problem."""
    unknown = sorted(set(request.overrides) - set(OVERRIDABLE))
    if unknown:
        raise SearchError(f"cannot override {', '.join(unknown)} in a space; overridable: "
                          + ", ".join(OVERRIDABLE))
    given = {k: (list(v) if isinstance(v, list | tuple) else v)
             for k, v in request.overrides.items() if v is not None}
    return {"overrides": given} if given else {}


def _evaluator_extra(request: SearchRequest) -> dict:
    evaluator = request.evaluator or "roofline"
    if evaluator not in EVALUATORS:
        raise SearchError(f"--evaluator {evaluator}: use roofline or simulate")
    if evaluator == "roofline":
        return _calibrated_extra(request.calibrated)
    if request.calibrated is not None:
        raise SearchError(f"--calibrated {request.calibrated} ranks by kernels priced one op at "
                          "a time, --evaluator simulate by simulated latencies: give one of them")
    config = (request.simulation or SimConfig()).check()  # before the study exists
    return {"evaluator": "simulate", "simulation": config.to_dict()}


def _calibrated_extra(calibrated: str | None) -> dict:
    """``{"calibrated": NAME}`` for a shipped predictor set, the file's absolute path for one
    written by `dse calibrate --out` (workers elsewhere read it there), after loading it."""
    if calibrated is None:
        return {}
    load_predictors(calibrated)  # a bad name or file fails here, before the study exists
    name = calibrated if calibrated in shipped_predictors() else str(Path(calibrated).resolve())
    return {"calibrated": name}


def _resolve_engine(settings: Settings, problem: Problem) -> Settings:
    space = problem.space
    size = exhaustive.size(problem)
    engine = settings.engine
    if problem.language and engine != "exhaustive" and (
            engine == "optuna" or not space.finite or size > EXHAUSTIVE_MAX):
        raise SearchError(f"--engine {engine}: a search over language models runs the "
                          "exhaustive engine only (Optuna does not take their accuracy, where "
                          "lower is better, yet); give every hardware knob steps = N")
    if engine == "auto":
        engine = "exhaustive" if space.finite and size <= EXHAUSTIVE_MAX else "optuna"
    elif engine == "exhaustive" and not space.finite:
        knob = next(k for k in space.knobs if not k.finite)
        raise SearchError(f"--engine exhaustive: knob {knob.path!r} is a continuous range; give "
                          "it steps = N in the space, or use --engine optuna")
    return replace(settings, engine=engine)


def _refuse_unread_options(request: SearchRequest, settings: Settings, problem: Problem) -> None:
    """A trial budget or a sampler seed given to a study the exhaustive engine runs is read by
    nothing: every design point is evaluated, in order (issue 26, round 9: ``dse search
    --model llama-2-7b --trials 2`` evaluated all 10 and exited 0). Refused, before anything is
    written."""
    if settings.engine != "exhaustive":
        return
    for option, value, what in (("--trials", request.trials, "a trial budget"),
                                ("--seed", request.seed, "a sampler seed")):
        if value is not None:
            why = ("a search over language models runs the exhaustive engine"
                   if problem.language else "the search runs the exhaustive engine")
            fix = ("leave it out" if problem.language
                   else "leave it out, or give --engine optuna to sample the space")
            raise SearchError(f"{option} {value}: {why}, which evaluates every one of the "
                              f"{exhaustive.size(problem):,} design points and takes no "
                              f"{what.split(' ', 1)[1]}; {fix}")


def _check_resume_options(request: SearchRequest, stored: Settings, study: str) -> Settings:
    """Resuming keeps the stored settings; a different one given now is an error (except a
    larger Optuna budget, which extends the study)."""
    given = {"target": request.target, "max_acc_drop": request.max_acc_drop,
             "objective": request.objective, "minimize": request.minimize,
             "seed": request.seed, "chunk_points": request.chunk_points}
    for key, value in given.items():
        if value is not None and value != getattr(stored, key):
            raise SearchError(f"--{key.replace('_', '-')} {value}: study {study!r} was created "
                              f"with {getattr(stored, key)!r}; --resume keeps a study's "
                              "settings (start a new study to change them)")
    stored_evaluator = stored.extra.get("evaluator", "roofline")
    stored_calibrated = stored.extra.get("calibrated")
    if request.calibrated is not None and (
            _calibrated_extra(request.calibrated).get("calibrated") != stored_calibrated):
        raise SearchError(f"--calibrated {request.calibrated}: study {study!r} was created "
                          + (f"with --calibrated {stored_calibrated}" if stored_calibrated
                             else "without --calibrated")
                          + "; --resume keeps it (start a new study to change it)")
    if request.evaluator is not None and (
            request.evaluator != stored_evaluator
            or _evaluator_extra(replace(request, calibrated=None)) != {
                k: v for k, v in stored.extra.items() if k in ("evaluator", "simulation")}):
        raise SearchError(f"--evaluator {request.evaluator}: study {study!r} was created with "
                          f"the {stored_evaluator} evaluator and its settings; --resume keeps "
                          "them (start a new study to change them)")
    if request.engine not in (None, "auto") and request.engine != stored.engine:
        raise SearchError(f"--engine {request.engine}: study {study!r} runs the "
                          f"{stored.engine} engine; --resume keeps it")
    given = _overrides_extra(request).get("overrides", {})
    if given and given != stored.extra.get("overrides", {}):
        raise SearchError(f"--model, --phase, --context, --batch, --hw and the dtype options: "
                          f"study {study!r} was created with "
                          f"{stored.extra.get('overrides') or 'none of them'}; --resume keeps "
                          "its settings (start a new study to change them)")
    if request.space is not None:
        _, text = load_space(request.space)
        if text != stored.space_text:
            raise SearchError(f"--space {request.space}: differs from the space study {study!r} "
                              "was created with; --resume keeps it (start a new study)")
    if request.trials is not None and request.trials != stored.trials:
        if stored.engine != "optuna" or request.trials < stored.trials:
            raise SearchError(f"--trials {request.trials}: study {study!r} has a budget of "
                              f"{stored.trials}; on --resume it can only grow, and only for "
                              "the optuna engine")
        stored = replace(stored, trials=request.trials)
    return stored


# --- running ----------------------------------------------------------------------------------

def _study_name(request: SearchRequest, space: SearchSpace | None = None) -> str:
    """``--study``, else a name that says what was asked: the target and the objective
    (:func:`_asked`), the models, the hardware and, calibrated, the predictors, then the time,
    e.g.
    ``1.3x_over_2-4-convnext_tiny+swin_tiny-a100-20261126-093000``. Never the space file's
    name: the built-in space's ``nm-over-2-4`` names a question that a Pareto, an energy or an
    H100 study does not ask (the space is in summary.json). ``space``: the space searched, with
    the command line's overrides (loaded here when not given)."""
    if request.study is not None:
        name = request.study
    else:
        if space is None:
            space = with_overrides(load_space(_space_path(request))[0], request.overrides)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
        parts = [_asked(request), _few(space.models, "models"),
                 _few([_stem(h) for h in space.hardware], "accelerators")]
        if request.calibrated:
            parts.append(f"calibrated-{_stem(request.calibrated)}")
        words = re.sub(r"[^A-Za-z0-9._+-]+", "-", "-".join(parts)).strip("-.")
        name = f"{words[:200 - len(stamp) - 1].rstrip('-.')}-{stamp}"
    if not _NAME.match(name):
        raise SearchError(f"--study {name!r}: use letters, digits and . _ : + - (at most 200, "
                          "starting with a letter or digit)")
    return name


def _asked(request: SearchRequest) -> str:
    """The question, in a word or two: the target, then what ranks the designs when it is not
    the speedup (``least-FIELD``, ``pareto``, ...); ``speedup`` when nothing else was asked."""
    asked = [] if request.target is None else [request.target]
    if request.minimize is not None:
        asked.append(f"least-{request.minimize}")
    elif request.objective not in (None, "speedup") or not asked:
        asked.append(request.objective or "speedup")
    return "-".join(asked)


def _few(names, what: str) -> str:
    """One or two names joined by ``+``; more as a count (a name stays short)."""
    names = list(names)
    return "+".join(map(str, names)) if len(names) <= 2 else f"{len(names)}-{what}"


def _stem(name: str) -> str:
    """A catalog name as given; a spec or predictor file by its file name without suffix."""
    return Path(name).stem if name.endswith((".toml", ".json")) else name


def _out_dir(request: SearchRequest, study: str) -> Path:
    return request.out if request.out is not None else DEFAULT_OUT / study


def _prepare_out(out: Path) -> bool:
    """Create the output folder (True when this run created it); fail early if unusable."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out}: is a file, not a folder")
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"--out {out}: cannot create the folder ({exc.strerror})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise OutputError(f"--out {out}: folder is not writable")
    return created


def resume_command(study: str, out: Path | None, storage_url: str | None) -> str:
    """The command that continues ``study``, as the shell takes it, and a note on its storage.

    A storage URL with a password is never printed: the command reads it from
    ``$DSE_SEARCH_STORAGE`` (as `dse search worker` does) and the note shows it redacted."""
    parts = ["dse", "search", "--resume", "--study", shlex.quote(study)]
    if out is not None:
        parts += ["--out", shlex.quote(str(out.resolve()))]
    note = ""
    if storage_url is not None:
        if has_password(storage_url):
            parts += ["--storage", f'"${STORAGE_ENV}"']
            note = f" with {STORAGE_ENV} set to {redact(storage_url)}"
        else:
            parts += ["--storage", shlex.quote(storage_url)]
    return f"`{' '.join(parts)}`{note}"


def _run(problem: Problem, storage: Storage, study: str, seed_offset: int,
         progress: Callable[..., None] | None, worker: str, lease_s: float) -> int:
    settings = problem.settings
    if settings.engine == "exhaustive":
        return exhaustive.run_chunks(problem, storage, study, progress, worker, lease_s)
    return opt.run_trials(problem, storage, study, settings.trials,
                          settings.seed + seed_offset, progress, worker, lease_s)


def _unit(problem: Problem) -> str:
    return "chunks" if problem.settings.engine == "exhaustive" else "trials"


def _reclaim(problem: Problem, storage: Storage, study: str,
             gone: frozenset[str] = frozenset()) -> dict[str, int]:
    if problem.settings.engine == "exhaustive":
        return storage.reclaim_chunks(study, gone)
    return opt.reclaim(problem, storage, study, gone)


def _holders(problem: Problem, storage: Storage, study: str) -> dict[str, int]:
    if problem.settings.engine == "exhaustive":
        return storage.chunk_holders(study)
    return opt.holders(storage, study)


def _by_worker(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} by {worker}" for worker, n in sorted(counts.items()))


def _work(problem: Problem, storage: Storage, study: str, seed_offset: int, tally: _Tally,
          notify: Notify, lease_s: float) -> int:
    """Work on ``study`` until every chunk or trial of it is stored; how many ran here."""
    me = worker_id()
    unit = _unit(problem)
    ran = 0
    told: dict[str, int] | None = None
    with storage.heartbeat(me, lease_s):
        try:
            while True:
                ran += _run(problem, storage, study, seed_offset, tally, me, lease_s)
                reclaimed = _reclaim(problem, storage, study)
                if reclaimed:
                    notify(f"took back {sum(reclaimed.values())} {unit} from gone workers "
                           f"({_by_worker(reclaimed)}): their lease ran out or their process "
                           "ended; running them again")
                    continue
                done, total, _ = _state(problem, storage, study)
                tally(done=done)
                if done >= total:
                    return ran
                holders = _holders(problem, storage, study)
                if holders and holders != told:
                    notify(f"waiting for {sum(holders.values())} {unit} other workers hold "
                           f"({_by_worker(holders)}); {done}/{total} {unit} stored")
                told = holders
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            try:  # hand our work back now rather than when our lease runs out
                _reclaim(problem, storage, study, frozenset({me}))
            except Exception:  # noqa: BLE001 - best effort; the lease covers it
                pass
            raise


def _state(problem: Problem, storage: Storage, study: str) -> tuple[int, int, str]:
    """(done, total, unit) of the study's work."""
    if problem.settings.engine == "exhaustive":
        states = storage.chunk_states(study)
        return states.get("done", 0), exhaustive.chunk_count(problem), "chunks"
    counts = opt.counts(storage, study)
    return counts.get("complete", 0), problem.settings.trials, "trials"


def _missing(problem: Problem, storage: Storage, study: str) -> str | None:
    """What the study lacks, in words; None when every chunk or trial is stored."""
    done, total, unit = _state(problem, storage, study)
    if done >= total:
        return None
    holders = _holders(problem, storage, study)
    running = f", {sum(holders.values())} running ({_by_worker(holders)})" if holders else ""
    return f"{total - done} of {total} {unit} are not stored{running}"


def _spawn_workers(storage: Storage, study: str, n: int, out: Path, progress: _Tally,
                   problem: Problem, lease_s: float) -> list[tuple[int, int, str]]:
    """Run ``n`` local workers until they end; (index, exit code, last log line) of each one
    that failed."""
    env = dict(os.environ, **{STORAGE_ENV: storage.url})
    logs = [out / f"worker-{i}.log" for i in range(n)]
    procs = []
    for i in range(n):
        with open(logs[i], "wb") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "dse", "search", "worker", "--study", study,
                 "--worker-index", str(i), "--lease-seconds", repr(lease_s), "--quiet"],
                env=env, stdout=log, stderr=subprocess.STDOUT))
    try:
        while any(p.poll() is None for p in procs):
            time.sleep(0.3)
            progress(done=_state(problem, storage, study)[0])
    except BaseException:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
        raise
    failed = []
    for i, p in enumerate(procs):
        if p.returncode != 0:
            tail = logs[i].read_text(errors="replace").strip().splitlines()[-1:]
            failed.append((i, p.returncode, tail[0] if tail else "no output"))
    for i, log in enumerate(logs):
        if i not in {f[0] for f in failed}:
            log.unlink(missing_ok=True)
    return failed


def run_search(request: SearchRequest, notify: Notify = _silent,
               progress: Progress = _silent) -> SearchOutcome:
    """Run (or resume) the search ``request`` asks for; ``notify`` hears what it is doing,
    ``progress`` how much of the study is done. Results are written only from a complete
    study; a study that cannot be completed raises SearchError saying what is missing."""
    with opt.quiet():
        return _run_search(request, notify, progress)


def _run_search(request: SearchRequest, notify: Notify, progress: Progress) -> SearchOutcome:
    started = time.perf_counter()
    since = time.time()
    if request.workers < 1:
        raise SearchError("--workers must be at least 1")
    if not request.lease_s > 0:
        raise SearchError(f"--lease-seconds {request.lease_s}: give a positive number")
    if request.results_format not in RESULTS_FORMATS:
        raise SearchError(f"--results {request.results_format}: use parquet or csv")
    if request.storage is not None and not request.storage.strip():
        open_storage(request.storage)  # says it is empty, and where it may come from
    if request.resume:
        if request.study is None:
            raise SearchError("--resume needs --study NAME (printed when the search started)")
        study = _study_name(request)
        out = _out_dir(request, study)
        url = request.storage or sqlite_url(out / "study.db")
        if request.storage is None and not (out / "study.db").exists():
            raise StorageError(f"--resume: no study database at {out / 'study.db'}; give "
                               "--out or --storage where the study lives")
        database = url.split("?")[0].removeprefix("sqlite:///") \
            if url.startswith("sqlite:///") else None
        if database and database != ":memory:" and not Path(database).exists():
            # Opening it would create an empty database where the user meant an existing one.
            raise StorageError(f"--resume: no study database at {database}; give the --storage "
                               "the study was created with")
        storage = open_storage(url)
        created = fresh_db = False  # the study and its database were there before
        stored = Settings.from_json(storage.settings(study))
        settings = _check_resume_options(request, stored, study)
        problem = Problem(settings)
        _prepare_out(out)
        rebuilt = _repair(problem, storage, study)
        # Only gone workers' work: live workers elsewhere keep theirs, and we wait for them.
        recovered = sum(_reclaim(problem, storage, study).values())
        unit = _unit(problem)
        note = f" ({recovered} interrupted {unit} to redo)" if recovered else ""
        if rebuilt:
            note += " (rebuilt the work list its creation left unfinished)"
        notify(f"resuming study {study} in {storage.shown}{note}")
    else:
        settings = new_settings(request)
        problem = Problem(settings)  # validates every input before anything is written
        settings = _resolve_engine(settings, problem)
        _refuse_unread_options(request, settings, problem)
        problem.settings = settings
        study = _study_name(request, problem.space)
        out = _out_dir(request, study)
        created = _prepare_out(out)
        fresh_db = request.storage is None and not (out / "study.db").exists()
        try:
            storage = open_storage(request.storage or sqlite_url(out / "study.db"))
        except StorageError as exc:
            if fresh_db:  # opening it may have begun the file (and SQLite's -wal, -shm)
                _remove_database(out / "study.db")
            free = _free_bytes(out)
            if created:
                _remove_empty(out)
            if fresh_db and free is not None and free < _SQLITE_ROOM:
                # SQLite says "disk I/O error" when its first pages find no room.
                raise SearchError(f"{out / 'study.db'}: cannot create the study database "
                                  f"(No space left on device: {free // 1024} KiB free, "
                                  f"{exc}); free space there or choose another --out") from None
            raise
        chunks = exhaustive.chunk_count(problem) if settings.engine == "exhaustive" else 0
        try:
            storage.create_study(study, settings.to_json(), chunks)  # one transaction
            if settings.engine == "optuna":
                # A kill before this leaves settings without an Optuna study: --resume makes it.
                opt.create(problem, storage, study)
        except Exception as exc:
            _fail_on_full_device(exc, storage, out, created, fresh_db)
            raise
        notify(f"study {study} in {storage.shown}: {settings.engine} engine, "
               f"{_describe_size(problem)}")
    again = resume_command(study, out, request.storage)
    tally = _Tally(progress, *_state(problem, storage, study))
    try:
        if request.workers == 1:
            _work(problem, storage, study, 0, tally, notify, request.lease_s)
        else:
            failed = _spawn_workers(storage, study, request.workers, out, tally, problem,
                                    request.lease_s)
            missing = _missing(problem, storage, study)
            if failed and missing is not None:
                i, code, tail = failed[0]
                raise SearchError(f"worker {i} exited with code {code} ({tail}); {missing}; "
                                  f"completed work is kept in the study: continue with {again}")
            for i, code, _tail in failed:
                notify(f"worker {i} exited with code {code}; the other workers finished its "
                       f"work (its log: {out / f'worker-{i}.log'})")
    except KeyboardInterrupt:
        raise SearchInterrupted(f"search interrupted; completed work is kept in the study: "
                                f"continue with {again}") from None
    except Exception as exc:
        _fail_on_full_device(exc, storage, out, created, fresh_db)
        raise
    tally(done=_state(problem, storage, study)[0])
    # The result files are one set: all of them or none (an old run's stay as they were).
    files = FileSet()
    try:
        with files:
            outcome = collect(problem, storage, study, out, request)
            outcome.seconds = time.perf_counter() - started
            expectation_extrapolated(outcome)
            _write_summary(outcome, request)
    except KeyboardInterrupt:
        if files.committed:
            raise SearchInterrupted(f"search interrupted after its results were written: "
                                    f"{', '.join(map(str, files.committed))} are complete"
                                    ) from None
        raise SearchInterrupted(f"search interrupted while writing its results: none of them "
                                f"was written; the study is complete, and {again} writes "
                                "them") from None
    except Exception as exc:
        _fail_on_full_device(exc, storage, out, created, fresh_db)
        raise
    _remove_leftovers(out, since)
    _close(storage)
    return outcome


def _close(storage: Storage) -> None:
    """Close the study's connections, Optuna's too, once its work is done: SQLite folds its
    write-ahead log into the database file as the last one closes, which should not wait for
    the interpreter's exit (the command line's exit skips collecting garbage: ``dse.__main__``)."""
    opt.close(storage)
    storage.dispose()


def _repair(problem: Problem, storage: Storage, study: str) -> bool:
    """Rebuild what a kill during the study's creation left out; True when it did."""
    if problem.settings.engine == "exhaustive":
        return storage.add_missing_chunks(study, exhaustive.chunk_count(problem)) > 0
    return opt.ensure(problem, storage, study)


# write_atomic's temporary names: ".results.parquet.<random>.tmp".
_LEFTOVER_TMP = re.compile(r"^\.(results\.|ranked\.)?(parquet|csv|summary\.json)\..+\.tmp$")
_WORKER_LOG = re.compile(r"^worker-\d+\.log$")


def _remove_leftovers(out: Path, since: float) -> None:
    """Remove what killed runs left in ``out``: temporary result files and empty worker logs
    older than this run (a concurrent run's are newer and stay)."""
    for path in out.iterdir():
        if not (_LEFTOVER_TMP.match(path.name) or _WORKER_LOG.match(path.name)):
            continue
        try:
            stat = path.stat()
            if stat.st_mtime < since and (_LEFTOVER_TMP.match(path.name) or stat.st_size == 0):
                path.unlink()
        except OSError:
            pass


def _full_device(exc: BaseException) -> bool:
    """A write that found the device full: an OSError (ENOSPC, EDQUOT) or SQLite's
    ``database or disk is full`` (raised through SQLAlchemy)."""
    import errno

    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    text = f"{exc} {getattr(exc, 'orig', '')}".lower()
    return "database or disk is full" in text or "no space left on device" in text


def _fail_on_full_device(exc: BaseException, storage: Storage, out: Path, created: bool,
                         fresh_db: bool) -> None:
    """On a full device, one line instead of a traceback, and nothing left of a study this
    run started: its database (and SQLite's -wal, -shm files), the files its workers began and
    its folder, where the run created them. A study that existed before keeps its work for
    --resume. Returns for any other error."""
    if not _full_device(exc):
        return
    database = out / "study.db"
    if fresh_db:
        storage.engine.dispose()
        _remove_database(database)
        for path in out.iterdir():  # worker logs and temporary result files of this run
            if _LEFTOVER_TMP.match(path.name) or _WORKER_LOG.match(path.name):
                path.unlink(missing_ok=True)
        if created:
            _remove_empty(out)
        kept = "nothing of this study was kept"
    else:
        kept = f"the work done is kept in {storage.shown} for --resume"
    # The file that could not grow: this run's new database, a resumed SQLite study's own
    # database (wherever --storage put it), else (a server's study) the results folder.
    where = database if fresh_db else storage.shown if storage.backend == "sqlite" else out
    raise SearchError(f"{where}: cannot write (No space left on device); free space there or "
                      f"choose another --out; {kept}") from None


#: Free bytes below which a study database cannot be started: SQLite's first pages, its
#: write-ahead log and the results of one chunk.
_SQLITE_ROOM = 1 << 20


def _free_bytes(folder: Path) -> int | None:
    import shutil

    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def _remove_database(path: Path) -> None:
    """A SQLite database file and the -wal, -shm and -journal files beside it."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


def _remove_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def _describe_size(problem: Problem) -> str:
    s = problem.settings
    if s.engine == "exhaustive":
        chunks = exhaustive.chunk_count(problem)
        return (f"{exhaustive.size(problem):,} design points in "
                f"{chunks} chunk{'' if chunks == 1 else 's'}")
    return f"a budget of {s.trials} trials (seed {s.seed})"


@dataclass(frozen=True)
class WorkerOutcome:
    ran: int  # chunks or trials this worker completed
    unit: str  # "chunks" or "trials"


def run_worker(storage_url: str, study: str, index: int, progress: Progress = _silent,
               notify: Notify = _silent, lease_s: float = LEASE_S) -> WorkerOutcome:
    """Join ``study`` and work until every chunk or trial of it is stored (waiting for other
    workers' and taking back gone workers'); returns how much ran here."""
    with opt.quiet():
        return _run_worker(storage_url, study, index, progress, notify, lease_s)


def _run_worker(storage_url: str, study: str, index: int, progress: Progress, notify: Notify,
                lease_s: float) -> WorkerOutcome:
    if not lease_s > 0:
        raise SearchError(f"--lease-seconds {lease_s}: give a positive number")
    storage = open_storage(storage_url)
    settings = Settings.from_json(storage.settings(study))
    problem = Problem(settings)
    _repair(problem, storage, study)
    tally = _Tally(progress, *_state(problem, storage, study))
    ran = _work(problem, storage, study, index, tally, notify, lease_s)
    _close(storage)
    return WorkerOutcome(ran, tally.unit)


# --- results ----------------------------------------------------------------------------------

_FIRST = ["model", "batch", "rank", "verdict", "role", "format", "family", "sparsity",
          "hardware", "hw_point"]
_SECOND = ["speedup", "expected_speedup", "speedup_over_baseline", "baseline", "baseline_speedup",
           "bound_rank", "bound_speedup_over_baseline", "bound_meets_target", "fraction_of_sol",
           "expected_latency_s", "accuracy",
           "accuracy_status", "baseline_accuracy", "accuracy_drop", "meets_speed",
           "meets_accuracy", "meets_target", "pareto", "trial", "trials", "latency_s",
           "dense_latency_s", "bound", "memory_bound_ops", "ops", "fits", "peak_memory_bytes",
           "energy_per_inference_j", "avg_power_w", "edp_js", "power_capped"]


def _order_columns(frame: pd.DataFrame, knobs: list[str]) -> pd.DataFrame:
    first = [c for c in _FIRST + knobs + _SECOND if c in frame.columns]
    return frame[first + [c for c in frame.columns if c not in first]]


def collect(problem: Problem, storage: Storage, study: str, out: Path,
            request: SearchRequest) -> SearchOutcome:
    """Rank the study's results and write them (atomically) into ``out``, and into the study's
    storage (``dse_results``, and the designs as Optuna trials: see ``optuna_engine``); refuses a
    study that is not complete (SearchError naming what is missing)."""
    settings = problem.settings
    missing = _missing(problem, storage, study)
    if missing is not None:
        raise SearchError(f"study {study} is not complete: {missing}; continue with "
                          f"{resume_command(study, out, request.storage)}")
    if settings.engine == "exhaustive":
        frame = exhaustive.read_chunks(storage, study)
        counts = storage.chunk_states(study)
    else:
        frame = opt.designs_frame(problem, storage, study)
        counts = opt.counts(storage, study)
    if frame.empty:
        raise SearchError(f"study {study} has no completed work yet; run a worker or --resume")
    results = _order_columns(rank(frame, problem.objective, problem.speed,
                                  lower_is_better=problem.lower_is_better),
                             problem.knob_columns)
    # The number types every design was priced in, last, as summary.json and the files of
    # dse evaluate, sweep and report name them (a space does not mix language models).
    results = with_dtype_columns(results, problem.numerics, problem.language)
    # Every design in enumeration order; the ranked ones, best first per model and batch.
    ranks = results["rank"].to_numpy(dtype=np.float64, na_value=np.nan)
    hit = np.flatnonzero(~np.isnan(ranks))
    model = pd.Categorical(results["model"],
                           categories=[t.model for t in problem.traces]).codes[hit]
    hit = hit[np.lexsort((ranks[hit], results["batch"].to_numpy()[hit], model))]
    ranked = results.iloc[hit].reset_index(drop=True)
    suffix = ".parquet" if request.results_format == "parquet" else ".csv"
    results_path, ranked_path = out / f"results{suffix}", out / f"ranked{suffix}"
    # The small table first (the writer's imports happen here), then every row in a thread
    # while the study's database is written: Arrow encodes Parquet without holding the GIL.
    write_table(ranked, ranked_path)
    with _meanwhile(lambda: write_table(results, results_path)):
        # dse_results in the study's database: every design row of studies up to
        # SQL_RESULTS_MAX rows; beyond, the ranked ones only (inserting costs ~20 s a million
        # rows on SQLite, 4x a million-point search); results.parquet always holds every row.
        in_sql = results if len(results) <= SQL_RESULTS_MAX else ranked
        if storage.result_count(study) != len(in_sql):
            storage.write_results(study, in_sql, problem.knob_columns)
        if settings.engine == "exhaustive":
            opt.write_designs(problem, storage, study, results, request.top)
        else:  # studies created before their metric names were set get them now
            opt.label(problem, opt.load(problem, storage, study, settings.seed), "optuna")
    return SearchOutcome(study, storage.shown, out, settings.engine, results, ranked,
                         [results_path, ranked_path], counts=counts, problem=problem)


@contextlib.contextmanager
def _meanwhile(task: Callable[[], None]) -> Iterator[None]:
    """Run ``task`` in a thread while the block runs; the block's end waits for it. The block's
    error wins; without one, the task's is raised."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            task()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="search-results-writer")
    thread.start()
    try:
        yield
    finally:
        thread.join()
    if failed:
        raise failed[0]


def expectation_extrapolated(outcome: SearchOutcome) -> None:
    """Fill ``outcome.extrapolated`` and ``extrapolated_shares`` for a calibrated search of
    language models (issue 24): per model, which of its GEMMs the kernel predictors price from
    shapes never timed (:func:`dse.api.expectation_coverage` over the space's formats and
    batches on its base hardware with ``[hardware.set]``; a knob does not change which GEMMs,
    only their times)."""
    problem = outcome.problem
    if problem is None or problem.predictors is None or not problem.language:
        return
    from dse.api import expectation_coverage
    from dse.calibrate.coverage import coverage_note

    predictors = problem.predictors
    for trace in problem.traces:
        cov = expectation_coverage(trace, list(problem.builder.bases), list(problem.evaluated),
                                   list(problem.space.batches), predictors,
                                   problem.space.scope, problem.numerics)
        if cov is None:
            continue
        note = coverage_note(cov, predictors.name, trace.model)
        share = cov.share
        outcome.extrapolated[trace.model] = note
        outcome.extrapolated_shares[trace.model] = {
            "note": note, "shapes_known": cov.known,
            "extrapolated_gemms_min": int(cov.designs["extrapolated"].min()),
            "extrapolated_gemms_max": int(cov.designs["extrapolated"].max()),
            "gemms": int(cov.designs["gemms"].max()),
            "share_min": round(float(share.min()), 6),
            "share_max": round(float(share.max()), 6)}


def _write_summary(outcome: SearchOutcome, request: SearchRequest) -> None:
    import json

    problem = outcome.problem
    assert problem is not None
    s = problem.settings
    ranked = outcome.ranked
    best = ranked[ranked["rank"] == 1]
    shown = [c for c in ("model", "batch", "format", "hardware", *problem.knob_columns,
                         "speedup", "expected_speedup", "fraction_of_sol",
                         "speedup_over_baseline", "accuracy", "accuracy_drop")
             if c in best.columns]
    summary = {
        "study": outcome.study,
        "storage": outcome.storage,
        "engine": outcome.engine,
        "space": s.space_where,
        # What every design was priced on: the base hardware, the overrides applied to all of
        # it and the knobs varied (the "output that says what it assumed").
        "hardware": list(problem.space.hardware),
        "hardware_set": {path: _plain(list(v) if isinstance(v, tuple) else v)
                         for path, v in problem.space.fixed},
        "hardware_varied": [k.path for k in problem.space.knobs],
        "fusion": problem.space.fusion,
        "scope": problem.space.scope,
        "batches": list(problem.space.batches),
        "dtype": problem.numerics.dtype, "vector_dtype": problem.numerics.vector_dtype,
        # The rest of the number types, as dse sweep's and dse evaluate's files carry them.
        "csr_dtype": problem.numerics.csr_dtype,
        "index_bytes": problem.numerics.index_width_bytes,
        "weight_dtype": problem.numerics.weight_label,
        **({"kv_dtype": problem.numerics.kv_dtype or problem.numerics.dtype}
           if problem.language else {}),
        "target": s.target,
        "max_acc_drop": s.max_acc_drop if s.target else None,
        "objective": problem.objective.text,
        "trials": s.trials if s.engine == "optuna" else None,
        "seed": s.seed,
        "work": outcome.counts,
        "seconds": round(outcome.seconds, 3),
        "best": [{k: _plain(v) for k, v in row.items()}
                 for row in best[shown].to_dict(orient="records")],
        "files": [p.name for p in outcome.files],
    }
    if problem.language:
        # What the accuracy columns mean here: a degradation from dense, lower is better.
        summary["accuracy"] = {
            "metric": problem.metric, "weights": problem.weights, "table": problem.table.where,
            "accuracy_column": ("perplexity increase over the same source's dense model"
                                if problem.metric == "wikitext2_ppl"
                                else f"{problem.metric} points lost against dense"),
            "lower_is_better": True, "overrides": s.extra.get("overrides", {})}
    if problem.predictors is not None:
        # The expectation ranks; the bound's best designs ride along for comparison.
        results = outcome.results
        by_bound = results[results["bound_rank"] == 1]
        summary["ranked_by"] = ("expected_speedup: kernels as measured on "
                                f"{problem.predictors.name}, one op at a time (unfused); an "
                                "expectation, not a bound")
        summary["calibrated"] = s.extra["calibrated"]
        summary["best_by_bound"] = [{k: _plain(v) for k, v in row.items()}
                                    for row in by_bound[shown].to_dict(orient="records")]
        if outcome.extrapolated_shares:  # language models: GEMMs never timed (issue 24)
            summary["expectation_extrapolated"] = outcome.extrapolated_shares
    path = outcome.out / "summary.json"
    text = json.dumps(summary, indent=1, allow_nan=False, default=str) + "\n"
    write_atomic(path, lambda handle: handle.write(text.encode("utf-8")))
    outcome.files.append(path)


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value

