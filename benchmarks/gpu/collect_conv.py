"""Parts ``conv``, ``dense_conv``, ``conv_random`` and ``conv_random2``: convolutions
(``F.conv2d``, cuDNN on a GPU, oneDNN on the CPU), which the first shipped H100 data had none
of and whole-model errors point at (ConvNeXt's 7x7 depthwise convolutions run far from bandwidth).

Geometries (:data:`DEPTHWISE`, :data:`GROUPED`): ConvNeXt-T and -B 7x7 depthwise stages,
MobileNetV2 3x3 and EfficientNet-B0 5x5 depthwise layers (stride 1 and 2), ResNeXt-50 32x4d and
RegNetY-1.6GF grouped 3x3 layers; at batch 1, 8, 32 and 128 (140 items). Part ``dense_conv``
(:data:`STEMS`, :data:`RESNET50`): the convolutions that read the image (3 input channels: ViT
and DeiT patch embeddings, ConvNeXt / Swin and ResNet stems; whole-model profiles show cuDNN
running them without tensor cores at 12-17 TFLOP/s), ConvNeXt's 2x2 downsampling convolutions
and ResNet-50's dense 1x1 and 3x3 layers, at the same batches. Each is timed in NCHW
(``cudnn_conv`` / ``torch_conv``) and channels-last (``*_nhwc``, what timm's ConvNeXt runs
under ``channels_last``), cold and warm, without bias, "same" padding.

As GEMMs (dse's convention): ``M = C_out / groups``, ``K = C_in / groups x kh x kw``,
``N = batch x H_out x W_out``, ``groups``; the speed of light counts the real input and output
tensors, not the im2col matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .collect_items import Item
from .collect_rows import Bench, error_row, price_rows, timed_rows

__all__ = ["ConvShape", "dense_items", "dense_shapes", "items", "random_geometries",
           "random_items", "random_shapes", "random2_geometries", "random2_items",
           "random2_shapes", "run", "shapes"]


@dataclass(frozen=True)
class ConvShape:
    name: str
    channels: int  #: C_in = C_out
    groups: int
    kernel: int
    stride: int
    size: int  #: input height = width
    batch: int
    in_channels: int = 0  #: C_in where it differs from C_out (0: the same)
    pad: int = -1  #: padding where it is not "same" (-1: kernel // 2)

    @property
    def c_in(self) -> int:
        return self.in_channels or self.channels

    @property
    def padding(self) -> int:
        return self.kernel // 2 if self.pad < 0 else self.pad

    @property
    def out_size(self) -> int:
        return (self.size + 2 * self.padding - self.kernel) // self.stride + 1

    @property
    def read_size(self) -> int:
        """Input rows (= columns) any window reads: a stride longer than the kernel skips
        the rows between windows (ResNet's 1x1 stride-2 shortcuts read a quarter of their
        input), and a bound that charged them was beaten by 1.45x."""
        if self.stride <= self.kernel:
            return self.size
        return min(self.size, self.out_size * self.kernel)

    @property
    def gemm(self) -> tuple[int, int, int]:
        """(M, K, N) per group."""
        return (self.channels // self.groups, self.c_in // self.groups * self.kernel ** 2,
                self.batch * self.out_size ** 2)


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
#: Dense convolutions that read the image or change the width: (name, C_in, C_out, kernel,
#: stride, padding, input size). Swin-T's patch embedding is ConvNeXt-T's stem.
STEMS = (
    ("deit_small patch16", 3, 384, 16, 16, 0, 224), ("vit_base patch16", 3, 768, 16, 16, 0, 224),
    ("convnext_tiny stem4", 3, 96, 4, 4, 0, 224), ("convnext_base stem4", 3, 128, 4, 4, 0, 224),
    ("resnet50 stem7", 3, 64, 7, 2, 3, 224), ("mobilenetv2 stem3", 3, 32, 3, 2, 1, 224),
    ("convnext_tiny down2", 96, 192, 2, 2, 0, 56), ("convnext_tiny down2", 192, 384, 2, 2, 0, 28),
    ("convnext_tiny down2", 384, 768, 2, 2, 0, 14),
)
#: ResNet-50's dense layers (timm's resnet50: the stride on the 3x3): (name, C_in, C_out,
#: kernel, stride, input size).
RESNET50 = (
    ("resnet50 1x1", 64, 64, 1, 1, 56), ("resnet50 1x1", 64, 256, 1, 1, 56),
    ("resnet50 1x1", 256, 64, 1, 1, 56), ("resnet50 1x1", 256, 128, 1, 1, 56),
    ("resnet50 1x1", 128, 512, 1, 1, 28), ("resnet50 1x1", 512, 128, 1, 1, 28),
    ("resnet50 1x1", 512, 256, 1, 1, 28), ("resnet50 1x1", 256, 1024, 1, 1, 14),
    ("resnet50 1x1", 1024, 256, 1, 1, 14), ("resnet50 1x1", 1024, 512, 1, 1, 14),
    ("resnet50 1x1", 512, 2048, 1, 1, 7), ("resnet50 1x1", 2048, 512, 1, 1, 7),
    ("resnet50 down1x1", 256, 512, 1, 2, 56), ("resnet50 down1x1", 512, 1024, 1, 2, 28),
    ("resnet50 down1x1", 1024, 2048, 1, 2, 14),
    ("resnet50 3x3", 64, 64, 3, 1, 56), ("resnet50 3x3", 128, 128, 3, 2, 56),
    ("resnet50 3x3", 128, 128, 3, 1, 28), ("resnet50 3x3", 256, 256, 3, 2, 28),
    ("resnet50 3x3", 256, 256, 3, 1, 14), ("resnet50 3x3", 512, 512, 3, 2, 14),
    ("resnet50 3x3", 512, 512, 3, 1, 7),
)
BATCHES = (1, 8, 32, 128)
SMOKE = (ConvShape("smoke dw3", 16, 16, 3, 1, 8, 1), ConvShape("smoke g4", 16, 4, 3, 2, 8, 2))
SMOKE_DENSE = (ConvShape("smoke stem4", 16, 1, 4, 4, 16, 1, in_channels=3, pad=0),
               ConvShape("smoke 1x1", 8, 1, 1, 1, 8, 2, in_channels=16))


def shapes(smoke: bool = False) -> list[ConvShape]:
    if smoke:
        return list(SMOKE)
    geometries = [(name, c, c, k, s, size) for name, c, k, s, size in DEPTHWISE]
    geometries += [(name, c, g, 3, s, size) for name, c, g, s, size in GROUPED]
    return [ConvShape(name, c, g, k, s, size, b) for b in BATCHES
            for name, c, g, k, s, size in geometries]


def dense_shapes(smoke: bool = False) -> list[ConvShape]:
    """Part ``dense_conv``'s shapes: :data:`STEMS` then :data:`RESNET50`, per batch."""
    if smoke:
        return list(SMOKE_DENSE)
    geometries = list(STEMS) + [(name, ci, co, k, s, k // 2, size)
                                for name, ci, co, k, s, size in RESNET50]
    return [ConvShape(name, co, 1, k, s, size, b, in_channels=ci, pad=p) for b in BATCHES
            for name, ci, co, k, s, p, size in geometries]


#: Part ``conv_random``: convolutions drawn at random (fixed seed, so every run has the same
#: items), so that a model's own convolutions can be held out and others remain to learn
#: from: dense ones with C_in, C_out log-uniform in 16-2048, kernel 1, 3, 5 or 7, stride 1 or
#: 2, input 7-112 px; depthwise ones with 32-2048 channels, kernel 3, 5 or 7. Each geometry's
#: MACs per image stay under :data:`RANDOM_MAX_MACS` (ResNet-50's largest layer is 1.2e8).
RANDOM_DENSE, RANDOM_DEPTHWISE, RANDOM_SEED, RANDOM_MAX_MACS = 36, 12, 2026, 4e8
SMOKE_RANDOM = (ConvShape("random dense", 8, 1, 3, 2, 8, 1, in_channels=4),)


def _channels(rng, low: float, high: float) -> int:
    return int(16 * max(1, round(float(np.exp(rng.uniform(np.log(low), np.log(high)))) / 16)))


def random_geometries() -> list[tuple[str, int, int, int, int, int, int]]:
    """(name, C_in, C_out, groups, kernel, stride, input size) of part ``conv_random``."""
    rng = np.random.default_rng(RANDOM_SEED)
    out: list[tuple[str, int, int, int, int, int, int]] = []
    while len(out) < RANDOM_DENSE + RANDOM_DEPTHWISE:
        dense = len(out) < RANDOM_DENSE
        c_in = _channels(rng, 16, 2048)
        c_out = _channels(rng, 16, 2048) if dense else c_in
        kernel = int(rng.choice((1, 3, 5, 7) if dense else (3, 5, 7),
                                p=(0.45, 0.35, 0.1, 0.1) if dense else None))
        stride = int(rng.choice((1, 2), p=(0.75, 0.25)))
        size = int(rng.choice((7, 14, 28, 56, 112)))
        groups = 1 if dense else c_in
        macs = c_out * (c_in // groups) * kernel ** 2 * (size // stride) ** 2
        geometry = ("random dense" if dense else "random dw", c_in, c_out, groups, kernel,
                    stride, size)
        if macs <= RANDOM_MAX_MACS and geometry not in out:
            out.append(geometry)
    return out


def random_shapes(smoke: bool = False) -> list[ConvShape]:
    """Part ``conv_random``'s shapes per batch, less those whose input or output tensor is more
    elements than a trace op may hold (:data:`workloads.trace.MAX_PER_SAMPLE`): a row is
    priced as a one-sample trace, and such a row could not be."""
    return list(SMOKE_RANDOM) if smoke else _priceable(random_geometries())


def _priceable(geometries) -> list[ConvShape]:
    """The geometries' shapes at every batch, less those a one-sample trace cannot hold."""
    from workloads.trace import MAX_PER_SAMPLE

    out = [ConvShape(name, co, g, k, s, size, b, in_channels=ci if ci != co else 0)
           for b in BATCHES for name, ci, co, g, k, s, size in geometries]
    return [s for s in out if s.batch * max(s.c_in * s.size ** 2, s.channels * s.out_size ** 2)
            <= MAX_PER_SAMPLE]


def random_items(smoke: bool = False) -> list[Item]:
    return [Item(_key(s), s) for s in random_shapes(smoke)]


#: Part ``conv_random2``: a second draw (another seed), weighted toward what the first
#: collection's held-out figures missed: dense convolutions at ResNet-like widths (C_in, C_out
#: log-uniform in 32-2048; kernel 1 or 3 four times in five), grouped ones (4-64 channels per
#: group) and depthwise ones, at batch 1-128. Held out by weight shape, dense convolutions were
#: 34% within 10% and grouped 42% with 48 random geometries to learn from.
RANDOM2_DENSE, RANDOM2_GROUPED, RANDOM2_DEPTHWISE, RANDOM2_SEED = 40, 16, 12, 2027
SMOKE_RANDOM2 = (ConvShape("random2 grouped", 16, 4, 3, 1, 8, 1),)


def random2_geometries() -> list[tuple[str, int, int, int, int, int, int]]:
    """(name, C_in, C_out, groups, kernel, stride, input size) of part ``conv_random2``."""
    rng = np.random.default_rng(RANDOM2_SEED)
    first = {g[1:] for g in random_geometries()}
    out: list[tuple[str, int, int, int, int, int, int]] = []
    while len(out) < RANDOM2_DENSE + RANDOM2_GROUPED + RANDOM2_DEPTHWISE:
        if len(out) < RANDOM2_DENSE:
            name, c_in, c_out = "random2 dense", _channels(rng, 32, 2048), _channels(rng, 32, 2048)
            kernel = int(rng.choice((1, 3, 5, 7), p=(0.45, 0.35, 0.1, 0.1)))
            groups = 1
        elif len(out) < RANDOM2_DENSE + RANDOM2_GROUPED:
            per_group = int(rng.choice((4, 8, 16, 24, 32, 64)))
            groups = int(rng.choice((2, 4, 8, 16, 32, 64)))
            name, c_in, kernel = "random2 grouped", per_group * groups, 3
            c_out = c_in
        else:
            name, c_in = "random2 dw", _channels(rng, 32, 2048)
            c_out, groups, kernel = c_in, c_in, int(rng.choice((3, 5, 7)))
        stride = int(rng.choice((1, 2), p=(0.75, 0.25)))
        size = int(rng.choice((7, 14, 28, 56, 112)))
        macs = c_out * (c_in // groups) * kernel ** 2 * (size // stride) ** 2
        geometry = (name, c_in, c_out, groups, kernel, stride, size)
        if (macs <= RANDOM_MAX_MACS and c_in >= 16 and geometry not in out
                and geometry[1:] not in first):
            out.append(geometry)
    return out


def random2_shapes(smoke: bool = False) -> list[ConvShape]:
    """Part ``conv_random2``'s shapes per batch, less those a one-sample trace cannot hold
    (as :func:`random_shapes`)."""
    return list(SMOKE_RANDOM2) if smoke else _priceable(random2_geometries())


def random2_items(smoke: bool = False) -> list[Item]:
    return [Item(_key(s), s) for s in random2_shapes(smoke)]


def _key(s: ConvShape) -> str:
    if s.in_channels == 0 and s.pad < 0:  # the keys of the first collection, kept for resuming
        return f"c{s.channels}g{s.groups}k{s.kernel}s{s.stride}h{s.size}b{s.batch}"
    return (f"c{s.c_in}to{s.channels}g{s.groups}k{s.kernel}s{s.stride}p{s.padding}"
            f"h{s.size}b{s.batch}")


def items(smoke: bool = False) -> list[Item]:
    return [Item(_key(s), s) for s in shapes(smoke)]


def dense_items(smoke: bool = False) -> list[Item]:
    return [Item(_key(s), s) for s in dense_shapes(smoke)]


#: Implementation names per device: (NCHW, channels-last).
NAMES = {"cuda": ("cudnn_conv", "cudnn_conv_nhwc"), "cpu": ("torch_conv", "torch_conv_nhwc")}


def run(item: Item, bench: Bench) -> dict[str, list[dict]]:
    import torch.nn.functional as F

    s: ConvShape = item.config
    torch = bench.torch
    m, k, n = s.gemm
    x = torch.randn(s.batch, s.c_in, s.size, s.size, generator=bench.generator(5),
                    device=bench.device, dtype=bench.torch_dtype)
    w = torch.randn(s.channels, s.c_in // s.groups, s.kernel, s.kernel,
                    generator=bench.generator(6), device=bench.device, dtype=bench.torch_dtype)
    ref = F.conv2d(x.float(), w.float(), None, s.stride, s.padding, 1, s.groups)
    part = ("conv_random2" if s.name.startswith("random2") else "conv_random"
            if s.name.startswith("random") else "conv" if s.groups > 1 else "dense_conv")
    fields = {"source": "benchmark", "why": f"collect {part}: {s.name}, batch {s.batch}",
              "op": s.name, "kind": "conv", "family": "dense", "format": "dense",
              "sparsity": 0.0, "block": 0, "m": m, "k": k, "n": n, "groups": s.groups,
              "batch": s.batch, "nnz": s.groups * m * k}
    note = (f"input {s.batch}x{s.c_in}x{s.size}x{s.size}, {s.channels} out, kernel "
            f"{s.kernel}x{s.kernel} stride {s.stride} padding {s.padding} groups {s.groups}, "
            "no bias")
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
    elems = (s.batch * s.c_in * s.read_size ** 2, s.batch * s.channels * s.out_size ** 2)
    price_rows(bench, rows, features=[elems] * len(rows))
    return {"kernels": rows}
