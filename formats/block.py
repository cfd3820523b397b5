"""Block sparsity: whole b x b blocks of the weight matrix are zero, stored as BSR."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import Capabilities, Format, FormatError, Unit, kept_share
from .sparsity import check_sparsity, percent

MAX_BLOCK = 64


@dataclass(frozen=True)
class Block(Format):
    block: int
    block_sparsity: float

    family = "block"
    unit = Unit.TENSOR
    takes_layer_density = True

    def __post_init__(self) -> None:
        if not 1 <= self.block <= MAX_BLOCK:
            raise FormatError(f"block size {self.block} is out of range; use 1 to {MAX_BLOCK}")
        check_sparsity(self.block_sparsity, f"block{self.block}")

    @property
    def name(self) -> str:
        return f"block{self.block}@{percent(self.block_sparsity)}"

    @property
    def density(self) -> float:
        return 1.0 - self.block_sparsity

    def applies_to(self, m, k):
        return (np.mod(m, self.block) == 0) & (np.mod(k, self.block) == 0)

    def index_bytes(self, m, k, index_width_bytes: float, density=None):
        # BSR: one column index per stored block, one row pointer per block row, plus one.
        b = self.block
        return index_width_bytes * (self.nnz(m, k, density) / (b * b) + np.divide(m, b) + 1.0)

    def input_read_share(self, m, k, density=None):
        # A block-column of b rows of X is read when any of its M/b blocks is kept.
        d = self.density if density is None else density
        return kept_share(d, np.divide(m, self.block)) * np.ones(np.broadcast(m, k).shape)

    def runs_natively_on(self, hardware: Capabilities) -> bool:
        return hardware.supports_block(self.block)
