"""The speed of light of measured kernels: dse's own roofline of each measured configuration,
so that a measurement's ``sol_fraction`` is the share of the bound that real kernel reaches.

A bound holds under the condition the kernel ran in: a cold row (caches flushed) is bounded by
DRAM, a warm row by the cache hierarchy (:func:`dse.roofline.memory_time`). A sparse kernel is
charged only the rows of X its nonzeros read: the row's own ``input_read_share`` where its mask
was recorded, else the format's expected share under a random mask."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

import formats
import workloads
from workloads.conv import out_positions, read_positions

from ..roofline import Numerics, evaluate_layers, memory_time

__all__ = ["bound_columns", "cold_reference", "row_features", "sol_columns", "sol_from_layers"]


def sol_from_layers(layers: pd.DataFrame) -> dict[str, tuple[float, str, float, float]]:
    """Per op of ``dse.evaluate_layers`` rows: (time, bound, FLOPs, DRAM bytes)."""
    return {row.op: (row.time_s, row.bound, row.flops, row.dram_bytes)
            for row in layers.itertuples(index=False)}


def sol_columns(frame: pd.DataFrame, hw, value_dtype: str = "tf32", vector_dtype: str = "fp32",
                csr_dtype: str = "fp32", features: np.ndarray | None = None,
                weight_dtype: str | None = None,
                weight_group_size: int | None = None) -> pd.DataFrame:
    """Fill ``hw, sol_s, sol_bound, flops, bytes, sol_fraction`` of GEMM rows from their own
    columns (m, k, n, groups, format, index_dtype), by dse's roofline (unfused, scope all) on a
    one-op trace per row. ``features``: ``[rows, 2]`` input and output elements of each row
    (default ``groups * k * n`` and ``groups * m * n``). ``weight_dtype``,
    ``weight_group_size``: weight-only quantised weights (:class:`dse.roofline.Numerics`).
    Rows with an error or family ``vector`` keep what they have."""
    out = frame.copy()
    for column in ("sol_s", "flops", "bytes", "sol_fraction"):
        if column not in out:
            out[column] = np.nan
    for column in ("sol_bound", "hw"):
        if column not in out:
            out[column] = ""
    gemm = out["family"] != "vector"
    caches = _conditions(out)
    read = (out["input_read_share"].to_numpy(dtype=float) if "input_read_share" in out
            else np.full(len(out), np.nan))
    if features is None:
        features = np.stack([out["groups"] * out["k"] * out["n"],
                             out["groups"] * out["m"] * out["n"]], axis=1)
    features = np.asarray(features, dtype=np.int64)
    width = out["index_dtype"].map({"int64": 8, "int16": 2}).fillna(4).astype(int)
    for (fmt, index_width, cache), group in out[gemm].groupby([out["format"], width, caches]):
        parsed = formats.parse(fmt)
        records = []
        for pos in group.index:
            row = out.loc[pos]
            i = out.index.get_loc(pos)
            record = {
                # "conv" for every row: conv and linear are priced alike (WEIGHT_GEMM_KINDS),
                # and the kind here only picks a trace check, that a linear reads all of the
                # model input, which a one-op trace of measured rows does not have.
                "name": f"op{pos}", "kind": "conv",
                "m": int(row["m"]), "k": int(row["k"]), "n": int(row["n"]),
                "groups": int(row["groups"]),
                "weight_elems": int(row["groups"] * row["m"] * row["k"]),
                "input_elems": int(features[i, 0]), "output_elems": int(features[i, 1]),
                "vector_flops": 0.0, "prunable": True, "producers": ["input"]}
            if parsed.takes_layer_density and np.isfinite(read[i]):
                # The row's own mask: the format's density with the exact share of X read.
                record |= {"density": parsed.density, "input_read_share": float(read[i])}
            records.append(record)
        trace = workloads.Trace.from_records("measured", [1], records)
        numerics = Numerics(dtype=value_dtype, vector_dtype=vector_dtype,
                            csr_dtype=csr_dtype, index_width_bytes=int(index_width),
                            weight_dtype=weight_dtype, weight_group_size=weight_group_size)
        layers = evaluate_layers(trace, hw, fmt, batches=1, fusion="unfused",
                                     scope="all", numerics=numerics, cache=cache)
        # evaluate_layers names the format canonically (unstructured@0.5 -> unstructured@50%)
        sol = sol_from_layers(layers[layers["format"] == parsed.name])
        for pos in group.index:
            time_s, bound, flops, dram = sol[f"op{pos}"]
            out.loc[pos, ["sol_s", "flops", "bytes"]] = [time_s, flops, dram]
            out.loc[pos, "sol_bound"] = bound
    out.loc[gemm, "hw"] = hw.name
    out["sol_fraction"] = out["sol_s"] / out["median_s"]
    return out


def _conditions(frame: pd.DataFrame) -> pd.Series:
    """Each row's cache condition: ``warm`` where it was timed warm, else ``cold``."""
    cache = frame["cache"].astype(str) if "cache" in frame else pd.Series("", index=frame.index)
    return cache.where(cache == "warm", "cold")


