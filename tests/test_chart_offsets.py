"""Grouped bars sit on their own tick: in the comparison chart each panel sizes the bars of
one format to its own format bands (the speedup panel has no dense band, so an offset scale
shared with the latency panel drew its bars left of their tick)."""

from __future__ import annotations

import json

import pytest

import dse
import reports

vl_convert = pytest.importorskip("vl_convert")


def _band_scales(spec: dict) -> dict[str, list]:
    """Name -> range of every band scale of a compiled Vega spec, facets and concats included."""
    found = {}

    def walk(node):
        if isinstance(node, dict):
            if node.get("type") == "band" and "name" in node:
                found[node["name"]] = node.get("range")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(spec)
    return found


@pytest.mark.parametrize("calibrated", [None, "h100-sxm"])
def test_each_comparison_panel_offsets_bars_within_its_own_bands(calibrated):
    designs = dse.evaluate("toy_hybrid", ["a100", "h100-sxm"], ["2:4", "1:4"],
                           calibrated=calibrated)
    spec = reports.hardware_comparison_chart(reports.hardware_comparison_data(designs)).to_dict()
    vega = vl_convert.vegalite_to_vega(json.dumps(spec))
    scales = _band_scales(vega if isinstance(vega, dict) else json.loads(vega))
    offsets = {name: json.dumps(r) for name, r in scales.items() if "xOffset" in name}
    # One offset scale per panel, each spanning its own panel's format band.
    assert len(offsets) == 2, offsets
    assert all(f"bandwidth('{name.replace('xOffset', 'x')}')" in r
               for name, r in offsets.items()), offsets
