"""A real headless browser for tests: render an HTML report in the system Chromium and report
what was drawn, what the page tried to fetch and which errors it raised.

The browser is Debian's `chromium` package (installed with apt-get when missing and we are
root), driven by Playwright through `executable_path`; `playwright install` is never used. The
page runs offline: the only request let through is the report's own index.html, every other
request is aborted and recorded, so a report that needs the network fails its test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

# Headless, no sandbox (we run as root in containers), no GPU, and none of Chromium's own
# background traffic (updates, sync, safe-browsing lists), which would otherwise show up as
# refused connections.
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
)

# URL schemes that never reach the network; they are not counted as requests.
LOCAL_SCHEMES = ("data:", "blob:", "about:")

# Runs in the page: per chart div, the number of data marks drawn (items of vega marks with
# role "mark", i.e. not axes, legends or titles), all drawn SVG items, and canvases that hold
# at least one non-transparent pixel.
_COUNT_MARKS_JS = """
() => {
  const shapes = 'path, rect, line, text, circle, ellipse, polygon, polyline, image, use';
  const out = {};
  document.querySelectorAll('div.chart').forEach((div, i) => {
    const id = div.id || ('chart#' + i);
    let marks = 0;
    div.querySelectorAll('g.role-mark').forEach((g) => {
      if (g.classList.contains('mark-group')) return;
      for (const child of g.children) if (child.matches(shapes)) marks += 1;
    });
    let all = 0;
    div.querySelectorAll('g[class*="mark-"]').forEach((g) => {
      for (const child of g.children) if (child.matches(shapes)) all += 1;
    });
    let canvases = 0;
    div.querySelectorAll('canvas').forEach((c) => {
      if (!c.width || !c.height) return;
      let ctx = null;
      try { ctx = c.getContext('2d', {willReadFrequently: true}); } catch (e) { return; }
      if (!ctx) return;
      const px = ctx.getImageData(0, 0, c.width, c.height).data;
      for (let k = 3; k < px.length; k += 4) if (px[k] !== 0) { canvases += 1; break; }
    });
    out[id] = {marks: marks, all: all, canvases: canvases};
  });
  return out;
}
"""

_STATUS_JS = """
() => ({
  expected: document.querySelectorAll('div.chart').length,
  rendered: (window.__dse_rendered === undefined) ? null : window.__dse_rendered,
  errors: Array.isArray(window.__dse_errors) ? window.__dse_errors.map(String) : [],
})
"""

_DONE_JS = """
() => {
  const n = document.querySelectorAll('div.chart').length;
  const errors = Array.isArray(window.__dse_errors) ? window.__dse_errors.length : 0;
  return window.__dse_rendered === n || errors > 0;
}
"""

_SETTLED_JS = """
() => window.__dse_rendered !== undefined
"""


@dataclass
class RenderResult:
    """What one render of a report produced.

    charts: chart div id -> drawn marks (data-mark SVG items; for a canvas chart, 1 per canvas
    holding any pixel). all_marks: the same but counting axis, legend and title items too.
    rendered_flag: window.__dse_rendered when the wait ended (None if never set).
    requests: every URL the page asked for other than index.html itself (all were aborted).
    """

    charts: dict[str, int]
    expected_charts: int
    rendered_flag: int | None
    requests: list[str]
    console_errors: list[str]
    page_errors: list[str]
    screenshot: Path
    all_marks: dict[str, int] = field(default_factory=dict)
    embed_errors: list[str] = field(default_factory=list)
    timed_out: bool = False
    seconds: float = 0.0
    browser_version: str = ""

    @property
    def ok(self) -> bool:
        """Every chart drew something, all embeds resolved, nothing fetched, nothing failed."""
        return (self.expected_charts == len(self.charts)
                and self.rendered_flag == self.expected_charts
                and all(n > 0 for n in self.charts.values())
                and not (self.requests or self.console_errors or self.page_errors
                         or self.embed_errors or self.timed_out))

    def problems(self) -> str:
        """A readable summary for assertion messages."""
        return (f"charts={self.charts} expected={self.expected_charts} "
                f"rendered_flag={self.rendered_flag} timed_out={self.timed_out} "
                f"requests={self.requests} console_errors={self.console_errors} "
                f"page_errors={self.page_errors} embed_errors={self.embed_errors}")


def find_chromium() -> Path | None:
    """The system Chromium (or Chrome) on PATH or at /usr/bin/chromium, else None."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return Path(found)
    default = Path("/usr/bin/chromium")
    return default if default.exists() else None


