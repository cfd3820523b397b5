"""Sums of ``evaluate_layers`` rows per design, and the design rows with the columns made of
them: the join of :func:`dse.roofline.energy.energy_frame` and
:func:`dse.roofline.memory.memory_frame`, in numpy rather than merges on string keys.

A layer row belongs to the design rows whose :data:`DESIGN_KEYS` print as its own (the keys
are compared as ``astype(str)`` compares them). Its design's sums are pandas' own
``groupby(sort=False).sum()`` of the layer rows, in their order: the same floats, bit for bit,
as a merge of ``groupby(DESIGN_KEYS, sort=False).sum()`` onto the design rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from workloads import Trace

__all__ = ["DESIGN_KEYS", "LayerRows", "design_sums", "layer_rows", "with_columns"]

#: The columns that name one design in ``evaluate`` and ``evaluate_layers`` frames.
DESIGN_KEYS = ("hardware", "format", "batch", "fusion", "scope")


@dataclass(frozen=True)
class LayerRows:
    """Which design each row of a ``layers`` frame belongs to, and which op of the trace it is.

    ``of_designs``: per design row, its design's number (in ``range(count)``); ``of_layers``:
    per layer row, its design's number, -1 where a key is missing (NA); ``op``: per layer row,
    the op's position in ``trace.ops``, -1 where the trace has no op of that name."""

    of_designs: np.ndarray
    of_layers: np.ndarray
    count: int
    op: np.ndarray


def _key_labels(designs: pd.Series, layers: pd.Series) -> tuple[np.ndarray, np.ndarray, int]:
    """One key column of the design rows and of the layer rows, numbered alike: equal numbers
    where the values print as the same string; -1 for NA and for a design value no layer has."""
    if designs.dtype != layers.dtype or isinstance(designs.dtype, pd.CategoricalDtype):
        designs, layers = designs.astype(str), layers.astype(str)
    of_layers, uniques = pd.factorize(layers)
    return uniques.get_indexer(designs), of_layers, len(uniques)


def layer_rows(designs: pd.DataFrame, layers: pd.DataFrame, trace: Trace) -> LayerRows:
    """The :class:`LayerRows` of ``layers`` (``evaluate_layers`` rows of ``trace``) against the
    design rows ``designs``."""
    n = len(designs)
    codes = np.zeros(n + len(layers), dtype=np.int64)
    missing = np.zeros(n + len(layers), dtype=bool)
    bound = 1  # codes < bound
    for key in DESIGN_KEYS:
        of_designs, of_layers, size = _key_labels(designs[key], layers[key])
        labels = np.concatenate([of_designs, of_layers])
        missing |= labels < 0
        if bound * max(size, 1) >= 2**62:  # renumbered, so that the numbers stay below rows**2
            codes, kept = pd.factorize(codes)
            bound = len(kept)
        codes = codes * size + np.maximum(labels, 0)
        bound *= max(size, 1)
    codes, kept = pd.factorize(codes)
    count = len(kept)
    of_designs, of_layers = codes[:n], codes[n:]
    of_designs[missing[:n]] = count  # a design no layer row can belong to: no sums
    of_layers[missing[n:]] = -1
    return LayerRows(of_designs, of_layers, count + 1, _op_positions(layers["op"], trace))


def _op_positions(op: pd.Series, trace: Trace) -> np.ndarray:
    """Per value of ``op``, the op's position in ``trace.ops``, -1 where it has none."""
    of_rows, names = pd.factorize(op.astype(str))
    # Each distinct name once (an Index equal to the trace's names is matched at once).
    positions = pd.Index(trace.ops["name"]).get_indexer(names)
    return np.where(of_rows >= 0, positions[of_rows], -1)


def design_sums(values: np.ndarray, rows: LayerRows,
                keep: np.ndarray | None = None) -> np.ndarray:
    """``(designs, columns)``: per design row, the sums of the rows of ``values`` (``(layer rows,
    columns)``) that belong to it, as pandas' ``groupby(sort=False).sum()`` makes them
    (compensated, NaN skipped); NaN where the design has no layer row. ``keep``: the layer rows
    to sum (default: all)."""
    codes = rows.of_layers
    keep = codes >= 0 if keep is None else keep & (codes >= 0)
    if not keep.all():
        values, codes = values[keep], codes[keep]
    out = np.full((rows.count, values.shape[1]), np.nan)
    if len(codes):
        sums = pd.DataFrame(values, copy=False).groupby(codes, sort=False).sum()
        out[sums.index.to_numpy(dtype=np.int64)] = sums.to_numpy(dtype=np.float64)
    return out[rows.of_designs]


def with_columns(frame: pd.DataFrame, columns: dict[str, object]) -> pd.DataFrame:
    """A copy of ``frame`` with ``columns`` (arrays, scalars, or Series on ``frame``'s index)
    set as ``out[name] = values`` one after the other sets them: a column ``frame`` has is
    replaced where it is, the others follow in order; one concatenation, not one insertion
    each."""
    out = frame.copy(deep=False)  # copy on write: setting a column leaves ``frame`` as it is
    for name in [c for c in columns if c in frame.columns]:
        out[name] = columns[name]
    added = {c: v.array if isinstance(v, pd.Series) else v
             for c, v in columns.items() if c not in frame.columns}
    if not added:
        return out
    return pd.concat([out, pd.DataFrame(added, index=frame.index)], axis=1)
