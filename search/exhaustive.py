"""The exhaustive engine: every design point of a finite space, through the vectorized evaluator.

The space is cut into chunks (one model, a run of hardware points, every format and batch);
workers claim chunks from the study's storage, evaluate each in one vectorized call and store its
scored rows together with the chunk's "done" mark. Chunks are independent, so any number of
workers on any machines can share the work, and a killed worker costs only the chunk it held:
its lease runs out (or its process is seen gone) and another worker takes the chunk again.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.ipc as ipc

from .problem import Problem
from .space import HardwarePoint
from .storage import LEASE_S, Storage, worker_id

__all__ = ["Chunk", "plan_chunks", "run_chunks", "read_chunks"]

#: Design points per chunk, by default: big enough that the evaluator's vectorized kernel, not
#: Python, dominates; small enough that a killed worker loses little and progress moves.
CHUNK_POINTS = 200_000
# Strings repeated on every row travel as dictionary-encoded (categorical) columns: an order of
# magnitude smaller and faster to serialize than Python strings.
_CATEGORICAL = ("model", "hardware", "format", "family", "fusion", "scope", "bound",
                "hw_fallback", "accuracy_status", "role", "baseline", "verdict",
                "energy_unpriced", "predictors", "calibration", "accuracy_source",
                "weight_dtype", "kv_dtype")


@dataclass(frozen=True)
class Chunk:
    model: int
    first: int  # first hardware point
    stop: int


def plan_chunks(problem: Problem) -> list[Chunk]:
    """The chunks of a finite space, model-major; deterministic for the same settings."""
    n_hw = problem.space.hardware_count()
    per_hw = len(problem.evaluated) + 1  # + dense, which every speedup needs
    per_hw *= len(problem.space.batches)
    step = max(1, problem.settings.chunk_points // per_hw)
    return [Chunk(m, first, min(first + step, n_hw))
            for m in range(len(problem.traces)) for first in range(0, n_hw, step)]


class _Points:
    """Hardware points by index, built once per worker."""

    def __init__(self, problem: Problem) -> None:
        self.points = list(problem.space.hardware_points())

    def slice(self, first: int, stop: int) -> list[HardwarePoint]:
        return self.points[first:stop]


def evaluate_chunk(problem: Problem, chunk: Chunk, points: _Points) -> pd.DataFrame:
    return problem.evaluate_points(chunk.model, points.slice(chunk.first, chunk.stop),
                                   chunk.first)


def to_bytes(frame: pd.DataFrame) -> bytes:
    """The chunk's rows as LZ4-compressed Arrow IPC; label columns become categoricals in
    place (most already are: the chunk is freshly built and used once)."""
    for column in _CATEGORICAL:
        if column in frame:
            frame[column] = frame[column].astype("category")
    table = pa.Table.from_pandas(frame, preserve_index=False)
    sink = io.BytesIO()
    # LZ4 inside Arrow IPC: several times smaller than raw, at memory speed.
    options = ipc.IpcWriteOptions(compression="lz4")
    with ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _table(blob: bytes, pool: pa.MemoryPool | None = None) -> pa.Table:
    return ipc.open_stream(pa.BufferReader(blob), memory_pool=pool).read_all()


def run_chunks(problem: Problem, storage: Storage, study: str,
               progress: Callable[[int], None] | None = None, worker: str | None = None,
               lease_s: float = LEASE_S) -> int:
    """Claim and evaluate chunks until none is pending; returns how many this worker stored.
    Chunks other workers hold may still be running when it returns."""
    chunks = plan_chunks(problem)
    points = _Points(problem)
    me = worker or worker_id()
    done = 0
    while (idx := storage.claim_chunk(study, me, lease_s)) is not None:
        frame = evaluate_chunk(problem, chunks[idx], points)
        if storage.finish_chunk(study, idx, me, to_bytes(frame)):
            done += 1
            if progress is not None:
                progress(len(frame))
    return done


def read_chunks(storage: Storage, study: str) -> pd.DataFrame:
    """Every done chunk's rows, in chunk order (the space's enumeration order)."""
    parts = storage.chunk_results(study)
    if not parts:
        return pd.DataFrame()
    # The system allocator, not Arrow's default (mimalloc): the decoded chunks and the columns
    # converted from them are hundreds of MB, and with mimalloc they came as fresh pages from
    # the kernel, about a second of system time per million rows on a 2-core VM.
    pool = pa.system_memory_pool()
    tables = [_table(blob, pool) for _, _, blob in parts]
    # Each chunk has its own dictionaries; Arrow concatenates them as they are and pandas
    # unifies them once, at the end. One block per column: no consolidation copy here, and the
    # caller's column reordering (millions of rows) moves no data.
    return pa.concat_tables(tables, memory_pool=pool).to_pandas(split_blocks=True,
                                                                memory_pool=pool)


def chunk_count(problem: Problem) -> int:
    return len(plan_chunks(problem))


def size(problem: Problem) -> int:
    n = problem.space.hardware_count()
    return int(len(problem.traces) * len(problem.space.batches) * (len(problem.evaluated) + 1)
               * n) if math.isfinite(n) else 0