def ensure_chromium() -> Path:
    """The system Chromium, installed from the Debian package `chromium` when missing.

    Installing needs root and apt-get; `apt-get update` runs only when a first install fails.
    """
    found = find_chromium()
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise RuntimeError("No Chromium found on PATH and it cannot be installed here (needs "
                           "root and apt-get): install the `chromium` package, e.g. "
                           "`apt-get install -y --no-install-recommends chromium`.")
    # Said in the run's output (pytest's warnings summary): the suite changed the system.
    warnings.warn("the report tests install Debian's chromium package with apt-get (once)",
                  stacklevel=2)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = [apt, "install", "-y", "--no-install-recommends", "chromium"]
    done = subprocess.run(install, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        subprocess.run([apt, "update"], env=env, capture_output=True, text=True)
        done = subprocess.run(install, env=env, capture_output=True, text=True)
    found = find_chromium()
    if done.returncode != 0 or found is None:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError("Installing Chromium with `apt-get install chromium` failed: "
                           + " / ".join(tail))
    return found


def render_report(index_html: Path, screenshot: Path, timeout_s: float = 30,
                  chromium: Path | None = None) -> RenderResult:
    """Open index_html in headless Chromium with the network off and report what rendered.

    Waits until window.__dse_rendered equals the number of div.chart elements (or an embed
    error is reported in window.__dse_errors, or timeout_s passes), then counts the marks in
    every chart and saves a full-page screenshot to `screenshot`.
    """
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    start = time.monotonic()
    index_html = Path(index_html).resolve()
    screenshot = Path(screenshot)
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    page_url = index_html.as_uri()
    executable = chromium or ensure_chromium()

    requests: list[str] = []
    console_errors: list[str] = []
    page_errors: list[str] = []

    def record(url: str) -> None:
        if url != page_url and not url.startswith(LOCAL_SCHEMES) and url not in requests:
            requests.append(url)

    def route(r) -> None:
        url = r.request.url
        if url == page_url:
            r.continue_()
        else:
            record(url)
            r.abort("blockedbyclient")

    def on_console(msg) -> None:
        if msg.type == "error":
            console_errors.append(msg.text)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(executable), headless=True,
                                     args=list(CHROMIUM_ARGS), timeout=timeout_s * 1000)
        try:
            version = browser.version
            context = browser.new_context(offline=True, service_workers="block",
                                          viewport={"width": 1280, "height": 900})
            context.route("**/*", route)
            page = context.new_page()
            # Belt and braces: requests that bypass routing still fire "request".
            page.on("request", lambda req: record(req.url))
            page.on("websocket", lambda ws: record(ws.url))
            page.on("console", on_console)
            page.on("pageerror", lambda err: page_errors.append(str(err)))
            page.goto(page_url, wait_until="load", timeout=timeout_s * 1000)
            remaining_ms = max(1.0, timeout_s - (time.monotonic() - start)) * 1000
            timed_out = False
            try:
                page.wait_for_function(_DONE_JS, timeout=remaining_ms)
            except PlaywrightTimeout:
                timed_out = True
            else:
                # Ended on an embed error: give the other embeds a moment to settle, so the
                # flag reports how many charts did render.
                try:
                    page.wait_for_function(_SETTLED_JS, timeout=min(2000.0, remaining_ms))
                except PlaywrightTimeout:
                    pass
            status = page.evaluate(_STATUS_JS)
            counts = page.evaluate(_COUNT_MARKS_JS)
            try:
                page.screenshot(path=str(screenshot), full_page=True,
                                timeout=max(5.0, timeout_s) * 1000)
            except PlaywrightError as err:  # keep the other findings; the test checks the file
                page_errors.append(f"screenshot failed: {err}")
            context.close()
        finally:
            browser.close()

    charts = {cid: c["marks"] + c["canvases"] for cid, c in counts.items()}
    all_marks = {cid: c["all"] + c["canvases"] for cid, c in counts.items()}
    return RenderResult(charts=charts, expected_charts=status["expected"],
                        rendered_flag=status["rendered"], requests=requests,
                        console_errors=console_errors, page_errors=page_errors,
                        screenshot=screenshot, all_marks=all_marks,
                        embed_errors=status["errors"], timed_out=timed_out,
                        seconds=time.monotonic() - start, browser_version=version)
