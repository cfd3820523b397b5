"""Unstructured sparsity stored as CSR, run on the vector cores."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import Capabilities, Format, Unit, kept_share
from .sparsity import check_sparsity, percent


@dataclass(frozen=True)
class Unstructured(Format):
    unstructured_sparsity: float

    family = "unstructured"
    unit = Unit.VECTOR
    takes_layer_density = True

    def __post_init__(self) -> None:
        check_sparsity(self.unstructured_sparsity, "unstructured")

    @property
    def name(self) -> str:
        return f"unstructured@{percent(self.unstructured_sparsity)}"

    @property
    def density(self) -> float:
        return 1.0 - self.unstructured_sparsity

    def applies_to(self, m, k):
        return np.full(np.broadcast(m, k).shape, True)

    def index_bytes(self, m, k, index_width_bytes: float, density=None):
        # CSR: one column index per nonzero, M + 1 row pointers.
        return index_width_bytes * (self.nnz(m, k, density) + np.asarray(m, dtype=np.float64)
                                    + 1.0)

    def input_read_share(self, m, k, density=None):
        # Row k of X is read when any of the M weights of column k is kept.
        d = self.density if density is None else density
        return kept_share(d, m) * np.ones(np.broadcast(m, k).shape)

    def runs_natively_on(self, hardware: Capabilities) -> bool:
        # Every accelerator has vector cores; CSR never needs special hardware.
        return True
