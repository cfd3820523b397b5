"""Energy, average power, energy-delay product and the power cap of evaluated designs.

The model (Choi et al., "A roofline model of energy", IPDPS 2013; the cap as in Choi et al.,
"Algorithmic time, energy, and power on candidate HPC compute building blocks", IPDPS 2014):

* **Dynamic energy** of a run (one batch) = sum over the ops in scope of
  ``FLOPs x pJ/FLOP`` of the unit that runs them (tensor core at ``numerics.dtype``, sparse
  tensor core per useful FLOP, vector cores at ``csr_dtype`` for CSR and at ``vector_dtype``
  for elementwise work) plus ``bytes x pJ/byte`` of the traffic: every byte in the roofline's
  count (weight values, index, features) crosses DRAM at ``dram_pj_per_byte``, and every byte an
  op reads or writes crosses the on-chip memories once at ``onchip_pj_per_byte`` (so fusion moves
  features from the DRAM price to the on-chip price only). By unit: ``energy_tensor_j``,
  ``energy_sparse_tensor_j``, ``energy_vector_j``; by traffic class: ``energy_weights_j``,
  ``energy_index_j``, ``energy_features_j`` (and the same traffic by level:
  ``energy_dram_j`` + ``energy_onchip_j``).
* **Static energy** = ``static_power_w x`` the (capped) latency.
* **Power cap.** A run may not draw more than ``board_power_w`` on average: with dynamic energy
  ``E_d`` and static power ``P_s`` it takes at least ``E_d / (board_power_w - P_s)``, so
  ``capped_latency_s = max(latency_s, E_d / (board_power_w - P_s))`` and ``power_capped`` says
  whether the cap set it; then ``avg_power_w == board_power_w``. The cap is applied to the whole
  design (not op by op), so it stays a bound: per-op capping could only be slower.
* Per run: ``energy_j = dynamic + static``; ``avg_power_w = energy_j / capped_latency_s``;
  ``edp_js = energy_j x capped_latency_s``; per inference (per sample):
  ``energy_per_inference_j = energy_j / batch``. ``energy_feature_share`` is the features'
  share of ``energy_j``, the energy counterpart of ``feature_bytes_share``.

Missing figures: a spec field left out (the catalog leaves out what no public figure supports)
prices its part at zero and ``energy_unpriced`` names it, so energy is then a lower bound (as
latency is); an unset ``sparse_tensor_pj_per_flop.<dtype>`` takes the dense tensor-core figure
of the dtype per useful FLOP, and ``energy_unpriced`` says so too. A spec with no energy figure
at all (:func:`has_energy_figures`; a spec from ``dse hw probe`` measures none) has no energy:
its rows' energy and power columns are NaN, never a zero that reads as a figure
(``energy_unpriced`` still names the fields it lacks).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import pandas as pd

import accelerator_models
from accelerator_models import Accelerator
from formats import Dense, Format
from formats import parse as parse_format
from workloads import Trace, load_trace

from .evaluator import DEFAULT_NUMERICS, evaluate, evaluate_layers
from .layer_sums import DESIGN_KEYS, LayerRows, design_sums, layer_rows, with_columns
from .numerics import Numerics
from .pricing import cache_read_elems, has_gemm_weights, weight_read_share, weight_sets

__all__ = ["DESIGN_KEYS", "ENERGY_COLUMNS", "NO_ENERGY_FIGURES", "TRAFFIC_SUMS",
           "accelerator_table", "designs_with_layers", "energy_columns", "energy_frame",
           "energy_from_sums", "evaluate_energy", "evaluate_layer_frames", "has_energy_figures",
           "op_figures", "op_traffic", "traffic_arrays", "traffic_columns"]

#: Columns :func:`energy_frame` adds, in order.
ENERGY_COLUMNS = (
    "energy_j", "energy_per_inference_j", "avg_power_w", "edp_js", "power_capped",
    "capped_latency_s", "energy_tensor_j", "energy_sparse_tensor_j", "energy_vector_j",
    "energy_weights_j", "energy_index_j", "energy_features_j", "energy_dram_j",
    "energy_onchip_j", "energy_static_j", "energy_feature_share", "energy_unpriced",
)

#: What a table shows for the energy of a design on a spec without energy figures (NaN).
NO_ENERGY_FIGURES = "n/a (spec has no energy figures)"

PJ = 1e-12


def accelerator_table(hardware: Accelerator | Sequence[Accelerator]) -> dict[str, Accelerator]:
    """Accelerators by name (the ``hardware`` column of a frame); names must be unique."""
    accs = [hardware] if isinstance(hardware, Accelerator) else list(hardware)
    table: dict[str, Accelerator] = {}
    for acc in accs:
        if not isinstance(acc, Accelerator):
            raise TypeError(f"expected accelerator_models.Accelerator, got {type(acc).__name__}; "
                            "load names with accelerator_models.load")
        if acc.name in table and table[acc.name] != acc:
            raise ValueError(f"two different accelerators are both named {acc.name!r}")
        table[acc.name] = acc
    return table


def op_traffic(layers: pd.DataFrame, trace: Trace, numerics: Numerics) -> pd.DataFrame:
    """``layers`` (from ``evaluate_layers`` with the same ``trace`` and ``numerics``) with, per
    row, in units of the run (the whole batch), the columns of :func:`traffic_columns`."""
    out = layers.copy()
    for column, values in traffic_columns(layers, trace, numerics).items():
        out[column] = values
    return out


@lru_cache(maxsize=64)
def op_figures(trace: Trace) -> dict[str, np.ndarray]:
    """Per op of ``trace`` (read-only, read once per trace), what :func:`traffic_columns` reads:
    the GEMM shape, the weights, the layer's density, the features, the vector work and the
    KV-cache reads."""
    ops = trace.ops
    figures = {c: ops[c].to_numpy(dtype=np.float64, copy=True)
               for c in ("m", "k", "groups", "weight_elems", "density", "input_elems",
                         "output_elems", "vector_flops")}
    figures.update(prunable=ops["prunable"].to_numpy(dtype=bool, copy=True),
                   weight_sets=weight_sets(trace), gemm_weights=has_gemm_weights(ops),
                   cache_read=cache_read_elems(trace))
    for values in figures.values():
        values.flags.writeable = False
    return figures


def traffic_columns(layers: pd.DataFrame, trace: Trace, numerics: Numerics,
                    op: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per row of ``layers`` (as for :func:`op_traffic`), in units of the run (the whole
    batch), by name:

    ``tensor_flops``, ``sparse_tensor_flops``, ``csr_flops`` (the op's useful GEMM FLOPs by the
    unit that ran them), ``elementwise_flops`` (its vector work: norms, activations, bias adds),
    ``value_bytes`` and ``index_bytes`` (``weight_bytes`` split; biases and the scales of
quantised weights count as values),
    ``feature_dram_bytes`` (``dram_bytes - weight_bytes``: the features the fusion model sends
    through DRAM) and ``feature_onchip_bytes`` (every feature the op reads or writes: all of
    them cross the on-chip memories once, whatever the fusion model). ``op``: each row's
    position in ``trace.ops``, where known (:class:`~dse.roofline.layer_sums.LayerRows`).
    """
    ops = trace.ops
    j = pd.Index(ops["name"]).get_indexer(layers["op"].astype(str)) if op is None else op
    if (j < 0).any():
        missing = layers["op"].astype(str)[j < 0].iloc[0]
        raise ValueError(f"op {missing!r} is not in trace {trace.model!r}; pass the trace the "
                         "layers were evaluated on")
    # Stored nonzeros where the op runs the format's values (own kernel or the CSR fallback of
    # the same nonzeros); dense storage where it stays dense (shape or dense hw fallback).
    names = layers["format"].astype(str).to_numpy(dtype=object)
    own = ~np.isin(layers["fallback"].astype(str).to_numpy(dtype=object), ["shape", "hw:dense"])
    formats = []
    for name in pd.unique(names):
        fmt = parse_format(name)
        if not isinstance(fmt, Dense):
            formats.append((fmt, (names == name) & own))
    unit = layers["unit"].astype(str).to_numpy(dtype=object)
    return traffic_arrays(trace, numerics, j, layers["batch"].to_numpy(dtype=np.float64),
                          formats, unit == "tensor", unit == "sparse_tensor", unit == "vector",
                          layers["flops"].to_numpy(dtype=np.float64),
                          layers["weight_bytes"].to_numpy(dtype=np.float64),
                          layers["dram_bytes"].to_numpy(dtype=np.float64))


