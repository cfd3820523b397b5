"""Fusion-rule tables: detection from timings (synthetic here: no compiling in tests), the
shipped inductor-cpu table, and the fusion model ``rules:NAME`` between unfused and fused."""

from __future__ import annotations

import json
from contextlib import contextmanager
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dse
from dse.cli import main
from dse.cli.main import build_parser
from dse.cli.options import design_from_args
from dse.measure import fusion_rules as detect
from dse.roofline import DEFAULT_NUMERICS
from dse.roofline import fusion_rules as FR
from dse.roofline.pricing import feature_bytes_rules, price, rule_edges
from formats import Dense
from tests.cli_run import run_cli
from tests.strategies import accelerators, any_formats, traces
from workloads import KINDS, load_trace, trace_names

SHIPPED = "rules:inductor-cpu"
FORMATS = ["2:4", "1:4", "unstructured@90%", "block16@87.5%"]
REL = 1e-12


@contextmanager
def rule_tables(**tables: FR.RuleTable):
    """Make ``tables`` the shipped ones for the duration (no file written)."""
    with mock.patch.object(FR, "names", lambda: tuple(sorted(tables))), \
            mock.patch.object(FR, "load", lambda name: tables[name]):
        yield


def _latencies(frame, fusion):
    return frame[frame["fusion"] == fusion]["latency_s"].to_numpy()


# --- detection, from synthetic timings ----------------------------------------------------------


@pytest.mark.parametrize(("a", "b", "joined", "overhead", "fused"), [
    (1.0, 1.0, 1.0, 0.0, True),  # half the work: fused
    (1.0, 1.0, 1.9, 0.0, False),  # no saving
    (1.0, 1.0, 1.69, 0.0, True),  # just below 0.85
    (1.0, 1.0, 1.71, 0.0, False),  # just above
    # Saving one graph call is not fusion: 2 x (o + 0.5) apart, o + 1 together.
    (0.6, 0.6, 1.1, 0.1, False),
    (0.6, 0.6, 0.6, 0.1, True),
])
def test_decide_compares_the_work_without_the_call_overhead(a, b, joined, overhead, fused):
    decided, ratio = detect.decide(a, b, joined, overhead, 0.85)
    assert decided is fused
    assert ratio == pytest.approx((joined - overhead) / (a + b - 2 * overhead))


def test_an_overhead_above_the_graphs_is_capped():
    fused, ratio = detect.decide(1e-5, 1e-5, 1.5e-5, 1.0)
    assert not fused and np.isfinite(ratio)


def test_a_table_from_synthetic_records_has_exactly_the_fused_pairs(tmp_path):
    records = []
    for (a, b), (ta, tb, tj) in {("linear", "activation"): (2e-3, 1e-3, 2.1e-3),
                                  ("conv", "norm"): (3e-3, 1e-3, 3.9e-3),
                                  ("norm", "linear"): (1e-3, 2e-3, 1e-3)}.items():
        fused, ratio = detect.decide(ta, tb, tj, 1e-5)
        records.append({"producer": a, "consumer": b, "status": "measured", "a_s": ta,
                        "b_s": tb, "joined_s": tj, "ratio": ratio, "fused": fused})
    records.append({"producer": "pool", "consumer": "conv", "status": "skipped: budget spent",
                    "fused": False})
    table = detect.rule_table("test", records, {"command": "dse fusion-rules"}, {"threshold": 0.85})
    assert table.rules == {("linear", "activation"), ("norm", "linear")}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(table.to_json()))
    again = FR.read(path)
    assert again.rules == table.rules and again.pairs == table.pairs
    assert again.fuses("norm", "linear") and not again.fuses("linear", "norm")


@pytest.mark.parametrize(("change", "needle"), [
    ({"extra": 1}, "unknown keys ['extra']"),
    ({"schema": "x"}, "schema 'x'"),
    ({"rules": [["conv", "relu"]]}, "rules[0]"),
    ({"rules": [["conv", "norm"], ["conv", "norm"]]}, "twice"),
    ({"backend": ""}, "'backend'"),
])
def test_a_bad_table_is_one_line_naming_the_field(tmp_path, change, needle):
    data = FR.RuleTable.of("x", [("conv", "norm")]).to_json() | change
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(FR.FusionRulesError) as info:
        FR.read(path)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_pairs_cover_every_producer_consumer_edge_of_the_traces():
    sites = detect.trace_pairs()
    edges = 0
    for name in trace_names():
        ops = load_trace(name).ops
        edges += sum(len(set(ps) - {"input"}) for ps in ops["producers"])
    assert sum(s.occurrences for s in sites) == edges
    assert len({(s.producer, s.consumer) for s in sites}) == len(sites)
    for s in sites:  # the representative is a real occurrence of its pair
        ops = load_trace(s.model).ops.set_index("name")
        assert ops.loc[s.producer_op, "kind"] == s.producer
        assert ops.loc[s.consumer_op, "kind"] == s.consumer
        assert s.producer_op in ops.loc[s.consumer_op, "producers"]


