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

from . import calibration, charts, decode, spmv_charts
from .calibration import *  # noqa: F403 - the expectation beside the bound (calibration.__all__)
from .charts import *  # noqa: F403 - every chart builder is the package's API (charts.__all__)
from .decode import *  # noqa: F403 - the decode report (decode.__all__)
from .html import ReportError, Section, write_report
from .spmv_charts import *  # noqa: F403 - the SpMV benchmark's charts (spmv_charts.__all__)

__all__ = [*charts.__all__, *calibration.__all__, *decode.__all__, *spmv_charts.__all__,
           "ReportError", "Section", "write_report"]
