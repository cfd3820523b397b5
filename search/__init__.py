"""Search over formats and hardware against accuracy tables.

``run_search(SearchRequest(target="1.3x_over_2:4"))`` runs `dse search` from Python (imported on
first use: it brings Optuna and SQLAlchemy, which the rest of the package does not need).

>>> from search import AccuracyTable
>>> import pandas as pd
>>> rows = [("dense", "dense", 0.0, 95.0), ("unstructured@50%", "unstructured", 0.5, 90.0)]
>>> table = AccuracyTable.from_frame(pd.DataFrame(
...     [{"model": "m", "pattern": p, "family": f, "block": None, "n": None, "m": None,
...       "sparsity": s, "metric": "top1", "value": v, "dataset": "d", "source": "doc"}
...      for p, f, s, v in rows]))
>>> table.lookup("m", "unstructured@25%").value
92.5
"""

from .accuracy import (
    COLUMNS,
    DEFAULT_TABLE,
    AccuracyLookup,
    AccuracyTable,
    AccuracyTableError,
    load_accuracy_table,
)

__all__ = [
    "COLUMNS",
    "SearchRequest",
    "load_space",
    "run_search",
    "DEFAULT_TABLE",
    "AccuracyLookup",
    "AccuracyTable",
    "AccuracyTableError",
    "load_accuracy_table",
]


def __getattr__(name: str):
    if name in ("run_search", "SearchRequest"):
        from . import study

        return getattr(study, name)
    if name == "load_space":
        from .space import load_space

        return load_space
    raise AttributeError(f"module 'search' has no attribute {name!r}")
