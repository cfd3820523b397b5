"""Result files: the checks that an output path can be written (run before any work) and atomic
writes (a temporary file in the target folder, renamed into place only once complete, so an
interrupted run leaves nothing half-written). Library code: it never prints."""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pandas as pd

__all__ = ["FileSet", "OutputError", "SUFFIXES", "check_output_path", "check_report_dir",
           "format_seconds", "write_atomic", "write_failure", "write_table"]

SUFFIXES = (".csv", ".parquet", ".json")


class OutputError(ValueError):
    """An output path that cannot be written; the message names it and the fix."""


def check_output_path(path: Path, suffixes: tuple[str, ...] = SUFFIXES,
                      option: str = "--out") -> Path:
    """Fail early, before any work, when ``path`` cannot take a result file; errors name
    ``option``."""
    if not path.suffix:  # "x", or ".toml": a leading dot belongs to the name, not a type
        bare = path.name.lstrip(".")
        example = path.with_name(("out" if not bare or f".{bare.lower()}" in suffixes
                                  else bare) + suffixes[0]) if path.name else Path(
                                      "out" + suffixes[0])
        raise OutputError(f"{option} {path}: the file name has no type; give a name ending "
                          f"in {', '.join(suffixes)}, e.g. {option} {example}")
    if path.suffix.lower() not in suffixes:
        raise OutputError(f"{option} {path}: unknown file type {path.suffix!r}; "
                          f"use one of {', '.join(suffixes)}")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        if folder.exists():
            raise OutputError(f"{option} {path}: {folder} is not a folder")
        raise OutputError(f"{option} {path}: folder {folder} does not exist; create it first")
    if path.is_dir():
        raise OutputError(f"{option} {path}: is a folder; give a file name")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{option} {path}: folder {folder} is not writable")
    return path


def check_report_dir(path: Path, option: str = "--report") -> Path:
    """Fail early, before any work, when ``path`` cannot become a report folder; errors name
    ``option``."""
    if path.exists() and not path.is_dir():
        raise OutputError(f"{option} {path}: is a file, not a report folder")
    parent = path if path.exists() else (path.parent if str(path.parent) else Path("."))
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{option} {path}: folder {parent} is missing or not writable; "
                          "create it or choose another")
    return path


def write_failure(path: Path, exc: OSError) -> str:
    """The one line for a write that failed: the path, the system's reason and the fix."""
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{path}: cannot write ({reason}); free space there or choose another folder"
    return f"{path}: cannot write ({reason})"


