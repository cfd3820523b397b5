"""Published accuracy of language models under sparse formats and weight quantisation.

Language models cannot be pruned and fine-tuned here, so their accuracy comes from papers: a CSV
table (the shipped one is :data:`LLM_TABLE`), one row per published figure, columns
``LLM_COLUMNS`` (read in any order):

``model`` (a shipped language model, ``llama-3-8b``), ``pattern`` (canonical format string:
``dense``, ``2:4``, ``4:8``, ``unstructured@50%``), ``weights`` (how the weights were stored:
``fp16`` for 16-bit, ``int8``, ``fp8``, or ``int4-gG`` for int4 with one scale per G weights),
``method`` (the pruning or quantisation method: ``sparsegpt``, ``wanda``, ``dense``, ...),
``metric`` (a name of :data:`LLM_METRICS`: ``wikitext2_ppl``, WikiText-2 perplexity;
``zeroshot_mean``, a paper's mean zero-shot accuracy; ``openllm_v1_mean``, the Open LLM
Leaderboard v1 average, in percent), ``value`` (in the metric's unit), ``dataset``,
``source`` (the work: a URL, or ``owner/repo:path@commit``), ``location`` (where in it: the
table or section, and how the figure was read) and ``status`` (``published``, or
``interpolated`` for a figure derived from others, which ``location`` must then explain).

Figures from different papers are not comparable as they stand (the dense perplexity of one
model differs between evaluation setups), so every (model, metric, source) with a sparse or
quantised row must also hold that source's own dense fp16 row, and a lookup gives, beside the
figure, its **degradation** from that dense row in the metric's unit: the perplexity increase
for a perplexity, the points lost for an accuracy. Lower is better for a degradation, whatever
the metric. Where several sources, or one source's several methods, give the same (model,
pattern, weights, metric), the lookup takes the least degradation and names its method and
source (one row per (model, pattern, weights, metric, method, source)). Nothing is interpolated
between rows: a format the table lacks has no accuracy (status ``missing``), never a guess.
"""

from __future__ import annotations

import csv
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from formats import Format, FormatError, parse

from .table import AccuracyTableError

__all__ = [
    "DEFAULT_LLM_METRIC",
    "LLM_COLUMNS",
    "LLM_METRICS",
    "LLM_TABLE",
    "LLMAccuracy",
    "LLMAccuracyTable",
    "LLMMetric",
    "load_llm_accuracy_table",
    "weights_key",
]

#: The shipped table of published figures (sources in its ``source`` and ``location`` columns).
LLM_TABLE = Path(__file__).resolve().parent / "tables" / "accuracy_llm.csv"

LLM_COLUMNS = ("model", "pattern", "weights", "method", "metric", "value", "dataset", "source",
               "location", "status")
STATUSES = ("published", "interpolated")
_WEIGHTS = re.compile(r"^(fp16|int8|fp8|int4-g[1-9][0-9]*)$")


@dataclass(frozen=True)
class LLMMetric:
    """A metric of the table: its unit and whether a lower value is better."""

    name: str
    lower_is_better: bool
    unit: str
    degradation: str  # what the degradation from dense is called, in words

    def degradation_of(self, value: float, dense: float) -> float:
        """How much worse ``value`` is than ``dense`` (>= 0 when worse), in the metric's unit."""
        # Rounded: 17.67 - 6.14 is 11.53, not 11.530000000000001, in every output.
        return round(value - dense if self.lower_is_better else dense - value, 9)


#: The metrics a table may hold.
LLM_METRICS = {
    "wikitext2_ppl": LLMMetric("wikitext2_ppl", True, "perplexity",
                               "perplexity increase over dense"),
    "zeroshot_mean": LLMMetric("zeroshot_mean", False, "percent",
                               "zero-shot accuracy points lost against dense"),
    "openllm_v1_mean": LLMMetric("openllm_v1_mean", False, "percent",
                                 "Open LLM Leaderboard v1 average points lost against dense"),
}
DEFAULT_LLM_METRIC = "wikitext2_ppl"


