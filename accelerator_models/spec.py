"""The accelerator specification: frozen dataclasses with units in every field name.

Rates are peak FLOP/s (FLOPs, never MACs) of the dense units; the sparse tensor core is described
separately by the N:M patterns it runs and the rate at which it processes nonzeros, so dense and
sparse rates are never mixed in one number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Accelerator",
    "BlockSparse",
    "CACHE_LEVELS",
    "CacheLevel",
    "ENERGY_TABLES",
    "FIGURES",
    "SpecError",
    "SparseTensorCore",
    "TENSOR_DTYPES",
    "VECTOR_DTYPES",
]

#: Tensor-core datatypes a spec may give a rate for (int8 is OP/s).
TENSOR_DTYPES = ("fp16", "bf16", "tf32", "fp8", "int8")
#: Vector (CUDA-core / SIMD) datatypes a spec may give a rate for.
VECTOR_DTYPES = ("fp32", "fp16", "bf16")
#: Per-dtype energy tables (pJ per useful FLOP) and the dtypes each one takes.
ENERGY_TABLES = {"tensor_pj_per_flop": TENSOR_DTYPES,
                 "sparse_tensor_pj_per_flop": TENSOR_DTYPES,
                 "vector_pj_per_flop": VECTOR_DTYPES}


#: Cache levels a spec may describe, fastest first (``[cache]`` table: ``l1_bytes``,
#: ``l1_bandwidth_bytes_per_s``, ...). Capacities and bandwidths are totals over the cores or SMs
#: a run uses.
CACHE_LEVELS = ("l1", "l2", "l3")
#: What a spec's rates are: ``peak`` (datasheet or cores x clock x width: a bound no run beats)
#: or ``ceiling`` (the best a probe measured: some runs beat it, so what it gives is no bound).
FIGURES = ("peak", "ceiling")


class SpecError(ValueError):
    """A hardware spec, name or override that cannot be used; the message names input and fix."""


@dataclass(frozen=True)
class SparseTensorCore:
    """Structured-sparse tensor core.

    ``nonzero_rate`` is the rate at which useful (nonzero) FLOPs run, as a multiple of the dense
    tensor-core peak of the same dtype: 1.0 means "the same tensor-core throughput", so 2:4 runs
    twice as fast as dense on compute (the marketed 2x) and 1:4 four times as fast.
    """

    patterns: tuple[tuple[int, int], ...]  # (N, M) pairs
    nonzero_rate: float


@dataclass(frozen=True)
class BlockSparse:
    """Block-sparse (BSR) kernels on the ordinary tensor cores.

    At the speed of light any block size runs at the dense peak per useful FLOP
    (``min_block_size = 1``); a larger minimum models the MMA tile granularity. Blocks smaller
    than the minimum, or any block when unsupported, fall back to the fastest kernel available.
    """

    supported: bool
    min_block_size: int


@dataclass(frozen=True)
class CacheLevel:
    """One level of the cache hierarchy: its capacity and the peak bandwidth at which it
    delivers data to the units (both summed over the cores or SMs)."""

    name: str
    capacity_bytes: float
    bandwidth_bytes_per_s: float


@dataclass(frozen=True)
class Accelerator:
    """One accelerator, real or hypothetical. Build it with :func:`accelerator_models.load`."""

    name: str
    description: str
    dram_bandwidth_bytes_per_s: float
    tensor_flops_per_s: dict[str, float]
    vector_flops_per_s: dict[str, float]
    block_sparse: BlockSparse
    sparse_tensor: SparseTensorCore | None = None
    # On-chip sizes and launch cost: optional, because the roofline evaluator never reads them;
    # the event-level simulator (dse.sim.simulate) does, and says which one is missing.
    sm_count: int | None = None
    shared_memory_per_sm_bytes: float | None = None
    l2_bytes: float | None = None
    kernel_launch_overhead_s: float | None = None
    #: The cache hierarchy, fastest level first (empty: only DRAM is known). Read by the warm
    #: bound (``dse.roofline.memory_time``); a cold run is bounded by DRAM alone.
    cache_levels: tuple[CacheLevel, ...] = ()
    #: ``peak`` or ``ceiling`` (:data:`FIGURES`): whether the roofline on this spec is a bound.
    figures: str = "peak"
    # Energy, power and capacity: optional, read by dse.roofline.energy and dse.roofline.memory
    # only (the latency bound never reads them). Energy per useful FLOP per dtype, per byte moved
    # to or from DRAM and through the on-chip memories (L2 / shared memory), the static power
    # drawn while a design runs, the board power limit (TDP) and the DRAM capacity.
    dram_pj_per_byte: float | None = None
    onchip_pj_per_byte: float | None = None
    tensor_pj_per_flop: dict[str, float] = field(default_factory=dict)
    #: Per useful (nonzero) FLOP on the structured-sparse tensor core.
    sparse_tensor_pj_per_flop: dict[str, float] = field(default_factory=dict)
    vector_pj_per_flop: dict[str, float] = field(default_factory=dict)
    static_power_w: float | None = None
    board_power_w: float | None = None
    dram_capacity_bytes: float | None = None
    aliases: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    unverified: tuple[str, ...] = ()
    #: ``FIELD=VALUE`` overrides applied on top of the file (``--set``), in order.
    overrides: tuple[str, ...] = field(default=())
    #: Where the figures come from (the optional ``[provenance]`` table, e.g. written by
    #: ``dse hw probe``): descriptive only, never read by a model and not compared.
    provenance: dict[str, Any] = field(default_factory=dict, compare=False)

    def field_value(self, path: str):
        """The value of the field at ``path`` (a key of :data:`accelerator_models.FIELDS`, e.g.
        ``"tensor_pj_per_flop.fp16"``); None where the spec leaves an optional field out."""
        head, dot, tail = path.partition(".")
        if not dot:
            return getattr(self, path)
        if head == "sparse_tensor":
            return None if self.sparse_tensor is None else getattr(self.sparse_tensor, tail)
        if head == "block_sparse":
            return getattr(self.block_sparse, tail)
        if head == "cache":
            level, _, what = tail.partition("_")
            found = [c for c in self.cache_levels if c.name == level]
            if not found:
                return None
            return (found[0].capacity_bytes if what == "bytes"
                    else found[0].bandwidth_bytes_per_s)
        return getattr(self, head).get(tail)

    def __getattr__(self, name: str):
        # Dotted paths of the per-dtype energy tables, so that code reading any field with
        # getattr(acc, path) (`dse hw show`) reads these too. Only called when normal lookup fails.
        head, dot, _ = name.partition(".")
        if dot and (head in ENERGY_TABLES or head == "cache"):
            return self.field_value(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def tensor_rate(self, dtype: str) -> float:
        """Dense tensor-core peak in FLOP/s for ``dtype``."""
        return self._rate("tensor_flops_per_s", dtype)

    def vector_rate(self, dtype: str) -> float:
        """Vector-core peak in FLOP/s for ``dtype``."""
        return self._rate("vector_flops_per_s", dtype)

    def _rate(self, table: str, dtype: str) -> float:
        rates = getattr(self, table)
        if dtype in rates:
            return rates[dtype]
        have = ", ".join(sorted(rates)) or "none"
        raise SpecError(f"hardware {self.name!r} has no {table}.{dtype} (it has: {have}); "
                        f"pick one of those dtypes or --set {table}.{dtype}=VALUE")

    @property
    def is_bound(self) -> bool:
        """Whether this spec's roofline is a bound (peak figures) rather than a ceiling."""
        return self.figures == "peak"

    def supports_nm(self, n: int, m: int) -> bool:
        """Whether the sparse tensor core runs the N:M pattern natively."""
        return self.sparse_tensor is not None and (n, m) in self.sparse_tensor.patterns

    @property
    def nonzero_rate(self) -> float:
        return self.sparse_tensor.nonzero_rate if self.sparse_tensor is not None else 0.0

    def supports_block(self, block: int) -> bool:
        """Whether b x b block-sparse kernels run on the tensor cores."""
        return self.block_sparse.supported and block >= self.block_sparse.min_block_size

    def on_chip_bytes(self, buffer: str) -> float:
        """Bytes of the on-chip buffer ``buffer``: ``"smem"`` (shared memory summed over all
        SMs) or ``"l2"``. Raises :class:`SpecError` naming the field when the spec lacks it."""
        if buffer == "smem":
            per_sm = self._on_chip_field("shared_memory_per_sm_bytes")
            return per_sm * self._on_chip_field("sm_count")
        if buffer == "l2":
            return self._on_chip_field("l2_bytes")
        raise SpecError(f"unknown on-chip buffer {buffer!r}; use \"smem\" or \"l2\"")

    def _on_chip_field(self, name: str) -> float:
        value = getattr(self, name)
        if value is None:
            raise SpecError(f"hardware {self.name!r} has no {name}; set it in the spec or with "
                            f"--set {name}=VALUE, or pass --buffer-bytes")
        return value
