"""Search over formats and hardware against accuracy tables.

Owns search spaces in TOML (:mod:`.space`), targets and objectives (:mod:`.target`), scoring and
ranking designs (:mod:`.scoring`), the exhaustive and Optuna engines, study storage in SQLite or
PostgreSQL (:mod:`.storage`) and running a study (:mod:`.study`). It evaluates through
``dse.explore``'s grid and takes accuracy from ``dse.accuracy``; it never prints and never reads
argv (the command line, ``dse.cli.search``, does both).

``run_search(SearchRequest(target="1.3x_over_2:4"))`` runs `dse search` from Python (imported on
first use: it brings Optuna and SQLAlchemy).

>>> from search import load_space
>>> space, _ = load_space()
>>> space.models
('convnext_tiny', 'swin_tiny')
"""

__all__ = [
    "SearchRequest",
    "load_space",
    "run_search",
]


def __getattr__(name: str):
    if name in ("run_search", "SearchRequest"):
        from . import study

        return getattr(study, name)
    if name == "load_space":
        from .space import load_space

        return load_space
    raise AttributeError(f"module 'search' has no attribute {name!r}")
