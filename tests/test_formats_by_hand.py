"""Edges of ``formats`` by hand: the mutants ``python -m benchmarks.mutation --module formats``
found surviving the format tests (the shares' limits, the largest N:M, which formats take a
checkpoint's per-layer density)."""

from __future__ import annotations

import numpy as np
import pytest

import formats
from formats.base import kept_share, read_share
from formats.nm import MAX_M


def test_kept_share_by_hand():
    # 1 - (1 - q)^r: q = 1/2 over 3 slots keeps 7/8; a sure slot (q = 1) is kept, share 1.
    assert kept_share(0.5, 3) == pytest.approx(0.875, rel=1e-15)
    assert kept_share(1.0, 5) == 1.0
    assert kept_share(0.0, 5) == 0.0
    np.testing.assert_allclose(kept_share(np.array([0.25, 1.0]), np.array([2, 7])),
                               [1 - 0.75**2, 1.0], rtol=1e-15)


def test_the_read_share_of_an_empty_mask_is_one():
    """No columns: nothing is left unread (the share the bound's feature bytes assume)."""
    assert read_share(np.zeros((0, 4), dtype=bool)) == 1.0
    assert read_share(np.zeros((4, 0), dtype=bool)) == 1.0
    # Two of four columns hold a kept weight.
    assert read_share(np.array([[1, 0, 0, 1], [0, 0, 0, 1]], dtype=bool)) == 0.5


def test_a_number_of_many_digits_is_refused_not_wrapped():
    """A 19-digit M is out of range, however it is read (never, say, capped to a small one)."""
    with pytest.raises(formats.FormatError):
        formats.parse("1:" + "9" * 19)
    with pytest.raises(formats.FormatError):
        formats.parse("block" + "9" * 30 + "@50%")


@pytest.mark.parametrize("zeros", [17, 18, 40])
def test_a_zero_padded_count_is_its_value(zeros):
    """Leading zeros are not digits of the value, however many there are: 0...02:4 is 2:4."""
    assert formats.parse("0" * zeros + "2:4").name == "2:4"
    assert formats.parse("block" + "0" * zeros + "4@50%").name == "block4@50%"


def test_n_equal_to_m_is_refused_by_the_grammar_naming_the_format_as_typed():
    """4:4 is refused quoting what the user typed, spaces and all."""
    with pytest.raises(formats.FormatError, match=r"^format ' 4 : 4': N:M needs"):
        formats.parse(" 4 : 4")


def test_the_largest_n_m_is_accepted_and_one_past_it_refused():
    """M up to 65,536 = 2**16 (the documented limit)."""
    assert MAX_M == 65_536
    assert formats.parse("1:65536").m == 65_536
    with pytest.raises(formats.FormatError):
        formats.parse("1:65537")


@pytest.mark.parametrize("spec, takes", [("block4@50%", True), ("unstructured@50%", True),
                                         ("2:4", False), ("dense", False)])
def test_which_formats_take_a_checkpoints_layer_density(spec, takes):
    """Block and unstructured sparsity follow a pruned checkpoint's per-layer densities; N:M
    fixes its density and dense has none."""
    assert formats.parse(spec).takes_layer_density is takes


def test_a_prunable_weights_gemm_dims_are_whole_numbers():
    """A grouped convolution's weight [C_out, C_in / groups, kh, kw] holds ``groups`` GEMMs of
    M = C_out / groups rows and K = C_in / groups x kh x kw columns."""
    torch = pytest.importorskip("torch")
    from formats.masks import PrunableWeight

    weight = PrunableWeight(torch.zeros(8, 3, 2, 2), groups=2)
    assert (weight.m, weight.k) == (4, 12)
    assert type(weight.m) is int


