"""Fusion-rule tables: which (producer kind, consumer kind) pairs a backend fuses.

A table is detected on a machine by timing each pair of op kinds apart and together
(:mod:`dse.measure.fusion_rules`, ``dse fusion-rules``) and shipped here as ``NAME.json``. The
fusion model ``rules:NAME`` keeps on chip exactly the intermediates that pass along a detected
pair; everything else goes through DRAM (see :func:`dse.roofline.pricing.rule_edges`).

File schema (``dse-fusion-rules/1``)::

    {"schema": "dse-fusion-rules/1", "backend": "inductor-cpu",
     "provenance": {"command": ..., "date": ..., "torch": ..., ...},
     "method": {"threshold": 0.85, "batch": 4, "timing": {...}, "criterion": "..."},
     "rules": [["linear", "elementwise"], ...],
     "pairs": [{"producer": ..., "consumer": ..., "fused": bool, ...}, ...]}
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from workloads import KINDS

__all__ = ["PREFIX", "SCHEMA", "FusionRulesError", "RuleTable", "load", "names", "read",
           "table_for"]

SCHEMA = "dse-fusion-rules/1"
#: A fusion model naming a rule table: ``rules:NAME``.
PREFIX = "rules:"
_HERE = Path(__file__).resolve().parent
_KEYS = {"schema", "backend", "provenance", "method", "rules", "pairs"}


class FusionRulesError(ValueError):
    """A rule table that cannot be used, or a detection that cannot run as asked; one line."""


@dataclass(frozen=True, eq=False)
class RuleTable:
    """The pairs a backend fuses, with how they were found. Hashes by identity (the loader
    returns one object per shipped name), so per-trace prices can be cached on it."""

    backend: str
    rules: frozenset[tuple[str, str]]
    provenance: Mapping[str, Any] = field(default_factory=dict)
    method: Mapping[str, Any] = field(default_factory=dict)
    pairs: tuple[Mapping[str, Any], ...] = ()

    def fuses(self, producer_kind: str, consumer_kind: str) -> bool:
        """Whether the backend fuses an op of ``consumer_kind`` with its producer's kind."""
        return (producer_kind, consumer_kind) in self.rules

    @classmethod
    def of(cls, backend: str, rules: Iterable[tuple[str, str]], **extra) -> RuleTable:
        return cls(backend, frozenset((str(a), str(b)) for a, b in rules), **extra)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "backend": self.backend, "provenance": dict(self.provenance),
                "method": dict(self.method), "rules": [list(p) for p in sorted(self.rules)],
                "pairs": [dict(p) for p in self.pairs]}

    @classmethod
    def from_json(cls, data: Any, where: str) -> RuleTable:
        """Strict: unknown or missing keys, unknown kinds and bad pairs are one-line errors."""
        if not isinstance(data, dict):
            raise FusionRulesError(f"{where}: expected a JSON object")
        unknown, missing = set(data) - _KEYS, _KEYS - set(data)
        if unknown or missing:
            raise FusionRulesError(f"{where}: unknown keys {sorted(unknown)}, missing keys "
                                   f"{sorted(missing)}; expected {sorted(_KEYS)}")
        if data["schema"] != SCHEMA:
            raise FusionRulesError(f"{where}: schema {data['schema']!r}; expected {SCHEMA!r}")
        if not isinstance(data["backend"], str) or not data["backend"]:
            raise FusionRulesError(f"{where}: 'backend' must be a non-empty string")
        for key in ("provenance", "method"):
            if not isinstance(data[key], dict):
                raise FusionRulesError(f"{where}: {key!r} must be an object")
        if not isinstance(data["rules"], list) or not isinstance(data["pairs"], list):
            raise FusionRulesError(f"{where}: 'rules' and 'pairs' must be lists")
        rules = []
        for i, pair in enumerate(data["rules"]):
            if (not isinstance(pair, list) or len(pair) != 2
                    or not all(isinstance(k, str) and k in KINDS for k in pair)):
                raise FusionRulesError(f"{where}: rules[{i}] = {pair!r} is not a pair of op "
                                       f"kinds ({', '.join(KINDS)})")
            rules.append((pair[0], pair[1]))
        if len(set(rules)) != len(rules):
            raise FusionRulesError(f"{where}: 'rules' lists a pair twice")
        if not all(isinstance(p, dict) for p in data["pairs"]):
            raise FusionRulesError(f"{where}: every entry of 'pairs' must be an object")
        return cls.of(data["backend"], rules, provenance=data["provenance"],
                      method=data["method"], pairs=tuple(data["pairs"]))


@cache
def names() -> tuple[str, ...]:
    """The shipped rule tables, e.g. ``("inductor-cpu",)`` (read once per process)."""
    return tuple(sorted(p.stem for p in _HERE.glob("*.json")))


def read(path: str | Path) -> RuleTable:
    """A rule table from a file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise FusionRulesError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise FusionRulesError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    return RuleTable.from_json(data, str(path))


@cache
def load(name: str) -> RuleTable:
    """The shipped table ``name`` (one object per name)."""
    if name not in names():
        shipped = ", ".join(names()) or "none"
        raise FusionRulesError(f"unknown fusion rule table {name!r}; shipped: {shipped}")
    return read(_HERE / f"{name}.json")


def table_for(fusion: str) -> RuleTable | None:
    """The table a fusion model ``rules:NAME`` names; None for the other fusion models."""
    if not fusion.startswith(PREFIX):
        return None
    return load(fusion[len(PREFIX):])
