"""The shipped catalog of accelerators; resolution of names, aliases, paths and ``extends``."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from .loader import apply_overrides, build, parse_spec_file
from .spec import Accelerator, SpecError

__all__ = ["CATALOG_DIR", "catalog_names", "aliases", "load", "resolve_path"]

CATALOG_DIR = Path(__file__).parent / "catalog"


def catalog_names() -> list[str]:
    """Names of the shipped specs, sorted."""
    return sorted(p.stem for p in CATALOG_DIR.glob("*.toml"))


@cache
def aliases() -> dict[str, str]:
    """Alias -> catalog name, read from the specs' ``aliases`` lists."""
    table: dict[str, str] = {}
    for name in catalog_names():
        for alias in parse_spec_file(CATALOG_DIR / f"{name}.toml").get("aliases", []):
            table[alias] = name
    return table


def resolve_path(name_or_path: str, relative_to: Path | None = None) -> Path:
    """A catalog name, an alias or a path to a ``.toml`` file -> the file's path."""
    text = name_or_path.strip()
    if text in catalog_names():
        return CATALOG_DIR / f"{text}.toml"
    if text in aliases():
        return CATALOG_DIR / f"{aliases()[text]}.toml"
    looks_like_path = text.endswith(".toml") or "/" in text or "\\" in text
    if looks_like_path:
        path = Path(text)
        if not path.is_absolute() and relative_to is not None:
            path = relative_to / path
        return path
    known = catalog_names() + sorted(aliases())
    close = difflib.get_close_matches(text, known, n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise SpecError(f"unknown hardware {text!r}; {hint}see `dse hw list`, "
                    "or give a path to a .toml spec")


def _flat_spec(path: Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The file's keys merged over those of everything it ``extends``, parent first."""
    resolved = path.resolve()
    if resolved in chain:
        cycle = " -> ".join(str(p) for p in (*chain, resolved))
        raise SpecError(f"{path}: extends itself ({cycle}); break the cycle")
    own = parse_spec_file(path)
    parent_name = own.pop("extends", None)
    if parent_name is None:
        return own
    if not isinstance(parent_name, str):
        raise SpecError(f"{path}: extends must be a catalog name or a path string")
    parent_path = resolve_path(parent_name, relative_to=path.parent)
    merged = _flat_spec(parent_path, (*chain, resolved))
    # Identity does not inherit: a derived GPU is not its parent.
    for key in ("name", "aliases", "description"):
        merged.pop(key, None)
    merged.update(own)
    return merged


def load(name_or_path: str, overrides: Sequence[str] | Iterable[str] = ()) -> Accelerator:
    """Load a catalog entry, alias or TOML file, then apply ``FIELD=VALUE`` overrides."""
    overrides = tuple(overrides)
    path = resolve_path(name_or_path)
    flat = _flat_spec(path)
    flat = apply_overrides(flat, overrides)
    accelerator = build(flat, where=str(path), name=path.stem)
    if overrides:
        # The name carries the overrides so that result tables stay unambiguous.
        label = f"{accelerator.name}[{'; '.join(o.strip() for o in overrides)}]"
        accelerator = replace(accelerator, name=label, overrides=overrides)
    return accelerator
