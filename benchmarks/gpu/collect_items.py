"""What a part of ``collect`` is made of: items (one configuration each, with a key that is
stable from run to run, so a rerun can skip what is done) and the tables an item adds to."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["TABLES", "Item", "Part"]

#: Tables an item's rows go to: dse's kernel dataset, the per-op model profiles, the energy
#: readings (schemas: dse.measure.dataset.SCHEMA, collect_models.PROFILE_SCHEMA,
#: collect_energy.ENERGY_SCHEMA).
TABLES = ("kernels", "profiles", "energy")


@dataclass(frozen=True)
class Item:
    """One configuration of a part: ``key`` names it for resuming, ``config`` is the part's own
    description of it."""

    key: str
    config: object


@dataclass(frozen=True)
class Part:
    """A part of the collection: its share of the budget, its items, how one is run (rows per
    table) and how its reusable objects are freed at the end."""

    name: str
    weight: float  #: share of the budget, relative to the other parts asked for
    what: str  #: one line for the plan
    items: Callable[[bool], list[Item]]  #: smoke -> items, in the order they run
    run: Callable[[Item, object], dict[str, list[dict]]]  #: (item, Bench) -> rows per table
    finish: Callable[[object], None] = lambda bench: None
