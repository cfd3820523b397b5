"""Accuracy tables: the measured accuracy of a model under each sparse format, and lookups.

A table is a CSV file, one row per measurement, with the columns ``COLUMNS`` (written in that
order; read in any order):

``model`` (timm name), ``pattern`` (canonical format string, as ``formats.parse(x).name``
spells it: ``dense``, ``2:4``, ``block4@87.5%``, ``unstructured@93.75%``), ``family``
(``dense``, ``nm``, ``block`` or ``unstructured``), ``block`` (block size; empty unless block),
``n`` and ``m`` (empty unless N:M), ``sparsity`` (fraction of weights removed, in [0, 1); 1 - N/M
for N:M, 0 for dense), ``metric`` (``top1``, ...), ``value`` (the accuracy), ``dataset``
(``sklearn-digits-32px``, ...) and ``source`` (what produced the row: a command or a commit).

Rows are numbered as in a spreadsheet: the header is row 1, the first measurement row 2. Every
error names the file, the row and the column. Accuracy is in percent (0-100) once loaded: where
every value of one (metric, dataset) is a fraction (<= 1) the values are multiplied by 100 and
:attr:`AccuracyTable.scale` records ``"fraction"`` for it.

Between measured patterns, :meth:`AccuracyTable.lookup` interpolates linearly in sparsity within
a family (unstructured; block of one block size; all N:M), with the dense row as every family's
point at sparsity 0, after making the family's accuracy non-increasing in sparsity. It never
extrapolates.
"""

from __future__ import annotations

import bisect
import csv
import itertools
import math
import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple, NoReturn

import numpy as np
import pandas as pd

from dse.output import OutputError, write_atomic
from formats import NM, Block, Format, FormatError, parse

__all__ = [
    "COLUMNS",
    "DEFAULT_TABLE",
    "AccuracyLookup",
    "AccuracyTable",
    "AccuracyTableError",
    "attach_accuracy",
    "load_accuracy_table",
]

#: The shipped table, measured by ``dse accuracy`` (provenance in the .json beside it).
DEFAULT_TABLE = Path(__file__).resolve().parent / "tables" / "accuracy_default.csv"

COLUMNS = ("model", "pattern", "family", "block", "n", "m", "sparsity", "metric", "value",
           "dataset", "source")
#: Columns every row fills. ``block``, ``n`` and ``m`` are filled exactly when the pattern has them.
REQUIRED = ("model", "pattern", "family", "sparsity", "metric", "value", "dataset", "source")
FAMILIES = ("dense", "nm", "block", "unstructured")
#: The key of a measurement: one value per (model, pattern, metric, dataset).
KEY = ("model", "pattern", "metric", "dataset")

Status = Literal["measured", "interpolated", "out_of_range", "missing"]
Scale = Literal["percent", "fraction"]

# The pattern holds the exact sparsity; the sparsity cell is a check on it, loose enough that a
# hand-written 0.6667 stands for 1:3's 0.666...
_SPARSITY_TOLERANCE = 1e-4
# Sparsities equal to this many decimals are one point (1:4 and 2:8 are both 0.75).
_DECIMALS = 9


class AccuracyTableError(ValueError):
    """An accuracy table that cannot be used; the message names the file, the row and the column."""


@dataclass(frozen=True)
class AccuracyLookup:
    """The accuracy of one model under one format.

    ``value`` is in percent, NaN unless ``status`` is ``"measured"`` or ``"interpolated"``;
    ``neighbours`` are the measured patterns the value comes from; ``note`` says how, in words.
    """

    value: float
    status: Status
    neighbours: tuple[str, ...]
    note: str


# --- validation -------------------------------------------------------------------------------

def _fail(where: str, row: int | None, column: str | None, problem: str) -> NoReturn:
    place = where + (f", row {row}" if row is not None else "")
    place += f", column {column!r}" if column is not None else ""
    raise AccuracyTableError(f"{place}: {problem}")


def _text(cell: Any) -> str:
    """A cell as stripped text; None and NaN (a frame's empty cell) are empty."""
    if cell is None or (not isinstance(cell, str) and pd.isna(cell)):
        return ""
    return str(cell).strip()


