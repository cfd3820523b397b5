"""The shipped catalog of accelerators; resolution of names, aliases, paths and ``extends``."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from .loader import FIELDS, apply_overrides, build, parse_spec_file
from .spec import Accelerator, SpecError

__all__ = ["CATALOG_DIR", "catalog_names", "aliases", "derive", "load", "resolve_path",
           "spec_fields"]

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
    try:
        parent_path = resolve_path(parent_name, relative_to=path.parent)
    except SpecError as exc:
        raise SpecError(f"{path}: extends = {parent_name!r}: {exc}") from None
    if not parent_path.is_file():
        raise SpecError(f"{path}: extends = {parent_name!r}, but {parent_path} is not a file; "
                        "give a catalog name (see `dse hw list`) or an existing .toml path")
    merged = _flat_spec(parent_path, (*chain, resolved))
    # Identity does not inherit: a derived GPU is not its parent.
    for key in ("name", "aliases", "description"):
        merged.pop(key, None)
    # A figure the parent could not confirm stays unconfirmed where the file keeps it.
    unverified = [path for path in merged.get("unverified", ()) if path not in own]
    unverified += [path for path in own.get("unverified", ()) if path not in unverified]
    merged.update(own)
    if unverified:
        merged["unverified"] = unverified
    return merged


def spec_fields(spec: str | Path | Accelerator) -> dict[str, Any]:
    """The flat fields (``"sparse_tensor.patterns"``: value, ...) of a catalog entry, alias or
    spec file, everything it ``extends`` merged in, or of an :class:`Accelerator` already
    loaded or built: the base that :func:`derive` varies. A new dict each call (the caller may
    change it)."""
    if isinstance(spec, Accelerator):
        return _accelerator_fields(spec)
    return _flat_spec(resolve_path(str(spec)))


def _accelerator_fields(acc: Accelerator) -> dict[str, Any]:
    """An accelerator's fields as a spec file holds them (patterns as ``"N:M"`` text)."""
    flat: dict[str, Any] = {"name": acc.name, "description": acc.description,
                            "sources": list(acc.sources), "unverified": list(acc.unverified),
                            "aliases": list(acc.aliases)}
    for path in FIELDS:
        value = acc.field_value(path)
        if value is None:
            continue
        if path == "sparse_tensor.patterns":
            value = [f"{n}:{m}" for n, m in value]
        flat[path] = value
    return flat


def _value_text(value: Any) -> str:
    """A field value as ``--set`` would spell it, for the derived accelerator's name (numbers
    as floats: sweeps and searches hand every number over as one)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return repr(float(value))
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def derive(base: str | Path | Mapping[str, Any] | Accelerator,
           values: Mapping[str, Any] | None = None,
           overrides: Sequence[str] | Iterable[str] = (), name: str | None = None,
           where: str | None = None) -> Accelerator:
    """A variant of ``base``: ``overrides`` (``FIELD=VALUE`` text, as ``--set`` takes it) applied
    first, then ``values`` (``{field path: value}``, values as a TOML file holds them: numbers,
    pattern lists, booleans); everything validated, errors naming the field.

    ``base``: a catalog name, alias or spec path, an :class:`Accelerator`, or the fields of
    one (:func:`spec_fields`: for callers that derive thousands of variants of one base).
    Unless ``name`` is given the variant is named ``BASE[change; ...]`` and lists its changes in
    ``overrides``, so result tables stay unambiguous; errors name ``where`` (default: the
    base's file).
    """
    overrides = tuple(overrides)
    values = dict(values or {})
    if isinstance(base, Accelerator):
        flat, stem, where = _accelerator_fields(base), base.name, where or base.name
    elif isinstance(base, Mapping):
        flat, stem, where = dict(base), name or "derived", where or "derived hardware"
    else:
        path = resolve_path(str(base))
        flat, stem, where = _flat_spec(path), path.stem, where or str(path)
    base_flat = flat
    if overrides:
        flat = apply_overrides(flat, overrides)
    for field in values:
        if field not in FIELDS:
            raise SpecError(f"{where}: unknown hardware field {field!r}; fields: see "
                            "`dse hw show a100`")
    flat.update({k: list(v) if isinstance(v, tuple) else v for k, v in values.items()})
    changes = (*(o.strip() for o in overrides),
               *(f"{k}={_value_text(v)}" for k, v in values.items()))
    try:
        accelerator = build(flat, where=where, name=stem)
    except SpecError:
        if not changes:
            raise
        # A base that builds on its own is not to blame: name the changes that broke it.
        build(base_flat, where=where, name=stem)
        shown = " ".join(f"--set {o.strip()}" for o in overrides)
        shown = "; ".join(filter(None, (shown, *changes[len(overrides):])))
        build(flat, where=f"{shown} (on {stem})", name=stem)
        raise
    if name is not None:
        return replace(accelerator, name=name)
    if not changes:
        return accelerator
    # The name carries the changes so that result tables stay unambiguous.
    return replace(accelerator, name=f"{accelerator.name}[{'; '.join(changes)}]",
                   overrides=changes)


def load(name_or_path: str, overrides: Sequence[str] | Iterable[str] = ()) -> Accelerator:
    """Load a catalog entry, alias or TOML file, then apply ``FIELD=VALUE`` overrides."""
    return derive(name_or_path, overrides=overrides)
