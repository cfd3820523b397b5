"""Point labels that overlap nothing: each label goes to the first of the places around its
point (right, the right diagonals, left, the left diagonals, above, below, then the same
farther out) where it covers no other label, no point and no line and stays inside the plot,
measured in pixels of the chart's own scales. Vega-Lite has no label placement of its own: a
chart that labels its points sets its scale domains with :func:`padded_domain` (so the pixels
computed here are the drawn ones) and draws one text layer per place (:data:`PLACES`), each
showing the labels placed there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import altair as alt
import numpy as np
import pandas as pd

__all__ = ["PLACES", "label_layers", "padded_domain", "place_in_facets", "place_labels",
           "segment_points", "to_pixels"]

#: ``(dx, dy, align)`` of each place, in the order they are tried; text is centred vertically.
PLACES = (
    (7, 0, "left"),
    (6, -10, "left"),
    (6, 10, "left"),
    (-7, 0, "right"),
    (-6, -10, "right"),
    (-6, 10, "right"),
    (0, -12, "center"),
    (0, 12, "center"),
    (7, -20, "left"),
    (7, 20, "left"),
    (-7, -20, "right"),
    (-7, 20, "right"),
    (0, -24, "center"),
    (0, 24, "center"),
)
#: Width of one character in font sizes (an average over digits, letters, ``:`` and ``@``).
CHAR_WIDTH = 0.6


def padded_domain(values: Sequence[float], pad: float = 0.07) -> list[float]:
    """``[low, high]``: the range of ``values`` widened by ``pad`` of its span each way, room
    for the labels of the outermost points. A chart sets it with ``nice=False``, so the pixels
    of :func:`to_pixels` are the drawn ones (Vega still picks round ticks inside it)."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not finite:
        return [0.0, 1.0]
    low, high = min(finite), max(finite)
    span = high - low or abs(high) or 1.0
    return [low - pad * span, high + pad * span]


def to_pixels(values: np.ndarray, domain: Sequence[float], length: float,
              flip: bool = False) -> np.ndarray:
    """Pixel positions of ``values`` on a linear scale of ``domain`` over ``length`` pixels
    (``flip``: y, which grows downwards)."""
    low, high = domain
    pos = (np.asarray(values, dtype=np.float64) - low) / (high - low) * length
    return length - pos if flip else pos


def _box(x: float, y: float, place: int, width: float, height: float) -> tuple:
    dx, dy, align = PLACES[place]
    left = {"left": x + dx, "right": x + dx - width, "center": x - width / 2}[align]
    return left, y + dy - height / 2, left + width, y + dy + height / 2


def _overlap(a: tuple, b: tuple) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def segment_points(x0: float, y0: float, x1: float, y1: float, step: float = 5.0
                   ) -> list[tuple[float, float]]:
    """Points every ``step`` pixels along a line from ``(x0, y0)`` to ``(x1, y1)``, to pass
    as ``obstacles``: a label then keeps off the lines a chart draws, as off its points."""
    n = max(1, int(math.hypot(x1 - x0, y1 - y0) / step))
    return [(x0 + (x1 - x0) * k / n, y0 + (y1 - y0) * k / n) for k in range(n + 1)]


def _overlaps(box: tuple, boxes: np.ndarray) -> np.ndarray:
    """Overlap areas of ``box`` with each row ``(x0, y0, x1, y1)`` of ``boxes``."""
    w = np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0])
    h = np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1])
    return np.where((w > 0) & (h > 0), w * h, 0.0)


