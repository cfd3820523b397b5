"""The first compile of the kernels is announced, later runs are silent about it."""

from __future__ import annotations

import sys

from dse.cli import first_run


def test_note_until_the_kernels_are_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    note = first_run.note_first_compile()
    assert note is not None and "compiling" in note and str(tmp_path) in note
    folder = tmp_path / first_run._cache_folder().rsplit("/", 1)[-1]
    folder.mkdir()
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    (folder / f"kernels._design_totals_serial-121.{tag}.nbi").write_bytes(b"")
    assert first_run.kernels_cached() and first_run.note_first_compile() is None
