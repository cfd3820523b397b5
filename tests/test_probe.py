"""`dse hw probe` as library code: the spec TOML round-trips through the strict loader, dse
evaluates with it, provenance is kept and moves nothing, and bad input is refused. Timing values
are never asserted: the probe result here is built by hand."""

from __future__ import annotations

import pytest

import accelerator_models
import dse
from dse.measure import host
from dse.measure.probe import Figure, ProbeError, ProbeResult, probe, probe_spec_toml


def _figure(value, unit="FLOP/s"):
    return Figure(value, unit, "hand-made for a test", 5, 0.95 * value, 1.05 * value)


def _result() -> ProbeResult:
    figures = {"dram_triad": _figure(20e9, "B/s"), "gemm_fp32": _figure(100e9),
               "gemm_bf16": _figure(300e9), "vector_fma_fp32": _figure(140e9),
               "gemm_fp64": _figure(45e9), "launch_overhead": _figure(2e-6, "s")}
    sources = {"dram_bandwidth_bytes_per_s": "dram_triad", "tensor_flops_per_s.tf32": "gemm_fp32",
               "tensor_flops_per_s.bf16": "gemm_bf16", "vector_flops_per_s.fp32": "vector_fma_fp32",
               "kernel_launch_overhead_s": "launch_overhead"}
    return cpu_result(figures, sources, ("a note with \"quotes\"",), torch="2.14.1")


def cpu_result(figures: dict, sources: dict, notes: tuple = (), **facts) -> ProbeResult:
    """A hand-made probe result of a 2-core test CPU whose spec fields come from ``figures``
    through ``sources`` (field path -> figure name); ``facts`` added to the machine's."""
    fields = {path: figures[name].value for path, name in sources.items()}
    fields.update({"block_sparse.supported": True, "block_sparse.min_block_size": 1,
                   "sm_count": 2, "shared_memory_per_sm_bytes": 1048576.0,
                   "l2_bytes": 33554432.0})
    machine = {"date": "2026-11-22T17:00:00+00:00", "device": "cpu", "cpu_model": "Test CPU",
               "device_name": "Test CPU", "caches_bytes": {"l1d": 49152, "l2": 1048576},
               **facts, "idle": True, "other_cores": 0.01}
    return ProbeResult("cpu", fields, figures, machine, notes, sources=sources, elapsed_s=12.3)


def test_probe_toml_round_trips_through_the_strict_loader(tmp_path):
    path = tmp_path / "host.toml"
    path.write_text(probe_spec_toml(_result(), command="dse hw probe --out host.toml"))
    acc = accelerator_models.load(str(path))
    assert acc.name == "host"
    assert acc.dram_bandwidth_bytes_per_s == 20e9
    assert acc.tensor_flops_per_s == {"tf32": 100e9, "bf16": 300e9}
    assert acc.vector_flops_per_s == {"fp32": 140e9}
    assert acc.sm_count == 2 and acc.l2_bytes == 33554432.0
    assert acc.kernel_launch_overhead_s == 2e-6
    assert acc.sparse_tensor is None and acc.supports_block(1)
    prov = acc.provenance
    assert prov["command"] == "dse hw probe --out host.toml"
    assert prov["figures"]["dram_triad"]["repeats"] == 5
    assert prov["figures"]["dram_triad"]["spread"] == pytest.approx(0.1, abs=1e-3)
    assert prov["fields"]["tensor_flops_per_s.tf32"] == "gemm_fp32"
    assert prov["machine"]["caches_bytes"]["l2"] == 1048576


def test_dse_evaluates_with_the_probed_spec(tmp_path):
    path = tmp_path / "host.toml"
    path.write_text(probe_spec_toml(_result()))
    cpu = dse.Numerics(dtype="tf32", vector_dtype="fp32", csr_dtype="fp32")
    table = dse.evaluate("toy_hybrid", str(path), ["block4@87.5%", "unstructured@90%"],
                         batches=[1, 8], numerics=cpu)
    assert (table["latency_s"] > 0).all()
    # fp16 is not written when the CPU lacks it: the default dtype is refused in one line
    with pytest.raises(accelerator_models.SpecError, match="tensor_flops_per_s.fp16"):
        dse.evaluate("toy_hybrid", str(path), ["2:4"])


