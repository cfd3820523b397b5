"""Kernel-measurement datasets: the schema, the one loader, concatenation, and the converter of
the H100 benchmark CSVs.

One row per kernel measurement (a kernel implementation timed on one shape, format, dtype and
batch). Datasets from several runs and machines concatenate (:func:`concat`): ``run_id`` and
the device columns keep them apart. Shipped datasets live beside this module in ``datasets/``
as ``NAME.parquet`` with ``NAME.json`` (command, date, machine) and load by name::

    >>> from dse.measure.dataset import load_dataset, shipped_datasets
    >>> "h100-sxm" in shipped_datasets()
    True
    >>> frame = load_dataset("h100-sxm")

Loading needs pandas and pyarrow only (no torch, no numba).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import DatasetError

__all__ = [
    "DATASETS_DIR",
    "DatasetError",
    "SCHEMA",
    "SCHEMA_VERSION",
    "concat",
    "convert_h100_csv",
    "load_dataset",
    "shipped_datasets",
    "validate",
    "WHOLE_MODEL_COLUMNS",
    "whole_model_rows",
    "whole_model_variant",
]

SCHEMA_VERSION = "dse-measurements/1"
DATASETS_DIR = Path(__file__).parent / "datasets"

#: Column -> (pandas dtype, meaning and unit). Times are seconds per kernel call.
SCHEMA: dict[str, tuple[str, str]] = {
    "run_id": ("string", "one measurement run (date, machine, command); rows of a run share it"),
    "date": ("string", "ISO date and time the run started"),
    "device": ("string", "cpu | cuda"),
    "device_name": ("string", "CPU model or GPU name"),
    "fingerprint": ("string", "JSON: cores, caches, driver, library versions of the run"),
    "source": ("string", "trace (a shape of the model's trace) | sample (adaptive sampling) | "
               "benchmark (a benchmark grid)"),
    "why": ("string", "why the configuration was measured"),
    "model": ("string", "trace name for source=trace, else empty"),
    "op": ("string", "an op of the trace with this shape (module path), else empty"),
    "kind": ("string", "op kind: conv, linear, norm, activation, softmax, elementwise, ..."),
    "family": ("string", "dense | nm | block | unstructured | vector | model (a whole model)"),
    "implementation": ("string", "library path: torch_dense, torch_conv, torch_csr, scipy_csr, "
                       "scipy_bsr, torch_bsr, torch_vector, cublas, cusparselt, triton_bsr, "
                       "cusparse_csr, ..."),
    "kernel": ("string", "routine, algorithm or kernel names where the library tells them"),
    "format": ("string", "canonical dse format string (dense, 2:4, block4@87.5%, ...)"),
    "sparsity": ("float64", "weight sparsity of the format (0 for dense and vector ops)"),
    "block": ("int64", "block size b of a b x b block format, N:M's M, 1 for CSR, 0 else"),
    "m": ("int64", "GEMM M per group (output features); 0 for vector ops"),
    "k": ("int64", "GEMM K per group (input features x kernel area); a norm's width (the "
                 "elements each output is normalised over, 0 where unknown); 0 for other "
                 "vector ops"),
    "n": ("int64", "GEMM N in all (batch x positions); vector ops: output elements"),
    "groups": ("int64", "GEMM groups (1 unless grouped or depthwise)"),
    "batch": ("int64", "batch size the shape belongs to (1 for sampled shapes)"),
    "nnz": ("int64", "stored weight values (all groups); 0 for vector ops"),
    "dtype": ("string", "value dtype: fp32, fp16, ..."),
    "index_dtype": ("string", "sparse index dtype (int32, int64) or empty"),
    "threads": ("int64", "threads the kernel was allowed (fixed for the run)"),
    "cache": ("string", "cold (last-level cache flushed before each timed call) | warm"),
    "warmup": ("int64", "untimed calls before the timed repeats"),
    "repeats": ("int64", "timed repeats"),
    "stable": ("boolean", "median settled within the tolerance before a cap"),
    "round": ("int64", "round of the run (dse measure --rounds times every configuration once "
              "a round, minutes apart); 0 for the first, and in datasets made before rounds"),
    "min_s": ("float64", "fastest repeat, s"),
    "median_s": ("float64", "median repeat, s"),
    "p90_s": ("float64", "90th percentile repeat, s"),
    "spread": ("float64", "(p90_s - min_s) / median_s"),
    "idle": ("boolean", "other processes kept < 0.15 cores busy meanwhile (NA: unknown)"),
    "other_cores": ("float64", "cores other processes kept busy meanwhile (NaN: unknown)"),
    "flops": ("float64", "useful FLOPs of the call (2 nnz N for GEMMs; vector FLOPs)"),
    "bytes": ("float64", "DRAM bytes of the roofline model (weights, index, features once)"),
    "hw": ("string", "the accelerator spec the speed of light is computed on"),
    "sol_s": ("float64", "dse speed-of-light time of the call on `hw`, s"),
    "sol_bound": ("string", "compute | memory: what bounds sol_s"),
    "sol_fraction": ("float64", "sol_s / median_s: the fraction of the speed of light reached"),
    "input_read_share": ("float64", "share of the rows of X the sparse kernel reads (columns of "
                         "W with a kept weight), from the row's own mask; 1 for dense; NaN: "
                         "unknown, and the bound takes the format's expected share"),
    "steady_s": ("float64", "back-to-back mean per call, warm cache, host overhead included "
                 "(CUDA benchmark only; NaN else)"),
    "host_call_s": ("float64", "host time to issue one call (CUDA only; NaN else)"),
    "rel_err": ("float64", "relative error of the output against the masked dense product"),
    "note": ("string", "anything a reader needs: padding, assumed dims"),
    "error": ("string", "why the kernel could not run (timings then NaN), else empty"),
}

#: The values of ``family`` (SCHEMA's description of it).
FAMILIES = ("dense", "nm", "block", "unstructured", "vector", "model")
#: The value dtypes a kernel can be timed in: dse.roofline.numerics.DTYPE_BYTES's (repeated
#: here so that loading a dataset does not load the evaluator); an unknown one was once kept and
#: calibrated on, priced as no dtype dse knows.
VALUE_DTYPES = ("fp16", "bf16", "tf32", "fp8", "int8", "fp32")
_REQUIRED_STRINGS = ("run_id", "device", "device_name", "family", "implementation", "format")


def shipped_datasets() -> list[str]:
    """Names of the datasets shipped with dse (``load_dataset(name)``)."""
    return sorted(p.stem for p in DATASETS_DIR.glob("*.parquet"))


#: Columns added to the schema after datasets were shipped, with the value older files mean.
_ADDED = {"round": 0, "input_read_share": math.nan}


def _coerce(frame: pd.DataFrame, where: str) -> pd.DataFrame:
    older = [c for c in _ADDED if c not in frame.columns]
    if older:
        frame = frame.assign(**{c: _ADDED[c] for c in older})
    missing = [c for c in SCHEMA if c not in frame.columns]
    if missing:
        raise DatasetError(f"{where}: missing column {missing[0]!r} (schema "
                           f"{SCHEMA_VERSION}: {', '.join(SCHEMA)})")
    extra = [c for c in frame.columns if c not in SCHEMA]
    if extra:
        raise DatasetError(f"{where}: unknown column {extra[0]!r}; the schema has "
                           f"{', '.join(SCHEMA)}")
    out = frame[list(SCHEMA)].copy()
    for column, (dtype, _) in SCHEMA.items():
        try:
            if dtype == "string":
                out[column] = out[column].fillna("").astype("string")
            elif dtype == "boolean":
                out[column] = out[column].astype("boolean")
            else:
                numbers = pd.to_numeric(out[column])
                if dtype == "int64" and numbers.dtype.kind == "f" and \
                        (numbers.dropna() % 1 != 0).any():
                    # astype would truncate a shape of 1.5 to 1 without a word
                    raise ValueError("a fraction in a count")
                out[column] = numbers.astype(dtype)
        except (ValueError, TypeError) as exc:
            raise DatasetError(f"{where}: column {column!r} is not {dtype}"
                               f"{_first_bad_cell(out[column], dtype) or f' ({exc})'}; fix the "
                               "file or measure again with dse measure") from None
    return out


def _first_bad_cell(values: pd.Series, dtype: str) -> str:
    """``": row 5 holds inf"``: the first cell that does not convert, or empty."""
    numbers = pd.to_numeric(values, errors="coerce")
    bad = numbers.isna() & values.notna() if dtype == "float64" else \
        ~np.isfinite(numbers.astype(float)) | (numbers.astype(float) % 1 != 0)
    rows = np.flatnonzero(bad.to_numpy())
    return f": row {int(rows[0])} holds {_plain(values.iloc[int(rows[0])])!r}" if len(rows) else ""


def _plain(value):
    """A cell as Python shows it (``inf``, ``-64``), not numpy's ``np.float64(inf)``."""
    return value.item() if isinstance(value, np.generic) else value


