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
