#!/usr/bin/env python3
# ruff: noqa: E501, B023, F821
# (after the GPU run only this comment, `ruff format` and a wording fix in the docstring's L2 sentence: the code
#  is unchanged. The lambdas are called within the loop iteration that defines them; F821 is a false positive from `del`.)
"""End-to-end inference latency of timm models on a CUDA GPU (standalone: torch + timm, no dse).

For each model (random weights, ``timm.create_model(name, pretrained=False)``, ``eval().half().cuda()``,
channels_last for the CNNs) at its default input size and each batch, one row per variant:

  dense_eager          the model as users run it (timm's fused attention left as timm sets it)
  dense_cudagraph      the same eager forward captured once in a CUDA graph and replayed: GPU time
                       with the host's per-kernel launch cost removed (extra, not a deployment mode)
  sparse24_eager       every nn.Linear with in_features % 64 == 0 and out_features % 64 == 0 pruned to
                       2:4 (2 largest |w| of each 4 along in_features) and converted with
                       torch.sparse.to_sparse_semi_structured (cuSPARSELt); convolutions stay dense
  sparse24_cudagraph   that sparse model in a CUDA graph (extra)
  dense_compiled       torch.compile(mode="max-autotune-no-cudagraphs", dynamic=False), run last,
                       batch-major (largest batch of every model first), only while --time-budget lasts

Timing: under torch.inference_mode, ``--warmup`` untimed calls, then ``--reps`` timed calls, each
``torch.cuda.synchronize(); start.record(); forward; end.record(); synchronize()`` (CUDA events):
the latency one call sees from an idle GPU, host launch overhead included (for eager this is what a
user gets; the cudagraph rows show the GPU-side time). No L2 flush between reps (fp16 weights: DeiT-S 44 MB and
ResNet-50 51 MB fit in the H100's 50 MiB L2, the others do not). ``steady_s``: mean
per call of ``--steady-reps`` back-to-back calls (throughput-style; host and GPU overlap).

Run:  python3 benchmarks/gpu/measure_models.py --out DIR [--models a,b] [--batches 1,8,32,128]
          [--variants dense_eager,dense_cudagraph,sparse24_eager,sparse24_cudagraph,dense_compiled]
          [--time-budget S]
Writes DIR/models_measurements{tag}.csv (one row per model/variant/batch, appended as it goes)
and DIR/models_measurements{tag}.json (provenance; status "running" until the end).
"""

from __future__ import annotations

import argparse
import copy
import csv
import datetime as _dt
import json
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
import torch.nn as nn

DEFAULT_MODELS = (
    "convnext_tiny",
    "swin_tiny_patch4_window7_224",
    "resnet50",
    "deit_small_patch16_224",
    "vit_base_patch16_224",
)
CNN_MODELS = {"convnext_tiny", "resnet50"}  # run in channels_last
VARIANTS = (
    "dense_eager",
    "dense_cudagraph",
    "sparse24_eager",
    "sparse24_cudagraph",
    "dense_compiled",
)
COLUMNS = [
    "model",
    "variant",
    "batch",
    "median_s",
    "min_s",
    "p90_s",
    "reps",
    "steady_s",
    "compile_s",
    "converted_layers",
    "linear_layers",
    "rel_err",
    "fused_attn_modules",
    "channels_last",
    "img_size",
    "note",
    "error",
]


