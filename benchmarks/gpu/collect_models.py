"""Part ``models``: DeiT-S, ViT-B and ConvNeXt-T (timm, random weights, eval mode), dense and 2:4,
at batch 1, 8 and 128: whole-forward latency rows for dse's kernel dataset, and a per-op profile
(:data:`PROFILE_SCHEMA`) in which the transposes, copies and padding torch runs around
``_cslt_sparse_mm`` are visible beside the sparse GEMM itself.

* **Dense**: ``timm.create_model(name, pretrained=False)``, fp16 on a GPU (fp32 on the CPU),
  channels-last for ConvNeXt, timm's own attention (fused where timm fuses it).
* **2:4**: every ``nn.Linear`` pruned by the trainer's 2:4 rule and converted with
  ``torch.sparse.to_sparse_semi_structured`` (cuSPARSELt); a linear torch refuses stays dense,
  with the reason in the row's ``note`` (e.g. the 1000-class heads, whose 1000 rows are not a
  multiple of 16); convolutions stay dense. The output is checked once against the same model
  with the converted layers' pruned weights kept dense (``rel_err``). A variant in which no
  linear converts (every one on the CPU, where torch has no semi-structured kernels) is
  recorded as not run, with the reason, never timed as if it were sparse.
* **Latency rows** (family ``model``, cache ``warm``): ``torch_eager`` (each forward timed from
  an idle device, host dispatch included) and, on CUDA, ``torch_cudagraph`` (one captured
  forward replayed: GPU time without launch cost). Their speed of light is dse's unfused
  (DRAM) bound of the model's shipped trace with exactly the converted linears priced 2:4, as
  ``dse measure`` prices its whole-model rows; ``n`` holds the batch (a whole model has no one
  GEMM N).
* **Profile rows**: a few eager forwards under ``torch.profiler`` (``record_shapes``), one row per
  (level, name, parent operator, input shapes), per forward.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field

from dse.measure.measure import blank_row, timing_row

from .collect_items import Item
from .collect_rows import Bench, error_text

__all__ = ["PROFILE_SCHEMA", "ModelRun", "built", "items", "model_input", "profile_rows", "run"]

MODELS = ("deit_small_patch16_224", "vit_base_patch16_224", "convnext_tiny")
#: Part ``models_more``: the validated models the ``models`` part has no profiles of (ResNet-50:
#: 23% too fast at batch 128; Swin-T: 68% too slow at batch 1).
MORE_MODELS = ("resnet50", "swin_tiny_patch4_window7_224")
MORE_SMOKE_MODELS = ("test_resnet",)
#: Models run channels-last, as the whole-model measurements dse is validated against ran them
#: (``results/models_measurements.csv``): the convolutional networks.
CHANNELS_LAST = ("convnext", "resnet", "test_convnext", "test_resnet")
BATCHES = (1, 8, 128)
VARIANTS = ("dense", "2:4")
SMOKE_MODELS, SMOKE_BATCHES = ("test_vit", "test_convnext"), (1,)
#: Forwards under the profiler (their mean is recorded).
PROFILED_FORWARDS = {False: 3, True: 1}

#: Column -> (pandas dtype, meaning and unit) of the per-op profile table.
PROFILE_SCHEMA: dict[str, tuple[str, str]] = {
    "run_id": ("string", "the run (as in the kernel dataset)"),
    "date": ("string", "ISO date and time the run started"),
    "device": ("string", "cuda | cpu"),
    "device_name": ("string", "GPU name or CPU model"),
    "model": ("string", "timm model name"),
    "variant": ("string", "dense | 2:4 (linears torch converts run cuSPARSELt)"),
    "batch": ("int64", "batch size"),
    "dtype": ("string", "fp16 (GPU) | fp32 (CPU)"),
    "level": ("string", "op (a dispatched operator, aten:: and other namespaces) | kernel (a GPU "
              "kernel, under the operator that launched it) | runtime (a CUDA runtime call) | "
              "other (annotations)"),
    "name": ("string", "operator, kernel or runtime call name"),
    "parent": ("string", "the operator this one ran inside ('' at top level); for a kernel, "
               "the operator that launched it"),
    "depth": ("int64", "operators above this one (0 at top level; a kernel: its operator's + 1)"),
    "input_shapes": ("string", "JSON list of the operator's input shapes (a kernel: its "
                     "operator's)"),
    "calls": ("float64", "calls per forward pass"),
    "forwards": ("int64", "forward passes profiled (every figure is their mean)"),
    "self_device_s": ("float64", "GPU seconds per forward of the kernels this operator launched "
                      "itself (a kernel: its own); NaN on the CPU"),
    "device_s": ("float64", "GPU seconds per forward including the operators inside it; NaN on "
                 "the CPU"),
    "self_cpu_s": ("float64", "host seconds per forward in this operator, not in those inside"),
    "cpu_s": ("float64", "host seconds per forward including the operators inside it"),
    "kernels": ("string", "the GPU kernels this operator launched itself, ' | '-joined"),
    "order": ("int64", "rank of the first appearance in the forward (sort by it to read the "
              "op sequence, e.g. what surrounds _cslt_sparse_mm)"),
    "note": ("string", "the variant's conversion note"),
}


@dataclass(frozen=True)
class ModelRun:
    model: str
    variant: str  #: dense | 2:4
    batch: int


def items(smoke: bool = False, models: tuple[str, ...] = MODELS,
          smoke_models: tuple[str, ...] = SMOKE_MODELS) -> list[Item]:
    models, batches = (smoke_models, SMOKE_BATCHES) if smoke else (models, BATCHES)
    return [Item(f"{m}-{'dense' if v == 'dense' else 'sparse24'}-b{b}", ModelRun(m, v, b))
            for m in models for v in VARIANTS for b in batches]


def more_items(smoke: bool = False) -> list[Item]:
    return items(smoke, MORE_MODELS, MORE_SMOKE_MODELS)


@dataclass
class Built:
    """A model ready to run, with what its conversion did."""

    module: object
    input_size: tuple[int, ...]
    channels_last: bool
    converted: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)  #: (linear, reason)
    linears: int = 0
    params: int = 0
    rel_err: float = float("nan")
    note: str = ""


def _dense(bench: Bench, name: str) -> Built:
    import timm

    torch = bench.torch
    module = timm.create_model(name, pretrained=False).eval()
    channels_last = name.startswith(CHANNELS_LAST)
    module = module.to(bench.device, bench.torch_dtype)
    if channels_last:
        module = module.to(memory_format=torch.channels_last)
    size = tuple(module.pretrained_cfg.get("input_size", (3, 224, 224)))
    linears = sum(isinstance(m, torch.nn.Linear) for m in module.modules())
    attention = [bool(m.fused_attn) for m in module.modules() if hasattr(m, "fused_attn")]
    notes = [f"input {'x'.join(map(str, size))}"]
    if channels_last:
        notes.append("channels_last")
    if attention:
        notes.append(f"attention fused (F.scaled_dot_product_attention) in {sum(attention)} of "
                     f"{len(attention)} attention modules")
    return Built(module, size, channels_last, linears=linears,
                 params=sum(p.numel() for p in module.parameters()), note="; ".join(notes))


def _refusals(refused: list[tuple[str, str]]) -> str:
    """Refused linears grouped by reason: ``head (1000x384): ValueError: ...``."""
    by_reason: dict[str, list[str]] = {}
    for layer, reason in refused:
        by_reason.setdefault(reason, []).append(layer)
    return "; ".join(f"{', '.join(layers[:6])}{' ...' if len(layers) > 6 else ''}: {reason}"
                     for reason, layers in by_reason.items())


def _sparse(bench: Bench, dense: Built) -> Built | Exception:
    """The dense model with every linear torch accepts converted to 2:4 (module docstring);
    the exception that makes the variant unusable otherwise."""
    import formats
    from formats.masks import PrunableWeight, global_masks

    torch = bench.torch
    fmt = formats.parse("2:4")
    model = copy.deepcopy(dense.module)
    reference = copy.deepcopy(dense.module)
    out = Built(model, dense.input_size, dense.channels_last, linears=dense.linears)
    try:
        from torch.sparse import SparseSemiStructuredTensor, to_sparse_semi_structured

        SparseSemiStructuredTensor._FORCE_CUTLASS = False
    except ImportError as exc:
        return exc
    with torch.no_grad():
        for name, module in model.named_modules():
            if not isinstance(module, torch.nn.Linear):
                continue
            shape = f"{module.out_features}x{module.in_features}"
            weight = module.weight.detach()
            if not bool(fmt.applies_to(*weight.shape)):
                out.refused.append((f"{name} ({shape})", "K is not a multiple of 4"))
                continue
            pruned = weight * global_masks({name: PrunableWeight(weight)}, fmt)[name]
            try:
                sparse = to_sparse_semi_structured(pruned)
            except Exception as exc:  # torch's shape, dtype and device rules: recorded
                out.refused.append((f"{name} ({shape})", error_text(exc)))
                continue
            module.weight = torch.nn.Parameter(sparse, requires_grad=False)
            reference.get_submodule(name).weight.copy_(pruned)
            out.converted.append(name)
    if not out.converted:
        first = out.refused[0][1] if out.refused else "the model has no linear"
        return RuntimeError(f"no linear could be converted to 2:4 ({len(out.refused)} "
                            f"refused; {first})")
    x = model_input(bench, out, 1)
    notes = [dense.note, f"linears converted to 2:4: {len(out.converted)} of {out.linears}"]
    try:
        with torch.inference_mode():
            got = model(x)
    except Exception as exc:  # e.g. a non-contiguous activation: retry with contiguous inputs
        notes.append(f"inputs made contiguous before each converted linear after "
                     f"{error_text(exc)}")
        for name in out.converted:
            model.get_submodule(name).register_forward_pre_hook(
                lambda _m, args: tuple(a.contiguous() for a in args))
        try:
            with torch.inference_mode():
                got = model(x)
        except Exception as again:
            return again
    with torch.inference_mode():
        want = reference(x)
    den = float(want.float().norm())
    out.rel_err = float((got.float() - want.float()).norm()) / den if den > 0 else 0.0
    out.params = dense.params - sum(
        dense.module.get_submodule(n).weight.numel() // 2 for n in out.converted)
    if out.refused:
        notes.append(f"not converted (left dense): {_refusals(out.refused)}")
    notes.append("convolutions dense")
    out.note = "; ".join(notes)
    del reference
    return out


def built(bench: Bench, model: str, variant: str) -> Built | Exception:
    """The model in ``variant``, built once per run of consecutive items of that model."""
    cache = bench.scratch.setdefault("models", {})
    if cache.get("name") != model:
        cache.clear()
        if bench.device == "cuda":
            bench.torch.cuda.empty_cache()
        cache.update({"name": model, "dense": _dense(bench, model)})
    if variant not in cache:
        cache[variant] = _sparse(bench, cache["dense"])
    return cache[variant]


def model_input(bench: Bench, model: Built, batch: int):
    torch = bench.torch
    x = torch.randn(batch, *model.input_size, generator=bench.generator(3), device=bench.device,
                    dtype=bench.torch_dtype)
    return x.contiguous(memory_format=torch.channels_last) if model.channels_last else x


def _graphed(torch, forward):
    """``forward`` captured once in a CUDA graph: its replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            forward()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward()
    torch.cuda.synchronize()
    return graph


