"""Adaptive sampling of kernel configurations (after nn-Meter's adaptive data sampling).

Beyond a trace's own shapes, a run spends what is left of its budget on new configurations
``(family, M, K, N, groups, sparsity, block)``:

1. **Space-filling start.** Candidates are drawn around the distinct prunable shapes of the
   shipped traces (every ``workloads`` trace, N at batch 1, 8 or 32), each dimension scaled by
   ``2^u``, ``u`` uniform in [-1, 1], with a sparsity and block from the grids below; a greedy
   maximin pass keeps those farthest from everything chosen or measured so far.
2. **Quick model, held-out error.** Per implementation, an inverse-distance k-nearest-
   neighbour model predicts ``log(fraction of the speed of light)`` from the features
   ``log2 M, log2 K, log2 N, log2 groups, -log2(1 - sparsity), log2 block``; every measured
   point's leave-one-out error is the model's held-out error there.
3. **Refine where the error is largest.** New candidates are drawn around the points with the
   largest held-out error (``2^u``, ``u`` in [-1/2, 1/2]), families taking turns and each
   point refined once, and the one farthest from the points already measured is added. Each
   added configuration says why, in ``why``.

Pure numpy (no scikit-learn); deterministic for a seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = [
    "BLOCKS",
    "SPARSITIES",
    "AdaptiveSampler",
    "Config",
    "features",
    "loo_errors",
    "shape_pool",
]

SPARSITIES = (0.5, 0.75, 0.875, 0.9, 0.9375, 0.96875)
BLOCKS = (2, 4, 8, 16, 32)
BATCHES = (1, 8, 32)
#: Largest configuration sampled, per device: (FLOPs of the dense GEMM, bytes of fp32 operands).
LIMITS = {"cpu": (4e9, 256e6), "cuda": (2e12, 4e9)}


@dataclass(frozen=True)
class Config:
    """One kernel configuration to measure, and why it was chosen."""

    family: str
    m: int
    k: int
    n: int
    groups: int
    sparsity: float
    block: int
    why: str = ""

    def format(self):
        import formats

        if self.family == "dense":
            return formats.parse("dense")
        if self.family == "block":
            return formats.parse(f"block{self.block}@{self.sparsity}")
        if self.family == "unstructured":
            return formats.parse(f"unstructured@{self.sparsity}")
        if self.family == "nm":
            return formats.parse("2:4")
        raise ValueError(f"no format for family {self.family!r}")

    def key(self) -> tuple:
        return (self.family, self.m, self.k, self.n, self.groups, round(self.sparsity, 6),
                self.block)


def features(m, k, n, groups, sparsity, block) -> np.ndarray:
    """The model's feature matrix ``[rows, 6]`` (every argument a number or an array)."""
    sparsity = np.minimum(np.asarray(sparsity, dtype=float), 0.999)
    return np.stack([
        np.log2(np.maximum(np.asarray(m, float), 1)),
        np.log2(np.maximum(np.asarray(k, float), 1)),
        np.log2(np.maximum(np.asarray(n, float), 1)),
        np.log2(np.maximum(np.asarray(groups, float), 1)),
        -np.log2(1.0 - sparsity),
        np.log2(np.maximum(np.asarray(block, float), 1)),
    ], axis=-1).reshape(-1, 6)


def loo_errors(x: np.ndarray, y: np.ndarray, neighbours: int = 3) -> np.ndarray:
    """Leave-one-out absolute error of an inverse-distance k-nearest-neighbour regression of
    ``y`` on ``x``: each point predicted from its ``neighbours`` nearest other points."""
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    count = len(y)
    if count < 2:
        return np.full(count, np.inf)
    d = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    np.fill_diagonal(d, np.inf)
    kk = min(neighbours, count - 1)
    nearest = np.argsort(d, axis=1)[:, :kk]
    dist = np.take_along_axis(d, nearest, axis=1)
    weights = 1.0 / np.maximum(dist, 1e-6)
    prediction = (weights * y[nearest]).sum(1) / weights.sum(1)
    return np.abs(prediction - y)


