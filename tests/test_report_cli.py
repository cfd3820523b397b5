"""The report commands end to end: `dse study feature-overhead`, `dse report`, `dse search
--report`, rendered in headless Chromium with the network off; and their bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.browser import ensure_chromium, render_report
from workloads import trace_names

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def chromium() -> Path:
    return ensure_chromium()


def dse(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dse", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def assert_renders(index: Path, chromium: Path, name: str) -> None:
    result = render_report(index, index.parent / "screenshot.png", chromium=chromium)
    assert result.expected_charts >= 1
    assert all(marks > 0 for marks in result.charts.values()), result.charts
    assert result.rendered_flag == result.expected_charts
    assert not result.requests and not result.console_errors and not result.page_errors
    keep = REPO / "test-artifacts"
    keep.mkdir(exist_ok=True)
    (keep / f"{name}.png").write_bytes(result.screenshot.read_bytes())


def test_feature_overhead_report(tmp_path, chromium):
    run = dse("study", "feature-overhead", "--out", "fo", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    folder = tmp_path / "fo"
    shares = pd.read_csv(folder / "table-feature-share-at-batch-1-and-32.csv")
    models = {m for m in trace_names() if m != "toy_hybrid"}
    assert set(shares["model"]) == models  # every shipped model, at batch 1 and at batch 32
    assert shares[["feature_share_batch_1", "feature_share_batch_32"]].notna().all().all()
    # Features grow with the batch, weights do not: the share rises for every model and format.
    assert (shares["feature_share_batch_32"] > shares["feature_share_batch_1"]).all()
    page = (folder / "index.html").read_text()
    assert all(m in page for m in models)
    for name in ("feature-share", "tornado"):
        assert (folder / f"{name}.png").stat().st_size > 0
        assert (folder / f"{name}.svg").read_text().startswith("<svg")
    assert_renders(folder / "index.html", chromium, "feature-overhead")


def test_report_and_search_report_render(tmp_path, chromium):
    run = dse("report", "--model", "convnext_tiny", "--model", "swin_tiny", "--hw", "a100",
              "--format", "2:4", "--format", "block16@87.5%", "--format", "unstructured@87.5%",
              "--batch", "1", "--batch", "32", "--out", "rep", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert_renders(tmp_path / "rep" / "index.html", chromium, "report")
    run = dse("search", "--target", "1.3x_over_2:4", "--report", "sr", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert_renders(tmp_path / "sr" / "index.html", chromium, "search")
    run = dse("search", "--objective", "pareto", "--report", "sp", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "sp" / "index.html").exists()


@pytest.mark.parametrize("argv", [
    ["report", "--model", "convnext_tiny", "--hw", "a100", "--format", "2:4", "--out",
     "a-file/rep"],
    ["report", "--model", "convnext_tiny", "--hw", "a100", "--format", "2:4", "--out",
     "a-file"],
    ["compare", "--hw", "a100", "--model", "convnext_tiny", "--format", "2:4", "--report",
     "missing/rep"],
    ["study", "feature-overhead", "--model", "convnext_tiny", "--out", "missing/fo"],
])
def test_unwritable_report_folders(tmp_path, argv):
    (tmp_path / "a-file").write_text("in the way")
    result = dse(*argv, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert not list(tmp_path.rglob("index.html"))
