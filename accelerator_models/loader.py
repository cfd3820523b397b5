"""Strict loading of accelerator specs: raw TOML, then validation by key path, then the dataclass.

A spec file may ``extends`` a catalog entry (or another file) and override any field; the
command line may override fields again with ``FIELD=VALUE`` strings. Unknown keys, duplicate
keys, wrong types and non-positive rates are errors that name the file and the key path.
"""

from __future__ import annotations

import copy
import math
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from .spec import (
    CACHE_LEVELS,
    ENERGY_TABLES,
    FIGURES,
    TENSOR_DTYPES,
    VECTOR_DTYPES,
    Accelerator,
    BlockSparse,
    CacheLevel,
    SparseTensorCore,
    SpecError,
)

__all__ = ["CACHE_FIELDS", "ENERGY_FIELDS", "FIELDS", "SIMULATOR_FIELDS", "parse_spec_file",
           "build", "apply_overrides", "parse_pattern"]

_PATTERN = re.compile(r"^\s*(\d{1,18})\s*:\s*(\d{1,18})\s*$")
#: The largest group size M of a pattern: the formats' own bound (formats.nm.MAX_M), repeated
#: here because the ground packages import nothing of each other.
MAX_PATTERN_M = 2**16


def parse_pattern(text: str, where: str) -> tuple[int, int]:
    """Parse an N:M pattern such as ``"2:4"`` with 1 <= N < M <= 65,536."""
    match = _PATTERN.match(text) if isinstance(text, str) else None
    if match is None and isinstance(text, str) and re.match(r"^\s*\d+\s*:\s*\d+\s*$", text):
        raise SpecError(f"{where}: pattern {text!r} needs 1 <= N < M <= {MAX_PATTERN_M:,}")
    if match is None:
        raise SpecError(f"{where}: {text!r} is not an N:M pattern; write it like \"2:4\"")
    n, m = int(match.group(1)), int(match.group(2))
    if not 1 <= n < m <= MAX_PATTERN_M:
        raise SpecError(f"{where}: pattern {text!r} needs 1 <= N < M <= {MAX_PATTERN_M:,}")
    return n, m


# --- field parsers: (value from TOML or --set, where) -> validated value ----------------------


#: The range of every positive field (rates, sizes, pJ, watts, fractions): wide enough for any
#: machine and any hypothetical one, narrow enough that no latency, energy or product of them
#: over the largest trace and batch overflows (a bandwidth of 5e-324 B/s once divided by zero).
POSITIVE_RANGE = (1e-6, 1e30)


def _positive_float(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(f"{where}: expected a positive number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise SpecError(f"{where}: must be a positive finite number, got {value!r}")
    low, high = POSITIVE_RANGE
    if not low <= value <= high:
        raise SpecError(f"{where}: {value:g} is outside the range dse takes, {low:g} to "
                        f"{high:g}; give a figure in the field's unit (see `dse hw show a100`)")
    return value


def _rate_fraction(value: Any, where: str) -> float:
    value = _positive_float(value, where)
    if value > 1.0:
        raise SpecError(f"{where}: {value:g} is above 1; nonzero_rate is the sparse core's "
                        "rate on nonzeros relative to the dense peak (1.0 = same throughput); "
                        "raise tensor_flops_per_s instead")
    return value


def _patterns(value: Any, where: str) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, list):
        raise SpecError(f"{where}: expected a list of N:M patterns such as [\"2:4\", \"1:4\"]")
    patterns = tuple(parse_pattern(item, where) for item in value)
    if len(set(patterns)) != len(patterns):
        raise SpecError(f"{where}: lists a pattern twice; list each N:M pattern once")
    return patterns


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"{where}: expected true or false, got {value!r}")
    return value