def place_labels(x: np.ndarray, y: np.ndarray, texts: Sequence[str], width: float,
                 height: float, font_size: float = 9, point: float | np.ndarray = 9,
                 obstacles: Sequence[tuple[float, float]] = (), obstacle: float = 3
                 ) -> np.ndarray:
    """The place (an index into :data:`PLACES`) of each label, -1 for an empty one.

    ``x, y``: the labelled points in pixels (:func:`to_pixels`); ``texts``: their labels;
    ``width, height``: the plot's size; ``point``: a point's size in pixels, or each
    point's (every point is an obstacle to every label but its own); ``obstacles``: more
    pixels ``(x, y)`` to keep off, each ``obstacle`` pixels wide (:func:`segment_points`). Labels
    are placed greedily, in order; each takes the first place whose box overlaps no label
    placed before it, no point and not the plot's edge, or else the place that overlaps
    least."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    half = np.concatenate([np.broadcast_to(np.asarray(point, dtype=np.float64) / 2, len(x)),
                           np.full(len(obstacles), obstacle / 2)])
    centres = np.asarray([*zip(x, y, strict=True), *obstacles], dtype=np.float64
                         ).reshape(-1, 2)
    # Row i is point i (a NaN box overlaps nothing), then the obstacles.
    boxes = np.column_stack([centres - half[:, None], centres + half[:, None]])
    placed = np.empty((0, 4))
    out = np.full(len(x), -1, dtype=np.int64)
    for i, text in enumerate(texts):
        if not text or not (np.isfinite(x[i]) and np.isfinite(y[i])):
            continue
        size = (len(str(text)) * CHAR_WIDTH * font_size, font_size + 2)
        best, best_cost = 0, math.inf
        for place in range(len(PLACES)):
            box = _box(x[i], y[i], place, *size)
            covered = _overlaps(box, boxes)
            covered[i] = 0.0  # a label may touch its own point
            # Covering another label is worst, then a point or line, then leaving the plot.
            inside = _overlap(box, (0.0, 0.0, width, height))
            cost = (10 * _overlaps(box, placed).sum() + 3 * covered.sum()
                    + 2 * (size[0] * size[1] - inside))
            if cost < best_cost:
                best, best_cost = place, cost
            if cost == 0:
                break
        out[i] = best
        placed = np.vstack([placed, _box(x[i], y[i], best, *size)])
    return out


def place_in_facets(data: pd.DataFrame, x: str, y: str, text: np.ndarray, keys: Sequence[str],
                    width: float, height: float, x_domain: Sequence[float],
                    y_domain: Sequence[float], curves: Sequence[str] = (),
                    on_lines: np.ndarray | None = None, point: float = 11) -> np.ndarray:
    """:func:`place_labels` for each facet of ``data`` (its rows of one value of each of
    ``keys``), on linear scales of ``x_domain`` and ``y_domain``: ``text`` is each row's label
    ('' for none; every row is a point, an obstacle to the labels of the others), and the
    rows of one value of each of ``curves`` joined by a line in the order of ``x`` (when
    ``curves`` or ``on_lines`` is given; only the rows of ``on_lines`` then) are lines to
    keep off."""
    place = np.full(len(data), -1, dtype=np.int64)
    keys = [k for k in keys if k in data.columns]
    groups = data.groupby(keys, sort=False, dropna=False).indices.values() if keys \
        else [np.arange(len(data))]
    for rows in groups:
        part = data.iloc[rows]
        px = to_pixels(part[x], x_domain, width)
        py = to_pixels(part[y], y_domain, height, flip=True)
        lines = []
        if curves or on_lines is not None:
            drawn = part.assign(_x=px, _y=py)
            if on_lines is not None:
                drawn = drawn[on_lines[rows]]
            drawn = drawn.dropna(subset=["_x", "_y"])
            for _, curve in (drawn.groupby(list(curves), sort=False, dropna=False) if curves
                             else [((), drawn)]):
                ordered = curve.sort_values(x)
                xy = list(zip(ordered["_x"], ordered["_y"], strict=True))
                lines += [q for a, b in zip(xy[:-1], xy[1:], strict=True)
                          for q in segment_points(*a, *b)]
        texts = [str(t) if t else "" for t in text[rows]]
        # Unlabelled points (faint ones, most often) are smaller obstacles than labelled ones.
        sizes = np.where([bool(t) for t in texts], point, point / 2)
        place[rows] = place_labels(px, py, texts, width, height, point=sizes, obstacles=lines)
    return place


def label_layers(base: alt.Chart, field: str = "label", font_size: float = 9) -> list:
    """One text layer per place of :data:`PLACES`, each drawing ``field`` of the rows whose
    ``label_place`` is that place."""
    return [base.transform_filter(alt.datum.label_place == i).mark_text(
        align=align, baseline="middle", dx=dx, dy=dy, fontSize=font_size).encode(
        text=f"{field}:N") for i, (dx, dy, align) in enumerate(PLACES)]
