"""The join of layer rows to design rows behind the energy and memory columns
(``dse.roofline.layer_sums``): the sums by hand, bit for bit those of the merge of a string-keyed
``groupby`` it replaced, and the frames it builds the same as setting one column at a time."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import accelerator_models
import dse
from dse.design_columns import with_energy_and_memory, with_language_model_columns
from dse.roofline.energy import energy_frame, evaluate_layer_frames, traffic_columns
from dse.roofline.layer_sums import DESIGN_KEYS, design_sums, layer_rows, with_columns
from dse.roofline.memory import memory_frame
from workloads import Trace, load_model, load_trace

TOY = load_trace("toy_hybrid")


def _trace(names: list[str]) -> Trace:
    """A stand-in with the one thing ``layer_rows`` reads of a trace: its ops' names."""
    class Named:
        ops = pd.DataFrame({"name": names})
    return Named()  # type: ignore[return-value]


def _design(hardware: str, fmt: str, batch: int) -> dict:
    return {"hardware": hardware, "format": fmt, "batch": batch, "fusion": "unfused",
            "scope": "gemm"}


DESIGNS = pd.DataFrame([_design("a100", "2:4", 1), _design("a100", "2:4", 8),
                        _design("v100", "dense", 1)])
#: Layer rows of the first two designs, interleaved; none of the third.
LAYERS = pd.DataFrame([{**_design("a100", "2:4", 8), "op": "fc2", "x": 4.0},
                       {**_design("a100", "2:4", 1), "op": "fc1", "x": 1.0},
                       {**_design("a100", "2:4", 8), "op": "fc1", "x": 2.0},
                       {**_design("a100", "2:4", 1), "op": "nope", "x": 0.5},
                       {**_design("a100", "2:4", 1), "op": "fc2", "x": np.nan}])


def test_a_design_sums_its_own_layer_rows():
    rows = layer_rows(DESIGNS, LAYERS, _trace(["fc1", "fc2"]))
    sums = design_sums(LAYERS[["x"]].to_numpy(), rows)[:, 0]
    # 1 + 0.5 (NaN skipped, as pandas sums), 4 + 2, and nothing for v100.
    np.testing.assert_array_equal(sums, [1.5, 6.0, np.nan])
    assert list(rows.op) == [1, 0, 0, -1, 1]  # "nope" is no op of the trace
    kept = design_sums(LAYERS[["x"]].to_numpy(), rows, keep=rows.op >= 0)[:, 0]
    np.testing.assert_array_equal(kept, [1.0, 6.0, np.nan])


def test_keys_are_compared_as_the_strings_they_print_as():
    # A categorical format and a batch stored as text still find their layer rows.
    designs = DESIGNS.astype({"format": "category", "batch": str})
    rows = layer_rows(designs, LAYERS, _trace(["fc1", "fc2"]))
    sums = design_sums(LAYERS[["x"]].to_numpy(), rows)[:, 0]
    np.testing.assert_array_equal(sums, [1.5, 6.0, np.nan])


def test_a_layer_row_with_a_missing_key_belongs_to_no_design():
    layers = LAYERS.astype({"hardware": object})
    layers.loc[2, "hardware"] = None
    rows = layer_rows(DESIGNS, layers, _trace(["fc1", "fc2"]))
    assert rows.of_layers[2] == -1
    np.testing.assert_array_equal(design_sums(layers[["x"]].to_numpy(), rows)[:, 0],
                                  [1.5, 4.0, np.nan])


def test_sums_are_compensated_as_pandas_makes_them():
    # 1e16 + 1 + 1 + 1 + 1: a plain left-to-right sum loses every 1 (1e16's spacing is 2).
    designs = DESIGNS.iloc[:1]
    layers = pd.DataFrame([{**_design("a100", "2:4", 1), "op": "fc1", "x": x}
                           for x in (1e16, 1.0, 1.0, 1.0, 1.0)])
    rows = layer_rows(designs, layers, _trace(["fc1"]))
    assert design_sums(layers[["x"]].to_numpy(), rows)[0, 0] == 1e16 + 4


