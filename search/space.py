"""Search spaces: the models, batch sizes, formats and hardware a search ranges over, from TOML.

A space file (the built-in default is ``search/spaces/default.toml``, the target search)::

    name = "nm-over-2:4"
    models = ["convnext_tiny", "swin_tiny"]    # shipped trace names or trace .json paths
    batches = [1]
    fusion = "unfused"                          # as `dse evaluate --fusion`: also fused,
                                                # fused_prefetched, rules:NAME (rules:inductor-cpu)
    scope = "gemm"                              # as `dse evaluate --scope`

    [accuracy]
    table = "default"                           # or a CSV path, relative to this file
    metric = "top1"
    # dataset = "..."                           # needed when the table has several

    [formats]
    list = ["2:4", "block16@87.5%"]             # explicit formats
    nm = { m = [4, 8, 16, 32], sparsity = "table" }      # or n = [1, 2] instead of sparsity
    block = { sizes = [4, 16], sparsity = [0.5, 0.875] }  # "table" for either
    unstructured = { sparsity = "table" }

    [hardware]
    base = ["a100"]                             # catalog names or spec TOML paths
    [hardware.set]                              # fixed overrides, as `dse evaluate --set`
    "sparse_tensor.patterns" = "candidates"     # every N:M candidate of the search
    "sparse_tensor.nonzero_rate" = 1.0
    [hardware.vary]                             # knobs: a list, a grid or a continuous range
    "dram_bandwidth_bytes_per_s" = [1.0e12, 1.555e12, 2.0e12]
    "tensor_flops_per_s.fp16" = { min = 1.0e14, max = 1.0e15, steps = 4, log = true }
    "sparse_tensor.nonzero_rate" = { min = 0.5, max = 1.0 }   # no steps: continuous (Optuna)

``"table"`` takes the sparsity levels (and block sizes) the accuracy table measured for that
family, so that every candidate has an accuracy. N:M from ``m`` and ``sparsity`` keeps the
patterns whose N = M x (1 - sparsity) is a whole number.

Language models (``search/spaces/llm.toml``, the built-in space of ``dse search --model
llama-3-8b``) add the step to trace and how the weights and KV cache are stored::

    models = ["llama-3-8b"]                     # shipped language models or config.json paths
    phase = "decode"                            # or "prefill"
    context = 2048                              # context length (decode) or prompt tokens
    [numerics]                                  # as `dse evaluate --weight-dtype ...`
    weight_dtype = "int4"                       # int8, int4, fp8; absent: the compute dtype
    weight_group_size = 128                     # int4 only
    kv_dtype = "fp8"
    [accuracy]
    table = "llm"                               # published figures: accuracy_llm.csv
    metric = "wikitext2_ppl"                    # lower is better; or zeroshot_mean
"""

from __future__ import annotations

import itertools
import math
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from accelerator_models import FIELDS, Accelerator, SpecError, derive, resolve_path, spec_fields
from dse.roofline.evaluator import fusion_models
from dse.roofline.numerics import DTYPE_BYTES, WEIGHT_DTYPE_BYTES
from formats import FormatError
from formats import parse as parse_format
from workloads import MAX_BATCH
from workloads.llm import PHASES

from .errors import SpaceError

__all__ = [
    "DEFAULT_SPACE",
    "LLM_SPACE",
    "Knob",
    "SearchSpace",
    "SpaceError",
    "load_space",
    "parse_space",
    "with_overrides",
]

DEFAULT_SPACE = Path(__file__).parent / "spaces" / "default.toml"
#: The built-in space for language models (``dse search --model llama-3-8b``).
LLM_SPACE = Path(__file__).parent / "spaces" / "llm.toml"
#: ``accuracy.table`` naming the shipped table of published language-model figures.
LLM_TABLE_NAME = "llm"
#: What the command line may override in a space (``dse search --model ... --batch ...``).
OVERRIDABLE = ("models", "phase", "context", "batches", "hardware", "weight_dtype",
               "weight_group_size", "kv_dtype", "metric")