def weights_key(weight_dtype: str | None, group_size: int | None = None) -> str:
    """The table's ``weights`` value for a run's weight storage: ``fp16`` when not quantised,
    ``int4-g128`` for int4 (group 128 unless given), ``int8`` or ``fp8`` (per channel)."""
    if weight_dtype is None:
        return "fp16"
    if weight_dtype == "int4":
        return f"int4-g{128 if group_size is None else group_size}"
    return weight_dtype


@dataclass(frozen=True)
class LLMAccuracy:
    """One model's figure under one format and weight storage.

    ``value``: the figure (NaN when ``status`` is ``missing``); ``degradation``: how much worse
    than the same source's dense model (perplexity increase, or points lost; 0 for dense);
    ``method``, ``source`` and ``location`` say where it comes from; ``note`` in words.
    """

    value: float
    degradation: float
    status: str  # "measured" (published), "interpolated" or "missing"
    method: str
    source: str
    location: str
    note: str


def _fail(where: str, row: int | None, column: str | None, problem: str):
    place = where + (f", row {row}" if row is not None else "")
    place += f", column {column!r}" if column is not None else ""
    raise AccuracyTableError(f"{place}: {problem}")


def load_llm_accuracy_table(path: str | os.PathLike[str] = LLM_TABLE) -> LLMAccuracyTable:
    """Read and validate a language-model accuracy table (see the module docstring)."""
    path = Path(path)
    where = str(path)
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            lines = list(csv.reader(handle, strict=True))
    except OSError as exc:
        raise AccuracyTableError(f"{where}: cannot read ({exc.strerror or exc}); check the "
                                 "path") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise AccuracyTableError(f"{where}: not a UTF-8 CSV ({exc})") from None
    if not lines:
        _fail(where, 1, None, "no header; the first row must be " + ",".join(LLM_COLUMNS))
    header = [cell.strip() for cell in lines[0]]
    missing = [c for c in LLM_COLUMNS if c not in header]
    unknown = [c for c in header if c not in LLM_COLUMNS]
    if missing or unknown or len(set(header)) != len(header):
        _fail(where, 1, None, "the header must be " + ",".join(LLM_COLUMNS)
              + (f" (missing {', '.join(missing)})" if missing else "")
              + (f" (unknown {', '.join(unknown)})" if unknown else ""))
    records = []
    for row, cells in enumerate(lines[1:], start=2):
        if not any(cell.strip() for cell in cells):
            continue
        if len(cells) != len(header):
            _fail(where, row, None, f"{len(cells)} cells but the header has {len(header)}; a "
                                    "comma inside a cell needs quotes")
        records.append((row, _check_row(dict(zip(header, (c.strip() for c in cells),
                                                      strict=True)), where, row)))
    return LLMAccuracyTable(records, where)


def _check_row(cells: dict[str, str], where: str, row: int) -> dict:
    for name in LLM_COLUMNS:
        if not cells[name]:
            _fail(where, row, name, f"empty; every row needs a {name}")
    try:
        fmt = parse(cells["pattern"])
    except FormatError as exc:
        _fail(where, row, "pattern", str(exc))
    if fmt.name != cells["pattern"]:
        _fail(where, row, "pattern", f"{cells['pattern']!r} is not the canonical spelling; "
                                     f"write {fmt.name!r}")
    if not _WEIGHTS.match(cells["weights"]):
        _fail(where, row, "weights", f"{cells['weights']!r}: use fp16, int8, fp8 or int4-gG "
                                     "(e.g. int4-g128)")
    if cells["metric"] not in LLM_METRICS:
        _fail(where, row, "metric", f"{cells['metric']!r}: use one of "
                                    + ", ".join(LLM_METRICS))
    try:
        value = float(cells["value"])
    except ValueError:
        _fail(where, row, "value", f"{cells['value']!r} is not a number")
    if not math.isfinite(value) or value < 0:
        _fail(where, row, "value", f"{cells['value']!r}: give a finite number >= 0")
    if cells["metric"] == "wikitext2_ppl" and value < 1:
        _fail(where, row, "value", f"{value:g}: a perplexity is at least 1")
    if not LLM_METRICS[cells["metric"]].lower_is_better and value > 100:
        _fail(where, row, "value", f"{value:g}: give accuracy in percent (0-100)")
    if cells["status"] not in STATUSES:
        _fail(where, row, "status", f"{cells['status']!r}: use published or interpolated")
    return {**cells, "pattern": fmt.name, "value": value}