def bound_columns(frame: pd.DataFrame, hw, value_dtype: str = "tf32",
                  vector_dtype: str = "fp32", csr_dtype: str = "fp32",
                  features: np.ndarray | None = None, weight_dtype: str | None = None,
                  weight_group_size: int | None = None) -> pd.DataFrame:
    """Every row's bound under the condition it was timed in (``cache``: cold rows on DRAM, warm
    rows on the cache hierarchy of ``hw``): GEMM rows by :func:`sol_columns`, vector ops from
    their own ``flops`` and ``bytes`` (``max(FLOPs / vector peak, memory_time(bytes))``). Rows
    with an error keep what they have. ``hw`` should be a spec of physical peaks
    (``figures = "peak"``): on measured ceilings the result is no bound."""
    out = sol_columns(frame, hw, value_dtype, vector_dtype, csr_dtype, features,
                      weight_dtype, weight_group_size)
    vector = (out["family"] == "vector") & (out["error"].fillna("") == "")
    if vector.any():
        rows = out[vector]
        compute = rows["flops"].to_numpy(dtype=float) / hw.vector_rate(vector_dtype)
        nbytes = rows["bytes"].to_numpy(dtype=float)
        warm = (_conditions(rows) == "warm").to_numpy()
        memory = memory_time(nbytes, hw, "cold")
        if warm.any():  # only asked of a spec with cache levels when a row was timed warm
            memory[warm] = memory_time(nbytes[warm], hw, "warm")
        out.loc[vector, "sol_s"] = np.maximum(compute, memory)
        out.loc[vector, "sol_bound"] = np.where(memory > compute, "memory", "compute")
        out.loc[vector, "hw"] = hw.name
        out["sol_fraction"] = out["sol_s"] / out["median_s"]
    return out


_CONV_INPUT = re.compile(r"\binput (\d+)x(\d+)x(\d+)x(\d+)\b")
_CONV_WINDOW = re.compile(r"\bkernel (\d+)x\1 stride (\d+) padding (\d+)")


def row_features(frame: pd.DataFrame) -> np.ndarray:
    """Per row, the input and output elements its bound charges: a trace row's own op's tensors
    (times its batch: a k x k convolution reads its input, not the im2col matrix), a
    benchmarked convolution's input tensor (``input BxCxHxW`` in its note), else the GEMM's
    ``K x N`` and ``M x N`` per group."""
    features = np.stack([frame["groups"] * frame["k"] * frame["n"],
                         frame["groups"] * frame["m"] * frame["n"]], axis=1).astype(np.int64)
    traces: dict[str, pd.DataFrame] = {}
    notes = frame["note"].fillna("").astype(str) if "note" in frame \
        else pd.Series("", index=frame.index)
    for i, (row, note) in enumerate(zip(frame.itertuples(index=False), notes, strict=True)):
        geometry = _CONV_INPUT.search(note) if row.kind == "conv" else None
        if geometry and row.source != "trace":
            # A benchmarked convolution (benchmarks/gpu/collect) names its input tensor in its
            # note: its bound reads that tensor, not the im2col matrix groups x K x N, and of
            # it only the rows and columns some window covers (a stride longer than the
            # kernel skips the rest).
            batch, channels, height, width = (int(g) for g in geometry.groups())
            window = _CONV_WINDOW.search(note)
            if window:
                kernel, stride, padding = (int(g) for g in window.groups())
                height, width = (read_positions(size, out_positions(size, kernel, stride,
                                                                   padding),
                                                kernel, stride, padding)
                                 for size in (height, width))
            features[i, 0] = batch * channels * height * width
            continue
        if row.source != "trace" or not row.model or row.family in ("vector", "model"):
            continue
        if row.model not in traces:
            traces[row.model] = workloads.load_trace(row.model).ops.set_index("name")
        op = traces[row.model].loc[row.op]
        features[i] = (int(op["input_elems"]) * row.batch, int(op["output_elems"]) * row.batch)
    return features


def cold_reference(frame: pd.DataFrame, hw, value_dtype: str = "tf32",
                   vector_dtype: str = "fp32", csr_dtype: str = "fp32") -> np.ndarray:
    """Per row, the cold (DRAM) bound on ``hw``, whatever the condition the row ran in: the
    reference the kernel predictors learn their fraction of. The expectation prices every op
    from the cold bound of the hardware it is evaluated on, warm or cold being a feature, so
    training must use the same reference."""
    cold = frame.assign(cache="cold")
    return bound_columns(cold, hw, value_dtype, vector_dtype, csr_dtype,
                         features=row_features(cold))["sol_s"].to_numpy()
