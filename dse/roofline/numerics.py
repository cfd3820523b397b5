"""Number formats of a run: what values, features and indices are stored in, and which vector
rate elementwise work and CSR kernels run at. Software choices, so they live beside the
evaluator rather than in the hardware spec."""

from __future__ import annotations

from dataclasses import dataclass

from accelerator_models import TENSOR_DTYPES, VECTOR_DTYPES

__all__ = ["DTYPE_BYTES", "Numerics", "NumericsError"]

#: Storage bytes per element (tf32 is stored as fp32).
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "tf32": 4, "fp8": 1, "int8": 1, "fp32": 4}


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
    """

    dtype: str = "fp16"
    vector_dtype: str = "fp16"
    csr_dtype: str = "fp32"
    index_width_bytes: int = 4

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

    @property
    def value_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]