def _block_size(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 64:
        raise SpecError(f"{where}: expected an integer block size from 1 to 64, got {value!r}")
    return value


#: The most SMs (cores, compute units) a spec may have: a wafer-scale engine has 900,000
#: cores, the largest GPUs a few hundred SMs; 1e12 once loaded and sized a buffer of 1e17 bytes.
MAX_SM_COUNT = 1_000_000


def _sm_count(value: Any, where: str) -> int:
    # A float is taken when it is whole: --vary and search ranges hand every number over as a
    # float (108.0), and a fractional SM count (1.5) is still an error.
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole or value < 1:
        raise SpecError(f"{where}: expected a whole number of SMs >= 1, got {value!r}")
    if value > MAX_SM_COUNT:
        raise SpecError(f"{where}: {value:,.0f} SMs is above the {MAX_SM_COUNT:,} dse takes "
                        "(a GPU has a few hundred); give the machine's count of SMs, cores or "
                        "compute units")
    return int(value)


def _non_negative_seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(f"{where}: expected a time in seconds >= 0 such as 5e-6, got {value!r}")
    value = float(value)
    # No kernel launch takes a second; 1e308 would make every simulated latency infinite.
    if not math.isfinite(value) or not 0 <= value <= 1.0:
        raise SpecError(f"{where}: must be a finite number of seconds from 0 to 1 (0 = no "
                        f"launch cost), got {value!r}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise SpecError(f"{where}: expected a string, got {value!r}")
    return value


#: The longest spec name: the form ``dse hw probe --name`` takes (dse.cli.options.identifier).
MAX_NAME = 100
_NAME = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9._+:-]{{0,{MAX_NAME - 1}}}$")


def _name(value: Any, where: str) -> str:
    # A spec's name labels every row and chart of its results: an empty one labels nothing, a
    # 10,000-character one buries them, and a newline or a comma breaks a CSV row or a chart.
    if not isinstance(value, str) or not _NAME.match(value):
        shown = repr(value) if not isinstance(value, str) or len(value) <= 40 else (
            f"{value[:20]!r}... ({len(value):,} characters)")
        raise SpecError(f"{where}: expected the spec's name, a non-empty string of letters, "
                        f"digits and . _ + : - (1 to {MAX_NAME} characters, the first a letter "
                        f"or digit), got {shown}; fix the name")
    return value


def _shown(value: Any) -> str:
    """A value as a refusal quotes it: repr, cut to 20 characters past 40."""
    if isinstance(value, str) and len(value) > 40:
        return f"{value[:20]!r}... ({len(value):,} characters)"
    return repr(value)


#: The most aliases a spec takes: each is another name it is found by (the catalog's have one).
MAX_ALIASES = 16


def _aliases(value: Any, where: str) -> tuple[str, ...]:
    # Other names of the spec, found by --hw and shown by `dse hw list`: each of the name's
    # form (a space, a comma or a newline broke the listing's columns; a 10,000-character
    # one buried them), a few, no repeats.
    form = (f"expected a list of at most {MAX_ALIASES} other names of the spec, each a non-empty "
            "string of letters, digits and . _ + : - (1 to "
            f"{MAX_NAME} characters, the first a letter or digit)")
    if not isinstance(value, list):
        raise SpecError(f"{where}: {form}, got {_shown(value)}; fix the aliases")
    if len(value) > MAX_ALIASES:
        raise SpecError(f"{where}: {form}, got {len(value):,} aliases; keep the few it is known by")
    for alias in value:
        if not isinstance(alias, str) or not _NAME.match(alias):
            raise SpecError(f"{where}: {form}, got {_shown(alias)}; fix that alias")
    repeated = next((a for i, a in enumerate(value) if a in value[:i]), None)
    if repeated is not None:
        raise SpecError(f"{where}: {repeated!r} is given twice; keep one")
    return tuple(value)


#: The longest description: one line of prose (the catalog's longest is 157 characters).
MAX_DESCRIPTION = 1000
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _description(value: Any, where: str) -> str:
    # Shown by `dse hw show` and `dse hw list --format csv|json` and in reports: a newline or
    # another control character broke the line it sits on, and 10 MB of it every listing.
    if not isinstance(value, str):
        raise SpecError(f"{where}: expected a string, got {_shown(value)}; fix the description")
    if len(value) > MAX_DESCRIPTION:
        raise SpecError(f"{where}: {len(value):,} characters is above the {MAX_DESCRIPTION:,} "
                        "a description takes (one line of prose); shorten it, and put "
                        "sources in sources = [...]")
    control = _CONTROL.search(value)
    if control:
        raise SpecError(f"{where}: holds the control character {control.group()!r} at "
                        f"character {control.start() + 1:,}; keep the description on one "
                        "line of printable text")
    return value


def _texts(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"{where}: expected a list of strings")
    return tuple(value)


def _figures(value: Any, where: str) -> str:
    if value not in FIGURES:
        raise SpecError(f"{where}: expected \"peak\" (datasheet figures: the roofline is a "
                        f"bound) or \"ceiling\" (measured by a probe), got {value!r}")
    return value


def _provenance(value: Any, where: str) -> dict[str, Any]:
    # Free-form description of where the figures come from (`dse hw probe` writes it: command,
    # date, repeats, spread, versions per field); kept on the Accelerator, moves no number.
    if not isinstance(value, dict):
        raise SpecError(f"{where}: expected a table [provenance]")
    return value


#: Every model field, by dotted key path. Each one moves some output: the rates, the sparse core
#: and block sparsity move the evaluator's; the on-chip sizes (sm_count,
#: shared_memory_per_sm_bytes, l2_bytes) and kernel_launch_overhead_s are optional and move the
#: simulator's (dse.sim.simulate), which the roofline evaluator ignores; the energy, power and
#: capacity fields (ENERGY_FIELDS) are optional and move only dse.roofline.energy's and
#: dse.roofline.memory's outputs. Units are in the names: pJ per useful FLOP (per dtype), pJ per
#: byte (DRAM; on-chip L2 / shared memory), watts, bytes.
FIELDS: dict[str, Callable[[Any, str], Any]] = {
    "dram_bandwidth_bytes_per_s": _positive_float,
    **{f"tensor_flops_per_s.{d}": _positive_float for d in TENSOR_DTYPES},
    **{f"vector_flops_per_s.{d}": _positive_float for d in VECTOR_DTYPES},
    "sparse_tensor.patterns": _patterns,
    "sparse_tensor.nonzero_rate": _rate_fraction,
    "block_sparse.supported": _bool,
    "block_sparse.min_block_size": _block_size,
    "sm_count": _sm_count,
    "shared_memory_per_sm_bytes": _positive_float,
    "l2_bytes": _positive_float,
    "kernel_launch_overhead_s": _non_negative_seconds,
    # Energy, power and capacity (optional): they move dse.roofline.energy's and
    # dse.roofline.memory's outputs (energy, power cap, fits), never the latency bound.
    "dram_pj_per_byte": _positive_float,
    "onchip_pj_per_byte": _positive_float,
    **{f"{table}.{d}": _positive_float for table, dtypes in ENERGY_TABLES.items()
       for d in dtypes},
    "static_power_w": _positive_float,
    "board_power_w": _positive_float,
    "dram_capacity_bytes": _positive_float,
    # The cache hierarchy (optional): capacity and peak bandwidth per level, totals over the
    # cores or SMs; they move the warm bound (dse.roofline.memory_time), and a cold one where a
    # level's link is narrower than DRAM (dse.roofline.cold_seconds_per_byte).
    **{f"cache.{level}_{what}": _positive_float for level in CACHE_LEVELS
       for what in ("bytes", "bandwidth_bytes_per_s")},
}

#: The fields only the event-level simulator reads (dse.sim: ``dse simulate``, ``--evaluator
#: simulate``). The roofline is a bound: every kernel at peak, back to back, its launch hidden
#: behind the kernel before it (asynchronous launches, CUDA graphs) and its data streamed; a
#: launch cost or an on-chip buffer that shapes tiles would make it a forecast, and no longer
#: what the simulator with ideal settings equals. Commands that price the roofline refuse them.
SIMULATOR_FIELDS = ("sm_count", "shared_memory_per_sm_bytes", "kernel_launch_overhead_s")

#: The cache-hierarchy fields: optional (see FIELDS).
CACHE_FIELDS = tuple(p for p in FIELDS if p.startswith("cache."))

#: The energy, power and capacity fields: optional; they move the energy and memory outputs
#: (dse.roofline.energy, dse.roofline.memory) and never a latency.
ENERGY_FIELDS = tuple(p for p in FIELDS if p.split(".")[0] in (
    "dram_pj_per_byte", "onchip_pj_per_byte", *ENERGY_TABLES, "static_power_w", "board_power_w",
    "dram_capacity_bytes"))

#: Descriptive keys: they name and document a spec and move no number.
METADATA: dict[str, Callable[[Any, str], Any]] = {
    "name": _name,
    "description": _description,
    "aliases": _aliases,
    "sources": _texts,
    "unverified": _texts,
    "extends": _text,
    "provenance": _provenance,
    "figures": _figures,
}

_TABLES = {"tensor_flops_per_s", "vector_flops_per_s", "sparse_tensor", "block_sparse",
           "cache", *ENERGY_TABLES}


def _flatten(table: Mapping[str, Any], where: str, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        path = f"{prefix}{key}"
        if not prefix and key == "provenance":  # free-form table, validated in build()
            flat[path] = value
        elif isinstance(value, dict):
            if prefix or key not in _TABLES:
                raise SpecError(f"{where}: unknown table [{path}]; known tables: "
                                + ", ".join(sorted(_TABLES)))
            flat.update(_flatten(value, where, prefix=f"{path}."))
        elif path in FIELDS or (not prefix and path in METADATA):
            flat[path] = value
        else:
            raise SpecError(f"{where}: unknown key {path!r}; {_suggest(path)}")
    return flat


def _suggest(path: str, fields_only: bool = False) -> str:
    head = path.split(".")[0]
    siblings = sorted(p for p in FIELDS if p.startswith(head + "."))
    if siblings:
        return "known keys here: " + ", ".join(siblings)
    if fields_only:  # --set takes model fields only, not the descriptive keys
        return "settable fields: " + ", ".join(sorted(FIELDS))
    return "known keys: " + ", ".join(list(METADATA) + sorted(FIELDS))


_KEY_LINE = re.compile(r"^\s*([A-Za-z0-9_-]+(?:\s*\.\s*[A-Za-z0-9_-]+)*)\s*=")
_TABLE_LINE = re.compile(r"^\s*\[\s*([A-Za-z0-9_.-]+)\s*\]\s*(#.*)?$")


def _find_duplicate(text: str) -> str | None:
    """Name the first key path defined twice; tomllib rejects duplicates but does not name them."""
    seen: dict[str, int] = {}
    table = ""
    for lineno, line in enumerate(text.splitlines(), start=1):
        if m := _TABLE_LINE.match(line):
            table = m.group(1)
            path = table
        elif m := _KEY_LINE.match(line):
            key = re.sub(r"\s+", "", m.group(1))
            path = f"{table}.{key}" if table else key
        else:
            continue
        if path in seen:
            return f"duplicate key {path!r} (line {seen[path]} and line {lineno}); keep one"
        seen[path] = lineno
    return None


# Parsed files by (device, inode, size, modification time): a design priced in a loop by
# hardware name re-reads its spec on every call, and parsing the TOML was most of that
# (0.23 ms); a file changed since is read again. Each caller gets its own deep copy.
_PARSED: dict[tuple[int, int, int, int], dict[str, Any]] = {}
_PARSED_MAX = 256


def parse_spec_file(path: Path) -> dict[str, Any]:
    """Read one TOML spec into a flat ``{key path: raw value}`` dict, strictly."""
    try:
        stat = path.stat()
        key = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    except OSError:  # reading it below says why
        key = None
    if key is not None and key in _PARSED:
        return copy.deepcopy(_PARSED[key])
    flat = _parse_spec_file(path)
    if key is not None:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = copy.deepcopy(flat)
    return flat


def _parse_spec_file(path: Path) -> dict[str, Any]:
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{where}: no such hardware file; give a catalog name "
                        "(see `dse hw list`) or an existing .toml path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{where}: cannot read hardware file ({exc})") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        duplicate = _find_duplicate(text)
        raise SpecError(f"{where}: {duplicate or f'malformed TOML: {exc}'}") from None
    return _flatten(raw, where)


def build(flat: Mapping[str, Any], where: str, name: str) -> Accelerator:
    """Validate a merged flat spec and construct the :class:`Accelerator`."""
    values: dict[str, Any] = {}
    for path, raw in flat.items():
        parser = FIELDS.get(path) or METADATA[path]
        values[path] = parser(raw, f"{where}: {path}")
    for required in ("dram_bandwidth_bytes_per_s", "block_sparse.supported",
                     "block_sparse.min_block_size"):
        if required not in values:
            raise SpecError(f"{where}: missing required key {required!r}")
    tensor = {p.split(".", 1)[1]: v for p, v in values.items()
              if p.startswith("tensor_flops_per_s.")}
    vector = {p.split(".", 1)[1]: v for p, v in values.items()
              if p.startswith("vector_flops_per_s.")}
    if not tensor:
        raise SpecError(f"{where}: needs at least one tensor_flops_per_s.<dtype> "
                        f"({', '.join(TENSOR_DTYPES)})")
    if not vector:
        raise SpecError(f"{where}: needs at least one vector_flops_per_s.<dtype> "
                        f"({', '.join(VECTOR_DTYPES)})")
    sparse = None
    has_patterns = "sparse_tensor.patterns" in values
    has_rate = "sparse_tensor.nonzero_rate" in values
    if has_patterns != has_rate:
        missing = "nonzero_rate" if has_patterns else "patterns"
        raise SpecError(f"{where}: [sparse_tensor] needs both patterns and nonzero_rate; "
                        f"add sparse_tensor.{missing}")
    if has_patterns and values["sparse_tensor.patterns"]:
        sparse = SparseTensorCore(values["sparse_tensor.patterns"],
                                  values["sparse_tensor.nonzero_rate"])
    for path in values.get("unverified", ()):
        if path not in FIELDS:
            raise SpecError(f"{where}: unverified lists {path!r}, which is not a field")
    static, board = values.get("static_power_w"), values.get("board_power_w")
    if static is not None and board is not None and static >= board:
        raise SpecError(f"{where}: static_power_w ({static:g} W) must be below board_power_w "
                        f"({board:g} W): the board limit caps static plus dynamic power")
    energy = {table: {p.split(".", 1)[1]: v for p, v in values.items()
                      if p.startswith(table + ".")} for table in ENERGY_TABLES}
    caches = _cache_levels(values, where)
    return Accelerator(
        name=values.get("name", name),
        description=values.get("description", ""),
        dram_bandwidth_bytes_per_s=values["dram_bandwidth_bytes_per_s"],
        tensor_flops_per_s=tensor,
        vector_flops_per_s=vector,
        block_sparse=BlockSparse(values["block_sparse.supported"],
                                 values["block_sparse.min_block_size"]),
        sparse_tensor=sparse,
        sm_count=values.get("sm_count"),
        shared_memory_per_sm_bytes=values.get("shared_memory_per_sm_bytes"),
        l2_bytes=values.get("l2_bytes"),
        kernel_launch_overhead_s=values.get("kernel_launch_overhead_s"),
        cache_levels=caches,
        figures=values.get("figures", "peak"),
        dram_pj_per_byte=values.get("dram_pj_per_byte"),
        onchip_pj_per_byte=values.get("onchip_pj_per_byte"),
        **energy,
        static_power_w=values.get("static_power_w"),
        board_power_w=values.get("board_power_w"),
        dram_capacity_bytes=values.get("dram_capacity_bytes"),
        aliases=values.get("aliases", ()),
        sources=values.get("sources", ()),
        unverified=values.get("unverified", ()),
        provenance=values.get("provenance", {}),
    )


def _cache_levels(values: Mapping[str, Any], where: str) -> tuple[CacheLevel, ...]:
    """The ``[cache]`` levels, fastest first: each with both its size and bandwidth; each
    larger than the one before it (a level that holds less than a faster one explains nothing)."""
    levels: list[CacheLevel] = []
    for level in CACHE_LEVELS:
        size = values.get(f"cache.{level}_bytes")
        bandwidth = values.get(f"cache.{level}_bandwidth_bytes_per_s")
        if size is None and bandwidth is None:
            continue
        if size is None or bandwidth is None:
            missing = f"{level}_bytes" if size is None else f"{level}_bandwidth_bytes_per_s"
            raise SpecError(f"{where}: [cache] level {level} needs both its size and its "
                            f"bandwidth; add cache.{missing}")
        if levels and size <= levels[-1].capacity_bytes:
            raise SpecError(f"{where}: cache.{level}_bytes ({size:g}) must be larger than "
                            f"cache.{levels[-1].name}_bytes ({levels[-1].capacity_bytes:g}); "
                            "list levels fastest and smallest first")
        levels.append(CacheLevel(level, size, bandwidth))
    return tuple(levels)


def _parse_cli_value(path: str, text: str) -> Any:
    """Turn the text of ``--set FIELD=VALUE`` into the value a TOML file would hold."""
    parser = FIELDS[path]
    if parser is _patterns:
        items = [s.strip() for s in text.split(",")]
        if not text.strip():
            raise SpecError(f"--set {path}=: no pattern; give N:M patterns separated by commas, "
                            f"e.g. --set {path}=2:4,1:4 (for a spec without a sparse tensor "
                            "core, write a spec .toml with patterns = [])")
        if not all(items):  # a typo, not a request: dropped, it would hide one
            raise SpecError(f"--set {path}={text}: an empty pattern between commas; give N:M "
                            f"patterns separated by single commas, e.g. --set {path}=2:4,1:4")
        return items
    if parser is _bool:
        lowered = text.strip().lower()
        if lowered not in ("true", "false"):
            raise SpecError(f"--set {path}={text}: expected true or false")
        return lowered == "true"
    try:
        number = float(text)
    except ValueError:
        raise SpecError(f"--set {path}={text}: expected a number such as 2.0e12") from None
    whole_number = parser in (_block_size, _sm_count) and number.is_integer()
    return int(number) if whole_number else number


def apply_overrides(flat: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Apply ``FIELD=VALUE`` strings to a flat spec; returns a new dict."""
    merged = dict(flat)
    for item in overrides:
        path, sep, text = item.partition("=")
        path = path.strip()
        if not sep:
            raise SpecError(f"--set {item!r}: write FIELD=VALUE, "
                            "e.g. --set dram_bandwidth_bytes_per_s=2e12")
        if path not in FIELDS:
            hint = _suggest(path, fields_only=True)
            raise SpecError(f"--set {item!r}: unknown field {path!r}; {hint}")
        merged[path] = _parse_cli_value(path, text)
        # Validate now so the error names the --set that caused it.
        FIELDS[path](merged[path], f"--set {path}")
    return merged