def shape_pool(trace_names: Sequence[str] | None = None) -> pd.DataFrame:
    """Distinct prunable shapes ``(model, m, k, n per sample, groups)`` of the shipped traces."""
    import workloads

    frames = []
    for name in trace_names if trace_names is not None else workloads.trace_names():
        ops = workloads.load_trace(name).ops
        ops = ops[ops["prunable"]][["m", "k", "n", "groups"]].drop_duplicates()
        frames.append(ops.assign(model=name))
    return pd.concat(frames, ignore_index=True)


class AdaptiveSampler:
    """Proposes configurations: first a space-filling start, then refinements where the quick
    model's held-out error is largest. ``families``: the format families to sample."""

    def __init__(self, families: Sequence[str], seed: int = 0, device: str = "cpu",
                 pool: pd.DataFrame | None = None, initial: int = 12, neighbours: int = 3):
        self.families = list(dict.fromkeys(families))
        self.rng = np.random.default_rng(seed)
        self.limits = LIMITS[device]
        self.pool = pool if pool is not None else shape_pool()
        self.initial = initial
        self.neighbours = neighbours
        self.proposed: list[Config] = []
        self.refined: set[tuple] = set()

    # --- candidates -----------------------------------------------------------------------

    def _round(self, value: float, quantum: int) -> int:
        return max(quantum, int(round(value / quantum)) * quantum)

    def _candidate(self, family: str, m: float, k: float, n: float, groups: int,
                   spread: float, sparsity: float | None = None,
                   block: int | None = None) -> Config | None:
        u = self.rng.uniform(-spread, spread, 3)
        m, k, n = m * 2 ** u[0], k * 2 ** u[1], n * 2 ** u[2]
        if family == "dense":
            sparsity, block = 0.0, 0
        elif family == "nm":
            sparsity, block = 0.5, 4
        else:
            if sparsity is None:
                sparsity = float(self.rng.choice(SPARSITIES))
            if family == "block":
                block = int(block if block is not None else self.rng.choice(BLOCKS))
            else:
                block = 1
        quantum = block if family in ("block", "nm") else (8 if m >= 16 else 1)
        mq = self._round(m, quantum)
        kq = self._round(k, block if family in ("block", "nm") else (8 if k >= 16 else 1))
        nq = max(1, int(round(n)))
        flops = 2.0 * mq * kq * nq * groups
        nbytes = 4.0 * groups * (mq * kq + kq * nq + mq * nq)
        if flops > self.limits[0] or nbytes > self.limits[1]:
            return None
        return Config(family, mq, kq, nq, int(groups), float(sparsity), int(block))

    def _around_pool(self, family: str) -> Config | None:
        shape = self.pool.iloc[int(self.rng.integers(len(self.pool)))]
        if family in ("block", "nm") and shape["m"] < 8:
            return None  # depthwise rows cannot take blocks
        batch = int(self.rng.choice(BATCHES))
        return self._candidate(family, shape["m"], shape["k"], shape["n"] * batch,
                               int(shape["groups"]), spread=1.0)

    @staticmethod
    def _features(configs: Sequence[Config]) -> np.ndarray:
        if not configs:
            return np.empty((0, 6))
        return features([c.m for c in configs], [c.k for c in configs],
                        [c.n for c in configs], [c.groups for c in configs],
                        [c.sparsity for c in configs], [c.block for c in configs])

    @staticmethod
    def _measured_features(measured: pd.DataFrame, family: str) -> np.ndarray:
        if measured is None or measured.empty:
            return np.empty((0, 6))
        rows = measured[measured["family"] == family]
        return features(rows["m"], rows["k"], rows["n"], rows["groups"], rows["sparsity"],
                        rows["block"])

    def _farthest(self, candidates: list[Config], taken: np.ndarray) -> tuple[Config, float]:
        cand = self._features(candidates)
        if len(taken) == 0:
            return candidates[0], math.inf
        d = np.sqrt(((cand[:, None, :] - taken[None, :, :]) ** 2).sum(-1)).min(1)
        best = int(np.argmax(d))
        return candidates[best], float(d[best])

    # --- proposals ------------------------------------------------------------------------

    def space_filling(self, measured: pd.DataFrame | None, count: int) -> list[Config]:
        """``count`` configurations around the shipped traces' shapes, each the farthest
        (maximin) from everything measured or proposed before, families in turn."""
        chosen: list[Config] = []
        for i in range(count):
            family = self.families[(len(self.proposed) + i) % len(self.families)]
            candidates = [c for c in (self._around_pool(family) for _ in range(200)) if c]
            if not candidates:
                continue
            taken = np.concatenate([self._measured_features(measured, family),
                                    self._features([c for c in (*self.proposed, *chosen)
                                                    if c.family == family])])
            pick, dist = self._farthest(candidates, taken)
            chosen.append(Config(**{**pick.__dict__, "why": (
                "space-filling start around the shipped traces' shapes: farthest from the "
                f"points before (feature distance {dist:.2f})")}))
        self.proposed += chosen
        return chosen

    def refine(self, measured: pd.DataFrame, count: int) -> list[Config]:
        """``count`` configurations near the measured points where the quick model's
        held-out (leave-one-out) error is largest."""
        ok = measured[(measured["error"] == "") & (measured["sol_fraction"] > 0)
                      & measured["family"].isin(self.families)]
        scored = []
        for (family, impl), g in ok.groupby(["family", "implementation"]):
            if len(g) < 3:
                continue
            x = features(g["m"], g["k"], g["n"], g["groups"], g["sparsity"], g["block"])
            err = loo_errors(x, np.log(g["sol_fraction"].to_numpy(float)), self.neighbours)
            for (_, row), e in zip(g.iterrows(), err, strict=True):
                scored.append((float(e), family, impl, row))
        scored.sort(key=lambda s: -s[0])
        # Families take turns (the largest error of each in turn), and a point is refined
        # once: otherwise one family's steepest region would take the whole budget.
        queues = {f: [s for s in scored if s[1] == f] for f in self.families}
        order = []
        while any(queues.values()):
            for family in self.families:
                if queues[family]:
                    order.append(queues[family].pop(0))
        chosen: list[Config] = []
        for err, family, impl, row in order:
            if len(chosen) >= count:
                break
            where = (family, int(row["m"]), int(row["k"]), int(row["n"]), int(row["groups"]))
            if where in self.refined:
                continue
            self.refined.add(where)
            block = int(row["block"]) if family == "block" else None
            sparsity = float(row["sparsity"]) if family in ("block", "unstructured") else None
            candidates = [c for c in (self._candidate(family, row["m"], row["k"], row["n"],
                                                      int(row["groups"]), 0.5, sparsity, block)
                                      for _ in range(50)) if c]
            if not candidates:
                continue
            taken = np.concatenate([self._measured_features(measured, family),
                                    self._features([c for c in (*self.proposed, *chosen)
                                                    if c.family == family])])
            pick, _ = self._farthest(candidates, taken)
            chosen.append(Config(**{**pick.__dict__, "why": (
                f"largest held-out error not yet refined in the {family} family: {err:.2f} "
                f"in log fraction of SOL for {impl} at "
                f"M={int(row['m'])} K={int(row['k'])} N={int(row['n'])} "
                f"g={int(row['groups'])} s={float(row['sparsity']):g} b={int(row['block'])} "
                "; a new point nearby")}))
        self.proposed += chosen
        return chosen

    def next_configs(self, measured: pd.DataFrame, count: int = 4) -> list[Config]:
        """The next ``count`` configurations: the space-filling start until ``initial`` have
        been proposed, then refinements (topped up with space-filling ones if too few)."""
        if len(self.proposed) < self.initial:
            return self.space_filling(measured, min(count, self.initial - len(self.proposed)))
        chosen = self.refine(measured, count)
        if len(chosen) < count:
            chosen += self.space_filling(measured, count - len(chosen))
        return chosen
