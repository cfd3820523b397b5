"""Printed tables: numbers formatted one way everywhere (one time unit per column, shares as
percentages, nothing printed as ``<NA>``)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["calibration_note", "energy_cell", "energy_notes", "expectation_line", "missing",
           "predictor_error", "predictors_used", "seconds_column", "share"]

_UNITS = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9), ("ps", 1e-12))


def seconds_column(values: Iterable[float], name: str) -> tuple[str, list[str]]:
    """A column of times in one unit, the one that fits the column's largest value, with the
    decimals that give its smallest nonzero value three significant digits (at most 6);
    returns ``("name (unit)", cells)``."""
    import numpy as np

    array = np.asarray(list(values), dtype=np.float64)
    finite = np.abs(array[np.isfinite(array)])
    top = float(finite.max()) if finite.size else 0.0
    unit, scale = next(((u, f) for u, f in _UNITS if top >= f), _UNITS[-1])
    nonzero = finite[finite > 0]
    low = float(nonzero.min()) / scale if nonzero.size else 1.0
    decimals = min(6, max(0, 2 - int(math.floor(math.log10(low)))))
    cells = [missing() if not math.isfinite(v) else f"{v / scale:.{decimals}f}" for v in array]
    return f"{name} ({unit})", cells


def energy_cell(value: float, text: str) -> str:
    """An energy or power figure as ``text`` formats it, or ``n/a`` where it is NaN: the design
    runs on a spec without energy figures (:func:`energy_notes` says so under the table)."""
    import pandas as pd

    return "n/a" if value is None or pd.isna(value) else text.format(value)


def energy_notes(frame: pd.DataFrame) -> list[str]:
    """The lines under a table of energies: which accelerators have no energy at all (their
    spec has no energy figure, e.g. one from ``dse hw probe``), and what the others' specs
    lack (there the energy is a lower bound)."""
    import re

    from ..roofline import NO_ENERGY_FIGURES

    if "energy_j" not in frame:
        return []
    unknown = frame["energy_j"].isna().to_numpy()
    lines = []
    if unknown.any():
        names = ", ".join(dict.fromkeys(frame.loc[unknown, "hardware"].astype(str)))
        lines.append(f"energy and power {NO_ENERGY_FIGURES} on {names}: add "
                     "dram_pj_per_byte, tensor_pj_per_flop.DTYPE, ... to its spec to price them")
    gaps = sorted({g.strip() for text in frame.loc[~unknown, "energy_unpriced"]
                   for g in re.split(r"[;,] ", str(text)) if g.strip() not in ("", "nan")})
    if gaps:
        lines.append("energy leaves out what the spec has no figure for (a lower bound there): "
                     + ", ".join(gaps))
    return lines


def share(value: float, digits: int = 1) -> str:
    """0.583 -> '58.3%'; NaN -> '-'."""
    import pandas as pd

    return missing() if value is None or pd.isna(value) else f"{100 * value:.{digits}f}%"


def missing() -> str:
    """What a table shows for a value that does not exist (never ``<NA>`` or ``nan``)."""
    return "-"


def predictor_error(name: str, rmspe: float | None) -> str:
    """How far a kernel predictor can be trusted, for the notes under calibrated results:
    its held-out RMSPE, or what priced the ops when the family had no kernel data."""
    import pandas as pd

    if name.endswith(":whole-model-fit"):
        return "no kernel data: constants fitted on measured whole models"
    if rmspe is None or pd.isna(rmspe):
        return "no kernel data: the bound plus the launch floor"
    return f"held-out RMSPE {rmspe:.0%}"


def expectation_line(predictors) -> str:
    """The line that heads every calibrated result: whose kernels priced the expectation, and
    that it is an expectation, not a bound."""
    return (f"expected: kernels as measured on {predictors.name} (reference "
            f"{predictors.reference_hw}), one op at a time (unfused) whatever --fusion; "
            "an expectation, not a bound")


def _notes(cells: Iterable) -> list[str]:
    """The distinct ``; ``-separated notes of ``calibration`` cells, sorted."""
    return sorted({n for cell in cells for n in str(cell).split("; ") if n and n != "nan"})


def calibration_note(expected: pd.DataFrame, predictors) -> str:
    """What the expectation is, the predictors used with their held-out errors, and every
    op priced without its own family's data; ``expected``: the op rows of
    ``dse.calibrate.expected.expected_layers`` (``dse evaluate`` and ``dse compare``)."""
    used = expected[expected["expected_s"] > 0]
    lines = [expectation_line(predictors)]
    for name, group in used.groupby("predictor"):
        err = predictor_error(name, group["validated_rmspe"].iloc[0])
        lines.append(f"  {name}: {len(group)} op rows, {err}")
    lines += [f"  note: {n}" for n in _notes(used["calibration"])]
    return "\n".join(lines)


def predictors_used(results: pd.DataFrame, predictors) -> list[str]:
    """The predictors that priced ``results`` (design rows of ``dse.explore.Calibrated``:
    ``predictors`` and ``calibration`` columns, ``; ``-separated) with their held-out errors,
    and every op family priced without its own data (``dse search`` and ``dse sweep``)."""
    import pandas as pd

    errors = []
    for name in _notes(pd.unique(results["predictors"].astype(object))):
        parts = name.split(":")
        family = predictors.families.get(parts[1]) if len(parts) == 3 else None
        rmspe = family.validated.get("rmspe") if family is not None else None
        errors.append(f"{name} ({predictor_error(name, rmspe)})")
    notes = _notes(pd.unique(results["calibration"].astype(object)))
    return ["  predictors: " + ", ".join(errors)] + [f"  note: {n}" for n in notes]
