"""Which of a design's GEMMs the expectation prices from shapes its predictors were trained on,
and which it extrapolates.

The kernel predictors learn from timed kernels (``dse measure`` datasets). A GEMM whose weight
shape (family, sparsity, M, K, groups) was timed, at an N inside the range timed for that
shape, is *measured*; any other GEMM is *extrapolated*: the predictors price it from other
shapes. Language-model decode is where this matters most: its GEMMs have N = batch (1-64 in
the usual serving range), its LM head has a vocabulary-sized M, and its attention products are
batched over the KV heads, shapes a collection of vision models never times. Issue 24 asks that
the output say so until they are measured.

A GEMM that reads its weights or the KV cache in a dtype no kernel was timed in (weight-only
int8, int4 or fp8, another KV-cache dtype: ``extrapolated_dtype`` of
:func:`dse.calibrate.expected.expected_layers`) is extrapolated whatever its shape: the fraction
of the speed of light the compute dtype's kernels reach is applied to a bound that counts the
narrower bytes, which a kernel that dequantises on the fly may or may not reach.

Where the number type itself was timed since (``benchmarks/gpu/collect --parts dtype_gemm``:
LLM linears in bf16, fp8 and int8 compute and with int4 or int8 weights on the H100), the
line quotes how that measurement compares with the carried-over expectation: the median of
measured / expected per width (decode, prefill), from the check
``python -m benchmarks.gpu.compare_dtype --ship`` writes to ``models/dtype_check/DEVICE.json``.
The predictors are not trained on those rows, so the GEMMs stay extrapolated.

Coverage is known where the predictors name the shipped datasets they were trained on
(``provenance["dataset"]``, as ``dse calibrate --data NAME`` writes it). Predictors trained on
other files have no known coverage: every GEMM then counts as extrapolated.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .expected import op_configs, timed_dtype

__all__ = ["DTYPE_CHECK_DIR", "GEMM_FAMILIES", "Coverage", "coverage", "coverage_note",
           "dtype_checks", "load_dtype_check", "measured_shapes", "with_extrapolated_share"]

#: Per device, how kernels timed in the number types the predictors never trained on compare
#: with the expectation (``python -m benchmarks.gpu.compare_dtype --ship``).
DTYPE_CHECK_DIR = Path(__file__).parent / "models" / "dtype_check"

#: Families of GEMM kernels in the datasets (vector ops and whole models are not GEMMs).
GEMM_FAMILIES = ("dense", "nm", "block", "unstructured")
_SHAPE = ["family", "sparsity", "m", "k", "groups"]


def measured_shapes(predictors, dtype: str | None = None) -> pd.DataFrame | None:
    """Per GEMM weight shape the predictors' datasets timed (columns ``family``, ``sparsity``,
    ``m``, ``k``, ``groups``): ``n_min`` and ``n_max``, the smallest and largest N timed. Only
    rows timed in ``dtype`` where given; fp32 rows also answer to ``"tf32"``, the slot
    calibration prices a CPU's fp32 kernels in (:func:`dse.calibrate.expected.timed_dtype`).
    None where the datasets are not shipped ones."""
    from ..measure.dataset import DATASETS_DIR, shipped_datasets

    names = [n.strip() for n in str(predictors.provenance.get("dataset") or "").split(",")
             if n.strip()]
    if not names or any(n not in shipped_datasets() for n in names):
        return None
    columns = ["family", "sparsity", "m", "k", "n", "groups", "dtype"]
    frame = pd.concat([pd.read_parquet(DATASETS_DIR / f"{n}.parquet", columns=columns)
                       for n in names], ignore_index=True)
    frame = frame[frame["family"].isin(GEMM_FAMILIES) & (frame["m"] > 0)]
    if dtype is not None:
        timed_in = frame["dtype"].astype(str)
        frame = frame[(timed_in == dtype) | ((timed_in == "fp32") & (dtype == "tf32"))]
    frame = frame.astype({"family": object, "sparsity": float, "m": np.int64, "k": np.int64,
                          "n": np.int64, "groups": np.int64})
    frame["sparsity"] = np.where(frame["family"] == "dense", 0.0, frame["sparsity"].round(6))
    return (frame.groupby(_SHAPE, sort=False)["n"].agg(n_min="min", n_max="max")
            .reset_index())


@dataclass(frozen=True)
class Coverage:
    """Per design (``hardware``, ``format``, ``batch``): ``gemms`` (GEMM ops with work),
    ``extrapolated`` (those the predictors never timed at their shape and N),
    ``expected_s`` (the expected time of all the design's GEMMs) and ``extrapolated_s`` (of
    the extrapolated ones), in ``designs``; ``examples``: the extrapolated shapes that cost
    the most expected time, worst first, as ``op: MxK (x groups) at N``; ``known``: False
    where the predictors' training shapes are not known (then every GEMM counts as
    extrapolated); ``dtypes``: what the GEMMs read in a dtype never timed (``"int4 weights"``,
    ``"fp8 KV cache"``), which makes them extrapolated whatever their shape; ``dtype``: the
    compute dtype the kernels were timed in; ``checks``: :func:`dtype_checks` of ``dtypes``."""

    designs: pd.DataFrame
    examples: list[str]
    known: bool
    dtypes: tuple[str, ...] = ()
    dtype: str | None = None
    checks: tuple[str, ...] = ()  #: what kernels timed in those dtypes say (dtype_checks)

    @property
    def share(self) -> pd.Series:
        """The extrapolated share of each design's expected GEMM time."""
        d = self.designs
        return (d["extrapolated_s"] / d["expected_s"].where(d["expected_s"] > 0)).fillna(0.0)


