"""Printed numbers: one time unit per column, shares as percentages, no <NA>."""

from __future__ import annotations

import math

from dse.cli.tables import missing, seconds_column, share


def test_one_unit_per_column_fitting_its_largest_value():
    name, cells = seconds_column([7.14e-5, 1.09169e-2, math.nan], "latency")
    assert name == "latency (ms)"
    assert cells == ["0.0714", "10.9169", "-"]
    assert seconds_column([2e-9, 3e-9], "t") == ("t (ns)", ["2.00", "3.00"])
    assert seconds_column([0.0, 1.5], "t") == ("t (s)", ["0.00", "1.50"])


def test_shares_and_missing_values():
    assert share(0.583) == "58.3%" and share(float("nan")) == "-" and share(None) == missing()
