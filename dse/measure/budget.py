"""Time budgets of measuring runs: durations as users write them, and the clock a run spends."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable

__all__ = ["Budget", "MAX_BUDGET_S", "duration_text", "parse_duration", "rounds_within"]

_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}

#: The longest run a measuring command plans: a day. Longer work (a week of kernels) is
#: better split into runs whose datasets concatenate (``dse calibrate --data A --data B``):
#: a day-long run on a shared machine already spans its changes of load.
MAX_BUDGET_S = 24 * 3600.0


def duration_text(seconds: float) -> str:
    """``90`` -> ``'90 s'``, ``600`` -> ``'10 min'``, ``1e6`` -> ``'277.8 h'``."""
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:,.1f} h"


def parse_duration(text: str | float | int, option: str = "--budget",
                   error: type[ValueError] = ValueError) -> float:
    """Seconds in ``"90s"``, ``"5m"``, ``"1.5m"``, ``"2h"`` or a bare number of seconds.

    Raises ``error`` naming ``option`` for an unknown unit, zero or a negative value."""
    if isinstance(text, bool):
        raise error(f"{option} {text}: give a duration such as 90s, 2m or 1h")
    if isinstance(text, int | float):
        value, unit = float(text), ""
    else:
        match = re.fullmatch(r"\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?)\s*([a-z]*)\s*",
                             str(text).lower())
        if match is None:
            raise error(f"{option} {text}: not a duration; give a number with a unit "
                             "s, m or h, such as 90s, 2m or 1h")
        value, unit = float(match.group(1)), match.group(2)
        if unit not in _UNITS:
            raise error(f"{option} {text}: unknown unit {unit!r}; use s, m or h "
                             "(90s, 2m, 1h)")
    if not math.isfinite(value) or value <= 0:
        raise error(f"{option} {text}: give a positive duration such as 2m")
    return value * _UNITS[unit]


class Budget:
    """Seconds ``total_s`` from the first reading of ``clock``."""

    def __init__(self, total_s: float, clock: Callable[[], float] = time.perf_counter,
                 error: type[ValueError] = ValueError, start: float | None = None):
        if not (isinstance(total_s, int | float) and math.isfinite(total_s) and total_s > 0):
            raise error(f"--budget {total_s!r}: the budget must be a positive duration, "
                        "e.g. --budget 5m")
        self.total_s = float(total_s)
        self.clock = clock
        self.start = clock() if start is None else start  # given: a share of a running budget

    def spent(self) -> float:
        return self.clock() - self.start

    def remaining(self) -> float:
        return self.total_s - self.spent()

    def affords(self, estimate_s: float) -> bool:
        """Whether one more step of ``estimate_s`` seconds ends within the budget."""
        return self.remaining() >= estimate_s


def rounds_within(budget: Budget, round_s: float, rounds: int) -> int:
    """How many of the ``rounds - 1`` later rounds of a run fit in what ``budget`` has left,
    each estimated at ``round_s`` seconds (the first round's time), to the nearest round: the
    run ends within about half a round of the budget instead of running every round whatever
    it costs (a first round that ran a little past its share still leaves room for the
    others)."""
    if rounds <= 1:
        return 0
    if round_s <= 0:
        return rounds - 1
    return max(0, min(rounds - 1, math.floor(budget.remaining() / round_s + 0.5)))
