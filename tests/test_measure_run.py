"""`dse measure` as library code: budget arithmetic with an injected clock, refusal of bad
input in one line, real masks of the format, and rows covering the trace's shapes. Tests never
depend on timing values."""

from __future__ import annotations

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

import formats  # noqa: E402
from dse.measure import kernels_cpu  # noqa: E402
from dse.measure.dataset import SCHEMA  # noqa: E402
from dse.measure.measure import (  # noqa: E402
    Budget,
    MeasureError,
    MeasureResult,
    measure,
    parse_budget,
    write_dataset,
)
from dse.measure.timing import TimingMethod, time_kernel  # noqa: E402
from dse.output import OutputError  # noqa: E402
from formats.masks import PrunableWeight, mask_violations  # noqa: E402

from .test_probe import _result  # noqa: E402

FAST = TimingMethod(warmup=0, min_repeats=1, max_repeats=1, window=1, max_time_s=0.05)


class TickClock:
    """A clock that advances ``step`` seconds every time it is read."""

    def __init__(self, step: float = 1.0):
        self.now, self.step, self.reads = 0.0, step, 0

    def __call__(self) -> float:
        value = self.now
        self.now += self.step
        self.reads += 1
        return value


@pytest.fixture(scope="module")
def host_toml(tmp_path_factory):
    from dse.measure.probe import probe_spec_toml

    path = tmp_path_factory.mktemp("hw") / "host.toml"
    path.write_text(probe_spec_toml(_result()))
    return str(path)


@pytest.mark.parametrize(("text", "seconds"), [
    ("5m", 300.0), ("90s", 90.0), ("1.5h", 5400.0), ("10min", 600.0), ("45", 45.0), (12, 12.0)])
def test_parse_budget(text, seconds):
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["0", "0m", -3, 0, "soon", "5 parsecs", float("nan")])
def test_parse_budget_refuses(text):
    with pytest.raises(MeasureError, match="--budget") as info:
        parse_budget(text)
    assert "\n" not in str(info.value)


def test_budget_arithmetic_with_an_injected_clock():
    clock = TickClock(step=2.0)
    budget = Budget(10.0, clock)  # read 1: start at 0
    assert budget.spent() == 2.0  # read 2
    assert budget.remaining() == 6.0  # read 3: 10 - 4
    assert budget.affords(4.0)  # read 4: 10 - 6 = 4 >= 4
    assert not budget.affords(4.0)  # read 5: 10 - 8 = 2 < 4
    with pytest.raises(MeasureError, match="--budget"):
        Budget(0, clock, MeasureError)


@pytest.mark.parametrize(("fmt", "match"), [
    ("2:4", "no cpu kernel runs the nm family"),
    ("block4@200%", "--format"),
    ("sparse-ish", "--format"),
])
def test_measure_refuses_formats(host_toml, fmt, match):
    with pytest.raises(MeasureError, match=match) as info:
        measure("toy_hybrid", host_toml, [fmt], [1], budget_s=10, method=FAST)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"budget_s": 0}, "--budget"),
    ({"budget_s": -1.0}, "--budget"),
    ({"batches": [0]}, "--batch"),
    ({"device": "tpu"}, "--device"),
    ({"trace": "no_such_model"}, "--model"),
    ({"hw": "no_such_gpu"}, "--hw"),
    ({"hw": "FP16_ONLY"}, "has no tensor_flops_per_s.tf32"),
])
def test_measure_refuses_bad_input(host_toml, tmp_path, kwargs, match):
    args = {"trace": "toy_hybrid", "hw": host_toml, "formats": ["block4@87.5%"],
            "batches": [1], "budget_s": 10, "method": FAST}
    args.update(kwargs)
    if args["hw"] == "FP16_ONLY":  # a spec without the fp32 GEMM rate CPU kernels are priced at
        path = tmp_path / "fp16.toml"
        path.write_text("dram_bandwidth_bytes_per_s = 1e11\n[tensor_flops_per_s]\nfp16 = 1e12\n"
                        "[vector_flops_per_s]\nfp32 = 1e11\n[block_sparse]\nsupported = true\n"
                        "min_block_size = 1\n")
        args["hw"] = str(path)
    with pytest.raises(MeasureError, match=match) as info:
        measure(**args)
    assert "\n" not in str(info.value)


