"""Where a study lives: SQLite (the default, a file in the run's folder) or PostgreSQL (shared).

One database holds the study's settings (``dse_studies``), the exhaustive engine's work units
(``dse_chunks``: a chunk is claimed by one worker and marked done together with its results, in
one transaction, so a killed worker loses at most the chunk it held and never writes half of
one), and Optuna's own tables for the Optuna engine. Several processes, or machines with
PostgreSQL, share a study by opening the same URL.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import socket
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from .errors import StorageError

__all__ = ["Storage", "StorageError", "open_storage", "redact", "sqlite_url"]

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


def redact(url: str) -> str:
    """The URL with its password replaced by ``***``, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a URL too malformed to parse: show no part of it
        return "<unparseable storage URL>"


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def open_storage(url: str) -> Storage:
    """Connect to ``url`` and create the dse tables if needed; one-line errors, no password."""
    shown = redact(url)
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
        raise StorageError(f"--storage {shown}: the database driver is missing ({exc.name}); "
                           "pip install psycopg2-binary") from None
    except sa.exc.SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", exc) or exc).strip().splitlines()
        reason_text = reason[0] if reason else type(exc).__name__
        raise StorageError(f"--storage {shown}: cannot connect ({_scrub(reason_text, parsed)})"
                           ) from None
    return Storage(url, engine)


def _scrub(text: str, parsed) -> str:
    """Drivers may echo the connection string; never print a password."""
    password = parsed.password
    return text.replace(str(password), "***") if password else text


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

    def create_study(self, name: str, settings: dict[str, Any]) -> None:
        try:
            with self.engine.begin() as conn:
                conn.execute(STUDIES.insert().values(
                    name=name, created_at=_now(), settings=json.dumps(settings, sort_keys=True)))
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

    # --- exhaustive chunks ---------------------------------------------------------------------

    def add_chunks(self, study: str, count: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(CHUNKS.insert(), [{"study": study, "idx": i, "state": "pending"}
                                           for i in range(count)])

    def claim_chunk(self, study: str, worker: str) -> int | None:
        """Mark the lowest pending chunk running for ``worker``; None when none is left."""
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
                    return int(row[0])
            # Another worker took it between our read and write (SQLite): try the next.

    def finish_chunk(self, study: str, idx: int, worker: str, result: bytes) -> bool:
        """Store a chunk's results and mark it done, atomically. False if it was not ours."""
        with self.engine.begin() as conn:
            done = conn.execute(
                CHUNKS.update()
                .where(CHUNKS.c.study == study, CHUNKS.c.idx == idx,
                       CHUNKS.c.state == "running", CHUNKS.c.worker == worker)
                .values(state="done", finished_at=_now(), result=result))
            return done.rowcount == 1

    def release_running(self, study: str) -> int:
        """Put chunks left running (by killed workers) back to pending; how many."""
        with self.engine.begin() as conn:
            return conn.execute(
                CHUNKS.update().where(CHUNKS.c.study == study, CHUNKS.c.state == "running")
                .values(state="pending", worker=None, claimed_at=None)).rowcount

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
