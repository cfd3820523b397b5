"""Chart builders, data first: each ``*_data`` function is a pure function from the project's
tables (``dse.evaluate``, ``dse.evaluate_layers``, search results) to a tidy DataFrame, and
each ``*_chart`` function turns exactly that frame into an Altair chart and computes nothing.

The split keeps every number a chart shows testable by value, and lets a report write the
very frame a chart was drawn from next to it as CSV.

Charts inline their data as plain JSON records (no Altair data transformer), so they carry no
5000-row limit and no reference to a file or URL: a chart's JSON renders anywhere, offline.
Filter large tables (millions of search designs) before charting: every row is inlined.

One module per chart family; this package re-exports every builder, so
``from reports.charts import roofline_chart`` and ``reports.roofline_chart`` both work:

- :mod:`~reports.charts.sparsity_roofline`: accuracy against speedup (the Sparsity Roofline);
- :mod:`~reports.charts.roofline`: per-op points under the roofs (bound, expected, measured);
- :mod:`~reports.charts.bound_mix`: memory- and compute-bound share by format;
- :mod:`~reports.charts.feature_share`: feature share of DRAM traffic and speedup against batch;
- :mod:`~reports.charts.hardware`: accelerators side by side, energy by unit and traffic class;
- :mod:`~reports.charts.search_results`: Pareto fronts, candidates against the target;
- :mod:`~reports.charts.tornado`: sensitivity of the speedup to each hardware field;
- :mod:`~reports.charts.simulator`: Gantt timeline, utilization, gap over the roofline;

and what they share: :mod:`~reports.charts.design` (format order, fallbacks, what is fixed in
words, the caption under each chart), :mod:`~reports.charts.estimates` (the bound beside the
expectation) and :mod:`~reports.charts.labels` (point labels placed where they cover nothing).
"""

from .bound_mix import bound_mix_chart, bound_mix_data
from .design import FALLBACK_FIELDS, fallback_text
from .feature_share import feature_share_chart, feature_share_data
from .hardware import (
    energy_breakdown_chart,
    energy_breakdown_data,
    hardware_comparison_chart,
    hardware_comparison_data,
)
from .roofline import roofline_chart, roofline_data
from .search_results import pareto_chart, pareto_data, target_chart, target_data
from .simulator import (
    gantt_chart,
    gantt_data,
    sim_gap_chart,
    sim_gap_data,
    utilization_chart,
    utilization_data,
)
from .sparsity_roofline import sparsity_roofline_chart, sparsity_roofline_data
from .tornado import tornado_chart, tornado_data

__all__ = [
    "FALLBACK_FIELDS",
    "bound_mix_chart",
    "bound_mix_data",
    "energy_breakdown_chart",
    "energy_breakdown_data",
    "feature_share_chart",
    "feature_share_data",
    "fallback_text",
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
]
