"""CPU kernels for measured GEMMs and vector ops: each family's implementations, thin builders.

A GEMM case is ``Y[M x N] = W[M x K] . X[K x N]``, ``groups`` times (a grouped or depthwise
convolution as ``groups`` GEMMs). Weights are real masks of the format, made by the pruning
trainer's own rules (:func:`formats.masks.global_masks`: N:M exact per run of M, whole b x b
blocks at exactly the asked count, unstructured at exactly the asked count), applied to random
normal weights; X is random normal, fp32 everywhere (what the CPU libraries run).

Families and implementations (``CPU_KERNELS``):

* ``dense``: ``torch_dense`` (``torch.mm``, ``torch.bmm`` over groups: MKL / oneDNN) and
  ``torch_conv`` (``F.conv2d`` with the layer's real geometry, for trace convolutions whose
  geometry is known);
* ``block``: ``scipy_bsr`` (``scipy.sparse.bsr_matrix @ X``, single-threaded) and ``torch_bsr``
  (torch BSR ``@ X`` on the CPU);
* ``unstructured``: ``torch_csr`` (torch sparse CSR ``@ X``, MKL sparse) and ``scipy_csr``
  (``scipy.sparse.csr_matrix @ X``, single-threaded);
* vector ops (norm, activation, softmax, elementwise, reduce, pool): ``torch_vector``;
* whole models (:func:`build_model`): the timm model of a trace, eval mode, fp32, at the trace's
  input size, dense or with every ``nn.Linear`` the format applies to masked and run as torch
  CSR (unstructured) or BSR (block) ``W @ X`` (``torch_eager``); convolutions stay dense (torch
  has no CPU sparse convolution).

Grouped sparse GEMMs run as one SpMM of the block-diagonal matrix of the groups (the usual way
to batch them). Each built kernel is checked once against the masked dense product in fp64
(``rel_err``). torch and scipy are imported when a kernel is built, never at import time.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from formats import Block, Dense, Format, Unstructured

__all__ = [
    "CPU_KERNELS",
    "ConvGeometry",
    "GemmCase",
    "Kernel",
    "VectorCase",
    "build_gemm",
    "build_model",
    "build_vector",
    "masked_weight",
    "sparse_linear_applies",
]


@dataclass(frozen=True)
class ConvGeometry:
    """A 2-D convolution's real geometry, per sample (``batch`` is the case's)."""

    in_channels: int
    out_channels: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    groups: int
    height: int
    width: int


@dataclass(frozen=True)
class GemmCase:
    """One GEMM problem: per-group ``m x k`` weight, ``n`` columns in all (batch included)."""

    m: int
    k: int
    n: int
    groups: int
    fmt: Format
    batch: int = 1
    conv: ConvGeometry | None = None
    seed: int = 0


@dataclass(frozen=True)
class VectorCase:
    """One vector op of a trace, its element counts already multiplied by the batch."""

    kind: str
    name: str
    input_elems: int
    output_elems: int
    weight_elems: int
    batch: int = 1


@dataclass
class Kernel:
    """A ready-to-time kernel: ``fn()`` runs it once."""

    fn: Callable[[], object]
    nnz: int
    dtype: str = "fp32"
    index_dtype: str = ""
    threads: int = 1
    kernel: str = ""  #: the algorithm or library routine, where known
    note: str = ""
    rel_err: float = float("nan")


def masked_weight(m: int, k: int, groups: int, fmt: Format, seed: int = 0):
    """A ``[groups * m, k]`` float32 torch weight pruned to ``fmt`` by the trainer's mask rules
    (dense: unpruned). Raises ValueError when the format cannot apply to ``m x k``."""
    import torch

    from formats.masks import PrunableWeight, global_masks

    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(groups * m, k, generator=gen, dtype=torch.float32)
    if isinstance(fmt, Dense):
        return weight
    if not bool(fmt.applies_to(m, k)):
        raise ValueError(f"format {fmt.name} cannot apply to M={m}, K={k}")
    mask = global_masks({"w": PrunableWeight(weight, groups)}, fmt)["w"]
    return weight * mask


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def _groups_dense(weight, case: GemmCase):
    return weight.reshape(case.groups, case.m, case.k)


def _block_diag_csr(weight, case: GemmCase):
    import scipy.sparse as sp

    per_group = _groups_dense(weight, case).numpy()
    if case.groups == 1:
        return sp.csr_matrix(per_group[0])
    return sp.block_diag([sp.csr_matrix(w) for w in per_group], format="csr")


def _reference(weight, x, case: GemmCase) -> np.ndarray:
    w = _groups_dense(weight, case).double().numpy()
    xs = x.double().numpy().reshape(case.groups, case.k, -1)
    return np.concatenate([w[g] @ xs[g] for g in range(case.groups)], axis=0)


def _rel_err(out, ref: np.ndarray) -> float:
    out = out.toarray() if hasattr(out, "toarray") else np.asarray(out)
    den = float(np.linalg.norm(ref))
    return float(np.linalg.norm(out.astype(np.float64) - ref) / den) if den else 0.0


def _torch_dense(case: GemmCase, weight, x) -> Kernel:
    import torch

    if case.groups == 1:
        w, xx = weight.contiguous(), x.contiguous()
        out = torch.empty(case.m, x.shape[1])
        fn = lambda: torch.mm(w, xx, out=out)  # noqa: E731
        name = "torch.mm (MKL sgemm)"
    else:
        w = _groups_dense(weight, case).contiguous()
        xx = x.reshape(case.groups, case.k, -1).contiguous()
        out = torch.empty(case.groups, case.m, x.shape[1])
        fn = lambda: torch.bmm(w, xx, out=out)  # noqa: E731
        name = "torch.bmm (MKL batched sgemm)"
    result = fn().reshape(case.groups * case.m, -1)
    return Kernel(fn, case.groups * case.m * case.k, threads=_threads(), kernel=name,
                  rel_err=_rel_err(result.numpy(), _reference(weight, x, case)))


def _torch_conv(case: GemmCase, weight, x) -> Kernel | None:
    import torch
    import torch.nn.functional as F

    geo = case.conv
    if geo is None:
        return None
    kh, kw = geo.kernel
    w4 = weight.reshape(geo.out_channels, geo.in_channels // geo.groups, kh, kw).contiguous()
    gen = torch.Generator().manual_seed(case.seed + 1)
    inp = torch.randn(case.batch, geo.in_channels, geo.height, geo.width, generator=gen)
    fn = lambda: F.conv2d(inp, w4, None, geo.stride, geo.padding, 1, geo.groups)  # noqa: E731
    out = fn()
    if out.shape[0] * out.shape[2] * out.shape[3] * (geo.out_channels // geo.groups) \
            != case.n * case.m:
        return None  # the geometry does not reproduce the trace's GEMM; time the GEMM only
    return Kernel(fn, case.groups * case.m * case.k, threads=_threads(),
                  kernel="F.conv2d (oneDNN)" if torch.backends.mkldnn.is_available()
                  else "F.conv2d", note="real convolution input, not an im2col matrix")


def _scipy_csr(case: GemmCase, weight, x) -> Kernel:
    mat = _block_diag_csr(weight, case)
    xn = x.numpy()
    fn = lambda: mat @ xn  # noqa: E731
    return Kernel(fn, int(mat.nnz), index_dtype=str(mat.indices.dtype), threads=1,
                  kernel="scipy csr_matmat", rel_err=_rel_err(fn(), _reference(weight, x, case)))


def _scipy_bsr(case: GemmCase, weight, x) -> Kernel:
    b = case.fmt.block
    mat = _block_diag_csr(weight, case).tobsr(blocksize=(b, b))
    mat.eliminate_zeros()
    xn = x.numpy()
    fn = lambda: mat @ xn  # noqa: E731
    nnz = int(mat.data.shape[0]) * b * b
    return Kernel(fn, nnz, index_dtype=str(mat.indices.dtype), threads=1,
                  kernel="scipy bsr_matmat", rel_err=_rel_err(fn(), _reference(weight, x, case)))


def _torch_sparse(case: GemmCase, weight, x, layout: str) -> Kernel:
    import torch

    csr = _block_diag_csr(weight, case)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if layout == "csr":
            mat = torch.sparse_csr_tensor(torch.from_numpy(csr.indptr),
                                          torch.from_numpy(csr.indices),
                                          torch.from_numpy(csr.data), size=csr.shape,
                                          check_invariants=False)
            nnz = int(csr.nnz)
            name = "torch CSR @ dense (MKL sparse)" if torch.backends.mkl.is_available() \
                else "torch CSR @ dense"
        else:
            b = case.fmt.block
            bsr = csr.tobsr(blocksize=(b, b))
            bsr.eliminate_zeros()
            mat = torch.sparse_bsr_tensor(torch.from_numpy(bsr.indptr),
                                          torch.from_numpy(bsr.indices),
                                          torch.from_numpy(bsr.data), size=bsr.shape,
                                          check_invariants=False)
            nnz = int(bsr.data.shape[0]) * b * b
            name = "torch BSR @ dense"
        xx = x.contiguous()
        fn = lambda: mat @ xx  # noqa: E731
        result = fn()
    return Kernel(fn, nnz, index_dtype=str(mat.crow_indices().dtype).replace("torch.", ""),
                  threads=_threads(), kernel=name,
                  rel_err=_rel_err(result.numpy(), _reference(weight, x, case)))


#: family -> implementation -> builder(case, masked weight, X) -> Kernel (None: not applicable).
CPU_KERNELS: dict[str, dict[str, Callable]] = {
    "dense": {"torch_dense": _torch_dense, "torch_conv": _torch_conv},
    "block": {"scipy_bsr": _scipy_bsr,
              "torch_bsr": lambda c, w, x: _torch_sparse(c, w, x, "bsr")},
    "unstructured": {"torch_csr": lambda c, w, x: _torch_sparse(c, w, x, "csr"),
                     "scipy_csr": _scipy_csr},
}

_FORMAT_CLASSES = {"dense": Dense, "block": Block, "unstructured": Unstructured}


def build_gemm(case: GemmCase, implementations: dict[str, Callable] | None = None
               ) -> dict[str, Kernel | Exception]:
    """Every implementation of the case's family, built on one masked weight and one X:
    ``{implementation: Kernel}``, or the exception that building raised (kept for the row's
    ``error``); implementations that do not apply (``torch_conv`` without geometry) are left
    out."""
    import torch

    family = case.fmt.family
    table = implementations if implementations is not None else CPU_KERNELS[family]
    weight = masked_weight(case.m, case.k, case.groups, case.fmt, case.seed)
    gen = torch.Generator().manual_seed(case.seed + 7)
    x = torch.randn(case.groups * case.k, case.n, generator=gen, dtype=torch.float32)
    built: dict[str, Kernel | Exception] = {}
    for name, builder in table.items():
        try:
            kernel = builder(case, weight, x)
        except Exception as exc:  # a library refusing a shape is data, not a crash
            built[name] = exc
            continue
        if kernel is not None:
            built[name] = kernel
    return built


def activation(name: str):
    import torch.nn.functional as F

    lowered = name.lower()
    for key, fn in (("gelu", F.gelu), ("silu", F.silu), ("sigmoid", F.sigmoid),
                    ("hardswish", F.hardswish), ("tanh", F.tanh)):
        if key in lowered:
            return fn, key
    return F.relu, "relu"


def build_vector(case: VectorCase, device: str = "cpu", dtype: str = "fp32") -> Kernel | None:
    """A torch kernel of the vector op's kind and sizes, tensors in ``dtype`` on ``device``;
    None for kinds without one (``other``: views, pads). The reduced dimension is inferred
    from the element counts (norm: :func:`workloads.norm_width`; softmax: the last dimension is
    not in a trace, 64 is used; reduce and pool: ``input_elems / output_elems`` elements per
    output)."""
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(11)
    torch_dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]

    def randn(*shape):  # made on the CPU (one generator), then moved
        return torch.randn(*shape, generator=gen).to(device, torch_dtype)

    threads = _threads() if device == "cpu" else 1
    n_in, n_out = case.input_elems, case.output_elems
    if case.kind == "norm":
        from workloads import norm_width

        channels = max(1, norm_width(case.name, case.weight_elems))
        if n_out % channels:
            return None
        x = randn(n_out // channels, channels)
        w, b = randn(channels), randn(channels)
        fn = lambda: F.layer_norm(x, (channels,), w, b)  # noqa: E731
        return Kernel(fn, 0, threads=threads, kernel="F.layer_norm",
                      note=f"layer norm over C={channels}")
    if case.kind == "activation":
        x = randn(n_out)
        act, key = activation(case.name)
        return Kernel(lambda: act(x), 0, threads=threads, kernel=f"F.{key}")
    if case.kind == "softmax":
        last = 64 if n_out % 64 == 0 else n_out
        x = randn(n_out // last, last)
        return Kernel(lambda: torch.softmax(x, -1), 0, threads=threads,
                      kernel="torch.softmax", note=f"last dimension {last} (assumed)")
    if case.kind == "elementwise":
        a = randn(n_out)
        if n_in >= 2 * n_out:
            b = randn(n_out)
            return Kernel(lambda: torch.add(a, b), 0, threads=threads, kernel="torch.add",
                          note="two inputs")
        if case.weight_elems and n_out % case.weight_elems == 0:
            scale = randn(case.weight_elems)
            a2 = a.reshape(-1, case.weight_elems)
            return Kernel(lambda: torch.mul(a2, scale), 0, threads=threads,
                          kernel="torch.mul", note=f"by a weight of {case.weight_elems}")
        return Kernel(lambda: torch.mul(a, 2.0), 0, threads=threads, kernel="torch.mul")
    if case.kind in ("reduce", "pool"):
        if n_out == 0 or n_in % n_out:
            return None
        per = n_in // n_out
        x = randn(n_out, per)
        return Kernel(lambda: x.mean(-1), 0, threads=threads, kernel="torch.mean",
                      note=f"{per} elements per output")
    return None


def cases_fit(case: GemmCase, max_bytes: float = 2e9) -> bool:
    """Whether the case's operands fit a sane memory budget (sampling keeps below it)."""
    elems = case.groups * (case.m * case.k + case.k * case.n + case.m * case.n)
    return 4 * elems * 3 < max_bytes and math.isfinite(elems)


