"""Shipped traces, by name: plain files under ``workloads/traces``, loadable without torch."""

from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import Path

from .trace import Trace, TraceError, read_trace_file

__all__ = ["ALIASES", "TRACES_DIR", "load_trace", "resolve_name", "trace_names"]

TRACES_DIR = Path(__file__).parent / "traces"

#: Short names for the shipped timm traces.
ALIASES = {
    "swin_tiny": "swin_tiny_patch4_window7_224",
    "deit_small": "deit_small_patch16_224",
    "vit_base": "vit_base_patch16_224",
    "mixer_s16": "mixer_s16_224",
}


def trace_names() -> list[str]:
    """Names of the shipped traces, sorted."""
    return sorted(p.stem for p in TRACES_DIR.glob("*.json"))


@lru_cache(maxsize=32)
def _load_shipped(name: str) -> Trace:
    return read_trace_file(TRACES_DIR / f"{name}.json")


def load_trace(name_or_path: str | Path) -> Trace:
    """A shipped trace by name, or a trace ``.json`` file by path."""
    text = str(name_or_path).strip()
    if text.endswith(".json") or "/" in text or "\\" in text:
        return read_trace_file(Path(text))
    return _load_shipped(resolve_name(text))


def resolve_name(name: str) -> str:
    """A shipped trace's name, from its name or alias; a clear error otherwise."""
    if name in trace_names():
        return name
    if name in ALIASES:
        return ALIASES[name]
    known = trace_names() + sorted(ALIASES)
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise TraceError(f"unknown model {name!r}; {hint}shipped traces: "
                     f"{', '.join(trace_names())} (aliases: {', '.join(sorted(ALIASES))}); "
                     "or give a path to a trace .json")
