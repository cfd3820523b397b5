"""What a search looks for: a target over a baseline format, and an objective to rank by.

A target ``<r>x_over_<format>`` (``1.3x_over_2:4``) holds for a design when its speedup over
dense is at least ``r`` times the baseline format's speedup on the same model, hardware and
batch, and its accuracy is no lower than the baseline's minus the allowed drop.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from accelerator_models import FIELDS
from formats import Format, FormatError
from formats import parse as parse_format

from .errors import TargetError

__all__ = ["DEFAULT_MAX_ACC_DROP", "OBJECTIVES", "Objective", "Target", "TargetError",
           "parse_target"]

#: Percentage points of accuracy a design may lose against the target's baseline. One point is
#: about the single-seed noise of the shipped table (one digits image is 0.28 points).
DEFAULT_MAX_ACC_DROP = 1.0
OBJECTIVES = ("speedup", "accuracy", "pareto")

_TARGET = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*x_over_(.+)$", re.IGNORECASE)


@dataclass(frozen=True)
class Target:
    ratio: float
    baseline: Format
    max_acc_drop: float

    @property
    def text(self) -> str:
        return f"{self.ratio:g}x_over_{self.baseline.name}"


def parse_target(text: str, max_acc_drop: float = DEFAULT_MAX_ACC_DROP) -> Target:
    """Parse ``<r>x_over_<format>``: ``r`` > 0, the format in `dse`'s grammar (dense too)."""
    match = _TARGET.match(text)
    if not match:
        raise TargetError(f"target {text!r} is not <r>x_over_<format>; write e.g. "
                          "1.3x_over_2:4 (a speedup 1.3 times 2:4's)")
    ratio = float(match.group(1))
    if not math.isfinite(ratio) or ratio <= 0:
        raise TargetError(f"target {text!r}: the ratio must be a positive number, e.g. 1.3")
    try:
        baseline = parse_format(match.group(2))
    except FormatError as exc:
        raise TargetError(f"target {text!r}: baseline {exc}") from None
    if not math.isfinite(max_acc_drop) or max_acc_drop < 0:
        raise TargetError(f"--max-acc-drop {max_acc_drop:g}: give a number of percentage "
                          "points >= 0, e.g. 1.0")
    return Target(ratio, baseline, max_acc_drop)


@dataclass(frozen=True)
class Objective:
    """What ranks the designs that meet the target (all designs, without a target).

    ``kind`` is ``speedup`` or ``accuracy`` (maximized), ``pareto`` (the non-dominated designs
    in speedup and accuracy), or ``cost`` (minimize the hardware field ``field``).
    """

    kind: str
    field: str | None = None

    @property
    def text(self) -> str:
        return f"minimize {self.field}" if self.kind == "cost" else self.kind

    @property
    def column(self) -> str | None:
        return f"hw.{self.field}" if self.kind == "cost" else None

    @property
    def needs_accuracy(self) -> bool:
        return self.kind in ("accuracy", "pareto")


def make_objective(objective: str | None, minimize: str | None) -> Objective:
    if minimize is not None:
        if objective not in (None, "speedup"):
            raise TargetError("--minimize and --objective exclude each other; the designs that "
                              "meet the target are ranked by the minimized field")
        if minimize.startswith("hw."):
            minimize = minimize[3:]
        if minimize not in FIELDS:
            raise TargetError(f"--minimize {minimize}: unknown hardware field; e.g. "
                              "dram_bandwidth_bytes_per_s (fields: `dse hw show a100`)")
        return Objective("cost", minimize)
    objective = objective or "speedup"
    if objective not in OBJECTIVES:
        raise TargetError(f"--objective {objective}: use one of {', '.join(OBJECTIVES)}")
    return Objective(objective)
