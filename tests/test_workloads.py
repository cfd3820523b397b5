"""Trace schema, validating loader, batch scaling and fusion bookkeeping."""

from __future__ import annotations

import copy
import json

import pytest

import workloads
from tests.conftest import op
from workloads import COLUMNS, PER_SAMPLE, Trace, TraceError, load_trace


@pytest.fixture(scope="module")
def toy() -> Trace:
    return load_trace("toy_hybrid")


def _document(toy: Trace) -> dict:
    return copy.deepcopy(toy.to_json())


def test_shipped_trace_loads_with_provenance(toy):
    assert "toy_hybrid" in workloads.trace_names()
    assert toy.provenance["source"]
    assert toy.input_shape == (3, 32, 32)
    assert len(toy) == 23


def test_toy_params_and_macs_by_hand(toy):
    # Weights: stem 1728 + norm 128 + dw 576 + pw1 16384 + pw2 16384 + down 32768 + 2 norms 512
    # + qkv 49152 + proj 16384 + fc1 65536 + fc2 65536 + head 1280 = 266 368.
    assert toy.params == 266_368
    # MACs per sample: stem 64*27*256 = 442 368; dw 9*256*64 = 147 456; pw1 and pw2 4 194 304
    # each; down 128*256*64 = 2 097 152; qkv 384*128*64 = 3 145 728; scores 64*32*64*4
    # = 524 288; context 64*64*32*4 = 524 288; proj 1 048 576; fc1 and fc2 4 194 304 each;
    # head 1280. Total 24 708 352.
    assert toy.macs_per_sample == 24_708_352


def test_fusion_bookkeeping(toy):
    ops = toy.ops
    # Names are unique, so every intermediate tensor has exactly one producer.
    assert ops["name"].is_unique
    # Only the stem reads the model input; only the head writes the model output.
    assert list(ops.loc[ops["model_input_elems"] > 0, "name"]) == ["stem.conv"]
    assert list(ops.loc[ops["is_output"], "name"]) == ["head"]
    assert int(ops.loc[ops["is_output"], "model_output_elems"].iloc[0]) == 10
    # Every producer is an earlier op.
    seen = {"input"}
    for row in ops.itertuples():
        assert set(row.producers) <= seen
        seen.add(row.name)


def test_at_batch_multiplies_per_sample_columns_only(toy):
    scaled = toy.at_batch(8)
    for column in PER_SAMPLE:
        assert (scaled[column] == toy.ops[column] * 8).all()
    assert (scaled["weight_elems"] == toy.ops["weight_elems"]).all()
    assert (scaled["m"] == toy.ops["m"]).all() and (scaled["k"] == toy.ops["k"]).all()


@pytest.mark.parametrize("batch", [0, -1, 1.5, True])
def test_at_batch_rejects_bad_batch(toy, batch):
    with pytest.raises(TraceError, match="batch"):
        toy.at_batch(batch)


def test_json_round_trip(toy, tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(toy.to_json()))
    again = workloads.read_trace_file(path)
    assert again.ops[list(COLUMNS)].equals(toy.ops[list(COLUMNS)])
    assert again.provenance == toy.provenance


def _break(document: dict, index: int, **changes) -> dict:
    for key, value in changes.items():
        if value is KeyError:
            del document["ops"][index][key]
        else:
            document["ops"][index][key] = value
    return document


BROKEN = [
    ("missing column", dict(index=3, m=KeyError), "missing column 'm'"),
    ("negative dimension", dict(index=4, k=-64), "negative"),
    ("float dimension", dict(index=4, n=2.5), "integer"),
    ("unknown column", dict(index=1, colour="red"), "unknown column 'colour'"),
    ("unknown kind", dict(index=1, kind="magic"), "unknown kind 'magic'"),
    ("zero groups", dict(index=3, groups=0), "groups"),
    ("gemm without dims", dict(index=4, m=0), "m, k and n"),
    ("norm with dims", dict(index=1, m=4), "set m, k and n to 0"),
    ("prunable norm", dict(index=1, prunable=True), "only conv and linear"),
    ("wrong weight count", dict(index=4, weight_elems=5), "weight_elems 5"),
    ("later producer", dict(index=1, producers=["head"]), "not an earlier op"),
    ("duplicate name", dict(index=2, name="stem.conv"), "used twice"),
    ("bad prunable type", dict(index=4, prunable="yes"), "true or false"),
    ("negative vector flops", dict(index=1, vector_flops=-1.0), "vector_flops"),
    # (a convolution may read part of it: a stride longer than its kernel skips rows)
    ("input read too small", dict(index=0, kind="linear", input_elems=10), "model input"),
]


@pytest.mark.parametrize("case, changes, message", BROKEN, ids=[b[0] for b in BROKEN])
def test_loader_rejects(toy, tmp_path, case, changes, message):
    changes = dict(changes)
    document = _break(_document(toy), changes.pop("index"), **changes)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(document))
    with pytest.raises(TraceError) as info:
        workloads.read_trace_file(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("text, message", [
    ("{not json", "malformed JSON"),
    ("[]", "one JSON object"),
    ('{"schema": "other/9"}', "schema"),
    ('{"schema": "dse-trace/1", "model": "x", "input_shape": [3], "provenance": {}}',
     "missing top-level key 'ops'"),
    ('{"schema": "dse-trace/1", "model": "x", "input_shape": [0], "provenance": {}, '
     '"ops": [{}]}', "input_shape"),
    ('{"schema": "dse-trace/1", "model": "x", "input_shape": [3], "provenance": {}, '
     '"ops": []}', "no ops"),
])
def test_loader_rejects_documents(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TraceError, match=message):
        workloads.read_trace_file(path)


def test_unknown_model_suggests_close_names():
    with pytest.raises(TraceError, match="did you mean toy_hybrid"):
        load_trace("toy_hybird")


def test_from_records_derives_model_outputs():
    trace = Trace.from_records("two", [4], [
        op("a", "linear", 4, 4, 1, 1, 16, 4, 4, 0, True, ["input"]),
        op("b", "activation", inp=4, out=4, vflops=4, producers=["a"]),
        op("c", "activation", inp=4, out=4, vflops=4, producers=["a"]),
    ])
    assert list(trace.ops["is_output"]) == [False, True, True]


def test_a_strided_convolution_may_read_part_of_the_model_input():
    """A convolution whose stride outruns its kernel reads part of the image; the fused models
    charge the model input that op reads, not the whole image. Any other op reading the model
    input must read all of it."""
    strided = op("stem", "conv", 8, 3, 16, 1, 24, 12, 128, 0, True, ["input"])
    trace = Trace.from_records("strided", [3, 8, 8], [strided])
    assert int(trace.ops["model_input_elems"].iloc[0]) == 12  # of 192
    with pytest.raises(TraceError, match="reads the model input"):
        Trace.from_records("short", [3, 8, 8], [
            op("a", "activation", inp=12, out=12, vflops=12, producers=["input"])])