def _merged_sums(designs: pd.DataFrame, layers: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """The join the energy and memory frames made before: a string-keyed groupby, merged."""
    keys = list(DESIGN_KEYS)
    rows = layers.assign(**{k: layers[k].astype(str) for k in keys})
    sums = rows.groupby(keys, sort=False)[columns].sum().reset_index()
    left = designs[keys].astype(str).reset_index(drop=True)
    return left.merge(sums, on=keys, how="left", validate="many_to_one")[columns].to_numpy()


@pytest.mark.parametrize("shuffled", [False, True])
def test_sums_are_bit_for_bit_those_of_the_merge(shuffled):
    # pandas' sums of interleaved groups differ in the last bit with the group numbering; these
    # (a grid's op traffic) tell sort=False, the merge's, from sort=True.
    accs = [accelerator_models.load(h) for h in ("a100", "v100", "l4")]
    grid = (["2:4", "block4@75%", "unstructured@0.9", "1:8"], [1, 3, 64],
            ["unfused", "fused", "fused_prefetched"], ["gemm", "all"])
    designs = dse.roofline.evaluate(TOY, accs, grid[0], grid[1], fusion=grid[2], scope=grid[3])
    layers = evaluate_layer_frames(TOY, accs, *grid)
    if shuffled:
        layers, designs = layers.sample(frac=1.0, random_state=5), designs.iloc[::-1]
    rows = layer_rows(designs, layers, TOY)
    traffic = traffic_columns(layers, TOY, dse.Numerics(), rows.op)
    layers = layers.assign(**traffic)
    got = design_sums(np.column_stack(list(traffic.values())), rows)
    assert np.array_equal(got, _merged_sums(designs, layers, list(traffic)))
    keep = layers["unit"].to_numpy() != "vector"
    kept = design_sums(layers[["weight_bytes"]].to_numpy(), rows, keep=keep)[:, 0]
    assert np.array_equal(kept, _merged_sums(designs, layers[keep], ["weight_bytes"])[:, 0],
                          equal_nan=True)


def test_with_columns_sets_them_as_one_assignment_at_a_time_does():
    frame = pd.DataFrame({"a": [1.0, 2.0], "fits": [True, False], "b": ["x", "y"]},
                         index=[7, 7])
    columns = {"c": np.array([3.0, 4.0]), "fits": pd.array([True, None], dtype="boolean"),
               "d": "decode", "e": pd.Series([5, 6], index=frame.index)}
    expected = frame.copy()
    for name, values in columns.items():
        expected[name] = values
    got = with_columns(frame, columns)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert list(got.columns) == ["a", "fits", "b", "c", "d", "e"]
    got.loc[:, "a"] = 0.0
    assert list(frame["a"]) == [1.0, 2.0] and list(frame["fits"]) == [True, False]


HARDWARE = [accelerator_models.load("a100"), accelerator_models.load("h100-sxm")]
GRID = (["2:4", "unstructured@0.8"], [1, 4], ["unfused", "fused"], ["gemm", "all"])


def _designs_and_layers():
    formats, batches, fusions, scopes = GRID
    designs = dse.roofline.evaluate(TOY, HARDWARE, formats, batches, fusion=fusions,
                                    scope=scopes)
    return designs, evaluate_layer_frames(TOY, HARDWARE, *GRID)


def test_both_columns_at_once_are_the_energy_then_the_memory_frame():
    designs, layers = _designs_and_layers()
    before = designs.copy()
    both = with_energy_and_memory(designs, TOY, HARDWARE, *GRID)
    one_by_one = memory_frame(energy_frame(designs, layers, TOY, HARDWARE), layers, TOY,
                              HARDWARE)
    pd.testing.assert_frame_equal(both, one_by_one, check_exact=True)
    pd.testing.assert_frame_equal(designs, before, check_exact=True)  # left as it was


def test_the_order_of_the_design_rows_does_not_change_their_figures():
    designs, layers = _designs_and_layers()
    forward = energy_frame(designs, layers, TOY, HARDWARE)
    backward = energy_frame(designs.iloc[::-1], layers, TOY, HARDWARE)
    pd.testing.assert_frame_equal(backward.iloc[::-1], forward, check_exact=True)


def test_a_design_without_layers_is_named():
    designs, layers = _designs_and_layers()
    layers = layers[layers["format"] != "2:4"]
    with pytest.raises(ValueError, match="no layers for design hardware=a100-40gb, format=2:4, "
                                         "batch=1, fusion=unfused, scope=gemm"):
        energy_frame(designs, layers, TOY, HARDWARE)
    with pytest.raises(ValueError, match="layers lack some design"):
        memory_frame(designs, layers, TOY, HARDWARE)


def test_language_model_columns_leave_the_table_as_it_was():
    step = load_model("llama-3-8b", "decode", 2048)
    table = dse.roofline.evaluate(step, "h100-sxm", ["2:4"], [1, 8], scope="all")
    table = with_energy_and_memory(table, step, "h100-sxm", ["2:4"], [1, 8], ["unfused"], "all")
    before = table.copy()
    out = with_language_model_columns(table, step)
    pd.testing.assert_frame_equal(table, before, check_exact=True)
    # Replaced where they were, the step's own after them, the dtypes last.
    assert list(out.columns[:len(table.columns)]) == list(table.columns)
    assert list(out.columns[-2:]) == ["weight_dtype", "kv_dtype"]
    assert (out["max_batch"] == out["largest_batch_that_fits"]).all()


def test_layer_rows_keep_designs_apart_past_int64_codes():
    """Keys of 2**20, 2**20, 2**20, 16 and 16 labels (int columns, no str cast): the codes
    would reach 2**68 unrenumbered. Row B (hardware label 2**16, every other label 0) would
    have the code 2**16 x 2**48 = 2**64, which wraps to row 0's 0; renumbered once the codes
    pass 2**62, the two stay apart."""
    n = 2**20
    i = np.arange(n, dtype=np.int64)
    keys = {"hardware": i, "format": i, "batch": i, "fusion": i % 16, "scope": (i // 16) % 16}
    layers = pd.DataFrame({k: np.append(v, v[0]) for k, v in keys.items()})
    layers.loc[n, "hardware"] = 2**16
    layers["op"] = "fc1"
    designs = layers.iloc[[0, n]].reset_index(drop=True)
    rows = layer_rows(designs, layers, _trace(["fc1"]))
    assert rows.of_designs[0] != rows.of_designs[1]
    assert rows.of_layers[0] != rows.of_layers[n]
    assert rows.count == n + 2  # n + 1 designs, and the one of designs without layer rows


def test_layer_rows_count_is_the_designs_with_rows_plus_one():
    """Designs numbered in the order they first appear among the design rows, then the layer
    rows: (a100, 2:4, 1) is 0, (a100, 2:4, 8) is 1; the v100 design has no layer row and takes
    the one slot past them, 2. count: the two designs and that slot, 3."""
    rows = layer_rows(DESIGNS, LAYERS, _trace(["fc1", "fc2"]))
    assert rows.count == 3
    assert rows.of_designs.tolist() == [0, 1, 2]
    assert rows.of_layers.tolist() == [1, 0, 1, 0, 0]


def test_an_op_name_that_is_missing_is_minus_one():
    """An op with no name (NA: pandas 3's astype(str) keeps it NA) is no op of the trace, -1,
    as an unknown name ("nope") is."""
    layers = LAYERS.assign(op=pd.Series(["fc2", None, "fc1", "nope", "fc2"], dtype=object))
    rows = layer_rows(DESIGNS, layers, _trace(["fc1", "fc2"]))
    assert rows.op.tolist() == [1, -1, 0, -1, 1]