def test_measure_refuses_cuda_without_a_gpu(host_toml):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(MeasureError, match="--device cuda"):
        measure("toy_hybrid", host_toml, ["2:4"], [1], device="cuda", budget_s=10)


def test_write_dataset_refuses_bad_paths_before_writing(tmp_path):
    (tmp_path / "folder.parquet").mkdir()
    result = MeasureResult(frame=pd.DataFrame(columns=list(SCHEMA)), budget_s=1.0,
                           spent_s=0.0, trace_configs=0, sampled_configs=0)
    for path, needle in ((tmp_path / "missing" / "d.parquet", "does not exist"),
                         (tmp_path / "d.txt", "unknown file type"),
                         (tmp_path / "folder.parquet", "is a folder")):
        with pytest.raises(OutputError, match=needle):
            write_dataset(result, path, "dse measure ...")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.parquet"]


@pytest.mark.parametrize("text", ["block4@87.5%", "block8@50%", "unstructured@90%", "2:4",
                                  "1:8"])
@pytest.mark.parametrize(("m", "k", "groups"), [(64, 128, 1), (16, 32, 4)])
def test_masks_are_format_exact(text, m, k, groups):
    fmt = formats.parse(text)
    weight = kernels_cpu.masked_weight(m, k, groups, fmt, seed=1)
    keep = weight != 0
    assert mask_violations({"w": PrunableWeight(weight, groups)}, fmt, {"w": keep}) == []
    kept = int(keep.sum())
    if fmt.family in ("block", "unstructured"):
        assert kept == round(fmt.density * m * k * groups)


def test_masks_refuse_shapes_the_format_cannot_take():
    with pytest.raises(ValueError, match="cannot apply"):
        kernels_cpu.masked_weight(10, 128, 1, formats.parse("block4@50%"))


@pytest.mark.parametrize("text", ["dense", "block4@87.5%", "unstructured@90%"])
@pytest.mark.parametrize("groups", [1, 3])
def test_cpu_kernels_compute_the_masked_product(text, groups):
    fmt = formats.parse(text)
    case = kernels_cpu.GemmCase(16, 32, 24, groups, fmt)
    built = kernels_cpu.build_gemm(case)
    expected = {"dense": {"torch_dense"}, "block": {"scipy_bsr", "torch_bsr"},
                "unstructured": {"torch_csr", "scipy_csr"}}[fmt.family]
    assert set(built) == expected
    for kernel in built.values():
        assert not isinstance(kernel, Exception), kernel
        assert kernel.rel_err < 1e-5
        assert kernel.nnz == round(fmt.density * 16 * 32 * groups)
        kernel.fn()


def test_timing_statistics_are_consistent():
    t = time_kernel(lambda: sum(range(100)), TimingMethod(warmup=1, min_repeats=3,
                                                           max_repeats=6, window=2))
    assert 3 <= t.repeats <= 6 and t.warmup == 1
    assert t.min_s <= t.median_s <= t.p90_s
    assert t.spread >= 0