def dtype_checks(device: str, dtypes, phase: str | None) -> tuple[str, ...]:
    """For each mark of ``dtypes`` (``"int4 weights"``, ``"fp8 compute"``; several joined by
    ``", "``) that kernels were timed in on ``device`` in a language model's ``phase``
    (``decode`` or ``prefill``): one clause, the kernel and the median of measured / expected
    over the shapes compared. Empty where nothing was timed (no check shipped for the device,
    another dtype, no phase)."""
    path = DTYPE_CHECK_DIR / f"{device}.json"
    if phase not in ("decode", "prefill") or not path.is_file():
        return ()
    doc = load_dtype_check(path)
    marks = sorted({m for joined in dtypes for m in str(joined).split(", ") if m})
    out = []
    for mark in marks:
        check = doc["checks"].get(mark, {}).get(phase)
        if check:
            out.append(f"{mark} ({doc['kernels'][mark]}) took "
                       f"{check['median_measured_over_expected']:.2f}x this expectation at "
                       f"{phase} (median of {check['shapes']} shapes)")
    return tuple(out)


#: The widths a dtype check gives figures for (compare_dtype: decode N <= 64, prefill N >= 512).
CHECK_PHASES = ("decode", "prefill")
#: The largest median of measured / expected a check may hold, and the smallest: a kernel 1000x
#: off its expectation is a broken measurement or a broken file, not a number to quote.
CHECK_RATIO_RANGE = (1e-3, 1e3)


def _check_marks() -> dict[str, tuple[str, ...]]:
    from ..roofline.numerics import DTYPE_BYTES, WEIGHT_DTYPE_BYTES

    # The marks expected_layers gives (dse.calibrate.expected.extrapolated_dtypes).
    return {"compute": tuple(DTYPE_BYTES), "weights": tuple(WEIGHT_DTYPE_BYTES),
            "KV cache": tuple(DTYPE_BYTES)}


