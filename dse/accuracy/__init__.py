"""``dse accuracy``: measure the accuracy of sparse formats by masked pruning with learning-rate
rewinding (torch/timm extra). See :mod:`dse.accuracy.pipeline`."""

from .data import AccuracyError, Dataset, load_dataset
from .pipeline import (
    DEFAULT_LEVELS,
    DEFAULT_PATTERNS,
    AccuracyConfig,
    Stage,
    environment,
    plan,
    run_accuracy,
    table_frame,
)

__all__ = [
    "DEFAULT_LEVELS",
    "DEFAULT_PATTERNS",
    "AccuracyConfig",
    "AccuracyError",
    "Dataset",
    "Stage",
    "environment",
    "load_dataset",
    "plan",
    "run_accuracy",
    "table_frame",
]