#: The value of ``sparse_tensor.patterns`` that means "every N:M candidate of the search".
CANDIDATES = "candidates"
TABLE = "table"

_TOP_KEYS = {"name", "description", "models", "batches", "fusion", "scope", "accuracy",
             "formats", "hardware", "phase", "context", "numerics"}
_SCOPES = ("gemm", "all")


@dataclass(frozen=True)
class Knob:
    """One varied hardware field: discrete ``values``, or a continuous ``low``..``high``."""

    path: str
    values: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False

    @property
    def finite(self) -> bool:
        return self.values is not None

    @property
    def column(self) -> str:
        """The results column that holds this knob's value."""
        return f"hw.{self.path}"


@dataclass(frozen=True)
class HardwarePoint:
    """One hardware design: a base spec and a value for every knob."""

    base: int
    values: tuple[Any, ...]


@dataclass(frozen=True)
class SearchSpace:
    name: str
    description: str
    models: tuple[str, ...]
    batches: tuple[int, ...]
    fusion: str
    scope: str
    accuracy_table: str
    metric: str
    dataset: str | None
    formats: tuple[str, ...]
    hardware: tuple[str, ...]
    fixed: tuple[tuple[str, Any], ...]
    knobs: tuple[Knob, ...]
    where: str
    #: Language models: the step traced (``prefill`` or ``decode``) and its context length.
    phase: str | None = None
    context: int | None = None
    #: Weight-only quantisation and the KV-cache dtype (None: the compute dtype).
    weight_dtype: str | None = None
    weight_group_size: int | None = None
    kv_dtype: str | None = None

    @property
    def finite(self) -> bool:
        return all(k.finite for k in self.knobs)

    def hardware_count(self) -> int | float:
        """Number of hardware points; ``math.inf`` with a continuous knob."""
        if not self.finite:
            return math.inf
        return len(self.hardware) * math.prod(len(k.values) for k in self.knobs)

    def size(self) -> int | float:
        """Design points: models x batches x formats x hardware points."""
        return len(self.models) * len(self.batches) * len(self.formats) * self.hardware_count()

    def hardware_points(self) -> Iterator[HardwarePoint]:
        """Every hardware point of a finite space, base-major, knobs in file order."""
        for base in range(len(self.hardware)):
            for values in itertools.product(*(k.values for k in self.knobs)):
                yield HardwarePoint(base, tuple(values))


# --- reading ----------------------------------------------------------------------------------

