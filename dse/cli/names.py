"""What the parsers offer (choices, defaults, shipped names), without importing the engines
that own them: importing :mod:`dse.roofline` loads numba, ``workloads`` loads pandas, and a
refused argument must not wait for either (issue 27). Each value is a copy of its owner's,
or read from the same folder; tests/test_cli_bad_input_imports.py checks every one against
its owner, so neither can drift from the other."""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = [
    "ACCURACY_LEVELS", "ACCURACY_PATTERNS", "ACCURACY_TABLE", "DEFAULT_BATCHES",
    "DEFAULT_FORMATS", "DEFAULT_INT4_GROUP", "DEFAULT_MAX_ACC_DROP", "DTYPES", "EVALUATORS",
    "FUSIONS", "LLM_METRICS", "LOCAL", "MAX_BATCH", "MAX_IMG_SIZE", "OBJECTIVES", "PHASES",
    "RESIDUALS", "SCOPES", "SPMV_CNN_EPOCHS", "WEIGHT_DTYPES", "fusion_models", "llm_names",
    "shipped_datasets", "trace_names",
]

#: workloads.MAX_BATCH
MAX_BATCH = 2**24
#: workloads.llm.PHASES
PHASES = ("prefill", "decode")
#: dse.roofline.SCOPES and FUSIONS
SCOPES = ("gemm", "all")
FUSIONS = ("unfused", "fused", "fused_prefetched")
#: The keys of dse.roofline.numerics.DTYPE_BYTES and WEIGHT_DTYPE_BYTES, and its
#: DEFAULT_INT4_GROUP
DTYPES = ("fp16", "bf16", "tf32", "fp8", "int8", "fp32")
WEIGHT_DTYPES = ("int8", "int4", "fp8")
DEFAULT_INT4_GROUP = 128
#: dse.explore.EVALUATORS
EVALUATORS = ("roofline", "simulate")
#: dse.sim.LOCAL: --dask given without an address
LOCAL = "local"
#: search.target.OBJECTIVES and DEFAULT_MAX_ACC_DROP
OBJECTIVES = ("speedup", "accuracy", "pareto", "energy", "edp")
DEFAULT_MAX_ACC_DROP = 1.0
#: The keys of dse.accuracy.llm_table.LLM_METRICS
LLM_METRICS = ("wikitext2_ppl", "zeroshot_mean", "openllm_v1_mean")
#: dse.explore.studies.DEFAULT_FORMATS and DEFAULT_BATCHES
DEFAULT_FORMATS = ("2:4", "1:4", "block16@87.5%", "unstructured@87.5%")
DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)

#: dse.roofline.fusion_rules's folder of shipped rule tables, and its prefix.
_FUSION_RULES_DIR = Path(__file__).resolve().parents[1] / "roofline" / "fusion_rules"
_RULES_PREFIX = "rules:"


def fusion_models() -> tuple[str, ...]:
    """dse.roofline.evaluator.fusion_models(): FUSIONS and ``rules:NAME`` per shipped table."""
    return FUSIONS + tuple(_RULES_PREFIX + name
                           for name in sorted(p.stem for p in _FUSION_RULES_DIR.glob("*.json")))


def _workloads_dir() -> Path:
    # find_spec locates a top-level package without running its __init__ (pandas).
    spec = importlib.util.find_spec("workloads")
    return Path(next(iter(spec.submodule_search_locations)))


def trace_names() -> list[str]:
    """workloads.trace_names(): the shipped traces, sorted."""
    return sorted(p.stem for p in (_workloads_dir() / "traces").glob("*.json"))


def llm_names() -> list[str]:
    """workloads.llm_names(): the shipped language-model configurations, sorted."""
    return sorted(p.stem for p in (_workloads_dir() / "llm_configs").glob("*.json"))


#: dse.calibrate.predictor.RESIDUALS, and dse.calibrate.spmv_cnn.EPOCHS
RESIDUALS = ("trees", "monotone")
SPMV_CNN_EPOCHS = 10
#: dse.measure.dataset's folder of shipped datasets (its DATASETS_DIR).
_DATASETS_DIR = Path(__file__).resolve().parents[1] / "measure" / "datasets"


def shipped_datasets() -> list[str]:
    """dse.measure.dataset.shipped_datasets(): the shipped measured datasets, sorted."""
    return sorted(p.stem for p in _DATASETS_DIR.glob("*.parquet"))


#: dse.accuracy.pipeline.DEFAULT_PATTERNS, DEFAULT_LEVELS and MAX_IMG_SIZE
ACCURACY_PATTERNS = ("unstructured", "block2", "block4", "block8", "block16", "block32",
                     "2:4", "1:4", "2:8", "2:16")
ACCURACY_LEVELS = (0.5, 0.75, 0.875, 0.9375, 0.96875)
MAX_IMG_SIZE = 512
#: dse.accuracy.table.DEFAULT_TABLE: the shipped accuracy table.
ACCURACY_TABLE = (Path(__file__).resolve().parents[1] / "accuracy" / "tables"
                  / "accuracy_default.csv")
