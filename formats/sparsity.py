"""Sparsity values: validation and the canonical percent spelling used in format names."""

from __future__ import annotations

import math

from .base import FormatError


def check_sparsity(value: float, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FormatError(f"{what}: sparsity {value!r} is not a number")
    if not 0.0 <= value < 1.0:
        raise FormatError(f"{what}: sparsity {value:g} is outside [0, 1); write e.g. 0.875 "
                          "or 87.5%")


def percent(sparsity: float) -> str:
    """0.875 -> '87.5%'; enough digits to round-trip the levels people use (96.875%)."""
    return f"{round(sparsity * 100.0, 6):g}%"
