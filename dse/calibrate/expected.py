"""The expectation beside the bound: kernel predictors applied to ``evaluate_layers`` and
``evaluate`` frames.

Every op with work gets an expected kernel time from the predictor of its family on the
calibrated device; a design's expected latency is the sum over its ops (kernels as they exist
run one op at a time, so the expectation is an unfused one whatever the bound's fusion model).
Ops are priced warm, as inside a model (the op before has just written their input), where
the device's predictors learned warm timings, as long as the op's working set fits the
measured device's last-level cache (``DevicePredictors.warm_capacity_bytes``); a larger one
is priced cold, as most of its bytes come from DRAM whatever ran before it.
A family the device has no data for is priced explicitly and says so in ``calibration``:
convolutions by the GEMM predictor, a block size by the nearest measured one, anything else by
its bound plus the device's launch floor (``"none for vector on h100-sxm: bound + launch
floor used"``), or, where the predictors carry constants fitted on measured whole models,
by those. When the frame's hardware is not the device the predictors were measured on,
the fraction of the speed of light carries over (``fraction``-target families) and the note
says so.

A mixture-of-experts layer's expert linears (a language model's ``routed_weights_by_op``) run
as a grouped kernel does: one GEMM per expert its tokens touch, each over the tokens routed to
it. With top-k routing over E experts a step of T tokens touches ``E_t = E x (1 - (1 - k/E)^T)``
experts in expectation (:func:`workloads.llm.touched_share`), each over ``T x k / E_t`` tokens
(the step's ``T x k`` token-expert pairs shared among them), so each expert GEMM is priced at
that N and the op's expected time is ``E_t`` of them: each pays its launch floor and the small-N
inefficiency of its kernel. The bound is the trace's (the same FLOPs and the touched experts'
weights).

The predictors learned kernels whose weights and KV cache are in the compute dtype. Priced with
weight-only quantisation (``numerics.weight_dtype``) or a narrower KV cache
(``numerics.kv_dtype``), the ops that read them are extrapolated and say so in
``extrapolated_dtype`` (``"int4 weights"``, ``"fp8 KV cache"``) and in ``calibration``: a
``fraction``-target family applies the fraction of the speed of light its fp16 kernels reach to
the bound, which counts the narrower bytes; a ``time``-target family (its time learned
directly, which would not move with the bytes) is priced by its fitted physical model,
``floor + bound / ceiling``, without its learned residual.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

import formats
import workloads
from workloads.llm import touched_share

from ..roofline import Numerics
from ..roofline.pricing import cache_read_elems, has_gemm_weights
from .features import IMPL, family_key, feature_kind
from .predictor import DevicePredictors, FamilyPredictor

__all__ = ["expected_designs", "expected_layers", "op_configs"]

_GEMM_KINDS = ("linear", "conv", "matmul")


def op_configs(layers: pd.DataFrame, trace, cache: str = "warm",
               warm_capacity_bytes: float = 0.0) -> pd.DataFrame:
    """Per row of ``evaluate_layers`` (unfused): the kernel it runs (``family``, ``key``) and
    the configuration the predictors see (m, k, n in all, groups, sparsity, block, flops,
    bytes, kind, sol_s, cache) of each of its ``kernels`` GEMMs: 1, or for an MoE expert
    linear the experts the step touches (see the module), each over its share of the op's
    token-expert pairs (``n``), FLOPs, bytes and bound (``sol_s``). With ``cache="warm"`` and
    a ``warm_capacity_bytes`` (the measured device's last-level cache), an op whose bytes
    exceed it is ``cold``."""
    ops = trace.ops.set_index("name")
    # A norm's K is the width it normalises over, as the predictors learned it
    # (dse.calibrate.features.with_norm_widths); computed per op of the trace, not per row.
    ops["norm_k"] = [workloads.norm_width(name, int(w)) if kind == "norm" else 0
                     for name, w, kind in zip(ops.index, ops["weight_elems"], ops["kind"],
                                              strict=True)]
    # Kinds the predictors tell apart (dse.calibrate.features.with_feature_kinds): data
    # movement and fp32 ops of the math attention path by the op's name, a convolution
    # reading the model's few-channel input.
    image = int(trace.input_shape[0]) if len(trace.input_shape) == 3 else 0
    reads_input = ops["producers"].map(lambda ps: workloads.MODEL_INPUT in ps)
    ops["feature_kind"] = [feature_kind(kind, name, image if reads else 0)
                           for name, kind, reads in zip(ops.index, ops["kind"], reads_input,
                                                        strict=True)]
    op = ops.loc[layers["op"].to_numpy()]
    batch = layers["batch"].to_numpy()
    m = op["m"].to_numpy()
    gemm = (m > 0) & np.isin(op["kind"].to_numpy(), _GEMM_KINDS)
    prunable = op["prunable"].to_numpy(dtype=bool)
    # A search prices thousands of designs of a few formats: parse each format once.
    codes, names = pd.factorize(layers["format"].astype(object))
    parsed = [formats.parse(name) for name in names]
    fam = np.array([f.family for f in parsed], dtype=object)[codes]
    sparsity = np.array([float(f.sparsity) for f in parsed], dtype=float)[codes]
    block = np.array([int(getattr(f, "block", 0) or getattr(f, "m", 0) or 0) for f in parsed],
                     dtype=np.int64)[codes]
    fallback = layers["fallback"].to_numpy(dtype=object)
    family = np.where(~gemm, "vector",
                      np.where(fallback == "hw:csr", "unstructured",
                               np.where((fallback != "") | ~prunable, "dense", fam)))
    family = family.astype(object)
    plain = np.isin(family, ("dense", "vector"))  # no sparse weights: a vector op has none
    block = np.where(family == "unstructured", 1, np.where(plain, 0, block))
    sparsity = np.where(plain, 0.0, sparsity)
    groups = op["groups"].to_numpy()
    kind = op["feature_kind"].to_numpy(dtype=object)
    conv = gemm & (op["kind"].to_numpy() == "conv")
    out = pd.DataFrame({
        "family": family, "kind": kind, "m": np.where(gemm, m, 0),
        "k": np.where(gemm, op["k"].to_numpy(), op["norm_k"].to_numpy()),
        "n": np.where(gemm, op["n"].to_numpy() * batch, op["output_elems"].to_numpy() * batch),
        "groups": groups, "sparsity": sparsity, "block": block,
        "flops": layers["flops"].to_numpy(dtype=float), "bytes": layers["dram_bytes"].to_numpy(),
        "sol_s": layers["time_s"].to_numpy(dtype=float), "cache": cache,
        # A convolution's input over the batch, for its geometry features (features.FEATURES)
        "input_elems": np.where(conv, op["input_elems"].to_numpy(dtype=float) * batch, 0.0),
        "batch": batch,
        # ... and its window, as recorded in the trace (0 where not: features.with_conv_inputs)
        **{c: np.where(conv, _window(op, c), 0.0) for c in ("kernel_size", "stride")}})
    vector_flops = op["vector_flops"].to_numpy(dtype=float) * batch
    out.loc[~gemm, "flops"] = vector_flops[~gemm]
    out["kernels"] = _expert_kernels(trace, op.index.to_numpy(dtype=object), batch)
    routed = out["kernels"].to_numpy() != 1.0
    if routed.any():  # per expert GEMM: the op's pairs, FLOPs, bytes and bound over E_t
        share = out["kernels"].to_numpy()[routed]
        for column in ("n", "flops", "bytes", "sol_s"):
            values = out[column].to_numpy(dtype=float, copy=True)
            values[routed] /= share
            out[column] = values
    if cache == "warm" and warm_capacity_bytes > 0:
        # Warm timings were taken back to back, their data in the caches; an op whose working
        # set cannot fit them reads most of it from DRAM, as the cold timings did.
        out["cache"] = np.where(out["bytes"].to_numpy(dtype=float) <= warm_capacity_bytes,
                                "warm", "cold")
    kernel = ["family", "kind", "groups", "block"]
    codes = out.groupby(kernel, sort=False, observed=True).ngroup().to_numpy()
    firsts = out.loc[~pd.Series(codes).duplicated().to_numpy(), kernel]
    keys = np.empty(len(firsts), dtype=object)
    keys[codes[firsts.index.to_numpy()]] = [family_key(*row) for row in firsts.itertuples(
        index=False)]
    out["key"] = keys[codes]
    return out


#: The implementation a convolution runs as, where its predictor learned it among others: a
#: dense convolution is ``F.conv2d`` (oneDNN on the CPU; ``torch_conv``). The GEMM of its im2col
#: matrix (``torch_dense``: ``torch.mm`` / ``torch.bmm`` into a preallocated output) leaves out
#: building that matrix, so it is no way to run the convolution, and a model never runs it
#: (``benchmarks/cpu/results/profile_model_ops.csv``: every convolution of ResNet-50 and
#: EfficientNet-B4 is ``aten::mkldnn_convolution`` or, for 1 x 1 inputs, ``_slow_conv2d``).
CONV_RUNS_AS = {"conv": "torch_conv", "grouped_conv": "torch_conv"}


def _ran_as(model: FamilyPredictor, x: np.ndarray, sol: np.ndarray,
            key: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The expected time and implementation of ``key``'s rows priced as the one implementation
    that runs them (:data:`CONV_RUNS_AS`), where ``model`` learned it as a feature; else None
    (the fastest of its implementations stands)."""
    impl = CONV_RUNS_AS.get(key)
    if impl is None or impl not in model.implementations:
        return None
    x = np.array(x, dtype=float, copy=True)
    x[:, IMPL] = model.implementations.index(impl)
    return model.predict_s(x, sol), np.full(len(x), impl, dtype=object)


def _window(op: pd.DataFrame, column: str) -> np.ndarray:
    """A trace op's ``kernel_size`` or ``stride`` (0 for a trace frame built without it)."""
    if column not in op:
        return np.zeros(len(op))
    return op[column].to_numpy(dtype=float)


def _expert_kernels(trace, names: np.ndarray, batch: np.ndarray) -> np.ndarray:
    """Per row (op ``names`` at ``batch``): the GEMM kernels the op runs, in expectation: the
    experts a step touches, ``E x (1 - (1 - k/E)^T)`` with ``T = batch x tokens per sample``,
    for an MoE layer's expert linear (the provenance's ``routed_weights_by_op``), else 1."""
    routed = trace.provenance.get("routed_weights_by_op") or {}
    kernels = np.ones(len(names))
    if not routed:
        return kernels
    for i, name in enumerate(names):
        r = routed.get(name)
        if r is not None:
            e = float(r["sets"])
            tokens = float(batch[i]) * float(r["tokens_per_sample"])
            kernels[i] = e * touched_share(e, float(r["sets_per_token"]), tokens)
    return kernels


def _resolve(key: str, predictors: DevicePredictors) -> tuple[FamilyPredictor | None, str]:
    """The predictor that prices ``key`` on this device and the note saying how."""
    fams, dev = predictors.families, predictors.name
    if key in fams:
        return fams[key], ""
    if key == "conv" and "gemm" in fams:
        return fams["gemm"], f"conv priced by the gemm predictor (no conv data on {dev})"
    if key.startswith("block"):
        sizes = sorted(int(k[5:]) for k in fams if k.startswith("block"))
        if sizes:
            b = int(key[5:])
            near = min(sizes, key=lambda s: (abs(np.log2(max(s, 1) / max(b, 1))), s))
            return fams[f"block{near}"], f"none for {key} on {dev}: block{near} used"
    return None, f"none for {key} on {dev}: bound + launch floor used"


def expected_layers(layers: pd.DataFrame, trace, predictors: DevicePredictors,
                    cache: str = "warm", numerics: Numerics | None = None) -> pd.DataFrame:
    """``layers`` (``evaluate_layers``, unfused, of ``trace``) with ``expected_s`` (the
    expected kernel time, s: the fastest implementation measured on the device, a dense
    convolution as the one that runs it, :data:`CONV_RUNS_AS`; ``cache``
    ``warm``, the default, prices each op as it runs inside a model, after the op before it,
    where the device has warm timings (``dse measure --warm``; a predictor without them
    ignores the feature) and the op's bytes fit the device's last-level cache (else cold),
    ``cold`` as an isolated kernel after a cache flush),
    ``fraction_of_sol`` (``time_s / expected_s``), ``predictor`` (``device:key:target``),
    ``kernel`` (that implementation), ``validated_rmspe`` (held-out RMSPE of that predictor),
    ``calibration`` (how the op was priced when not by its own family's predictor) and
    ``extrapolated_dtype`` (``"int4 weights"``, ``"fp8 KV cache"``, or empty: what the op reads
    in a dtype its predictors never timed, from ``numerics``, the ``Numerics`` ``layers`` were
    priced with; see the module). An MoE expert linear is its touched experts' GEMMs (the
    module): ``expected_s`` sums them."""
    config = op_configs(layers, trace, cache, predictors.warm_capacity_bytes)
    # A vector kind with no predictor of its own here (features.vector_key; a file trained
    # before the split, the CPU's): priced as a vector op, as before the split.
    split = config["key"].str.startswith("vector_").to_numpy() & ~config["key"].isin(
        list(predictors.families)).to_numpy()
    config.loc[split, "key"] = "vector"
    count = config["kernels"].to_numpy()
    timed_in = timed_dtype(predictors)
    untimed = _untimed_dtypes(layers, trace, numerics, timed_in)
    x = predictors.features(config)
    expected = np.zeros(len(config))
    names = np.full(len(config), "-", dtype=object)
    notes = np.full(len(config), "", dtype=object)
    kernels = np.full(len(config), "", dtype=object)
    rmspe = np.full(len(config), np.nan)
    timed = np.zeros(len(config), dtype=bool)  # priced by a time-target predictor
    work = config["sol_s"].to_numpy() > 0
    key_codes, key_names = pd.factorize(config["key"])
    for code in np.unique(key_codes[work]):
        key = key_names[code]
        rows = np.flatnonzero(work & (key_codes == code))
        model, note = _resolve(key, predictors)
        sol = config["sol_s"].to_numpy()[rows]
        ctx = predictors.context
        if model is None and ctx:
            ceiling = ctx["grouped_conv_ceiling"] if key == "grouped_conv" \
                else ctx["unmeasured_ceiling"]
            expected[rows] = ctx["unmeasured_floor_s"] + sol / ceiling
            names[rows] = f"{predictors.name}:whole-model-fit"
            note = (f"none for {key} on {predictors.name}: floor + bound / ceiling fitted on "
                    "whole models used")
        elif model is None:
            expected[rows] = sol + predictors.launch_floor_s
            names[rows] = f"{predictors.name}:bound"
        else:
            # a convolution is priced as the implementation that runs it, where the
            # predictor learned that one; anything else as its fastest implementation
            ran = _ran_as(model, x[rows], sol, key)
            kernel, impl = ran if ran is not None else model.predict_best_s(x[rows], sol)
            if model.target == "time":  # learned times do not follow narrower bytes
                narrow = untimed[rows] != ""
                kernel = np.where(narrow, model.physical_s(sol), kernel)
            if ctx:  # inside a model: less than the isolated, cold-cache kernel
                kernel = np.maximum(kernel - ctx["shift_s"], np.maximum(sol, 0.25 * kernel))
            expected[rows] = kernel
            kernels[rows] = impl
            names[rows] = f"{predictors.name}:{model.key}:{model.target}"
            rmspe[rows] = model.validated.get("rmspe", np.nan)
            timed[rows] = model.target == "time"
        notes[rows] = note
        for what in np.unique(untimed[rows]):
            if what:
                how = ("its floor + bound / ceiling used, as the times it learned do not "
                       "follow the bytes" if model is not None and model.target == "time"
                       else "the fraction of the speed of light of its "
                       f"{timed_in or numerics.dtype} kernels applied to the "
                       f"{'bound in ' + numerics.dtype if 'compute' in what else 'narrower bytes'}")
                said = (f"{what} never timed on {predictors.name}: {key} extrapolated, {how}")
                narrow = rows[untimed[rows] == what]
                notes[narrow] = f"{note}; {said}" if note else said
    expected *= count
    other = (layers["hardware"].to_numpy(dtype=object) != predictors.reference_hw) & work
    carried = {True: f"time learned on {predictors.reference_hw}, not scaled to this hardware",
               False: f"fraction carried over from {predictors.reference_hw}"}
    # A few distinct (note, target) pairs over many rows: join each pair's text once.
    note_codes, note_texts = pd.factorize(notes[other])
    pairs, inverse = np.unique(note_codes * 2 + timed[other], return_inverse=True)
    joined = np.array([(f"{note_texts[c // 2]}; " if note_texts[c // 2] else "")
                       + carried[bool(c % 2)] for c in pairs], dtype=object)
    notes[other] = joined[inverse.reshape(-1)]
    out = layers.copy()
    out["expected_s"] = expected
    with np.errstate(divide="ignore", invalid="ignore"):
        out["fraction_of_sol"] = np.where(expected > 0, out["time_s"] / expected, np.nan)
    out["predictor"] = names
    out["kernel"] = kernels
    out["validated_rmspe"] = rmspe
    out["calibration"] = notes
    out["extrapolated_dtype"] = untimed
    return out


def timed_dtype(predictors: DevicePredictors) -> str | None:
    """The compute dtype the predictors' GEMMs were timed in, as calibration takes it (the most
    common dtype of their datasets' rows; a CPU's fp32 rows are priced in the tf32 slot), or
    None where the datasets are not shipped ones (then nothing is marked)."""
    names = tuple(n.strip() for n in str(predictors.provenance.get("dataset") or "").split(",")
                  if n.strip())
    return _timed_dtype(names)


@functools.lru_cache(maxsize=8)
def _timed_dtype(names: tuple[str, ...]) -> str | None:
    from ..measure.dataset import DATASETS_DIR, shipped_datasets

    if not names or any(n not in shipped_datasets() for n in names):
        return None
    dtypes = pd.concat([pd.read_parquet(DATASETS_DIR / f"{n}.parquet", columns=["dtype"])
                        for n in names], ignore_index=True)["dtype"].astype(str)
    dtypes = dtypes[dtypes != ""]
    if dtypes.empty:
        return None
    dtype = str(dtypes.mode().iloc[0])
    return "tf32" if dtype == "fp32" else dtype  # as dse.calibrate.validate._on_spec prices it


def _untimed_dtypes(layers: pd.DataFrame, trace, numerics: Numerics | None,
                    timed_in: str | None = None) -> np.ndarray:
    """Per row of ``layers``: what its op computes or reads in a dtype no predictor timed:
    ``"fp8 compute"`` (a GEMM in a compute dtype other than ``timed_in``, the one the
    predictors' kernels ran in), ``"int4 weights"`` (a GEMM's weights under weight-only
    quantisation), ``"fp8 KV cache"`` (an attention product reading a narrower or wider KV
    cache), several joined by ``", "``, or ``""``."""
    out = np.full(len(layers), "", dtype=object)
    if numerics is None or not len(layers):
        return out
    ops = trace.ops
    index = pd.Index(ops["name"]).get_indexer(layers["op"].astype(str))

    def mark(rows: np.ndarray, what: str) -> None:
        out[rows] = np.where(out[rows] == "", what, out[rows] + ", " + what)

    if timed_in is not None and numerics.dtype != timed_in:
        mark((ops["m"].to_numpy() > 0)[index], f"{numerics.dtype} compute")
    if numerics.quantised:
        mark(has_gemm_weights(ops)[index], f"{numerics.weight_dtype} weights")
    if numerics.kv_dtype is not None and numerics.kv_dtype != numerics.dtype:
        mark(cache_read_elems(trace)[index] > 0, f"{numerics.kv_dtype} KV cache")
    return out


def _summary(group: pd.DataFrame) -> pd.Series:
    used = group.loc[group["expected_s"] > 0]
    share = used.groupby("predictor")["expected_s"].sum() / max(used["expected_s"].sum(), 1e-30)
    parts = [f"{p} {s:.0%}" for p, s in share.sort_values(ascending=False).items()]
    rmspe = used["validated_rmspe"]
    weights = used["expected_s"].where(rmspe.notna(), 0.0)
    notes = sorted({n for note in used["calibration"] for n in note.split("; ") if n})
    return pd.Series({
        "expected_latency_s": float(group["expected_s"].sum()),
        "predictor": ", ".join(parts),
        "validated_rmspe": float(np.average(rmspe.fillna(0.0), weights=weights))
        if weights.sum() > 0 else np.nan,
        "calibration": "; ".join(notes)})


def expected_designs(designs: pd.DataFrame, layers: pd.DataFrame) -> pd.DataFrame:
    """``designs`` (``evaluate``) with ``expected_latency_s``, ``expected_speedup`` (expected
    dense / expected latency, same hardware and batch), ``fraction_of_sol`` (bound /
    expected), ``predictor`` (share of expected time per predictor), ``validated_rmspe``
    (held-out RMSPE of the predictors used, weighted by expected time) and ``calibration``,
    from :func:`expected_layers` rows of the same trace (scope as in ``designs``)."""
    keys = ["hardware", "format", "batch"]
    per = layers.groupby(keys, sort=False)[["expected_s", "predictor", "validated_rmspe",
                                             "calibration"]].apply(_summary).reset_index()
    dense = per[per["format"] == "dense"].set_index(["hardware", "batch"])["expected_latency_s"]
    per["expected_speedup"] = [dense.get((h, b), np.nan) / e for h, b, e in zip(
        per["hardware"], per["batch"], per["expected_latency_s"], strict=True)]
    designs = designs.copy()
    label = {k: designs[k].astype(object) for k in keys}
    out = pd.DataFrame(label).merge(per.astype({"hardware": object, "format": object}),
                                    on=keys, how="left")
    for column in ("expected_latency_s", "expected_speedup", "predictor", "validated_rmspe",
                   "calibration"):
        designs[column] = out[column].to_numpy()
    designs["fraction_of_sol"] = designs["latency_s"] / designs["expected_latency_s"]
    return designs