def _sol(bench: Bench, run: ModelRun, model: Built | None) -> dict:
    """dse's unfused bound of the model's shipped trace, with exactly the converted linears
    priced 2:4; {} when there is no spec or no shipped trace."""
    import workloads

    if bench.hw is None or run.model not in workloads.trace_names():
        return {}
    from dse.roofline import evaluate

    trace = workloads.load_trace(run.model)
    if run.variant != "dense":
        converted = set(model.converted)
        records = trace.to_json()["ops"]
        for r in records:
            r["prunable"] = bool(r["prunable"] and r["kind"] == "linear"
                                 and r["name"] in converted)
        trace = workloads.Trace.from_records(trace.model, trace.input_shape, records,
                                             provenance=dict(trace.provenance))
    table = evaluate(trace, bench.hw, run.variant, batches=run.batch, fusion="unfused",
                     scope="all", numerics=bench.numerics)
    sol = table[table["format"] == run.variant].iloc[0]
    return {"hw": bench.hw.name, "sol_s": float(sol["latency_s"]),
            "sol_bound": str(sol["bound"]), "flops": float(sol["flops"]),
            "bytes": float(sol["dram_bytes"])}


def _profile(bench: Bench, forward, forwards: int, fields: dict) -> list[dict]:
    """Per-op profile rows of ``forwards`` forward passes (:data:`PROFILE_SCHEMA`)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = bench.device == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    bench.clock.sync()
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(forwards):
            forward()
        bench.clock.sync()
    return profile_rows(prof.events(), forwards, cuda, fields)


def profile_rows(events, forwards: int, cuda: bool, fields: dict) -> list[dict]:
    """Profile rows from ``torch.profiler`` events (``FunctionEvent``: name, cpu_parent,
    input_shapes, host and device times in microseconds, the kernels it launched): one row per
    (level, name, parent, input shapes), totals divided by ``forwards``, ``fields`` added."""
    events = [e for e in events if str(e.device_type).endswith("CPU")]
    events.sort(key=lambda e: e.time_range.start)
    table: dict[tuple, dict] = {}

    def entry(level, name, parent, depth, shapes):
        key = (level, name, parent, shapes)
        if key not in table:
            table[key] = {"level": level, "name": name, "parent": parent, "depth": depth,
                          "input_shapes": shapes, "calls": 0.0, "self_device_s": 0.0,
                          "device_s": 0.0, "self_cpu_s": 0.0, "cpu_s": 0.0, "kernels": [],
                          "order": len(table)}
        return table[key]

    for e in events:
        depth, up = 0, e.cpu_parent
        while up is not None:
            depth, up = depth + 1, up.cpu_parent
        level = "op" if "::" in e.name else "runtime" if e.name.startswith("cu") else "other"
        shapes = json.dumps(e.input_shapes, default=str) if e.input_shapes else ""
        parent = e.cpu_parent.name if e.cpu_parent is not None else ""
        row = entry(level, e.name, parent, depth, shapes)
        row["calls"] += 1
        row["self_cpu_s"] += e.self_cpu_time_total * 1e-6
        row["cpu_s"] += e.cpu_time_total * 1e-6
        if cuda:
            row["self_device_s"] += e.self_device_time_total * 1e-6
            row["device_s"] += e.device_time_total * 1e-6
        for k in e.kernels:
            if k.name not in row["kernels"]:
                row["kernels"].append(k.name)
            krow = entry("kernel", k.name, e.name, depth + 1, shapes)
            krow["calls"] += 1
            krow["self_device_s"] += k.duration * 1e-6
            krow["device_s"] += k.duration * 1e-6
    rows = []
    for rank, r in enumerate(sorted(table.values(), key=lambda r: r["order"])):
        per = {c: r[c] / forwards for c in ("calls", "self_device_s", "device_s", "self_cpu_s",
                                            "cpu_s")}
        if not cuda:
            per["self_device_s"] = per["device_s"] = float("nan")
        rows.append({**fields, **r, **per, "order": rank, "forwards": forwards,
                     "kernels": " | ".join(r["kernels"])[:1000]})
    return rows


def run(item: Item, bench: Bench) -> dict[str, list[dict]]:
    from dse.measure.timing import TimingMethod

    r: ModelRun = item.config
    torch = bench.torch
    model = built(bench, r.model, r.variant)
    sparse = r.variant != "dense"
    fields = {"source": "benchmark", "why": f"collect models: {r.model} {r.variant} batch "
              f"{r.batch}", "model": r.model, "op": "(whole model)", "kind": "model",
              "family": "model", "format": r.variant, "sparsity": 0.5 if sparse else 0.0,
              "block": 4 if sparse else 0, "batch": r.batch, "n": r.batch, "groups": 1,
              "dtype": bench.dtype, "cache": "warm"}
    impls = ("torch_eager", "torch_cudagraph") if bench.device == "cuda" else ("torch_eager",)
    if isinstance(model, Exception):
        row = blank_row(bench.base)
        row.update(fields, implementation="torch_eager",
                   error=f"2:4 variant not run: {error_text(model)}"[:300])
        return {"kernels": [row], "profiles": []}
    x = model_input(bench, model, r.batch)
    module = model.module

    def forward():
        with torch.inference_mode():
            return module(x)

    method = bench.clock.method if bench.smoke else TimingMethod(
        warmup=3, min_repeats=10, max_repeats=25, window=3, rel_tol=0.02, max_time_s=3.0)
    kernel = ("timm eager forward, linears as cuSPARSELt 2:4 (to_sparse_semi_structured)"
              if sparse else "timm eager forward (dense)")
    common = dict(fields, nnz=model.params, rel_err=model.rel_err, note=model.note,
                  **_sol(bench, r, model))
    rows = []
    for impl in impls:
        row = blank_row(bench.base)
        row.update(common, implementation=impl)
        try:
            if impl == "torch_cudagraph":
                graph = _graphed(torch, forward)
                call, what = graph.replay, kernel.replace("eager forward", "forward as a CUDA "
                                                          "graph")
            else:
                graph, call, what = None, forward, kernel
            timing = bench.clock.time_latency(call, method, bench.threads)
            row.update(timing_row(timing))
            row.update({"kernel": what, "steady_s": bench.clock.steady_s(call)})
            if math.isfinite(row["sol_s"]):
                row["sol_fraction"] = row["sol_s"] / timing.median_s
            del graph
        except Exception as exc:  # capture or run refused (out of memory, an op graphs refuse)
            bench.clock.sync()
            row["error"] = error_text(exc)
        rows.append(row)
    profile_fields = {**{c: bench.base[c] for c in ("run_id", "date", "device", "device_name")},
                      "model": r.model, "variant": r.variant, "batch": r.batch,
                      "dtype": bench.dtype, "note": model.note}
    profiles = _profile(bench, forward, PROFILED_FORWARDS[bench.smoke], profile_fields)
    if bench.device == "cuda":
        torch.cuda.empty_cache()
    return {"kernels": rows, "profiles": profiles}


def finish(bench: Bench) -> None:
    bench.scratch.pop("models", None)
    if bench.device == "cuda":
        bench.torch.cuda.empty_cache()
