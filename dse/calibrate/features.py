"""What a kernel predictor sees of a configuration: its predictor key (the kernel family) and
the numeric features of the shape, shared by training (dataset rows) and application
(``evaluate_layers`` rows), so both sides compute them the same way."""

from __future__ import annotations

import functools
import re

import numpy as np
import pandas as pd

__all__ = ["ALIGN_MAX", "FEATURES", "IMAGE_CHANNELS", "IMPL", "KEYS", "OWN_VECTOR_KINDS", "TILE",
           "channel_alignment", "conv_kind", "copy_kind", "row_balance",
           "family_key", "feature_kind", "feature_matrix", "fp32_kind", "kind_code",
           "strided_kind", "training_rows", "usable_rows", "vector_key", "with_conv_inputs",
           "with_feature_kinds", "with_norm_widths"]

#: Predictor keys: one predictor per (device, key); ``block{b}`` per block size, and
#: ``vector_{kind}`` for each of :data:`OWN_VECTOR_KINDS` (:func:`vector_key`).
KEYS = ("gemm", "gemm_fp32", "conv", "grouped_conv", "nm", "block", "csr", "vector")

#: The output tile (rows x columns of Y) a GEMM kernel pads to: 128 x 128 on a GPU (CUTLASS
#: and cuBLAS's common tile), 16 x 16 on a CPU (a register block of AVX-512 micro-kernels).
TILE = {"cuda": 128, "cpu": 16}

_KINDS = {"linear": 0, "conv": 1, "matmul": 2, "norm": 3, "activation": 4, "elementwise": 5,
          "softmax": 6, "reduce": 7, "pool": 8, "other": 9, "other:roll": 10, "other:pad": 11,
          "other:gather": 12, "conv:image": 13, "matmul:fp32": 14, "softmax:fp32": 15,
          "elementwise:strided": 16}

#: Feature columns, in matrix order. Logs are natural logs of positive values (1 added to
#: counts that may be 0). ``waves``: tiles / compute units; ``wave_eff``: useful share of the
#: last wave; ``pad_eff``: useful share of the tile-padded output; ``warm``: 1 for a kernel
#: timed without the cache flush (``dse measure --warm``), as inside a model, else 0 (added
#: last, so predictors trained before it keep their feature indices). A convolution's
#: geometry, which its GEMM view (m = C_out, k = C_in / groups x kernel area, n = batch x output
#: pixels) hides, from the elements of its input (:func:`with_conv_inputs`):
#: ``log_input_per_out``, input elements per output pixel (C_in x stride^2);
#: ``log_window``, K x groups over that (kernel area / stride^2: 1 for a 1x1 or a patchify
#: convolution, 9 for a 3x3 of stride 1); ``log_batch``; all 0 for other ops and for rows
#: whose input is unknown (added after ``warm``, for the same reason). Its window itself
#: (:func:`with_conv_inputs`): ``log_kernel_size`` and ``log_stride``, the kernel's side and
#: the stride (logs of 1 + each), from a benchmarked convolution's note or a trace op's
#: ``kernel_size`` and ``stride``; 0 for other ops and where not recorded (added after those).
#: Its channel alignment (:func:`channel_alignment`): ``cin_align`` and ``cout_align``, the
#: largest power of two up to :data:`ALIGN_MAX` dividing the input and the output channels of
#: a group (C_in / groups from K over the window's area, C_out / groups: the GEMM view's m),
#: which decide the vector width and the kernels cuDNN can run (NHWC kernels load 8 halves
#: at a time); 0 for other ops (added after those).
#: A block-sparse or CSR product's load balance under a random mask (:func:`row_balance`):
#: ``log_row_imbalance``, the expected fullest block-row's nonzero blocks over the mean;
#: ``log_row_depth``, that fullest row's blocks (the serial work of the slowest CTA);
#: ``log_sparse_waves``, the waves of block-row x output-tile CTAs over the compute units;
#: 0 for other ops, N:M included (its rows are balanced by construction) (added last).
FEATURES = ("log_m", "log_k", "log_n", "log_groups", "sparsity", "block", "log_flops",
            "log_bytes", "log_intensity", "log_waves", "wave_eff", "pad_eff", "kind", "impl",
            "warm", "log_input_per_out", "log_window", "log_batch", "log_kernel_size",
            "log_stride", "cin_align", "cout_align", "log_row_imbalance", "log_row_depth",
            "log_sparse_waves")

