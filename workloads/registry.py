"""Shipped traces, by name: plain files under ``workloads/traces``, loadable without torch; and
:func:`load_model`, which also traces a language model from its configuration."""

from __future__ import annotations

import difflib
import json
from functools import lru_cache
from pathlib import Path

from .llm import LLMConfigError, llm_names, llm_trace, load_llm_config
from .trace import Trace, TraceError, read_trace_file

__all__ = ["ALIASES", "TRACES_DIR", "is_language_model", "load_model", "load_trace",
           "resolve_name", "trace_names"]

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
                     f"language models (with --phase and --context): {', '.join(llm_names())}; "
                     "or give a path to a trace .json or a model's config.json")


def is_language_model(name_or_path: str | Path) -> bool:
    """Whether ``name_or_path`` names a language model's configuration (a shipped name, a folder
    holding a ``config.json``, or a JSON file with no trace schema and a model's sizes or a
    ``model_type``) rather than a trace. A ``config.json`` lacking a field is still one, so
    that the reader names the missing field."""
    text = str(name_or_path).strip()
    if text in llm_names():
        return True
    path = Path(text)
    if path.is_dir():
        return (path / "config.json").is_file()
    if path.suffix != ".json" or not path.is_file():
        return False
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False  # read_trace_file says what is wrong with it
    return isinstance(document, dict) and "schema" not in document and (
        path.name == "config.json" or bool(_LLM_KEYS & document.keys()))


_LLM_KEYS = {"model_type", "hidden_size", "num_hidden_layers", "num_attention_heads"}


def load_model(name_or_path: str | Path, phase: str | None = None,
               context: int | None = None) -> Trace:
    """What ``--model`` names: a shipped trace or trace file (:func:`load_trace`), or a language
    model traced at ``phase`` and ``context`` (:func:`workloads.llm.llm_trace`)."""
    text = str(name_or_path).strip()
    if is_language_model(text):
        if phase is None or context is None:
            raise LLMConfigError(f"{text} is a language model: give --phase prefill or decode "
                                 "and --context TOKENS (prefill: prompt tokens; decode: the "
                                 "context length the new token attends to)")
        if text in llm_names():
            return _shipped_llm(text, phase, context)
        return llm_trace(load_llm_config(text), phase, context)
    if phase is not None or context is not None:
        load_trace(text)  # a name or file that is no trace either is told as what it is
        raise TraceError(f"--phase and --context are for language models "
                         f"({', '.join(llm_names())} or a config.json); {text} is a trace")
    return load_trace(text)


@lru_cache(maxsize=32)
def _shipped_llm(name: str, phase: str, context: int) -> Trace:
    return llm_trace(load_llm_config(name), phase, context)
