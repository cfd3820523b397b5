"""Where a study lives: SQLite (the default, a file in the run's folder) or PostgreSQL (shared).

One database holds the study's settings (``dse_studies``), the exhaustive engine's work units
(``dse_chunks``: a chunk is claimed by one worker and marked done together with its results, in
one transaction, so a killed worker loses at most the chunk it held and never writes half of
one), the leases on work in progress (``dse_leases``), the results of complete studies
(``dse_results`` and ``dse_hw_points``, below) and Optuna's own tables (for the Optuna engine's
trials, and every study's designs as Optuna shows them). Several processes, or machines with
PostgreSQL, share a study by opening the same URL.

A complete study's results, one row per design point (as in ``results.parquet``), are in
``dse_results``; the varied hardware knobs of each hardware point are in ``dse_hw_points``
(``knobs``: a JSON object of ``hw.FIELD`` to value), joined on ``(study, hw_point)``::

    pd.read_sql("SELECT * FROM dse_results WHERE study = 'NAME'", url)

A worker holds a lease on each chunk or trial it runs: a row with an expiry time on the
database's clock (so machines' clocks need not agree), pushed forward by a heartbeat thread
every quarter of the lease. Work whose lease expired, or whose worker is a process of this
machine that no longer exists, is reclaimed by any other participant of the study. Reclaiming a
live worker's work by mistake (a heartbeat starved for longer than the lease) costs only a
repeat: a chunk is stored by whichever worker finishes it first, and an Optuna trial failed
under its worker is dropped when that worker reports it (its design is queued again).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import gc
import json
import math
import os
import socket
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from .credentials import MASK, mask_credentials
from .errors import StorageError

__all__ = ["LEASE_S", "Storage", "StorageError", "has_password", "mask_credentials",
           "open_storage", "process_gone", "redact", "sqlite_url", "worker_id"]

#: Seconds a lease on a chunk or trial lasts unless its worker's heartbeat renews it (every
#: quarter of it); how long a vanished worker on another machine can hold work back.
LEASE_S = 60.0

_META = sa.MetaData()
STUDIES = sa.Table(
    "dse_studies", _META,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("created_at", sa.String(40), nullable=False),
    sa.Column("settings", sa.Text, nullable=False),
)
CHUNKS = sa.Table(
    "dse_chunks", _META,
    sa.Column("study", sa.String(200), primary_key=True),
    sa.Column("idx", sa.Integer, primary_key=True),
    sa.Column("state", sa.String(10), nullable=False),  # pending, running, done
    sa.Column("worker", sa.String(200)),
    sa.Column("claimed_at", sa.String(40)),
    sa.Column("finished_at", sa.String(40)),
    sa.Column("result", sa.LargeBinary),
)
LEASES = sa.Table(
    "dse_leases", _META,
    sa.Column("study", sa.String(200), primary_key=True),
    sa.Column("unit", sa.String(10), primary_key=True),  # chunk or trial
    sa.Column("item", sa.Integer, primary_key=True),  # chunk index or Optuna trial number
    sa.Column("worker", sa.String(200), nullable=False),
    # Seconds since the epoch on the database's clock: every judge reads the same clock.
    sa.Column("until", sa.Float, nullable=False),
)
#: A complete study's results, one row per design point: what ``results.parquet`` holds, less
#: the per-layer detail. ``role`` is candidate, baseline or dense; ``rank`` is NULL for designs
#: that miss the target; ``pareto`` is NULL unless the objective is pareto; ``trial`` and
#: ``trials`` (the first Optuna trial that sampled the design, and how many did) are NULL for
#: exhaustive studies.
RESULTS = sa.Table(
    "dse_results", _META,
    sa.Column("study", sa.String(200), primary_key=True),
    sa.Column("row", sa.Integer, primary_key=True),  # results.parquet's row order
    sa.Column("model", sa.String(200), nullable=False),
    sa.Column("batch", sa.Integer, nullable=False),
    sa.Column("format", sa.String(100), nullable=False),
    sa.Column("family", sa.String(40)),
    sa.Column("sparsity", sa.Float),
    sa.Column("role", sa.String(20)),
    sa.Column("hardware", sa.String(200)),
    sa.Column("hw_point", sa.Integer, nullable=False),
    sa.Column("speedup", sa.Float),  # over dense, same model, hardware point and batch
    sa.Column("speedup_over_baseline", sa.Float),
    sa.Column("baseline", sa.String(100)),
    sa.Column("accuracy", sa.Float),  # percent
    sa.Column("accuracy_status", sa.String(20)),
    sa.Column("accuracy_drop", sa.Float),  # points below the baseline's accuracy
    sa.Column("verdict", sa.String(40)),
    sa.Column("meets_target", sa.Boolean),
    sa.Column("rank", sa.Integer),
    sa.Column("pareto", sa.Boolean),
    sa.Column("latency_s", sa.Float),
    sa.Column("dense_latency_s", sa.Float),
    sa.Column("bound", sa.String(40)),
    sa.Column("dram_bytes", sa.Float),
    sa.Column("trial", sa.Integer),
    sa.Column("trials", sa.Integer),
)
#: The hardware points of a complete study's results: base spec and knob values (JSON).
HW_POINTS = sa.Table(
    "dse_hw_points", _META,
    sa.Column("study", sa.String(200), primary_key=True),
    sa.Column("hw_point", sa.Integer, primary_key=True),
    sa.Column("hardware", sa.String(200)),
    sa.Column("knobs", sa.Text, nullable=False),
)
#: Rows per INSERT batch when writing results.
_RESULT_BATCH = 50_000


def redact(url: str) -> str:
    """The URL with its password replaced by ``***``, for messages (a ``password=`` query
    parameter too: :func:`search.credentials.mask_credentials`)."""
    try:
        return mask_credentials(make_url(url).render_as_string(hide_password=True))
    except Exception:  # noqa: BLE001 - a URL too malformed to parse: show no part of it
        return "<unparseable storage URL>"


def has_password(url: str) -> bool:
    """Whether ``url`` carries a password (``USER:PASS@`` or a ``password=`` parameter)."""
    if mask_credentials(url) != url:
        return True
    try:
        return bool(make_url(url).password)
    except Exception:  # noqa: BLE001 - unparseable: treat as secret
        return True


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def process_gone(worker: str) -> bool:
    """Whether ``worker`` (a :func:`worker_id`) was a process of this machine that has ended.

    Only this machine's processes can be checked; for the others the lease decides. A false
    answer costs a repeat, never a loss, so pid reuse or a shared host name are harmless.
    """
    host, _, pid_text = worker.rpartition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        return False
    try:  # a killed process not yet reaped by its parent still answers signal 0
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def open_storage(url: str) -> Storage:
    """Connect to ``url`` and create the dse tables if needed; one-line errors, no password."""
    shown = redact(url)
    if not url.strip():
        raise StorageError("--storage is empty: give the study's database URL (is "
                           "DSE_SEARCH_STORAGE set?)")
    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001 - SQLAlchemy raises several types for a bad URL
        raise StorageError(f"--storage {shown}: not a database URL; use sqlite:///PATH or "
                           "postgresql://USER:PASSWORD@HOST:PORT/DB") from None
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise StorageError(f"--storage {shown}: unsupported database {backend!r}; use "
                           "sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DB")
    kwargs: dict[str, Any] = {}
    if backend == "sqlite":
        database = parsed.database or ""
        if not database or database == ":memory:":
            raise StorageError(f"--storage {shown}: give a file, sqlite:///PATH (an in-memory "
                               "database cannot hold a study between runs)")
        folder = Path(database).parent
        if not folder.is_dir():
            raise StorageError(f"--storage {shown}: folder {folder} does not exist")
        # Several local workers write one file: wait for the lock rather than fail.
        kwargs["connect_args"] = {"timeout": 60}
    else:
        kwargs["connect_args"] = {"connect_timeout": 10}
        kwargs["pool_pre_ping"] = True
    try:
        engine = sa.create_engine(url, **kwargs)
        if backend == "sqlite":
            sa.event.listen(engine, "connect", _sqlite_pragmas)
        with engine.begin() as conn:
            _META.create_all(conn, checkfirst=True)
    except ModuleNotFoundError as exc:
        raise StorageError(f"--storage {shown}: the PostgreSQL driver (psycopg 3) is missing "
                           f"({exc.name}); pip install 'sparsity-dse[postgres]'") from None
    except sa.exc.SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", exc) or exc).strip().splitlines()
        reason_text = reason[0] if reason else type(exc).__name__
        raise StorageError(f"--storage {shown}: cannot connect ({_scrub(reason_text, parsed)})"
                           ) from None
    return Storage(url, engine)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Hold the cyclic garbage collector off while the block runs, then restore it: for blocks
    that make many objects which all live on (imports, Optuna's schema) or all die by reference
    count (result rows for the database). Their allocations would trigger full collections,
    each a walk over every object of the process (some 200,000 once the imports are done: a
    sixth of a second here), that find nothing to collect."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _plain(value: Any) -> Any:
    """A cell as a plain Python value for the database (NaN and NA as NULL)."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def _result_records(study: str, frame: pd.DataFrame) -> list[tuple[Any, ...]]:
    """``frame``'s rows as ``dse_results`` tuples, in column order (columns it lacks: NULL)."""
    columns: dict[str, list[Any]] = {}
    n = len(frame)
    for column in RESULTS.columns:
        name = column.name
        if name == "study":
            columns[name] = [study] * n
        elif name == "row":
            columns[name] = list(range(n))
        elif name not in frame:
            columns[name] = [None] * n
        else:
            series = frame[name]
            if isinstance(series.dtype, pd.CategoricalDtype):
                series = series.astype(object)
            values = series.astype(object).where(series.notna(), None).tolist()
            if isinstance(column.type, sa.Boolean):
                values = [None if v is None else bool(v) for v in values]
            elif isinstance(column.type, sa.Integer):
                values = [None if v is None else int(v) for v in values]
            elif isinstance(column.type, sa.String):
                values = [None if v is None else str(v) for v in values]
            else:
                values = [None if v is None else float(v) for v in values]
            columns[name] = values
    return list(zip(*columns.values(), strict=True))


