"""Rows of dse's kernel dataset (:data:`dse.measure.dataset.SCHEMA`) as ``collect`` makes them:
the run's shared context (:class:`Bench`), one timed call turned into a cold and a warm row,
a library's refusal turned into an error row, and every row's speed of light on the run's spec
(dse's roofline, unfused, the op's own features, under the cache condition the row was timed
in)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from dse.measure.measure import blank_row, timing_row
from dse.roofline import Numerics

from .collect_timing import DeviceClock, Identity

__all__ = ["Bench", "error_row", "error_text", "numerics_for", "price_rows",
           "timed_rows", "vector_traffic"]

#: The dtypes kernels run in and are priced at: fp16 on the GPU (tensor cores); fp32 on the CPU,
#: priced on the spec's tf32 slot, which ``dse hw probe`` fills with the fp32 BLAS rate.
_NUMERICS = {"cuda": Numerics(dtype="fp16", vector_dtype="fp16", csr_dtype="fp32"),
             "cpu": Numerics(dtype="tf32", vector_dtype="fp32", csr_dtype="fp32")}


def numerics_for(device: str, hw) -> Numerics:
    """The numerics rows of ``device`` are priced at; ValueError naming the missing rate when
    ``hw`` cannot price them."""
    numerics = _NUMERICS[device]
    if hw is not None:
        for table, dtype in (("tensor_flops_per_s", numerics.dtype),
                             ("vector_flops_per_s", numerics.vector_dtype)):
            if dtype not in getattr(hw, table):
                raise ValueError(f"--hw {hw.name}: has no {table}.{dtype}, which {device} "
                                 "kernels are priced at; give a spec that has it (dse hw "
                                 "probe writes one for this machine)")
    return numerics


@dataclass
class Bench:
    """What every part of a run shares."""

    device: str  #: "cuda" or "cpu"
    smoke: bool  #: tiny shapes: exercise every path in seconds
    seed: int
    clock: DeviceClock | None  #: timing on the device (None where nothing is timed)
    base: dict  #: run_id, date, device, device_name, fingerprint, round
    hw: object | None  #: the Accelerator the speed of light is priced on (None: not priced)
    numerics: Numerics | None  #: what rows are priced at (None where nothing is priced)
    log: Callable[[str], None]
    scratch: dict = field(default_factory=dict)  #: a part's reusable objects, per part

    @property
    def torch(self):
        import torch

        return torch

    @property
    def dtype(self) -> str:
        return "fp16" if self.device == "cuda" else "fp32"

    @property
    def torch_dtype(self):
        torch = self.torch
        return torch.float16 if self.device == "cuda" else torch.float32

    @property
    def threads(self) -> int:
        return 1 if self.device == "cuda" else self.torch.get_num_threads()

    def generator(self, offset: int):
        """A seeded generator on the run's device (operands are made where they are used)."""
        return self.torch.Generator(device=self.device).manual_seed(self.seed + offset)