def test_a_bad_backend_or_budget_is_one_line(tmp_path, capsys):
    for argv, needle in ((["--backend", "tvm"], "unknown backend 'tvm'"),
                         (["--budget", "0s"], "--budget 0s")):
        assert run_cli(["fusion-rules", *argv, "--out", str(tmp_path / "r.json")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, err
    assert not list(tmp_path.iterdir())


# --- the shipped table ---------------------------------------------------------------------------


def test_the_inductor_cpu_table_is_shipped_with_its_provenance():
    assert "inductor-cpu" in FR.names()
    table = FR.load("inductor-cpu")
    assert table is FR.load("inductor-cpu")  # one object: per-trace prices cache on it
    assert table.backend == "inductor-cpu"
    assert table.provenance["command"].startswith("dse fusion-rules --backend inductor-cpu")
    for key in ("date", "torch", "threads"):
        assert table.provenance[key]
    assert table.method["threshold"] == detect.THRESHOLD
    assert table.method["timing"]["min_repeats"] >= 5
    pairs = {(p["producer"], p["consumer"]) for p in table.pairs}
    assert pairs == {(s.producer, s.consumer) for s in detect.trace_pairs()}
    assert table.rules <= pairs
    for p in table.pairs:
        if p["status"] != "measured":
            assert not p["fused"]
            continue
        fused, ratio = detect.decide(p["a_s"], p["b_s"], p["joined_s"], p["overhead_s"],
                                     table.method["threshold"])
        assert fused == p["fused"] and ratio == pytest.approx(p["ratio"])
    assert {k for pair in table.rules for k in pair} <= set(KINDS)


def test_an_unknown_table_is_one_line():
    with pytest.raises(dse.EvaluationError, match="unknown fusion 'rules:nope'; use one of "
                                                  "unfused, fused, fused_prefetched, rules:"):
        dse.evaluate("toy_hybrid", "a100", "2:4", fusion="rules:nope")
    with pytest.raises(FR.FusionRulesError, match="unknown fusion rule table 'nope'"):
        FR.load("nope")


# --- ordering: unfused >= rules >= fused ----------------------------------------------------------


@pytest.mark.parametrize("model", trace_names())
@pytest.mark.parametrize("scope", ["gemm", "all"])
def test_shipped_rules_sit_between_unfused_and_fused_for_every_shipped_model(model, scope):
    if scope == "gemm" and not load_trace(model).ops["prunable"].any():
        pytest.skip("no prunable GEMM")
    table = dse.evaluate(model, ["a100", "h100", "rtx4090"], FORMATS, [1, 32],
                         fusion=["unfused", SHIPPED, "fused"], scope=scope)
    unfused, rules, fused = (_latencies(table, f) for f in ("unfused", SHIPPED, "fused"))
    assert np.all(unfused * (1 + REL) >= rules) and np.all(rules * (1 + REL) >= fused)
    feats = [table[table["fusion"] == f]["feature_bytes"].to_numpy()
             for f in ("unfused", SHIPPED, "fused")]
    assert np.all(feats[0] >= feats[1]) and np.all(feats[1] >= feats[2])


@pytest.mark.parametrize("model", trace_names())
def test_no_rule_prices_as_unfused_and_every_rule_as_fused(model):
    every = [(a, b) for a in KINDS for b in KINDS]
    with rule_tables(none=FR.RuleTable.of("none", []), every=FR.RuleTable.of("every", every)):
        table = dse.evaluate(model, "a100", FORMATS, [1, 8], scope="all",
                             fusion=["unfused", "rules:none", "rules:every", "fused"])
    np.testing.assert_allclose(_latencies(table, "rules:none"), _latencies(table, "unfused"),
                               rtol=REL)
    np.testing.assert_allclose(_latencies(table, "rules:every"), _latencies(table, "fused"),
                               rtol=REL)


@st.composite
def rule_table_strategy(draw):
    pairs = [(a, b) for a in KINDS for b in KINDS]
    return FR.RuleTable.of("random", draw(st.lists(st.sampled_from(pairs), unique=True)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces(), hw=accelerators(), fmt=any_formats, table=rule_table_strategy(),
       batch=st.integers(1, 64), scope=st.sampled_from(["gemm", "all"]))
def test_random_rules_sit_between_unfused_and_fused(trace, hw, fmt, table, batch, scope):
    if scope == "gemm" and not trace.ops["prunable"].any():
        scope = "all"
    with rule_tables(random=table):
        frame = dse.evaluate(trace, hw, fmt, batch, scope=scope,
                             fusion=["unfused", "rules:random", "fused"])
    unfused, rules, fused = (_latencies(frame, f) for f in ("unfused", "rules:random", "fused"))
    assert np.all(unfused * (1 + REL) >= rules) and np.all(rules * (1 + REL) >= fused)
    p = price(trace, (Dense(),), DEFAULT_NUMERICS)
    r, r_inputs = feature_bytes_rules(trace, table, DEFAULT_NUMERICS)
    assert np.all(p.feature_bytes_unfused >= r) and np.all(r >= p.feature_bytes_fused)
    assert np.all(p.input_bytes_unfused >= r_inputs) and np.all(r_inputs >= p.input_bytes_fused)


def test_an_output_is_written_unless_every_consumer_fuses_with_it():
    trace = load_trace("convnext_tiny")
    table = FR.RuleTable.of("t", [("elementwise", "elementwise")])
    edges = rule_edges(trace, table)
    ops = trace.ops
    # stages.0.blocks.0.mul feeds only the add (elementwise -> elementwise): kept on chip.
    mul = int(np.flatnonzero(ops["name"] == "stages.0.blocks.0.mul")[0])
    add = mul + 1
    assert not edges.written[mul] and edges.on_chip[add] == (True, False)
    # The add reads the mul's half from chip, the norm's half from DRAM.
    assert edges.input_elems[add] == ops["input_elems"].iloc[add] / 2


def test_per_op_frames_under_rules_carry_the_same_columns():
    fused = dse.evaluate_layers("swin_tiny", "a100", "2:4", 8, fusion="fused", scope="all")
    rules = dse.evaluate_layers("swin_tiny", "a100", "2:4", 8, fusion=SHIPPED, scope="all")
    assert list(rules.columns) == list(fused.columns) and len(rules) == len(fused)
    assert set(rules["fusion"]) == {SHIPPED}
    total = dse.evaluate("swin_tiny", "a100", "2:4", 8, fusion=SHIPPED, scope="all")
    for fmt, part in rules.groupby("format"):
        row = total[total["format"] == fmt].iloc[0]
        assert part["time_s"].sum() == pytest.approx(row["latency_s"], rel=1e-12)
        assert part["dram_bytes"].sum() == pytest.approx(row["dram_bytes"], rel=1e-12)


# --- the command line ----------------------------------------------------------------------------


def test_fusion_option_takes_a_shipped_table():
    args = build_parser().parse_args(["evaluate", "--model", "toy_hybrid", "--hw", "a100",
                                      "--format", "2:4", "--fusion", SHIPPED, "--fusion", "fused"])
    assert design_from_args(args).fusions == [SHIPPED, "fused"]


def test_an_unknown_table_on_the_command_line_is_argparses_invalid_choice(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["evaluate", "--model", "toy_hybrid", "--hw", "a100", "--fusion", "rules:inductor"])
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1
    assert "argument --fusion: invalid choice: 'rules:inductor'" in err
    assert f"did you mean {SHIPPED}?" in err


def test_spills_are_weighted_by_the_producers_output_sizes_not_their_count():
    """Issue 26's planted bug: spills weighted by count. An add reads 300 elements from a
    linear whose edge the table fuses and 100 from a norm whose edge it does not: 100 of its
    400 input elements come from DRAM (by count it would be 200)."""
    from workloads import Trace

    def op(name, kind, producers, inp, out, **gemm):
        return {"name": name, "kind": kind, "m": gemm.get("m", 0), "k": gemm.get("k", 0),
                "n": gemm.get("n", 0), "groups": 1, "weight_elems": gemm.get("w", 0),
                "input_elems": inp, "output_elems": out, "vector_flops": float(out),
                "prunable": False, "producers": producers}

    trace = Trace.from_records("spills", [10, 10], [
        op("fc", "linear", ["input"], 100, 300, m=30, k=10, n=10, w=300),
        op("norm", "norm", ["input"], 100, 100),
        op("add", "elementwise", ["fc", "norm"], 400, 100),
    ])
    table = FR.RuleTable.of("t", [("linear", "elementwise")])
    edges = rule_edges(trace, table)
    assert edges.on_chip[2] == (True, False)
    assert edges.input_elems[2] == pytest.approx(100)
    assert not edges.written[0] and edges.written[1]  # the linear's only consumer fuses