def sh(cmd):
    try:
        return subprocess.run(
            cmd, shell=True, capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except Exception as ex:  # pragma: no cover - device only
        return f"(failed: {ex})"


def prune_2to4(W):
    """Keep the 2 largest-magnitude of every 4 consecutive elements along K (dim 1 of W[M x K])."""
    M, K = W.shape
    g = W.reshape(M, K // 4, 4)
    idx = g.abs().argsort(dim=-1, descending=True)[..., :2]
    mask = torch.zeros_like(g, dtype=torch.bool).scatter_(-1, idx, True)
    return (g * mask).reshape(M, K)


def rel_err(out, ref):
    out, ref = out.float(), ref.float()
    den = ref.norm().item()
    return (out - ref).norm().item() / den if den > 0 else float("nan")


def time_call(fn, reps, warmup, steady_reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e-3)
    steady = float("nan")
    if steady_reps > 0:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(steady_reps):
            fn()
        e.record()
        torch.cuda.synchronize()
        steady = s.elapsed_time(e) * 1e-3 / steady_reps
    ts.sort()
    return dict(
        median_s=statistics.median(ts),
        min_s=ts[0],
        p90_s=ts[min(len(ts) - 1, int(round(0.9 * (len(ts) - 1))))],
        reps=len(ts),
        steady_s=steady,
    )


def graphed(model, x):
    """Capture model(x) in a CUDA graph; returns a replay function (x is the static input)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        model(x)
    torch.cuda.synchronize()
    return g.replay, g


def sparsify_linears(model, contiguous_hook=False):
    """Prune + convert eligible nn.Linear weights in place. Returns (converted, total linears)."""
    from torch.sparse import to_sparse_semi_structured

    n_conv, n_lin = 0, 0
    for mod in model.modules():
        if isinstance(mod, nn.Linear):
            n_lin += 1
            if mod.in_features % 64 == 0 and mod.out_features % 64 == 0:
                w = prune_2to4(mod.weight.detach())
                mod.weight = nn.Parameter(to_sparse_semi_structured(w), requires_grad=False)
                if contiguous_hook:
                    mod.register_forward_pre_hook(lambda m, a: tuple(t.contiguous() for t in a))
                n_conv += 1
    return n_conv, n_lin


def prune_linears_dense(model):
    """Same 2:4 masks as sparsify_linears, kept as dense weights (the correctness reference)."""
    for mod in model.modules():
        if isinstance(mod, nn.Linear) and mod.in_features % 64 == 0 and mod.out_features % 64 == 0:
            mod.weight.data.copy_(prune_2to4(mod.weight.detach()))


class Runner:
    def __init__(self, args, out_csv):
        self.args = args
        self.t0 = time.time()
        self.fh = open(out_csv, "w", newline="")
        self.w = csv.DictWriter(self.fh, fieldnames=COLUMNS)
        self.w.writeheader()
        self.fh.flush()
        self.n_rows = 0
        self.n_err = 0
        self.models = {}  # name -> (model, info)
        self.compile_times = []

    def elapsed(self):
        return time.time() - self.t0

    def emit(self, row):
        full = {c: row.get(c, "") for c in COLUMNS}
        for c in ("median_s", "min_s", "p90_s", "steady_s", "compile_s", "rel_err"):
            if isinstance(full[c], float):
                full[c] = f"{full[c]:.7g}"
        self.w.writerow(full)
        self.fh.flush()
        self.n_rows += 1
        if full["error"]:
            self.n_err += 1
        msg = (
            f"[{self.elapsed():6.1f}s] {full['model']:<30} {full['variant']:<19} b={full['batch']:<4} "
            f"median={full['median_s']} min={full['min_s']} steady={full['steady_s']}"
        )
        if full["compile_s"]:
            msg += f" compile={full['compile_s']}s"
        if full["converted_layers"] != "":
            msg += f" conv={full['converted_layers']}/{full['linear_layers']} rel_err={full['rel_err']}"
        if full["note"]:
            msg += f" note={full['note']}"
        if full["error"]:
            msg += f" ERROR={full['error'][:200]}"
        print(msg, flush=True)

    def inp(self, name, b):
        info = self.models[name][1]
        x = torch.randn(b, *info["input_size"], dtype=torch.float16, device="cuda")
        if info["channels_last"]:
            x = x.contiguous(memory_format=torch.channels_last)
        return x

    def base(self, name, variant, b):
        info = self.models[name][1]
        return dict(
            model=name,
            variant=variant,
            batch=b,
            fused_attn_modules=info["fused_attn_modules"],
            channels_last=info["channels_last"],
            img_size=info["input_size"][-1],
        )

    def create(self, name):
        import timm

        torch.manual_seed(self.args.seed)
        m = timm.create_model(name, pretrained=False)
        m = m.eval().half().cuda()
        cl = name in CNN_MODELS
        if cl:
            m = m.to(memory_format=torch.channels_last)
        input_size = tuple(m.pretrained_cfg.get("input_size", (3, 224, 224)))
        fused = sum(1 for mod in m.modules() if getattr(mod, "fused_attn", False) is True)
        n_attn = sum(1 for mod in m.modules() if hasattr(mod, "fused_attn"))
        info = dict(
            input_size=input_size,
            channels_last=cl,
            fused_attn_modules=f"{fused}/{n_attn}",
            params=sum(p.numel() for p in m.parameters()),
        )
        self.models[name] = (m, info)
        return m, info

    def measure(self, name, variant, fn_of_x, batches, extra=None):
        for b in batches:
            row = self.base(name, variant, b)
            row.update(extra or {})
            try:
                x = self.inp(name, b)
                with torch.inference_mode():
                    fn = fn_of_x(x)
                    row.update(
                        time_call(fn, self.args.reps, self.args.warmup, self.args.steady_reps)
                    )
                del fn, x
            except Exception as ex:
                traceback.print_exc()
                row["error"] = f"{type(ex).__name__}: {ex}"[:300].replace("\n", " ")
            self.emit(row)
            torch.cuda.empty_cache()

    def run_model(self, name):
        a = self.args
        variants = a.variants
        batches = a.batches
        try:
            m, info = self.create(name)
        except Exception as ex:
            traceback.print_exc()
            for v in variants:
                for b in batches:
                    self.emit(
                        dict(
                            model=name,
                            variant=v,
                            batch=b,
                            error=f"create: {type(ex).__name__}: {ex}"[:300],
                        )
                    )
            return
        print(f"=== {name}: {info}", flush=True)
        if "dense_eager" in variants:
            self.measure(name, "dense_eager", lambda x: lambda: m(x), batches)
        if "dense_cudagraph" in variants:
            self.measure(name, "dense_cudagraph", lambda x: graphed(m, x)[0], batches)
        if "sparse24_eager" in variants or "sparse24_cudagraph" in variants:
            self.run_sparse(name, m, info)

    def run_sparse(self, name, m, info):
        a = self.args
        sv = [v for v in ("sparse24_eager", "sparse24_cudagraph") if v in a.variants]
        extra = {}
        sm = None
        try:
            # weights are copied/pruned/converted under no_grad (not inference_mode, so they are
            # ordinary tensors); every forward runs under inference_mode
            with torch.no_grad():
                xb = self.inp(name, a.batches[0])
                ref_model = copy.deepcopy(m)
                prune_linears_dense(ref_model)
                with torch.inference_mode():
                    ref = ref_model(xb).float()
                del ref_model
                note = ""
                sm = copy.deepcopy(m)
                n_conv, n_lin = sparsify_linears(sm)
                try:
                    with torch.inference_mode():
                        out = sm(xb)
                except Exception as ex:  # e.g. a non-contiguous input to the semi-structured linear
                    note = f"retried with contiguous() pre-hooks after {type(ex).__name__}: {str(ex)[:120]}"
                    sm = copy.deepcopy(m)
                    n_conv, n_lin = sparsify_linears(sm, contiguous_hook=True)
                    with torch.inference_mode():
                        out = sm(xb)
                extra = dict(
                    converted_layers=n_conv,
                    linear_layers=n_lin,
                    rel_err=rel_err(out, ref),
                    note=note.replace("\n", " ").replace(",", ";"),
                )
                del xb, out, ref
        except Exception as ex:
            traceback.print_exc()
            err = f"convert: {type(ex).__name__}: {ex}"[:300].replace("\n", " ")
            for v in sv:
                for b in a.batches:
                    r = self.base(name, v, b)
                    r.update(extra, error=err)
                    self.emit(r)
            return
        if "sparse24_eager" in sv:
            self.measure(name, "sparse24_eager", lambda x: lambda: sm(x), a.batches, extra)
        if "sparse24_cudagraph" in sv:
            self.measure(name, "sparse24_cudagraph", lambda x: graphed(sm, x)[0], a.batches, extra)
        del sm
        torch.cuda.empty_cache()

    def run_compiled(self):
        """dense_compiled, batch-major (largest batch first), within the time budget."""
        a = self.args
        compiled = {}
        order = sorted(a.batches, reverse=True)
        if a.compile_batch_order:
            order = a.compile_batch_order
        for b in order:
            for name in a.models:
                if name not in self.models:
                    continue
                row = self.base(name, "dense_compiled", b)
                est = max(self.compile_times) if self.compile_times else 0.0
                if self.elapsed() + est * 1.2 + 5 > a.time_budget:
                    row["error"] = (
                        f"skipped: time budget ({a.time_budget:.0f}s; elapsed {self.elapsed():.0f}s, "
                        f"longest compile so far {est:.0f}s)"
                    )
                    self.emit(row)
                    continue
                try:
                    m = self.models[name][0]
                    if name not in compiled:
                        compiled[name] = torch.compile(m, mode=a.compile_mode, dynamic=False)
                    cm = compiled[name]
                    x = self.inp(name, b)
                    with torch.inference_mode():
                        torch.cuda.synchronize()
                        t = time.perf_counter()
                        cm(x)
                        torch.cuda.synchronize()
                        ct = time.perf_counter() - t
                        self.compile_times.append(ct)
                        row["compile_s"] = ct
                        row.update(time_call(lambda: cm(x), a.reps, a.warmup, a.steady_reps))
                    del x
                except Exception as ex:
                    traceback.print_exc()
                    row["error"] = f"{type(ex).__name__}: {ex}"[:300].replace("\n", " ")
                self.emit(row)
                torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", required=True)
    p.add_argument("--models", default=",".join(DEFAULT_MODELS))
    p.add_argument("--batches", default="1,8,32,128")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--reps", type=int, default=25)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steady-reps", type=int, default=10)
    p.add_argument("--compile-mode", default="max-autotune-no-cudagraphs")
    p.add_argument(
        "--compile-batch-order",
        default="",
        help="comma list: batches to compile, in this order (default: all, largest first)",
    )
    p.add_argument(
        "--time-budget",
        type=float,
        default=1e9,
        help="seconds: no compile is started that (by the longest compile so far) would end after it",
    )
    p.add_argument("--tag", default="")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    args.models = [s for s in args.models.split(",") if s]
    args.batches = [int(s) for s in args.batches.split(",") if s]
    args.variants = [s for s in args.variants.split(",") if s]
    args.compile_batch_order = [int(s) for s in args.compile_batch_order.split(",") if s]
    bad = [v for v in args.variants if v not in VARIANTS]
    if bad:
        sys.exit(f"unknown variants {bad}; choose from {VARIANTS}")

    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    if not torch.cuda.is_available():
        sys.exit("CUDA not available")
    import timm
    import timm.layers

    props = torch.cuda.get_device_properties(0)
    cslt = getattr(torch.backends, "cusparselt", None)
    try:
        import triton

        triton_v = triton.__version__
    except Exception:
        triton_v = None
    meta = dict(
        script="benchmarks/gpu/measure_models.py",
        command_line=" ".join(
            shlex.quote(x) for x in [os.path.basename(sys.executable)] + sys.argv
        ),
        argv=sys.argv,
        args={k: v for k, v in vars(args).items()},
        date_utc=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
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
        timm_version=timm.__version__,
        timm_use_fused_attn=timm.layers.use_fused_attn(),
        timm_use_fused_attn_experimental=timm.layers.use_fused_attn(experimental=True),
        cudnn_benchmark=torch.backends.cudnn.benchmark,
        timing=(
            "torch.inference_mode; warmup untimed calls, then reps timed calls, each "
            "synchronize; event; forward; event; synchronize (idle-GPU latency incl. host launch "
            "overhead; no L2 flush); steady_s = mean of steady_reps back-to-back calls"
        ),
    )
    json_path = os.path.join(args.out, f"models_measurements{args.tag}.json")
    csv_path = os.path.join(args.out, f"models_measurements{args.tag}.csv")
    with open(json_path, "w") as f:
        json.dump(dict(meta, status="running"), f, indent=2)

    r = Runner(args, csv_path)
    for name in args.models:
        r.run_model(name)
    meta["models"] = {n: dict(i) for n, (_, i) in r.models.items()}
    eager_done_s = r.elapsed()
    with open(json_path, "w") as f:
        json.dump(
            dict(meta, status="running (eager phase done)", eager_phase_s=eager_done_s),
            f,
            indent=2,
            default=str,
        )
    if "dense_compiled" in args.variants:
        r.run_compiled()
    r.fh.close()
    wall = time.time() - t0
    meta.update(
        status="done",
        wall_time_s=round(wall, 1),
        eager_phase_s=round(eager_done_s, 1),
        compile_times_s=[round(c, 1) for c in r.compile_times],
        n_rows=r.n_rows,
        n_error_rows=r.n_err,
        nvidia_smi_query_end=sh(
            "nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv"
        ),
        csv=os.path.basename(csv_path),
    )
    with open(json_path, "w") as f:
        json.dump(meta, f, indent=2, default=str)
    print(f"done: {r.n_rows} rows ({r.n_err} with error) in {wall:.1f}s", flush=True)


if __name__ == "__main__":
    main()
