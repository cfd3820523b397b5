"""The calls ``import dse`` gives that join engines: the bound and, given a device's kernel
predictors, the calibrated expectation beside it, as the command line prints them.

* :func:`evaluate`: every design's bound (``dse evaluate``), with ``calibrated`` the
  expectation beside it (``dse evaluate --calibrated``);
* :func:`evaluate_layers`: every op of every design (``dse evaluate --per-layer``), with
  ``calibrated`` each op's expectation beside its bound;
* :func:`expected_ops`: every op of every design priced by kernel predictors, the rows the
  expectation sums;
* :func:`expectation_coverage`: for a language model, which of those GEMMs the predictors
  extrapolate (the "expectation extrapolated" line);
* :func:`simulate`: one design through the event-level simulator (``dse simulate``), with
  ``calibrated`` each op at its predicted kernel time (``dse simulate --calibrated``);
* :func:`dse.comparison.compare`: accelerators side by side (``dse compare``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

import pandas as pd

import accelerator_models
from accelerator_models import Accelerator
from formats import Format
from formats import parse as parse_format
from workloads import Trace, load_trace

from .calibrate.coverage import Coverage, coverage
from .calibrate.expected import expected_designs, expected_layers, op_configs
from .calibrate.predictor import DevicePredictors, load_predictors
from .roofline import DEFAULT_NUMERICS, EvaluationError, Numerics
from .roofline import evaluate as evaluate_bound
from .roofline import evaluate_layers as evaluate_layers_bound
from .sim import SimConfig, Simulation, SimulationError
from .sim import simulate as simulate_bound

__all__ = ["CalibratedSimulation", "Predictors", "evaluate", "evaluate_layers",
           "expectation_coverage", "expected_ops", "predictors", "simulate"]

#: Kernel predictors as the calls take them: a shipped name (``"h100-sxm"``,
#: ``"cpu-amd-epyc-2c"``), a file written by ``dse calibrate --out``, or loaded ones.
Predictors = str | DevicePredictors


def predictors(calibrated: Predictors) -> DevicePredictors:
    """The kernel predictors ``calibrated`` names, loaded (a bad name or file raises
    ``CalibrationError``'s one line)."""
    return calibrated if isinstance(calibrated, DevicePredictors) else load_predictors(calibrated)


def expected_ops(
    trace: Trace | str,
    hardware: Accelerator | str | Sequence[Accelerator | str],
    formats: Format | str | Sequence[Format | str],
    batches: int | Sequence[int],
    calibrated: Predictors,
    scope: str = "gemm",
    numerics: Numerics = DEFAULT_NUMERICS,
    backend: str = "exported",
) -> pd.DataFrame:
    """Every op of every design (dense included) priced by the kernel predictors
    ``calibrated``: the unfused ``evaluate_layers`` rows with ``expected_s`` (seconds),
    ``predictor``, ``kernel``, ``validated_rmspe`` and ``calibration`` (how each op was
    priced), as ``dse.calibrate.expected.expected_layers`` gives them. Kernels as they exist run
    one op at a time, so the expectation is unfused whatever fusion model the bound uses.

    ``backend``: ``exported`` prices the trace's ops as exported; ``torch`` prices the ops
    torch runs for each format on the predictors' device, as the fidelity figures do
    (:func:`dse.calibrate.validate.torch_ran`: fused attention when dense, the math attention
    path and only the linears torch converts when sparse, on the CPU the copies around each
    sparse linear). The bound stays the exported trace's."""
    trace = trace if isinstance(trace, Trace) else load_trace(trace)
    device = predictors(calibrated)
    if backend not in BACKENDS:
        raise EvaluationError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if backend == "exported":
        layers = evaluate_layers_bound(trace, hardware, formats, batches, fusion="unfused",
                                       scope=scope, numerics=numerics)
        return expected_layers(layers, trace, device)
    from .calibrate.validate import torch_ran

    given = [formats] if isinstance(formats, str | Format) else list(formats)
    # Dense first: every design's expected speedup is over the dense model torch runs (its
    # attention fused), not over the dense rows a sparse model's trace also evaluates.
    chosen = {"dense": "dense"}
    for fmt in given:
        chosen.setdefault(str(parse_format(fmt) if isinstance(fmt, str) else fmt), fmt)
    parts = []
    for name, fmt in chosen.items():
        ran = torch_ran(trace, name, device.device)
        layers = evaluate_layers_bound(ran, hardware, [fmt], batches, fusion="unfused",
                                       scope=scope, numerics=numerics)
        if name != "dense":
            layers = layers[layers["format"].astype(str) != "dense"].reset_index(drop=True)
        parts.append(expected_layers(layers, ran, device))
    return pd.concat(parts, ignore_index=True)


#: How the expectation reads a trace (:func:`expected_ops`): as exported, or as torch runs it.
BACKENDS = ("exported", "torch")


def expectation_coverage(
    trace: Trace | str,
    hardware: Accelerator | str | Sequence[Accelerator | str],
    formats: Format | str | Sequence[Format | str],
    batches: int | Sequence[int],
    calibrated: Predictors,
    scope: str = "gemm",
    numerics: Numerics = DEFAULT_NUMERICS,
) -> Coverage | None:
    """For a language-model step (a trace with a ``phase``): which of its GEMMs the
    expectation of these designs prices from shapes the predictors were trained on and which it
    extrapolates (:func:`dse.calibrate.coverage.coverage`, over the :func:`expected_ops` of
    ``hardware``, ``formats`` and ``batches``); None for any other trace. Its one line for the
    output is :func:`dse.calibrate.coverage.coverage_note`, the line ``dse evaluate``,
    ``compare``, ``report``, ``sweep`` and ``search`` print with ``--calibrated``."""
    trace = trace if isinstance(trace, Trace) else load_trace(trace)
    if not trace.provenance.get("phase"):
        return None
    device = predictors(calibrated)
    return coverage(expected_ops(trace, hardware, formats, batches, device, scope, numerics),
                    trace, device, numerics.dtype)


def evaluate(
    trace: Trace | str,
    hardware: Accelerator | str | Sequence[Accelerator | str],
    formats: Format | str | Sequence[Format | str],
    batches: int | Sequence[int] = 1,
    fusion: str | Sequence[str] = "unfused",
    scope: str | Sequence[str] = "gemm",
    numerics: Numerics = DEFAULT_NUMERICS,
    categorical: bool = False,
    calibrated: Predictors | None = None,
    backend: str = "exported",
) -> pd.DataFrame:
    """Speed-of-light latency of every design point, one row per design
    (:func:`dse.roofline.evaluate`), and with ``calibrated`` the expectation beside it
    (``backend``: the ops it prices, as :func:`expected_ops` reads them).

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
    scopes = [scope] if isinstance(scope, str) else list(scope)
    if len(scopes) != 1:
        raise EvaluationError("calibrated evaluation takes one scope; call evaluate once per "
                              "scope")
    return expected_designs(table, expected_ops(trace, hardware, formats, batches, calibrated,
                                                scopes[0], numerics, backend))


#: The columns the expectation adds to each op of :func:`evaluate_layers`.
EXPECTED_OP_COLUMNS = ("expected_s", "predictor", "kernel", "validated_rmspe", "calibration")


def evaluate_layers(
    trace: Trace | str,
    hardware: Accelerator | str | Sequence[Accelerator | str],
    formats: Format | str | Sequence[Format | str],
    batches: int | Sequence[int] = 1,
    fusion: str | Sequence[str] = "unfused",
    scope: str = "gemm",
    numerics: Numerics = DEFAULT_NUMERICS,
    cache: str = "cold",
    calibrated: Predictors | None = None,
) -> pd.DataFrame:
    """Per-op costs of every design point, one row per (design, op)
    (:func:`dse.roofline.evaluate_layers`; ``fusion`` may name several fusion models, whose
    rows follow one another), and with ``calibrated`` each op's expectation beside its bound:
    ``expected_s`` (seconds), ``predictor``, ``kernel``, ``validated_rmspe``,
    ``calibration`` and ``fraction_of_sol`` (the op's bound over its expectation), as
    ``dse evaluate --per-layer --calibrated`` prints them. Kernels are priced one op at a
    time, so every fusion model's row of an op carries the op's unfused expectation."""
    fusions = [fusion] if isinstance(fusion, str) else list(fusion)
    trace = trace if isinstance(trace, Trace) else load_trace(trace)
    table = pd.concat([evaluate_layers_bound(trace, hardware, formats, batches, fusion=f,
                                             scope=scope, numerics=numerics, cache=cache)
                       for f in fusions], ignore_index=True)
    if calibrated is None:
        return table
    ops = expected_ops(trace, hardware, formats, batches, calibrated, scope, numerics)
    keys = ["hardware", "format", "batch", "op"]
    right = ops[keys + list(EXPECTED_OP_COLUMNS)].drop_duplicates(keys)
    out = table.merge(right, on=keys, how="left")
    out["fraction_of_sol"] = (out["time_s"] / out["expected_s"]).where(out["expected_s"] > 0)
    return out


@dataclass(frozen=True, eq=False)
class CalibratedSimulation(Simulation):
    """A :class:`dse.sim.Simulation` whose ops ran at the kernel times predictors expect
    instead of at peak: its latency is an expectation, not a bound.

    ``expected``: one row per op of the design with its predicted kernel time
    (``expected_s``, seconds), the ``predictor`` that priced it with its ``validated_rmspe``,
    ``calibration`` (how an op without its family's kernel data was priced) and ``family``
    (the op family's key); ``predictors``: the loaded predictor set."""

    expected: pd.DataFrame | None = None
    predictors: DevicePredictors | None = None

    @property
    def expected_kernel_s(self) -> float:
        """Sum of the predicted kernel times (s): ``dse evaluate --calibrated``'s expected
        latency of the design, before overlap, tiles and launches."""
        return float(self.expected["expected_s"].sum())


def simulate(
    trace: Trace | str,
    hardware: Accelerator | str,
    fmt: Format | str = "dense",
    batch: int = 1,
    fusion: str = "unfused",
    scope: str = "gemm",
    config: SimConfig | None = None,
    numerics: Numerics = DEFAULT_NUMERICS,
    progress: Callable[[int, int], None] | None = None,
    op_time_s: dict[str, float] | None = None,
    calibrated: Predictors | None = None,
) -> Simulation:
    """Simulate one design (:func:`dse.sim.simulate`: per-op latencies, a timeline and the gap
    to the roofline by cause); ``dse simulate`` prints it.

    ``calibrated``: kernel predictors (as for :func:`evaluate`): each op runs at the kernel
    time they expect instead of at peak (its compute stretched so that launch plus compute
    takes that time, never shortened; traffic and tiles stay), and the result is a
    :class:`CalibratedSimulation`, an expectation, not a bound. Kernels are predicted one op
    at a time, so ``fusion`` must be ``"unfused"``; not with ``op_time_s``."""
    if calibrated is None:
        return simulate_bound(trace, hardware, fmt, batch, fusion, scope, config, numerics,
                              progress=progress, op_time_s=op_time_s)
    if fusion != "unfused":
        raise SimulationError(f"calibrated with fusion {fusion}: kernel predictors price "
                              "kernels one op at a time; use fusion unfused (the default)")
    if op_time_s is not None:
        raise SimulationError("calibrated and op_time_s both set kernel times: give one")
    device = predictors(calibrated)
    trace = trace if isinstance(trace, Trace) else load_trace(trace)
    acc = hardware if isinstance(hardware, Accelerator) else accelerator_models.load(hardware)
    fmt = parse_format(fmt) if isinstance(fmt, str) else fmt
    layers = evaluate_layers_bound(trace, acc, fmt, batch, fusion="unfused", scope=scope,
                                   numerics=numerics)
    layers = layers[layers["format"] == fmt.name].reset_index(drop=True)  # not dense's
    priced = expected_layers(layers, trace, device)
    priced["family"] = op_configs(layers, trace)["key"].to_numpy()
    result = simulate_bound(trace, acc, fmt, batch, fusion, scope, config, numerics,
                            progress=progress,
                            op_time_s=dict(zip(priced["op"], priced["expected_s"], strict=True)))
    return CalibratedSimulation(**{f.name: getattr(result, f.name) for f in fields(result)},
                                expected=priced, predictors=device)
