"""Workloads: per-sample op traces of neural networks, their schema, loader and batch scaling.

>>> from workloads import load_trace
>>> trace = load_trace("toy_hybrid")
>>> int(trace.at_batch(8)["n"].iloc[0]) == 8 * int(trace.ops["n"].iloc[0])
True
"""

from .registry import TRACES_DIR, load_trace, trace_names
from .trace import (
    COLUMNS,
    GEMM_KINDS,
    KINDS,
    MODEL_INPUT,
    PER_SAMPLE,
    SCHEMA,
    Trace,
    TraceError,
    read_trace_file,
)

__all__ = [
    "COLUMNS",
    "GEMM_KINDS",
    "KINDS",
    "MODEL_INPUT",
    "PER_SAMPLE",
    "SCHEMA",
    "TRACES_DIR",
    "Trace",
    "TraceError",
    "load_trace",
    "read_trace_file",
    "trace_names",
]