def test_a_mask_one_weight_off_its_unstructured_share_is_within_tolerance():
    """The kept share may miss the asked one by one granule (a weight, for unstructured), not
    more: 16 weights at 50% expect 8 kept; 9 pass, 10 do not."""
    torch = pytest.importorskip("torch")
    from formats.masks import PrunableWeight, mask_violations

    fmt = formats.parse("unstructured@50%")
    for kept, ok in ((9, True), (10, False)):
        keep = torch.zeros(16, dtype=torch.bool)
        keep[:kept] = True
        keep = keep.reshape(4, 4)
        weights = {"w": PrunableWeight(keep.float())}
        assert (mask_violations(weights, fmt, {"w": keep}) == []) is ok, kept


def test_a_partly_pruned_block_is_a_violation():
    """block2@50% on a 2 x 4 weight: one block kept whole, one pruned, passes; a block with a
    single kept weight (of b^2 = 4) is partly pruned."""
    torch = pytest.importorskip("torch")
    from formats.masks import PrunableWeight, mask_violations

    fmt = formats.parse("block2@50%")
    whole = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0]], dtype=torch.bool)
    assert mask_violations({"w": PrunableWeight(whole.float())}, fmt, {"w": whole}) == []
    one = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    problems = mask_violations({"w": PrunableWeight(one.float())}, fmt, {"w": one})
    assert problems == ["w: 1 blocks are partly pruned"]


def test_a_block_masks_kept_share_may_miss_by_one_block_of_b_squared_weights():
    """block4@50% on 8 x 8 (4 blocks of 16): 2 expected; 3 kept are one block (16 weights) off,
    within tolerance; 4 kept are two off."""
    torch = pytest.importorskip("torch")
    from formats.masks import PrunableWeight, mask_violations

    fmt = formats.parse("block4@50%")
    for blocks, ok in ((3, True), (4, False)):
        keep = torch.zeros(2, 2, dtype=torch.bool)
        keep.view(-1)[:blocks] = True
        keep = keep.repeat_interleave(4, 0).repeat_interleave(4, 1)
        assert (mask_violations({"w": PrunableWeight(keep.float())}, fmt, {"w": keep}) == []) \
            is ok, blocks


def test_block_masks_keep_the_blocks_of_largest_l2_norm():
    """block2@50% keeps the block of norm sqrt(4 x 9) = 6 (negative weights) over the block of
    norm 2 beside it."""
    torch = pytest.importorskip("torch")
    from formats.masks import PrunableWeight, global_masks

    weight = torch.tensor([[-3.0, -3.0, 1.0, 1.0], [-3.0, -3.0, 1.0, 1.0]])
    mask = global_masks({"w": PrunableWeight(weight)}, formats.parse("block2@50%"))["w"]
    assert mask.tolist() == [[True, True, False, False], [True, True, False, False]]
    # The L2 norm, not another: sqrt(9) = 3 < sqrt(12) = 3.46, though 27^(1/3) > 24^(1/3).
    weight = torch.tensor([[3.0, 0.0, 2.0, 2.0], [0.0, 0.0, 2.0, 0.0]])
    mask = global_masks({"w": PrunableWeight(weight)}, formats.parse("block2@50%"))["w"]
    assert mask.tolist() == [[False, False, True, True], [False, False, True, True]]


def test_every_layer_keeps_at_least_one_block():
    """Layers of 2 and 98 scores at 90% sparsity: 0.2 and 9.8 ideal, rounded to 0 and 10 by
    largest remainder; the empty layer takes one from the largest: 1 and 9, the top scores."""
    torch = pytest.importorskip("torch")
    from formats.masks import _layerwise_keep

    small, large = _layerwise_keep([torch.arange(2.0), torch.arange(98.0)], 0.9)
    assert small.tolist() == [False, True]
    assert torch.nonzero(large).flatten().tolist() == list(range(89, 98))


def test_n_m_runs_lie_along_each_row_of_a_wide_weight():
    """2:4 on a 2 x 8 weight: two runs of 4 per row. Keeping 2 of each run passes; 3 in one
    run is named."""
    torch = pytest.importorskip("torch")
    from formats.masks import PrunableWeight, mask_violations

    fmt = formats.parse("2:4")
    good = torch.tensor([[1, 1, 0, 0, 0, 1, 0, 1], [0, 1, 1, 0, 1, 0, 1, 0]], dtype=torch.bool)
    assert mask_violations({"w": PrunableWeight(good.float())}, fmt, {"w": good}) == []
    bad = good.clone()
    bad[1, 0] = True
    assert mask_violations({"w": PrunableWeight(bad.float())}, fmt, {"w": bad}) == [
        "w: a run of 4 keeps 3 weights"]


