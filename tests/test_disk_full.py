"""A full device under every command that writes (issue 26): the output folder lies on a small
tmpfs, filled until only a little room is left, so the write fails partway. Each command must
exit 2 with one line on stderr naming the path and "No space left on device", print no
traceback, and leave nothing in the output folder: no partial file, no temporary file, no part
of a set of files.

A tmpfs can be mounted only by root (this machine's tests run as root; CI's may not). Without
one, a command whose output is one file still meets a full device: its temporary file is opened
on ``/dev/full``, which refuses every write with ENOSPC; outputs of several files (folders,
reports, sets) need the tmpfs and are skipped, with the reason.

The heavy work in front of a few writes (the probe's timings, measure's kernels) is replaced by
a canned result: the write path is what is under test."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli_run import run_cli

PAGE = 4096
#: The device's size: room for the filler, the little that is left free, and nothing more.
SIZE_KIB = 2048


class Device:
    """A small tmpfs at ``root``; :meth:`leave` fills it until ``free`` bytes are left."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.filler = root / ".filler"

    def leave(self, free: int) -> None:
        chunk = b"\0" * PAGE
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            while os.write(fd, chunk) > 0:
                pass
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        finally:
            os.close(fd)
        size = self.filler.stat().st_size
        os.truncate(self.filler, max(0, size - (free // PAGE) * PAGE))

    def files(self) -> set[str]:
        return {str(p.relative_to(self.root)) for p in self.root.rglob("*")} - {".filler"}


def _mount(folder: Path) -> bool:
    if shutil.which("mount") is None or os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE_KIB}k,mode=0755", "tmpfs",
                           str(folder)], capture_output=True)
    return done.returncode == 0


@pytest.fixture
def device(tmp_path):
    """A small tmpfs under ``tmp_path``, or None where none can be mounted."""
    root = tmp_path / "device"
    root.mkdir()
    if not _mount(root):
        yield None
        return
    try:
        yield Device(root)
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


def _dev_full(monkeypatch) -> None:
    """Every temporary file of :func:`dse.output.write_atomic` writes to /dev/full."""
    import dse.output

    real = tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        fd, name = real(*args, **kwargs)
        os.close(fd)
        return os.open("/dev/full", os.O_WRONLY), name

    monkeypatch.setattr(dse.output.tempfile, "mkstemp", mkstemp)


@dataclass(frozen=True)
class Case:
    argv: list[str]  #: after ``dse``; ``{out}`` is the output folder on the full device
    #: bytes left free: less than the output, so the write fails partway; or a function of
    #: the test's folder that computes them
    free: int | Callable = 4 * PAGE
    one_file: bool = True  #: one output file (/dev/full can stand in for the tmpfs)
    setup: Callable | None = None  #: (monkeypatch, tmp_path) -> None: canned heavy work


DESIGN = ["--model", "convnext_tiny", "--hw", "a100", "--format", "2:4"]


def _canned_probe(monkeypatch, tmp_path) -> None:
    from dse.measure import probe
    from tests.test_probe import _result

    monkeypatch.setattr(probe, "probe", lambda *a, **k: _result())


def _measured():
    from dse.measure.dataset import load_dataset

    frame = load_dataset("h100-sxm")
    return frame[frame["op"].str.startswith("deit")].reset_index(drop=True)


