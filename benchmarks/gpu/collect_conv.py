"""Part ``conv``: depthwise and grouped convolutions (``F.conv2d``, cuDNN on a GPU, oneDNN on the
CPU), the ops the shipped H100 data has none of and whole-model errors point at (ConvNeXt's
7x7 depthwise convolutions run far from bandwidth).

Geometries (:data:`DEPTHWISE`, :data:`GROUPED`): ConvNeXt-T and -B 7x7 depthwise stages,
MobileNetV2 3x3 and EfficientNet-B0 5x5 depthwise layers (stride 1 and 2), ResNeXt-50 32x4d and
RegNetY-1.6GF grouped 3x3 layers; at batch 1, 8, 32 and 128 (140 items). Each is timed in NCHW
(``cudnn_conv`` / ``torch_conv``) and channels-last (``*_nhwc``, what timm's ConvNeXt runs
under ``channels_last``), cold and warm, without bias, "same" padding.

As GEMMs (dse's convention): ``M = C_out / groups``, ``K = C_in / groups x kh x kw``,
``N = batch x H_out x W_out``, ``groups``; the speed of light counts the real input and output
tensors, not the im2col matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

from .collect_items import Item
from .collect_rows import Bench, error_row, price_rows, timed_rows

__all__ = ["ConvShape", "items", "run", "shapes"]


@dataclass(frozen=True)
class ConvShape:
    name: str
    channels: int  #: C_in = C_out
    groups: int
    kernel: int
    stride: int
    size: int  #: input height = width
    batch: int

    @property
    def padding(self) -> int:
        return self.kernel // 2

    @property
    def out_size(self) -> int:
        return (self.size + 2 * self.padding - self.kernel) // self.stride + 1

    @property
    def gemm(self) -> tuple[int, int, int]:
        """(M, K, N) per group."""
        per_group = self.channels // self.groups
        return per_group, per_group * self.kernel ** 2, self.batch * self.out_size ** 2


#: Depthwise layers: (name, channels, kernel, stride, input size).
DEPTHWISE = (
    ("convnext_tiny dw7 s0", 96, 7, 1, 56), ("convnext_tiny dw7 s1", 192, 7, 1, 28),
    ("convnext_tiny dw7 s2", 384, 7, 1, 14), ("convnext_tiny dw7 s3", 768, 7, 1, 7),
    ("convnext_base dw7 s0", 128, 7, 1, 56), ("convnext_base dw7 s1", 256, 7, 1, 28),
    ("convnext_base dw7 s2", 512, 7, 1, 14), ("convnext_base dw7 s3", 1024, 7, 1, 7),
    ("mobilenetv2 dw3", 32, 3, 1, 112), ("mobilenetv2 dw3", 96, 3, 2, 112),
    ("mobilenetv2 dw3", 144, 3, 1, 56), ("mobilenetv2 dw3", 144, 3, 2, 56),
    ("mobilenetv2 dw3", 192, 3, 1, 28), ("mobilenetv2 dw3", 192, 3, 2, 28),
    ("mobilenetv2 dw3", 384, 3, 1, 14), ("mobilenetv2 dw3", 576, 3, 1, 14),
    ("mobilenetv2 dw3", 576, 3, 2, 14), ("mobilenetv2 dw3", 960, 3, 1, 7),
    ("efficientnet_b0 dw5", 144, 5, 2, 56), ("efficientnet_b0 dw5", 240, 5, 1, 28),
    ("efficientnet_b0 dw5", 480, 5, 1, 14), ("efficientnet_b0 dw5", 672, 5, 1, 14),
    ("efficientnet_b0 dw5", 672, 5, 2, 14), ("efficientnet_b0 dw5", 1152, 5, 1, 7),
)
#: Grouped 3x3 layers: (name, channels, groups, stride, input size).
GROUPED = (
    ("resnext50_32x4d g32", 128, 32, 1, 56), ("resnext50_32x4d g32", 256, 32, 2, 56),
    ("resnext50_32x4d g32", 256, 32, 1, 28), ("resnext50_32x4d g32", 512, 32, 2, 28),
    ("resnext50_32x4d g32", 512, 32, 1, 14), ("resnext50_32x4d g32", 1024, 32, 2, 14),
    ("resnext50_32x4d g32", 1024, 32, 1, 7),
    ("regnety_016 gw24", 48, 2, 1, 56), ("regnety_016 gw24", 120, 5, 1, 28),
    ("regnety_016 gw24", 336, 14, 1, 14), ("regnety_016 gw24", 888, 37, 1, 7),
)
BATCHES = (1, 8, 32, 128)
SMOKE = (ConvShape("smoke dw3", 16, 16, 3, 1, 8, 1), ConvShape("smoke g4", 16, 4, 3, 2, 8, 2))


def shapes(smoke: bool = False) -> list[ConvShape]:
    if smoke:
        return list(SMOKE)
    geometries = [(name, c, c, k, s, size) for name, c, k, s, size in DEPTHWISE]
    geometries += [(name, c, g, 3, s, size) for name, c, g, s, size in GROUPED]
    return [ConvShape(name, c, g, k, s, size, b) for b in BATCHES
            for name, c, g, k, s, size in geometries]


def items(smoke: bool = False) -> list[Item]:
    return [Item(f"c{s.channels}g{s.groups}k{s.kernel}s{s.stride}h{s.size}b{s.batch}", s)
            for s in shapes(smoke)]


#: Implementation names per device: (NCHW, channels-last).
NAMES = {"cuda": ("cudnn_conv", "cudnn_conv_nhwc"), "cpu": ("torch_conv", "torch_conv_nhwc")}


def run(item: Item, bench: Bench) -> dict[str, list[dict]]:
    import torch.nn.functional as F

    s: ConvShape = item.config
    torch = bench.torch
    m, k, n = s.gemm
    x = torch.randn(s.batch, s.channels, s.size, s.size, generator=bench.generator(5),
                    device=bench.device, dtype=bench.torch_dtype)
    w = torch.randn(s.channels, s.channels // s.groups, s.kernel, s.kernel,
                    generator=bench.generator(6), device=bench.device, dtype=bench.torch_dtype)
    ref = F.conv2d(x.float(), w.float(), None, s.stride, s.padding, 1, s.groups)
    fields = {"source": "benchmark", "why": f"collect conv: {s.name}, batch {s.batch}",
              "op": s.name, "kind": "conv", "family": "dense", "format": "dense",
              "sparsity": 0.0, "block": 0, "m": m, "k": k, "n": n, "groups": s.groups,
              "batch": s.batch, "nnz": s.groups * m * k}
    note = (f"input {s.batch}x{s.channels}x{s.size}x{s.size}, kernel {s.kernel}x{s.kernel} "
            f"stride {s.stride} padding {s.padding} groups {s.groups}, no bias")
    lib = "cuDNN" if bench.device == "cuda" else "oneDNN"
    rows: list[dict] = []
    ready = {}
    for name, layout in zip(NAMES[bench.device], ("nchw", "nhwc"), strict=True):
        fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
        xl, wl = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
        fn = lambda xl=xl, wl=wl: F.conv2d(xl, wl, None, s.stride, s.padding, 1, s.groups)  # noqa: E731
        try:
            out = fn()
            den = float(ref.norm())
            err = float((out.float() - ref).norm()) / den if den > 0 else 0.0
            bench.clock.sync()
        except Exception as exc:  # a layout or size the library refuses: data
            bench.clock.sync()
            rows.append(error_row(bench, dict(fields, implementation=name), exc))
            continue
        ready[name] = (fn, f"F.conv2d {layout.upper()} ({lib})", err)
    seen = bench.clock.identify({name: fn for name, (fn, _, _) in ready.items()})
    for name, (fn, call, err) in ready.items():
        rows += timed_rows(bench, fn, dict(fields, implementation=name), call, seen[name],
                           rel_err=err, note=note)
    elems = (s.batch * s.channels * s.size ** 2, s.batch * s.channels * s.out_size ** 2)
    price_rows(bench, rows, features=[elems] * len(rows))
    return {"kernels": rows}
