"""The calls ``import dse`` gives that join engines: :func:`evaluate` prices designs by the
bound and, given a device's predictors, the calibrated expectation beside it, as
``dse evaluate --calibrated`` prints them."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from accelerator_models import Accelerator
from formats import Format
from workloads import Trace, load_trace

from .roofline import DEFAULT_NUMERICS, EvaluationError, Numerics, evaluate_layers
from .roofline import evaluate as evaluate_bound

__all__ = ["evaluate"]


def evaluate(
    trace: Trace | str,
    hardware: Accelerator | str | Sequence[Accelerator | str],
    formats: Format | str | Sequence[Format | str],
    batches: int | Sequence[int] = 1,
    fusion: str | Sequence[str] = "unfused",
    scope: str | Sequence[str] = "gemm",
    numerics: Numerics = DEFAULT_NUMERICS,
    categorical: bool = False,
    calibrated=None,
) -> pd.DataFrame:
    """Speed-of-light latency of every design point, one row per design
    (:func:`dse.roofline.evaluate`), and with ``calibrated`` the expectation beside it.

    ``calibrated``: a device's kernel predictors: a shipped name (``"h100-sxm"``,
    ``"cpu-amd-epyc-2c"``), a file written by ``dse calibrate --out``, or loaded
    :class:`dse.calibrate.predictor.DevicePredictors`. Adds ``expected_latency_s``,
    ``expected_speedup``, ``fraction_of_sol``, ``predictor``, ``validated_rmspe`` and
    ``calibration`` (how each op was priced): the same numbers as
    ``dse evaluate --calibrated``. The expectation prices kernels as they exist, one op at a
    time, so it is unfused whatever ``fusion`` says; it is an expectation, never a bound."""
    table = evaluate_bound(trace, hardware, formats, batches, fusion=fusion, scope=scope,
                           numerics=numerics, categorical=categorical)
    if calibrated is None:
        return table
    from .calibrate.expected import expected_designs, expected_layers
    from .calibrate.predictor import DevicePredictors, load_predictors

    scopes = [scope] if isinstance(scope, str) else list(scope)
    if len(scopes) != 1:
        raise EvaluationError("calibrated evaluation takes one scope; call evaluate once per "
                              "scope")
    predictors = calibrated if isinstance(calibrated, DevicePredictors) \
        else load_predictors(calibrated)
    trace = trace if isinstance(trace, Trace) else load_trace(trace)
    layers = evaluate_layers(trace, hardware, formats, batches, fusion="unfused",
                             scope=scopes[0], numerics=numerics)
    return expected_designs(table, expected_layers(layers, trace, predictors))