def load_dtype_check(path: Path) -> dict:
    """The dtype check ``path`` (``models/dtype_check/DEVICE.json``), validated: ``checks``
    maps each mark (``"int4 weights"``, ``"fp8 compute"``, ``"fp8 KV cache"``) to its phases
    (decode, prefill), each with ``shapes`` (a whole number >= 1) and
    ``median_measured_over_expected`` (a finite ratio in :data:`CHECK_RATIO_RANGE`);
    ``kernels`` names the kernel of every mark. Anything else raises CalibrationError naming
    the file, the key and the fix."""
    import math

    from .predictor import CalibrationError

    fix = "rerun python -m benchmarks.gpu.compare_dtype --ship, or fix the file"

    def bad(key: str, why: str) -> CalibrationError:
        return CalibrationError(f"{path}: {key}: {why}; {fix}")

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CalibrationError(f"{path}: cannot read the dtype check ({first[:120]}); "
                               f"{fix}") from None
    if not isinstance(doc, dict):
        raise CalibrationError(f"{path}: expected a JSON object with checks and kernels; {fix}")
    checks, kernels = doc.get("checks"), doc.get("kernels")
    if not isinstance(checks, dict):
        raise bad("checks", f"expected an object of marks, got {checks!r:.40}")
    if not isinstance(kernels, dict):
        raise bad("kernels", f"expected an object of kernel names, got {kernels!r:.40}")
    marks = _check_marks()
    for mark, phases in checks.items():
        dtype, _, what = str(mark).partition(" ")
        if what not in marks or dtype not in marks[what]:
            known = "; ".join(f"{'/'.join(d)} {w}" for w, d in marks.items())
            raise bad(f"checks.{mark:.40}", f"not a dtype mark dse gives ({known})")
        if not isinstance(phases, dict) or not phases:
            raise bad(f"checks.{mark}", "expected an object of phases (decode, prefill)")
        kernel = kernels.get(mark)
        if not isinstance(kernel, str) or not kernel.strip():
            raise bad(f"kernels.{mark}", f"expected the kernel's name, got {kernel!r:.40}")
        for phase, check in phases.items():
            key = f"checks.{mark}.{phase:.20}"
            if phase not in CHECK_PHASES:
                raise bad(key, f"not a phase; use {' or '.join(CHECK_PHASES)}")
            if not isinstance(check, dict):
                raise bad(key, "expected an object with shapes and "
                               "median_measured_over_expected")
            shapes = check.get("shapes")
            if isinstance(shapes, bool) or not isinstance(shapes, int) or shapes < 1:
                raise bad(f"{key}.shapes", f"expected a whole number of shapes >= 1, got "
                                           f"{shapes!r:.40}")
            ratio = check.get("median_measured_over_expected")
            low, high = CHECK_RATIO_RANGE
            if (isinstance(ratio, bool) or not isinstance(ratio, int | float)
                    or not math.isfinite(ratio) or not low <= ratio <= high):
                raise bad(f"{key}.median_measured_over_expected",
                          f"expected a finite ratio from {low:g} to {high:g}, got {ratio!r:.40}")
    return doc