#: Integer columns are counts: 0 to 2**53 (exact in float64, as the roofline computes).
_MAX_COUNT = 2**53
#: Float columns and their ranges, for every row: (lowest, highest, NaN allowed: "unknown").
#: Timings of rows that ran are checked apart (positive, below).
_FLOAT_RANGES = {
    "sparsity": (0.0, 1.0, True), "min_s": (0.0, math.inf, True),
    "median_s": (0.0, math.inf, True), "p90_s": (0.0, math.inf, True),
    "spread": (0.0, math.inf, True), "other_cores": (0.0, math.inf, True),
    "flops": (0.0, math.inf, True), "bytes": (0.0, math.inf, True),
    "sol_s": (0.0, math.inf, True), "sol_fraction": (0.0, math.inf, True),
    "input_read_share": (0.0, 1.0, True), "steady_s": (0.0, math.inf, True),
    "host_call_s": (0.0, math.inf, True), "rel_err": (0.0, math.inf, True),
}


def _check_ranges(out: pd.DataFrame, where: str) -> None:
    """Every number in its physical range: counts whole and 0 to 2**53, no infinity anywhere,
    no negative time, size or share; NaN only where the schema means "unknown"."""
    def fail(column: str, mask: np.ndarray, rule: str) -> None:
        row = int(np.flatnonzero(mask)[0])
        raise DatasetError(f"{where}: row {row} has {column} = {_plain(out[column].iloc[row])!r}; "
                           f"{rule}; fix the row or measure again with dse measure")

    for column, (dtype, _) in SCHEMA.items():
        if dtype == "int64":
            values = out[column].to_numpy()
            bad = (values < 0) | (values > _MAX_COUNT)
            if bad.any():
                fail(column, bad, f"{column} is a count from 0 to 2**53")
        elif dtype == "float64" and column in _FLOAT_RANGES:
            low, high, nan_ok = _FLOAT_RANGES[column]
            values = out[column].to_numpy(dtype=float)
            nan = np.isnan(values)
            with np.errstate(invalid="ignore"):
                bad = (~nan & ((values < low) | (values > high) | np.isinf(values))) \
                    | (nan & (not nan_ok))
            if bad.any():
                span = f">= {low:g}" if math.isinf(high) else f"from {low:g} to {high:g}"
                fail(column, bad, f"{column} must be a finite number {span}"
                                  + (" (or empty: unknown)" if nan_ok else ""))
    timed = (out["error"] == "").to_numpy()
    kernel = timed & (out["family"] != "model").to_numpy()  # a whole model has no GEMM N
    for column, rows in (("n", kernel), ("groups", timed), ("batch", timed),
                         ("repeats", timed)):
        bad = rows & (out[column].to_numpy() < 1)
        if bad.any():
            fail(column, bad, f"a kernel that ran has {column} >= 1")


