"""One contract suite for every format, parametrized over a registry of examples."""

from __future__ import annotations

import math

import numpy as np
import pytest

import accelerator_models
import formats
from formats import NM, Block, Dense, Format, FormatError, Unit, Unstructured

EXAMPLES: dict[str, Format] = {
    "dense": Dense(),
    "2:4": NM(2, 4),
    "1:4": NM(1, 4),
    "2:8": NM(2, 8),
    "2:16": NM(2, 16),
    "3:7": NM(3, 7),
    "block1@50%": Block(1, 0.5),
    "block4@87.5%": Block(4, 0.875),
    "block64@96.875%": Block(64, 0.96875),
    "unstructured@0%": Unstructured(0.0),
    "unstructured@90%": Unstructured(0.9),
}
M = np.array([1, 4, 10, 16, 64, 96, 1024])
K = np.array([9, 27, 64, 128, 256, 384, 3072])


@pytest.fixture(params=list(EXAMPLES), ids=list(EXAMPLES))
def fmt(request) -> Format:
    return EXAMPLES[request.param]


def test_name_round_trips(fmt):
    assert formats.parse(fmt.name) == fmt
    assert str(fmt) == fmt.name


def test_density_and_sparsity(fmt):
    assert 0.0 < fmt.density <= 1.0
    assert fmt.sparsity == pytest.approx(1.0 - fmt.density)


def test_counts_follow_density(fmt):
    assert np.allclose(fmt.nnz(M, K), fmt.density * M * K)
    assert np.allclose(fmt.value_bytes(M, K, 2), 2 * fmt.density * M * K)
    assert np.allclose(fmt.useful_flops(M, K, 7), 2 * fmt.density * M * K * 7)


def test_vectorized_methods_match_scalars(fmt):
    applies = fmt.applies_to(M, K)
    index = fmt.index_bytes(M, K, 4)
    for i, (m, k) in enumerate(zip(M, K, strict=True)):
        assert bool(fmt.applies_to(int(m), int(k))) == bool(applies[i])
        assert float(fmt.index_bytes(int(m), int(k), 4)) == pytest.approx(index[i])


def test_index_bytes_nonnegative_and_zero_only_for_dense(fmt):
    index = fmt.index_bytes(M, K, 4)
    assert (index >= 0).all()
    assert (index == 0).all() == isinstance(fmt, Dense)


def test_unit_matches_family(fmt):
    expected = {"dense": Unit.TENSOR, "block": Unit.TENSOR, "nm": Unit.SPARSE_TENSOR,
                "unstructured": Unit.VECTOR}
    assert fmt.unit == expected[fmt.family]


def test_native_support(fmt):
    plain = accelerator_models.load("v100")  # no sparse tensor core
    nm_gpu = accelerator_models.load("a100", ["sparse_tensor.patterns=2:4,1:4,2:8,2:16,3:7",
                                              "block_sparse.min_block_size=16"])
    no_blocks = accelerator_models.load("a100", ["block_sparse.supported=false"])
    if isinstance(fmt, Dense | Unstructured):
        assert fmt.runs_natively_on(plain) and fmt.runs_natively_on(nm_gpu)
    elif isinstance(fmt, NM):
        assert not fmt.runs_natively_on(plain)
        assert fmt.runs_natively_on(nm_gpu)
    else:
        assert fmt.runs_natively_on(plain)  # min_block_size 1 at the speed of light
        assert fmt.runs_natively_on(nm_gpu) == (fmt.block >= 16)
        assert not fmt.runs_natively_on(no_blocks)


# --- per-family rules ---------------------------------------------------------------------


@pytest.mark.parametrize("n, m, bits", [(2, 4, 2), (1, 4, 2), (2, 8, 3), (1, 2, 1), (2, 16, 4),
                                        (3, 7, 3), (8, 32, 5)])
def test_nm_index_is_ceil_log2_m_bits_per_nonzero(n, m, bits):
    fmt = NM(n, m)
    assert fmt.index_bits_per_nonzero == bits == math.ceil(math.log2(m))
    assert fmt.index_bytes(64, 64, 4) == pytest.approx(64 * 64 * n / m * bits / 8)


def test_nm_needs_k_divisible_by_m():
    assert list(NM(2, 4).applies_to(np.array([3, 3, 3]), np.array([8, 9, 12]))) == [
        True, False, True]


def test_block_needs_m_and_k_divisible_by_b():
    got = Block(4, 0.5).applies_to(np.array([4, 6, 8]), np.array([8, 8, 10]))
    assert list(got) == [True, False, False]


def test_bsr_and_csr_index_formulas():
    # BSR 4x4 at 75% of a 64x128 matrix: nnz 2048, 128 blocks, 16 block rows.
    assert Block(4, 0.75).index_bytes(64, 128, 4) == pytest.approx(4 * (128 + 16 + 1))
    # CSR at 75%: 2048 column indices and 65 row pointers.
    assert Unstructured(0.75).index_bytes(64, 128, 4) == pytest.approx(4 * (2048 + 65))


# --- grammar ------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("2:4", NM(2, 4)), (" 1 : 4 ", NM(1, 4)), ("DENSE", Dense()),
    ("block4@87.5%", Block(4, 0.875)), ("block4@0.875", Block(4, 0.875)),
    ("Block16 @ 90%", Block(16, 0.9)), ("unstructured@0.875", Unstructured(0.875)),
    ("csr@96.875%", Unstructured(0.96875)), ("block64@0", Block(64, 0.0)),
])
def test_grammar_accepts(text, expected):
    assert formats.parse(text) == expected


@pytest.mark.parametrize("text, named", [
    ("4:2", "4:2"), ("2:2", "2:2"), ("0:4", "0:4"), ("block0@50%", "block0"),
    ("block65@50%", "block65"), ("block4", "block4"), ("unstructured@1.5", "1.5"),
    ("unstructured@150%", "150%"), ("csr@1", "1"), ("unstructured@abc", "abc"),
    ("fast", "fast"), ("", "''"), ("2:4:8", "2:4:8"), ("block4@-0.5", "-0.5"),
])
def test_grammar_rejects_with_the_input_named(text, named):
    with pytest.raises(FormatError) as info:
        formats.parse(text)
    assert named in str(info.value)


def test_constructors_validate():
    with pytest.raises(FormatError):
        NM(4, 4)
    with pytest.raises(FormatError):
        Block(0, 0.5)
    with pytest.raises(FormatError):
        Unstructured(1.0)