# --- whole models -----------------------------------------------------------------------------


def sparse_linear_applies(fmt: Format, out_features: int, in_features: int) -> bool:
    """Whether :func:`build_model` runs an ``out x in`` linear of a model in ``fmt`` on a CPU
    sparse path (block and unstructured formats the weight shape can take); the expectation
    of a sparse whole model prices the same layers sparse."""
    return fmt.family in ("block", "unstructured") and bool(fmt.applies_to(out_features,
                                                                           in_features))


def _timm_model(model_name: str, input_shape: tuple[int, ...]):
    """The timm model, random weights, eval mode, built for ``input_shape`` (a ViT's
    ``img_size`` when the trace was exported at another size than the model's own)."""
    import timm

    model = timm.create_model(model_name, pretrained=False)
    own = tuple(model.pretrained_cfg.get("input_size", (3, 224, 224)))
    if tuple(input_shape) != own and len(input_shape) == 3:
        try:
            model = timm.create_model(model_name, pretrained=False,
                                      img_size=int(input_shape[-1]))
        except TypeError:  # a convolutional model takes any size at run time
            pass
    return model.eval()


def _sparse_linears(model, fmt: Format, seed: int) -> tuple[int, int, int]:
    """Mask every linear ``fmt`` applies to by the trainer's rules (per layer, exact counts)
    and make it run ``W @ X`` with W in torch CSR (unstructured) or BSR (block) layout.
    Returns (converted linears, all linears, stored weight values of the converted ones)."""
    import torch

    from formats.masks import PrunableWeight, global_masks

    torch.manual_seed(seed)
    linears = [(name, m) for name, m in model.named_modules()
               if isinstance(m, torch.nn.Linear)]
    converted, nnz = 0, 0
    for name, module in linears:
        out_f, in_f = module.weight.shape
        if not sparse_linear_applies(fmt, out_f, in_f):
            continue
        weight = module.weight.detach()
        mask = global_masks({name: PrunableWeight(weight, 1)}, fmt)[name]
        masked = (weight * mask).contiguous()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sparse = masked.to_sparse_csr() if fmt.family == "unstructured" \
                else masked.to_sparse_bsr((fmt.block, fmt.block))
        nnz += int(mask.sum()) if fmt.family == "unstructured" \
            else int(sparse.values().shape[0]) * fmt.block * fmt.block
        module.weight.data = masked  # the dense reference of the same masked weights
        module.register_buffer("sparse_weight", sparse, persistent=False)
        module.forward = _sparse_forward(module)
        converted += 1
    return converted, len(linears), nnz


