"""Time budgets of measuring runs: durations as users write them, and the clock a run spends."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable

__all__ = ["Budget", "MAX_BUDGET_S", "OVERRUN_TOLERANCE", "check_first_round_fits",
           "check_first_round_pace", "duration_text", "first_round_floor_s", "parse_duration",
           "rounds_within"]

#: How far past --budget the trace's first round may project the run before the run stops
#: (:func:`check_first_round_pace`): the run ends within about this multiple of --budget, or
#: stops early saying what it needs.
OVERRUN_TOLERANCE = 1.5

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


def first_round_floor_s(cold_timings: int, repeats: int, flush_s: float,
                        setup_s: float = 0.0) -> float:
    """The least time the trace's first round can take: ``setup_s`` (what must still be set up
    before it, e.g. the flush buffer's allocation), then ``cold_timings`` kernels, each timed
    over at least ``repeats`` calls (the method's ``min_repeats``), every call after a
    last-level-cache flush of ``flush_s`` seconds. The kernels' own time, warm-up and the
    repeats a noisy host needs come on top: a lower bound, so a refusal by it is never wrong."""
    return (max(0.0, float(setup_s))
            + max(0, int(cold_timings)) * max(0, int(repeats)) * max(0.0, float(flush_s)))


def check_first_round_fits(budget_s: float, spent_s: float, cold_timings: int, repeats: int,
                           flush_s: float, error: type[ValueError] = ValueError,
                           setup_s: float = 0.0) -> None:
    """Refuse, before any kernel is timed, a budget the trace's own shapes cannot fit: they are
    always timed once (the point of the run), so a budget below their floor
    (:func:`first_round_floor_s`) plus the ``spent_s`` the run's start-up already took would
    be overrun whatever the run did (``dse measure --budget 5s`` ran 15 s). The message names
    the floor, its parts and a budget that fits."""
    floor = first_round_floor_s(cold_timings, repeats, flush_s, setup_s)
    if spent_s + floor <= budget_s:
        return
    need = math.ceil(spent_s + floor)
    if cold_timings == 0 and floor == 0:  # whole models only: the start-up alone ran past
        raise error(f"--budget {duration_text(budget_s)}: starting took "
                    f"{duration_text(spent_s)}, before the first of the trace's "
                    f"configurations, which are always timed once; give --budget {need}s at "
                    f"the very least ({2 * need}s leaves room for timing them); nothing was "
                    "measured")
    setup = (f", {duration_text(setup_s)} of it to set up the flush" if setup_s > 0 else "")
    raise error(f"--budget {duration_text(budget_s)}: too short for the trace's own shapes, "
                f"which are always timed once: {cold_timings} cold timings of at least "
                f"{repeats} calls, each after a {flush_s * 1e3:.3g} ms cache flush, take at "
                f"least {duration_text(floor)}{setup}, after {duration_text(spent_s)} of "
                f"start-up; give --budget {need}s at the very least ({2 * need}s leaves room "
                "for the kernels' own time, sampling and later rounds); nothing was measured")


def check_first_round_pace(elapsed_s: float, done: int, total: int, room_s: float,
                           budget_s: float, spent_before_s: float,
                           error: type[ValueError] = ValueError) -> None:
    """Stop the trace's first round once its pace shows it cannot end near the budget: after
    ``done`` of its ``total`` configurations took ``elapsed_s``, the round is projected at
    ``elapsed_s / done * total``; when the start-up (``spent_before_s``) and that projection
    come to more than :data:`OVERRUN_TOLERANCE` times ``budget_s``, the run stops (nothing is
    written) naming the budget it needs and the ``room_s`` the budget had left for the round.
    Judged from the third configuration and a tenth of them on, so one slow first kernel does
    not decide it."""
    if done < max(3, total // 10) or done >= total or elapsed_s <= 0:
        return
    projected = elapsed_s / done * total
    if spent_before_s + projected <= OVERRUN_TOLERANCE * budget_s:
        return
    need = math.ceil(spent_before_s + projected)
    raise error(f"--budget {duration_text(budget_s)}: too short for the trace's own shapes, "
                f"which are always timed once: {done} of the {total} took "
                f"{duration_text(elapsed_s)}, so all would take about "
                f"{duration_text(projected)}, with {duration_text(max(0.0, room_s))} of the "
                f"budget left for them; give --budget {need}s at the very least ({2 * need}s "
                "leaves room for sampling and later rounds); stopped, nothing was written")