def _room_for_the_dataset_only(tmp_path) -> int:
    """Room for measure's Parquet file, not for its provenance beside it: the set is cut."""
    from dse.output import write_table

    write_table(_measured(), tmp_path / "size.parquet")
    return -(-(tmp_path / "size.parquet").stat().st_size // PAGE) * PAGE


def _canned_measure(monkeypatch, tmp_path) -> None:
    from dse.measure import measure

    frame = _measured()
    result = measure.MeasureResult(frame, budget_s=20.0, spent_s=20.0, trace_configs=len(frame),
                                   sampled_configs=0, provenance={"device": "cuda"})
    monkeypatch.setattr(measure, "measure", lambda *a, **k: result)


def _canned_fusion_rules(monkeypatch, tmp_path) -> None:
    from dse.measure import fusion_rules
    from dse.roofline.fusion_rules import load

    monkeypatch.setattr(fusion_rules, "detect_rules", lambda *a, **k: load("inductor-cpu"))


def _canned_training(monkeypatch, tmp_path) -> None:
    """``dse accuracy`` with its training replaced: the rows and the work folder's state file
    that a finished run leaves."""
    import json

    import dse.cli.accuracy

    def run_accuracy(config, work_dir, **kwargs):
        state = {"config": {"models": ["test_vit"]}, "models": {"test_vit": {
            "dense": {"top1": 12.5, "wall_s": 3.0},
            "chains": {"2:*": {"results": [{"pattern": "2:4", "top1": 18.75}], "wall_s": 6.0}}}}}
        work_dir.mkdir(parents=True, exist_ok=True)
        (work_dir / "state.json").write_text(json.dumps(state))
        return [{"model": "test_vit", "pattern": p, "top1": v, "dataset": "digits"}
                for p, v in (("dense", 12.5), ("2:4", 18.75))]

    monkeypatch.setattr(dse.cli.accuracy, "run_accuracy", run_accuracy)


def _small_dataset(monkeypatch, tmp_path) -> None:
    from dse.measure.dataset import load_dataset

    frame = load_dataset("h100-sxm")
    frame[frame["family"].isin(["dense", "nm"]) & frame["op"].str.startswith("deit")].to_parquet(
        tmp_path / "small.parquet")


def _space(monkeypatch, tmp_path) -> None:
    from tests.search_spaces import space_text, write_space

    write_space(tmp_path, space_text(formats='list = ["2:4", "1:8", "2:8"]'))



CASES = {
    "evaluate --out": Case(["evaluate", *DESIGN, "--per-layer", "--out", "{out}/e.csv"]),
    "evaluate --out json": Case(["evaluate", *DESIGN, "--per-layer", "--out", "{out}/e.json"]),
    "simulate --out": Case(["simulate", *DESIGN, "--out", "{out}/ops.csv"]),
    "simulate --out --timeline": Case(["simulate", *DESIGN, "--out", "{out}/ops.csv",
                                       "--timeline", "{out}/t.csv"], free=8 * PAGE,
                                      one_file=False),
    "simulate --report": Case(["simulate", *DESIGN, "--report", "{out}/rep"], free=32 * PAGE,
                              one_file=False),
    "compare --out": Case(["compare", "--model", "convnext_tiny", "--hw", "a100,h100-sxm",
                           "--format", "2:4", "--out", "{out}/c.parquet"], free=PAGE),
    "compare --report": Case(["compare", "--model", "convnext_tiny", "--hw", "a100,h100-sxm",
                              "--format", "2:4", "--report", "{out}/rep"], free=32 * PAGE,
                             one_file=False),
    "sweep --out": Case(["sweep", *DESIGN, "--vary", "batch=1,2,4", "--out",
                         "{out}/s.parquet"]),
    "sweep --out --report": Case(["sweep", *DESIGN, "--vary", "batch=1,2,4", "--out",
                                  "{out}/s.parquet", "--report", "{out}/rep"], free=32 * PAGE,
                                 one_file=False),
    "report --out": Case(["report", *DESIGN, "--out", "{out}/rep"], free=32 * PAGE,
                         one_file=False),
    "study --out": Case(["study", "feature-overhead", *DESIGN, "--out", "{out}/st"],
                        free=16 * PAGE, one_file=False),
    "search --out": Case(["search", "--space", "space.toml", "--out", "{out}/se"],
                         free=8 * PAGE, one_file=False, setup=_space),
    "search --out --report": Case(["search", "--space", "space.toml", "--out", "{out}/se",
                                   "--report", "{out}/rep"], free=64 * PAGE, one_file=False,
                                  setup=_space),
    "hw probe --out": Case(["hw", "probe", "--out", "{out}/h.toml"], free=0,
                           setup=_canned_probe),
    "measure --out": Case(["measure", "--model", "toy_hybrid", "--hw", "a100", "--out",
                           "{out}/d.parquet"], free=_room_for_the_dataset_only, one_file=False,
                          setup=_canned_measure),
    "calibrate --out": Case(["calibrate", "--data", "small.parquet", "--out", "{out}/m.json"],
                            setup=_small_dataset),
    # The table (under a page) fits, its provenance does not: the set is cut.
    "accuracy --out": Case(["accuracy", "--model", "test_vit", "--patterns", "2:4", "--levels",
                            "0.5", "--work-dir", "work", "--out", "{out}/a.csv"], free=PAGE,
                           one_file=False, setup=_canned_training),
    "fusion-rules --out": Case(["fusion-rules", "--out", "{out}/r.json"], free=0,
                               setup=_canned_fusion_rules),
    "workloads export --out": Case(["workloads", "export", "test_convnext", "--out",
                                    "{out}/t.json"]),
}


def _argv(case: Case, out: Path) -> list[str]:
    return [a.replace("{out}", str(out)) for a in case.argv]


#: A progress line (dse.cli.progress, on stderr when it is not a terminal), or the search's
#: notice of the study it started: not the error.
_PROGRESS = re.compile(r"\d+/\d+ .*\(\d+%\)|^study \S+ in \S+: \w+ engine, ")


def _refusal(argv: list[str], capsys) -> str:
    code = run_cli(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err
    lines = [line for line in err.splitlines() if line.strip() and not _PROGRESS.search(line)]
    assert code == 2, f"exit {code}; stderr: {err}"
    assert len(lines) == 1, f"{len(lines)} lines on stderr:\n{err}"
    return lines[0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_full_device_fails_cleanly_and_leaves_nothing(name, device, tmp_path, monkeypatch,
                                                        capsys):
    case = CASES[name]
    monkeypatch.chdir(tmp_path)
    if case.setup is not None:
        case.setup(monkeypatch, tmp_path)
    if device is None:
        if not case.one_file:
            pytest.skip("no tmpfs can be mounted here (needs root): a set of files cannot meet "
                        "a full device through /dev/full")
        if not Path("/dev/full").exists():
            pytest.skip("neither a tmpfs (needs root) nor /dev/full")
        _dev_full(monkeypatch)
        out = tmp_path / "out"
        out.mkdir()
        line = _refusal(_argv(case, out), capsys)
        assert sorted(os.listdir(out)) == []
    else:
        out = device.root / "out"
        out.mkdir()
        device.leave(case.free(tmp_path) if callable(case.free) else case.free)
        line = _refusal(_argv(case, out), capsys)
        assert device.files() == {"out"}, f"left behind: {sorted(device.files())}"
    assert "no space left" in line.lower(), line
    assert str(out) in line, line


def test_a_resumed_sqlite_study_on_a_full_device_names_its_own_database(tmp_path):
    """A study resumed from a SQLite database outside --out (``--storage sqlite:///...``):
    the full-device line names that database, where its work is kept, not OUT/study.db."""
    import errno

    from search.errors import SearchError
    from search.storage import open_storage, sqlite_url
    from search.study import _fail_on_full_device

    out = tmp_path / "out"
    out.mkdir()
    storage = open_storage(sqlite_url(tmp_path / "shared.db"))
    try:
        full = OSError(errno.ENOSPC, "No space left on device")
        with pytest.raises(SearchError) as caught:
            _fail_on_full_device(full, storage, out, created=False, fresh_db=False)
    finally:
        storage.engine.dispose()
    message = str(caught.value)
    assert message.startswith(f"{storage.shown}: cannot write"), message
    assert "study.db" not in message and "kept in" in message, message
    assert (tmp_path / "shared.db").exists()  # the work done is kept for --resume