def traffic_arrays(trace: Trace, numerics: Numerics, j: np.ndarray, batch: np.ndarray,
                   formats: Sequence[tuple[Format, np.ndarray]], tensor: np.ndarray,
                   sparse_tensor: np.ndarray, vector: np.ndarray, flops: np.ndarray,
                   weight_bytes: np.ndarray, dram_bytes: np.ndarray) -> dict[str, np.ndarray]:
    """:func:`traffic_columns` of layer rows given as arrays: per row, ``j`` its op's position
    in ``trace.ops``, ``batch`` (float64), ``tensor``, ``sparse_tensor``, ``vector`` whether
    its unit is that one, and its ``flops``, ``weight_bytes`` and ``dram_bytes``; ``formats``:
    per sparse format among the rows, the rows that run its values (those of the format whose
    fallback is neither ``shape`` nor ``hw:dense``)."""
    per_op = op_figures(trace)
    vb = float(numerics.value_bytes)
    wb = float(numerics.weight_value_bytes)
    m, k, g = (per_op[c][j] for c in ("m", "k", "groups"))
    gw = g * per_op["weight_sets"][j]  # GEMM weight matrices stored: groups x experts
    scales = np.where(per_op["gemm_weights"][j], gw * numerics.scale_bytes(m, k), 0.0)
    weight_elems = per_op["weight_elems"][j]
    layer_density = per_op["density"][j]
    prunable = per_op["prunable"][j]
    values = weight_bytes.copy()
    # The share of the stored weights a step reads (below 1 for an MoE's untouched experts).
    share = weight_read_share(trace, j, batch)
    share = 1.0 if share is None else share
    for fmt, own in formats:
        rows = own & prunable
        density = np.full(len(rows), fmt.density)
        if fmt.takes_layer_density:
            density = np.where(np.isnan(layer_density), density, layer_density)
        stored = vb * (weight_elems - gw * m * k) + wb * gw * fmt.nnz(m, k, density) + scales
        values = np.where(rows, stored * share, values)
    features = per_op["input_elems"][j] + per_op["output_elems"][j]
    # KV-cache reads (a language model's decode) are stored at the KV dtype.
    cached = per_op["cache_read"][j]
    return {
        "tensor_flops": np.where(tensor, flops, 0.0),
        "sparse_tensor_flops": np.where(sparse_tensor, flops, 0.0),
        "csr_flops": np.where(vector, flops, 0.0),
        "elementwise_flops": per_op["vector_flops"][j] * batch,
        "value_bytes": values,
        # Index = what the storage holds beyond its values; rounding can leave -1e-9 for dense.
        "index_bytes": np.maximum(weight_bytes - values, 0.0),
        "feature_dram_bytes": dram_bytes - weight_bytes,
        "feature_onchip_bytes": (vb * features + (numerics.kv_value_bytes - vb) * cached) * batch,
    }


