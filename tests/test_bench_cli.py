"""`dse bench spmv` refuses bad input with one line and exit 2, leaving nothing behind."""

from __future__ import annotations

import pytest

from dse.cli import main

BAD = {
    "zero budget": (["--budget", "0"], "--budget 0"),
    "no unit": (["--budget", "5 parsecs"], "--budget"),
    "budget below the report's share": (["--budget", "8s"], "give at least 30s"),
    "unwritable out": (["--out", "/proc/dse-nope/run"], "--out /proc/dse-nope/run"),
    "out is a file": (["--out", "{tmp}/file"], "is a file"),
    "out not empty": (["--out", "{tmp}/full"], "not empty"),
    "negative bandwidth": (["--bandwidth", "-3"], "--bandwidth -3"),
    "blocks": (["--blocks", "1,x"], "--blocks"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_exits_2_with_one_line(case, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep").write_text("x")
    extra, needle = BAD[case]
    extra = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    argv = ["bench", "spmv", *extra]
    if "--out" not in extra:
        argv += ["--out", str(tmp_path / "run")]
    before = sorted(p.name for p in tmp_path.rglob("*"))
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_an_interrupt_during_the_report_leaves_no_result_file(tmp_path, monkeypatch, capsys):
    """Issue 26: Ctrl-C while the report was written left spmv.parquet while the message said
    nothing was written. Now the run's folder is left empty and removed."""
    import reports

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(reports, "write_report", interrupted)
    out = tmp_path / "run"
    # A small space (one block size, 512 rows, no bandwidth sweep) under a generous budget:
    # the run ends on its own work, so a loaded machine's slow calibration (19 s of a 31 s
    # budget once) cannot refuse it before the report.
    code = main(["bench", "spmv", "--budget", "2m", "--max-dim", "512", "--blocks", "1",
                 "--bandwidth", "0", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 130 and "no partial result file" in err, err
    assert not out.exists()
