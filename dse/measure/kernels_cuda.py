"""CUDA kernels for measured GEMMs, vector ops and whole models (folded in from
``benchmarks/gpu/measure_gemm.py`` and ``measure_models.py``).

fp16 values and features (fp32 accumulate inside the libraries), weights masked by the
pruning trainer's rules (:func:`dse.measure.kernels_cpu.masked_weight`) and moved to the GPU.
Families and implementations (``CUDA_KERNELS``):

* ``dense``: ``cublas`` (``torch.mm``) and ``cublas_linear`` (``F.linear(X^T, W)``: the same
  GEMM transposed, for which cuBLAS often picks a different kernel);
* ``nm`` (2:4 only): ``cusparselt`` (``to_sparse_semi_structured`` then ``torch.mm``; the
  algorithm id is recorded) and ``cusparselt_algsearch`` (the id chosen by
  ``torch._cslt_sparse_mm_search`` for the exact problem);
* ``block``: ``triton_bsr`` (``torch.sparse._triton_ops.bsr_dense_mm``; N is zero-padded
  outside the timed region to the first multiple of 16, 64 or power of two that runs, noted)
  and ``torch_bsr_mm`` (``torch.sparse.mm``, whatever torch dispatches);
* ``unstructured``: ``cusparse_csr`` (CSR ``@ X``, int32 indices where torch takes them);
* vector ops as torch CUDA ops, and whole models eager and as CUDA graphs
  (:func:`time_model`).

Timing uses CUDA events (:func:`event_clock`); the cache flush reads a buffer of 4x the L2.
Nothing here touches CUDA at import time, and every builder raises (it never crashes the run)
when the device or library refuses: the row then records the error.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from .kernels_cpu import GemmCase, Kernel, VectorCase, masked_weight
from .kernels_cpu import build_vector as _build_vector_any
from .timing import cuda_event_clock as event_clock

__all__ = ["CUDA_KERNELS", "build_gemm", "build_vector", "event_clock", "time_model"]


def _require_cuda():
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device visible (torch.cuda.is_available() is False)")
    return torch


def _rel_err(out, ref) -> float:
    out = out.float()
    if out.shape != ref.shape:
        out = out[: ref.shape[0], : ref.shape[1]]
    den = ref.norm().item()
    return (out - ref).norm().item() / den if den > 0 else 0.0


def _operands(case: GemmCase):
    torch = _require_cuda()
    if case.groups != 1:
        raise ValueError(f"grouped GEMMs (groups={case.groups}) are measured on the CPU only")
    weight = masked_weight(case.m, case.k, 1, case.fmt, case.seed)
    gen = torch.Generator().manual_seed(case.seed + 7)
    x = torch.randn(case.k, case.n, generator=gen)
    w16 = weight.to("cuda", torch.float16)
    x16 = x.to("cuda", torch.float16)
    ref = w16.float() @ x16.float()
    return torch, w16, x16, ref


def _cublas(case: GemmCase, w, x, ref) -> Kernel:
    import torch

    fn = lambda: torch.mm(w, x)  # noqa: E731
    return Kernel(fn, case.m * case.k, dtype="fp16", kernel="torch.mm (cuBLAS)",
                  rel_err=_rel_err(fn(), ref))


def _cublas_linear(case: GemmCase, w, x, ref) -> Kernel:
    import torch.nn.functional as F

    xt = x.t().contiguous()
    fn = lambda: F.linear(xt, w)  # noqa: E731
    return Kernel(fn, case.m * case.k, dtype="fp16", kernel="F.linear (cuBLAS)",
                  rel_err=_rel_err(fn().t(), ref))


def _semi_structured(w):
    from torch.sparse import SparseSemiStructuredTensor, to_sparse_semi_structured

    SparseSemiStructuredTensor._FORCE_CUTLASS = False
    return to_sparse_semi_structured(w)


def _cusparselt(case: GemmCase, w, x, ref) -> Kernel:
    import torch

    ws = _semi_structured(w)
    backend = getattr(ws, "BACKEND", type(ws).__name__)
    fn = lambda: torch.mm(ws, x)  # noqa: E731
    alg = getattr(ws, "alg_id_cusparselt", 0)
    return Kernel(fn, case.m * case.k // 2, dtype="fp16", index_dtype="2-bit metadata",
                  kernel=f"{backend} alg_id={alg}", rel_err=_rel_err(fn(), ref))


def _cusparselt_search(case: GemmCase, w, x, ref) -> Kernel:
    import torch

    ws = _semi_structured(w)
    if not hasattr(torch, "_cslt_sparse_mm_search"):
        raise RuntimeError("torch has no _cslt_sparse_mm_search")
    alg = torch._cslt_sparse_mm_search(ws.packed, ws._pad_dense_input(x))
    alg = int(alg[0] if isinstance(alg, tuple | list) else alg)
    ws.alg_id_cusparselt = alg
    fn = lambda: torch.mm(ws, x)  # noqa: E731
    return Kernel(fn, case.m * case.k // 2, dtype="fp16", index_dtype="2-bit metadata",
                  kernel=f"cusparselt alg_id={alg} (searched)", rel_err=_rel_err(fn(), ref))


def _padded_runs(fn_of_x, x) -> tuple[Callable[[], object], str]:
    """``fn_of_x`` on X, or on X zero-padded (outside timing) to the first N that runs."""
    import torch
    import torch.nn.functional as F

    n = x.shape[1]
    candidates = [n]
    for multiple in (16, 64):
        padded = n + (-n) % multiple
        if padded not in candidates:
            candidates.append(padded)
    power = 1 << max(0, (n - 1).bit_length())
    if power not in candidates:
        candidates.append(power)
    errors = []
    for padded in candidates:
        xc = x if padded == n else F.pad(x, (0, padded - n))
        try:
            fn_of_x(xc)
            torch.cuda.synchronize()
        except Exception as exc:  # the Triton kernel refuses some N; try the next
            torch.cuda.synchronize()
            errors.append(f"N={padded}: {type(exc).__name__}")
            continue
        note = "" if padded == n else f"N padded {n}->{padded} outside timing"
        return (lambda xc=xc: fn_of_x(xc)), note
    raise RuntimeError("; ".join(errors))


def _bsr(case: GemmCase, w):
    return w.to_sparse_bsr((case.fmt.block, case.fmt.block))


def _triton_bsr(case: GemmCase, w, x, ref) -> Kernel:
    from torch.sparse._triton_ops import bsr_dense_mm

    wb = _bsr(case, w)
    fn, note = _padded_runs(lambda xc: bsr_dense_mm(wb, xc), x)
    nnz = int(wb.values().shape[0]) * case.fmt.block ** 2
    return Kernel(fn, nnz, dtype="fp16", index_dtype="int64",
                  kernel="triton _bsr_strided_addmm_kernel", note=note,
                  rel_err=_rel_err(fn(), ref))


def _torch_bsr_mm(case: GemmCase, w, x, ref) -> Kernel:
    import torch

    wb = _bsr(case, w)
    fn = lambda: torch.sparse.mm(wb, x)  # noqa: E731
    nnz = int(wb.values().shape[0]) * case.fmt.block ** 2
    return Kernel(fn, nnz, dtype="fp16", index_dtype="int64", kernel="torch.sparse.mm (bsr)",
                  rel_err=_rel_err(fn(), ref))


def _cusparse_csr(case: GemmCase, w, x, ref) -> Kernel:
    import torch

    wc = w.to_sparse_csr()
    index = "int64"
    try:
        wc32 = torch.sparse_csr_tensor(wc.crow_indices().to(torch.int32),
                                       wc.col_indices().to(torch.int32), wc.values(),
                                       size=wc.shape)
        wc32 @ x[:, :8].contiguous()
        torch.cuda.synchronize()
        wc, index = wc32, "int32"
    except Exception:  # int32 indices refused: keep torch's int64
        pass
    fn = lambda: wc @ x  # noqa: E731
    return Kernel(fn, int(wc._nnz()), dtype="fp16", index_dtype=index,
                  kernel="cuSPARSE SpMM (csr @ dense)", rel_err=_rel_err(fn(), ref))


#: family -> implementation -> builder(case, fp16 masked weight, X, fp32 reference) -> Kernel.
CUDA_KERNELS: dict[str, dict[str, Callable]] = {
    "dense": {"cublas": _cublas, "cublas_linear": _cublas_linear},
    "nm": {"cusparselt": _cusparselt, "cusparselt_algsearch": _cusparselt_search},
    "block": {"triton_bsr": _triton_bsr, "torch_bsr_mm": _torch_bsr_mm},
    "unstructured": {"cusparse_csr": _cusparse_csr},
}


def build_gemm(case: GemmCase) -> dict[str, Kernel | Exception]:
    """Every CUDA implementation of the case's family on one masked weight: ``{name:
    Kernel}``, or the exception a library raised (kept as the row's error)."""
    try:
        torch, w, x, ref = _operands(case)
    except Exception as exc:
        return {name: exc for name in CUDA_KERNELS[case.fmt.family]}
    built: dict[str, Kernel | Exception] = {}
    for name, builder in CUDA_KERNELS[case.fmt.family].items():
        try:
            built[name] = builder(case, w, x, ref)
            torch.cuda.synchronize()
        except Exception as exc:  # e.g. 2:4 on a GPU below sm_80
            torch.cuda.synchronize()
            built[name] = exc
    return built


def build_vector(case: VectorCase) -> Kernel | None:
    """The vector op as a torch CUDA op in fp16."""
    _require_cuda()
    kernel = _build_vector_any(case, device="cuda", dtype="fp16")
    if kernel is not None:
        kernel.dtype = "fp16"
    return kernel


def time_model(model_name: str, batch: int, repeats: int = 20, graphs: bool = True
               ) -> dict[str, dict[str, float]]:
    """Whole-model fp16 inference of a timm model on the GPU: ``{"eager": stats,
    "cudagraph": stats}`` with median, min and p90 seconds per forward pass (CUDA events;
    warm caches; the graph replays one captured forward)."""
    torch = _require_cuda()
    import timm

    model = timm.create_model(model_name, pretrained=False).eval().to("cuda", torch.float16)
    size = model.pretrained_cfg.get("input_size", (3, 224, 224))
    x = torch.randn(batch, *size, device="cuda", dtype=torch.float16)
    results: dict[str, dict[str, float]] = {}
    with torch.inference_mode():
        for _ in range(3):
            model(x)
        torch.cuda.synchronize()
        results["eager"] = _stats([event_clock(lambda: model(x)) for _ in range(repeats)])
        if graphs:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(3):
                    model(x)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                model(x)
            graph.replay()
            torch.cuda.synchronize()
            results["cudagraph"] = _stats([event_clock(graph.replay) for _ in range(repeats)])
    torch.cuda.empty_cache()
    return results


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_s": statistics.median(ordered), "min_s": ordered[0],
            "p90_s": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
            "repeats": float(len(ordered))}