def _stem(name: str) -> str:
    """An op's name without its layer index: ``model.layers.3.mlp.up_proj`` -> ``mlp.up_proj``."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[i + 1:])
    return name


def coverage(expected: pd.DataFrame, trace, predictors, dtype: str | None = None,
             shapes: pd.DataFrame | None = None, examples: int = 3) -> Coverage:
    """Which GEMMs of the designs in ``expected`` (``expected_layers`` rows of ``trace``) the
    predictors priced from timed shapes, and which they extrapolated (see the module).
    ``shapes``: :func:`measured_shapes` (default: the predictors' own, in the dtype their
    kernels were timed in, whatever ``dtype``, the compute dtype asked for: a dtype never timed
    is said apart, as ``"fp8 compute"`` in ``dtypes``, so the shapes never timed stay shapes)."""
    known = True
    timed_in = timed_dtype(predictors)
    if shapes is None:
        shapes = measured_shapes(predictors, timed_in or dtype)
        if shapes is None:
            known = False
            shapes = pd.DataFrame({c: [] for c in [*_SHAPE, "n_min", "n_max"]})
    names = set(trace.ops["name"])
    rows = expected[expected["op"].isin(names)]
    config = op_configs(rows, trace)
    gemm = config["family"].isin(GEMM_FAMILIES).to_numpy() & (config["m"].to_numpy() > 0) \
        & (rows["expected_s"].to_numpy() > 0)
    probe = pd.DataFrame({
        "family": config["family"].astype(object).to_numpy(),
        "sparsity": np.where(config["family"] == "dense", 0.0,
                             config["sparsity"].astype(float).round(6)),
        "m": config["m"].astype(np.int64).to_numpy(), "k": config["k"].astype(np.int64).to_numpy(),
        "groups": config["groups"].astype(np.int64).to_numpy()})
    joined = probe.merge(shapes.astype({"family": object, "sparsity": float, "m": np.int64,
                                        "k": np.int64, "groups": np.int64}),
                         on=_SHAPE, how="left")
    n = config["n"].to_numpy(dtype=np.float64)
    timed = (joined["n_min"].to_numpy(dtype=np.float64) <= n) \
        & (n <= joined["n_max"].to_numpy(dtype=np.float64))
    narrow = (rows["extrapolated_dtype"].to_numpy(dtype=object) != "") \
        if "extrapolated_dtype" in rows else np.zeros(len(rows), dtype=bool)
    # each mark once ("fp8 compute" and "fp8 compute, int4 weights" of two ops: two marks)
    dtypes = tuple(sorted({mark for joined in
                           rows["extrapolated_dtype"].to_numpy(dtype=object)[gemm & narrow]
                           for mark in str(joined).split(", ") if mark}))
    extrapolated = gemm & (~timed | narrow)
    untimed = gemm & ~timed  # the shapes or N never timed, named in the line
    seconds = rows["expected_s"].to_numpy(dtype=np.float64)
    per = pd.DataFrame({
        "hardware": rows["hardware"].to_numpy(), "format": rows["format"].to_numpy(),
        "batch": rows["batch"].to_numpy(), "gemms": gemm.astype(np.int64),
        "extrapolated": extrapolated.astype(np.int64),
        "expected_s": np.where(gemm, seconds, 0.0),
        "extrapolated_s": np.where(extrapolated, seconds, 0.0)})
    designs = per.groupby(["hardware", "format", "batch"], sort=False).sum().reset_index()
    worst = pd.DataFrame({
        "stem": [_stem(o) for o in rows["op"].to_numpy()[untimed]],
        "m": probe["m"].to_numpy()[untimed], "k": probe["k"].to_numpy()[untimed],
        "groups": probe["groups"].to_numpy()[untimed],
        "n": np.round(n[untimed]).astype(np.int64), "s": seconds[untimed]})
    worst = (worst.groupby(["stem", "m", "k", "groups"], sort=False)
             .agg(n_min=("n", "min"), n_max=("n", "max"), s=("s", "sum"))
             .reset_index().sort_values("s", ascending=False, kind="stable"))
    shown = []
    for r in worst.head(examples).itertuples():
        groups = f" x {r.groups}" if r.groups > 1 else ""
        at = f"N={r.n_min}" if r.n_min == r.n_max else f"N={r.n_min}-{r.n_max}"
        shown.append(f"{r.stem}: {r.m}x{r.k}{groups} at {at}")
    # The dtype the kernels ran in, which the line names (the compute dtype asked for may
    # itself be one they never ran in: "fp8 compute").
    checks = dtype_checks(predictors.name, dtypes, trace.provenance.get("phase"))
    return Coverage(designs, shown, known, dtypes, timed_in or dtype, checks)


def coverage_note(cov: Coverage, device: str, step: str) -> str:
    """One line for the printed output: whether the expectation of ``step`` (a trace's name)
    is extrapolated, how much of it, and the costliest shapes never timed on ``device``."""
    d = cov.designs
    if not cov.known:
        return (f"expectation extrapolated for {step}: the shapes {device}'s predictors were "
                "trained on are not known (not shipped datasets), so its GEMMs (decode: N = "
                "the batch) may all lie outside them")
    if int(d["extrapolated"].sum()) == 0:
        return (f"expectation for {step}: every GEMM's weight shape was timed on {device} at "
                "its N (not extrapolated)")
    share = cov.share
    low, high = float(share.min()), float(share.max())
    span = f"{low:.0%}" if round(low, 2) == round(high, 2) else f"{low:.0%}-{high:.0%}"
    counts = sorted(set(zip(d["extrapolated"], d["gemms"], strict=True)))
    ops = (f"{counts[0][0]} of {counts[0][1]} GEMMs" if len(counts) == 1
           else f"{min(c[0] for c in counts)}-{max(c[0] for c in counts)} of "
                f"{max(c[1] for c in counts)} GEMMs")
    head = f"expectation extrapolated for {step}: {ops} ({span} of the expected GEMM time)"
    if not cov.dtypes:
        return (f"{head} have a shape or N never timed on {device}, priced from other shapes: "
                + "; ".join(cov.examples))
    timed_in = cov.dtype or "the compute dtype"
    line = (f"{head} have a shape, N or dtype never timed on {device}: they compute or read "
            f"{' and '.join(cov.dtypes)} (its kernels were timed in {timed_in}; priced as the "
            "fraction of the speed of light those kernels reach, applied to the bound in "
            "those dtypes)")
    if cov.checks:
        line += (f"; timed since on {device} (python -m benchmarks.gpu.compare_dtype), not "
                 "trained on: " + "; ".join(cov.checks))
    if cov.examples:
        line += "; shapes or N never timed: " + "; ".join(cov.examples)
    return line


def with_extrapolated_share(table: pd.DataFrame, cov: Coverage) -> pd.DataFrame:
    """``table`` (designs of the same trace) with ``expected_extrapolated_share``: the share of
    each design's expected GEMM time the predictors extrapolated (see :func:`coverage`)."""
    keys = ["hardware", "format", "batch"]
    share = cov.designs[keys].assign(expected_extrapolated_share=cov.share.to_numpy())
    label = pd.DataFrame({k: table[k].astype(object).to_numpy() for k in keys})
    merged = label.merge(share.astype({"hardware": object, "format": object}), on=keys,
                         how="left")
    return table.assign(expected_extrapolated_share=merged["expected_extrapolated_share"]
                        .to_numpy(dtype=np.float64))
