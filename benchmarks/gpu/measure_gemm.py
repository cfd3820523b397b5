#!/usr/bin/env python3
# ruff: noqa: E501, E702, E731, B023, B905, F821, UP017
# (after the GPU runs only this comment was added and `ruff format` applied: the AST is unchanged. The lambdas are
#  called within the loop iteration that defines them, and F821 is a false positive from `del`.)
"""Measure dense and sparse fp16 GEMM kernels on a CUDA GPU (standalone, torch only).

GEMM convention used everywhere in this file and in the CSV:
    Y[M x N] = W[M x K] . X[K x N]
W is the (possibly sparse) weight, X the dense activation matrix. For the
`*_linear` kernels the same product is issued through torch.nn.functional.linear,
which computes Xt @ W^T with Xt = X^T of shape [N x K] (so the output is [N x M]).

Kernels (column `kernel`):
  dense_mm          torch.mm(W, X)                               (cuBLAS)
  dense_linear      F.linear(Xt, W)                              (cuBLAS)
  sparse24_mm       torch.mm(W24, X), W24 = 2:4 semi-structured  (cuSPARSELt or CUTLASS)
  sparse24_linear   F.linear(Xt, W24)
  bsr_sparse_mm     torch.sparse.mm(W_bsr, X)                    (whatever torch dispatches to)
  bsr_triton        torch.sparse._triton_ops.bsr_dense_mm(W_bsr, X)
  bsr_linear        F.linear(Xt, W_bsr)
  csr_mm            W_csr @ X                                    (cuSPARSE SpMM)
plus two one-off calibration rows: `calib_copy_bw` (device-to-device copy) and
`calib_dense_peak` (8192^3 fp16 torch.mm).

Timing: CUDA events around each single call; `--warmup` untimed calls first, then
`--reps` timed calls; median and min are reported. By default every timed call is
preceded by an L2 flush (a read of a buffer of >= 4x the L2 size, so no dirty
lines are left behind) and a ~`--pad-us` microsecond GPU spin (torch.cuda._sleep)
so that the host can enqueue the kernel's launches before the GPU reaches them:
`median_s` is therefore cold-L2 GPU time with host dispatch overhead hidden.
`steady_s` is a second, different measurement: mean time per call of back-to-back
calls with no flush (warm L2), which includes host dispatch overhead when the
host is the bottleneck. Slow cases (> ~40 ms per call) use fewer reps (recorded).

Run:  python3 benchmarks/gpu/measure_gemm.py --out DIR [--grid full|tiny]
Writes DIR/gemm_measurements.csv and DIR/gemm_measurements.json.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import math
import os
import platform
import shlex
import socket
import statistics
import subprocess
import sys
import time
import traceback

import torch
import torch.nn.functional as F

# --------------------------------------------------------------------------------------
# Roofline constants (NVIDIA H100 SXM5 datasheet): fp16 dense tensor-core peak, HBM3 BW.
SPEC_PEAK_FLOPS = 989.4e12
SPEC_DRAM_BW = 3.35e12

FIELDS = [
    "kernel",
    "backend",
    "dtype",
    "index_dtype",
    "group",
    "layer",
    "batch",
    "M",
    "K",
    "N",
    "block",
    "sparsity",
    "density",
    "nnz",
    "median_s",
    "min_s",
    "p90_s",
    "reps",
    "steady_s",
    "steady_reps",
    "tflops_useful",
    "flops_useful",
    "bytes_model",
    "time_sol_s",
    "sol_fraction",
    "time_sol_measured_s",
    "sol_fraction_measured",
    "speedup_vs_dense",
    "rel_err",
    "host_call_s",
    "pad_us",
    "prof_kernel_s",
    "kernels_seen",
    "note",
    "error",
]

SPARSITIES_BSR = [0.5, 0.75, 0.875, 0.9375]
SPARSITIES_CSR = [0.5, 0.75, 0.875, 0.9375, 0.96875]
BLOCKS = [16, 32, 64]


# --------------------------------------------------------------------------------------
# Shape grid
def build_grid(name: str):
    """Return list of dicts with M, K, N, group, layer, batch."""
    shapes = []
    if name == "tiny":
        shapes.append(dict(M=4096, K=4096, N=128, group="square", layer="square", batch=""))
        shapes.append(dict(M=1152, K=384, N=197, group="vit", layer="deit_s.qkv", batch=1))
        shapes.append(
            dict(M=96, K=384, N=3136, group="convnext", layer="convnext_t.s1.pwconv2", batch=1)
        )
        shapes.append(dict(M=8192, K=8192, N=8192, group="square", layer="square", batch=""))
        return shapes
    vit_layers = [
        ("deit_s.qkv", 1152, 384),
        ("deit_s.proj", 384, 384),
        ("deit_s.fc1", 1536, 384),
        ("deit_s.fc2", 384, 1536),
        ("vit_b.qkv", 2304, 768),
        ("vit_b.fc1", 3072, 768),
        ("vit_b.fc2", 768, 3072),
    ]
    for b in (1, 8, 64):
        for lname, M, K in vit_layers:
            shapes.append(dict(M=M, K=K, N=197 * b, group="vit", layer=lname, batch=b))
    cnx_layers = [
        ("convnext_t.s1.pwconv1", 384, 96, 3136),
        ("convnext_t.s1.pwconv2", 96, 384, 3136),
        ("convnext_t.s4.pwconv1", 3072, 768, 49),
        ("convnext_t.s4.pwconv2", 768, 3072, 49),
    ]
    for b in (1, 8):
        for lname, M, K, tok in cnx_layers:
            shapes.append(dict(M=M, K=K, N=tok * b, group="convnext", layer=lname, batch=b))
    for MK in (1024, 4096, 8192):
        for N in (1, 16, 128, 1024, 8192):
            shapes.append(dict(M=MK, K=MK, N=N, group="square", layer="square", batch=""))
    return shapes


# --------------------------------------------------------------------------------------
# Timing helpers
class Timer:
    def __init__(self, flush: bool, pad_us: float):
        self.flush_buf = None
        props = torch.cuda.get_device_properties(0)
        l2 = int(getattr(props, "L2_cache_size", 50 * 2**20) or 50 * 2**20)
        if flush:
            nbytes = max(256 * 2**20, 4 * l2)
            self.flush_buf = torch.zeros(nbytes // 2, dtype=torch.float16, device="cuda")
        self.pad_cycles = 0
        if pad_us > 0:
            # calibrate torch.cuda._sleep cycles -> seconds
            torch.cuda._sleep(1000)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            cyc = 2_000_000
            s.record()
            torch.cuda._sleep(cyc)
            e.record()
            torch.cuda.synchronize()
            sec = s.elapsed_time(e) * 1e-3
            self.cycles_per_s = cyc / sec if sec > 0 else 1.8e9
            self.pad_cycles = int(pad_us * 1e-6 * self.cycles_per_s)
        else:
            self.cycles_per_s = float("nan")

    def _pre(self, pad_cycles=None):
        if self.flush_buf is not None:
            self.flush_buf.sum()  # read-only sweep: evicts L2 without leaving dirty lines
        pc = self.pad_cycles if pad_cycles is None else pad_cycles
        if pc:
            torch.cuda._sleep(pc)

    def us_to_cycles(self, us):
        return int(us * 1e-6 * self.cycles_per_s) if not math.isnan(self.cycles_per_s) else 0

    def host_time(self, fn, gpu_busy_s=0.004):
        """Host-side seconds to issue fn() while the GPU is kept busy (no waiting on the GPU
        unless fn synchronizes internally, in which case this is >= ~gpu_busy_s)."""
        torch.cuda.synchronize()
        cyc = (
            int(gpu_busy_s * self.cycles_per_s) if not math.isnan(self.cycles_per_s) else 8_000_000
        )
        torch.cuda._sleep(cyc)
        t0 = time.perf_counter()
        fn()
        h = time.perf_counter() - t0
        torch.cuda.synchronize()
        return h

    def one(self, fn, pad_cycles=None):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self._pre(pad_cycles)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) * 1e-3

    def many(self, fn, reps, pad_cycles=None):
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            self._pre(pad_cycles)
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e-3 for s, e in zip(starts, ends)]

    @staticmethod
    def steady(fn, reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fn()
        torch.cuda.synchronize()
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) * 1e-3 / reps


def profile_kernels(fn, calls=5, limit=4):
    """Run fn `calls` times (warm L2, back-to-back) under torch.profiler.
    Returns (distinct CUDA kernel/memset/memcpy names, mean device seconds per call)."""
    try:
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
        names = []
        tot_us = 0.0
        for ev in prof.events():
            dt = getattr(ev, "device_type", None)
            if dt is not None and str(dt).endswith("CUDA"):
                tot_us += ev.time_range.elapsed_us()
                n = ev.name
                if n not in names:
                    names.append(n)
        short = [n[:90].replace(",", ";").replace("\n", " ") for n in names[:limit]]
        return (" | ".join(short) if short else "(no CUDA events captured)"), tot_us * 1e-6 / calls
    except Exception as ex:  # pragma: no cover - device only
        return f"(profiler failed: {type(ex).__name__}: {str(ex)[:80]})", float("nan")


# --------------------------------------------------------------------------------------
# Operand construction
def prune_2to4(W):
    """Keep the 2 largest-magnitude of every 4 consecutive elements along K (rows of W)."""
    M, K = W.shape
    g = W.reshape(M, K // 4, 4)
    idx = g.abs().argsort(dim=-1, descending=True)[..., :2]
    mask = torch.zeros_like(g, dtype=torch.bool).scatter_(-1, idx, True)
    return (g * mask).reshape(M, K)


def block_mask(M, K, b, density, gen):
    nbr, nbc = M // b, K // b
    nblocks = nbr * nbc
    keep = max(1, int(round(density * nblocks)))
    perm = torch.randperm(nblocks, generator=gen, device="cpu")[:keep]
    bm = torch.zeros(nblocks, dtype=torch.bool)
    bm[perm] = True
    bm = bm.reshape(nbr, nbc).to("cuda")
    return bm.repeat_interleave(b, dim=0).repeat_interleave(b, dim=1)


def pad_cols(X, mult):
    n = X.shape[1]
    npad = (-n) % mult
    if npad == 0:
        return X, n
    return F.pad(X, (0, npad)), n + npad


def rel_err(out, ref):
    out = out.float()
    if out.shape != ref.shape:
        out = out[: ref.shape[0], : ref.shape[1]]
    den = ref.norm().item()
    return (out - ref).norm().item() / den if den > 0 else float("nan")


# --------------------------------------------------------------------------------------
class Bench:
    def __init__(self, args):
        self.args = args
        self.timer = Timer(flush=not args.no_flush, pad_us=args.pad_us)
        self.gen = torch.Generator(device="cpu").manual_seed(args.seed)
        self.rows = []
        self.meas_peak = float("nan")
        self.meas_bw = float("nan")
        self.t_start = time.time()
        self.profiled = set()
        self.out_csv = os.path.join(args.out, f"gemm_measurements{args.tag}.csv")
        self.fh = open(self.out_csv, "w", newline="")
        self.writer = csv.DictWriter(self.fh, fieldnames=FIELDS, extrasaction="ignore")
        self.writer.writeheader()
        self.fh.flush()
        self.n_err = 0

    # ---- row output
    def emit(self, row):
        full = {k: "" for k in FIELDS}
        full.update(row)
        for k in (
            "median_s",
            "min_s",
            "p90_s",
            "steady_s",
            "time_sol_s",
            "time_sol_measured_s",
            "host_call_s",
            "prof_kernel_s",
        ):
            if isinstance(full[k], float) and not math.isnan(full[k]):
                full[k] = f"{full[k]:.6e}"
        for k in (
            "tflops_useful",
            "sol_fraction",
            "sol_fraction_measured",
            "speedup_vs_dense",
            "density",
            "rel_err",
        ):
            if isinstance(full[k], float) and not math.isnan(full[k]):
                full[k] = f"{full[k]:.4g}"
        for k, v in list(full.items()):
            if isinstance(v, float) and math.isnan(v):
                full[k] = ""
        if full.get("error"):
            self.n_err += 1
            full["error"] = str(full["error"]).replace("\n", " ")[:300]
        self.writer.writerow(full)
        self.fh.flush()
        self.rows.append(full)
        el = time.time() - self.t_start
        print(
            f"[{el:7.1f}s] {full['kernel']:<16} {full['backend']:<22} M={full['M']} K={full['K']} "
            f"N={full['N']} b={full['block']} s={full['sparsity']} med={full['median_s']} "
            f"tf={full['tflops_useful']} sol={full['sol_fraction']} spd={full['speedup_vs_dense']}"
            + (f" ERR={full['error'][:100]}" if full.get("error") else ""),
            flush=True,
        )

    def over_budget(self):
        return (time.time() - self.t_start) > self.args.time_budget

    # ---- calibration
    def calibrate(self):
        # DRAM bandwidth: large device-to-device copy, bytes = read + write.
        try:
            nbytes = 2 * 2**30
            src = torch.randn(nbytes // 2, dtype=torch.float16, device="cuda")
            dst = torch.empty_like(src)
            fn = lambda: dst.copy_(src)
            for _ in range(3):
                fn()
            ts = Timer.many(self._nopre_timer(), fn, 20)
            med = statistics.median(ts)
            self.meas_bw = 2 * nbytes / med
            self.emit(
                dict(
                    kernel="calib_copy_bw",
                    backend="cudaMemcpy D2D (tensor.copy_)",
                    dtype="float16",
                    M="",
                    K="",
                    N="",
                    median_s=med,
                    min_s=min(ts),
                    reps=len(ts),
                    note=f"bytes={2 * nbytes} (read+write); "
                    f"achieved {self.meas_bw / 1e12:.3f} TB/s; spec {SPEC_DRAM_BW / 1e12:.2f} TB/s",
                )
            )
            del src, dst
        except Exception as ex:
            self.emit(dict(kernel="calib_copy_bw", error=f"{type(ex).__name__}: {ex}"))
        # Dense peak: 8192^3 fp16 mm on random data, back-to-back (no flush: compute bound).
        try:
            n = 8192
            A = torch.randn(n, n, dtype=torch.float16, device="cuda")
            B = torch.randn(n, n, dtype=torch.float16, device="cuda")
            C = torch.empty(n, n, dtype=torch.float16, device="cuda")
            fn = lambda: torch.mm(A, B, out=C)
            for _ in range(5):
                fn()
            ts = Timer.many(self._nopre_timer(), fn, 30)
            med = statistics.median(ts)
            self.meas_peak = 2 * n**3 / med
            self.emit(
                dict(
                    kernel="calib_dense_peak",
                    backend="cublas torch.mm",
                    dtype="float16",
                    M=n,
                    K=n,
                    N=n,
                    median_s=med,
                    min_s=min(ts),
                    reps=len(ts),
                    tflops_useful=2 * n**3 / med / 1e12,
                    note=f"achieved {self.meas_peak / 1e12:.1f} TFLOP/s; spec {SPEC_PEAK_FLOPS / 1e12:.1f}",
                )
            )
            del A, B, C
        except Exception as ex:
            self.emit(dict(kernel="calib_dense_peak", error=f"{type(ex).__name__}: {ex}"))
        torch.cuda.empty_cache()

    def _nopre_timer(self):
        t = Timer.__new__(Timer)
        t.flush_buf = None
        t.pad_cycles = 0
        return t

    # ---- SOL model
    def sol(self, nnz, idx_bytes, M, K, N, elem):
        flops = 2.0 * nnz * N
        byts = elem * nnz + idx_bytes + elem * (K * N + M * N)
        t_spec = max(flops / SPEC_PEAK_FLOPS, byts / SPEC_DRAM_BW)
        t_meas = (
            max(flops / self.meas_peak, byts / self.meas_bw)
            if not (math.isnan(self.meas_peak) or math.isnan(self.meas_bw))
            else float("nan")
        )
        return flops, byts, t_spec, t_meas

    # ---- one case
    def run_case(
        self, base, fn, ref, nnz, idx_bytes, elem, dense_best, prof_key, out_transposed=False
    ):
        """Time fn; base holds the descriptive columns. Returns median seconds or None."""
        a = self.args
        row = dict(base)
        M, K, N = base["M"], base["K"], base["N"]
        flops, byts, t_spec, t_meas = self.sol(nnz, idx_bytes, M, K, N, elem)
        row.update(
            nnz=nnz,
            flops_useful=int(flops),
            bytes_model=int(byts),
            time_sol_s=t_spec,
            time_sol_measured_s=t_meas,
            density=nnz / float(M * K),
        )
        try:
            out = fn()
            torch.cuda.synchronize()
            if ref is not None:
                row["rel_err"] = rel_err(out.t() if out_transposed else out, ref)
            del out
            t1 = self.timer.one(fn)
            wu = a.warmup if t1 < 0.02 else 1
            for _ in range(wu - 1):
                fn()
            # Host issue time of one call; the GPU spin before each timed call is made longer
            # than that, so the timed region sees no idle gap caused by Python/launch overhead.
            host = min(self.timer.host_time(fn), self.timer.host_time(fn))
            pad_us = a.pad_us
            if not a.no_adaptive_pad:
                pad_us = min(max(a.pad_us, 1.5 * host * 1e6 + 50.0), 20000.0)
            pc = self.timer.us_to_cycles(pad_us)
            row.update(host_call_s=host, pad_us=int(round(pad_us)))
            if host > 0.0035:
                row["note"] = (
                    (row.get("note") or "") + " host_call>=3.5ms: fn may synchronize; "
                    "median_s may include host gaps"
                ).strip()
            t_est = self.timer.one(fn, pc)
            reps = a.reps
            if t_est * reps > a.case_budget:
                reps = max(a.min_reps_slow, int(a.case_budget / max(t_est, 1e-9)))
                reps = min(reps, a.reps)
            ts = self.timer.many(fn, reps, pc)
            med = statistics.median(ts)
            ts_sorted = sorted(ts)
            row.update(
                median_s=med,
                min_s=ts_sorted[0],
                p90_s=ts_sorted[min(len(ts) - 1, int(0.9 * len(ts)))],
                reps=reps,
                tflops_useful=flops / med / 1e12,
                sol_fraction=t_spec / med,
                sol_fraction_measured=(t_meas / med) if not math.isnan(t_meas) else float("nan"),
            )
            if dense_best:
                row["speedup_vs_dense"] = dense_best / med
            if med < a.steady_max_s:
                nst = max(a.reps, int(min(0.05 / max(med, 1e-7), 200)))
                row.update(steady_s=Timer.steady(fn, nst), steady_reps=nst)
            if a.profile == "all" or (
                a.profile == "first" and prof_key is not None and prof_key not in self.profiled
            ):
                self.profiled.add(prof_key)
                row["kernels_seen"], row["prof_kernel_s"] = profile_kernels(
                    fn, calls=5 if med < 0.01 else 1
                )
            self.emit(row)
            return med
        except Exception as ex:
            torch.cuda.synchronize()
            msg = (
                f"{type(ex).__name__}: {str(ex).strip().splitlines()[0] if str(ex).strip() else ''}"
            )
            if a.verbose_errors:
                traceback.print_exc()
            row["error"] = msg
            self.emit(row)
            return None

    # ---- all kernels for one shape
    def run_shape(self, shp):
        a = self.args
        M, K, N = shp["M"], shp["K"], shp["N"]
        base0 = dict(
            group=shp["group"],
            layer=shp["layer"],
            batch=shp["batch"],
            M=M,
            K=K,
            N=N,
            dtype="float16",
        )
        dev = "cuda"
        g = torch.Generator(device="cpu").manual_seed(a.seed + M * 7 + K * 13 + N * 17)
        W = torch.randn(M, K, generator=g, dtype=torch.float32).to(dev, torch.float16)
        X = torch.randn(K, N, generator=g, dtype=torch.float32).to(dev, torch.float16)
        Xt = X.t().contiguous()  # [N, K] activations for F.linear
        Wf, Xf = W.float(), X.float()
        ref_dense = Wf @ Xf
        kernels = set(a.kernels.split(","))

        # ---------------- dense
        dense_times = []
        if "dense" in kernels:
            key = ("dense", M, K, N)
            t = self.run_case(
                dict(base0, kernel="dense_mm", backend="cublas", block="", sparsity=0.0),
                lambda: torch.mm(W, X),
                ref_dense,
                M * K,
                0,
                2,
                None,
                key + ("mm",),
            )
            if t:
                dense_times.append(t)
            t = self.run_case(
                dict(base0, kernel="dense_linear", backend="cublas", block="", sparsity=0.0),
                lambda: F.linear(Xt, W),
                ref_dense,
                M * K,
                0,
                2,
                None,
                key + ("lin",),
                out_transposed=True,
            )
            if t:
                dense_times.append(t)
        dense_best = min(dense_times) if dense_times else None

        # ---------------- 2:4 semi-structured
        if "sparse24" in kernels and self.over_budget():
            for kn in ("sparse24_mm", "sparse24_linear"):
                self.emit(
                    dict(
                        base0,
                        kernel=kn,
                        backend="",
                        block="2:4",
                        sparsity=0.5,
                        error="skipped: time budget",
                    )
                )
        elif "sparse24" in kernels:
            W24 = prune_2to4(W)
            ref24 = W24.float() @ Xf
            nnz24 = M * K // 2
            idx24 = nnz24 * 2 // 8
            from torch.sparse import SparseSemiStructuredTensor, to_sparse_semi_structured

            for backend in ("cusparselt", "cutlass"):
                base = dict(base0, block="2:4", sparsity=0.5)
                try:
                    SparseSemiStructuredTensor._FORCE_CUTLASS = backend == "cutlass"
                    Ws = to_sparse_semi_structured(W24)
                    bk = getattr(Ws, "BACKEND", type(Ws).__name__)
                except Exception as ex:
                    for kn in ("sparse24_mm", "sparse24_linear"):
                        self.emit(
                            dict(
                                base,
                                kernel=kn,
                                backend=backend,
                                nnz=nnz24,
                                error=f"to_sparse_semi_structured: {type(ex).__name__}: {ex}",
                            )
                        )
                    continue
                self.run_case(
                    dict(base, kernel="sparse24_mm", backend=bk, note=type(Ws).__name__),
                    lambda: torch.mm(Ws, X),
                    ref24,
                    nnz24,
                    idx24,
                    2,
                    dense_best,
                    ("s24mm", bk, M, K, N),
                )
                self.run_case(
                    dict(base, kernel="sparse24_linear", backend=bk, note=type(Ws).__name__),
                    lambda: F.linear(Xt, Ws),
                    ref24,
                    nnz24,
                    idx24,
                    2,
                    dense_best,
                    ("s24lin", bk, M, K, N),
                    out_transposed=True,
                )
                if (
                    bk == "cusparselt"
                    and a.cslt_search
                    and hasattr(torch, "_cslt_sparse_mm_search")
                ):
                    # Let cuSPARSELt pick its best algorithm id for this exact problem.
                    try:
                        Xp = Ws._pad_dense_input(X)
                        alg = torch._cslt_sparse_mm_search(Ws.packed, Xp)
                        if isinstance(alg, (tuple, list)):
                            alg = alg[0]
                        Ws.alg_id_cusparselt = int(alg)
                        self.run_case(
                            dict(
                                base,
                                kernel="sparse24_mm",
                                backend="cusparselt_algsearch",
                                note=f"alg_id={int(alg)}",
                            ),
                            lambda: torch.mm(Ws, X),
                            ref24,
                            nnz24,
                            idx24,
                            2,
                            dense_best,
                            ("s24mm_s", M, K, N),
                        )
                    except Exception as ex:
                        self.emit(
                            dict(
                                base,
                                kernel="sparse24_mm",
                                backend="cusparselt_algsearch",
                                nnz=nnz24,
                                error=f"{type(ex).__name__}: {ex}",
                            )
                        )
                del Ws
            SparseSemiStructuredTensor._FORCE_CUTLASS = self.force_cutlass_default
            del W24, ref24

        # ---------------- BSR
        if "bsr" in kernels:
            try:
                from torch.sparse._triton_ops import bsr_dense_mm
            except Exception as ex:  # pragma: no cover
                bsr_dense_mm = None
                bsr_import_err = f"{type(ex).__name__}: {ex}"
            for b in BLOCKS:
                for sp in SPARSITIES_BSR:
                    base = dict(base0, block=b, sparsity=sp, index_dtype="int64")
                    names = ("bsr_sparse_mm", "bsr_triton", "bsr_linear")
                    if self.over_budget():
                        for kn in names:
                            self.emit(
                                dict(base, kernel=kn, backend="", error="skipped: time budget")
                            )
                        continue
                    if M % b or K % b:
                        for kn in names:
                            self.emit(
                                dict(
                                    base,
                                    kernel=kn,
                                    backend="",
                                    error=f"skipped: M={M} or K={K} not divisible by block {b}",
                                )
                            )
                        continue
                    mask = block_mask(M, K, b, 1.0 - sp, self.gen)
                    Wm = W * mask
                    del mask
                    refm = Wm.float() @ Xf
                    try:
                        Wb = Wm.to_sparse_bsr((b, b))
                    except Exception as ex:
                        for kn in names:
                            self.emit(
                                dict(
                                    base,
                                    kernel=kn,
                                    backend="",
                                    error=f"to_sparse_bsr: {type(ex).__name__}: {ex}",
                                )
                            )
                        del Wm, refm
                        continue
                    nnzb = Wb.values().shape[0]
                    nnz = nnzb * b * b
                    idx = nnzb * 4 + (M // b + 1) * 4  # model: int32 indices
                    first = sp == SPARSITIES_BSR[0]
                    # (a) torch.sparse.mm - path decided by torch
                    self._bsr_case(
                        dict(base, kernel="bsr_sparse_mm", backend="torch.sparse.mm"),
                        lambda Xc: torch.sparse.mm(Wb, Xc),
                        X,
                        refm,
                        nnz,
                        idx,
                        dense_best,
                        ("bsrmm", b, M, K, N) if first else None,
                    )
                    # (b) explicit Triton kernel
                    if bsr_dense_mm is None:
                        self.emit(
                            dict(base, kernel="bsr_triton", backend="triton", error=bsr_import_err)
                        )
                    else:
                        self._bsr_case(
                            dict(base, kernel="bsr_triton", backend="triton bsr_dense_mm"),
                            lambda Xc: bsr_dense_mm(Wb, Xc),
                            X,
                            refm,
                            nnz,
                            idx,
                            dense_best,
                            ("bsrtr", b, M, K, N) if first else None,
                        )
                    # (c) F.linear with a BSR weight
                    self.run_case(
                        dict(base, kernel="bsr_linear", backend="F.linear(bsr)"),
                        lambda: F.linear(Xt, Wb),
                        refm,
                        nnz,
                        idx,
                        2,
                        dense_best,
                        ("bsrlin", b, M, K, N) if first else None,
                        out_transposed=True,
                    )
                    del Wb, Wm, refm
            torch.cuda.empty_cache()

        # ---------------- CSR (cuSPARSE)
        if "csr" in kernels:
            for sp in SPARSITIES_CSR:
                base = dict(base0, kernel="csr_mm", block=1, sparsity=sp)
                if self.over_budget():
                    self.emit(dict(base, backend="", error="skipped: time budget"))
                    continue
                mask = torch.rand(M, K, generator=None, device=dev) >= sp
                Wm = W * mask
                del mask
                refm = Wm.float() @ Xf
                err16 = None
                done = False
                for dt in (torch.float16, torch.float32):
                    if done:
                        break
                    try:
                        Wd = Wm.to(dt)
                        Xd = X.to(dt)
                        Wc = Wd.to_sparse_csr()
                        idx_note = "int64"
                        try:
                            Wc32 = torch.sparse_csr_tensor(
                                Wc.crow_indices().to(torch.int32),
                                Wc.col_indices().to(torch.int32),
                                Wc.values(),
                                size=Wc.shape,
                            )
                            _ = Wc32 @ Xd[:, :8].contiguous()
                            torch.cuda.synchronize()
                            Wc = Wc32
                            idx_note = "int32"
                        except Exception:
                            pass
                        nnz = Wc._nnz()
                        elem = 2 if dt == torch.float16 else 4
                        note = (
                            ""
                            if err16 is None
                            else f"fp16 failed ({err16[:120]}); fell back to fp32"
                        )
                        t = self.run_case(
                            dict(
                                base,
                                backend="cusparse",
                                dtype=str(dt).replace("torch.", ""),
                                index_dtype=idx_note,
                                note=note,
                            ),
                            lambda: Wc @ Xd,
                            refm,
                            nnz,
                            nnz * 4 + (M + 1) * 4,
                            elem,
                            dense_best,
                            ("csr", M, K, N) if sp == SPARSITIES_CSR[0] else None,
                        )
                        if t is None and dt == torch.float16:
                            err16 = self.rows[-1].get("error", "")
                            continue
                        done = True
                    except Exception as ex:
                        if dt == torch.float16:
                            err16 = f"{type(ex).__name__}: {ex}"
                            continue
                        self.emit(
                            dict(
                                base,
                                backend="cusparse",
                                dtype="float32",
                                error=f"{type(ex).__name__}: {ex}",
                            )
                        )
                del Wm, refm
            torch.cuda.empty_cache()
        del W, X, Xt, Wf, Xf, ref_dense
        torch.cuda.empty_cache()

    def _bsr_case(self, base, fn_of_X, X, ref, nnz, idx, dense_best, prof_key):
        """Try unpadded N first; if that raises, pre-pad X's N (outside timing) to a multiple of
        16, then 64, then the next power of two; the first that runs is timed."""
        n = X.shape[1]
        cands = [n]
        for m in (16, 64):
            npad = n + (-n) % m
            if npad not in cands:
                cands.append(npad)
        p2 = 1 << max(0, (n - 1).bit_length())
        if p2 not in cands:
            cands.append(p2)
        errs = []
        for npad in cands:
            Xc = X if npad == n else F.pad(X, (0, npad - n))
            try:
                fn_of_X(Xc)
                torch.cuda.synchronize()
            except Exception as ex:
                torch.cuda.synchronize()
                errs.append(
                    f"N={npad}: {type(ex).__name__}: {str(ex).strip().splitlines()[0][:100] if str(ex).strip() else ''}"
                )
                continue
            note = (
                ""
                if npad == n
                else (f"N padded {n}->{npad} outside timing; failed first: " + " / ".join(errs))
            )
            return self.run_case(
                dict(base, note=note[:300]),
                (lambda Xc=Xc: fn_of_X(Xc)),
                ref,
                nnz,
                idx,
                2,
                dense_best,
                prof_key,
            )
        self.emit(dict(base, nnz=nnz, error=" / ".join(errs)))
        return None


# --------------------------------------------------------------------------------------
def sh(cmd):
    try:
        return subprocess.run(
            cmd, shell=True, capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except Exception as ex:
        return f"(failed: {ex})"


def selftest():
    """Print environment facts and check 2:4 on a tiny case (first device call)."""
    print(sh("nvidia-smi"))
    print(
        "torch",
        torch.__version__,
        "cuda",
        torch.version.cuda,
        "device",
        torch.cuda.get_device_name(0),
    )
    try:
        import triton

        print("triton", triton.__version__)
    except Exception as ex:
        print("triton import failed", ex)
    cslt = getattr(torch.backends, "cusparselt", None)
    print(
        "cusparselt available:",
        cslt.is_available() if cslt else None,
        "version:",
        cslt.version() if cslt and cslt.is_available() else None,
    )
    from torch.sparse import SparseSemiStructuredTensor, to_sparse_semi_structured

    print("_FORCE_CUTLASS default:", SparseSemiStructuredTensor._FORCE_CUTLASS)
    A = torch.randn(128, 128, dtype=torch.float16, device="cuda")
    A = prune_2to4(A)
    B = torch.randn(128, 64, dtype=torch.float16, device="cuda")
    for force in (False, True):
        try:
            SparseSemiStructuredTensor._FORCE_CUTLASS = force
            As = to_sparse_semi_structured(A)
            y = torch.mm(As, B)
            print(
                f"2:4 force_cutlass={force}: class={type(As).__name__} rel_err="
                f"{rel_err(y, A.float() @ B.float()):.2e}"
            )
        except Exception as ex:
            print(f"2:4 force_cutlass={force}: FAILED {type(ex).__name__}: {ex}")


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--grid", default="full", choices=["full", "tiny"])
    p.add_argument("--kernels", default="dense,sparse24,bsr,csr")
    p.add_argument(
        "--groups", default="vit,convnext,square", help="shape groups to run (full grid)"
    )
    p.add_argument("--tag", default="", help="suffix for output file names")
    p.add_argument(
        "--no-adaptive-pad",
        action="store_true",
        help="use the fixed --pad-us spin instead of max(pad_us, 1.5*host_call+50us)",
    )
    p.add_argument("--reps", type=int, default=25)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument(
        "--min-reps-slow",
        type=int,
        default=5,
        help="fewest timed reps for cases slower than case-budget/reps",
    )
    p.add_argument("--case-budget", type=float, default=1.0, help="seconds of timed reps per case")
    p.add_argument(
        "--steady-max-s",
        type=float,
        default=0.005,
        help="only measure steady_s for cases faster than this",
    )
    p.add_argument("--pad-us", type=float, default=150.0)
    p.add_argument("--no-flush", action="store_true", help="do not flush L2 between reps")
    p.add_argument(
        "--profile",
        default="first",
        choices=["none", "first", "all"],
        help="record CUDA kernel names (first sparsity per path/block/shape)",
    )
    p.add_argument("--no-cslt-search", dest="cslt_search", action="store_false")
    p.add_argument(
        "--time-budget",
        type=float,
        default=1e9,
        help="seconds; remaining cases are written as skipped once exceeded",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--selftest", action="store_true")
    p.add_argument("--verbose-errors", action="store_true")
    args = p.parse_args()

    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    if not torch.cuda.is_available():
        sys.exit("CUDA not available")
    torch.manual_seed(args.seed)
    from torch.sparse import SparseSemiStructuredTensor

    force_cutlass_default = SparseSemiStructuredTensor._FORCE_CUTLASS
    if args.selftest:
        selftest()
        SparseSemiStructuredTensor._FORCE_CUTLASS = force_cutlass_default
    props = torch.cuda.get_device_properties(0)
    cslt = getattr(torch.backends, "cusparselt", None)
    try:
        import triton

        triton_v = triton.__version__
    except Exception:
        triton_v = None
    meta = dict(
        script="benchmarks/gpu/measure_gemm.py",
        command_line=" ".join(
            shlex.quote(x) for x in [os.path.basename(sys.executable)] + sys.argv
        ),
        argv=sys.argv,
        args=vars(args),
        date_utc=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        hostname=socket.gethostname(),
        platform=platform.platform(),
        python=sys.version.split()[0],
        gpu_name=torch.cuda.get_device_name(0),
        sm_count=props.multi_processor_count,
        l2_cache_bytes=getattr(props, "L2_cache_size", None),
        total_memory_bytes=props.total_memory,
        compute_capability=f"{props.major}.{props.minor}",
        nvidia_smi_query=sh(
            "nvidia-smi --query-gpu=name,driver_version,pci.bus_id,memory.total,"
            "clocks.max.sm,clocks.max.mem,power.limit,clocks.sm,clocks.mem,"
            "temperature.gpu --format=csv"
        ),
        driver_version=sh("nvidia-smi --query-gpu=driver_version --format=csv,noheader"),
        torch_version=torch.__version__,
        torch_cuda_version=torch.version.cuda,
        cudnn_version=torch.backends.cudnn.version(),
        cusparselt_available=(cslt.is_available() if cslt else None),
        cusparselt_version=(cslt.version() if cslt and cslt.is_available() else None),
        triton_version=triton_v,
        semi_structured_force_cutlass_default=force_cutlass_default,
        allow_fp16_reduced_precision_reduction=torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        spec_peak_flops=SPEC_PEAK_FLOPS,
        spec_dram_bw=SPEC_DRAM_BW,
        timing=(
            "CUDA events around each call; median/min over reps after warm-ups; "
            + (
                "L2 flushed (read sweep of >=4x L2) before every timed call"
                if not args.no_flush
                else "no L2 flush"
            )
            + "; GPU spin (torch.cuda._sleep) of pad_us before every timed call, pad_us = "
            "max(--pad-us, 1.5*host_call_s+50us) so host dispatch overhead is hidden; "
            "steady_s = mean of back-to-back calls, warm L2, includes host overhead when host-bound; "
            "prof_kernel_s = torch.profiler sum of CUDA kernel/memset/memcpy durations per call "
            "(warm L2, back-to-back; only for profiled rows)"
        ),
        sol_model=(
            "time_sol = max(2*nnz*N/P, bytes/BW); bytes = e*nnz + index_bytes + e*(K*N+M*N); "
            "e = element bytes; index_bytes: dense 0, 2:4 nnz*2/8, BSR nnzb*4+(M/b+1)*4, "
            "CSR nnz*4+(M+1)*4; P=989.4e12, BW=3.35e12 (spec) or measured calib values"
        ),
    )
    json_path = os.path.join(args.out, f"gemm_measurements{args.tag}.json")
    with open(json_path, "w") as f:
        json.dump(dict(meta, status="running"), f, indent=2)

    bench = Bench(args)
    bench.force_cutlass_default = force_cutlass_default
    meta["timer_sleep_cycles_per_s"] = bench.timer.cycles_per_s
    bench.calibrate()
    grid = [
        s
        for s in build_grid(args.grid)
        if args.grid == "tiny" or s["group"] in args.groups.split(",")
    ]
    for i, shp in enumerate(grid):
        print(f"=== shape {i + 1}/{len(grid)}: {shp}", flush=True)
        try:
            bench.run_shape(shp)
        except Exception as ex:  # keep going; record
            traceback.print_exc()
            bench.emit(
                dict(
                    kernel="shape_failed",
                    group=shp["group"],
                    layer=shp["layer"],
                    M=shp["M"],
                    K=shp["K"],
                    N=shp["N"],
                    error=f"{type(ex).__name__}: {ex}",
                )
            )
            torch.cuda.empty_cache()
    bench.fh.close()

    wall = time.time() - t0
    meta.update(
        status="done",
        wall_time_s=round(wall, 1),
        n_rows=len(bench.rows),
        n_error_rows=bench.n_err,
        measured_copy_bw_bytes_per_s=bench.meas_bw,
        measured_dense_fp16_flops=bench.meas_peak,
        nvidia_smi_query_end=sh(
            "nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv"
        ),
        csv=os.path.basename(bench.out_csv),
    )
    with open(json_path, "w") as f:
        json.dump(meta, f, indent=2)
    print(
        f"done: {len(bench.rows)} rows ({bench.n_err} with error) in {wall:.1f}s; "
        f"copy BW {bench.meas_bw / 1e12:.3f} TB/s, dense fp16 {bench.meas_peak / 1e12:.1f} TFLOP/s"
    )


if __name__ == "__main__":
    main()
