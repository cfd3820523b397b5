"""Number formats of a run: what values, features and indices are stored in, and which vector
rate elementwise work and CSR kernels run at. Software choices, so they live beside the
evaluator rather than in the hardware spec."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from accelerator_models import TENSOR_DTYPES, VECTOR_DTYPES

__all__ = ["DEFAULT_INT4_GROUP", "DTYPE_BYTES", "DTYPE_COLUMNS", "SCALE_BYTES",
           "WEIGHT_DTYPE_BYTES", "Numerics", "NumericsError", "with_dtype_columns"]

#: Storage bytes per element (tf32 is stored as fp32).
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "tf32": 4, "fp8": 1, "int8": 1, "fp32": 4}
#: Weight-only quantised storage, bytes per value (int4 packs two values to a byte).
WEIGHT_DTYPE_BYTES = {"int8": 1, "int4": 0.5, "fp8": 1}
#: One fp16 scale per quantisation group.
SCALE_BYTES = 2
#: int4's group size along K when none is given (torchao's and GPTQ's usual 128).
DEFAULT_INT4_GROUP = 128


class NumericsError(ValueError):
    """An unknown dtype or a bad index width."""


@dataclass(frozen=True)
class Numerics:
    """Datatypes of one evaluation.

    ``dtype``: the tensor-core dtype; weight values and features are stored in it.
    ``vector_dtype``: elementwise ops (norms, activations, softmax) on the vector cores.
    ``csr_dtype``: unstructured CSR kernels on the vector cores; FP32 by default because sparse
    libraries accumulate in FP32 (on an A100 that is 16x below the FP16 tensor-core peak).
    ``index_width_bytes``: width of CSR and BSR indices (N:M metadata has its own width).
    ``weight_dtype``: weight-only quantisation (``WEIGHT_DTYPE_BYTES``) of the GEMM weights of
    ``linear`` and ``conv`` ops; None (or the compute dtype itself): stored in ``dtype``.
    Quantised values carry fp16 scales, one per group of ``weight_group_size`` consecutive
    weights along K in each row of W (default: 128 for int4, the whole row, i.e. one per
    output channel, for int8 and fp8), counted over the dense K whatever the sparse format
    (as Sparse-Marlin and torchao store 2:4 + int4). Biases and norm weights stay in
    ``dtype``; so do activations, and FLOPs run at ``dtype`` (weights are dequantised).
    ``kv_dtype``: a language model's KV cache (``DTYPE_BYTES``); None: ``dtype``.
    """

    dtype: str = "fp16"
    vector_dtype: str = "fp16"
    csr_dtype: str = "fp32"
    index_width_bytes: int = 4
    weight_dtype: str | None = None
    weight_group_size: int | None = None
    kv_dtype: str | None = None

    def __post_init__(self) -> None:
        if self.dtype not in TENSOR_DTYPES:
            raise NumericsError(f"dtype {self.dtype!r} is not a tensor-core dtype; "
                                f"use one of {', '.join(TENSOR_DTYPES)}")
        for name in ("vector_dtype", "csr_dtype"):
            if getattr(self, name) not in VECTOR_DTYPES:
                raise NumericsError(f"{name} {getattr(self, name)!r} is not a vector dtype; "
                                    f"use one of {', '.join(VECTOR_DTYPES)}")
        width = self.index_width_bytes
        if isinstance(width, bool) or not isinstance(width, int) or width not in (1, 2, 4, 8):
            raise NumericsError(f"index width {width!r} bytes is not one of 1, 2, 4, 8")
        if self.weight_dtype is not None and self.weight_dtype not in WEIGHT_DTYPE_BYTES \
                and self.weight_dtype != self.dtype:
            raise NumericsError(f"weight dtype {self.weight_dtype!r} is not a weight-only "
                                f"quantisation; use one of {', '.join(WEIGHT_DTYPE_BYTES)}")
        if self.quantised and WEIGHT_DTYPE_BYTES[self.weight_dtype] >= self.value_bytes:
            raise NumericsError(f"weight dtype {self.weight_dtype} is no narrower than the "
                                f"compute dtype {self.dtype} ({self.value_bytes} byte(s)): "
                                "weight-only quantisation stores weights in fewer bytes than "
                                "they are computed in; use int4, or a wider compute dtype")
        group = self.weight_group_size
        if group is not None:
            if isinstance(group, bool) or not isinstance(group, int) or group < 1:
                raise NumericsError(f"weight group size {group!r} must be a whole number of "
                                    "weights >= 1 (e.g. 128)")
            if not self.quantised:
                raise NumericsError(f"weight group size {group} needs a quantised weight dtype "
                                    f"({', '.join(WEIGHT_DTYPE_BYTES)}) other than the compute "
                                    f"dtype {self.dtype}")
        if self.kv_dtype is not None and self.kv_dtype not in DTYPE_BYTES:
            raise NumericsError(f"KV-cache dtype {self.kv_dtype!r} is not known; use one of "
                                f"{', '.join(DTYPE_BYTES)}")

    @property
    def value_bytes(self) -> int:
        """Bytes of one feature (and of one weight when the weights are not quantised)."""
        return DTYPE_BYTES[self.dtype]

    @property
    def quantised(self) -> bool:
        """Whether the GEMM weights are stored quantised, with scales (weight-only)."""
        return self.weight_dtype is not None and self.weight_dtype != self.dtype

    @property
    def weight_value_bytes(self) -> float:
        """Bytes of one stored GEMM weight value (0.5 for int4), scales not included."""
        return WEIGHT_DTYPE_BYTES[self.weight_dtype] if self.quantised else self.value_bytes

    @property
    def group_size(self) -> int | None:
        """Quantisation group along K; None: one scale per row of W (or no scales)."""
        if self.weight_group_size is not None or not self.quantised:
            return self.weight_group_size
        return DEFAULT_INT4_GROUP if self.weight_dtype == "int4" else None

    @property
    def kv_value_bytes(self) -> int:
        """Bytes of one cached key or value."""
        return DTYPE_BYTES[self.kv_dtype or self.dtype]

    @property
    def weight_label(self) -> str:
        """How the weights are stored, e.g. ``int4 (group 128)``, ``fp8 (per channel)``,
        ``fp16``."""
        if not self.quantised:
            return self.dtype
        group = self.group_size
        return f"{self.weight_dtype} ({'per channel' if group is None else f'group {group}'})"

    def scale_bytes(self, m, k):
        """Scale bytes of one ``M x K`` weight group: ``SCALE_BYTES x M x ceil(K / group)``
        (one per row where the group is the whole row; 0 unquantised or where K is 0).
        Element-wise over arrays."""
        if not self.quantised:
            return np.zeros(np.broadcast(m, k).shape)
        m, k = np.asarray(m, dtype=np.float64), np.asarray(k, dtype=np.float64)
        group = self.group_size
        per_row = np.minimum(k, 1.0) if group is None else np.ceil(k / group)
        return SCALE_BYTES * m * per_row


#: The columns :func:`with_dtype_columns` adds: the number types a result was priced in.
DTYPE_COLUMNS = ("dtype", "vector_dtype", "csr_dtype", "index_bytes", "weight_dtype", "kv_dtype")


def with_dtype_columns(table: pd.DataFrame, numerics: Numerics | None = None,
                       language: bool | Sequence[bool] = False) -> pd.DataFrame:
    """``table`` with the number types its rows were priced in, last, as the ``--out`` files of
    ``dse evaluate``, ``simulate`` and ``compare`` carry them: ``dtype``, ``vector_dtype``,
    ``csr_dtype``, ``index_bytes``, ``weight_dtype`` (how the weights are stored: ``fp16``,
    ``int4 (group 128)``, ``fp8 (per channel)``) and, for the rows of a language model
    (``language``: one flag, or one per row), ``kv_dtype`` (empty on the other rows; absent
    where no row has a KV cache). ``numerics``: default :class:`Numerics`'s defaults."""
    numerics = Numerics() if numerics is None else numerics
    values: dict[str, object] = {
        "dtype": numerics.dtype, "vector_dtype": numerics.vector_dtype,
        "csr_dtype": numerics.csr_dtype, "index_bytes": numerics.index_width_bytes,
        "weight_dtype": numerics.weight_label}
    if isinstance(language, bool):
        if language and len(table):
            values["kv_dtype"] = [numerics.kv_dtype or numerics.dtype] * len(table)
    elif any(rows := list(language)):
        kv = numerics.kv_dtype or numerics.dtype
        values["kv_dtype"] = [kv if r else None for r in rows]
    # Together, at the end, in DTYPE_COLUMNS' order: the table's own columns of those names
    # (a kv_dtype no row here sets) move there; one concatenation, no insertion each.
    last = [c for c in DTYPE_COLUMNS if c in values or c in table.columns]
    moved = [c for c in last if c in table.columns]
    added = {c: values[c] if c in values else table[c].array for c in last}
    front = table.drop(columns=moved) if moved else table
    return pd.concat([front, pd.DataFrame(added, index=table.index)], axis=1)
