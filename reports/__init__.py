"""Reports: data-first chart builders (Altair) and self-contained HTML reports.

Usage::

    import dse, reports
    layers = dse.evaluate_layers("convnext_tiny", "a100", ["2:4", "block4@87.5%"])
    data = reports.roofline_data(layers, "a100")   # a tidy frame, testable by value
    section = reports.Section("roofline", "Roofline", reports.roofline_chart(data), data)
    reports.write_report("out/report", "ConvNeXt-Tiny on an A100", [section])  # + PNG/SVG/CSV

Each ``*_data`` builder is a pure function returning a tidy DataFrame; each ``*_chart``
function only draws that frame. ``write_report`` inlines Vega, Vega-Lite and vega-embed into
``index.html``, so the page works offline.
"""

from .charts import (
    bound_mix_chart,
    bound_mix_data,
    feature_share_chart,
    feature_share_data,
    gantt_chart,
    gantt_data,
    hardware_comparison_chart,
    hardware_comparison_data,
    pareto_chart,
    pareto_data,
    roofline_chart,
    roofline_data,
    sim_gap_chart,
    sim_gap_data,
    sparsity_roofline_chart,
    sparsity_roofline_data,
    target_chart,
    target_data,
    tornado_chart,
    tornado_data,
    utilization_chart,
    utilization_data,
)
from .html import ReportError, Section, write_report

__all__ = [
    "ReportError",
    "Section",
    "bound_mix_chart",
    "bound_mix_data",
    "feature_share_chart",
    "feature_share_data",
    "gantt_chart",
    "gantt_data",
    "hardware_comparison_chart",
    "hardware_comparison_data",
    "pareto_chart",
    "pareto_data",
    "roofline_chart",
    "roofline_data",
    "sim_gap_chart",
    "sim_gap_data",
    "sparsity_roofline_chart",
    "sparsity_roofline_data",
    "target_chart",
    "target_data",
    "tornado_chart",
    "tornado_data",
    "utilization_chart",
    "utilization_data",
    "write_report",
]
