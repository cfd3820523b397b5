"""Accuracy: what a sparse format costs a model, measured and tabled.

Owns accuracy tables (:mod:`.table`: validated CSV tables, lookups with interpolation within a
family, and ``attach_accuracy``, the one place accuracy is joined onto a frame of designs), the
shipped table (``tables/``, with its provenance), and ``dse accuracy``'s trainer (:mod:`.pipeline`
and :mod:`.data`: masked pruning with learning-rate rewinding; torch and timm are imported only
when it runs). Imports the ground packages and :mod:`dse.output`.
"""

from .data import AccuracyError, Dataset, load_dataset
from .llm_table import (
    LLM_TABLE,
    LLMAccuracy,
    LLMAccuracyTable,
    load_llm_accuracy_table,
)
from .pipeline import (
    DEFAULT_LEVELS,
    DEFAULT_PATTERNS,
    MODEL_ALIASES,
    AccuracyConfig,
    Stage,
    environment,
    plan,
    run_accuracy,
    table_frame,
)
from .table import (
    COLUMNS,
    DEFAULT_TABLE,
    AccuracyLookup,
    AccuracyTable,
    AccuracyTableError,
    attach_accuracy,
    load_accuracy_table,
)

__all__ = [
    "COLUMNS",
    "DEFAULT_LEVELS",
    "DEFAULT_PATTERNS",
    "DEFAULT_TABLE",
    "LLM_TABLE",
    "MODEL_ALIASES",
    "AccuracyConfig",
    "AccuracyError",
    "AccuracyLookup",
    "AccuracyTable",
    "AccuracyTableError",
    "Dataset",
    "LLMAccuracy",
    "LLMAccuracyTable",
    "Stage",
    "attach_accuracy",
    "environment",
    "load_accuracy_table",
    "load_dataset",
    "load_llm_accuracy_table",
    "plan",
    "run_accuracy",
    "table_frame",
]