def _number(text: str, where: str, row: int, column: str, hint: str = "") -> float:
    try:
        value = float(text)
    except ValueError:
        _fail(where, row, column, f"{text!r} is not a number{hint}")
    if not math.isfinite(value):
        _fail(where, row, column, f"{text!r} is not a finite number")
    return value


def _whole(text: str, where: str, row: int, column: str) -> int:
    # A frame column holding ints and NaN becomes float, so 4.0 is a fine block size.
    value = _number(text, where, row, column)
    if not value.is_integer():
        _fail(where, row, column, f"{text!r} is not a whole number")
    return int(value)


def _check_header(header: Sequence[str], where: str) -> None:
    seen: set[str] = set()
    for name in header:
        if name in seen:
            _fail(where, 1, name, "appears twice in the header; keep one")
        seen.add(name)
    missing = [name for name in COLUMNS if name not in seen]
    unknown = [name for name in header if name not in COLUMNS]
    if missing or unknown:
        problems = []
        if missing:
            problems.append("missing columns " + ", ".join(repr(name) for name in missing))
        if unknown:
            problems.append("unknown columns " + ", ".join(repr(name) for name in unknown))
        _fail(where, 1, None, "; ".join(problems) + "; the header must be " + ",".join(COLUMNS))


def _pattern_fields(fmt: Format) -> dict[str, int | None]:
    """The block, n and m a pattern implies; None where the family has none."""
    return {"block": fmt.block if isinstance(fmt, Block) else None,
            "n": fmt.n if isinstance(fmt, NM) else None,
            "m": fmt.m if isinstance(fmt, NM) else None}


def _check_row(cells: Mapping[str, Any], where: str, row: int) -> dict[str, Any]:
    """One validated measurement, typed; the value is still on the file's scale."""
    text = {name: _text(cells[name]) for name in COLUMNS}
    for name in REQUIRED:
        if not text[name]:
            _fail(where, row, name, f"empty; every row needs a {name}")
    pattern = text["pattern"]
    try:
        fmt = parse(pattern)
    except FormatError as exc:
        _fail(where, row, "pattern", str(exc))
    if fmt.name != pattern:
        _fail(where, row, "pattern", f"{pattern!r} is not the canonical spelling; "
                                     f"write {fmt.name!r}")
    inconsistent = f"; the row is inconsistent with pattern {pattern!r}, fix one of them"
    if text["family"] not in FAMILIES:
        _fail(where, row, "family", f"unknown family {text['family']!r}; use "
                                    + ", ".join(FAMILIES))
    if text["family"] != fmt.family:
        _fail(where, row, "family", f"{text['family']!r} but the pattern's family is "
                                    f"{fmt.family!r}{inconsistent}")
    fields = _pattern_fields(fmt)
    for name, expected in fields.items():
        if expected is None:
            if text[name]:
                _fail(where, row, name, f"{text[name]!r} given, but pattern {pattern!r} has no "
                                        f"{name}; leave it empty")
        elif not text[name]:
            _fail(where, row, name, f"empty; pattern {pattern!r} needs {name} = {expected}")
        elif (found := _whole(text[name], where, row, name)) != expected:
            _fail(where, row, name, f"{found} but the pattern has {name} = {expected}"
                                    f"{inconsistent}")
    sparsity = _number(text["sparsity"], where, row, "sparsity",
                       "; write the fraction of weights removed, e.g. 0.875")
    if not 0.0 <= sparsity < 1.0:
        hint = f" ({sparsity / 100:g} for {sparsity:g}%)" if 1.0 < sparsity < 100.0 else ""
        _fail(where, row, "sparsity", f"{sparsity:g} is outside [0, 1); write the fraction of "
                                      f"weights removed{hint}")
    if abs(sparsity - fmt.sparsity) > _SPARSITY_TOLERANCE:
        _fail(where, row, "sparsity", f"{sparsity:g} but the pattern's sparsity is "
                                      f"{fmt.sparsity:g}{inconsistent}")
    value = _number(text["value"], where, row, "value")
    if not 0.0 <= value <= 100.0:
        _fail(where, row, "value", f"{value:g} is outside [0, 100]; give accuracy in percent "
                                   "(0-100) or as a fraction (0-1)")
    return {"model": text["model"], "pattern": fmt.name, "family": fmt.family, **fields,
            "sparsity": fmt.sparsity, "metric": text["metric"], "value": value,
            "dataset": text["dataset"], "source": text["source"]}


