"""Traces: one row per op, topologically ordered, every batch-dependent quantity per sample.

A trace file is JSON::

    {"schema": "dse-trace/1", "model": "...", "input_shape": [3, 224, 224],
     "provenance": {"source": "...", ...}, "ops": [{<one record per op>}, ...]}

Op columns (``COLUMNS``): ``name`` (stable module path, unique), ``kind`` (``KINDS``), GEMM dims
``m``, ``k`` (per group) and ``n`` (per sample), ``groups``, ``weight_elems`` (parameter
elements the op reads: weights and bias, not batch-scaled; a prunable op's first
``groups * m * k`` are its prunable weights, or ``E * groups * m * k`` for an MoE expert linear
that holds ``E`` experts' copies of that GEMM weight: the provenance's
``routed_weights_by_op`` names such ops and ``E`` as ``sets``; see :mod:`workloads.llm` and
``dse.roofline.pricing.weight_sets``; the rest, a bias, stays dense),
``input_elems`` and ``output_elems`` (activation elements read and written, per sample),
``vector_flops`` (per sample), ``prunable`` and ``producers`` (names of the ops whose outputs this
op reads; ``"input"`` is the model input). A GEMM computes ``Y[M x N] = W[M x K] . X[K x N]``
``groups`` times; for an activation-by-activation matmul (attention) ``W`` is an activation.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "COLUMNS",
    "MAX_BATCH",
    "MAX_COUNT",
    "MAX_PER_SAMPLE",
    "OPTIONAL",
    "GEMM_KINDS",
    "KINDS",
    "MODEL_INPUT",
    "PER_SAMPLE",
    "SCHEMA",
    "Trace",
    "TraceError",
    "norm_width",
]

SCHEMA = "dse-trace/1"
MODEL_INPUT = "input"

#: Op kinds. GEMM kinds carry M, K, N; the others carry zeros there.
GEMM_KINDS = ("conv", "linear", "matmul")
KINDS = GEMM_KINDS + ("norm", "softmax", "activation", "elementwise", "pool", "reduce", "other")



def norm_width(name: str, weight_elems: int) -> int:
    """The elements each output of a norm op is normalised over (its affine width C), from what
    a trace records: an exported layer or group norm's weight holds gamma and beta (2C); an RMS
    norm (the language-model traces' ``input_layernorm``, ``model.norm``) holds gamma only (C);
    a batch norm normalises nothing at inference (0), nor does a norm without weights (0). A
    group norm's C is its channel count, not its reduced width (C/G x H x W), which a trace
    does not hold."""
    if weight_elems <= 0 or "batch_norm" in name:
        return 0
    if "layer_norm" in name or "group_norm" in name:
        return int(weight_elems) // 2
    return int(weight_elems)


#: Column -> python type of its values.
COLUMNS: dict[str, type] = {
    "name": str,
    "kind": str,
    "m": int,
    "k": int,
    "n": int,
    "groups": int,
    "weight_elems": int,
    "input_elems": int,
    "output_elems": int,
    "vector_flops": float,
    "prunable": bool,
    "producers": list,
}

#: Optional columns. ``density``: the nonzero fraction of a prunable op's weights in a pruned
#: checkpoint (``dse workloads export --sparsity-from``); absent (NaN) where unknown.
#: ``input_read_share``: the share of the rows of X that the op's sparse kernel reads under the
#: checkpoint's real masks (columns of W with a kept weight, :func:`formats.read_share`); absent
#: (NaN) where unknown, and the evaluator then takes the format's expected share.
#: ``kernel_size`` and ``stride``: a convolution's window side and stride (the largest side and
#: stride over its spatial axes, for a non-square one), which its GEMM view hides (``k`` is
#: C_in / groups x kernel area); :mod:`workloads.export` records both for every convolution.
#: Only conv ops carry them; absent, they are 0, "not recorded" (a trace exported before they
#: were, or written by hand), and the kernel predictors see the convolution's window as
#: unknown (:data:`dse.calibrate.features.FEATURES`), as they do a benchmarked one without it.
OPTIONAL: dict[str, type] = {"density": float, "input_read_share": float,
                             "kernel_size": int, "stride": int}

#: Optional integer columns: 0 where absent, written only where recorded (above 0).
_OPTIONAL_INTS = tuple(c for c, t in OPTIONAL.items() if t is int)

#: Columns that scale with the batch size (stored per sample).
PER_SAMPLE = ("n", "input_elems", "output_elems", "vector_flops")

# Supported ranges: chosen so that no intermediate overflows and every count stays exact.
#: The largest batch size: ``MAX_PER_SAMPLE * MAX_BATCH = 2**53``, so every batch-scaled
#: element count is an exact integer in both int64 and float64.
MAX_BATCH = 2**24
#: The largest per-sample count of a batch-scaled integer column (``n``, ``input_elems``,
#: ``output_elems``) and of the model input (``prod(input_shape)``): 2**29, 128x the largest
#: in the shipped traces.
MAX_PER_SAMPLE = 2**53 // MAX_BATCH
#: The largest per-op (and whole-model) weight elements, ``groups * m * k``, dense FLOPs per
#: sample (``2 * groups * m * k * n``) and ``vector_flops`` per sample: 2**53, exact in
#: float64. Batch-scaled FLOPs are float64 (below 2**77, never infinite); the shipped traces
#: peak at 2**35 FLOPs per sample.
MAX_COUNT = 2**53


class TraceError(ValueError):
    """A trace that cannot be used; the message names the file, the op and the column."""


def _check_value(column: str, value: Any, where: str) -> Any:
    expected = COLUMNS[column]
    if expected is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise TraceError(f"{where}: column {column!r} must be an integer, got {value!r}")
        if value < 0:
            raise TraceError(f"{where}: column {column!r} is negative ({value}); "
                             "dimensions and element counts are >= 0")
        _check_range(column, value, where)
        return value
    if expected is float:
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value) or value < 0:
            raise TraceError(f"{where}: column {column!r} must be a finite number >= 0, "
                             f"got {value!r}")
        _check_range(column, value, where)
        return float(value)
    if expected is bool:
        if not isinstance(value, bool):
            raise TraceError(f"{where}: column {column!r} must be true or false, got {value!r}")
        return value
    if expected is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise TraceError(f"{where}: column {column!r} must be a list of op names")
        return value
    if not isinstance(value, str) or not value:
        raise TraceError(f"{where}: column {column!r} must be a non-empty string")
    return value


def _power(limit: int) -> str:
    return f"2**{limit.bit_length() - 1} ({limit:,})"


def _check_range(column: str, value: float, where: str) -> None:
    per_sample = column in PER_SAMPLE and column != "vector_flops"
    limit = MAX_PER_SAMPLE if per_sample else MAX_COUNT
    if value > limit:
        why = (f"per sample, so that it times the largest batch ({MAX_BATCH:,}) stays exact"
               if per_sample else "so that it stays exact in float64")
        raise TraceError(f"{where}: column {column!r} is {value:.6g}, above the supported "
                         f"{_power(limit)} {why}")


# eq=False: identity hashing, so evaluations can cache prices per trace object.
@dataclass(frozen=True, eq=False)
class Trace:
    """A validated per-sample trace. Build with :meth:`from_records` or :func:`load_trace`."""

    model: str
    input_shape: tuple[int, ...]
    ops: pd.DataFrame
    provenance: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_records(
        cls,
        model: str,
        input_shape: Sequence[int],
        records: Sequence[Mapping[str, Any]],
        provenance: Mapping[str, Any] | None = None,
        where: str | None = None,
    ) -> Trace:
        """Validate op records and derive the fusion bookkeeping columns."""
        where = where or model
        if not records:
            raise TraceError(f"{where}: the trace has no ops")
        shape = tuple(input_shape)
        if not shape or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0
                                for d in shape):
            raise TraceError(f"{where}: input_shape must be a list of positive integers "
                             f"(per sample, e.g. [3, 224, 224]), got {list(input_shape)!r}")
        model_input_elems = math.prod(shape)
        if model_input_elems > MAX_PER_SAMPLE:
            raise TraceError(f"{where}: input_shape {list(shape)} has {model_input_elems:.6g} "
                             f"elements, above the supported {_power(MAX_PER_SAMPLE)} per "
                             f"sample (times the largest batch, {MAX_BATCH:,}, it must stay "
                             "exact)")
        rows = []
        seen: set[str] = set()
        for index, record in enumerate(records):
            if not isinstance(record, Mapping):
                raise TraceError(f"{where}: op #{index} is not an object")
            label = f"{where}: op #{index} ({record.get('name', '?')!s})"
            missing = [c for c in COLUMNS if c not in record]
            if missing:
                raise TraceError(f"{label}: missing column {missing[0]!r}; "
                                 f"every op needs {', '.join(COLUMNS)}")
            unknown = sorted(set(record) - set(COLUMNS) - set(OPTIONAL))
            if unknown:
                raise TraceError(f"{label}: unknown column {unknown[0]!r}")
            row = {c: _check_value(c, record[c], label) for c in COLUMNS}
            _check_op(row, label, seen, model_input_elems)
            row["density"] = _check_density(record.get("density"), row, label)
            row["input_read_share"] = _check_density(record.get("input_read_share"), row, label,
                                                     "input_read_share")
            for column in _OPTIONAL_INTS:
                row[column] = _check_window(record.get(column), row, label, column)
            seen.add(row["name"])
            rows.append(row)
        for column, total in (("weight_elems", sum(r["weight_elems"] for r in rows)),
                              ("vector_flops", sum(r["vector_flops"] for r in rows)),
                              ("dense FLOPs (2*groups*m*k*n)",
                               sum(2 * r["groups"] * r["m"] * r["k"] * r["n"] for r in rows))):
            if total > MAX_COUNT:
                raise TraceError(f"{where}: the model's total {column} per sample is "
                                 f"{total:.6g}, above the supported {_power(MAX_COUNT)}")
        ops = pd.DataFrame(rows, columns=[*COLUMNS, *OPTIONAL])
        ops = ops.astype({c: "int64" for c, t in COLUMNS.items() if t is int}
                         | {"vector_flops": "float64", "prunable": "bool",
                            "density": "float64", "input_read_share": "float64"}
                         | {c: "int64" for c in _OPTIONAL_INTS})
        consumed = {p for producers in ops["producers"] for p in producers}
        reads_input = ops["producers"].map(lambda ps: MODEL_INPUT in ps)
        # Fusion bookkeeping: only model inputs and outputs cross DRAM in the fused models.
        ops["model_input_elems"] = np.where(
            reads_input, np.minimum(ops["input_elems"], model_input_elems), 0).astype("int64")
        ops["is_output"] = ~ops["name"].isin(consumed)
        ops["model_output_elems"] = np.where(ops["is_output"], ops["output_elems"], 0)
        ops["model_output_elems"] = ops["model_output_elems"].astype("int64")
        return cls(model=model, input_shape=shape, ops=ops,
                   provenance=dict(provenance or {}))

    # --- derived figures ------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.ops)

    @property
    def params(self) -> int:
        """Weight elements of the whole model (all ops)."""
        return int(self.ops["weight_elems"].sum())

    @property
    def macs_per_sample(self) -> int:
        """Multiply-accumulates of all GEMMs (dense), per sample."""
        o = self.ops
        return int((o["m"] * o["k"] * o["n"] * o["groups"]).sum())

    @property
    def has_density(self) -> bool:
        """Whether some op carries a per-layer density from a pruned checkpoint."""
        return bool(self.ops["density"].notna().any())

    def at_batch(self, batch: int) -> pd.DataFrame:
        """The op table with every per-sample column multiplied by ``batch``."""
        if isinstance(batch, bool) or not isinstance(batch, int | np.integer) or batch < 1:
            raise TraceError(f"batch must be a positive integer, got {batch!r}")
        if batch > MAX_BATCH:
            raise TraceError(f"batch {batch} is above the largest supported, {MAX_BATCH:,}")
        ops = self.ops.copy()
        for column in (*PER_SAMPLE, "model_input_elems", "model_output_elems"):
            ops[column] = ops[column] * batch
        return ops

    def to_json(self) -> dict[str, Any]:
        records = self.ops[list(COLUMNS)].to_dict(orient="records")
        for record in records:
            for column, kind in COLUMNS.items():
                if kind is int:
                    record[column] = int(record[column])
                elif kind is bool:
                    record[column] = bool(record[column])
                elif kind is float:
                    record[column] = float(record[column])
                elif kind is list:
                    record[column] = list(record[column])
        for column, kind in OPTIONAL.items():
            for record, value in zip(records, self.ops[column], strict=True):
                if kind is int and value > 0:
                    record[column] = int(value)
                elif kind is float and not math.isnan(value):
                    record[column] = float(value)
        return {"schema": SCHEMA, "model": self.model, "input_shape": list(self.input_shape),
                "provenance": dict(self.provenance), "ops": records}


def _check_density(value: Any, row: dict[str, Any], label: str,
                   column: str = "density") -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not 0.0 <= value <= 1.0:
        raise TraceError(f"{label}: {column} must be a number from 0 to 1, got {value!r}")
    if not row["prunable"]:
        raise TraceError(f"{label}: only prunable ops carry a {column}")
    return float(value)


def _check_window(value: Any, row: dict[str, Any], label: str, column: str) -> int:
    """A convolution's ``kernel_size`` or ``stride``: a positive integer, or 0 when absent."""
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():  # as the integer columns take it
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TraceError(f"{label}: {column} must be a positive integer, got {value!r}")
    if row["kind"] != "conv":
        raise TraceError(f"{label}: only conv ops carry a {column}")
    if value > MAX_PER_SAMPLE:
        raise TraceError(f"{label}: {column} is {value}, above the supported "
                         f"{_power(MAX_PER_SAMPLE)}")
    return value


def _check_op(row: dict[str, Any], label: str, seen: set[str], model_input_elems: int) -> None:
    if row["name"] in seen or row["name"] == MODEL_INPUT:
        raise TraceError(f"{label}: op name {row['name']!r} is used twice (or is reserved); "
                         "names must be unique")
    if row["kind"] not in KINDS:
        raise TraceError(f"{label}: unknown kind {row['kind']!r}; known: {', '.join(KINDS)}")
    if row["groups"] < 1:
        raise TraceError(f"{label}: groups must be >= 1")
    gemm = row["kind"] in GEMM_KINDS
    dims = (row["m"], row["k"], row["n"])
    # Python integers: the products below cannot overflow before they are checked.
    weights, flops = row["groups"] * row["m"] * row["k"], 2 * row["groups"] * math.prod(dims)
    for what, value in (("groups*m*k", weights), ("dense FLOPs 2*groups*m*k*n", flops)):
        if value > MAX_COUNT:
            raise TraceError(f"{label}: {what} = {value:.6g} (m, k, n = {dims}, groups "
                             f"{row['groups']}) is above the supported {_power(MAX_COUNT)}")
    if gemm and min(dims) < 1:
        raise TraceError(f"{label}: a {row['kind']} op needs m, k and n >= 1, got {dims}")
    if not gemm and any(dims):
        raise TraceError(f"{label}: a {row['kind']} op has no GEMM; set m, k and n to 0")
    if row["prunable"]:
        if row["kind"] not in ("conv", "linear"):
            raise TraceError(f"{label}: only conv and linear weights are prunable")
        expected = row["groups"] * row["m"] * row["k"]
        if row["weight_elems"] < expected:
            raise TraceError(f"{label}: weight_elems {row['weight_elems']} is below groups*m*k "
                             f"= {expected}, the weights of a prunable op")
    for producer in row["producers"]:
        if producer != MODEL_INPUT and producer not in seen:
            raise TraceError(f"{label}: producer {producer!r} is not an earlier op; ops must be "
                             "in topological order and producers must name them")
    # A convolution whose stride outruns its kernel reads only part of what it is given.
    if (MODEL_INPUT in row["producers"] and row["kind"] != "conv"
            and row["input_elems"] < model_input_elems):
        raise TraceError(f"{label}: reads the model input ({model_input_elems} elements) but "
                         f"input_elems is only {row['input_elems']}")


def read_trace_file(path: Path) -> Trace:
    """Load and validate one trace JSON file."""
    where = str(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"),
                              object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise TraceError(f"{where}: key {exc} appears twice in one object; keep one") from None
    except FileNotFoundError:
        raise TraceError(f"{where}: no such trace file; give a shipped model name "
                         "(see the README) or a path to a trace .json") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{where}: cannot read trace ({exc})") from None
    except json.JSONDecodeError as exc:
        raise TraceError(f"{where}: malformed JSON ({exc.msg}; line {exc.lineno}, "
                         f"column {exc.colno})") from None
    if not isinstance(document, dict):
        raise TraceError(f"{where}: a trace file holds one JSON object")
    if document.get("schema") != SCHEMA:
        raise TraceError(f"{where}: schema is {document.get('schema')!r}, expected {SCHEMA!r}")
    for key in ("model", "input_shape", "provenance", "ops"):
        if key not in document:
            raise TraceError(f"{where}: missing top-level key {key!r}")
    unknown = sorted(set(document) - {"schema", "model", "input_shape", "provenance", "ops"})
    if unknown:
        raise TraceError(f"{where}: unknown top-level key {unknown[0]!r}; a trace has schema, "
                         "model, input_shape, provenance and ops")
    if not isinstance(document["model"], str) or not document["model"].strip():
        raise TraceError(f"{where}: 'model' must be the model's name, a non-empty string, "
                         f"got {document['model']!r}")
    found = _non_finite(document["provenance"], "provenance")
    if found:
        raise TraceError(f"{where}: {found} is NaN or infinite; every number must be finite")
    if not isinstance(document["ops"], list) or not isinstance(document["provenance"], dict):
        raise TraceError(f"{where}: 'ops' must be a list and 'provenance' an object")
    if not isinstance(document["input_shape"], list):
        raise TraceError(f"{where}: 'input_shape' must be a list of positive integers")
    return Trace.from_records(str(document["model"]), document["input_shape"],
                              document["ops"], document["provenance"], where=where)


class _DuplicateKey(ValueError):
    """A key given twice in one JSON object (json keeps the last one silently)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise _DuplicateKey(repr(next(k for k in keys if keys.count(k) > 1)))
    return dict(pairs)


def _non_finite(value: Any, where: str) -> str | None:
    """The key path of the first NaN or infinity inside ``value``, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where
    items = value.items() if isinstance(value, dict) else (
        enumerate(value) if isinstance(value, list) else ())
    for key, item in items:
        found = _non_finite(item, f"{where}.{key}" if isinstance(value, dict)
                            else f"{where}[{key}]")
        if found:
            return found
    return None