def validate(frame: pd.DataFrame, where: str = "dataset") -> pd.DataFrame:
    """Check a frame against :data:`SCHEMA` and return it with the schema's column order and
    dtypes. Raises :class:`DatasetError` naming the column and the first bad row."""
    out = _coerce(frame, where)
    for column in _REQUIRED_STRINGS:
        empty = out[column] == ""
        if empty.any():
            raise DatasetError(f"{where}: row {int(np.flatnonzero(empty)[0])} has an empty "
                               f"{column!r}; every row needs one")
    unknown = ~out["family"].isin(FAMILIES)
    if unknown.any():
        row = int(np.flatnonzero(unknown.to_numpy())[0])
        raise DatasetError(f"{where}: row {row} has family {out['family'].iloc[row]!r}; use one "
                           f"of {', '.join(FAMILIES)}")
    named = (out["dtype"] != "") & ~out["dtype"].isin(VALUE_DTYPES)
    if named.any():
        row = int(np.flatnonzero(named.to_numpy())[0])
        raise DatasetError(f"{where}: row {row} has dtype {out['dtype'].iloc[row]!r}; use one of "
                           f"{', '.join(VALUE_DTYPES)} (or empty for a row that did not run)")
    ok = out["error"] == ""
    below = (ok & (out["p90_s"] < out["median_s"])).to_numpy()  # NaN p90 (unknown) compares False
    if below.any():
        raise DatasetError(f"{where}: row {int(np.flatnonzero(below)[0])} has p90_s below "
                           "median_s; fix the row or measure again with dse measure")
    timed = out.loc[ok, ["min_s", "median_s"]]
    bad = ~((timed["median_s"] > 0) & (timed["min_s"] > 0) & (timed["min_s"] <= timed["median_s"]))
    if bad.any():
        row = int(timed.index[np.flatnonzero(bad.to_numpy())[0]])
        raise DatasetError(f"{where}: row {row} has no positive min_s <= median_s but no "
                           "error either; give the timings or say why in 'error'")
    if ((out["sparsity"] < 0) | (out["sparsity"] >= 1)).any():
        raise DatasetError(f"{where}: sparsity must lie in [0, 1)")
    _check_ranges(out, where)
    return out.reset_index(drop=True)