#: The largest channel alignment the features tell apart (``cin_align``, ``cout_align``).
ALIGN_MAX = 256

#: Column of the implementation code (set per implementation when predicting the fastest).
IMPL = FEATURES.index("impl")

#: Input channels up to which a convolution counts as reading an image (``conv:image``): with
#: 3 channels cuDNN runs ViT's patch embedding without tensor cores, 6-10x slower than a
#: ConvNeXt downsampling of the same GEMM view and bytes (H100, benchmarks/gpu/collect).
IMAGE_CHANNELS = 4

#: Data movement (kind ``other``) that runs far from a plain copy's speed, by the op's name:
#: a roll (2-4x slower than a permute made contiguous on an H100), a pad, a gather.
_COPIES = {"roll": "other:roll", "constant_pad_nd": "other:pad", "pad": "other:pad",
           "index": "other:gather", "gather": "other:gather", "index_select": "other:gather"}
_OP_SUFFIX = re.compile(r"_\d+$")


def copy_kind(kind: str, name: str) -> str:
    """``kind``, told apart for data movement by the op's name (a trace op's
    ``layers.0.blocks.1.roll_2`` or a benchmarked row's ``roll``): ``other:roll``,
    ``other:pad``, ``other:gather``, or ``other`` for copies (clone, contiguous, cat)."""
    if kind != "other":
        return kind
    last = _OP_SUFFIX.sub("", str(name).rsplit(".", 1)[-1])
    return _COPIES.get(last, "other")


def kind_code(kind: str) -> int:
    """A small integer per op kind (unknown kinds share one code with ``other``)."""
    return _KINDS.get(str(kind), 9)


#: Vector kinds priced by a predictor of their own (:func:`vector_key`): data movement (copies,
#: rolls, pads, gathers), softmax and the add of a transposed view. On an H100 they run at
#: sustained speeds far from the other vector ops' (a gather of 16-element rows 0.1 TB/s, a
#: roll 0.45, a contiguous add 2.5) and reach them at other sizes; under the one floor and
#: ceiling of all vector ops, the residual trees' steps between the sizes measured missed
#: them. Norms, activations, elementwise ops, pools and reductions keep one predictor
#: (``vector``): split apart too, each alone extrapolated worse to the whole models whose
#: shapes were held out (ResNet-50's batch norms and max pool, never timed on the H100, are
#: priced by it).
OWN_VECTOR_KINDS = ("other", "other:roll", "other:pad", "other:gather", "softmax",
                    "softmax:fp32", "elementwise:strided")


def vector_key(kind: str) -> str:
    """The predictor of a vector op of ``kind`` (as :func:`feature_kind` tells kinds apart):
    ``vector_other_roll``, ``vector_softmax_fp32`` for :data:`OWN_VECTOR_KINDS`, else
    ``vector``. Predictors trained before the split (one ``vector`` predictor, the CPU's)
    price every kind with it (:func:`dse.calibrate.expected.expected_layers`)."""
    if str(kind) in OWN_VECTOR_KINDS:
        return "vector_" + str(kind).replace(":", "_")
    return "vector"


def family_key(family: str, kind: str, groups: int, block: int) -> str:
    """The predictor that prices a kernel: dense GEMMs split into plain GEMM (linear, matmul),
    fp32 products of an fp16 device (``gemm_fp32``), convolution and grouped/depthwise
    convolution; N:M; block, one predictor per block size
    (``block16``); CSR; vector ops (:func:`vector_key`)."""
    if family == "vector":
        return vector_key(kind)
    if family == "nm":
        return "nm"
    if family == "block":
        return f"block{int(block)}"
    if family == "unstructured":
        return "csr"
    if kind in ("conv", "conv:image"):
        return "grouped_conv" if groups > 1 else "conv"
    if kind == "matmul:fp32":
        # fp32 products on a device whose runs are fp16 (no fp16 tensor cores): 5-7x the fp16
        # GEMMs' time at the same shape; a predictor of their own, not outliers of the GEMMs'.
        return "gemm_fp32"
    return "gemm"