@pytest.mark.parametrize("n", [8, 64])
def test_equal_scores_keep_the_first(n):
    """Ties are broken by position (a stable sort): the same masks on every run. 64 scores,
    because torch's unstable CPU sort keeps ties in order up to 16 elements (an insertion
    sort), so 8 alone cannot tell the two sorts apart."""
    torch = pytest.importorskip("torch")
    from formats.masks import _layerwise_keep

    (keep,) = _layerwise_keep([torch.ones(n)], 0.5)
    assert keep.tolist() == [True] * (n // 2) + [False] * (n // 2)


def test_equal_magnitudes_keep_the_first():
    """An 8 x 8 weight of +-1 (64 equal magnitudes) at unstructured 50%: the first 32 kept,
    ties broken by position as for block scores."""
    torch = pytest.importorskip("torch")
    from formats.masks import PrunableWeight, global_masks

    weight = torch.ones(8, 8)
    weight[1::2] = -1.0
    masks = global_masks({"fc": PrunableWeight(weight)}, formats.parse("unstructured@50%"))
    assert masks["fc"].reshape(-1).tolist() == [True] * 32 + [False] * 32


def test_a_layer_gives_a_block_away_only_when_it_keeps_more_than_one():
    """Two layers of one score at 50%: one block in all, which the first takes (largest
    remainder, ties by position); the second stays empty, as its only donor has one."""
    torch = pytest.importorskip("torch")
    from formats.masks import _layerwise_keep

    first, second = _layerwise_keep([torch.ones(1), torch.ones(1)], 0.5)
    assert (first.tolist(), second.tolist()) == ([True], [False])


def test_a_one_block_layer_left_empty_takes_one():
    """Layers of 1 and 10 scores at 80%: 0.2 and 2.0 ideal, 0 and 2 kept; the one-score layer
    takes a block from the other: 1 and 1 (its largest score, the last)."""
    torch = pytest.importorskip("torch")
    from formats.masks import _layerwise_keep

    small, large = _layerwise_keep([torch.ones(1), torch.arange(10.0)], 0.8)
    assert small.tolist() == [True]
    assert torch.nonzero(large).flatten().tolist() == [9]


def test_an_empty_layer_takes_no_block():
    """A layer with no scores stays empty and costs the others nothing: 10 scores at 50% keep
    their 5 largest."""
    torch = pytest.importorskip("torch")
    from formats.masks import _layerwise_keep

    empty, full = _layerwise_keep([torch.ones(0), torch.arange(10.0)], 0.5)
    assert empty.numel() == 0
    assert torch.nonzero(full).flatten().tolist() == [5, 6, 7, 8, 9]


# The full mutation run of 2026-11-27 (benchmarks/results/mutation_formats.jsonl): each test
# below kills survivors of `python -m benchmarks.mutation --module formats`.


def test_kept_share_of_sure_slots_warns_of_nothing():
    """q = 1 (a dense layer's share) takes the closed branch: no log(0) is ever evaluated, so no
    divide-by-zero warning reaches a user (nor a NaN at zero slots)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shares = kept_share(np.array([0.5, 1.0, 1.0]), np.array([2, 3, 0]))
    np.testing.assert_array_equal(shares, [0.75, 1.0, 1.0])


def test_the_largest_block_is_the_last_taken():
    """Blocks of 1 to 64: the grammar and the constructor refuse 65 with one message."""
    assert formats.parse("block64@50%").block == 64
    for make in (lambda: formats.parse("block65@50%"), lambda: formats.Block(65, 0.5)):
        with pytest.raises(formats.FormatError, match="use 1 to 64"):
            make()


def test_dense_applies_to_every_shape():
    shapes = formats.parse("dense").applies_to(np.array([1, 7, 4096]), np.array([3, 1, 64]))
    assert shapes.tolist() == [True, True, True]


def test_a_sparsity_of_100_percent_is_refused_as_the_user_wrote_it():
    for spec, written in (("csr@100%", "100%"), ("block4@1", "1"), ("unstructured@1.0", "1.0")):
        with pytest.raises(formats.FormatError, match=f"sparsity {written} is outside"):
            formats.parse(spec)


def test_only_a_block_or_unstructured_spec_without_a_sparsity_gets_the_hint():
    with pytest.raises(formats.FormatError, match="need a sparsity"):
        formats.parse("block4")
    for spec in ("blocky@50%x", "3:4:5", "csr@"):
        with pytest.raises(formats.FormatError) as err:
            formats.parse(spec)
        assert "need a sparsity" not in str(err.value)


def test_a_sparsity_that_is_not_a_number_is_a_format_error():
    """Not a TypeError from comparing a string with 0.0: one clear message."""
    for value in ("0.5", None, True, float("nan")):
        with pytest.raises(formats.FormatError, match="is not a number"):
            formats.Block(4, value)


def test_a_prunable_weight_is_read_only_and_its_k_is_a_row_s_size():
    torch = pytest.importorskip("torch")
    import dataclasses

    from formats.masks import PrunableWeight

    one_row = PrunableWeight(torch.zeros(1, 3, 2, 2))  # C_out 1: K = 3 * 2 * 2
    assert (one_row.m, one_row.k) == (1, 12)
    with pytest.raises(dataclasses.FrozenInstanceError):
        one_row.groups = 2


def test_nm_masks_keep_the_n_largest_magnitudes_of_each_run():
    torch = pytest.importorskip("torch")
    from formats.masks import PrunableWeight, global_masks

    w = torch.tensor([[0.1, -4.0, 3.0, 0.2, 5.0, 0.0, -0.3, 1.0]])
    keep = global_masks({"fc": PrunableWeight(w)}, formats.parse("2:4"))["fc"]
    assert keep.tolist() == [[False, True, True, False, True, False, False, True]]


def test_unstructured_keeps_exactly_the_largest_when_one_weight_is_left():
    """At 75% of four weights one is kept (n_keep = 1): the largest magnitude, not none."""
    torch = pytest.importorskip("torch")
    from formats.masks import PrunableWeight, global_masks

    w = torch.tensor([[0.5, -2.0], [1.0, 0.25]])
    keep = global_masks({"fc": PrunableWeight(w)}, formats.parse("csr@75%"))["fc"]
    assert keep.tolist() == [[False, True], [False, False]]


def test_block_counts_go_to_the_largest_remainder():
    """block1 at 70% over layers of 6 and 14 weights: ideal 1.8 and 4.2 kept, floors 1 and 4,
    one spare (6 of 20 in all) to the larger remainder (0.8): 2 and 4 kept, the largest of each."""
    torch = pytest.importorskip("torch")
    from formats.masks import PrunableWeight, global_masks

    weights = {"a": PrunableWeight(torch.arange(1.0, 7.0).reshape(2, 3)),
               "b": PrunableWeight(torch.arange(1.0, 15.0).reshape(2, 7))}
    masks = global_masks(weights, formats.parse("block1@70%"))
    assert torch.nonzero(masks["a"].flatten()).flatten().tolist() == [4, 5]
    assert torch.nonzero(masks["b"].flatten()).flatten().tolist() == [10, 11, 12, 13]


def test_an_nm_mask_may_keep_fewer_than_n():
    """N:M allows at most N a run: a 2:4 mask keeping one weight per run meets the format (the
    kept-share check is for blocks and unstructured masks only)."""
    torch = pytest.importorskip("torch")
    from formats.masks import PrunableWeight, mask_violations

    keep = torch.tensor([[True, False, False, False, False, False, True, False]])
    w = PrunableWeight(torch.where(keep, 1.0, 0.0))
    assert mask_violations({"fc": w}, formats.parse("2:4"), {"fc": keep}) == []
