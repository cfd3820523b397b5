"""The mutation benchmark's table of survivors explained as equivalent
(``benchmarks.mutation.EQUIVALENT``) names lines as they are: an entry whose line was edited
or removed explains nothing any more, and must be checked and moved or dropped; and no entry
explains a mutant that a shipped journal records killed."""

from __future__ import annotations

import pytest

from benchmarks.mutation import EQUIVALENT, ROOT, disproved_equivalents, stale_equivalents

JOURNALS = sorted((ROOT / "benchmarks" / "results").glob("mutation_*.jsonl"))


def test_every_explained_survivor_still_names_a_mutant():
    assert EQUIVALENT
    stale = stale_equivalents()
    assert not stale, ("benchmarks/mutation.py's EQUIVALENT has entries for lines that changed "
                       "(re-check each with `python -m benchmarks.mutation --list --module "
                       f"MODULE`, then move or drop it): {stale}")


def test_every_module_has_a_shipped_journal():
    # The journal test below is parametrized over them: without any it would run nothing.
    from benchmarks.mutation import MODULES

    assert {p.stem.removeprefix("mutation_") for p in JOURNALS} >= set(MODULES)


@pytest.mark.parametrize("journal", JOURNALS, ids=[p.stem for p in JOURNALS])
def test_no_explained_survivor_is_killed_in_a_shipped_journal(journal):
    """A mutant explained as equivalent that a shipped journal records killed (on its file as
    it is now) is not equivalent: a test tells it apart, and the entry must go."""
    disproved = disproved_equivalents(journal)
    assert not disproved, (f"{journal.name} records these mutants killed, but EQUIVALENT "
                           f"explains them as equivalent; drop the entries: {disproved}")