class LLMAccuracyTable:
    """Published figures of language models; build one with :func:`load_llm_accuracy_table`."""

    def __init__(self, records: Iterable[tuple[int, dict]], where: str) -> None:
        self.where = where
        records = list(records)
        key_rows: dict[tuple, int] = {}
        for row, r in records:
            # One source may give one format under several methods (SparseGPT and its own);
            # each is a row of its own, and the lookup takes the least degradation.
            key = (r["model"], r["pattern"], r["weights"], r["metric"], r["method"], r["source"])
            if key in key_rows:
                _fail(where, row, "pattern", f"rows {key_rows[key]} and {row} both give model "
                      f"{key[0]!r}, pattern {key[1]!r}, weights {key[2]!r}, metric {key[3]!r}, "
                      f"method {key[4]!r} from {key[5]}; keep one")
            key_rows[key] = row
        dense: dict[tuple, float] = {}
        for row, r in records:
            if r["pattern"] == "dense" and r["weights"] == "fp16":
                key = (r["model"], r["metric"], r["source"])
                if key in dense and dense[key] != r["value"]:
                    _fail(where, row, "value", f"{r['source']} gives two dense fp16 figures for "
                          f"model {r['model']!r}, metric {r['metric']!r}; keep one")
                dense[key] = r["value"]
        for row, r in records:
            if (r["model"], r["metric"], r["source"]) not in dense:
                _fail(where, row, "source", f"{r['source']} has no dense fp16 row for model "
                      f"{r['model']!r}, metric {r['metric']!r}; add the source's own dense "
                      "figure (degradations are taken against it)")
        self._rows = [dict(r, degradation=LLM_METRICS[r["metric"]].degradation_of(
            r["value"], dense[(r["model"], r["metric"], r["source"])]), row=row)
            for row, r in records]

    @property
    def frame(self) -> pd.DataFrame:
        """The rows, with ``degradation`` (from the same source's dense row) added."""
        return pd.DataFrame(self._rows, columns=[*LLM_COLUMNS, "degradation"])

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        return f"LLMAccuracyTable({len(self)} rows, {len(self.models())} models, from {self.where})"

    def models(self) -> list[str]:
        return sorted({r["model"] for r in self._rows})

    def metrics(self, model: str) -> list[str]:
        return sorted({r["metric"] for r in self._rows if r["model"] == model})

    def lookup(self, model: str, fmt: str | Format, weights: str = "fp16",
               metric: str = DEFAULT_LLM_METRIC) -> LLMAccuracy:
        """The published figure of ``model`` under ``fmt`` with ``weights`` (a
        :func:`weights_key`) in ``metric``: the least degradation over the sources that give
        it, or status ``missing`` (NaN) with a note saying what the table has instead."""
        if metric not in LLM_METRICS:
            raise AccuracyTableError(f"metric {metric!r}: use one of {', '.join(LLM_METRICS)}")
        name = parse(fmt).name
        mine = [r for r in self._rows if r["model"] == model]
        if not mine:
            return _missing(f"no published figures for {model} in {self.where} (models: "
                            f"{', '.join(self.models()) or 'none'})")
        hits = [r for r in mine if r["pattern"] == name and r["weights"] == weights
                and r["metric"] == metric]
        if not hits:
            have = sorted({f"{r['pattern']} {r['weights']}" for r in mine
                           if r["metric"] == metric})
            return _missing(f"no published {metric} for {model} at {name} with {weights} "
                            f"weights (published: {', '.join(have) or 'none'}); not estimated")
        best = min(hits, key=lambda r: (r["degradation"], r["row"]))
        unit = LLM_METRICS[metric]
        status = "measured" if best["status"] == "published" else "interpolated"
        note = (f"{name} {weights}: {best['value']:g} {unit.unit} ({best['method']}), "
                f"{unit.degradation} {best['degradation']:+.2f}; {best['source']}, "
                f"{best['location']}")
        return LLMAccuracy(best["value"], best["degradation"], status, best["method"],
                           best["source"], best["location"], note)


def _missing(note: str) -> LLMAccuracy:
    return LLMAccuracy(math.nan, math.nan, "missing", "", "", "", note)
