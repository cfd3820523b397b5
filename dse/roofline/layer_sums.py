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

__all__ = ["DESIGN_KEYS", "LayerRows", "design_sums", "group_sums", "layer_rows", "with_columns"]

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
    columns)``) that belong to it, as pandas' ``groupby(sort=False).sum()`` makes them (NaN
    skipped; pandas 3.1 sums contiguous groups without NaN by ``np.add.reduceat``, the others
    compensated: see :func:`group_sums`); NaN where the design has no layer row. ``keep``: the
    layer rows to sum (default: all)."""
    codes = rows.of_layers
    keep = codes >= 0 if keep is None else keep & (codes >= 0)
    if not keep.all():
        values, codes = values[keep], codes[keep]
    out = np.full((rows.count, values.shape[1]), np.nan)
    if len(codes):
        sums = pd.DataFrame(values, copy=False).groupby(codes, sort=False).sum()
        out[sums.index.to_numpy(dtype=np.int64)] = sums.to_numpy(dtype=np.float64)
    return out[rows.of_designs]


def group_sums(values: np.ndarray, labels: np.ndarray, count: int) -> np.ndarray:
    """``(count, columns)``: per group number in ``range(count)``, the sums of the rows of
    ``values`` (``(rows, columns)``, float64) labelled with it, bit for bit those of pandas'
    ``DataFrame(values[kept]).groupby(labels[kept], sort=False).sum()`` (what
    :func:`design_sums` takes), 0 where a group has no row; rows labelled -1 are left out.

    Without the DataFrame and its grouper: the installed pandas (3.x) sums each group with
    ``np.add.reduceat`` where the groups' rows are contiguous and no value is NaN, else with
    its compensated (Kahan) loop, skipping NaN; both are called here as pandas calls them, on
    the same memory layout. Where the pandas installed is not the one this was checked
    against (:func:`_summing_checked`), through ``groupby`` itself."""
    labels = np.asarray(labels, dtype=np.intp)
    kept = labels >= 0
    if not kept.all():
        values, labels = values[kept], labels[kept]
    values = np.ascontiguousarray(values, dtype=np.float64)
    if not _summing_checked():
        return _pandas_group_sums(values, labels, count)
    return _group_sums(values, labels, count)


def _group_sums(values: np.ndarray, labels: np.ndarray, count: int) -> np.ndarray:
    """:func:`group_sums` of kept rows (C-contiguous ``values``, ``labels`` >= 0), as pandas
    3.1's ``BaseGrouper._cython_operation`` sums them."""
    out = np.zeros((count, values.shape[1]))
    if not len(labels):
        return out
    starts = np.flatnonzero(labels[1:] != labels[:-1]) + 1
    starts = np.concatenate([np.zeros(1, dtype=starts.dtype), starts])
    segments = labels[starts]
    if len(set(segments.tolist())) == len(segments) and not np.isnan(values).any():
        # Contiguous groups (the grouper's ids monotonic), no NaN: pandas' reduceat, along
        # the rows of the block a DataFrame of ``values`` holds (its transpose, a view).
        out[segments] = np.add.reduceat(values.T, starts, axis=1).T
        return out
    from pandas._libs.groupby import group_sum

    group_sum(out=out, counts=np.zeros(count, dtype=np.int64), values=values, labels=labels,
              mask=None, result_mask=None, min_count=0, is_datetimelike=False, initial=0,
              skipna=True)
    return out


def _pandas_group_sums(values: np.ndarray, labels: np.ndarray, count: int) -> np.ndarray:
    """:func:`group_sums` of kept rows through ``DataFrame.groupby``."""
    out = np.zeros((count, values.shape[1]))
    if len(labels):
        sums = pd.DataFrame(values, copy=False).groupby(labels, sort=False).sum()
        out[sums.index.to_numpy(dtype=np.int64)] = sums.to_numpy(dtype=np.float64)
    return out


_CHECKED: list[bool] = []  # [whether _group_sums gives groupby's bits], filled on first use


def _summing_checked() -> bool:
    """Whether :func:`_group_sums` gives the bits of ``DataFrame.groupby(sort=False).sum()``
    in the pandas installed, on probes whose reduceat, compensated and plain sums all differ:
    contiguous groups with and without a NaN (long enough for numpy's pairwise blocks),
    interleaved groups, infinities. Checked once per process; any difference or error, and
    :func:`group_sums` goes through ``groupby``."""
    if not _CHECKED:
        ok = True
        rng = np.random.default_rng(20261126)
        base = rng.standard_normal((600, 3)) * 10.0 ** rng.integers(-3, 17, (600, 3))
        contiguous = np.repeat(np.arange(4), [7, 300, 1, 292])
        probes = [(base, contiguous), (base, rng.permutation(contiguous)),
                  (base[:, :1], contiguous)]
        nan = base.copy()
        nan[5, 1], nan[400, 0], nan[401, 2], nan[402, 2] = np.nan, np.inf, np.inf, -np.inf
        probes += [(nan, contiguous), (nan[:, :1], contiguous)]
        try:
            for values, labels in probes:
                values = np.ascontiguousarray(values)
                mine = _group_sums(values, labels.astype(np.intp), 5)
                theirs = _pandas_group_sums(values, labels, 5)
                ok = ok and mine.tobytes() == theirs.tobytes()
        except Exception:  # another pandas: its groupby serves
            ok = False
        _CHECKED.append(ok)
    return _CHECKED[0]


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
