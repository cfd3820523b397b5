"""Sweeps: the evaluator over a grid of batch sizes, hardware fields and format parameters.

A ``--vary`` names one dimension and its values::

    batch=1,2,4,8                         a list
    hw.dram_bandwidth_bytes_per_s=1e12..8e12:8     8 points from 1e12 to 8e12, evenly spaced
    hw.tensor_flops_per_s.fp16=1e14..1e15:4:log    4 points, evenly spaced in log
    format.sparsity=0.5,0.75,0.875        the sparsity of every block and unstructured format
    format.block=4,8,16                   the block size of every block format

The sweep evaluates every combination; results carry one ``vary.NAME`` column per dimension,
and the number types they were priced in (``dtype``, ``weight_dtype``, ...).
When batch is varied they carry ``peak_memory_bytes`` and ``fits`` too (the memory model of
:mod:`dse.roofline.memory`: whether the design fits the spec's DRAM; NA without a capacity).
A format dimension must move at least one of the formats (N:M fixes its own sparsity, so
``format.sparsity`` on 2:4 alone is an error); rows of the formats it does not move (dense,
N:M) carry NaN in its column rather than a value that did not apply to them.

Sizes are checked before any work: a sweep of more than :data:`MAX_ROWS` result rows
(:data:`MAX_SIMULATED` with the simulator) is refused with its size, since it would be held in
memory whole (about 330 bytes a row); search the space with ``dse search`` (Optuna) instead.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

import accelerator_models
from accelerator_models import FIELDS
from formats import Block, Format, Unstructured
from formats import parse as parse_format
from workloads import MAX_BATCH, Trace

from ..calibrate.coverage import Coverage, coverage
from ..calibrate.expected import expected_layers
from ..calibrate.predictor import DevicePredictors
from ..roofline import DEFAULT_NUMERICS, Numerics, evaluate_layers
from ..roofline.energy import evaluate_layer_frames
from ..roofline.memory import activation_peak, memory_frame, unread_weight_bytes
from ..roofline.numerics import with_dtype_columns
from ..sim.fanout import SIMULATED_COLUMNS
from .grid import ROOFLINE, Evaluator, evaluate_grid
from .grid import Block as GridBlock

#: ``progress(done, total, unit)``: the command line's status line.
Progress = Callable[[int, int, str], None]

__all__ = ["MAX_ROWS", "MAX_SIMULATED", "SweepError", "Vary", "parse_vary", "sweep",
           "sweep_coverage", "sweep_size"]

#: The most result rows a sweep builds: about 0.7 GB of table in memory and half a minute of
#: roofline evaluation on one core.
MAX_ROWS = 2_000_000
#: The most designs a sweep simulates (the event-level simulator runs about 10^2 to 10^3
#: designs a second per worker).
MAX_SIMULATED = 100_000

FORMAT_PARAMS = ("sparsity", "block")
_RANGE = re.compile(r"^\s*([^.]+(?:\.[^.]+)*?)\s*\.\.\s*([^:]+)\s*:\s*(\d+)\s*(?::\s*(log))?\s*$")
_NUMERIC = {path for path in FIELDS if path not in ("sparse_tensor.patterns",
                                                     "block_sparse.supported")}


class SweepError(ValueError):
    """A --vary that cannot be used; the message names it and the fix."""


@dataclass(frozen=True)
class Vary:
    name: str  # batch, hw.FIELD, format.sparsity or format.block
    values: tuple

    @property
    def column(self) -> str:
        return f"vary.{self.name}"


def _number(text: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SweepError(f"--vary {spec}: {text.strip()!r} is not a number") from None
    if not math.isfinite(value):
        raise SweepError(f"--vary {spec}: {text.strip()!r} is not a finite number")
    return value


def _values(text: str, spec: str) -> list[float]:
    match = _RANGE.match(text)
    if match:
        low, high = _number(match.group(1), spec), _number(match.group(2), spec)
        digits, log = match.group(3), match.group(4) is not None
        steps = int(digits) if len(digits) <= 18 else MAX_ROWS + 1
        if steps > MAX_ROWS:
            raise SweepError(f"--vary {spec}: {digits} points is above the {MAX_ROWS:,} rows "
                             "a sweep takes; use fewer points or search the space with "
                             "`dse search`")
        if steps < 1 or low > high or (steps > 1 and low == high):
            raise SweepError(f"--vary {spec}: empty range; write LOW..HIGH:N with LOW < HIGH "
                             "and N >= 1, e.g. 1e12..8e12:8")
        if steps == 1:
            return [low]
        if log:
            if low <= 0:
                raise SweepError(f"--vary {spec}: a log range needs LOW > 0")
            grid = np.geomspace(low, high, steps)
        else:
            grid = np.linspace(low, high, steps)
        return [float(v) for v in grid]
    items = text.split(",")
    if not text.strip():
        raise SweepError(f"--vary {spec}: no values; write NAME=V1,V2,... or NAME=LOW..HIGH:N")
    if any(not t.strip() for t in items):  # a typo, not a request: dropped, it would hide one
        raise SweepError(f"--vary {spec}: an empty value between commas; write "
                         "NAME=V1,V2,... with single commas, none empty")
    return [_number(t, spec) for t in items]


def parse_vary(spec: str) -> Vary:
    name, sep, text = spec.partition("=")
    name = name.strip()
    if not sep:
        raise SweepError(f"--vary {spec!r}: write NAME=VALUES, e.g. batch=1,2,4 or "
                         "hw.dram_bandwidth_bytes_per_s=1e12..8e12:8")
    values = _values(text, spec)
    if name == "batch":
        if any(v < 1 or not float(v).is_integer() or v > MAX_BATCH for v in values):
            raise SweepError(f"--vary {spec}: batch sizes are whole numbers >= 1 and at most "
                             f"{MAX_BATCH:,}")
        return Vary(name, tuple(dict.fromkeys(int(v) for v in values)))
    if name.startswith("hw."):
        field = name[3:]
        if field not in FIELDS:
            near = [f for f in FIELDS if field.split(".")[-1] in f][:3]
            hint = f" (did you mean {', '.join(near)}?)" if near else ""
            raise SweepError(f"--vary {spec}: unknown hardware field {field!r}{hint}; fields: "
                             "see `dse hw show a100`")
        if field not in _NUMERIC:
            raise SweepError(f"--vary {spec}: {field} is not numeric; sweep it with --set in "
                             "separate runs")
        if field == "block_sparse.min_block_size":
            values = [int(round(v)) for v in values]
        for v in values:
            try:
                FIELDS[field](v, f"--vary {name}")
            except accelerator_models.SpecError as exc:
                raise SweepError(str(exc)) from None
        return Vary(name, tuple(dict.fromkeys(values)))
    if name.startswith("format."):
        param = name[7:]
        if param not in FORMAT_PARAMS:
            raise SweepError(f"--vary {spec}: unknown format parameter {param!r}; use "
                             "format.sparsity or format.block")
        if param == "sparsity" and any(not 0 <= v < 1 for v in values):
            raise SweepError(f"--vary {spec}: sparsities are fractions in [0, 1), e.g. 0.875")
        if param == "block" and any(not float(v).is_integer() or not 1 <= v <= 64
                                    for v in values):
            raise SweepError(f"--vary {spec}: block sizes are whole numbers from 1 to 64")
        cast = int if param == "block" else float
        return Vary(name, tuple(dict.fromkeys(cast(v) for v in values)))
    raise SweepError(f"--vary {spec}: unknown dimension {name!r}; use batch, hw.FIELD, "
                     "format.sparsity or format.block")


def _moves(param: str, fmt: Format) -> bool:
    """Whether the format parameter ``param`` changes ``fmt``."""
    return isinstance(fmt, Block) or (param == "sparsity" and isinstance(fmt, Unstructured))


def _check_format_dimensions(fmts: Sequence[Format], varies: Sequence[Vary]) -> None:
    for v in varies:
        param = v.name[7:]
        if not any(_moves(param, f) for f in fmts):
            takes = ("block and unstructured formats" if param == "sparsity"
                     else "block formats")
            given = ", ".join(f.name for f in fmts) or "none"
            raise SweepError(f"--vary {v.name}: no --format takes it (given: {given}); it "
                             f"moves {takes} only (N:M fixes its own sparsity, 1 - N/M); "
                             "list the N:M patterns with --format instead")


def sweep_size(traces: int, hardware: int, formats: Sequence[Format], varies: Sequence[Vary],
               batches: int, fusions: int) -> int:
    """The number of result rows of a sweep, known before any work."""
    distinct = len({f for f in formats if f.family != "dense"}) + 1  # dense always
    points = math.prod(len(v.values) for v in varies if v.name != "batch")
    by_batch = next((len(v.values) for v in varies if v.name == "batch"), batches)
    return traces * hardware * points * distinct * by_batch * fusions


def _formats(formats: Sequence[Format], params: dict[str, float]) -> list[Format]:
    """``formats`` with the swept parameters applied where they mean something."""
    out = []
    for fmt in formats:
        if isinstance(fmt, Block):
            fmt = Block(int(params.get("block", fmt.block)), params.get("sparsity", fmt.sparsity))
        elif isinstance(fmt, Unstructured):
            fmt = Unstructured(params.get("sparsity", fmt.sparsity))
        out.append(fmt)
    return out


def sweep(traces: Sequence[Trace], hardware: Sequence[str], overrides: Sequence[str],
          formats: Sequence[str | Format], varies: Sequence[Vary], batches: Sequence[int] = (1,),
          fusion: Sequence[str] = ("unfused",), scope: str = "gemm",
          numerics: Numerics = DEFAULT_NUMERICS,
          evaluator: Evaluator = ROOFLINE, progress: Progress | None = None) -> pd.DataFrame:
    """Every combination of the ``varies`` (on top of ``batches`` when batch is not varied).

    ``evaluator``: :class:`dse.explore.Roofline` (default) or :class:`dse.explore.Simulator`,
    whose latencies and speedups then replace the roofline's (see :mod:`dse.explore.grid`).
    ``progress(done, total, unit)`` hears of the hardware points built, then of the designs
    evaluated. The rows end with the number types they were priced in (``dtype``,
    ``vector_dtype``, ``csr_dtype``, ``index_bytes``, ``weight_dtype`` and, for a language
    model's rows, ``kv_dtype``: :func:`dse.design_columns.with_dtype_columns`; the simulator's
    columns follow them), as ``dse sweep --out`` writes them. Raises :class:`SweepError`
    before any work when the sweep is larger than :data:`MAX_ROWS` rows
    (:data:`MAX_SIMULATED` with the simulator).
    """
    names = [v.name for v in varies]
    if len(set(names)) != len(names):
        raise SweepError(f"--vary {names[0]}: each dimension once")
    by_kind: dict[str, list[Vary]] = {"batch": [], "hw": [], "format": []}
    for v in varies:
        by_kind[v.name.split(".")[0]].append(v)
    batch_list = list(by_kind["batch"][0].values) if by_kind["batch"] else list(batches)
    fmts = [parse_format(f) for f in formats]
    _check_format_dimensions(fmts, by_kind["format"])
    size = sweep_size(len(traces), len(hardware), fmts, varies, len(batch_list), len(fusion))
    limit = MAX_SIMULATED if evaluator.name == "simulate" else MAX_ROWS
    if size > limit:
        what = "designs to simulate" if evaluator.name == "simulate" else "rows"
        raise SweepError(f"--vary: this sweep has {size:,} {what}, above the {limit:,} a sweep "
                         "takes; vary fewer points, or search the space with `dse search` "
                         "(Optuna)")
    report = progress or (lambda done, total, unit: None)
    hw_grid = list(itertools.product(*(v.values for v in by_kind["hw"])))
    fmt_grid = list(itertools.product(*(v.values for v in by_kind["format"])))
    blocks, columns = [], []
    hw_total = len(hardware) * len(hw_grid)
    for h, base in enumerate(hardware):
        accelerators = []
        for i, values in enumerate(hw_grid):
            accelerators.append(accelerator_models.derive(
                base, {v.name[3:]: value for v, value in zip(by_kind["hw"], values,
                                                             strict=True)},
                overrides=overrides))
            if i % 1000 == 0:
                report(h * len(hw_grid) + i, hw_total, "hardware points")
        accelerators = tuple(accelerators)
        for fvalues in fmt_grid:
            params = {v.name[7:]: value for v, value in zip(by_kind["format"], fvalues,
                                                              strict=True)}
            for trace in traces:
                blocks.append(GridBlock(trace, accelerators, tuple(_formats(fmts, params))))
                columns.append((base, params))
    frames = _evaluate(blocks, batch_list, list(fusion), scope, numerics, evaluator, size, report)
    for frame, block, (base, params) in zip(frames, blocks, columns, strict=True):
        per_hw = len(frame) // (len(block.accelerators) * len(fusion))
        hw_index = np.tile(np.repeat(np.arange(len(block.accelerators)), per_hw), len(fusion))
        frame.insert(0, "base_hardware", accelerator_models.resolve_path(base).stem)
        for j, v in enumerate(by_kind["hw"]):
            frame[v.column] = np.array([vals[j] for vals in hw_grid])[hw_index]
        for v in by_kind["format"]:
            param = v.name[7:]
            moved = {f.name for f in block.formats if _moves(param, f)}
            frame[v.column] = np.where(frame["format"].isin(moved), params[param], np.nan)
        if by_kind["batch"]:
            frame[by_kind["batch"][0].column] = frame["batch"]
            _add_memory(frame, block, hw_index, scope, numerics)
        if block.trace.provenance.get("phase"):
            _add_language_model(frame, block.trace, numerics)
    out = pd.concat(frames, ignore_index=True)
    # What every row was priced in, as dse evaluate's and dse compare's results carry it: the
    # same table as ``dse sweep --out`` writes (a language model's rows name the KV dtype).
    out = with_dtype_columns(out, numerics, out["phase"].notna().tolist()
                             if "phase" in out else False)
    # The simulator's columns last: a simulated sweep's first columns are the roofline's.
    added = [c for c in SIMULATED_COLUMNS if c in out.columns]
    return out[[c for c in out.columns if c not in added] + added]


def sweep_coverage(traces: Sequence[Trace], hardware: Sequence[str], overrides: Sequence[str],
                   formats: Sequence[str | Format], varies: Sequence[Vary],
                   batches: Sequence[int] = (1,), scope: str = "gemm",
                   numerics: Numerics = DEFAULT_NUMERICS,
                   predictors: DevicePredictors | None = None) -> dict[str, Coverage]:
    """Per language-model step of a calibrated sweep (the same arguments as :func:`sweep`,
    with the predictors of its :class:`~dse.explore.Calibrated` evaluator): which of its GEMMs
    the expectation prices from shapes the predictors were trained on and which it
    extrapolates (:func:`dse.calibrate.coverage.coverage`), over every swept format and batch
    on each base hardware with ``overrides``. Which GEMMs are extrapolated depends only on
    their shapes and N, not on a swept hardware field; the shares of expected time are the
    base hardware's. Other traces have no entry (their one line is
    :func:`dse.calibrate.coverage.coverage_note`)."""
    language = [t for t in traces if t.provenance.get("phase")]
    if predictors is None or not language:
        return {}
    batch_list = next((list(v.values) for v in varies if v.name == "batch"), list(batches))
    fmts = [parse_format(f) for f in formats]
    by_format = [v for v in varies if v.name.startswith("format.")]
    swept = {f.name: f for values in itertools.product(*(v.values for v in by_format))
             for f in _formats(fmts, {v.name[7:]: x for v, x in zip(by_format, values,
                                                                    strict=True)})}
    bases = [accelerator_models.load(h, list(overrides)) for h in hardware]
    out = {}
    for trace in language:
        layers = evaluate_layers(trace, bases, list(swept.values()), batch_list,
                                 fusion="unfused", scope=scope, numerics=numerics)
        priced = expected_layers(layers, trace, predictors, numerics=numerics)
        out[trace.model] = coverage(priced, trace, predictors, numerics.dtype)
    return out


def _add_memory(frame: pd.DataFrame, block: GridBlock, hw_index: np.ndarray, scope: str,
                numerics: Numerics) -> None:
    """``peak_memory_bytes`` and ``fits`` (NA where the spec has no capacity), in place: what
    :func:`dse.roofline.memory.memory_frame` gives, in closed form over the swept rows (a
    sweep may hold millions). Weight storage is the rows' ``weight_bytes`` plus the dense
    weights of the ops outside the scope (the same for every format, batch and hardware point;
    taken once from ``memory_frame``); activations are the trace's live peak times the batch.
    A language model's step adds what :func:`dse.design_columns.language_model_columns` does:
    the KV cache at the context (times the batch) and the embedding table the trace leaves out.
    """
    trace, first = block.trace, block.accelerators[0]
    designs = evaluate_grid([GridBlock(trace, (first,), ("dense",))], [1], scope=scope,
                            numerics=numerics)[0]
    layers = evaluate_layer_frames(trace, [first], ["dense"], [1], ["unfused"], [scope],
                                   numerics)
    reference = memory_frame(designs, layers, trace, first, numerics)
    # An MoE step reads only the experts its tokens touch; all of them are resident.
    outside = float(reference["weight_storage_bytes"].iloc[0] - reference["weight_bytes"].iloc[0]
                    - unread_weight_bytes(reference, trace, numerics)[0])
    fusions = frame["fusion"].astype(str).to_numpy(dtype=object)
    per_sample = np.zeros(len(frame))
    for fusion in pd.unique(fusions):
        per_sample[fusions == fusion] = activation_peak(trace, fusion).dram_elems
    per_sample = per_sample * float(numerics.value_bytes)
    p = trace.provenance
    if p.get("phase"):  # a language model: its KV cache and untied embedding are resident too
        outside += (p["resident_weight_elems"] - trace.params) * float(numerics.value_bytes)
        per_sample = per_sample + p["kv_cache_elems"] * float(numerics.kv_value_bytes)
    peak = (frame["weight_bytes"].to_numpy(dtype=np.float64)
            + unread_weight_bytes(frame, trace, numerics) + outside
            + per_sample * frame["batch"].to_numpy(np.float64))
    capacity = np.array([np.nan if a.dram_capacity_bytes is None else a.dram_capacity_bytes
                         for a in block.accelerators])[hw_index]
    known = ~np.isnan(capacity)
    frame["peak_memory_bytes"] = peak
    frame["fits"] = pd.arrays.BooleanArray(peak <= np.where(known, capacity, np.inf),
                                           mask=~known)
    if p.get("phase"):  # the largest batch whose weights and KV cache at the context fit
        with np.errstate(invalid="ignore", divide="ignore"):
            largest = np.clip(np.floor((capacity - (peak - per_sample
                                                    * frame["batch"].to_numpy(np.float64)))
                                       / per_sample), 0, MAX_BATCH)
        frame["largest_batch_that_fits"] = pd.array(np.where(known, largest, 0)
                                                    .astype(np.int64), dtype="Int64")
        frame.loc[~known, "largest_batch_that_fits"] = pd.NA
        frame["max_batch"] = frame["largest_batch_that_fits"]


def _add_language_model(frame: pd.DataFrame, trace: Trace, numerics: Numerics) -> None:
    """A language-model step's columns, in place, as :func:`dse.design_columns
    .language_model_columns` gives them from the swept rows' latency (the simulated one with
    ``--evaluator simulate``): ``phase``, ``context``, ``tokens_per_s`` and ``time_per_token_s``
    (decode), ``ttft_s`` (prefill), ``kv_bytes_per_token``, ``kv_cache_bytes`` (the batch's)
    and ``params``; the memory fit is :func:`_add_memory`'s (a swept batch)."""
    p = trace.provenance
    decode = p["phase"] == "decode"
    latency = frame["latency_s"].to_numpy(dtype=np.float64)
    batch = frame["batch"].to_numpy(dtype=np.float64)
    nothing = np.full(len(frame), np.nan)
    kvb = float(numerics.kv_value_bytes)
    frame["phase"] = p["phase"]
    frame["context"] = p["context"]
    frame["tokens_per_s"] = batch / latency if decode else nothing
    frame["time_per_token_s"] = latency if decode else nothing
    frame["ttft_s"] = nothing if decode else latency
    frame["kv_bytes_per_token"] = p["kv_elems_per_token"] * kvb
    frame["kv_cache_bytes"] = batch * p["kv_cache_elems"] * kvb
    frame["params"] = p["params"]


def _evaluate(blocks: list[GridBlock], batches: list[int], fusion: list[str], scope: str,
              numerics: Numerics, evaluator: Evaluator, total: int,
              report: Callable[[int, int, str], None]) -> list[pd.DataFrame]:
    if evaluator.name == "simulate":  # one fan-out over every block; it reports its own progress
        return evaluate_grid(blocks, batches, fusion=fusion, scope=scope, numerics=numerics,
                             evaluator=evaluator)
    frames, done = [], 0
    report(0, total, "designs")
    for block in blocks:
        frames.extend(evaluate_grid([block], batches, fusion=fusion, scope=scope,
                                    numerics=numerics, evaluator=evaluator))
        done += len(frames[-1])
        report(done, total, "designs")
    return frames
