"""The bound beside the expectation: how a calibrated chart's frame holds two rows a design
(``estimate`` ``bound`` and ``expected``), and the marks, legend words and notes that tell the two
apart in every chart (the bound solid with circles, the expectation dashed with triangles).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import altair as alt
import numpy as np
import pandas as pd

from .design import as_text

__all__ = [
    "ESTIMATES",
    "estimate_channels",
    "estimate_words",
    "expectation_note",
    "expected_devices",
    "expected_tooltip",
    "predictor_devices",
    "with_estimates",
]

# --- the bound beside the expectation (calibrated results) --------------------------------------

#: The two estimates a calibrated chart draws, in legend order, with their marks: the bound
#: solid with circles, the expectation dashed with triangles, in every chart.
ESTIMATES = ("bound", "expected")
_ESTIMATE_SHAPES = {"bound": "circle", "expected": "triangle-down"}
_ESTIMATE_DASHES = {"bound": [1, 0], "expected": [5, 3]}
#: Columns a calibrated design row carries beside its expected latency and speedup.
_EXPECTED_NOTES = ("fraction_of_sol", "validated_rmspe", "calibration")


def predictor_devices(frame: pd.DataFrame) -> np.ndarray:
    """Per row, the predictor sets (devices) that priced its expectation, from ``predictor``
    (``dse evaluate``: ``"h100-sxm:nm:fraction 80%, ..."``) or ``predictors`` (a search or
    sweep: ``"h100-sxm:gemm:fraction; ..."``); '' where neither says."""
    column = next((c for c in ("predictor", "predictors", "expected_by") if c in frame), None)
    if column is None:
        return np.full(len(frame), "", dtype=object)
    codes, cells = pd.factorize(frame[column].astype(object), use_na_sentinel=False)
    text = [", ".join(sorted({p.split(":")[0] for p in re.split(r"[;,] ", str(c)) if ":" in p}))
            or ("" if column != "expected_by" or pd.isna(c) else str(c)) for c in cells]
    return np.array(text, dtype=object)[codes]


def with_estimates(out: pd.DataFrame, frame: pd.DataFrame, values: Sequence[str],
                    after: str) -> pd.DataFrame:
    """``out`` (one row per row of ``frame``, in its order) as two rows a design when
    ``frame`` carries the expectation (``expected_speedup``): ``estimate`` ``bound`` (each of
    ``values`` the bound's) then ``expected`` (each ``expected_<value>``), both with
    ``bound_<value>`` and ``expected_<value>`` so either row can draw the other, and
    ``expected_by`` (the predictor sets), ``fraction_of_sol``, ``validated_rmspe`` and
    ``calibration`` where ``frame`` has them; ``estimate`` goes after column ``after``. A
    frame without the expectation gives ``out`` as it is."""
    if "expected_speedup" not in frame.columns:
        return out
    wide = out.reset_index(drop=True)
    for value in values:
        wide[f"bound_{value}"] = wide[value].to_numpy(dtype=np.float64)
        wide[f"expected_{value}"] = frame[f"expected_{value}"].to_numpy(dtype=np.float64)
    wide["expected_by"] = predictor_devices(frame)
    for column in _EXPECTED_NOTES:
        if column in frame.columns:
            wide[column] = (as_text(frame[column]).to_numpy() if column == "calibration"
                            else frame[column].to_numpy(dtype=np.float64))
    bound = wide.assign(estimate="bound")
    exp = wide.assign(estimate="expected", **{v: wide[f"expected_{v}"] for v in values})
    both = pd.concat([bound, exp], ignore_index=True)
    both.insert(both.columns.get_loc(after) + 1, "estimate", both.pop("estimate"))
    return both


def expected_devices(data: pd.DataFrame) -> str:
    """The predictor sets (devices) of the expected rows of ``data``, e.g. ``h100-sxm``."""
    rows = data[data["estimate"] == "expected"] if "estimate" in data else data
    return ", ".join(sorted({d for text in predictor_devices(rows) for d in str(text).split(", ")
                             if d}))


def estimate_words(data: pd.DataFrame) -> dict[str, str]:
    """Legend words of the two estimates: the bound is the speed of light; the expectation
    names its predictors and says it is not a bound."""
    device = expected_devices(data)
    return {"bound": "bound: speed of light",
            "expected": f"expected: {device} predictors (not a bound)" if device
            else "expected (not a bound)"}


def estimate_channels(data: pd.DataFrame, title: str, bound_shape: str = "circle"
                       ) -> tuple[alt.Shape, alt.StrokeDash]:
    """Shape and stroke-dash encodings of ``estimate`` with one legend naming both: circles
    (``bound_shape``: ``square`` where the bound is a bar) and solid lines the bound,
    triangles and dashed lines the expectation."""
    words = estimate_words(data)
    legend = alt.Legend(labelExpr=" : ".join(
        f"datum.value == '{e}' ? {json.dumps(words[e])}" for e in ESTIMATES)
        + " : datum.value", symbolOpacity=1, labelLimit=360)
    shape = alt.Shape("estimate:N", title=title, sort=list(ESTIMATES), legend=legend,
                      scale=alt.Scale(domain=list(ESTIMATES), range=[
                          bound_shape if e == "bound" else _ESTIMATE_SHAPES[e]
                          for e in ESTIMATES]))
    dash = alt.StrokeDash("estimate:N", title=title, sort=list(ESTIMATES), legend=legend,
                          scale=alt.Scale(domain=list(ESTIMATES),
                                          range=[_ESTIMATE_DASHES[e] for e in ESTIMATES]))
    return shape, dash


def expected_tooltip() -> list:
    return [alt.Tooltip("estimate:N", title="estimate"),
            alt.Tooltip("expected_by:N", title="expected by predictors"),
            alt.Tooltip("fraction_of_sol:Q", title="fraction of the speed of light",
                        format=".3f"),
            alt.Tooltip("validated_rmspe:Q", title="held-out RMSPE", format=".0%"),
            alt.Tooltip("calibration:N", title="priced how")]


def expectation_note(data: pd.DataFrame, marks: str) -> str:
    """The subtitle line of a calibrated chart: how the expectation is drawn (``marks``) and
    that it is one, not a bound."""
    device = expected_devices(data)
    return (f"{marks}: expected" + (f", from the kernel predictors {device}" if device else "")
            + " (kernels one op at a time, unfused): an expectation, not a bound")
