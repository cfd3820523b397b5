"""Pruning masks that meet a format's pattern exactly (torch; imported only by ``dse accuracy``).

Weights are viewed as the GEMM's ``W[M x K]`` per group, as the evaluator prices them: a linear
weight ``[out, in]`` as it is, a convolution weight ``[C_out, C_in / groups, kh, kw]`` as
``[C_out, C_in / groups * kh * kw]`` with ``M = C_out / groups`` rows per group. A layer the
format does not apply to (``Format.applies_to(M, K)``) stays dense, as in the evaluator.

* unstructured: global magnitude, one threshold over all layers;
* block b x b: every layer at the pattern's sparsity, its blocks ranked by L2 norm and whole
  blocks kept or dropped; layer counts are rounded by largest remainder so that the total is
  exact, and every layer keeps at least one block. Ranking blocks globally collapsed layers on
  a trained ConvNeXt-Tiny (digits, 32 px): with raw norms block8 at 50% pruned the stem
  convolution entirely and the downsampling convolutions to 0.5-0.9% density (every block size
  >= 8 then fell to chance, 10%, at every level, while unstructured kept 99% at 75%); with norms
  normalized per layer block16 still fell to chance at 75%;
* N:M: in every run of M consecutive weights along K, the N largest magnitudes are kept.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from .base import Format
from .block import Block
from .dense import Dense
from .nm import NM
from .unstructured import Unstructured

__all__ = ["BLOCK_SCORE", "PrunableWeight", "global_masks", "mask_violations"]

#: How blocks are ranked; recorded in the provenance of every accuracy table.
BLOCK_SCORE = ("L2 norm, ranked within each layer; every layer at the pattern's sparsity "
               "(largest remainder, at least one block per layer)")


@dataclass(frozen=True)
class PrunableWeight:
    """A weight tensor and the number of GEMM groups it holds (``groups`` of a convolution)."""

    weight: object  # torch.Tensor
    groups: int = 1

    @property
    def m(self) -> int:
        return self.weight.shape[0] // self.groups

    @property
    def k(self) -> int:
        return int(self.weight[0].numel())

    def matrix(self):
        """``[C_out, K]``: the groups' ``[M x K]`` matrices stacked along M."""
        return self.weight.detach().reshape(self.weight.shape[0], -1)


