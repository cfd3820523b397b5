"""N:M structured sparsity: at most N nonzeros in every M consecutive weights along K."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .base import Capabilities, Format, FormatError, Unit, kept_share

#: The largest group size M. Far beyond any layer's K (a group must divide K), and small enough
#: that the sparsity 1 - N/M stays below 1 in float64 (1:10**20 would round to 100%).
MAX_M = 2**16


#: The rule an N:M format must follow, as error messages state it.
RULE = f"N:M needs 1 <= N < M <= {MAX_M:,} (e.g. 2:4)"


@dataclass(frozen=True)
class NM(Format):
    n: int
    m: int

    family = "nm"
    unit = Unit.SPARSE_TENSOR

    def __post_init__(self) -> None:
        if not 1 <= self.n < self.m <= MAX_M:
            raise FormatError(f"N:M format {self.n}:{self.m}: {RULE}")

    @property
    def name(self) -> str:
        return f"{self.n}:{self.m}"

    @property
    def density(self) -> float:
        return self.n / self.m

    @property
    def index_bits_per_nonzero(self) -> int:
        """``ceil(log2 M)`` bits locate a nonzero inside its group of M (2 bits for 2:4)."""
        return math.ceil(math.log2(self.m))

    def applies_to(self, m, k):
        # Groups of M run along K, so K must be a multiple of M.
        return np.mod(k, self.m) == 0

    def index_bytes(self, m, k, index_width_bytes: float, density=None):
        # N:M metadata has a fixed width per nonzero; the configured index width does not apply.
        return self.nnz(m, k, density) * self.index_bits_per_nonzero / 8.0

    def input_read_share(self, m, k, density=None):
        # Each of the M rows keeps column k with probability N/M (N of each run of M).
        return kept_share(self.n / self.m, m) * np.ones(np.broadcast(m, k).shape)

    def runs_natively_on(self, hardware: Capabilities) -> bool:
        return hardware.supports_nm(self.n, self.m)