def test_provenance_moves_nothing(tmp_path):
    plain = tmp_path / "plain.toml"
    text = probe_spec_toml(_result())
    plain.write_text(text.split("\n[provenance]\n")[0])
    with_prov = tmp_path / "prov.toml"
    with_prov.write_text(text)
    a, b = accelerator_models.load(str(plain)), accelerator_models.load(str(with_prov))
    assert a.provenance == {} and b.provenance
    assert a == b  # provenance is not compared
    t1 = dse.evaluate("toy_hybrid", a, ["block4@87.5%"], numerics=dse.Numerics("tf32", "fp32"))
    t2 = dse.evaluate("toy_hybrid", b, ["block4@87.5%"], numerics=dse.Numerics("tf32", "fp32"))
    assert t1["latency_s"].tolist() == t2["latency_s"].tolist()


def test_provenance_must_be_a_table(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('extends = "a100"\nprovenance = 3\n')
    with pytest.raises(accelerator_models.SpecError, match=r"\[provenance\]"):
        accelerator_models.load(str(path))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"device": "tpu"}, "--device"),
    ({"repeats": 1}, "--repeats"),
    ({"repeats": True}, "--repeats"),
])
def test_probe_refuses_bad_input_in_one_line(kwargs, match):
    with pytest.raises(ProbeError, match=match) as info:
        probe(**kwargs)
    assert "\n" not in str(info.value)


def test_cache_sizes_are_bytes_by_level():
    sizes = host.cache_sizes()
    assert set(sizes) <= {"l1d", "l2", "l3", "l4"}
    assert all(isinstance(v, int) and v > 0 for v in sizes.values())


def test_size_parser():
    assert host._parse_size("48K") == 49152
    assert host._parse_size("32768K") == 32 * 2**20
    assert host._parse_size("1M") == 2**20
    assert host._parse_size("junk") is None


def test_fingerprint_names_the_machine_without_importing_torch():
    facts = host.fingerprint("cpu")
    assert facts["device"] == "cpu" and facts["cores"] >= 1 and facts["cpu_model"]
    assert facts["device_name"] == facts["cpu_model"]


def test_a_probed_spec_is_a_ceiling_with_its_cache_levels(tmp_path):
    result = _result()
    result.figures["l1_read"] = _figure(900e9, "B/s")
    result.figures["l2_read"] = _figure(400e9, "B/s")
    result.fields.update({"cache.l1_bytes": 98304.0, "cache.l1_bandwidth_bytes_per_s": 900e9,
                          "cache.l2_bytes": 2097152.0, "cache.l2_bandwidth_bytes_per_s": 400e9})
    path = tmp_path / "host.toml"
    path.write_text(probe_spec_toml(result))
    acc = accelerator_models.load(str(path))
    # Measured figures are ceilings: the roofline on them is no bound, and says so.
    assert acc.figures == "ceiling" and not acc.is_bound
    assert [(c.name, c.capacity_bytes, c.bandwidth_bytes_per_s) for c in acc.cache_levels] \
        == [("l1", 98304.0, 900e9), ("l2", 2097152.0, 400e9)]
    assert "not a bound" in path.read_text()


def test_a_probed_figure_is_the_best_of_its_repeats():
    from dse.measure.probe import _figure as figure

    rate = figure([1.0, 3.0, 2.0], "B/s", "m")
    assert (rate.value, rate.median, rate.min, rate.max) == (3.0, 2.0, 1.0, 3.0)
    assert rate.spread == pytest.approx((3.0 - 1.0) / 2.0)
    seconds = figure([2e-6, 1e-6, 3e-6], "s", "m")
    assert seconds.value == 1e-6


