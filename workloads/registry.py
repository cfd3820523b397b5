"""Shipped traces, by name: plain files under ``workloads/traces``, loadable without torch."""

from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import Path

from .trace import Trace, TraceError, read_trace_file

__all__ = ["TRACES_DIR", "load_trace", "trace_names"]

TRACES_DIR = Path(__file__).parent / "traces"


def trace_names() -> list[str]:
    """Names of the shipped traces, sorted."""
    return sorted(p.stem for p in TRACES_DIR.glob("*.json"))


@lru_cache(maxsize=32)
def _load_shipped(name: str) -> Trace:
    return read_trace_file(TRACES_DIR / f"{name}.json")


def load_trace(name_or_path: str | Path) -> Trace:
    """A shipped trace by name, or a trace ``.json`` file by path."""
    text = str(name_or_path).strip()
    if text in trace_names():
        return _load_shipped(text)
    if text.endswith(".json") or "/" in text or "\\" in text:
        return read_trace_file(Path(text))
    close = difflib.get_close_matches(text, trace_names(), n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise TraceError(f"unknown model {text!r}; {hint}shipped traces: "
                     f"{', '.join(trace_names())}; or give a path to a trace .json")