def _check_unique(records: Sequence[tuple[int, dict[str, Any]]], where: str) -> None:
    first: dict[tuple[str, ...], int] = {}
    for row, record in records:
        key = tuple(record[name] for name in KEY)
        if key in first:
            _fail(where, row, "pattern", f"rows {first[key]} and {row} both measure model "
                  f"{key[0]!r}, pattern {key[1]!r}, metric {key[2]!r}, dataset {key[3]!r}; "
                  "keep one")
        first[key] = row


def _scales(records: Sequence[tuple[int, dict[str, Any]]],
            where: str) -> dict[tuple[str, str], Scale]:
    """The scale of each (metric, dataset): fractions when every nonzero value is <= 1."""
    # Row number and value of the first fraction (0 < v <= 1) and first percent (v > 1) value;
    # 0 reads the same on both scales and decides nothing.
    fraction: dict[tuple[str, str], tuple[int, float]] = {}
    percent: dict[tuple[str, str], tuple[int, float]] = {}
    for row, record in records:
        group = (record["metric"], record["dataset"])
        value = record["value"]
        if 0.0 < value <= 1.0:
            fraction.setdefault(group, (row, value))
        elif value > 1.0:
            percent.setdefault(group, (row, value))
    for group, (small_row, small) in fraction.items():
        if group in percent:
            big_row, big = percent[group]
            _fail(where, small_row, "value",
                  f"mixed scales: row {small_row} is {small:g} but row {big_row} is {big:g}; "
                  "use percent (0-100) or fractions (0-1) throughout (metric "
                  f"{group[0]!r}, dataset {group[1]!r})")
    groups = {(record["metric"], record["dataset"]) for _, record in records}
    return {group: "fraction" if group in fraction else "percent" for group in sorted(groups)}


def _table(header: Sequence[str], rows: Iterable[tuple[int, Mapping[str, Any]]],
           where: str) -> AccuracyTable:
    _check_header(header, where)
    records = [(row, _check_row(cells, where, row)) for row, cells in rows]
    _check_unique(records, where)
    scale = _scales(records, where)
    frame = pd.DataFrame([record for _, record in records], columns=list(COLUMNS))
    for name in ("block", "n", "m"):
        frame[name] = frame[name].astype("Int64")
    for name in ("sparsity", "value"):
        frame[name] = frame[name].astype(float)
    fractions = [scale[(metric, dataset)] == "fraction"
                 for metric, dataset in zip(frame["metric"], frame["dataset"], strict=True)]
    frame.loc[fractions, "value"] *= 100.0
    return AccuracyTable(frame, scale, where)


def load_accuracy_table(path: str | os.PathLike[str] = DEFAULT_TABLE) -> AccuracyTable:
    """Read and validate an accuracy table CSV (see the module docstring for the schema);
    without a path, the shipped table (:data:`DEFAULT_TABLE`)."""
    path = Path(path)
    where = str(path)
    reader = None
    try:
        # utf-8-sig: spreadsheets often start a UTF-8 CSV with a byte-order mark.
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle, strict=True)
            lines = list(reader)
    except OSError as exc:
        raise AccuracyTableError(f"{where}: cannot read ({exc.strerror or exc}); "
                                 "check the path") from None
    except UnicodeDecodeError:
        raise AccuracyTableError(f"{where}: not UTF-8 text; save the table as a UTF-8 CSV") \
            from None
    except csv.Error as exc:
        line = reader.line_num if reader is not None else "?"
        raise AccuracyTableError(f"{where}, line {line}: malformed CSV ({exc}); check the "
                                 "quotes around that cell") from None
    if not lines or not any(cell.strip() for cell in lines[0]):
        _fail(where, 1, None, "no header; the first row must be " + ",".join(COLUMNS))
    header = [cell.strip() for cell in lines[0]]

    def rows() -> Iterable[tuple[int, dict[str, str]]]:
        for row, cells in enumerate(lines[1:], start=2):
            if not any(cell.strip() for cell in cells):
                continue  # blank lines and a spreadsheet's trailing ",,,," rows
            if len(cells) != len(header):
                _fail(where, row, None, f"{len(cells)} cells but the header has {len(header)}; "
                                        "a comma inside a cell needs quotes")
            yield row, dict(zip(header, cells, strict=True))

    return _table(header, rows(), where)