#: The per-op traffic each design's energy sums, in :func:`energy_columns`' order.
TRAFFIC_SUMS = ("tensor_flops", "sparse_tensor_flops", "csr_flops", "elementwise_flops",
                "value_bytes", "index_bytes", "feature_dram_bytes", "feature_onchip_bytes")


def _design_sums(designs: pd.DataFrame, layers: pd.DataFrame, trace: Trace,
                 numerics: Numerics, rows: LayerRows) -> dict[str, np.ndarray]:
    """Per row of ``designs``: the op sums of :data:`TRAFFIC_SUMS` over its layers."""
    traffic = traffic_columns(layers, trace, numerics, rows.op)
    sums = design_sums(np.column_stack([traffic[c] for c in TRAFFIC_SUMS]), rows)
    missing = np.flatnonzero(np.isnan(sums).any(axis=1))
    if len(missing):
        row = designs.iloc[missing[0]]
        raise ValueError("no layers for design "
                         + ", ".join(f"{k}={row[k]}" for k in DESIGN_KEYS)
                         + "; evaluate the layers of every design (evaluate_layer_frames)")
    return {c: sums[:, i] for i, c in enumerate(TRAFFIC_SUMS)}


def _figure(acc: Accelerator, path: str, work: np.ndarray, gaps: np.ndarray, rows: np.ndarray,
            note: str = "") -> float | None:
    """The figure at ``path``, or None; where it is unset, the rows in ``rows`` with ``work``
    get ``path`` (and ``note``) appended to their ``gaps``."""
    value = acc.field_value(path)
    if value is None:
        label = f"{path} ({note})" if note else path
        for i in np.flatnonzero(rows & (work > 0)):
            gaps[i].append(label)
    return value


def has_energy_figures(acc: Accelerator) -> bool:
    """Whether ``acc`` has any energy figure (a pJ per FLOP or per byte, or a static power):
    without one, :func:`energy_frame` prices nothing and gives NaN, not 0 J."""
    return (any(v is not None for v in (acc.dram_pj_per_byte, acc.onchip_pj_per_byte,
                                        acc.static_power_w))
            or bool(acc.tensor_pj_per_flop or acc.sparse_tensor_pj_per_flop
                    or acc.vector_pj_per_flop))


