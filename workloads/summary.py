"""What a trace is made of: ops, FLOPs and DRAM bytes by op kind, and the prunable share."""

from __future__ import annotations

import pandas as pd

from .trace import Trace

__all__ = ["kind_summary", "prunable_shares"]


def _op_figures(trace: Trace, value_bytes: int) -> pd.DataFrame:
    o = trace.ops
    gemm_flops = 2.0 * o["m"] * o["k"] * o["n"] * o["groups"]
    return pd.DataFrame({
        "kind": o["kind"],
        "prunable": o["prunable"],
        "flops": gemm_flops + o["vector_flops"],
        "weight_bytes": value_bytes * o["weight_elems"],
        "feature_bytes": value_bytes * (o["input_elems"] + o["output_elems"]),
        "params": o["weight_elems"],
    })


def kind_summary(trace: Trace, value_bytes: int = 2) -> pd.DataFrame:
    """Per op kind, at batch 1, dense, unfused (every feature through DRAM): op count, FLOPs,
    DRAM bytes (weights + features) and their shares of the model's."""
    figures = _op_figures(trace, value_bytes)
    figures["bytes"] = figures["weight_bytes"] + figures["feature_bytes"]
    table = figures.groupby("kind", sort=False).agg(
        ops=("flops", "size"), flops=("flops", "sum"), bytes=("bytes", "sum"))
    table["flops_share"] = table["flops"] / table["flops"].sum()
    table["bytes_share"] = table["bytes"] / table["bytes"].sum()
    return table.sort_values("flops", ascending=False).reset_index()


def prunable_shares(trace: Trace, value_bytes: int = 2) -> dict[str, float]:
    """Shares of parameters, FLOPs and DRAM bytes (batch 1, dense, unfused) in prunable ops."""
    f = _op_figures(trace, value_bytes)
    bytes_ = f["weight_bytes"] + f["feature_bytes"]
    p = f["prunable"]
    return {"params": float(f.loc[p, "params"].sum() / max(f["params"].sum(), 1)),
            "flops": float(f.loc[p, "flops"].sum() / f["flops"].sum()),
            "bytes": float(bytes_[p].sum() / bytes_.sum())}