def load_dataset(path_or_name: str | Path) -> pd.DataFrame:
    """The one loader: a shipped dataset by name (:func:`shipped_datasets`, e.g.
    ``"h100-sxm"``) or a ``.parquet`` / ``.csv`` file written by ``dse measure``; validated
    against :data:`SCHEMA` (columns in schema order, schema dtypes)."""
    text = str(path_or_name)
    if text in shipped_datasets():
        path = DATASETS_DIR / f"{text}.parquet"
    else:
        path = Path(text)
        if not path.exists():
            known = ", ".join(shipped_datasets()) or "none"
            raise DatasetError(f"{text}: no such dataset file or shipped dataset (shipped: "
                               f"{known}); give a .parquet path written by dse measure")
    try:
        frame = pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)
    except Exception as exc:  # pyarrow and pandas raise many kinds
        raise DatasetError(f"{path}: cannot read as a dataset ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    return validate(frame, str(path))


def concat(frames: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """Datasets of several runs and machines as one (each validated first)."""
    checked = [validate(f, f"dataset #{i}") for i, f in enumerate(frames)]
    if not checked:
        raise DatasetError("concat needs at least one dataset")
    return pd.concat(checked, ignore_index=True)


def provenance(path_or_name: str | Path) -> dict:
    """The provenance JSON beside a dataset (shipped name or path), or {} when absent."""
    text = str(path_or_name)
    path = DATASETS_DIR / f"{text}.json" if text in shipped_datasets() \
        else Path(text).with_suffix(".json")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


# --- the H100 benchmark CSVs (benchmarks/gpu/results/gemm_measurements*.csv) ----------------

#: (CSV kernel, CSV backend) -> (family, implementation). Rows not listed (calibration) are
#: probe figures, not kernels; they go to the provenance.
_H100_KERNELS = {
    ("dense_mm", "cublas"): ("dense", "cublas"),
    ("dense_linear", "cublas"): ("dense", "cublas_linear"),
    ("sparse24_mm", "cusparselt"): ("nm", "cusparselt"),
    ("sparse24_linear", "cusparselt"): ("nm", "cusparselt_linear"),
    ("sparse24_mm", "cusparselt_algsearch"): ("nm", "cusparselt_algsearch"),
    ("sparse24_mm", "cutlass"): ("nm", "cutlass_24"),
    ("sparse24_linear", "cutlass"): ("nm", "cutlass_24_linear"),
    ("bsr_sparse_mm", "torch.sparse.mm"): ("block", "torch_bsr_mm"),
    ("bsr_triton", "triton bsr_dense_mm"): ("block", "triton_bsr"),
    ("bsr_linear", "F.linear(bsr)"): ("block", "torch_bsr_linear"),
    ("csr_mm", "cusparse"): ("unstructured", "cusparse_csr"),
}
_BSR_KERNELS = {"bsr_sparse_mm": "torch_bsr_mm", "bsr_triton": "triton_bsr",
                "bsr_linear": "torch_bsr_linear"}
_DTYPES = {"float16": "fp16", "float32": "fp32", "bfloat16": "bf16", "": "fp16"}


def _h100_format(kernel: str, block: str, sparsity: float) -> tuple[str, int]:
    import formats

    if kernel.startswith("dense"):
        return "dense", 0
    if kernel.startswith("sparse24"):
        return "2:4", 4
    if kernel == "csr_mm":
        return formats.parse(f"unstructured@{sparsity}").name, 1
    b = int(float(block))
    return formats.parse(f"block{b}@{sparsity}").name, b


def _num(value, default=float("nan")) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return default
    return out


def convert_h100_csv(paths: Sequence[str | Path], probed_hw=None) -> pd.DataFrame:
    """The H100 benchmark CSVs (``benchmarks/gpu/results/gemm_measurements*.csv``, each with
    its ``.json`` sidecar) in this schema, one row per kernel row of the CSVs.

    The speed of light is recomputed by dse on ``probed_hw`` (default: the catalog
    ``h100-sxm`` with the run's measured ceilings, 752 TFLOP/s fp16 dense and 3.02 TB/s copy
    bandwidth, from the sidecar): fp16 values and features, int32 indices, CSR on the fp32
    vector cores as dse prices it (the CSVs' own ``sol_fraction`` priced CSR at the tensor-core
    peak). Timings are the CSVs' cold-L2 CUDA-event medians.
    """
    from .sol import sol_columns  # dse's roofline (numba): only for conversion

    frames = []
    for path in map(Path, paths):
        side = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
        hw = probed_hw if probed_hw is not None else _h100_peaks()
        fingerprint = json.dumps({k: side.get(k) for k in (
            "gpu_name", "sm_count", "l2_cache_bytes", "compute_capability", "driver_version",
            "torch_version", "torch_cuda_version", "cudnn_version", "cusparselt_version",
            "triton_version", "python", "platform", "timing")}, sort_keys=True)
        run_id = f"h100-sxm:{side.get('date_utc', '')}:{side.get('args', {}).get('tag') or 'main'}"
        rows = []
        for rec in raw.to_dict(orient="records"):
            key = (rec["kernel"], rec["backend"])
            if rec["kernel"].startswith("calib"):
                continue
            if key not in _H100_KERNELS:
                # an error row with an empty backend: infer the implementation from the kernel
                family, impl = _fallback_impl(rec["kernel"])
            else:
                family, impl = _H100_KERNELS[key]
            sparsity = _num(rec["sparsity"], 0.0)
            fmt, block = _h100_format(rec["kernel"], rec["block"], sparsity)
            m, k, n = int(rec["M"]), int(rec["K"]), int(rec["N"])
            batch = int(rec["batch"]) if rec["batch"] else 1
            kernels_seen = rec.get("kernels_seen", "")
            note = "; ".join(p for p in (
                rec.get("note", ""),
                f"group={rec['group']} layer={rec['layer']}",
                f"prof_kernel_s={rec['prof_kernel_s']}" if rec.get("prof_kernel_s") else "",
                f"pad_us={rec['pad_us']}" if rec.get("pad_us") else "") if p)
            rows.append({
                "run_id": run_id, "date": side.get("date_utc", ""), "device": "cuda",
                "device_name": side.get("gpu_name", "NVIDIA H100 80GB HBM3"),
                "fingerprint": fingerprint, "source": "benchmark",
                "why": "benchmarks/gpu/measure_gemm.py grid (square, DeiT-S/ViT-B, ConvNeXt-T)",
                "model": "", "op": rec["layer"] if rec["layer"] != "square" else "",
                "kind": "linear", "family": family, "implementation": impl,
                "kernel": kernels_seen, "format": fmt, "sparsity": sparsity, "block": block,
                "m": m, "k": k, "n": n, "groups": 1, "batch": batch,
                "nnz": int(_num(rec["nnz"], 0.0)) if rec["nnz"] else 0,
                "dtype": _DTYPES.get(rec["dtype"], rec["dtype"]),
                "index_dtype": rec["index_dtype"], "threads": 1, "cache": "cold",
                "warmup": int(side.get("args", {}).get("warmup", 3)),
                "repeats": int(_num(rec["reps"], 0.0)) if rec["reps"] else 0,
                "stable": pd.NA,
                "min_s": _num(rec["min_s"]), "median_s": _num(rec["median_s"]),
                "p90_s": _num(rec["p90_s"]),
                "idle": pd.NA, "other_cores": float("nan"),
                "steady_s": _num(rec["steady_s"]), "host_call_s": _num(rec["host_call_s"]),
                "rel_err": _num(rec["rel_err"]), "note": note, "error": rec["error"],
            })
        frame = pd.DataFrame(rows)
        frame["spread"] = (frame["p90_s"] - frame["min_s"]) / frame["median_s"]
        frame = sol_columns(frame, hw, value_dtype="fp16", vector_dtype="fp16",
                            csr_dtype="fp32")
        frames.append(frame)
    return validate(pd.concat(frames, ignore_index=True), "converted H100 CSVs")


def _fallback_impl(kernel: str) -> tuple[str, str]:
    if kernel.startswith("sparse24"):
        return "nm", "cusparselt" if kernel.endswith("mm") else "cusparselt_linear"
    if kernel in _BSR_KERNELS:
        return "block", _BSR_KERNELS[kernel]
    if kernel == "csr_mm":
        return "unstructured", "cusparse_csr"
    return "dense", "cublas"


def _h100_peaks():
    """The catalog h100-sxm: datasheet peaks, so that ``sol_s`` is a bound. (Until 2026-11-25
    the run's measured ceilings were used, which 3 rows beat; the ceilings stay in the
    dataset's provenance as ``measured_*``.)"""
    import accelerator_models

    return accelerator_models.load("h100-sxm")


# --- whole models (family "model") as the table `dse calibrate --whole-models` reads ----------

#: Columns of :func:`whole_model_rows`, those of ``benchmarks/gpu/results/
#: models_measurements.csv`` that a dse dataset has, then what the CPU adds.
WHOLE_MODEL_COLUMNS = ("model", "variant", "batch", "median_s", "min_s", "p90_s", "reps",
                       "format", "threads", "idle", "other_cores", "spread", "img_size",
                       "device_name", "date", "note", "error", "allocator")


def whole_model_variant(fmt: str, implementation: str) -> str:
    """The H100 CSV's variant name of a whole-model row: ``<format>_<mode>``, the mode from the
    implementation (``torch_eager`` -> ``eager``, ``torch_cudagraph`` -> ``cudagraph``), the
    format ``dense``, ``sparse24`` for 2:4 (``sparseNM`` for N:M), else its name with ``@``
    as ``_`` and no ``%`` (``block4_87.5``, ``unstructured_90``)."""
    mode = implementation.removeprefix("torch_")
    if fmt == "dense":
        name = "dense"
    elif ":" in fmt and "@" not in fmt:
        name = "sparse" + fmt.replace(":", "")
    else:
        name = fmt.replace("@", "_").replace("%", "")
    return f"{name}_{mode}"


def whole_model_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The whole-model rows (family ``model``) of a dataset as the table ``dse calibrate
    --whole-models`` reads (:data:`WHOLE_MODEL_COLUMNS`: ``model, variant, batch, median_s``
    as in ``benchmarks/gpu/results/models_measurements.csv``, then min, p90, repeats, the
    canonical format, threads, idle, spread, input size, machine, notes and errors), and the
    allocator settings the run had (:func:`_allocator`): on a CPU they can flip the sign of a
    sparse model's speedup with the same kernels (docs/fidelity.md)."""
    rows = validate(frame, "whole-model rows")
    rows = rows[rows["family"] == "model"]
    out = pd.DataFrame({
        "model": rows["model"].astype(str),
        "variant": [whole_model_variant(f, i) for f, i in zip(
            rows["format"], rows["implementation"], strict=True)],
        "batch": rows["batch"].astype("int64"),
        "median_s": rows["median_s"], "min_s": rows["min_s"], "p90_s": rows["p90_s"],
        "reps": rows["repeats"].astype("int64"), "format": rows["format"].astype(str),
        "threads": rows["threads"].astype("int64"), "idle": rows["idle"],
        "other_cores": rows["other_cores"], "spread": rows["spread"],
        "img_size": [_img_size(n) for n in rows["note"]],
        "device_name": rows["device_name"].astype(str), "date": rows["date"].astype(str),
        "note": rows["note"].astype(str), "error": rows["error"].astype(str),
        "allocator": [_allocator(f) for f in rows["fingerprint"]]},
        columns=list(WHOLE_MODEL_COLUMNS))
    return out.reset_index(drop=True)


def _allocator(fingerprint) -> str:
    """The allocator settings a row's fingerprint records, as JSON (``{}``: the C library's
    defaults); empty where the fingerprint predates them (unrecorded, not the defaults)."""
    try:
        facts = json.loads(fingerprint)
    except (TypeError, ValueError):
        return ""
    if not isinstance(facts, dict) or not isinstance(facts.get("allocator"), dict):
        return ""
    return json.dumps(facts["allocator"], sort_keys=True)


def _img_size(note: str) -> int:
    """The input side from a whole-model note (``input 3x224x224``), 0 when absent."""
    for part in str(note).split("; "):
        if part.startswith("input "):
            try:
                return int(part.split("x")[-1])
            except ValueError:
                return 0
    return 0
