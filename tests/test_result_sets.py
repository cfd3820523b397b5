"""Result files written as one set: a search's results, ranked designs and summary appear all
together or not at all, whatever interrupts the writing (dse.output.FileSet)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import search.study as study_module
from dse.output import FileSet, write_atomic, write_table
from search.errors import SearchInterrupted
from search.study import SearchRequest, run_search
from tests.search_spaces import write_space

TOY = """name = "sets"
models = ["toy_hybrid"]
batches = [1, 8]
[formats]
list = ["2:4", "block16@87.5%"]
[hardware]
base = ["h100-sxm"]
"""

TABLE = pd.DataFrame({"a": [1.0, 2.0], "b": ["x", "y"]})


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_a_set_is_written_whole_when_the_block_ends(tmp_path):
    with FileSet() as files:
        write_table(TABLE, tmp_path / "t.parquet")
        write_table(TABLE, tmp_path / "t.csv")
        write_atomic(tmp_path / "s.json", lambda h: h.write(b"{}\n"))
        # Inside the block nothing is in place yet: only temporary names exist.
        assert not {"t.parquet", "t.csv", "s.json"} & set(_names(tmp_path))
    assert _names(tmp_path) == ["s.json", "t.csv", "t.parquet"]
    assert files.committed == [tmp_path / "t.parquet", tmp_path / "t.csv", tmp_path / "s.json"]
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "t.parquet"), TABLE)


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_set_leaves_nothing_and_keeps_the_old_files(tmp_path, interrupt):
    (tmp_path / "t.csv").write_text("old\n")
    with pytest.raises(interrupt):
        with FileSet() as files:
            write_table(TABLE, tmp_path / "t.parquet")
            write_table(TABLE, tmp_path / "t.csv")
            raise interrupt()
    assert _names(tmp_path) == ["t.csv"] and (tmp_path / "t.csv").read_text() == "old\n"
    assert files.committed == []
    # Outside a set, a write goes straight into place again.
    write_table(TABLE, tmp_path / "t.parquet")
    assert "t.parquet" in _names(tmp_path)


def test_a_search_interrupted_while_writing_writes_none_then_resumes(tmp_path, monkeypatch):
    path = write_space(tmp_path, TOY)
    out = tmp_path / "out"
    real = study_module._write_summary

    def interrupted(outcome, request):  # Ctrl-C after results and ranked designs are written
        raise KeyboardInterrupt

    monkeypatch.setattr(study_module, "_write_summary", interrupted)
    with pytest.raises(SearchInterrupted, match="none of them was written") as caught:
        run_search(SearchRequest(space=path, out=out, study="sets"))
    assert "--resume" in str(caught.value)
    # No result file and no temporary one: only the study's database (and SQLite's WAL files).
    assert [n for n in _names(out) if not n.startswith("study.db")] == []
    monkeypatch.setattr(study_module, "_write_summary", real)
    outcome = run_search(SearchRequest(space=path, out=out, study="sets", resume=True))
    assert {"results.parquet", "ranked.parquet", "summary.json"} <= set(_names(out))
    assert json.loads((out / "summary.json").read_text())["study"] == "sets"
    assert len(pd.read_parquet(out / "results.parquet")) == len(outcome.results)
