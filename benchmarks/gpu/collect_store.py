"""Where a collection lives on disk and how a rerun continues it.

Layout of ``--out DIR``::

    collect.log                   every invocation's log, appended
    state.json                    the run: its id, date, machine and options, the invocations
    parts/PART.json               a part's progress: status, items done, items that failed
    parts/PART.TABLE.parquet      its rows so far (TABLE: kernels, profiles, energy)
    kernels.parquet, kernels.json dse's kernel dataset of the complete parts, with provenance
    profiles.parquet              the per-op model profiles of the complete parts
    energy.parquet                the energy readings of the complete parts

Every file is written atomically (:func:`dse.output.write_atomic`). A part's tables are written
before its progress file, which records how many rows each table had: a run killed between the
two reads back only the rows of the items the progress file names, so no item is counted twice.
A part is complete when every item has run; a rerun skips complete parts and, in an incomplete
one, the items done. A run may only continue in a folder made on the same machine, torch,
device and options (:meth:`Store.open_run`): rows of two machines never mix in one part.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from dse.measure.dataset import SCHEMA_VERSION, validate
from dse.output import write_atomic, write_table

from .collect_energy import ENERGY_SCHEMA
from .collect_items import TABLES
from .collect_models import PROFILE_SCHEMA

__all__ = ["CollectError", "Progress", "Store", "conform"]


class CollectError(ValueError):
    """Input or a folder collect cannot use; one line naming it and the fix."""


#: Schemas of the tables besides the kernel dataset (which dse validates itself).
_SCHEMAS = {"profiles": PROFILE_SCHEMA, "energy": ENERGY_SCHEMA}


def conform(frame: pd.DataFrame, schema: dict[str, tuple[str, str]], where: str
            ) -> pd.DataFrame:
    """``frame`` with exactly the schema's columns in its order and dtypes; CollectError
    naming the first missing or unknown column."""
    missing = [c for c in schema if c not in frame.columns]
    extra = [c for c in frame.columns if c not in schema]
    if missing or extra:
        what = f"missing column {missing[0]!r}" if missing else f"unknown column {extra[0]!r}"
        raise CollectError(f"{where}: {what}")
    out = frame[list(schema)].copy()
    for column, (dtype, _) in schema.items():
        if dtype == "string":
            out[column] = out[column].fillna("").astype("string")
        else:
            out[column] = pd.to_numeric(out[column]).astype(dtype)
    return out.reset_index(drop=True)


def checked(table: str, rows: list[dict], where: str) -> pd.DataFrame:
    """The rows of ``table`` as a frame checked against its schema."""
    frame = pd.DataFrame(rows)
    if table == "kernels":
        return validate(frame, where)
    return conform(frame, _SCHEMAS[table], where)


@dataclass
class Progress:
    """A part's rows per table, the items done (in order), the items that failed (key ->
    error) and the seconds spent on it over all invocations."""

    tables: dict[str, list[dict]] = field(default_factory=lambda: {t: [] for t in TABLES})
    done: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    status: str = "new"


class Store:
    """The folder of one collection (module docstring)."""

    def __init__(self, out: Path):
        if out.exists() and not out.is_dir():
            raise CollectError(f"--out {out}: is a file; give a folder")
        self.out = out
        self.parts = out / "parts"

    # --- the run ------------------------------------------------------------------------------

    def open_run(self, identity: dict, command: str) -> dict:
        """The run's state: read from ``state.json`` when this folder holds a collection (its
        identity must equal ``identity``), else new. Records this invocation's command."""
        self.parts.mkdir(parents=True, exist_ok=True)
        path = self.out / "state.json"
        now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        if path.exists():
            state = json.loads(path.read_text(encoding="utf-8"))
            old = state.get("identity", {})
            differs = [k for k in sorted(set(old) | set(identity)) if old.get(k) != identity.get(k)]
            if differs:
                k = differs[0]
                raise CollectError(
                    f"--out {self.out}: holds a collection made with {k}={old.get(k)!r}, this "
                    f"run has {k}={identity.get(k)!r}; give another --out to start a new one")
        else:
            state = {"identity": identity, "date": now, "invocations": []}
        state["invocations"].append({"date": now, "command": command})
        self._write_json(path, state)
        return state

    # --- parts --------------------------------------------------------------------------------

    def progress(self, part: str) -> Progress:
        """What earlier invocations left of ``part`` (empty when none ran it)."""
        path = self.parts / f"{part}.json"
        if not path.exists():
            return Progress()
        meta = json.loads(path.read_text(encoding="utf-8"))
        progress = Progress(done=list(meta["done"]), failed=dict(meta["failed"]),
                            seconds=float(meta["seconds"]), status=meta["status"])
        for table, count in meta["rows"].items():
            if count:
                frame = pd.read_parquet(self.parts / f"{part}.{table}.parquet")
                progress.tables[table] = frame.iloc[:count].to_dict(orient="records")
        return progress

    def save(self, part: str, progress: Progress, keys: list[str]) -> None:
        """Write ``part``'s tables, then its progress file (module docstring); the part is
        complete when every one of its item ``keys`` is done."""
        self.parts.mkdir(parents=True, exist_ok=True)
        for table, rows in progress.tables.items():
            if rows:
                frame = checked(table, rows, f"part {part}, table {table}")
                write_table(frame, self.parts / f"{part}.{table}.parquet")
        progress.status = "complete" if set(keys) <= set(progress.done) else "incomplete"
        self._write_json(self.parts / f"{part}.json", {
            "part": part, "status": progress.status, "items": len(keys),
            "done": progress.done, "failed": progress.failed, "seconds": progress.seconds,
            "rows": {t: len(r) for t, r in progress.tables.items()},
            "updated": datetime.datetime.now().astimezone().isoformat(timespec="seconds")})

    # --- outputs ------------------------------------------------------------------------------

    def write_outputs(self, parts: list[str], provenance: dict) -> dict[str, int]:
        """Merge the complete ``parts`` into ``kernels.parquet`` (+ ``kernels.json``),
        ``profiles.parquet`` and ``energy.parquet``; returns rows written per table. Tables
        without rows are not written (an older file of the same folder stays)."""
        written: dict[str, int] = {}
        for table in TABLES:
            rows = [r for p in parts for r in self.progress(p).tables[table]]
            if not rows:
                continue
            frame = checked(table, rows, f"merged {table}")
            write_table(frame, self.out / f"{table}.parquet")
            written[table] = len(frame)
        if "kernels" in written:
            prov = dict(provenance, schema=SCHEMA_VERSION, rows=written["kernels"],
                        parts=parts, tables=written)
            self._write_json(self.out / "kernels.json", prov)
        return written

    @staticmethod
    def _write_json(path: Path, value: dict) -> None:
        text = json.dumps(value, indent=1, default=str) + "\n"
        write_atomic(path, lambda handle: handle.write(text.encode()))