def _scrub(text: str, parsed) -> str:
    """Drivers may echo the connection string; never print a password (the URL's, or one a
    DSN or ``password=`` parameter in the message carries)."""
    password = parsed.password
    text = text.replace(str(password), MASK) if password else text
    return mask_credentials(text)


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets readers (progress polling) run beside the one writer.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


class Storage:
    """A connected study database. Methods are small transactions, safe from many processes."""

    def __init__(self, url: str, engine: sa.Engine) -> None:
        self.url = url
        self.engine = engine

    @property
    def shown(self) -> str:
        return redact(self.url)

    @property
    def backend(self) -> str:
        return self.engine.dialect.name

    # --- studies -------------------------------------------------------------------------------

    def create_study(self, name: str, settings: dict[str, Any], chunks: int = 0) -> None:
        """Store a new study with its settings and ``chunks`` pending chunks, in one
        transaction: a kill during creation leaves either the whole study or none of it."""
        try:
            with self.engine.begin() as conn:
                conn.execute(STUDIES.insert().values(
                    name=name, created_at=_now(), settings=json.dumps(settings, sort_keys=True)))
                if chunks:
                    conn.execute(CHUNKS.insert(), [{"study": name, "idx": i, "state": "pending"}
                                                   for i in range(chunks)])
        except sa.exc.IntegrityError:
            raise StorageError(f"study {name!r} already exists in {self.shown}; continue it "
                               "with --resume or give another --study") from None

    def settings(self, name: str) -> dict[str, Any]:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(STUDIES.c.settings)
                               .where(STUDIES.c.name == name)).first()
        if row is None:
            known = self.study_names()
            hint = f" (studies there: {', '.join(known)})" if known else " (it holds none)"
            raise StorageError(f"no study {name!r} in {self.shown}{hint}")
        return json.loads(row[0])

    def study_names(self) -> list[str]:
        with self.engine.connect() as conn:
            return [r[0] for r in conn.execute(sa.select(STUDIES.c.name)
                                               .order_by(STUDIES.c.name))]

    # --- leases ----------------------------------------------------------------------------------

    def _clock(self) -> sa.ColumnElement:
        """The database's time, in seconds since the epoch, as an SQL expression."""
        if self.backend == "postgresql":
            return sa.cast(sa.extract("epoch", sa.func.clock_timestamp()), sa.Float)
        return (sa.func.julianday("now") - 2440587.5) * 86400.0

    def _take_lease(self, conn: sa.Connection, study: str, unit: str, item: int, worker: str,
                    seconds: float) -> None:
        where = (LEASES.c.study == study, LEASES.c.unit == unit, LEASES.c.item == item)
        conn.execute(LEASES.delete().where(*where))
        conn.execute(LEASES.insert().from_select(
            ["study", "unit", "item", "worker", "until"],
            sa.select(sa.literal(study), sa.literal(unit), sa.literal(item), sa.literal(worker),
                      self._clock() + seconds)))

    def take_lease(self, study: str, unit: str, item: int, worker: str, seconds: float) -> None:
        with self.engine.begin() as conn:
            self._take_lease(conn, study, unit, item, worker, seconds)

    def drop_lease(self, study: str, unit: str, item: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(LEASES.delete().where(LEASES.c.study == study, LEASES.c.unit == unit,
                                               LEASES.c.item == item))

    def renew(self, worker: str, seconds: float) -> None:
        """Push forward every lease ``worker`` holds (in any study)."""
        with self.engine.begin() as conn:
            conn.execute(LEASES.update().where(LEASES.c.worker == worker)
                         .values(until=self._clock() + seconds))

    def leases(self, study: str, unit: str) -> dict[int, tuple[str, float]]:
        """item -> (worker, seconds left) of the study's leases on ``unit`` (negative: expired)."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(LEASES.c.item, LEASES.c.worker,
                                          LEASES.c.until - self._clock())
                                .where(LEASES.c.study == study, LEASES.c.unit == unit))
            return {int(item): (worker, float(left)) for item, worker, left in rows}

    @contextlib.contextmanager
    def heartbeat(self, worker: str, seconds: float) -> Iterator[None]:
        """Renew ``worker``'s leases from a background thread while the block runs."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(seconds / 4):
                try:
                    self.renew(worker, seconds)
                except sa.exc.SQLAlchemyError:
                    pass  # the next beat retries; an outage longer than the lease costs repeats

        thread = threading.Thread(target=beat, name="dse-lease-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    # --- exhaustive chunks ---------------------------------------------------------------------

    def add_missing_chunks(self, study: str, count: int) -> int:
        """Add the chunks ``0..count-1`` the study lacks (one created before creation was a
        single transaction, and killed half-way); how many were added."""
        try:
            with self.engine.begin() as conn:
                have = {int(r[0]) for r in conn.execute(sa.select(CHUNKS.c.idx)
                                                         .where(CHUNKS.c.study == study))}
                missing = [i for i in range(count) if i not in have]
                if missing:
                    conn.execute(CHUNKS.insert(), [{"study": study, "idx": i, "state": "pending"}
                                                   for i in missing])
                return len(missing)
        except sa.exc.IntegrityError:
            return 0  # another process added them at the same moment

    def claim_chunk(self, study: str, worker: str, lease_s: float = LEASE_S) -> int | None:
        """Mark the lowest pending chunk running for ``worker``, with a lease of ``lease_s``
        seconds; None when none is pending."""
        while True:
            with self.engine.begin() as conn:
                pending = (sa.select(CHUNKS.c.idx)
                           .where(CHUNKS.c.study == study, CHUNKS.c.state == "pending")
                           .order_by(CHUNKS.c.idx).limit(1))
                if self.backend == "postgresql":
                    # Concurrent workers skip each other's locked rows instead of queueing.
                    pending = pending.with_for_update(skip_locked=True)
                row = conn.execute(pending).first()
                if row is None:
                    return None
                claimed = conn.execute(
                    CHUNKS.update()
                    .where(CHUNKS.c.study == study, CHUNKS.c.idx == row[0],
                           CHUNKS.c.state == "pending")
                    .values(state="running", worker=worker, claimed_at=_now()))
                if claimed.rowcount == 1:
                    self._take_lease(conn, study, "chunk", int(row[0]), worker, lease_s)
                    return int(row[0])
            # Another worker took it between our read and write (SQLite): try the next.

    def finish_chunk(self, study: str, idx: int, worker: str, result: bytes) -> bool:
        """Store a chunk's results and mark it done, atomically. False if it was done already
        (by a worker that reclaimed it from us when our lease ran out): the results are the
        same, the first stored stays."""
        with self.engine.begin() as conn:
            done = conn.execute(
                CHUNKS.update()
                .where(CHUNKS.c.study == study, CHUNKS.c.idx == idx, CHUNKS.c.state != "done")
                .values(state="done", worker=worker, finished_at=_now(), result=result))
            conn.execute(LEASES.delete().where(LEASES.c.study == study, LEASES.c.unit == "chunk",
                                               LEASES.c.item == idx))
            return done.rowcount == 1

    def reclaim_chunks(self, study: str, gone: frozenset[str] = frozenset()
                       ) -> dict[str, int]:
        """Put back to pending the running chunks whose lease expired (or is missing), whose
        worker is a vanished process of this machine, or whose worker is in ``gone``;
        returns how many per worker."""
        with self.engine.connect() as conn:
            running = conn.execute(sa.select(CHUNKS.c.idx, CHUNKS.c.worker)
                                   .where(CHUNKS.c.study == study,
                                          CHUNKS.c.state == "running")).all()
        if not running:
            return {}
        leases = self.leases(study, "chunk")
        lost: dict[str, list[int]] = {}
        for idx, worker in running:
            holder, left = leases.get(int(idx), (None, -1.0))
            if holder != worker or left < 0 or worker in gone or process_gone(worker):
                lost.setdefault(worker, []).append(int(idx))
        reclaimed: dict[str, int] = {}
        with self.engine.begin() as conn:
            for worker, idxs in lost.items():
                # Only while still running for that worker: never undo a newer claim.
                n = conn.execute(
                    CHUNKS.update()
                    .where(CHUNKS.c.study == study, CHUNKS.c.state == "running",
                           CHUNKS.c.worker == worker, CHUNKS.c.idx.in_(idxs))
                    .values(state="pending", worker=None, claimed_at=None)).rowcount
                conn.execute(LEASES.delete().where(
                    LEASES.c.study == study, LEASES.c.unit == "chunk", LEASES.c.item.in_(idxs),
                    LEASES.c.worker == worker))
                if n:
                    reclaimed[worker] = n
        return reclaimed

    def chunk_holders(self, study: str) -> dict[str, int]:
        """worker -> how many of the study's chunks it runs now."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(CHUNKS.c.worker, sa.func.count())
                                .where(CHUNKS.c.study == study, CHUNKS.c.state == "running")
                                .group_by(CHUNKS.c.worker))
            return {str(w): int(n) for w, n in rows}

    def chunk_states(self, study: str) -> dict[str, int]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(CHUNKS.c.state, sa.func.count())
                                .where(CHUNKS.c.study == study).group_by(CHUNKS.c.state))
            return {state: int(n) for state, n in rows}

    def chunk_results(self, study: str) -> list[tuple[int, str, bytes]]:
        """(index, worker, results) of every done chunk, in chunk order."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(CHUNKS.c.idx, CHUNKS.c.worker, CHUNKS.c.result)
                                .where(CHUNKS.c.study == study, CHUNKS.c.state == "done")
                                .order_by(CHUNKS.c.idx))
            return [(int(i), w, bytes(r)) for i, w, r in rows]

    # --- results of complete studies ----------------------------------------------------------

    def result_count(self, study: str) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(RESULTS)
                                    .where(RESULTS.c.study == study)).scalar() or 0)

    def write_results(self, study: str, frame: pd.DataFrame, knob_columns: list[str]) -> None:
        """Replace the study's rows in ``dse_results`` and ``dse_hw_points`` with ``frame``'s
        (a complete study's ranked results), in one transaction."""
        with gc_paused():  # a tuple per row, none of them in a cycle
            self._write_results(study, frame, knob_columns)

    def _write_results(self, study: str, frame: pd.DataFrame, knob_columns: list[str]) -> None:
        rows = _result_records(study, frame)
        points = frame.drop_duplicates("hw_point")
        knobs = points[knob_columns].to_dict(orient="records") if knob_columns else (
            [{}] * len(points))
        hardware = (points["hardware"].astype(str).tolist() if "hardware" in points
                    else [None] * len(points))
        hw_rows = [{"study": study, "hw_point": int(p), "hardware": h,
                    "knobs": json.dumps({k: _plain(v) for k, v in kv.items()}, sort_keys=True)}
                   for p, h, kv in zip(points["hw_point"].tolist(), hardware, knobs, strict=True)]
        # Plain DBAPI executemany of tuples: SQLAlchemy's per-row dict handling would take
        # most of a minute per million rows.
        marks = ", ".join(["?" if self.backend == "sqlite" else "%s"] * len(RESULTS.columns))
        names = ", ".join(f'"{c.name}"' for c in RESULTS.columns)
        insert = f"INSERT INTO {RESULTS.name} ({names}) VALUES ({marks})"
        with self.engine.begin() as conn:
            conn.execute(RESULTS.delete().where(RESULTS.c.study == study))
            conn.execute(HW_POINTS.delete().where(HW_POINTS.c.study == study))
            for first in range(0, len(rows), _RESULT_BATCH):
                conn.exec_driver_sql(insert, rows[first:first + _RESULT_BATCH])
            if hw_rows:
                conn.execute(HW_POINTS.insert(), hw_rows)

    # --- a study-wide lock (the Optuna engine's trial budget) ----------------------------------

    @contextlib.contextmanager
    def lock(self, study: str) -> Iterator[None]:
        """Hold an exclusive lock on ``study`` across processes (and machines, on PostgreSQL)."""
        if self.backend == "postgresql":
            key = zlib.crc32(study.encode("utf-8"))
            with self.engine.connect() as conn:
                conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": key})
                try:
                    yield
                finally:
                    conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                    conn.commit()
            return
        # SQLite studies are shared by processes on one machine: a lock file beside the database.
        path = Path(make_url(self.url).database + ".lock")
        with open(path, "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def dispose(self) -> None:
        self.engine.dispose()
