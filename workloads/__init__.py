"""Workloads: per-sample op traces of neural networks, their schema, loader and batch scaling.

>>> from workloads import load_trace
>>> trace = load_trace("toy_hybrid")
>>> int(trace.at_batch(8)["n"].iloc[0]) == 8 * int(trace.ops["n"].iloc[0])
True
"""

from .llm import LLMConfig, LLMConfigError, llm_names, llm_trace, load_llm_config
from .registry import (
    ALIASES,
    TRACES_DIR,
    is_language_model,
    load_model,
    load_trace,
    resolve_name,
    trace_names,
)
from .summary import kind_summary, prunable_shares
from .trace import (
    COLUMNS,
    GEMM_KINDS,
    KINDS,
    MAX_BATCH,
    MAX_COUNT,
    MAX_PER_SAMPLE,
    MODEL_INPUT,
    OPTIONAL,
    PER_SAMPLE,
    SCHEMA,
    Trace,
    TraceError,
    norm_width,
    read_trace_file,
)

__all__ = [
    "ALIASES",
    "COLUMNS",
    "GEMM_KINDS",
    "KINDS",
    "LLMConfig",
    "LLMConfigError",
    "MAX_BATCH",
    "MAX_COUNT",
    "MAX_PER_SAMPLE",
    "MODEL_INPUT",
    "OPTIONAL",
    "PER_SAMPLE",
    "SCHEMA",
    "TRACES_DIR",
    "Trace",
    "TraceError",
    "is_language_model",
    "kind_summary",
    "llm_names",
    "llm_trace",
    "load_llm_config",
    "load_model",
    "load_trace",
    "norm_width",
    "prunable_shares",
    "read_trace_file",
    "resolve_name",
    "trace_names",
]
