"""The one progress meter of the command line, for every long piece of work (search, sweep,
simulation fan-outs, one long simulation, benchmarks): a tqdm bar when stderr is a terminal,
plain periodic lines with the rate and the time left when it is not (logs, CI, pipes)."""

from __future__ import annotations

import sys
import time

__all__ = ["StatusLine"]


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class StatusLine:
    """``status(done, total[, unit])``: library code takes it as its ``progress`` callback and
    never prints itself. On a terminal it draws a tqdm bar; elsewhere it writes a line every
    ``every_s`` seconds (and the last count, once the work has run that long) with the rate and
    the time left, so a log shows the work is alive."""

    def __init__(self, verb: str, unit: str = "", total: int = 0, every_s: float = 2.0,
                 stream=None) -> None:
        self.verb, self.unit, self.total, self.every_s = verb, unit, total, every_s
        self.stream = stream if stream is not None else sys.stderr
        self.started = self.last = time.monotonic()
        self.done = 0
        self.bar = None
        self.terminal = bool(getattr(self.stream, "isatty", lambda: False)())

    def __call__(self, done: int, total: int, unit: str | None = None) -> None:
        self.done, self.total = done, total
        if unit is not None:
            self.unit = unit
        if self.terminal:
            self._draw(done, total)
            return
        now = time.monotonic()
        if now - self.last >= self.every_s or (done == total
                                               and now - self.started >= self.every_s):
            self.last = now
            print(self.line(done, total, now - self.started), file=self.stream, flush=True)

    def line(self, done: int, total: int, elapsed: float) -> str:
        """The plain status line: count, share, rate and time left."""
        text = f"dse: {self.verb} {done}/{total} {self.unit}".rstrip()
        if total:
            text += f" ({100 * done / total:.0f}%)"
        text += f", {_duration(elapsed)}"
        if done and elapsed > 0:
            rate = done / elapsed
            text += f", {rate:.3g} {self.unit or 'items'}/s"
            if total and done < total:
                text += f", about {_duration((total - done) / rate)} left"
        return text

    def _draw(self, done: int, total: int) -> None:
        from tqdm import tqdm

        if self.bar is None or self.bar.total != total:
            if self.bar is not None:
                self.bar.close()
            self.bar = tqdm(total=total, desc=f"dse: {self.verb}", unit=self.unit or "it",
                            file=self.stream, leave=False, dynamic_ncols=True)
        self.bar.update(done - self.bar.n)
        if done >= total:
            self.bar.close()
            self.bar = None
