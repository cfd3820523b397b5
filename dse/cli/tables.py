"""Printed tables: numbers formatted one way everywhere (one time unit per column, shares as
percentages, nothing printed as ``<NA>``)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

__all__ = ["missing", "predictor_error", "seconds_column", "share"]

_UNITS = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9), ("ps", 1e-12))


def seconds_column(values: Iterable[float], name: str) -> tuple[str, list[str]]:
    """A column of times in one unit, the one that fits the column's largest value, with the
    decimals that give its smallest nonzero value three significant digits (at most 6);
    returns ``("name (unit)", cells)``."""
    array = np.asarray(list(values), dtype=np.float64)
    finite = np.abs(array[np.isfinite(array)])
    top = float(finite.max()) if finite.size else 0.0
    unit, scale = next(((u, f) for u, f in _UNITS if top >= f), _UNITS[-1])
    nonzero = finite[finite > 0]
    low = float(nonzero.min()) / scale if nonzero.size else 1.0
    decimals = min(6, max(0, 2 - int(math.floor(math.log10(low)))))
    cells = [missing() if not math.isfinite(v) else f"{v / scale:.{decimals}f}" for v in array]
    return f"{name} ({unit})", cells


def share(value: float, digits: int = 1) -> str:
    """0.583 -> '58.3%'; NaN -> '-'."""
    return missing() if value is None or pd.isna(value) else f"{100 * value:.{digits}f}%"


def missing() -> str:
    """What a table shows for a value that does not exist (never ``<NA>`` or ``nan``)."""
    return "-"


def predictor_error(name: str, rmspe: float | None) -> str:
    """How far a kernel predictor can be trusted, for the notes under calibrated results:
    its held-out RMSPE, or what priced the ops when the family had no kernel data."""
    if name.endswith(":whole-model-fit"):
        return "no kernel data: constants fitted on measured whole models"
    if rmspe is None or pd.isna(rmspe):
        return "no kernel data: the bound plus the launch floor"
    return f"held-out RMSPE {rmspe:.0%}"
