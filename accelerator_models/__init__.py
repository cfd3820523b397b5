"""Accelerator models: strict TOML specs of real and hypothetical GPUs, and the shipped catalog.

>>> from accelerator_models import load
>>> a100 = load("a100", ["sparse_tensor.patterns=2:4,1:4"])
>>> a100.supports_nm(1, 4)
True
"""

from .catalog import CATALOG_DIR, aliases, catalog_names, derive, load, resolve_path, spec_fields
from .loader import CACHE_FIELDS, ENERGY_FIELDS, FIELDS, SIMULATOR_FIELDS, parse_pattern
from .spec import (
    CACHE_LEVELS,
    FIGURES,
    TENSOR_DTYPES,
    VECTOR_DTYPES,
    Accelerator,
    BlockSparse,
    CacheLevel,
    SparseTensorCore,
    SpecError,
)

__all__ = [
    "Accelerator",
    "BlockSparse",
    "CACHE_FIELDS",
    "CACHE_LEVELS",
    "CATALOG_DIR",
    "CacheLevel",
    "ENERGY_FIELDS",
    "FIELDS",
    "FIGURES",
    "SIMULATOR_FIELDS",
    "SparseTensorCore",
    "SpecError",
    "TENSOR_DTYPES",
    "VECTOR_DTYPES",
    "aliases",
    "catalog_names",
    "derive",
    "load",
    "parse_pattern",
    "resolve_path",
    "spec_fields",
]