def feature_matrix(frame: pd.DataFrame, units: int, tile: int) -> np.ndarray:
    """Features of each row of ``frame`` (columns m, k, n, groups, sparsity, block, flops,
    bytes, kind; n is the GEMM's N in all, or a vector op's output elements; k a norm's width,
    see :func:`with_norm_widths`), for a device
    with ``units`` SMs or cores and output tile ``tile``: shape ``[rows, len(FEATURES)]``."""
    m = frame["m"].to_numpy(dtype=float)
    k = frame["k"].to_numpy(dtype=float)
    n = frame["n"].to_numpy(dtype=float)
    groups = np.maximum(frame["groups"].to_numpy(dtype=float), 1.0)
    flops = np.maximum(frame["flops"].to_numpy(dtype=float), 1.0)
    moved = np.maximum(frame["bytes"].to_numpy(dtype=float), 1.0)
    gemm = m > 0
    rows = np.where(gemm, m, 1.0)
    tiles_m = np.ceil(rows / tile)
    tiles_n = np.ceil(np.maximum(n, 1.0) / (tile if tile > 1 else 1))
    tiles = np.where(gemm, groups * tiles_m * tiles_n, np.ceil(np.maximum(n, 1.0) / 4096))
    waves = tiles / units
    wave_eff = tiles / (np.ceil(waves) * units)
    pad_eff = np.where(gemm, (rows * n) / (tiles_m * tile * tiles_n * tile), 1.0)
    kinds = frame["kind"].map(kind_code).to_numpy(dtype=float) if "kind" in frame \
        else np.zeros(len(frame))
    impl = frame["impl"].to_numpy(dtype=float) if "impl" in frame else np.zeros(len(frame))
    warm = (frame["cache"].astype(str) == "warm").to_numpy(dtype=float) if "cache" in frame \
        else np.zeros(len(frame))
    per_out, window, batch = _conv_geometry(frame, gemm, k * groups, n)
    kernel_size, stride = _conv_window(frame, gemm)
    cin_align, cout_align = channel_alignment(frame, gemm, kernel_size)
    imbalance, depth, sparse_waves = row_balance(frame, units, tile)
    return np.column_stack([
        np.log1p(m), np.log1p(k), np.log1p(n), np.log(groups),
        np.nan_to_num(frame["sparsity"].to_numpy(dtype=float)),
        frame["block"].to_numpy(dtype=float),
        np.log(flops), np.log(moved), np.log(flops / moved), np.log(waves), wave_eff,
        np.clip(pad_eff, 0.0, 1.0), kinds, impl, warm, np.log1p(per_out), np.log1p(window),
        np.log1p(batch), np.log1p(kernel_size), np.log1p(stride), cin_align, cout_align,
        imbalance, depth, sparse_waves,
    ])