def error_text(exc: BaseException) -> str:
    """One line naming the exception (what the row's ``error`` column keeps)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300]


def error_row(bench: Bench, fields: dict, exc: BaseException | str) -> dict:
    """A configuration a library refused: no timings, the reason in ``error``."""
    row = blank_row(bench.base)
    row.update(fields)
    row.update({"cache": "cold", "dtype": fields.get("dtype") or bench.dtype,
                "error": exc if isinstance(exc, str) else error_text(exc)})
    return row


def timed_rows(bench: Bench, fn: Callable[[], object], fields: dict, call: str,
               identity: Identity, rel_err: float = float("nan"), note: str = "",
               caches: Sequence[str] = ("cold", "warm")) -> list[dict]:
    """Time ``fn`` once per cache state: one row each, carrying ``fields`` (the configuration),
    the library call ``call`` and what the profiler saw it run (``identity``; column
    ``kernel``), the host's issue time and back-to-back time (CUDA), and ``rel_err`` against
    the reference."""
    clock = bench.clock
    host_s = clock.host_call_s(fn)
    steady_s = clock.steady_s(fn)
    seen = " | ".join(identity.names)
    label = "kernels" if bench.device == "cuda" else "ops"
    kernel = f"{call}; {label}: {seen}" if seen else call
    notes = [note] if note else []
    if math.isfinite(identity.device_s):
        notes.append(f"prof_kernel_s={identity.device_s:.4g}")
    rows = []
    for cache in caches:
        timing = clock.time(fn, cache, host_s, bench.threads)
        row = blank_row(bench.base)
        row.update(fields)
        row.update(timing_row(timing))
        row.update({"cache": cache, "kernel": kernel[:500], "dtype": fields.get("dtype")
                    or bench.dtype, "host_call_s": host_s, "steady_s": steady_s,
                    "rel_err": rel_err, "note": "; ".join(notes)})
        rows.append(row)
    return rows


def vector_traffic(bench: Bench, kind: str, input_elems: int, output_elems: int,
                   weight_elems: int) -> float:
    """DRAM bytes dse charges a vector op of these element counts (each input, weight and
    output element once, at the run's vector dtype): a one-op trace priced unfused."""
    import workloads
    from dse.roofline import evaluate_layers

    record = {"name": "op", "kind": kind, "m": 0, "k": 0, "n": 0, "groups": 1,
              "weight_elems": int(weight_elems), "input_elems": int(input_elems),
              "output_elems": int(output_elems), "vector_flops": 0.0, "prunable": False,
              "producers": ["input"]}
    trace = workloads.Trace.from_records("collect", [int(input_elems)], [record])
    layer = evaluate_layers(trace, bench.hw, "dense", batches=1, fusion="unfused", scope="all",
                            numerics=bench.numerics).iloc[0]
    return float(layer["dram_bytes"])


def price_rows(bench: Bench, rows: list[dict],
               features: Sequence[tuple[int, int]] | None = None,
               numerics: Numerics | None = None) -> None:
    """Fill ``hw, sol_s, sol_bound, flops, bytes, sol_fraction`` of the timed kernel rows in
    place: each row's bound under the condition it was timed in (cold rows on DRAM, warm rows
    on the spec's cache hierarchy; :func:`dse.measure.sol.bound_columns`). GEMM and convolution
    rows are priced from their own columns, ``features`` giving per row the input and output
    elements the op really reads and writes (a convolution's, not its im2col matrix's); vector
    rows from their ``flops`` and ``bytes`` (:func:`vector_traffic`). A condition the spec
    cannot bound (warm, on a spec without cache levels) leaves those rows unpriced and says so
    in their ``note``. ``numerics``: what these rows are priced at, where not the run's
    (``dtype_gemm``'s bf16, fp8, int8 and weight-only rows)."""
    if bench.hw is None:
        return
    from dse.measure.sol import bound_columns
    from dse.roofline import CacheError

    n = numerics or bench.numerics
    narrow = {"weight_dtype": n.weight_dtype, "weight_group_size": n.weight_group_size}
    for cache in ("cold", "warm"):
        chosen = [i for i, r in enumerate(rows) if not r["error"] and r["cache"] == cache]
        if not chosen:
            continue
        frame = pd.DataFrame([rows[i] for i in chosen])
        feats = None if features is None else np.asarray([features[i] for i in chosen])
        columns = ("hw", "sol_s", "sol_bound", "flops", "bytes", "sol_fraction")
        try:
            priced = bound_columns(frame, bench.hw, n.dtype, n.vector_dtype, n.csr_dtype,
                                   features=feats, **narrow)
        except CacheError as exc:
            # FLOPs and DRAM bytes do not depend on the condition: keep them, leave the bound.
            reason = str(exc).split(";")[0]
            priced = bound_columns(frame.assign(cache="cold"), bench.hw, n.dtype,
                                   n.vector_dtype, n.csr_dtype, features=feats, **narrow)
            priced = priced.assign(hw="", sol_s=np.nan, sol_bound="", sol_fraction=np.nan)
            for i in chosen:
                rows[i]["note"] = "; ".join(p for p in (rows[i]["note"],
                                                        f"no {cache} bound: {reason}") if p)
        for i, record in zip(chosen, priced.to_dict(orient="records"), strict=True):
            rows[i].update({c: record[c] for c in columns})