def load_space(path: str | Path | None = None) -> tuple[SearchSpace, str]:
    """The space in ``path`` (the built-in default when None) and the file's text."""
    path = DEFAULT_SPACE if path is None else Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpaceError(f"search space {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpaceError(f"search space {path}: cannot read it ({exc})") from None
    where = {DEFAULT_SPACE: "built-in default space",
             LLM_SPACE: "built-in language-model space"}.get(path, str(path))
    return parse_space(text, where, path.parent), text


def parse_space(text: str, where: str, folder: Path | None = None) -> SearchSpace:
    """Validate a space's TOML ``text``; ``folder`` resolves relative paths in it."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpaceError(f"search space {where}: not valid TOML ({exc})") from None
    folder = folder or Path(".")
    _known(raw, _TOP_KEYS, where, "")
    for key in ("models", "formats", "hardware"):
        if key not in raw:
            raise SpaceError(f"search space {where}: missing [{key}]"
                             if key != "models" else
                             f"search space {where}: missing 'models' (a list of model names)")
    models = tuple(_relative(m, folder) if m.endswith(".json") else m
                   for m in _strings(raw["models"], where, "models"))
    batches = tuple(_batches(raw.get("batches", [1]), where))
    # Every fusion model `dse evaluate --fusion` takes, rules:NAME of a shipped table included.
    fusion = _choice(raw.get("fusion", "unfused"), fusion_models(), where, "fusion")
    scope = _choice(raw.get("scope", "gemm"), _SCOPES, where, "scope")
    accuracy = _table(raw.get("accuracy", {}), where, "accuracy")
    _known(accuracy, {"table", "metric", "dataset"}, where, "accuracy.")
    table = _string(accuracy.get("table", "default"), where, "accuracy.table")
    if table not in ("default", LLM_TABLE_NAME):
        table = _relative(table, folder)
    hardware = _table(raw["hardware"], where, "hardware")
    _known(hardware, {"base", "set", "vary"}, where, "hardware.")
    bases = _strings(hardware.get("base", []), where, "hardware.base")
    bases = tuple(b if not b.endswith(".toml") else _relative(b, folder) for b in bases)
    for base in bases:
        try:
            resolve_path(base)
        except SpecError as exc:
            raise SpaceError(f"search space {where}: hardware.base: {exc}") from None
    fixed = _fixed(_table(hardware.get("set", {}), where, "hardware.set"), where)
    knobs = _knobs(_table(hardware.get("vary", {}), where, "hardware.vary"), where)
    clash = {k.path for k in knobs} & {path for path, _ in fixed}
    if clash:
        raise SpaceError(f"search space {where}: {sorted(clash)[0]!r} is both set and varied; "
                         "keep it in one of [hardware.set] and [hardware.vary]")
    dataset = accuracy.get("dataset")
    space = SearchSpace(
        name=_string(raw.get("name", Path(where).stem), where, "name"),
        description=(_string(raw["description"], where, "description")
                     if "description" in raw else ""),
        models=models, batches=batches, fusion=fusion, scope=scope,
        accuracy_table=table,
        # None: the table's own default (top1; wikitext2_ppl for the language-model table).
        metric=(None if "metric" not in accuracy
                else _string(accuracy["metric"], where, "accuracy.metric")),
        dataset=None if dataset is None else _string(dataset, where, "accuracy.dataset"),
        formats=(), hardware=bases, fixed=fixed, knobs=knobs, where=where,
        **_language_model(raw, where))
    return replace(space, formats=_format_specs(raw["formats"], where))


def _language_model(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``phase``, ``context`` and the ``[numerics]`` table of a space, checked."""
    out: dict[str, Any] = {}
    if "phase" in raw:
        out["phase"] = _choice(raw["phase"], PHASES, where, "phase")
    if "context" in raw:
        value = raw["context"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpaceError(f"search space {where}: context must be one whole number >= 1, "
                             "e.g. context = 2048")
        out["context"] = value
    if ("phase" in out) != ("context" in out):
        raise SpaceError(f"search space {where}: phase and context go together (language "
                         "models: phase = \"decode\", context = 2048)")
    numerics = _table(raw.get("numerics", {}), where, "numerics")
    _known(numerics, {"weight_dtype", "weight_group_size", "kv_dtype"}, where, "numerics.")
    if "weight_dtype" in numerics:
        out["weight_dtype"] = _choice(numerics["weight_dtype"], tuple(WEIGHT_DTYPE_BYTES), where,
                                      "numerics.weight_dtype")
    if "weight_group_size" in numerics:
        value = numerics["weight_group_size"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpaceError(f"search space {where}: numerics.weight_group_size must be one "
                             "whole number >= 1, e.g. 128")
        out["weight_group_size"] = value
    if "kv_dtype" in numerics:
        out["kv_dtype"] = _choice(numerics["kv_dtype"], tuple(DTYPE_BYTES), where,
                                  "numerics.kv_dtype")
    return check_numerics(out, where)


def check_numerics(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Refuse a quantisation group without a quantised weight dtype; returns ``values``."""
    group, dtype = values.get("weight_group_size"), values.get("weight_dtype")
    if group is not None and dtype is None:
        raise SpaceError(f"{where}: weight_group_size {group}: a group size is for quantised "
                         f"weights; give weight_dtype ({', '.join(WEIGHT_DTYPE_BYTES)}) too")
    return dict(values)


def with_overrides(space: SearchSpace, overrides: Mapping[str, Any]) -> SearchSpace:
    """``space`` with the command line's ``overrides`` (keys of :data:`OVERRIDABLE`; None or
    absent: the space's own), checked as the file's values are."""
    unknown = sorted(set(overrides) - set(OVERRIDABLE))
    if unknown:
        raise SpaceError(f"search space {space.where}: cannot override {', '.join(unknown)}")
    given = {k: v for k, v in overrides.items() if v is not None}
    if not given:
        return space
    where = f"{space.where} with the command line's options"
    changes: dict[str, Any] = {}
    if "models" in given:
        changes["models"] = tuple(dict.fromkeys(given["models"]))
    if "batches" in given:
        changes["batches"] = tuple(_batches(list(given["batches"]), where))
    if "hardware" in given:
        bases = tuple(dict.fromkeys(given["hardware"]))
        for base in bases:
            try:
                resolve_path(base)
            except SpecError as exc:
                raise SpaceError(f"--hw: {exc}") from None
        changes["hardware"] = bases
    for key in ("phase", "context", "weight_dtype", "weight_group_size", "kv_dtype", "metric"):
        if key in given:
            changes[key] = given[key]
    out = replace(space, **changes)
    # A weight dtype given alone replaces the space's whole weight storage (its group too).
    if "weight_dtype" in given and "weight_group_size" not in given:
        out = replace(out, weight_group_size=None)
    check_numerics({"weight_dtype": out.weight_dtype,
                    "weight_group_size": out.weight_group_size}, "--weight-group-size")
    return replace(out, where=where)


def _known(table: Mapping[str, Any], keys: set[str], where: str, prefix: str) -> None:
    for key in table:
        if key not in keys:
            raise SpaceError(f"search space {where}: unknown key {prefix}{key!r}; known: "
                             + ", ".join(sorted(keys)))


def _relative(path: str, folder: Path) -> str:
    p = Path(path)
    return str(p if p.is_absolute() else folder / p)


def _table(value: Any, where: str, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SpaceError(f"search space {where}: {key} must be a table, e.g. [{key}]")
    return value


def _string(value: Any, where: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpaceError(f"search space {where}: {key} must be a non-empty string")
    return value.strip()


def _strings(value: Any, where: str, key: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise SpaceError(f"search space {where}: {key} must be a non-empty list of strings")
    return list(dict.fromkeys(_string(v, where, key) for v in value))


def _choice(value: Any, allowed: Sequence[str], where: str, key: str) -> str:
    if value not in allowed:
        raise SpaceError(f"search space {where}: {key} = {value!r}; use one of "
                         + ", ".join(allowed))
    return value


def _batches(value: Any, where: str) -> list[int]:
    items = value if isinstance(value, list) else [value]
    if not items or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in items):
        raise SpaceError(f"search space {where}: batches must be a list of positive integers, "
                         "e.g. batches = [1, 8]")
    if max(items) > MAX_BATCH:  # refused here, before a study is created, not by a worker
        raise SpaceError(f"search space {where}: batch size {max(items)} is above the largest "
                         f"supported, {MAX_BATCH:,}")
    return list(dict.fromkeys(items))


def _number(value: Any, where: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SpaceError(f"search space {where}: {key} must be a number")
    return float(value)


# --- formats ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Family:
    """A generated family of formats, resolved against the accuracy table later."""

    kind: str
    sizes: tuple[int, ...] | str = ()
    sparsities: tuple[float, ...] | str = ()
    ns: tuple[int, ...] = ()


def _format_specs(raw: Any, where: str) -> tuple[Any, ...]:
    """Explicit format names and :class:`_Family` entries, in file order (resolved later)."""
    raw = _table(raw, where, "formats")
    _known(raw, {"list", "nm", "block", "unstructured"}, where, "formats.")
    specs: list[Any] = []
    for key, value in raw.items():
        if key == "list":
            for spec in _strings(value, where, "formats.list"):
                try:
                    specs.append(parse_format(spec).name)
                except FormatError as exc:
                    raise SpaceError(f"search space {where}: formats.list: {exc}") from None
            continue
        value = _table(value, where, f"formats.{key}")
        if key == "nm":
            _known(value, {"m", "n", "sparsity"}, where, "formats.nm.")
            ms = _ints(value.get("m"), where, "formats.nm.m", 2)
            if ("n" in value) == ("sparsity" in value):
                raise SpaceError(f"search space {where}: formats.nm needs one of n = [...] or "
                                 "sparsity = [...] (or \"table\")")
            ns = tuple(_ints(value["n"], where, "formats.nm.n", 1)) if "n" in value else ()
            sparsity = _levels(value.get("sparsity", ()), where, "formats.nm.sparsity")
            specs.append(_Family("nm", tuple(ms), sparsity, ns))
        elif key == "block":
            _known(value, {"sizes", "sparsity"}, where, "formats.block.")
            sizes = value.get("sizes", TABLE)
            sizes = sizes if sizes == TABLE else tuple(
                _ints(sizes, where, "formats.block.sizes", 1, 64))
            specs.append(_Family("block", sizes,
                                 _levels(value.get("sparsity"), where,
                                         "formats.block.sparsity")))
        else:
            _known(value, {"sparsity"}, where, "formats.unstructured.")
            specs.append(_Family("unstructured", (),
                                 _levels(value.get("sparsity"), where,
                                         "formats.unstructured.sparsity")))
    if not specs:
        raise SpaceError(f"search space {where}: [formats] is empty; add list = [\"2:4\"] or a "
                         "family")
    return tuple(specs)


def _ints(value: Any, where: str, key: str, low: int, high: int | None = None) -> list[int]:
    items = value if isinstance(value, list) else [value]
    bad = [v for v in items if isinstance(v, bool) or not isinstance(v, int) or v < low
           or (high is not None and v > high)]
    if not items or value is None or bad:
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise SpaceError(f"search space {where}: {key} must be a list of whole numbers "
                         f"({bound})")
    return list(dict.fromkeys(items))


def _levels(value: Any, where: str, key: str) -> tuple[float, ...] | str:
    if value == TABLE:
        return TABLE
    items = value if isinstance(value, list) else [value]
    if value is None or not items:
        raise SpaceError(f"search space {where}: {key} must be a list of sparsities in [0, 1) "
                         "or \"table\"")
    levels = []
    for v in items:
        level = _number(v, where, key)
        if not 0.0 < level < 1.0:
            raise SpaceError(f"search space {where}: {key} has {v}; sparsities are fractions "
                             "in (0, 1), e.g. 0.875")
        levels.append(level)
    return tuple(dict.fromkeys(levels))


def _percent(level: float) -> str:
    return f"{level * 100:.10g}%"


def expand_formats(space: SearchSpace, table_levels) -> tuple[str, ...]:
    """The space's candidate format names, with families expanded.

    ``table_levels(family, block)`` gives the accuracy table's sparsity levels for a family
    (``block=None``: any block size) and ``table_levels("block_sizes", None)`` its block sizes.
    """
    names: list[str] = []
    for spec in space.formats:
        if isinstance(spec, str):
            names.append(spec)
            continue
        levels = spec.sparsities
        if spec.kind == "nm":
            if spec.ns:
                pairs = [(n, m) for m in spec.sizes for n in spec.ns if n < m]
            else:
                levels = table_levels("nm", None) if levels == TABLE else levels
                pairs = []
                for m in spec.sizes:
                    for level in levels:
                        n = m * (1.0 - level)
                        if abs(n - round(n)) < 1e-9 and 1 <= round(n) < m:
                            pairs.append((round(n), m))
            names.extend(f"{n}:{m}" for n, m in pairs)
        elif spec.kind == "block":
            sizes = table_levels("block_sizes", None) if spec.sizes == TABLE else spec.sizes
            for size in sizes:
                size_levels = table_levels("block", size) if levels == TABLE else levels
                names.extend(f"block{size}@{_percent(s)}" for s in size_levels)
        else:
            levels = table_levels("unstructured", None) if levels == TABLE else levels
            names.extend(f"unstructured@{_percent(s)}" for s in levels)
    canonical = [parse_format(n).name for n in names]
    if not canonical:
        raise SpaceError(f"search space {space.where}: [formats] expands to no format "
                         "(no whole N for the N:M sizes and sparsities given?)")
    return tuple(dict.fromkeys(canonical))


# --- hardware ---------------------------------------------------------------------------------

def _check_field(path: str, where: str, key: str) -> None:
    if path not in FIELDS:
        near = [f for f in FIELDS if path.split(".")[-1] in f]
        hint = f" (did you mean {', '.join(near[:3])}?)" if near else ""
        raise SpaceError(f"search space {where}: {key}: unknown hardware field {path!r}{hint}; "
                         "fields: see `dse hw show a100`")


def _check_value(path: str, value: Any, where: str, key: str) -> None:
    if path == "sparse_tensor.patterns" and value == CANDIDATES:
        return
    try:
        FIELDS[path](value, f"search space {where}: {key}")
    except SpecError as exc:
        raise SpaceError(str(exc)) from None


def _fixed(raw: Mapping[str, Any], where: str) -> tuple[tuple[str, Any], ...]:
    fixed = []
    for path, value in raw.items():
        key = f"hardware.set.{path!r}"
        _check_field(path, where, key)
        _check_value(path, value, where, key)
        fixed.append((path, _freeze(value)))
    return tuple(fixed)


def _freeze(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _knobs(raw: Mapping[str, Any], where: str) -> tuple[Knob, ...]:
    knobs = []
    for path, spec in raw.items():
        key = f"hardware.vary.{path!r}"
        _check_field(path, where, key)
        if isinstance(spec, list):
            if not spec:
                raise SpaceError(f"search space {where}: {key} is an empty list; give at least "
                                 "one value")
            for value in spec:
                _check_value(path, value, where, key)
            knobs.append(Knob(path, tuple(dict.fromkeys(_freeze(v) for v in spec))))
            continue
        if not isinstance(spec, dict):
            raise SpaceError(f"search space {where}: {key} must be a list of values or a range "
                             "{ min = ..., max = ..., steps = N, log = false }")
        _known(spec, {"min", "max", "steps", "log"}, where, f"{key}.")
        if path in ("sparse_tensor.patterns", "block_sparse.supported"):
            raise SpaceError(f"search space {where}: {key} is not numeric; give a list of values")
        if "min" not in spec or "max" not in spec:
            raise SpaceError(f"search space {where}: {key} needs min and max")
        low, high = (_number(spec[k], where, f"{key}.{k}") for k in ("min", "max"))
        log = spec.get("log", False)
        if not isinstance(log, bool):
            raise SpaceError(f"search space {where}: {key}.log must be true or false")
        if not low < high:
            raise SpaceError(f"search space {where}: {key}: min {low:g} must be below max "
                             f"{high:g}")
        for value in (low, high):
            _check_value(path, value, where, key)
        if "steps" not in spec:
            knobs.append(Knob(path, None, low, high, log))
            continue
        steps = spec["steps"]
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 2:
            raise SpaceError(f"search space {where}: {key}.steps must be a whole number >= 2")
        if log:
            grid = [low * (high / low) ** (i / (steps - 1)) for i in range(steps)]
        else:
            grid = [low + (high - low) * i / (steps - 1) for i in range(steps)]
        grid[-1] = high  # exact end points, whatever the rounding
        if path == "block_sparse.min_block_size":
            grid = sorted({round(v) for v in grid})
        knobs.append(Knob(path, tuple(grid)))
    return tuple(knobs)


class HardwareBuilder:
    """Builds the :class:`Accelerator` of a hardware point, quickly (base specs read once)."""

    def __init__(self, space: SearchSpace, nm_patterns: Sequence[str]) -> None:
        self.space = space
        self.flats = []
        self.names = []
        for base in space.hardware:
            path = resolve_path(base)
            flat = spec_fields(path)
            for field, value in space.fixed:
                flat[field] = self._value(field, value, nm_patterns)
            self.flats.append(flat)
            self.names.append(path.stem)
        self.nm_patterns = tuple(nm_patterns)
        self._built: dict[tuple[int, tuple[Any, ...]], Accelerator] = {}
        # Check the bases build with the fixed overrides, naming the space on failure.
        self._bases = [self._build(i, {}) for i in range(len(self.flats))]

    @property
    def bases(self) -> tuple[Accelerator, ...]:
        """The space's base accelerators with its ``[hardware.set]`` applied, in order."""
        return tuple(self._bases)

    def _value(self, field: str, value: Any, nm_patterns: Sequence[str]) -> Any:
        if field == "sparse_tensor.patterns" and value == CANDIDATES:
            return list(nm_patterns)
        return list(value) if isinstance(value, tuple) else value

    def _build(self, base: int, values: Mapping[str, Any]) -> Accelerator:
        changes = {field: self._value(field, value, self.nm_patterns)
                   for field, value in values.items()}
        try:
            return derive(self.flats[base], changes, name=self.names[base],
                          where=f"search space {self.space.where}: hardware "
                                f"{self.space.hardware[base]}")
        except SpecError as exc:
            raise SpaceError(str(exc)) from None

    def _changed(self, base: int, values: Mapping[str, Any]) -> Accelerator | None:
        """The base's accelerator with ``values`` put in place, when every knob is a number
        that :func:`derive` would only parse and store (:data:`_DIRECT`; no check across
        fields); None otherwise, or when a value is not valid (derive then says why). The same
        accelerator derive builds, without parsing every field of the spec again (a search
        builds thousands)."""
        accelerator = self._bases[base]
        changes: dict[str, Any] = {}
        for field, value in values.items():
            head, dot, tail = field.partition(".")
            parser = FIELDS.get(field)
            if parser is None or ((head not in _DIRECT_TABLES) if dot else (field not in _DIRECT)):
                return None
            try:
                parsed = parser(value, field)
            except SpecError:
                return None
            if dot:
                table = changes.setdefault(head, dict(getattr(accelerator, head)))
                table[tail] = parsed
            else:
                changes[field] = parsed
        return replace(accelerator, **changes)

    def build(self, base: int, values: Sequence[Any]) -> Accelerator:
        """The accelerator of a hardware point (cached: every model of a search reuses it)."""
        key = (base, tuple(values))
        if key not in self._built:
            changes = dict(zip((k.path for k in self.space.knobs), values, strict=True))
            self._built[key] = self._changed(base, changes) or self._build(base, changes)
        return self._built[key]


#: Knobs :meth:`HardwareBuilder._changed` sets directly: the numeric fields that are an
#: Accelerator field of the same name and that no check relates to another field (the static
#: and board power are checked together), and the per-dtype tables (``tensor_flops_per_s.fp16``).
_DIRECT = frozenset(f for f in FIELDS if "." not in f) & {f.name for f in fields(Accelerator)} - {
    "static_power_w", "board_power_w"}
_DIRECT_TABLES = frozenset(f.split(".")[0] for f in FIELDS if "." in f) & {
    f.name for f in fields(Accelerator)} - {"sparse_tensor", "block_sparse"}