def _json_value(value):
    """A cell as a JSON value: numpy scalars to Python ones, NaN and infinities to null."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _records(table: pd.DataFrame) -> str:
    # Not pandas' to_json: its double_precision counts decimal places (at most 15), which
    # truncates latencies of ~1e-7 s to 9 significant digits. json writes floats with repr,
    # which round-trips exactly; NaN becomes null (NaN is not valid JSON).
    records = [{str(k): _json_value(v) for k, v in row.items()}
               for row in table.to_dict(orient="records")]
    return json.dumps(records, indent=1, allow_nan=False) + "\n"


def write_table(table: pd.DataFrame, path: Path) -> None:
    """Write ``table`` as CSV, Parquet or a JSON list of records, atomically."""
    check_output_path(path)
    suffix = path.suffix.lower()

    def write(handle) -> None:
        if suffix == ".csv":
            handle.write(table.to_csv(index=False).encode())
        elif suffix == ".json":
            handle.write(_records(table).encode())
        else:
            table.to_parquet(handle, index=False)

    write_atomic(path, write)


class FileSet:
    """Several files written as one set. Inside ``with FileSet() as files:``, every
    :func:`write_atomic` (and so :func:`write_table`), from any thread, leaves its complete file
    under its temporary name, and :meth:`folder` gives a temporary folder beside a target folder
    (a report) to fill. When the block ends normally, all of them are renamed into place at
    once, with Ctrl-C held off, so an interrupt leaves the whole set or none of it; when the
    block raises (an error, Ctrl-C), every temporary file and folder is removed and no target is
    touched. ``committed`` lists the files and folders renamed into place. One set at a time
    per process."""

    _active: FileSet | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.staged: list[tuple[Path, Path]] = []
        self.committed: list[Path] = []

    def __enter__(self) -> FileSet:
        with FileSet._lock:
            if FileSet._active is not None:
                raise RuntimeError("a FileSet is already open")
            FileSet._active = self
        return self

    def __exit__(self, kind, value, traceback) -> None:
        with FileSet._lock:
            FileSet._active = None
        if kind is None:
            self._commit()
        else:
            self._discard()

    def _stage(self, tmp: Path, path: Path) -> None:
        with FileSet._lock:
            self.staged.append((tmp, path))

    def folder(self, target: Path) -> Path:
        """An empty temporary folder beside ``target`` (a sibling, so that the rename stays
        on one device) to write ``target``'s files into; the set moves them into ``target``
        (created when missing; other files already there are left alone). ``target``'s parent
        is created when missing."""
        target = Path(target)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp",
                                        dir=target.parent))
        except OSError as exc:
            raise OutputError(write_failure(target, exc)) from None
        self._stage(tmp, target)
        return tmp

    def _commit(self) -> None:
        main = threading.current_thread() is threading.main_thread()
        held = hasattr(signal, "pthread_sigmask") and main
        if held:  # a Ctrl-C now waits until every file of the set is in place
            previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            for tmp, path in self.staged:  # what would stop a move, before any rename
                if not tmp.is_dir() and path.is_dir():  # a folder where a file goes
                    self._discard()
                    raise OutputError(f"{path}: a folder is in the way of the file; remove it "
                                      "or choose another name; written: none")
                if tmp.is_dir() and (in_way := _in_the_way(tmp, path)) is not None:
                    self._discard()
                    raise OutputError(f"{in_way}: in the way of {path}'s files; remove it or "
                                      "choose another folder; written: none")
            for tmp, path in self.staged:
                if tmp.is_dir():
                    _move_folder(tmp, path)
                else:
                    os.replace(tmp, path)
                self.committed.append(path)
        except OSError as exc:
            self._discard()
            raise OutputError(f"{write_failure(path, exc)}; written: "
                              f"{', '.join(map(str, self.committed)) or 'none'}") from None
        finally:
            if held:
                signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    def _discard(self) -> None:
        for tmp, _ in self.staged:
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                tmp.unlink(missing_ok=True)


def _in_the_way(tmp: Path, target: Path) -> Path | None:
    """What keeps ``tmp``'s files from moving into ``target``: a file named ``target``, or a
    folder under one of the files' names."""
    if target.exists() and not target.is_dir():
        return target
    if target.is_dir():
        for path in tmp.iterdir():
            if (target / path.name).is_dir():
                return target / path.name
    return None


def _move_folder(tmp: Path, target: Path) -> None:
    """``tmp``'s files into ``target``: one rename when ``target`` does not exist, else file by
    file, ``index.html`` last (a reader sees the old page or the complete new one)."""
    if not target.exists():
        os.replace(tmp, target)
        return
    names = sorted((p.name for p in tmp.iterdir()), key=lambda n: n == "index.html")
    for name in names:
        os.replace(tmp / name, target / name)
    tmp.rmdir()


def write_atomic(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Call ``write`` on a temporary file beside ``path``, then rename it into place (inside an
    open :class:`FileSet`, the set renames it, with the others)."""
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                        dir=path.parent)
    except OSError as exc:  # passed the up-front checks, yet no file can be created there
        raise OutputError(f"{path}: cannot write there ({exc.strerror or exc})") from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
        # mkstemp creates the file 0600; give the result the permissions of a plain open().
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        files = FileSet._active
        if files is not None:
            files._stage(tmp, path)
        else:
            os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OutputError(write_failure(path, exc)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def format_seconds(seconds: float) -> str:
    """3.2e-6 -> '3.2 us' (three significant digits)."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9), ("ps", 1e-12)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds:.3g} s"
