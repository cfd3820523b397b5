"""reports.charts.labels: point labels placed where they cover no other label, no point and
stay inside the plot; and the charts that label their points (Sparsity Roofline, Pareto front,
target) use those places. Pixel positions are worked out by hand below."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import reports
from reports.charts.labels import (
    PLACES,
    padded_domain,
    place_labels,
    segment_points,
    to_pixels,
)


def test_padded_domain_widens_the_range_by_its_share_of_the_span():
    assert padded_domain([0.0, 10.0]) == pytest.approx([-0.7, 10.7])
    assert padded_domain([2.0, 4.0, float("nan")], pad=0.5) == pytest.approx([1.0, 5.0])
    assert padded_domain([]) == [0.0, 1.0]


def test_to_pixels_is_linear_and_flips_for_y():
    assert to_pixels(np.array([0.0, 5.0, 10.0]), [0.0, 10.0], 100).tolist() == [0, 50, 100]
    assert to_pixels(np.array([0.0, 5.0, 10.0]), [0.0, 10.0], 100, flip=True).tolist() == \
        [100, 50, 0]


def test_segment_points_are_evenly_spaced_and_include_both_ends():
    assert segment_points(0, 0, 10, 0, step=5) == [(0, 0), (5, 0), (10, 0)]


def test_two_labels_of_one_spot_take_two_places():
    """Both at (50, 50): "ab" is 2 x 0.6 x 9 = 10.8 px wide, 11 high. The first goes right
    (x 57..67.8, y 44.5..55.5), clear of the other point (44.5..55.5). For the second, right
    covers the first label and the right diagonals (y 34.5..45.5 and 54.5..65.5) overlap it by
    a pixel; left (x 32.2..43) is clear: place 3."""
    places = place_labels(np.array([50.0, 50.0]), np.array([50.0, 50.0]), ["ab", "cd"],
                          200, 100, point=11)
    assert places.tolist() == [0, 3]
    assert PLACES[3][2] == "right"  # text ends left of the point


def test_a_label_at_the_right_edge_goes_left_and_empty_labels_get_none():
    places = place_labels(np.array([195.0, 20.0]), np.array([50.0, 50.0]), ["wide label", ""],
                          200, 100)
    assert places.tolist() == [3, -1]


def test_a_line_through_the_right_place_moves_the_label():
    """A horizontal line from the point to the right (as the calibrated Sparsity Roofline joins
    an expected point to its bound) blocks place 0; place 1 (above right) is clear."""
    line = segment_points(50, 50, 150, 50)
    places = place_labels(np.array([50.0]), np.array([50.0]), ["ab"], 200, 100,
                          obstacles=line)
    assert places.tolist() == [1]


def test_the_sparsity_roofline_labels_each_format_and_keeps_labels_apart():
    """2:8 and 1:4 run dense on this hardware: both sit at the dense point's speedup, with the
    same accuracy; their labels must take different places."""
    frame = pd.DataFrame({
        "model": ["m"] * 4, "format": ["dense", "2:4", "2:8", "1:4"],
        "sparsity": [0.0, 0.5, 0.75, 0.75], "speedup": [1.0, 1.3, 1.0, 1.0],
        "accuracy": [99.0, 98.5, 98.0, 98.0],
        "shape_fallback_ops": [0, 0, 0, 0], "hw_fallback": ["", "", "dense", "dense"],
        "hw_fallback_ops": [0, 0, 41, 41]})
    data = reports.sparsity_roofline_data(frame)
    spec = reports.sparsity_roofline_chart(data).to_dict()
    values = spec["data"].get("values") or spec["datasets"][spec["data"]["name"]]
    rows = {r["format"]: r for r in values}
    assert rows["2:8"]["label"] == "2:8 (runs dense)" and rows["1:4"]["label"] == "1:4 (runs dense)"
    assert rows["dense"]["label_place"] == -1 and rows["2:4"]["label_place"] >= 0
    assert rows["2:8"]["label_place"] != rows["1:4"]["label_place"]
    # The title is a caption under the plot, its caveats in smaller type.
    assert spec["title"]["orient"] == "bottom"
    assert spec["title"]["subtitleFontSize"] < spec["title"]["fontSize"]


def test_the_roofline_names_each_knee_in_the_legend():
    layers = pd.DataFrame({"model": "m", "format": "dense", "op": ["a", "b"],
                           "unit": "tensor", "bound": "memory", "kind": "linear",
                           "flops": [1e9, 1e12], "dram_bytes": [1e8, 1e9], "time_s": [1e-3, 1e-2]})
    spec = reports.roofline_chart(reports.roofline_data(layers, "a100")).to_dict()
    legend = [layer["encoding"]["strokeDash"]["legend"]["labelExpr"]
              for layer in spec["layer"] if "strokeDash" in layer.get("encoding", {})]
    assert legend and "knee 201 FLOP/B" in legend[0]
    assert not any(layer.get("mark", {}).get("type") == "text" for layer in spec["layer"])
