"""The contract every sparse format meets; implementations in the sibling modules are thin.

All shape arguments are per GEMM group: ``Y[M x N] = W[M x K] . X[K x N]``. Methods accept
numbers or numpy arrays (element-wise), so the evaluator prices a whole trace in one call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import IntEnum
from typing import ClassVar, Protocol

import numpy as np

__all__ = ["Format", "FormatError", "Capabilities", "Unit", "kept_share", "read_share"]


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

    def input_read_share(self, m, k, density=None):
        """Expected share of the ``K`` rows of ``X`` that a kernel reads for one ``M x K``
        group under a random mask: a row ``k`` is never read when column ``k`` of ``W`` is
        empty. Dense reads every row; the sparse formats override this with the chance that
        one of the column's ``r`` independent slots (rows, blocks) is kept,
        ``1 - (1 - q)^r``. A checkpoint's real masks give the exact share
        (:func:`formats.read_share`)."""
        return np.ones(np.broadcast(m, k).shape)

    def useful_flops(self, m, k, n, density=None):
        """FLOPs of the useful work of one group: ``2 * nnz * N``."""
        return 2.0 * self.nnz(m, k, density) * n

    def __str__(self) -> str:
        return self.name


def kept_share(keep_probability, slots):
    """``1 - (1 - q)^r``: the chance that at least one of ``r`` independent slots, each kept
    with probability ``q``, is kept (element-wise). Computed as ``-expm1(r log1p(-q))`` so that
    a share near 0 (a tiny q) keeps its digits."""
    q = np.clip(np.asarray(keep_probability, dtype=np.float64), 0.0, 1.0)
    r = np.asarray(slots, dtype=np.float64)
    some = q < 1.0
    return np.where(some, -np.expm1(r * np.log1p(-np.where(some, q, 0.0))), 1.0)


def read_share(mask, groups: int = 1) -> float:
    """The exact share of the rows of ``X`` a kernel reads for a real mask: the share of the
    columns of ``W`` that hold at least one kept weight. ``mask``: ``[groups * M, K]`` (a
    convolution's groups stacked along M, as :mod:`formats.masks` views weights); each group
    reads its own slice of X, so the share is over all groups' columns."""
    mask = np.asarray(mask, dtype=bool)
    if mask.ndim != 2 or groups < 1 or mask.shape[0] % groups:
        raise ValueError(f"mask of shape {mask.shape} does not split into {groups} groups")
    per_group = mask.reshape(groups, mask.shape[0] // groups, mask.shape[1])
    return float(per_group.any(axis=1).mean()) if mask.size else 1.0
