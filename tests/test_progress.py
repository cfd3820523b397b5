"""The one progress meter: plain lines with rate and time left off a terminal, tqdm on one."""

from __future__ import annotations

import io

from dse.cli.progress import StatusLine


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_line_has_count_share_rate_and_time_left():
    meter = StatusLine("searched", "chunks", stream=io.StringIO())
    assert meter.line(30, 120, 10.0) == ("dse: searched 30/120 chunks (25%), 10 s, 3 chunks/s, "
                                         "about 30 s left")
    assert meter.line(120, 120, 600.0) == "dse: searched 120/120 chunks (100%), 10.0 min, " \
                                          "0.2 chunks/s"
    assert meter.line(0, 5, 1.0) == "dse: searched 0/5 chunks (0%), 1 s"


def test_off_a_terminal_it_writes_lines_only_every_few_seconds():
    out = io.StringIO()
    meter = StatusLine("simulated", "designs", stream=out, every_s=3600.0)
    for i in range(1, 50):
        meter(i, 100)
    assert out.getvalue() == ""  # nothing before the interval has passed
    meter.every_s = 0.0
    meter(50, 100, "ops")
    assert out.getvalue().startswith("dse: simulated 50/100 ops (50%)")


def test_on_a_terminal_it_draws_a_bar_and_closes_it():
    out = _Terminal()
    meter = StatusLine("benchmarked", "matrices", stream=out)
    for i in range(1, 11):
        meter(i, 10)
    assert meter.bar is None  # closed at the end
    assert "dse: benchmarked" in out.getvalue() and "/10" in out.getvalue()