# --- the table --------------------------------------------------------------------------------

class AccuracyTable:
    """Measured accuracies, in percent, one row per (model, pattern, metric, dataset).

    Build one with :func:`load_accuracy_table` or :meth:`from_frame`; both validate. ``where``
    names the table in messages; ``scale`` maps each (metric, dataset) to the scale its values
    had on input (``"percent"`` or ``"fraction"``; fractions were multiplied by 100).
    """

    def __init__(self, frame: pd.DataFrame, scale: Mapping[tuple[str, str], Scale],
                 where: str) -> None:
        self._frame = frame.reset_index(drop=True)
        self.scale: dict[tuple[str, str], Scale] = dict(scale)
        self.where = where
        # Lookups run per design in a search: index the rows once, build curves on demand.
        self._measured: dict[tuple[str, str, str], dict[str, _Point]] = {}
        for model, pattern, family, block, sparsity, metric, value, dataset in zip(
                *(self._frame[name] for name in ("model", "pattern", "family", "block",
                                                 "sparsity", "metric", "value", "dataset")),
                strict=True):
            block = None if pd.isna(block) else int(block)
            point = _Point(pattern, family, block, float(sparsity), float(value))
            self._measured.setdefault((model, metric, dataset), {})[pattern] = point
        self._curves: dict[tuple[str, str, str, str, int | None], _Curve | None] = {}

    @classmethod
    def from_frame(cls, frame: pd.DataFrame,
                   where: str = "accuracy table (in memory)") -> AccuracyTable:
        """Validate an in-memory table with the CSV's columns; row N is the frame's row N - 2,
        as if written to CSV. ``where`` names it in error messages."""
        if not isinstance(frame, pd.DataFrame):
            raise AccuracyTableError(f"{where}: expected a pandas DataFrame, got "
                                     f"{type(frame).__name__}")
        header = [str(name).strip() for name in frame.columns]

        def rows() -> Iterable[tuple[int, dict[str, Any]]]:
            # Lazy, so that a bad header (duplicate columns) is reported before rows are read.
            for row, cells in enumerate(frame.itertuples(index=False, name=None), start=2):
                yield row, dict(zip(header, cells, strict=True))

        return _table(header, rows(), where)

    @property
    def frame(self) -> pd.DataFrame:
        """A copy of the rows, columns ``COLUMNS``, values in percent."""
        return self._frame.copy()

    def to_csv(self, path: str | os.PathLike[str]) -> None:
        """Write the table (values in percent) atomically: a temporary file renamed into place."""
        path = Path(path)
        text = self._frame.to_csv(index=False, columns=list(COLUMNS))
        try:
            write_atomic(path, lambda handle: handle.write(text.encode("utf-8")))
        except OutputError as exc:
            raise AccuracyTableError(str(exc)) from None

    def __len__(self) -> int:
        return len(self._frame)

    def __repr__(self) -> str:
        return (f"AccuracyTable({len(self)} rows, {len(self.models())} models, "
                f"from {self.where})")

    def models(self) -> list[str]:
        """The models with at least one row, sorted."""
        return sorted(self._frame["model"].unique())

    def patterns(self, model: str) -> list[str]:
        """The patterns measured for ``model`` (any metric or dataset): dense, N:M, block by
        block size, unstructured, each by sparsity. Empty for an unknown model."""
        rows = self._frame[self._frame["model"] == model]
        order = rows.assign(rank=rows["family"].map(FAMILIES.index),
                            size=rows["block"].fillna(0))
        order = order.sort_values(["rank", "size", "sparsity", "pattern"])
        return list(dict.fromkeys(order["pattern"]))

    def lookup(self, model: str, fmt: str | Format, metric: str = "top1",
               dataset: str | None = None) -> AccuracyLookup:
        """The accuracy (percent) of ``model`` under ``fmt``: measured, interpolated within its
        family, or NaN with status ``out_of_range`` / ``missing``.

        ``dataset=None`` needs the model's ``metric`` rows to come from one dataset; otherwise
        this raises :class:`AccuracyTableError` asking to name one.
        """
        fmt = parse(fmt)
        groups = [key for key in self._measured if key[0] == model]
        if not groups:
            return _missing(f"no rows for model {model!r} in {self.where} (models: "
                            f"{', '.join(self.models()) or 'none'})")
        datasets = sorted(key[2] for key in groups if key[1] == metric)
        if not datasets:
            metrics = sorted({key[1] for key in groups})
            return _missing(f"model {model!r} has no {metric!r} rows in {self.where} "
                            f"(metrics: {', '.join(metrics)})")
        if dataset is None:
            if len(datasets) > 1:
                raise AccuracyTableError(
                    f"{self.where}: model {model!r} has {metric!r} rows on datasets "
                    f"{', '.join(datasets)}; name one with dataset=")
            dataset = datasets[0]
        if dataset not in datasets:
            return _missing(f"model {model!r} has no {metric!r} rows on dataset {dataset!r} "
                            f"in {self.where} (datasets: {', '.join(datasets)})")
        measured = self._measured[(model, metric, dataset)]
        if fmt.name in measured:
            value = measured[fmt.name].value
            return AccuracyLookup(value, "measured", (fmt.name,),
                                  f"{fmt.name} measured: {value:.2f}")
        what = f"model {model!r} ({metric} on {dataset})"
        block = fmt.block if isinstance(fmt, Block) else None
        key = (model, metric, dataset, fmt.family, block)
        if key not in self._curves:
            self._curves[key] = _curve(measured, fmt.family, block)
        curve = self._curves[key]
        if curve is None:
            label = f"block{block}" if block is not None else _LABELS[fmt.family]
            return _missing(f"no {label} rows for {what} (measured: {', '.join(measured)}); "
                            "not estimated")
        return _estimate(curve, fmt, what)

    def lookup_many(self, model: str, formats: Iterable[str | Format], metric: str = "top1",
                    dataset: str | None = None) -> pd.DataFrame:
        """:meth:`lookup` for each format: columns ``format`` (canonical), ``accuracy``
        (percent), ``status`` and ``note``, one row per format in the order given."""
        records = []
        for spec in formats:
            fmt = parse(spec)
            found = self.lookup(model, fmt, metric, dataset)
            records.append({"format": fmt.name, "accuracy": found.value,
                            "status": found.status, "note": found.note})
        return pd.DataFrame(records, columns=["format", "accuracy", "status", "note"])


