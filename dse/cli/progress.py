"""The one progress meter of the command line: a status line on stderr while long work runs."""

from __future__ import annotations

import sys
import time

__all__ = ["StatusLine"]


class StatusLine:
    """``status(done, total[, unit])``: a line on stderr every few seconds while long work runs
    (and its last count, once it has run that long), so it shows it is alive. Library code takes
    it as its ``progress`` callback; it never prints itself."""

    def __init__(self, verb: str, unit: str = "", total: int = 0, every_s: float = 2.0) -> None:
        self.verb, self.unit, self.total, self.every_s = verb, unit, total, every_s
        self.started = self.last = time.monotonic()
        self.done = 0

    def __call__(self, done: int, total: int, unit: str | None = None) -> None:
        self.done, self.total = done, total
        if unit is not None:
            self.unit = unit
        now = time.monotonic()
        if now - self.last >= self.every_s or (done == total
                                               and now - self.started >= self.every_s):
            self.last = now
            share = f" ({100 * done / total:.0f}%)" if total else ""
            print(f"dse: {self.verb} {done}/{total} {self.unit}{share} "
                  f"({now - self.started:.1f} s)", file=sys.stderr, flush=True)
