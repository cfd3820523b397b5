"""Search over formats and hardware against accuracy tables.

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
    "DEFAULT_TABLE",
    "AccuracyLookup",
    "AccuracyTable",
    "AccuracyTableError",
    "load_accuracy_table",
]