def _block_norms(matrix, b: int):
    rows, cols = matrix.shape
    blocks = matrix.reshape(rows // b, b, cols // b, b).permute(0, 2, 1, 3)
    return blocks.pow(2).sum(dim=(2, 3)).sqrt()  # [rows / b, cols / b]


def _layerwise_keep(scores: list, sparsity: float) -> list:
    """Keep-masks with every layer at ``sparsity``: the largest scores of each layer, counts
    rounded by largest remainder (the total is exact) and at least one kept per layer."""
    import torch

    sizes = [s.numel() for s in scores]
    ideal = [(1.0 - sparsity) * n for n in sizes]
    counts = [math.floor(x) for x in ideal]
    spare = round((1.0 - sparsity) * sum(sizes)) - sum(counts)
    by_remainder = sorted(range(len(sizes)), key=lambda i: ideal[i] - counts[i], reverse=True)
    for i in by_remainder[:spare]:
        counts[i] += 1
    for i in range(len(counts)):  # a layer with no block left would cut the network
        if counts[i] == 0 and sizes[i] > 0:
            donor = max(range(len(counts)), key=lambda j: counts[j])
            if counts[donor] > 1:
                counts[donor] -= 1
                counts[i] = 1
    masks = []
    for score, count in zip(scores, counts, strict=True):
        keep = torch.zeros(score.numel(), dtype=torch.bool)
        keep[score.reshape(-1).argsort(descending=True, stable=True)[:count]] = True
        masks.append(keep.reshape(score.shape))
    return masks


def _expand_blocks(keep, b: int, shape):
    return keep.repeat_interleave(b, dim=0).repeat_interleave(b, dim=1).reshape(shape)


def _nm_mask(matrix, n: int, m: int):
    rows, cols = matrix.shape
    runs = matrix.abs().reshape(rows, cols // m, m)
    top = runs.topk(n, dim=-1).indices
    import torch

    keep = torch.zeros_like(runs, dtype=torch.bool)
    keep.scatter_(-1, top, True)
    return keep.reshape(rows, cols)


def _threshold_keep(scores: list, sparsity: float):
    """Boolean keep-masks for the ``1 - sparsity`` largest scores over all tensors together."""
    import torch

    flat = torch.cat([s.reshape(-1) for s in scores])
    n_keep = int(round((1.0 - sparsity) * flat.numel()))
    keep_flat = torch.zeros(flat.numel(), dtype=torch.bool)
    if n_keep > 0:
        # Ranks, not a threshold value: ties cannot keep more or fewer than asked.
        keep_flat[flat.argsort(descending=True, stable=True)[:n_keep]] = True
    out, start = [], 0
    for s in scores:
        out.append(keep_flat[start:start + s.numel()].reshape(s.shape))
        start += s.numel()
    return out


def global_masks(weights: Mapping[str, PrunableWeight], fmt: Format) -> dict[str, object]:
    """Boolean masks (True = keep), shaped like each weight, for the layers ``fmt`` applies to.

    Layers it does not apply to are absent from the result (they stay dense).
    """

    if isinstance(fmt, Dense):
        return {}
    eligible = {name: w for name, w in weights.items() if bool(fmt.applies_to(w.m, w.k))}
    masks: dict[str, object] = {}
    if isinstance(fmt, NM):
        for name, w in eligible.items():
            masks[name] = _nm_mask(w.matrix(), fmt.n, fmt.m).reshape(w.weight.shape)
        return masks
    if isinstance(fmt, Block):
        b = fmt.block
        names = list(eligible)
        norms = [_block_norms(eligible[n].matrix(), b) for n in names]
        for name, keep in zip(names, _layerwise_keep(norms, fmt.sparsity), strict=True):
            w = eligible[name]
            masks[name] = _expand_blocks(keep, b, w.matrix().shape).reshape(w.weight.shape)
        return masks
    if isinstance(fmt, Unstructured):
        names = list(eligible)
        scores = [eligible[n].weight.detach().abs() for n in names]
        for name, keep in zip(names, _threshold_keep(scores, fmt.sparsity), strict=True):
            masks[name] = keep
        return masks
    raise TypeError(f"no mask rule for format {fmt.name}")


def mask_violations(weights: Mapping[str, PrunableWeight], fmt: Format,
                    masks: Mapping[str, object]) -> list[str]:
    """Why ``masks`` do not meet ``fmt`` exactly, or why the weights have nonzeros outside
    them; an empty list when all is well. Checks: every run of M along K keeps at most N
    (N:M); every block is wholly kept or wholly pruned (blocks); the kept share is the asked
    one to within one block (blocks) or one weight (unstructured); every pruned weight is zero.
    """
    if isinstance(fmt, Dense):
        return []
    problems = []
    eligible = {n: w for n, w in weights.items() if bool(fmt.applies_to(w.m, w.k))}
    if set(masks) != set(eligible):
        problems.append(f"masks cover {sorted(set(masks) ^ set(eligible))[:3]} wrongly")
        return problems
    total = kept = 0
    for name, w in eligible.items():
        keep = masks[name].reshape(w.weight.shape[0], -1)
        total += keep.numel()
        kept += int(keep.sum())
        if bool((w.weight.detach().reshape(keep.shape)[~keep] != 0).any()):
            problems.append(f"{name}: pruned weights are not zero")
        if isinstance(fmt, NM):
            most = int(keep.reshape(keep.shape[0], -1, fmt.m).sum(dim=-1).max())
            if most > fmt.n:
                problems.append(f"{name}: a run of {fmt.m} keeps {most} weights")
        elif isinstance(fmt, Block):
            b = fmt.block
            rows, cols = keep.shape
            per_block = keep.reshape(rows // b, b, cols // b, b).sum(dim=(1, 3))
            partial = int(((per_block > 0) & (per_block < b * b)).sum())
            if partial:
                problems.append(f"{name}: {partial} blocks are partly pruned")
    if total and isinstance(fmt, Block | Unstructured):
        granule = fmt.block ** 2 if isinstance(fmt, Block) else 1
        expected = (1.0 - fmt.sparsity) * total
        if abs(kept - expected) > granule:
            problems.append(f"kept {kept} of {total} weights, expected {expected:.0f} "
                            f"to within {granule}")
    return problems
