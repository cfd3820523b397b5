"""Dense weights: the baseline every speedup is measured against."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import Capabilities, Format, Unit


@dataclass(frozen=True)
class Dense(Format):
    family = "dense"
    unit = Unit.TENSOR

    @property
    def name(self) -> str:
        return "dense"

    @property
    def density(self) -> float:
        return 1.0

    def applies_to(self, m, k):
        return np.full(np.broadcast(m, k).shape, True)

    def index_bytes(self, m, k, index_width_bytes: float, density=None):
        return np.zeros(np.broadcast(m, k).shape)

    def runs_natively_on(self, hardware: Capabilities) -> bool:
        return True