def test_cache_read_bandwidth_is_measured_per_level():
    from dse.measure.probe import _cache_bandwidths

    figures = _cache_bandwidths(3, {"l1d": 49152, "l2": 1048576, "l3": 8 * 1048576})
    assert set(figures) == {"l1_read", "l2_read", "l3_read"}
    for fig in figures.values():
        assert fig.unit == "B/s" and fig.repeats == 3 and fig.value >= fig.median > 1e8


def test_a_probed_cpu_spec_evaluates_as_printed(tmp_path, capsys):
    """What `dse hw probe` tells the user to run next works: a CPU spec without an fp16 rate is
    evaluated in a dtype it has, and the output says which."""
    from tests.cli_run import run_cli

    path = tmp_path / "h.toml"
    path.write_text(probe_spec_toml(_result()))
    assert run_cli(["evaluate", "--hw", str(path), "--model", "toy_hybrid"]) == 0
    out = capsys.readouterr().out
    assert "assumed --dtype bf16 --vector-dtype fp32" in out
    # A dtype the user gives is taken as given (and refused in one line if the spec lacks it).
    assert run_cli(["evaluate", "--hw", str(path), "--model", "toy_hybrid", "--dtype",
                    "tf32", "--vector-dtype", "fp32"]) == 0
    assert "assumed" not in capsys.readouterr().out
    assert run_cli(["evaluate", "--hw", str(path), "--model", "toy_hybrid", "--dtype",
                    "fp16"]) == 2
    assert "tensor_flops_per_s.fp16" in capsys.readouterr().err


# --- the probe's arithmetic, with the clock replaced: work counted by hand ------------------


def test_probe_rates_divide_the_hand_counted_work_by_the_time(monkeypatch):
    """Each figure is work / time: the clock is replaced by fixed seconds, so the figures must
    equal the work counted by hand (bytes a read pass moves, FLOPs of the FMA loop and GEMM)."""
    import numpy as np

    from dse.measure import probe as p

    monkeypatch.setattr(p, "_samples", lambda fn, repeats, warmup=1: [0.5, 0.25, 1.0])
    monkeypatch.setattr(p, "_fma_kernel", lambda: lambda x, a, b, reps: None)
    monkeypatch.setattr(p, "_read_kernel", lambda: lambda x, reps: None)
    threads = p._threads()

    fp32 = p._vector_fp32(3)  # 8 dependent FMAs (2 FLOPs) per element, rows of 1024, 50,000 passes
    assert fp32.value == 2 * 8 * threads * 1024 * 50_000 / 0.25
    assert fp32.median == 2 * 8 * threads * 1024 * 50_000 / 0.5

    l1 = p._cache_bandwidths(3, {"l1d": 48 * 1024})["l1_read"]
    n = 48 * 1024 // 2 // 4  # float32 elements in half a core's L1
    reps = max(1, int(2e9 // (4 * n * threads)) // 10)
    assert l1.value == 4 * n * threads * reps / 0.25
    assert "24 KiB" in l1.method

    torch = pytest.importorskip("torch")
    gemm = p._gemm(torch, torch.float32, (64,), 3)
    assert gemm.value == 2 * 64 ** 3 / 0.25
    assert np.isclose(gemm.min, 2 * 64 ** 3 / 1.0)


def test_the_fingerprint_records_the_allocator_settings():
    """A sparse whole model on a CPU runs 1.6x faster or slower with the same kernels under
    another allocator setting (benchmarks/cpu/allocator_effect.py): a measurement records
    which one it ran under; none set means the C library's defaults."""
    from dse.measure.host import ALLOCATOR_VARIABLES, allocator_settings, fingerprint

    env = {"MALLOC_MMAP_THRESHOLD_": "2147483647", "LD_PRELOAD": "", "PATH": "/usr/bin",
           "MALLOC_ARENA_MAX": "2"}
    assert allocator_settings(env) == {"MALLOC_MMAP_THRESHOLD_": "2147483647",
                                       "MALLOC_ARENA_MAX": "2"}
    assert allocator_settings({}) == {}
    assert "LD_PRELOAD" in ALLOCATOR_VARIABLES
    assert fingerprint()["allocator"] == allocator_settings()
