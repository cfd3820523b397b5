"""The contract every sparse format meets; implementations in the sibling modules are thin.

All shape arguments are per GEMM group: ``Y[M x N] = W[M x K] . X[K x N]``. Methods accept
numbers or numpy arrays (element-wise), so the evaluator prices a whole trace in one call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import IntEnum
from typing import ClassVar, Protocol

import numpy as np

__all__ = ["Format", "FormatError", "Capabilities", "Unit"]


class FormatError(ValueError):
    """A format string or parameter that cannot be used; the message names input and fix."""


class Unit(IntEnum):
    """The compute unit a kernel runs on. Values are the codes the numba kernels use."""

    TENSOR = 0  #: dense tensor cores: dense and block-sparse kernels, at the dense peak
    SPARSE_TENSOR = 1  #: structured-sparse tensor core: native N:M, at nonzero_rate x dense peak
    VECTOR = 2  #: vector (CUDA) cores: unstructured CSR


class Capabilities(Protocol):
    """What a format asks of hardware; :class:`accelerator_models.Accelerator` satisfies it."""

    def supports_nm(self, n: int, m: int) -> bool: ...

    def supports_block(self, block: int) -> bool: ...


class Format(ABC):
    """A weight format: how many weights it keeps, what its index costs, where it runs."""

    #: Pattern family: "dense", "nm", "block" or "unstructured".
    family: ClassVar[str]
    #: The unit the format's own kernel needs.
    unit: ClassVar[Unit]

    @property
    @abstractmethod
    def name(self) -> str:
        """Canonical format string; ``formats.parse(f.name) == f``."""

    @property
    @abstractmethod
    def density(self) -> float:
        """Fraction of weights kept, ``1 - sparsity``."""

    @property
    def sparsity(self) -> float:
        return 1.0 - self.density

    #: Whether a trace's per-layer densities (from a pruned checkpoint) replace this format's
    #: own sparsity. N:M fixes its density; dense has none.
    takes_layer_density: ClassVar[bool] = False

    @abstractmethod
    def applies_to(self, m, k):
        """Whether an ``M x K`` weight matrix can take this format (bool or bool array)."""

    @abstractmethod
    def index_bytes(self, m, k, index_width_bytes: float, density=None):
        """Metadata bytes of one ``M x K`` group stored in this format."""

    @abstractmethod
    def runs_natively_on(self, hardware: Capabilities) -> bool:
        """Whether the hardware runs this format's own kernel on :attr:`unit`."""

    # ``density``, where given (a number or an array like ``m``), replaces :attr:`density`:
    # the per-layer densities of a pruned checkpoint.

    def nnz(self, m, k, density=None):
        """Stored (nonzero) weights of one ``M x K`` group."""
        d = self.density if density is None else density
        return d * np.multiply(m, k, dtype=np.float64)

    def value_bytes(self, m, k, value_width_bytes: float, density=None):
        """Bytes of the stored weight values of one group."""
        return value_width_bytes * self.nnz(m, k, density)

    def useful_flops(self, m, k, n, density=None):
        """FLOPs of the useful work of one group: ``2 * nnz * N``."""
        return 2.0 * self.nnz(m, k, density) * n

    def __str__(self) -> str:
        return self.name
