"""The speed of light of measured kernels: dse's own roofline of each measured configuration,
so that a measurement's ``sol_fraction`` is the share of the bound that real kernel reaches."""

from __future__ import annotations

import numpy as np
import pandas as pd

import workloads

from ..roofline import Numerics, evaluate_layers

__all__ = ["sol_columns", "sol_from_layers"]


def sol_from_layers(layers: pd.DataFrame) -> dict[str, tuple[float, str, float, float]]:
    """Per op of ``dse.evaluate_layers`` rows: (time, bound, FLOPs, DRAM bytes)."""
    return {row.op: (row.time_s, row.bound, row.flops, row.dram_bytes)
            for row in layers.itertuples(index=False)}


def sol_columns(frame: pd.DataFrame, hw, value_dtype: str = "tf32", vector_dtype: str = "fp32",
                csr_dtype: str = "fp32", features: np.ndarray | None = None) -> pd.DataFrame:
    """Fill ``hw, sol_s, sol_bound, flops, bytes, sol_fraction`` of GEMM rows from their own
    columns (m, k, n, groups, format, index_dtype), by dse's roofline (unfused, scope all) on a
    one-op trace per row. ``features``: ``[rows, 2]`` input and output elements of each row
    (default ``groups * k * n`` and ``groups * m * n``). Rows with an error or family
    ``vector`` keep what they have."""
    out = frame.copy()
    for column in ("sol_s", "flops", "bytes", "sol_fraction"):
        if column not in out:
            out[column] = np.nan
    for column in ("sol_bound", "hw"):
        if column not in out:
            out[column] = ""
    gemm = out["family"] != "vector"
    if features is None:
        features = np.stack([out["groups"] * out["k"] * out["n"],
                             out["groups"] * out["m"] * out["n"]], axis=1)
    features = np.asarray(features, dtype=np.int64)
    width = out["index_dtype"].map({"int64": 8, "int16": 2}).fillna(4).astype(int)
    for (fmt, index_width), group in out[gemm].groupby([out["format"], width]):
        records = []
        for pos in group.index:
            row = out.loc[pos]
            i = out.index.get_loc(pos)
            records.append({
                "name": f"op{pos}", "kind": "conv" if row["groups"] > 1 else "linear",
                "m": int(row["m"]), "k": int(row["k"]), "n": int(row["n"]),
                "groups": int(row["groups"]),
                "weight_elems": int(row["groups"] * row["m"] * row["k"]),
                "input_elems": int(features[i, 0]), "output_elems": int(features[i, 1]),
                "vector_flops": 0.0, "prunable": True, "producers": ["input"]})
        trace = workloads.Trace.from_records("measured", [1], records)
        numerics = Numerics(dtype=value_dtype, vector_dtype=vector_dtype,
                                csr_dtype=csr_dtype, index_width_bytes=int(index_width))
        layers = evaluate_layers(trace, hw, fmt, batches=1, fusion="unfused",
                                     scope="all", numerics=numerics)
        sol = sol_from_layers(layers[layers["format"] == fmt])
        for pos in group.index:
            time_s, bound, flops, dram = sol[f"op{pos}"]
            out.loc[pos, ["sol_s", "flops", "bytes"]] = [time_s, flops, dram]
            out.loc[pos, "sol_bound"] = bound
    out.loc[gemm, "hw"] = hw.name
    out["sol_fraction"] = out["sol_s"] / out["median_s"]
    return out