# --- joining accuracy onto designs -------------------------------------------------------------

def attach_accuracy(frame: pd.DataFrame,
                    accuracy: AccuracyTable | Mapping[str, tuple[float, str]],
                    metric: str = "top1", dataset: str | None = None) -> pd.DataFrame:
    """Add ``accuracy`` (percent; NaN where the table has no value) and ``accuracy_status``
    (``measured``, ``interpolated``, ``out_of_range``, ``missing``) to a frame of designs (any
    frame with ``model`` and ``format`` columns), in place; returns it.

    ``accuracy`` is a table, looked up per (model, format) with ``metric`` and ``dataset``, or,
    for one model's rows, a ``{format name: (percent, status)}`` mapping already looked up
    (formats it lacks get NaN, ``missing``). Label columns come out as categoricals built from
    codes: millions of rows in milliseconds. The one place accuracy meets designs: search,
    reports and the command line call it.
    """
    formats = pd.Categorical(frame["format"])
    if isinstance(accuracy, AccuracyTable):
        models = pd.Categorical(frame["model"])
        pairs = np.unique(np.stack([models.codes, formats.codes]), axis=1).T
        index = {(m, f): i for i, (m, f) in enumerate(pairs)}
        found = []
        for m, f in pairs:
            try:
                hit = accuracy.lookup(str(models.categories[m]), str(formats.categories[f]),
                                      metric, dataset)
                found.append((hit.value, hit.status))
            except AccuracyTableError:  # several datasets and none named: no one value
                found.append((math.nan, "missing"))
        codes = np.array([index[(m, f)] for m, f in zip(models.codes, formats.codes,
                                                         strict=True)], dtype=np.int64)
    else:
        found = [accuracy.get(str(n), (math.nan, "missing")) for n in formats.categories]
        codes = formats.codes.astype(np.int64)
    values = np.array([v for v, _ in found], dtype=np.float64)
    frame["accuracy"] = values[codes] if len(codes) else np.empty(0)
    statuses = [st for _, st in found] or ["missing"]
    unique, inverse = np.unique(np.array(statuses, dtype=object), return_inverse=True)
    frame["accuracy_status"] = pd.Categorical.from_codes(
        inverse[codes] if len(codes) else codes, categories=pd.Index(unique, dtype=object))
    return frame