def test_measure_covers_the_trace_and_spends_the_budget_by_arithmetic(host_toml, tmp_path):
    # The clock advances 1 s a read. Reads: Budget start (t=0), trace start (1), trace end (2);
    # then each sampled configuration reads it three times: the affords() check, its start
    # and its end, so it costs 1 s by the estimate. Check k (0-based) happens at t = 3 + 3k and
    # needs 20 - (3 + 3k) >= estimate: k = 0..5 pass, k = 6 (t = 21) fails: 6 configurations.
    clock = TickClock(1.0)
    done = []
    result = measure("toy_hybrid", host_toml, ["block4@87.5%", "unstructured@90%"], [1, 2],
                     budget_s=20, clock=clock, method=FAST, threads=1, rounds=1,
                     progress=lambda d, t: done.append((d, t)))
    assert result.sampled_configs == 6
    assert set(result.frame["round"]) == {0}
    frame = result.frame
    sampled = frame[frame["source"] == "sample"]
    assert sampled["why"].str.len().min() > 0
    assert (sampled["sol_fraction"].notna() | (sampled["error"] != "")).all()
    # every distinct prunable shape at every batch, for dense, block and unstructured
    import workloads

    ops = workloads.load_trace("toy_hybrid").ops
    shapes = ops[ops["prunable"]][["m", "k", "n", "groups"]].drop_duplicates()
    trace_rows = frame[frame["source"] == "trace"]
    for batch in (1, 2):
        for family in ("dense", "block", "unstructured"):
            got = trace_rows[(trace_rows["batch"] == batch) & (trace_rows["family"] == family)]
            have = set(zip(got["m"], got["k"], got["n"] // batch, got["groups"], strict=True))
            assert set(map(tuple, shapes.to_numpy().tolist())) <= have
    assert done and done[-1][0] >= result.trace_configs
    assert "fraction of the speed of light" in result.summary_text()
    assert set(result.summary()["family"]) >= {"dense", "block", "unstructured"}
    out = write_dataset(result, tmp_path / "toy.parquet", "dse measure --model toy_hybrid")
    from dse.measure.dataset import load_dataset, provenance

    assert len(load_dataset(out)) == len(frame)
    assert provenance(out)["command"] == "dse measure --model toy_hybrid"


def test_rounds_time_every_configuration_again_and_share_the_budget(host_toml):
    # Same clock as above; 3 rounds: the first round's share is 60 / 3 = 20 s, so sampling
    # stops as it does with a 20 s budget and one round (6 configurations); rounds 1 and 2
    # then time every trace and sampled configuration again, whatever the budget says.
    clock = TickClock(1.0)
    done = []
    result = measure("toy_hybrid", host_toml, ["block4@87.5%", "unstructured@90%"], [1],
                     budget_s=60, clock=clock, method=FAST, threads=1, rounds=3,
                     progress=lambda d, t: done.append((d, t)))
    assert result.sampled_configs == 6
    assert result.provenance["rounds"] == 3
    timed = result.frame[result.frame["error"] == ""]
    kernel = ["source", "op", "family", "implementation", "format", "m", "k", "n", "groups",
              "batch"]
    first = timed[timed["round"] == 0].set_index(kernel).index
    for later in (1, 2):
        again = timed[timed["round"] == later].set_index(kernel).index
        assert sorted(again) == sorted(first)
    # shape fallbacks are said once, not timed again
    assert set(result.frame.loc[result.frame["error"] != "", "round"]) <= {0}
    assert done[-1][0] == done[-1][1]


def test_rounds_refuse_nonsense(host_toml):
    with pytest.raises(MeasureError, match="--rounds"):
        measure("toy_hybrid", host_toml, [], [1], budget_s=1, rounds=0)


def test_warm_times_trace_shapes_and_vector_ops_again_without_the_flush(host_toml):
    clock = TickClock(1.0)
    result = measure("toy_hybrid", host_toml, ["block4@87.5%"], [1], budget_s=8, clock=clock,
                     method=FAST, threads=1, rounds=1, warm=True)
    timed = result.frame[result.frame["error"] == ""]
    kernel = ["source", "op", "family", "implementation", "format", "m", "k", "n", "groups"]
    trace = timed[timed["source"] == "trace"]
    cold = trace[trace["cache"] == "cold"].set_index(kernel).index
    warm = trace[trace["cache"] == "warm"].set_index(kernel).index
    assert len(cold) and sorted(cold) == sorted(warm)
    assert {"vector", "dense", "block"} <= set(trace.loc[trace["cache"] == "warm", "family"])
    assert set(timed.loc[timed["source"] == "sample", "cache"]) <= {"cold"}
    assert result.provenance["caches"] == ["cold", "warm"]
