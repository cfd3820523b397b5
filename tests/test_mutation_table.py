"""The mutation benchmark's table of survivors explained as equivalent
(``benchmarks.mutation.EQUIVALENT``) names lines as they are: an entry whose line was edited
or removed explains nothing any more, and must be checked and moved or dropped."""

from __future__ import annotations

from benchmarks.mutation import EQUIVALENT, stale_equivalents


def test_every_explained_survivor_still_names_a_mutant():
    assert EQUIVALENT
    stale = stale_equivalents()
    assert not stale, ("benchmarks/mutation.py's EQUIVALENT has entries for lines that changed "
                       "(re-check each with `python -m benchmarks.mutation --list --module "
                       f"MODULE`, then move or drop it): {stale}")