def energy_frame(designs: pd.DataFrame, layers: pd.DataFrame, trace: Trace | str,
                 hardware: Accelerator | Sequence[Accelerator],
                 numerics: Numerics = DEFAULT_NUMERICS) -> pd.DataFrame:
    """``designs`` (from ``evaluate``) with :data:`ENERGY_COLUMNS` added (see the module).

    ``layers``: ``evaluate_layers`` rows of every design (all its fusion models and scopes; see
    :func:`evaluate_layer_frames`), same trace and numerics; ``hardware``: the accelerators
    the designs name. Energies in joules per run (the whole batch; ``energy_per_inference_j``
    per sample);
    power in watts; ``edp_js`` in joule-seconds.
    """
    trace = trace if isinstance(trace, Trace) else load_trace(trace)
    accs = accelerator_table(hardware)
    rows = layer_rows(designs, layers, trace)
    return with_columns(designs, energy_columns(designs, layers, trace, accs, numerics, rows))


def energy_columns(designs: pd.DataFrame, layers: pd.DataFrame, trace: Trace,
                   accs: dict[str, Accelerator], numerics: Numerics,
                   rows: LayerRows) -> dict[str, np.ndarray]:
    """:data:`ENERGY_COLUMNS` of :func:`energy_frame`, by name, per row of ``designs``;
    ``accs``: :func:`accelerator_table`; ``rows``: ``layer_rows(designs, layers, trace)``."""
    s = _design_sums(designs, layers, trace, numerics, rows)
    return energy_from_sums(s, designs["hardware"].astype(str).to_numpy(dtype=object),
                            designs["latency_s"].to_numpy(dtype=np.float64),
                            designs["batch"].to_numpy(dtype=np.float64), accs, numerics)


def energy_from_sums(s: dict[str, np.ndarray], hw_names: np.ndarray, latency: np.ndarray,
                     batch: np.ndarray, accs: dict[str, Accelerator],
                     numerics: Numerics) -> dict[str, np.ndarray]:
    """:func:`energy_columns` from each design's op sums ``s`` (by name, as
    :func:`traffic_columns` names them), its hardware's name, ``latency_s`` and batch
    (float64)."""
    n = len(hw_names)
    cols = {c: np.zeros(n) for c in ("e_tensor", "e_sparse", "e_csr", "e_vector", "dram",
                                    "onchip", "static", "board")}
    gaps = np.empty(n, dtype=object)
    for i in range(n):
        gaps[i] = []
    unknown = np.zeros(n, dtype=bool)  # rows on a spec with no energy figure at all
    traffic = s["value_bytes"] + s["index_bytes"] + s["feature_onchip_bytes"]
    always = np.ones(n)
    dt, cd, vd = numerics.dtype, numerics.csr_dtype, numerics.vector_dtype
    for name in dict.fromkeys(hw_names.tolist()):
        if name not in accs:
            raise ValueError(f"designs name hardware {name!r}, which is not among the "
                             "accelerators given; pass every accelerator evaluated")
        acc = accs[name]
        rows = hw_names == name
        if not has_energy_figures(acc):
            unknown |= rows
        tensor_work = s["tensor_flops"] + s["sparse_tensor_flops"]
        figures = {
            "e_tensor": _figure(acc, f"tensor_pj_per_flop.{dt}", tensor_work, gaps, rows),
            "e_csr": _figure(acc, f"vector_pj_per_flop.{cd}", s["csr_flops"], gaps, rows),
            "e_vector": _figure(acc, f"vector_pj_per_flop.{vd}", s["elementwise_flops"], gaps,
                                rows),
            "dram": _figure(acc, "dram_pj_per_byte", traffic, gaps, rows),
            "onchip": _figure(acc, "onchip_pj_per_byte", traffic, gaps, rows),
            "static": _figure(acc, "static_power_w", always, gaps, rows),
        }
        # The sparse tensor core's own figure, else the dense one per useful FLOP.
        figures["e_sparse"] = _figure(acc, f"sparse_tensor_pj_per_flop.{dt}",
                                      s["sparse_tensor_flops"], gaps, rows,
                                      note="dense tensor figure used")
        if figures["e_sparse"] is None:
            figures["e_sparse"] = figures["e_tensor"]
        for column, value in figures.items():
            cols[column][rows] = 0.0 if value is None else value
        cols["board"][rows] = np.nan if acc.board_power_w is None else acc.board_power_w
    unpriced = np.array(["; ".join(g) for g in gaps], dtype=object)
    tensor = PJ * s["tensor_flops"] * cols["e_tensor"]
    sparse = PJ * s["sparse_tensor_flops"] * cols["e_sparse"]
    vector = PJ * (s["csr_flops"] * cols["e_csr"] + s["elementwise_flops"] * cols["e_vector"])
    per_byte = PJ * (cols["dram"] + cols["onchip"])
    weights = s["value_bytes"] * per_byte
    index = s["index_bytes"] * per_byte
    features = PJ * (s["feature_dram_bytes"] * cols["dram"]
                     + s["feature_onchip_bytes"] * cols["onchip"])
    dram = PJ * cols["dram"] * (s["value_bytes"] + s["index_bytes"] + s["feature_dram_bytes"])
    onchip = PJ * cols["onchip"] * (s["value_bytes"] + s["index_bytes"]
                                    + s["feature_onchip_bytes"])
    dynamic = tensor + sparse + vector + weights + index + features
    headroom = cols["board"] - cols["static"]
    with np.errstate(invalid="ignore"):
        capped_at = np.where(np.isnan(headroom), 0.0, dynamic / headroom)
    capped = capped_at > latency
    capped_latency = np.where(capped, capped_at, latency)
    static = cols["static"] * capped_latency
    energy = dynamic + static
    new = {
        "energy_j": energy,
        "energy_per_inference_j": energy / batch,
        "avg_power_w": energy / capped_latency,
        "edp_js": energy * capped_latency,
        "power_capped": capped,
        "capped_latency_s": capped_latency,
        "energy_tensor_j": tensor,
        "energy_sparse_tensor_j": sparse,
        "energy_vector_j": vector,
        "energy_weights_j": weights,
        "energy_index_j": index,
        "energy_features_j": features,
        "energy_dram_j": dram,
        "energy_onchip_j": onchip,
        "energy_static_j": static,
        "energy_feature_share": np.divide(features, energy, out=np.full(n, np.nan),
                                          where=energy > 0),
        "energy_unpriced": unpriced,
    }
    if unknown.any():  # no figure priced anything: unknown, not 0 J (latency stays as is)
        for column, values in new.items():
            if column.startswith(("energy_", "avg_power", "edp")) and column != "energy_unpriced":
                new[column] = np.where(unknown, np.nan, values)
    return {column: new[column] for column in ENERGY_COLUMNS}


