"""Export a per-sample trace from a timm model, op by op, at the dispatch level.

Needs the torch/timm extra (``pip install 'sparsity-dse[export]'``); nothing else in the package
imports torch. The model is built on the meta device (no weights, no download) and run once at a
given batch under a ``TorchDispatchMode`` that sees every aten op after autograd's
decompositions:

* views and reshapes move no data: their outputs inherit their input's producer;
* ops whose inputs do not depend on the model input (the Swin relative-position bias gather, a
  mask built from buffers) are constants that inference precomputes: they are folded away, and the
  parameters they read are charged to the first op that uses their result;
* every other op becomes a row: module path, kind, GEMM dims (per group; ``n`` per sample;
  a convolution's ``kernel_size`` and ``stride`` beside them),
  parameter elements read (weights and bias), activation elements read and written, vector FLOPs
  and the ops whose outputs it reads (``"input"`` is the model input). Buffers (batch-norm running
  statistics, index tables) are not counted as traffic.

Per-sample values are the exported batch's divided by the batch, so any batch is a multiply.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .conv import read_positions
from .trace import MODEL_INPUT, SCHEMA, Trace, TraceError

__all__ = ["ExportError", "export_trace", "timm_model_names"]

#: Vector FLOPs per output element of elementwise ops, by aten name (in-place "_" stripped).
#: Transcendentals count as 4 (a polynomial or a few special-function instructions), GELU 8.
ELEMENTWISE_FLOPS = {
    "add": 1, "sub": 1, "mul": 1, "div": 1, "neg": 1, "abs": 1, "clamp": 1, "clamp_min": 1,
    "clamp_max": 1, "where": 1, "maximum": 1, "minimum": 1, "pow": 1, "sqrt": 1, "rsqrt": 1,
    "reciprocal": 1, "exp": 4, "log": 4, "masked_fill": 1, "fill": 0, "lerp": 2,
}
ACTIVATION_FLOPS = {
    "relu": 1, "relu6": 1, "leaky_relu": 2, "hardtanh": 1, "gelu": 8, "silu": 4, "sigmoid": 4,
    "tanh": 4, "hardswish": 4, "hardsigmoid": 3, "mish": 8, "elu": 4, "softplus": 4,
}
NORM_FLOPS = {  # per output element
    "native_layer_norm": 5, "native_group_norm": 5, "native_batch_norm": 4,
    "_native_batch_norm_legit_no_training": 4, "_native_batch_norm_legit": 4,
}
SOFTMAX_FLOPS = {"_softmax": 5, "_log_softmax": 5}
POOL_OPS = {"avg_pool2d", "max_pool2d", "max_pool2d_with_indices", "adaptive_avg_pool2d",
            "_adaptive_avg_pool2d", "adaptive_max_pool2d", "avg_pool1d", "max_pool1d"}
REDUCE_OPS = {"mean", "sum", "amax", "amin", "max", "min", "var_mean", "var", "std", "norm",
              "linalg_vector_norm"}
#: Views whose schema does not say so.
VIEW_OPS = {"_unsafe_view", "alias", "detach", "lift_fresh", "_reshape_alias"}
#: Ops whose extra outputs are autograd bookkeeping (saved statistics, pooling indices).
FIRST_OUTPUT_ONLY = set(NORM_FLOPS) | {"max_pool2d_with_indices", "adaptive_max_pool2d"}


class ExportError(TraceError):
    """A model, image size or checkpoint the exporter cannot use."""


def _require_torch():
    try:
        import timm
        import torch
    except ImportError:
        raise ExportError("exporting a trace needs torch and timm: "
                          "pip install 'sparsity-dse[export]'") from None
    return torch, timm


def timm_model_names() -> list[str]:
    """Every model name the installed timm can build."""
    _, timm = _require_torch()
    return timm.list_models()


@dataclass
class _Tensor:
    """What the exporter knows of a tensor: the op that wrote it and what it depends on."""

    producer: str | None  # op name, MODEL_INPUT, or None for constants
    dependent: bool  # derived from the model input
    params: frozenset[str] = frozenset()  # parameters a constant carries (folded ops)


CONSTANT = _Tensor(None, False)


@dataclass
class _Recorder:
    batch: int
    param_numel: dict[str, int]
    tensors: dict[int, _Tensor] = field(default_factory=dict)
    keep_alive: list = field(default_factory=list)
    module_stack: list[str] = field(default_factory=list)
    names: dict[str, int] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)

    def track(self, tensor, info: _Tensor) -> None:
        self.tensors[id(tensor)] = info
        self.keep_alive.append(tensor)  # ids stay unique while the trace is taken

    def info(self, tensor) -> _Tensor:
        return self.tensors.get(id(tensor), CONSTANT)

    def unique_name(self, base: str) -> str:
        count = self.names.get(base, 0)
        self.names[base] = count + 1
        return base if count == 0 else f"{base}_{count}"


def _tensors(tree: Any) -> list:
    import torch
    from torch.utils._pytree import tree_flatten

    return [leaf for leaf in tree_flatten(tree)[0] if isinstance(leaf, torch.Tensor)]


def _distinct(tensors: Iterable) -> list:
    seen, out = set(), []
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def _op_name(func) -> str:
    return func.overloadpacket.__name__


def _conv_input_read(args: tuple, out) -> int:
    """Elements of a convolution's input that its windows read (:func:`read_positions` per
    spatial axis)."""
    x, w = args[0], args[1]
    stride, padding, dilation = (list(args[i]) for i in (3, 4, 5))
    if bool(args[6]):  # transposed: every input element is scattered somewhere
        return x.numel()
    spatial = x.dim() - 2
    share = 1.0
    for d in range(spatial):
        size = x.shape[2 + d]
        read = read_positions(size, out.shape[2 + d], w.shape[2 + d], stride[d % len(stride)],
                              padding[d % len(padding)], dilation[d % len(dilation)])
        share *= read / size if size else 1.0
    return round(x.numel() * share)


def _gemm(name: str, args: tuple, recorder: _Recorder, out) -> dict[str, Any] | None:
    """GEMM fields of conv, mm, addmm and bmm; None for other ops. Totals over the batch."""
    if name == "convolution":
        w = args[1]
        groups = int(args[8])
        c_out = w.shape[0]
        k = int(math.prod(w.shape[1:]))
        n = out.numel() // c_out
        weight = not recorder.info(w).dependent
        # The window the GEMM view hides: the largest side and stride over the spatial axes.
        spatial = max(w.dim() - 2, 1)
        stride = [int(s) for s in args[3]] or [1]
        window = {"kernel_size": max((int(s) for s in w.shape[2:]), default=1),
                  "stride": max(stride[d % len(stride)] for d in range(spatial))}
        return {"kind": "conv", "m": c_out // groups, "k": k, "n": n, "groups": groups,
                "batch_axis": "n", "weight": w if weight else None, "window": window}
    if name in ("mm", "addmm"):
        a, b = (args[0], args[1]) if name == "mm" else (args[1], args[2])
        a_const, b_const = not recorder.info(a).dependent, not recorder.info(b).dependent
        if b_const and not a_const:  # X[n x k] . W^T[k x m]
            return {"kind": "linear", "m": b.shape[1], "k": b.shape[0], "n": a.shape[0],
                    "groups": 1, "batch_axis": "n", "weight": b}
        if a_const and not b_const:  # W[m x k] . X[k x n]
            return {"kind": "linear", "m": a.shape[0], "k": a.shape[1], "n": b.shape[1],
                    "groups": 1, "batch_axis": "n", "weight": a}
        return {"kind": "matmul", "m": a.shape[0], "k": a.shape[1], "n": b.shape[1],
                "groups": 1, "batch_axis": "n", "weight": None}
    if name in ("bmm", "baddbmm"):
        a, b = (args[0], args[1]) if name == "bmm" else (args[1], args[2])
        return {"kind": "matmul", "m": a.shape[1], "k": a.shape[2], "n": b.shape[2],
                "groups": a.shape[0], "batch_axis": "groups", "weight": None}
    return None


def _classify(name: str) -> tuple[str, int, str]:
    """(kind, vector FLOPs per element, what the count is per: "out" or "in")."""
    base = name[:-1] if name.endswith("_") and not name.startswith("_") else name
    if base in NORM_FLOPS:
        return "norm", NORM_FLOPS[base], "out"
    if base in SOFTMAX_FLOPS:
        return "softmax", SOFTMAX_FLOPS[base], "out"
    if base in ACTIVATION_FLOPS:
        return "activation", ACTIVATION_FLOPS[base], "out"
    if base in ELEMENTWISE_FLOPS:
        return "elementwise", ELEMENTWISE_FLOPS[base], "out"
    if base in POOL_OPS:
        return "pool", 1, "in"
    if base in REDUCE_OPS:
        return "reduce", 1, "in"
    return "other", 0, "out"  # data movement: copies, cat, pad, roll, index


def _make_mode(recorder: _Recorder):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Capture(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            _record(recorder, func, args, kwargs, out)
            return out

    return Capture()


def _record(recorder: _Recorder, func, args, kwargs, out) -> None:
    name = _op_name(func)
    inputs = _distinct(_tensors((args, kwargs)))
    outputs = _tensors(out)
    infos = [recorder.info(t) for t in inputs]
    dependent = [t for t, i in zip(inputs, infos, strict=True) if i.dependent]
    params = frozenset().union(*(i.params for i in infos)) if infos else frozenset()
    if func.is_view or name in VIEW_OPS or not dependent:
        # No data moves (a view), or a constant inference would precompute: fold it.
        source = recorder.info(dependent[0]) if dependent else None
        carried = _Tensor(source.producer, True) if source else _Tensor(None, False, params)
        for t in outputs:
            recorder.track(t, carried)
        return
    path = recorder.module_stack[-1] if recorder.module_stack else ""
    gemm = _gemm(name, args, recorder, outputs[0])
    if gemm is not None:
        kind = gemm["kind"]
        vector_flops = 0
        if name in ("addmm", "baddbmm") or (name == "convolution" and args[2] is not None):
            vector_flops = outputs[0].numel()  # the bias add
        base = path if kind in ("conv", "linear") and path else f"{path}.{name}".lstrip(".")
    else:
        kind, per_element, per = _classify(name)
        counted = outputs[:1] if name.rstrip("_") in FIRST_OUTPUT_ONLY else outputs
        elements = sum(t.numel() for t in (dependent if per == "in" else counted))
        vector_flops = per_element * elements
        base = f"{path}.{name.rstrip('_')}".lstrip(".")
    counted_out = outputs[:1] if name.rstrip("_") in FIRST_OUTPUT_ONLY else outputs
    op = recorder.unique_name(base)
    producers = list(dict.fromkeys(recorder.info(t).producer for t in dependent))
    weight_elems = sum(recorder.param_numel[p] for p in sorted(params))
    record = {
        "name": op, "kind": kind, "m": 0, "k": 0, "n": 0, "groups": 1,
        "weight_elems": weight_elems,
        "input_elems": sum(_conv_input_read(args, outputs[0]) if name == "convolution"
                           and t is args[0] else t.numel() for t in dependent),
        "output_elems": sum(t.numel() for t in counted_out),
        "vector_flops": float(vector_flops),
        "prunable": False,
        "producers": producers,
        "_batch_axis": "n",
    }
    if gemm is not None:
        record.update(m=int(gemm["m"]), k=int(gemm["k"]), n=int(gemm["n"]),
                      groups=int(gemm["groups"]), _batch_axis=gemm["batch_axis"])
        record.update(gemm.get("window", {}))  # a convolution's kernel_size and stride
        weight = gemm["weight"]
        record["prunable"] = weight is not None and bool(recorder.info(weight).params)
        if record["prunable"]:
            record["_weight_params"] = sorted(recorder.info(weight).params)
    recorder.records.append(record)
    for t in outputs:
        recorder.track(t, _Tensor(op, True))


def _sdpa_attention(torch, timm, model_name: str, img_size, num_classes) -> str | None:
    """``"N/M"``: of the model's M attention modules (those with timm's ``fused_attn``), the N
    that call ``F.scaled_dot_product_attention`` under timm's default settings; None when it
    has none. Built on the meta device, as the trace is."""
    try:
        model = _build(torch, timm, model_name, img_size, num_classes)
    except Exception:  # the traced build below says why, in one line
        return None
    flags = [bool(m.fused_attn) for m in model.modules() if hasattr(m, "fused_attn")]
    return f"{sum(flags)}/{len(flags)}" if flags else None


def _enter(recorder: _Recorder, path: str):
    def hook(module, args) -> None:  # a hook that returns a value would replace the input
        recorder.module_stack.append(path)
    return hook


def _leave(recorder: _Recorder):
    def hook(module, args, output) -> None:  # ... or the output
        recorder.module_stack.pop()
    return hook


def _per_sample(records: list[dict[str, Any]], batch: int, model: str) -> None:
    for record in records:
        columns = ["input_elems", "output_elems", "vector_flops"]
        columns.append("n" if record.pop("_batch_axis") == "n" else "groups")
        for column in columns:
            value = record[column]
            if value % batch:
                raise ExportError(f"{model}: op {record['name']} has {column} = {value}, not a "
                                  f"multiple of the batch {batch}; this op cannot be traced "
                                  "per sample (please report it)")
            record[column] = type(value)(value // batch)


def _build(torch, timm, model_name: str, img_size: int | None, num_classes: int | None):
    kwargs = {"pretrained": False}
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    if img_size is not None:
        kwargs["img_size"] = img_size
    with torch.device("meta"):
        try:
            return timm.create_model(model_name, **kwargs)
        except TypeError:
            if img_size is None:
                raise
            # Convolutional models take any size at run time and have no img_size argument.
            kwargs.pop("img_size")
            return timm.create_model(model_name, **kwargs)


#: Batch the model is traced at. At batch 1 PyTorch skips layout copies that every larger batch
#: makes (a size-1 dimension has no stride to fix), so tracing at 2 or more gives per-sample
#: figures that hold at any batch; at batch 1 they hold at batch 1 only.
TRACE_BATCH = 2


def export_trace(model_name: str, img_size: int | None = None, batch: int = TRACE_BATCH,
                 sparsity_from: str | None = None, num_classes: int | None = None,
                 command: str | None = None) -> Trace:
    """Trace ``model_name`` from timm at ``img_size`` (default: the model's own), per sample.

    ``batch`` is the batch the model is traced at (see ``TRACE_BATCH``); ``num_classes``
    replaces the classifier's width (a checkpoint fine-tuned on another dataset).
    ``sparsity_from`` is a state dict (loaded weights-only) whose zeros define each prunable
    layer's density, which the trace records so that a non-uniformly pruned model is evaluated
    as it is.
    """
    torch, timm = _require_torch()
    # timm's names with a pretrained tag (convnext_tiny.fb_in1k) name a model too; the tag picks
    # its pretrained config (e.g. the input size), never weights (built on the meta device).
    if not timm.is_model(model_name):
        close = difflib.get_close_matches(model_name, timm.list_models(), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ExportError(f"unknown timm model {model_name!r}{hint}")
    if img_size is not None and img_size < 1:
        raise ExportError(f"--img-size {img_size}: must be a positive number of pixels")
    if batch < 1:
        raise ExportError(f"batch {batch}: must be at least 1")
    # What the model runs by timm's default: how many attention modules call
    # F.scaled_dot_product_attention (ViT's do; Swin's window attention does not). Recorded,
    # so that pricing what torch runs knows (dse.calibrate.validate.torch_ran).
    sdpa = _sdpa_attention(torch, timm, model_name, img_size, num_classes)
    # Explicit q @ k^T, softmax and attn @ v instead of one fused SDPA call: the same FLOPs,
    # and each GEMM becomes its own op.
    fused = timm.layers.use_fused_attn()
    timm.layers.set_fused_attn(False)
    try:
        try:
            model = _build(torch, timm, model_name, img_size, num_classes)
        except Exception as exc:  # timm raises many kinds for a size a model cannot take
            raise ExportError(f"{model_name}: cannot build it at image size {img_size} "
                              f"({_first_line(exc)})") from None
        model.eval()
        channels, height, width = model.pretrained_cfg.get("input_size", (3, 224, 224))
        if img_size is not None:
            height = width = img_size
        x = torch.empty(batch, channels, height, width, device="meta")
        params = dict(model.named_parameters())
        recorder = _Recorder(batch=batch, param_numel={n: p.numel() for n, p in params.items()})
        for name, p in params.items():
            recorder.track(p, _Tensor(None, False, frozenset({name})))
        recorder.track(x, _Tensor(MODEL_INPUT, True))
        hooks = []
        for path, module in model.named_modules():
            hooks.append(module.register_forward_pre_hook(_enter(recorder, path)))
            hooks.append(module.register_forward_hook(_leave(recorder)))
        try:
            with torch.no_grad(), _make_mode(recorder):
                model(x)
        except Exception as exc:
            raise ExportError(f"{model_name} cannot take image size {height}x{width} "
                              f"({_first_line(exc)}); try the model's own size "
                              f"{model.pretrained_cfg.get('input_size', ['?'])[-1]}") from None
        finally:
            for hook in hooks:
                hook.remove()
    finally:
        timm.layers.set_fused_attn(fused)

    records = recorder.records
    _per_sample(records, batch, model_name)
    if sparsity_from is not None:
        densities = checkpoint_densities(sparsity_from, model_name,
                                         {n: tuple(p.shape) for n, p in params.items()})
    for record in records:
        weights = record.pop("_weight_params", None)
        if sparsity_from is not None and record["prunable"]:
            (weight,) = [w for w in weights if w.endswith("weight")] or weights[:1]
            record["density"] = densities[weight]
    n_params = sum(p.numel() for p in params.values())
    provenance = {
        "source": f"timm model {model_name!r}, built on the meta device and traced at the "
                  "aten dispatch level by workloads/export.py",
        "command": command or f"dse workloads export {model_name}"
                              + (f" --img-size {img_size}" if img_size else ""),
        "torch": torch.__version__,
        "timm": timm.__version__,
        "input_size": [channels, height, width],
        "export_batch": batch,
        "params": n_params,
        "macs_per_sample": None,  # filled below from the trace itself
        "schema": SCHEMA,
    }
    if sdpa is not None:
        provenance["sdpa_attention"] = sdpa
    if sparsity_from is not None:
        provenance["sparsity_from"] = str(sparsity_from)
    trace = Trace.from_records(model_name, [channels, height, width], records, provenance)
    trace.provenance["macs_per_sample"] = trace.macs_per_sample
    if trace.params != n_params:
        raise ExportError(f"{model_name}: the trace reads {trace.params} parameter elements but "
                          f"the model has {n_params}; some parameters are used in a way the "
                          "exporter does not follow (please report it)")
    return trace


def checkpoint_densities(path: str, model_name: str,
                         shapes: dict[str, tuple[int, ...]]) -> dict[str, float]:
    """Density (nonzero fraction) of every parameter of a checkpoint, checked against the
    model's parameter shapes. Loads weights only: no code in the file runs."""
    torch, _ = _require_torch()
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ExportError(f"--sparsity-from {path}: no such checkpoint file") from None
    except Exception as exc:
        raise ExportError(f"--sparsity-from {path}: not a readable PyTorch state dict "
                          f"({_first_line(exc)})") from None
    for key in ("state_dict", "model", "model_state_dict"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor)
                                              for v in state.values()):
        raise ExportError(f"--sparsity-from {path}: expected a state dict of tensors "
                          "(parameter name -> tensor)")
    missing = sorted(set(shapes) - set(state))
    if missing:
        raise ExportError(f"--sparsity-from {path}: has no {missing[0]!r} (and "
                          f"{len(missing) - 1} more parameters of {model_name}); is it a "
                          f"checkpoint of {model_name}?")
    for name, shape in shapes.items():
        if tuple(state[name].shape) != shape:
            raise ExportError(f"--sparsity-from {path}: {name!r} has shape "
                              f"{tuple(state[name].shape)}, but {model_name} expects {shape}")
    return {name: float(torch.count_nonzero(state[name]).item() / state[name].numel())
            for name in shapes}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