def _sparse_forward(module):
    import torch

    def forward(x):
        flat = x.reshape(-1, x.shape[-1])
        y = torch.mm(module.sparse_weight, flat.t()).t()  # W @ X: the measured sparse kernel
        if module.bias is not None:
            y = y + module.bias
        return y.reshape(*x.shape[:-1], y.shape[-1])
    return forward


def build_model(model_name: str, input_shape: tuple[int, ...], batch: int,
                fmt: Format | None = None, seed: int = 0) -> Kernel:
    """A whole timm model as a ready-to-time kernel: ``fn()`` runs one forward pass (eval mode,
    ``torch.inference_mode``, fp32) of a random ``[batch, *input_shape]`` input. ``fmt``
    (block or unstructured) masks every linear it applies to and runs it as a torch sparse
    ``W @ X`` (:func:`sparse_linear_applies`); the output is then checked once, at batch 1,
    against the same masked weights run dense (``rel_err``). ``note`` says how many linears
    run sparse and whether attention runs fused (timm's default, as the H100 measurement
    ran); the trace prices attention unfused. Raises for models timm cannot build."""
    import torch

    fmt = fmt if fmt is not None and not isinstance(fmt, Dense) else None
    if fmt is not None and fmt.family not in ("block", "unstructured"):
        raise ValueError(f"format {fmt.name}: no CPU sparse path for a whole model "
                         "(block and unstructured formats only)")
    model = _timm_model(model_name, input_shape)
    gen = torch.Generator().manual_seed(seed + 3)
    x = torch.randn(batch, *input_shape, generator=gen, dtype=torch.float32)
    attention = [bool(m.fused_attn) for m in model.modules() if hasattr(m, "fused_attn")]
    notes = [f"input {'x'.join(map(str, input_shape))}"]
    if attention:
        notes.append(f"attention fused (F.scaled_dot_product_attention) in {sum(attention)} of "
                     f"{len(attention)} attention modules")
    params = sum(p.numel() for p in model.parameters())
    nnz, rel_err, kernel = params, float("nan"), "timm eager forward (dense)"
    if fmt is not None:
        converted, linears, sparse_nnz = _sparse_linears(model, fmt, seed)
        nnz = params - sum(m.weight.numel() for m in model.modules()
                           if hasattr(m, "sparse_weight")) + sparse_nnz
        layout = "CSR" if fmt.family == "unstructured" else f"BSR {fmt.block}x{fmt.block}"
        kernel = f"timm eager forward, linears as torch {layout} @ dense"
        notes.append(f"linears on the sparse path: {converted} of {linears}; convolutions "
                     "dense")
        with torch.inference_mode():
            got = model(x[:1])
            sparse_modules = [m for m in model.modules() if hasattr(m, "sparse_weight")]
            for m in sparse_modules:
                del m.forward  # nn.Linear's own forward on the masked dense weight
            ref = model(x[:1])
            for m in sparse_modules:
                m.forward = _sparse_forward(m)
        den = float(torch.linalg.vector_norm(ref.double()))
        rel_err = float(torch.linalg.vector_norm((got - ref).double()) / den) if den else 0.0

    def fn():
        with torch.inference_mode():
            return model(x)

    return Kernel(fn, int(nnz), dtype="fp32", threads=_threads(), kernel=kernel,
                  note="; ".join(notes), rel_err=rel_err,
                  index_dtype="int64" if fmt is not None else "")
