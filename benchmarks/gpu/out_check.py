"""The one check every ``benchmarks/gpu`` script makes of its output path before any work.

``os.access`` says yes to root everywhere, ``/proc`` and read-only mounts included, so a
write that could not happen was found only after the work, as a traceback (issue 26, round 9:
``collect --out /proc/col``). These checks create and remove a file where the output will go,
as ``dse``'s own commands do (:func:`dse.cli.options.check_outputs`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["file_problem", "folder_problem"]


def file_problem(path: str | Path, option: str = "--out",
                 suffixes: tuple[str, ...] = (".csv",)) -> str | None:
    """Why ``path`` cannot take a result file (one line naming ``option``, the path and the
    fix), or None when it can: its suffix, a folder that exists, a file can be created there."""
    from dse.cli.options import InputError, check_outputs
    from dse.output import OutputError

    try:
        check_outputs(files=[(option, Path(path), suffixes)])
    except (OutputError, InputError) as exc:
        return str(exc)
    return None


def folder_problem(path: str | Path, option: str = "--out") -> str | None:
    """Why ``path`` cannot become (or be filled as) a folder, created with its missing parents,
    or None when it can: no file on the way, and a file can be created in the nearest folder
    that exists."""
    path = Path(path)
    above = path
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        return f"{option} {path}: {above} is a file; give a folder path"
    try:
        handle, name = tempfile.mkstemp(prefix=".dse-write-check-", dir=above)
    except OSError as exc:
        return (f"{option} {path}: cannot write in {above} ({exc.strerror or exc}); "
                "give a writable folder")
    os.close(handle)
    os.unlink(name)
    return None