# --- interpolation ----------------------------------------------------------------------------

_LABELS = {"dense": "dense", "nm": "N:M", "block": "block", "unstructured": "unstructured"}


class _Point(NamedTuple):
    """One measured row: accuracy in percent at the pattern's sparsity (a fraction)."""

    pattern: str
    family: str
    block: int | None
    sparsity: float
    value: float


@dataclass(frozen=True)
class _Curve:
    """A family's measured points, one per sparsity (ascending), ready to interpolate."""

    label: str
    sparsity: tuple[float, ...]
    raw: tuple[float, ...]  # mean of the patterns at each sparsity
    capped: tuple[float, ...]  # running minimum of raw: never rising with sparsity
    names: tuple[tuple[str, ...], ...]  # the patterns at each sparsity


def _curve(measured: Mapping[str, _Point], family: str, block: int | None) -> _Curve | None:
    """The points of ``family`` (of one block size for block), or None where it has no rows."""
    # Block sizes differ in accuracy, so block8 rows say nothing about block4.
    members = [point for point in measured.values()
               if point.family == family and (block is None or point.block == block)]
    if family == "dense" or not members:
        return None
    # The dense model is every family's point at sparsity 0.
    dense = [point for point in measured.values() if point.family == "dense"]
    at: dict[float, list[_Point]] = {}
    for point in dense + members:
        at.setdefault(round(point.sparsity, _DECIMALS), []).append(point)
    sparsity = tuple(sorted(at))
    # Patterns sharing a sparsity (1:4 and 2:8) count as one point: their mean.
    raw = tuple(statistics.fmean(point.value for point in at[s]) for s in sparsity)
    # Accuracy does not rise with pruning; a noisy higher point is capped so lookups are monotone.
    capped = tuple(itertools.accumulate(raw, min))
    names = tuple(tuple(point.pattern for point in at[s]) for s in sparsity)
    label = f"block{block}" if block is not None else _LABELS[family]
    return _Curve(label, sparsity, raw, capped, names)


def _missing(note: str) -> AccuracyLookup:
    return AccuracyLookup(math.nan, "missing", (), note)


def _percent(sparsity: float) -> str:
    return f"{round(sparsity * 100.0, 6):g}%"


def _estimate(curve: _Curve, fmt: Format, what: str) -> AccuracyLookup:
    """Linear interpolation in sparsity between the curve's capped points; NaN outside them."""
    target = round(fmt.sparsity, _DECIMALS)
    s = curve.sparsity
    if not s[0] <= target <= s[-1]:
        return AccuracyLookup(math.nan, "out_of_range", (),
                              f"{fmt.name}: sparsity {_percent(target)} is outside the measured "
                              f"{curve.label} range {_percent(s[0])} to {_percent(s[-1])} for "
                              f"{what}; not extrapolated")

    def point(i: int) -> str:
        detail = f"{curve.capped[i]:.2f}"
        if len(curve.names[i]) > 1:
            detail += ", their mean"
        if curve.capped[i] < curve.raw[i]:
            detail += f", capped from {curve.raw[i]:.2f}"
        return f"{'/'.join(curve.names[i])} ({detail})"

    i = bisect.bisect_left(s, target)
    if s[i] == target:
        return AccuracyLookup(curve.capped[i], "interpolated", curve.names[i],
                              f"{fmt.name} not measured; same sparsity as {point(i)}")
    lo, hi = i - 1, i
    weight = (target - s[lo]) / (s[hi] - s[lo])
    value = curve.capped[lo] + weight * (curve.capped[hi] - curve.capped[lo])
    return AccuracyLookup(value, "interpolated", curve.names[lo] + curve.names[hi],
                          f"{fmt.name} interpolated at {_percent(target)} between {point(lo)} "
                          f"and {point(hi)}: {value:.2f}")
