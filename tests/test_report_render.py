"""Reports render in a real headless Chromium, offline, with every chart drawn.

No mocks: the report is built from real `dse.evaluate` / `dse.evaluate_layers` output, written
to disk by `reports.write_report` and opened from file:// in the system Chromium (installed with
apt-get when missing, see tests/browser.py). The screenshot is kept in test-artifacts/.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests.browser import ensure_chromium, render_report

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"
MODEL = "convnext_tiny"
HARDWARE = "a100"
FORMATS = ["2:4", "block16@87.5%", "unstructured@87.5%"]


@pytest.fixture(scope="session")
def chromium() -> Path:
    return ensure_chromium()


def _with_accuracy(evaluated: pd.DataFrame) -> pd.DataFrame:
    """The evaluated rows plus an accuracy column from the shipped accuracy table."""
    from dse.accuracy import DEFAULT_TABLE, attach_accuracy, load_accuracy_table

    return attach_accuracy(evaluated.copy(), load_accuracy_table(DEFAULT_TABLE))


def _report_sections():
    import accelerator_models
    import reports
    from dse import evaluate, evaluate_layers

    hardware = accelerator_models.load(HARDWARE)
    evaluated = evaluate(MODEL, hardware, FORMATS, batches=[1, 8, 32], fusion="unfused")
    layers = evaluate_layers(MODEL, hardware, FORMATS, 1, scope="all")
    roof = reports.sparsity_roofline_data(_with_accuracy(evaluated[evaluated["batch"] == 1]))
    per_layer = reports.roofline_data(layers, hardware)
    mix = reports.bound_mix_data(layers)
    sections = [
        reports.Section("sparsity-roofline", "Sparsity Roofline",
                        reports.sparsity_roofline_chart(roof), roof),
        reports.Section("roofline", "Per-layer roofline", reports.roofline_chart(per_layer),
                        per_layer),
        reports.Section("bound-mix", "Bound mix", reports.bound_mix_chart(mix), mix),
    ]
    if hasattr(reports, "feature_share_data"):
        shares = reports.feature_share_data(evaluated)
        sections.append(reports.Section("feature-share", "Feature share by batch",
                                        reports.feature_share_chart(shares), shares))
    return sections, evaluated


def test_report_renders_offline_with_every_chart_drawn(chromium, tmp_path):
    from reports import write_report

    sections, evaluated = _report_sections()
    index = write_report(tmp_path / "report", "dse report (render test)", sections,
                         tables=[("Designs", evaluated)])
    assert index.name == "index.html" and index.is_file()

    result = render_report(index, tmp_path / "report-render.png", chromium=chromium)

    expected = {f"chart-{s.name}" for s in sections}
    assert set(result.charts) == expected, result.problems()
    assert result.expected_charts == len(sections), result.problems()
    assert result.rendered_flag == len(sections), result.problems()
    assert all(n > 0 for n in result.charts.values()), result.problems()
    assert not result.timed_out, result.problems()
    assert result.requests == [], result.problems()
    assert result.console_errors == [], result.problems()
    assert result.page_errors == [], result.problems()
    assert result.embed_errors == [], result.problems()
    assert result.ok

    ARTIFACTS.mkdir(exist_ok=True)
    kept = ARTIFACTS / "report-render.png"
    shutil.copyfile(result.screenshot, kept)
    assert kept.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert kept.stat().st_size > 10_000


BROKEN_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8">
<script src="https://cdn.example.com/vega.js"></script>
<script src="local-helper.js"></script>
</head><body>
<div class="chart" id="chart-broken"></div>
<script>
  window.__dse_errors = [];
  vegaEmbed("#chart-broken", {"mark": "bar"}, {"renderer": "svg"})
    .then(() => { window.__dse_rendered = 1; });
</script>
</body></html>
"""


def test_harness_detects_network_use_and_undrawn_charts(chromium, tmp_path):
    """A page that loads Vega from a CDN must fail every check: the request is recorded (and
    blocked), so vegaEmbed is undefined, the chart draws nothing and the flag never appears."""
    index = tmp_path / "index.html"
    index.write_text(BROKEN_PAGE, encoding="utf-8")
    (tmp_path / "local-helper.js").write_text("window.helper = 1;\n", encoding="utf-8")

    result = render_report(index, tmp_path / "broken.png", timeout_s=3, chromium=chromium)

    assert "https://cdn.example.com/vega.js" in result.requests
    # Sibling files are blocked too: a report must inline everything into index.html.
    assert (tmp_path / "local-helper.js").as_uri() in result.requests
    assert result.charts == {"chart-broken": 0}
    assert result.expected_charts == 1
    assert result.rendered_flag is None and result.timed_out
    assert any("vegaEmbed is not defined" in e for e in result.page_errors)
    assert result.console_errors  # the blocked loads are logged as failed resources
    assert not result.ok
    assert result.screenshot.is_file()


# Vega's SVG layout, by hand: chart "drawn" has two bars; chart "axes-only" has axis ticks and
# a label but an empty bar group, as an embed of an empty data set draws.
SVG_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"></head><body>
<div class="chart" id="chart-drawn"><svg class="marks" width="200" height="100">
  <g class="mark-group role-frame root"><g>
    <g class="mark-rule role-axis-tick"><line x2="5"></line><line x2="5"></line></g>
    <g class="mark-text role-axis-label"><text>0</text></g>
    <g class="mark-rect role-mark marks"><path d="M0,0h10v50h-10Z"></path>
      <path d="M20,0h10v80h-10Z"></path></g>
  </g></g></svg></div>
<div class="chart" id="chart-axes-only"><svg class="marks" width="200" height="100">
  <g class="mark-group role-frame root"><g>
    <g class="mark-rule role-axis-tick"><line x2="5"></line><line x2="5"></line></g>
    <g class="mark-text role-axis-label"><text>0</text></g>
    <g class="mark-rect role-mark marks"></g>
  </g></g></svg></div>
<script>window.__dse_errors = []; window.__dse_rendered = 2;</script>
</body></html>
"""


def test_harness_counts_data_marks_not_axes(chromium, tmp_path):
    index = tmp_path / "index.html"
    index.write_text(SVG_PAGE, encoding="utf-8")

    result = render_report(index, tmp_path / "svg.png", timeout_s=10, chromium=chromium)

    assert result.charts == {"chart-drawn": 2, "chart-axes-only": 0}, result.problems()
    assert result.all_marks == {"chart-drawn": 5, "chart-axes-only": 3}
    assert result.rendered_flag == 2 and not result.timed_out
    assert not (result.requests or result.console_errors or result.page_errors)
    assert not result.ok  # one chart drew no data