def row_balance(frame: pd.DataFrame, units: int,
                tile: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of a block-sparse (``key`` ``block{b}``) or CSR (``csr``, blocks of 1) product
    under a random mask of density d = 1 - sparsity: each of the m / b block-rows holds
    Binomial(k / b, d) nonzero blocks, mean mu = k d / b, deviation sigma =
    sqrt(k d (1 - d) / b); the fullest of R = m / b rows holds about
    mu + sigma sqrt(2 ln R) (the expected maximum of R normal draws), and a kernel that gives
    each block-row (times an output tile of ``tile`` columns of N) to one CTA waits for it.
    Returns the logs of that maximum over mu (the imbalance), of the maximum (the slowest
    CTA's serial work) and of the waves of CTAs over ``units``; zeros for other rows."""
    zeros = np.zeros(len(frame))
    if "key" not in frame:
        return zeros, zeros, zeros
    key = frame["key"].astype(str)
    sparse = (key.str.startswith("block") | (key == "csr")).to_numpy(dtype=bool, copy=True)
    m = frame["m"].to_numpy(dtype=float)
    k = frame["k"].to_numpy(dtype=float)
    n = np.maximum(frame["n"].to_numpy(dtype=float), 1.0)
    density = 1.0 - np.clip(np.nan_to_num(frame["sparsity"].to_numpy(dtype=float)), 0.0, 1.0)
    sparse &= (m > 0) & (density > 0)
    b = np.maximum(frame["block"].to_numpy(dtype=float), 1.0)
    per_row = np.maximum(k / b, 1.0)
    mean = np.maximum(per_row * density, 1e-9)
    spread = np.sqrt(per_row * density * (1.0 - density))
    rows = np.maximum(m / b, 1.0)
    ratio = 1.0 + spread / mean * np.sqrt(2.0 * np.log(np.maximum(rows, 2.0)))
    ctas = rows * np.ceil(n / max(tile, 1))
    return (np.where(sparse, np.log(ratio), 0.0), np.where(sparse, np.log1p(mean * ratio), 0.0),
            np.where(sparse, np.log(np.ceil(ctas / max(units, 1))), 0.0))


def _power_of_two_divisor(values: np.ndarray) -> np.ndarray:
    """The largest power of two up to :data:`ALIGN_MAX` dividing each whole value (1 for an
    odd one, or one that is not whole)."""
    whole = np.where(np.isclose(values, np.round(values)), np.round(values), 1.0)
    out = np.ones(len(values))
    step = 2
    while step <= ALIGN_MAX:
        out = np.where((whole >= step) & (np.mod(whole, step) == 0), float(step), out)
        step *= 2
    return out


def channel_alignment(frame: pd.DataFrame, gemm: np.ndarray,
                      kernel_size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the largest power of two (up to :data:`ALIGN_MAX`) dividing a convolution's
    input channels per group (K over the window's area ``kernel_size^2``; K itself where the
    window is not recorded or does not divide it, as a non-square one's largest side may not)
    and its output channels per group (the GEMM view's m); 0 for other ops. A trace op and
    a benchmarked row of the same convolution get the same values: both carry m, k, groups
    and the window (:func:`with_conv_inputs`)."""
    zeros = np.zeros(len(frame))
    if "kind" not in frame:
        return zeros, zeros
    conv = gemm & frame["kind"].isin(_CONV_KINDS).to_numpy()
    k = frame["k"].to_numpy(dtype=float)
    m = frame["m"].to_numpy(dtype=float)
    area = kernel_size * kernel_size
    fits = (area > 0) & np.isclose(np.mod(k, np.where(area > 0, area, 1.0)), 0.0)
    cin = np.where(fits, k / np.where(area > 0, area, 1.0), k)
    return (np.where(conv, _power_of_two_divisor(cin), 0.0),
            np.where(conv, _power_of_two_divisor(m), 0.0))


_CONV_KINDS = ("conv", "conv:image")


def _conv_geometry(frame: pd.DataFrame, gemm: np.ndarray, window_k: np.ndarray,
                   n: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: input elements per output pixel, kernel area per stride^2 (``window_k``: K x
    groups, over the former) and batch, for convolutions whose ``input_elems`` (over the
    batch) is known; zeros elsewhere."""
    zeros = np.zeros(len(frame))
    if "input_elems" not in frame or "kind" not in frame:
        return zeros, zeros, zeros
    inputs = frame["input_elems"].to_numpy(dtype=float)
    known = gemm & frame["kind"].isin(_CONV_KINDS).to_numpy() & (inputs > 0) & (n > 0)
    per_out = np.where(known, inputs / np.where(known, n, 1.0), 0.0)
    window = np.where(known, window_k / np.where(known, per_out, 1.0), 0.0)
    batch = frame["batch"].to_numpy(dtype=float) if "batch" in frame else zeros
    return per_out, window, np.where(known, batch, 0.0)


def _conv_window(frame: pd.DataFrame, gemm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: a convolution's kernel side and stride where recorded (``kernel_size``,
    ``stride``, :func:`with_conv_inputs`); zeros elsewhere."""
    zeros = np.zeros(len(frame))
    if "kind" not in frame:
        return zeros, zeros
    conv = gemm & frame["kind"].isin(_CONV_KINDS).to_numpy()
    out = []
    for column in ("kernel_size", "stride"):
        values = frame[column].to_numpy(dtype=float) if column in frame else zeros
        out.append(np.where(conv & (values > 0), values, 0.0))
    return out[0], out[1]


_CONV_GEOMETRY = re.compile(
    r"\binput \d+x\d+x\d+x\d+, (?:\d+ out, )?kernel \d+x\d+ stride \d+")


def kernel_variant(rows: pd.DataFrame) -> pd.Series:
    """What tells apart two benchmarked kernels that share their GEMM view (``kind, m, k, n,
    groups``), so that neither is taken for a repeat of the other: a benchmarked vector op's
    name (GELU and ReLU over the same elements are different kernels), a benchmarked
    convolution's input geometry from its note (a stride-2 convolution of a 4x larger input
    has the same GEMM view as a stride-1 one); empty elsewhere. Rows of a model trace
    (``source`` ``trace``) share it: the same shape in two layers is the same kernel."""
    out = pd.Series("", index=rows.index, dtype=object)
    if "source" not in rows:
        return out
    bench = rows["source"].astype(str) == "benchmark"
    vector = bench & (rows["family"].astype(str) == "vector")
    out[vector] = rows.loc[vector, "op"].astype(str)
    conv = bench & (rows["kind"].astype(str) == "conv") & ~vector
    if conv.any() and "note" in rows:
        found = rows.loc[conv, "note"].fillna("").astype(str).str.extract(
            f"({_CONV_GEOMETRY.pattern})", expand=False)
        out[conv] = found.fillna("")
    return out


_CONV_INPUT = re.compile(r"\binput \d+x(\d+)x\d+x\d+,")


#: A trace op that runs in fp32 on a device whose run is fp16: torch's math attention path
#: casts q, k and v up and runs both products and the softmax in fp32
#: (workloads.backend.torch_math_attention names them ``...sdpa_math.scores_fp32`` etc.).
_FP32_OP = re.compile(r"\.sdpa_math\.\w+_fp32$")
_FP32_KINDS = ("matmul", "softmax")


def fp32_kind(kind: str, name: str) -> str:
    """``kind``, an fp32 product or softmax of an fp16 run told apart by the op's name
    (``matmul:fp32``, ``softmax:fp32``)."""
    if kind in _FP32_KINDS and _FP32_OP.search(str(name)):
        return f"{kind}:fp32"
    return kind


#: The names of an elementwise op that reads a transposed view: a trace op renamed by
#: ``workloads.backend.torch_strided_adds`` (``blocks.0.add.strided``) or a benchmarked row of
#: part ``strided_add`` (``add_strided``).
_STRIDED_NAMES = ("strided", "add_strided")


def strided_kind(kind: str, name: str) -> str:
    """``kind``, an elementwise op reading a transposed view told apart by its name
    (``elementwise:strided``): the residual add after a 2:4 linear runs up to 6x slower than
    the contiguous add of the same elements (H100, ``benchmarks/gpu/collect``)."""
    if kind == "elementwise" and str(name).rsplit(".", 1)[-1] in _STRIDED_NAMES:
        return "elementwise:strided"
    return kind


def feature_kind(kind: str, name: str, image_channels: int = 0) -> str:
    """The kind a trace op is priced as: :func:`copy_kind`, :func:`fp32_kind`,
    :func:`strided_kind` and, for a convolution reading an input of ``image_channels``,
    :func:`conv_kind`."""
    return conv_kind(strided_kind(fp32_kind(copy_kind(kind, name), name), name),
                     image_channels)


def conv_kind(kind: str, input_channels: int) -> str:
    """``kind``, a convolution of at most :data:`IMAGE_CHANNELS` input channels told apart
    (``conv:image``): the predictors see it as a kind of its own."""
    if kind == "conv" and 0 < input_channels <= IMAGE_CHANNELS:
        return "conv:image"
    return kind


def with_feature_kinds(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with the kinds the predictors tell apart: data movement by its op name
    (:func:`copy_kind`), a benchmarked add of a transposed view by its op name
    (:func:`strided_kind`), a benchmarked convolution of few input channels by the input its
    note records (:func:`conv_kind`), an fp32 product or softmax timed on a GPU (whose runs
    are fp16) by its ``dtype`` (:func:`fp32_kind`)."""
    kind = rows["kind"].astype(str)
    blank = pd.Series("", index=rows.index)
    column = lambda name: rows[name].astype(str) if name in rows else blank  # noqa: E731
    other = kind == "other"
    conv = (kind == "conv") & ("note" in rows)
    fp32 = kind.isin(_FP32_KINDS) & (column("dtype") == "fp32") & (column("device") == "cuda")
    strided = (kind == "elementwise") & column("op").isin(_STRIDED_NAMES)
    if not (other.any() or conv.any() or fp32.any() or strided.any()):
        return rows
    rows = rows.copy()
    if strided.any():
        rows.loc[strided, "kind"] = "elementwise:strided"
    if fp32.any():
        rows.loc[fp32, "kind"] = rows.loc[fp32, "kind"].astype(str) + ":fp32"
    if other.any():
        rows.loc[other, "kind"] = [copy_kind("other", name) for name in rows.loc[other, "op"]]
    if conv.any():
        channels = pd.to_numeric(rows.loc[conv, "note"].fillna("").astype(str).str.extract(
            _CONV_INPUT, expand=False), errors="coerce").fillna(0).astype(int)
        rows.loc[conv, "kind"] = [conv_kind("conv", c) for c in channels]
    return rows


_NORM_WIDTH = re.compile(r"\bover C=(\d+)")


def with_norm_widths(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with each norm op's ``k`` set to the width it normalises over
    (:func:`workloads.norm_width`), where a row recorded none (``k`` 0): a benchmarked norm's
    from its note (``layer norm over C=384``), a trace row's from its trace op. A norm's time
    depends on that width as well as on its size (a row of 96 halves keeps few threads busy),
    so the predictors see it as the op's K, as a GEMM's reduction length."""
    need = (rows["kind"].astype(str) == "norm") & (rows["k"] == 0)
    if not need.any():
        return rows
    rows = rows.copy()
    notes = rows.loc[need, "note"].fillna("").astype(str) if "note" in rows \
        else pd.Series("", index=rows.index[need])
    found = notes.str.extract(_NORM_WIDTH, expand=False)
    width = pd.to_numeric(found, errors="coerce")
    if "source" in rows and "model" in rows:
        import workloads

        traced = need & (rows["source"].astype(str) == "trace") & width.reindex(
            rows.index).isna()
        ops: dict[str, pd.DataFrame] = {}
        for pos in rows.index[traced]:
            found = _trace_ops(str(rows.at[pos, "model"]), ops)
            op = str(rows.at[pos, "op"])
            if op in found.index:
                width[pos] = workloads.norm_width(op, int(found.at[op, "weight_elems"]))
    rows.loc[need, "k"] = width.fillna(0).astype("int64").to_numpy()
    return rows


_CONV_INPUT_SHAPE = re.compile(r"\binput (\d+)x(\d+)x(\d+)x(\d+),")
#: A benchmarked convolution's window in its note (kept in ``variant``): ``kernel 3x3 stride 1``.
_CONV_WINDOW = re.compile(r"\bkernel (\d+)x(\d+) stride (\d+)")


def _trace_ops(model: str, cache: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The ops of a shipped model's trace by name (empty for a model without one), loaded
    once per ``cache``."""
    import workloads

    if model not in cache:
        try:
            cache[model] = workloads.load_trace(model).ops.set_index("name")
        except workloads.TraceError:
            cache[model] = pd.DataFrame()
    return cache[model]


_CONV_PADDED = re.compile(r"\bkernel (\d+)x(\d+) stride (\d+) padding (\d+)\b")


@functools.lru_cache(maxsize=4096)
def _read_plane(height: float, width: float, kh: str | float, kw: str | float,
                stride: str | float, padding: str | float) -> tuple[float, float]:
    """The rows and columns of a ``height x width`` input that some window of a convolution
    reads (:func:`workloads.conv.read_positions`; all of them unless the stride outruns the
    kernel, as in ResNet's strided 1x1 shortcuts); the input's own where not known."""
    from workloads.conv import out_positions, read_positions

    known = not any(pd.isna(v) for v in (height, width, kh, kw, stride, padding))
    if not known:
        return height, width
    s, p = int(stride), int(padding)
    return tuple(float(read_positions(int(size), out_positions(int(size), int(k), s, p),
                                      int(k), s, p))
                 for size, k in ((height, kh), (width, kw)))


def with_conv_inputs(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with ``input_elems``: the elements of a convolution's input over the batch
    (N x C_in x H x W) that its windows read, which the geometry features read
    (:data:`FEATURES`): a benchmarked convolution's from the input its note records (kept in
    ``variant``) and, where the note gives the padding, only the rows and columns a window
    covers (what a trace op's ``input_elems`` counts; a 1x1 of stride 2 reads a quarter of its
    input), a trace row's from its trace op (per sample) times the row's batch; 0 for other
    rows and where unknown.
    And ``kernel_size`` and ``stride``, the convolution's window (its largest side): a
    benchmarked one's from its note (``kernel 3x3 stride 1``), a trace row's from its trace
    op's (:data:`workloads.OPTIONAL`), as the expectation prices that op
    (:func:`dse.calibrate.expected.op_configs`); 0 for other rows and where not recorded."""
    rows = rows.assign(input_elems=0.0, kernel_size=0.0, stride=0.0)
    conv = rows["kind"].astype(str).isin(_CONV_KINDS) & (rows["m"] > 0)
    if not conv.any():
        return rows
    variant = rows.loc[conv, "variant"].astype(str)
    shapes = variant.str.extract(_CONV_INPUT_SHAPE).astype(float)
    if "note" in rows:  # of the input, what some window reads, as a trace op's input_elems
        padded = rows.loc[conv, "note"].fillna("").astype(str).str.extract(_CONV_PADDED)
        shapes[[2, 3]] = [_read_plane(*shape, *window) for shape, window in zip(
            shapes[[2, 3]].itertuples(index=False), padded.itertuples(index=False),
            strict=True)]
    rows.loc[conv, "input_elems"] = shapes.prod(axis=1, skipna=False).fillna(0.0).to_numpy()
    window = variant.str.extract(_CONV_WINDOW).astype(float).fillna(0.0)
    rows.loc[conv, "kernel_size"] = window[[0, 1]].max(axis=1).to_numpy()
    rows.loc[conv, "stride"] = window[2].to_numpy()
    if "source" in rows and "model" in rows:
        ops: dict[str, pd.DataFrame] = {}
        traced = conv & (rows["source"].astype(str) == "trace")
        for pos in rows.index[traced]:
            found = _trace_ops(str(rows.at[pos, "model"]), ops)
            op = str(rows.at[pos, "op"])
            if op not in found.index:
                continue
            if rows.at[pos, "input_elems"] == 0 and "batch" in rows:
                rows.at[pos, "input_elems"] = float(found.at[op, "input_elems"]) * float(
                    rows.at[pos, "batch"])
            if rows.at[pos, "kernel_size"] == 0 and "kernel_size" in found:
                rows.at[pos, "kernel_size"] = float(found.at[op, "kernel_size"])
                rows.at[pos, "stride"] = float(found.at[op, "stride"])
    return rows


def usable_rows(dataset: pd.DataFrame) -> pd.DataFrame:
    """The kernel timings predictors may learn from (:func:`training_rows` says which and
    why), before repeats are merged."""
    rows = dataset[(dataset["error"] == "") & (dataset["family"] != "model")]
    # A busy host slows a CPU kernel; a GPU kernel, timed by device events behind a spin, keeps
    # its time (the host's load only delays its launch), so GPU rows are kept whatever it was.
    gpu = rows["device"].astype(str).eq("cuda") if "device" in rows \
        else pd.Series(False, index=rows.index)
    rows = rows[rows["idle"].fillna(True).astype(bool) | gpu]
    rows = rows[rows["median_s"] <= 1.5 * rows["min_s"]]
    rows = with_norm_widths(rows.assign(variant=kernel_variant(rows)))
    rows = with_conv_inputs(with_feature_kinds(rows))
    rows = rows[~rows["implementation"].str.contains("algsearch")]
    # Frames built by hand may lack the run columns: one run, one round, cold caches.
    rows = rows.assign(**{c: v for c, v in (("run_id", ""), ("round", 0), ("cache", "cold"),
                                                             ("batch", 0))
                          if c not in rows.columns})
    return rows.assign(cache=rows["cache"].astype(str).replace("", "cold"))


def training_rows(dataset: pd.DataFrame) -> pd.DataFrame:
    """The rows predictors learn from, one per implementation and configuration: timed rows
    (no error, no whole models); CPU rows measured while other processes kept the machine
    busy (``idle == False``) dropped, since a shared core slows a kernel by up to its share
    and that is not the kernel's own time; rows whose median exceeds 1.5x their minimum (a
    transient stall the timing could not hide) dropped; implementations that search
    algorithms per shape (cuSPARSELt's ``algsearch``) left out, since a library call does not;
    repeats of one implementation and configuration merged: the fastest round of a run (the
    rounds of ``dse measure --rounds``, minutes apart, see :mod:`dse.measure.measure`: a round
    that ran while the shared host was slow is not the kernel's time), then the median over
    runs. Adds ``key``
    (:func:`family_key`), ``shape`` (the weight matrix: ``m x k x groups``; a vector op's kind
    and size), ``time_s`` and ``impl`` (the implementation's index in its family's sorted
    list)."""
    rows = usable_rows(dataset)
    rows["sparsity"] = rows["sparsity"].fillna(0.0)
    rows["key"] = [family_key(f, k, g, b) for f, k, g, b in zip(
        rows["family"], rows["kind"], rows["groups"], rows["block"], strict=True)]
    config = ["key", "format", "kind", "m", "k", "n", "groups", "sparsity", "block", "cache",
              "variant"]
    kernel = config + ["implementation"]
    # A configuration's input, batch and window (for a convolution's geometry,
    # with_conv_inputs) are those of its first row: rows of one GEMM view from two layers
    # share the kernel.
    same = {c: (c, "first") for c in ("sol_s", "flops", "bytes")}
    shape = {c: (c, "first") for c in ("input_elems", "batch", "kernel_size", "stride")}
    rounds = rows.groupby(kernel + ["run_id", "round"], as_index=False, observed=True).agg(
        median_s=("median_s", "median"), **same, **shape)
    runs = rounds.groupby(kernel + ["run_id"], as_index=False, observed=True).agg(
        median_s=("median_s", "min"), **same, rounds=("round", "size"), **shape)
    out = runs.groupby(kernel, as_index=False, observed=True).agg(
        time_s=("median_s", "median"), **same, runs=("median_s", "size"),
        rounds=("rounds", "sum"), **shape)
    out["implementation"] = out["implementation"].astype(str)
    out["impl"] = 0
    for _, group in out.groupby("key"):
        names = sorted(group["implementation"].unique())
        out.loc[group.index, "impl"] = group["implementation"].map(names.index)
    out["shape"] = np.where(out["m"] > 0,
                            out["m"].astype(str) + "x" + out["k"].astype(str) + "x"
                            + out["groups"].astype(str),
                            out["kind"].astype(str) + ":" + out["n"].astype(str))
    return out[np.isfinite(out["sol_s"]) & (out["sol_s"] > 0)].reset_index(drop=True)
