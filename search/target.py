"""What a search looks for: a target over a baseline format, and an objective to rank by.

A target ``<r>x_over_<format>`` (``1.3x_over_2:4``) holds for a design when its speedup over
dense is at least ``r`` times the baseline format's speedup on the same model, hardware and
batch, and its accuracy is no lower than the baseline's minus the allowed drop. For a language
model the accuracy is a degradation from dense (its perplexity increase), where lower is better:
the target then allows at most ``max_acc_drop`` more of it than the baseline has.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from accelerator_models import FIELDS
from dse.roofline.energy import ENERGY_COLUMNS
from formats import Format, FormatError
from formats import parse as parse_format

from .errors import TargetError

__all__ = ["DEFAULT_MAX_ACC_DROP", "DESIGN_MINIMIZABLE", "ENERGY_OBJECTIVES", "OBJECTIVES",
           "Objective", "Target", "TargetError", "make_objective", "parse_target"]

#: Percentage points of accuracy a design may lose against the target's baseline. One point is
#: about the single-seed noise of the shipped table (one digits image is 0.28 points).
DEFAULT_MAX_ACC_DROP = 1.0
#: Objectives minimizing a design column: least energy per inference, least energy x delay.
ENERGY_OBJECTIVES = {"energy": "energy_per_inference_j", "edp": "edp_js"}
OBJECTIVES = ("speedup", "accuracy", "pareto", *ENERGY_OBJECTIVES)
#: Design columns ``--minimize`` takes besides hardware fields (they vary per model and batch):
#: the numeric energy columns and the peak resident memory.
DESIGN_MINIMIZABLE = (*(c for c in ENERGY_COLUMNS if c not in ("power_capped", "energy_unpriced")),
                      "peak_memory_bytes")

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
    in speedup and accuracy), ``energy`` or ``edp`` (minimize ``energy_per_inference_j`` or
    ``edp_js``), or ``cost`` (minimize ``field``: a hardware field, or a design column of
    :data:`DESIGN_MINIMIZABLE`).
    """

    kind: str
    field: str | None = None

    @property
    def text(self) -> str:
        if self.kind == "cost":
            return f"minimize {self.field}"
        if self.kind in ENERGY_OBJECTIVES:
            return f"{self.kind} (least {ENERGY_OBJECTIVES[self.kind]})"
        return self.kind

    @property
    def column(self) -> str | None:
        """The minimized column of the results (``hw.FIELD`` for a hardware field), or None."""
        if self.kind in ENERGY_OBJECTIVES:
            return ENERGY_OBJECTIVES[self.kind]
        if self.kind == "cost":
            return self.field if self.field in DESIGN_MINIMIZABLE else f"hw.{self.field}"
        return None

    @property
    def per_row(self) -> bool:
        """Whether the minimized value differs per model and batch (a design column, not a
        hardware field): an Optuna trial then takes its geometric mean."""
        return self.column is not None and not self.column.startswith("hw.")

    @property
    def needs_energy(self) -> bool:
        return self.column in ENERGY_COLUMNS

    @property
    def needs_accuracy(self) -> bool:
        return self.kind in ("accuracy", "pareto")


def make_objective(objective: str | None, minimize: str | None) -> Objective:
    if minimize is not None:
        if objective not in (None, "speedup"):
            raise TargetError("--minimize and --objective exclude each other; the designs that "
                              "meet the target are ranked by the minimized field")
        if minimize in DESIGN_MINIMIZABLE:
            return Objective("cost", minimize)
        if minimize.startswith("hw."):
            minimize = minimize[3:]
        if minimize not in FIELDS:
            raise TargetError(f"--minimize {minimize}: unknown hardware field (e.g. "
                              "dram_bandwidth_bytes_per_s; `dse hw show a100` lists them) or "
                              "energy or memory column (e.g. energy_per_inference_j, avg_power_w, "
                              "peak_memory_bytes)")
        return Objective("cost", minimize)
    objective = objective or "speedup"
    if objective not in OBJECTIVES:
        raise TargetError(f"--objective {objective}: use one of {', '.join(OBJECTIVES)}")
    return Objective(objective)
