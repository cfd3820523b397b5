"""The first run's pause, said out loud: numba compiles the evaluator's kernels once per
installation (and after an upgrade), then every run loads them from the cache folder."""

from __future__ import annotations

import glob
import hashlib
import os
import sys
import time

__all__ = ["evaluation_begins", "first_run_done", "first_run_started", "kernels_cached",
           "note_first_compile"]

#: What the note says of the pause before it happens. No figure: the compile time depends on
#: the machine and its load, and a guess printed as a fact was off by half on the machine it
#: was measured on. The run's measured time is said after it (:func:`first_run_done`).
FIRST_COMPILE = "a pause once per installation"


def _cache_folder() -> str:
    """Where numba keeps this module's compiled kernels: ``NUMBA_CACHE_DIR`` (``dse`` sets it to
    the user's cache folder) joined with numba's own subfolder name for the source folder
    (its parent folder's name and the SHA-1 of its absolute path). The folder is found beside
    this module, not by importing the kernels: that imports numba and pandas (~0.4 s), which a
    command refused for a bad argument must not wait for."""
    source = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, "roofline"))
    digest = hashlib.sha1(source.encode()).hexdigest()
    return os.path.join(os.environ.get("NUMBA_CACHE_DIR", ""),
                        f"{os.path.basename(source)}_{digest}")


def kernels_cached() -> bool:
    """Whether numba's cache holds the totals kernel of this installation's source."""
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    pattern = os.path.join(_cache_folder(), f"kernels._design_totals_serial-*.{tag}.nbi")
    return bool(glob.glob(pattern))


def note_first_compile() -> str | None:
    """The line to print before the first evaluation, or None when the kernels are cached."""
    if kernels_cached():
        return None
    return (f"dse: compiling the evaluator's kernels ({FIRST_COMPILE}); later runs load "
            f"them from {os.environ.get('NUMBA_CACHE_DIR', 'the numba cache')}")


def first_run_done(seconds: float) -> str:
    """The line after a run that compiled the kernels: how long it took, measured."""
    return (f"dse: this first run took {seconds:.1f} s, the kernels' compile included; later "
            "runs load them from the cache")


def evaluation_begins(args) -> None:
    """Say, once, that the kernels compile, where they are not cached, as numba loads them: a
    command calls this when every input it was given is checked and its evaluation begins,
    so that a refused input is told alone, never after a note about a pause that does not
    come (nor does a run that prices in numpy only: ``dse.roofline.kernels.numpy_only``).
    Commands whose parser takes no design options (``evaluates`` unset) say nothing."""
    if not getattr(args, "evaluates", False) or hasattr(args, "first_run_started"):
        return
    args.first_run_started = None
    note = note_first_compile()
    if note is None:
        return
    from ..roofline import kernels  # numba itself is imported only as the kernels load

    def say() -> None:  # when numba loads them: a search of a small space never does
        print(note, file=sys.stderr, flush=True)  # instead of a silent pause
        args.first_run_started = time.perf_counter()

    kernels.on_first_load(say)


def first_run_started(args) -> float | None:
    """When the run that said it compiles the kernels began evaluating, or None."""
    return getattr(args, "first_run_started", None)