def evaluate_layer_frames(trace: Trace, hardware: Sequence[Accelerator],
                          formats: Sequence[Format | str], batches: Sequence[int],
                          fusions: Sequence[str], scopes: Sequence[str],
                          numerics: Numerics = DEFAULT_NUMERICS) -> pd.DataFrame:
    """``evaluate_layers`` of every fusion model and scope, concatenated: the ``layers`` that
    :func:`energy_frame` and :func:`dse.roofline.memory.memory_frame` take."""
    frames = [evaluate_layers(trace, list(hardware), list(formats), list(batches), fusion=f,
                              scope=s, numerics=numerics)
              for f in dict.fromkeys(fusions) for s in dict.fromkeys(scopes)]
    return pd.concat(frames, ignore_index=True)


def _listed(value) -> list:
    return [value] if isinstance(value, str | int | Format | Accelerator) else list(value)


def designs_with_layers(trace: Trace | str, hardware, formats, batches=1,
                        fusion: str | Sequence[str] = "unfused",
                        scope: str | Sequence[str] = "gemm",
                        numerics: Numerics = DEFAULT_NUMERICS):
    """``(trace, accelerators, designs, layers)``: ``dse.evaluate``'s designs and the per-op
    frames of every one of them, what the energy and memory models read."""
    trace = trace if isinstance(trace, Trace) else load_trace(trace)
    accs = [h if isinstance(h, Accelerator) else accelerator_models.load(h)
            for h in _listed(hardware)]
    fusions, scopes = _listed(fusion), _listed(scope)
    designs = evaluate(trace, accs, formats, batches, fusion=fusions, scope=scopes,
                       numerics=numerics)
    layers = evaluate_layer_frames(trace, accs, _listed(formats), _listed(batches), fusions,
                                   scopes, numerics)
    return trace, accs, designs, layers


def evaluate_energy(trace: Trace | str, hardware, formats, batches=1,
                    fusion: str | Sequence[str] = "unfused", scope: str | Sequence[str] = "gemm",
                    numerics: Numerics = DEFAULT_NUMERICS) -> pd.DataFrame:
    """``dse.evaluate``'s designs with :data:`ENERGY_COLUMNS`; arguments as ``dse.evaluate``."""
    trace, accs, designs, layers = designs_with_layers(trace, hardware, formats, batches,
                                                       fusion, scope, numerics)
    return energy_frame(designs, layers, trace, accs, numerics)
