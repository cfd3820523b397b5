"""The calls ``import dse`` gives that join engines: the bound and, given a device's kernel
predictors, the calibrated expectation beside it, as the command line prints them.

* :func:`evaluate`: every design's bound with the columns ``dse evaluate --out`` writes
  (energy, memory, a language model's tokens/s and KV cache, the number types), with
  ``calibrated`` the expectation beside it (``dse evaluate --calibrated``);
* :func:`evaluate_layers`: every op of every design (``dse evaluate --per-layer --out``), with
  ``calibrated`` each op's expectation beside its bound;
* :func:`evaluation`: either of those tables with what the command prints beside it (the op
  rows the expectation sums, which GEMMs it extrapolates): an :class:`Evaluation`;
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

from .calibrate.coverage import Coverage, coverage, with_extrapolated_share
from .calibrate.expected import expected_designs, expected_layers, op_configs
from .calibrate.predictor import DevicePredictors, load_predictors
from .design_columns import (
    accelerators,
    design_table,
    with_dtype_columns,
    with_energy_and_memory,
    with_language_model_columns,
)
from .roofline import DEFAULT_NUMERICS, EvaluationError, Numerics
from .roofline import evaluate as evaluate_bound
from .roofline import evaluate_layers as evaluate_layers_bound
from .sim import SimConfig, Simulation, SimulationError
from .sim import simulate as simulate_bound

__all__ = ["CalibratedSimulation", "Evaluation", "Predictors", "evaluate", "evaluate_layers",
           "evaluation", "expectation_coverage", "expected_ops", "predictors", "simulate"]

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
        return expected_layers(layers, trace, device, numerics=numerics)
    from workloads.backend import torch_run_unknown

    from .calibrate.validate import torch_ran

    why = torch_run_unknown(trace)
    if why:
        raise EvaluationError(f"backend torch: {why}; what torch runs was measured for timm "
                              "models only: price it with backend='exported'")
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
        parts.append(expected_layers(layers, ran, device, numerics=numerics))
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


@dataclass(frozen=True, eq=False)
class Evaluation:
    """What :func:`evaluation` returns: what ``dse evaluate`` writes and prints for one trace.

    ``table``: the rows ``dse evaluate --out`` writes, column for column (one per design, or
    with ``per_layer`` one per design and op; see :func:`evaluate` and
    :func:`evaluate_layers`). ``expected``: the op rows the expectation sums
    (:func:`expected_ops`), None without predictors. ``coverage``: for a calibrated language
    model, which of its GEMMs the predictors extrapolate (:func:`expectation_coverage`),
    else None. ``predictors``: the loaded predictor set, None without one. ``numerics``: the
    number types every row was priced in."""

    table: pd.DataFrame
    trace: Trace
    numerics: Numerics = DEFAULT_NUMERICS
    expected: pd.DataFrame | None = None
    coverage: Coverage | None = None
    predictors: DevicePredictors | None = None


def evaluation(
    trace: Trace | str,
    hardware: Accelerator | str | Sequence[Accelerator | str],
    formats: Format | str | Sequence[Format | str],
    batches: int | Sequence[int] = 1,
    fusion: str | Sequence[str] = "unfused",
    scope: str | Sequence[str] = "gemm",
    numerics: Numerics = DEFAULT_NUMERICS,
    calibrated: Predictors | None = None,
    backend: str = "exported",
    per_layer: bool = False,
    categorical: bool = False,
    cache: str = "cold",
) -> Evaluation:
    """Evaluate ``trace`` as ``dse evaluate`` does: the table its ``--out`` file holds (the
    designs, or with ``per_layer`` their ops) and, with ``calibrated``, what it prints beside
    it (the op rows the expectation sums and, for a language model, its coverage). Arguments
    as for :func:`evaluate`; ``cache`` as for :func:`evaluate_layers` (per-layer only).

    Refused (``EvaluationError``, one line): ``per_layer`` or ``calibrated`` with several
    scopes, and ``per_layer`` with ``backend`` ``"torch"`` (the rows are the exported ops)."""
    trace = trace if isinstance(trace, Trace) else load_trace(trace)
    accs = accelerators(hardware)  # loaded once: the bound, energy and memory price the same
    format_list = [formats] if isinstance(formats, Format | str) else list(formats)
    batch_list = [batches] if isinstance(batches, int) else list(batches)
    fusions = [fusion] if isinstance(fusion, str) else list(fusion)
    scopes = [scope] if isinstance(scope, str) else list(scope)
    language = bool(trace.provenance.get("phase"))
    if per_layer and len(scopes) != 1:
        raise EvaluationError("per-layer evaluation takes one scope; evaluate once per scope")
    device = expected = covered = None
    if calibrated is not None:
        _check_calibrated(scopes, backend, per_layer)
        device = predictors(calibrated)
        expected = expected_ops(trace, accs, format_list, batch_list, device, scopes[0],
                                numerics, backend)
        if language:  # which GEMMs the predictors never timed (issue 24)
            covered = coverage(expected, trace, device, numerics.dtype)
    # Uncalibrated designs, labels as strings: every column at once, from arrays (the same
    # table, bit for bit; None where its join by position may not hold).
    table = (design_table(trace, accs, format_list, batch_list, fusions, scopes, numerics,
                          language)
             if not per_layer and expected is None and not categorical else None)
    if table is None:
        table = _assembled(trace, accs, format_list, batch_list, fusions, scopes, numerics,
                           categorical, cache, per_layer, language, expected, covered)
    return Evaluation(table=table, trace=trace, numerics=numerics, expected=expected,
                      coverage=covered, predictors=device)


def _assembled(trace: Trace, accs: list[Accelerator], format_list: list, batch_list: list,
               fusions: list[str], scopes: list[str], numerics: Numerics, categorical: bool,
               cache: str, per_layer: bool, language: bool, expected: pd.DataFrame | None,
               covered: Coverage | None) -> pd.DataFrame:
    """:func:`evaluation`'s table built from the frames, one set of columns after another:
    per layer, calibrated, with categorical labels, and wherever
    :func:`dse.design_columns.design_table` declines."""
    if per_layer:
        table = pd.concat([evaluate_layers_bound(trace, accs, format_list, batch_list,
                                                 fusion=f, scope=scopes[0], numerics=numerics,
                                                 cache=cache)
                           for f in fusions], ignore_index=True)
        if expected is not None:
            table = _with_expected_ops(table, expected)
    else:
        table = evaluate_bound(trace, accs, format_list, batch_list, fusion=fusions,
                               scope=scopes, numerics=numerics, categorical=categorical)
        if expected is not None:
            table = expected_designs(table, expected)
        table = with_energy_and_memory(table, trace, accs, format_list, batch_list, fusions,
                                       scopes, numerics)
        if language:  # tokens/s, time to first token, the KV cache and the memory fit with it
            table = with_language_model_columns(table, trace, numerics)
        if covered is not None:
            table = with_extrapolated_share(table, covered)
    # The number types every row was priced in, last, as every --out file names them.
    return with_dtype_columns(table, numerics, language)


def _check_calibrated(scopes: list[str], backend: str, per_layer: bool) -> None:
    if len(scopes) != 1:
        raise EvaluationError("calibrated evaluation takes one scope; call evaluate once per "
                              "scope")
    # Quantised weights and another KV-cache dtype are priced, said to be extrapolated
    # (dse.calibrate.expected: extrapolated_dtype and the calibration notes).
    if per_layer and backend != "exported":
        raise EvaluationError(f"backend {backend} per layer: the per-layer rows are the "
                              "exported trace's ops; use backend exported")


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
    """Every design point of ``trace``, one row per design, with the columns
    ``dse evaluate --out`` writes, in its order:

    * the bound (:func:`dse.roofline.evaluate`: ``latency_s``, ``dense_latency_s``,
      ``speedup``, ``bound``, traffic, fallbacks; alone, and faster, from there);
    * with ``calibrated`` the expectation beside it (``backend``: the ops it prices, as
      :func:`expected_ops` reads them): ``expected_latency_s``, ``expected_speedup``,
      ``fraction_of_sol``, ``predictor``, ``validated_rmspe`` and ``calibration`` (how each
      op was priced);
    * energy, power and memory (:func:`dse.design_columns.with_energy_and_memory`:
      ``energy_per_inference_j``, ``avg_power_w``, ``peak_memory_bytes``, ``fits``,
      ``largest_batch_that_fits``, ...);
    * for a language-model step (a trace with a ``phase``),
      :func:`dse.design_columns.language_model_columns`: ``phase``, ``context``,
      ``tokens_per_s``, ``time_per_token_s``, ``ttft_s``, ``kv_bytes_per_token``,
      ``kv_cache_bytes``, ``params``, ``max_batch`` (and calibrated, their expected side and
      ``expected_extrapolated_share``, the share of the expected GEMM time the predictors
      extrapolated);
    * last, the number types (:func:`dse.design_columns.with_dtype_columns`: ``dtype``,
      ``vector_dtype``, ``csr_dtype``, ``index_bytes``, ``weight_dtype`` and, for a language
      model, ``kv_dtype``).

    ``calibrated``: a device's kernel predictors: a shipped name (``"h100-sxm"``,
    ``"cpu-amd-epyc-2c"``), a file written by ``dse calibrate --out``, or loaded
    :class:`dse.calibrate.predictor.DevicePredictors`: the same numbers as
    ``dse evaluate --calibrated``. The expectation prices kernels as they exist, one op at a
    time, so it is unfused whatever ``fusion`` says; it is an expectation, never a bound.
    :func:`evaluation` gives the same table with the op rows the expectation sums."""
    return evaluation(trace, hardware, formats, batches, fusion, scope, numerics, calibrated,
                      backend, categorical=categorical).table


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
    """Per-op costs of every design point, one row per (design, op), with the columns
    ``dse evaluate --per-layer --out`` writes: the bound's (:func:`dse.roofline.evaluate_layers`;
    ``fusion`` may name several fusion models, whose rows follow one another), with
    ``calibrated`` each op's expectation beside it (``expected_s``, seconds, ``predictor``,
    ``kernel``, ``validated_rmspe``, ``calibration`` and ``fraction_of_sol``, the op's bound
    over its expectation), and last the number types (``dtype``, ``vector_dtype``,
    ``csr_dtype``, ``index_bytes``, ``weight_dtype``; ``kv_dtype`` for a language model).
    Kernels are priced one op at a time, so every fusion model's row of an op carries the
    op's unfused expectation."""
    return evaluation(trace, hardware, formats, batches, fusion, scope, numerics, calibrated,
                      per_layer=True, cache=cache).table


def _with_expected_ops(table: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """The op rows of ``table`` with their expectation from ``ops`` (:func:`expected_ops`)."""
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
    priced = expected_layers(layers, trace, device, numerics=numerics)
    priced["family"] = op_configs(layers, trace)["key"].to_numpy()
    result = simulate_bound(trace, acc, fmt, batch, fusion, scope, config, numerics,
                            progress=progress,
                            op_time_s=dict(zip(priced["op"], priced["expected_s"], strict=True)))
    return CalibratedSimulation(**{f.name: getattr(result, f.name) for f in fields(result)},
                                expected=priced, predictors=device)
