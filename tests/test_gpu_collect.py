"""`benchmarks/gpu/collect` end to end on the CPU with --smoke: every part writes rows that load
through dse's dataset schema (and the profile and energy schemas), the speed of light matches a
hand-computed roofline, 2:4 on the CPU is recorded as refused (never timed as if it ran), a
rerun does no work for complete parts, an incomplete part resumes at its first missing item,
and bad input is one line with a non-zero exit. Nothing here depends on timing values."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")

import accelerator_models  # noqa: E402
from benchmarks.gpu import (  # noqa: E402
    collect,
    collect_conv,
    collect_dtype,
    collect_gemm,
    collect_models,
    collect_sparse,
    collect_vector,
)
from benchmarks.gpu.collect_energy import ENERGY_SCHEMA  # noqa: E402
from benchmarks.gpu.collect_store import CollectError, conform  # noqa: E402
from dse.measure import rapl  # noqa: E402
from dse.measure.dataset import load_dataset  # noqa: E402

from .test_probe import _result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def host_toml(tmp_path_factory) -> str:
    from dse.measure.probe import probe_spec_toml

    path = tmp_path_factory.mktemp("hw") / "host.toml"
    path.write_text(probe_spec_toml(_result()))
    return str(path)


def _args(out: Path, hw: str, *more: str) -> list[str]:
    return ["--device", "cpu", "--smoke", "--out", str(out), "--hw", hw, *more]


def _log_sections(out: Path) -> list[str]:
    """The log of each invocation (they start with a '=== command' line)."""
    text = (out / "collect.log").read_text()
    return ["=== " + s for s in text.split("=== ")[1:]]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, host_toml):
    out = tmp_path_factory.mktemp("collect") / "run"
    code = collect.main(_args(out, host_toml, "--budget", "5", "--parts", EVERY_PART))
    return out, code


#: ``--parts`` for every part (``all`` is the first collection's five).
EVERY_PART = ",".join(collect.PARTS)


def test_smoke_run_completes_every_part_and_writes_schema_tables(smoke):
    out, code = smoke
    assert code == 0
    state = json.loads((out / "state.json").read_text())
    assert state["identity"]["smoke"] is True and len(state["invocations"]) >= 1
    for part in collect.PARTS:
        meta = json.loads((out / "parts" / f"{part}.json").read_text())
        assert meta["status"] == "complete", part
        assert meta["done"] == [i.key for i in collect.PARTS[part].items(True)]
    frame = load_dataset(out / "kernels.parquet")  # dse's loader validates the schema
    assert set(frame["family"]) == {"dense", "nm", "block", "unstructured", "vector", "model"}
    timed = frame[frame["error"] == ""]
    kernels = timed[timed["family"] != "model"]
    assert set(kernels["cache"]) == {"cold", "warm"}
    # every timed kernel configuration has both a cold and a warm row
    keys = ["implementation", "kind", "m", "k", "n", "groups"]
    assert (kernels.groupby(keys)["cache"].nunique() == 2).all()
    assert (timed["median_s"] > 0).all() and (timed["min_s"] <= timed["median_s"]).all()
    assert set(kernels.loc[kernels["kind"] == "conv", "groups"]) == {16, 4, 1}
    # part copy: the data movement a trace calls other, timed like any vector op
    assert set(kernels.loc[kernels["kind"] == "other", "op"]) == set(collect_vector.COPY_NAMES)
    fingerprint = json.loads(frame["fingerprint"].iloc[0])
    assert fingerprint["collect"]["flush"] == "read" and fingerprint["torch"] == torch.__version__
    prov = json.loads((out / "kernels.json").read_text())
    assert prov["rows"] == len(frame) and prov["parts"] == list(collect.PARTS)
    profiles = conform(pd.read_parquet(out / "profiles.parquet"),
                       collect_models.PROFILE_SCHEMA, "profiles")
    energy = conform(pd.read_parquet(out / "energy.parquet"), ENERGY_SCHEMA, "energy")
    assert len(profiles) and len(energy) == len(collect.PARTS["energy"].items(True))


def test_cpu_2to4_is_recorded_as_refused_never_timed(smoke):
    out, _ = smoke
    frame = load_dataset(out / "kernels.parquet")
    nm = frame[(frame["family"] == "nm") & frame["why"].str.startswith("collect gemm")]
    shapes = collect_gemm.shapes(smoke=True) + collect_gemm.more_shapes(smoke=True)
    assert len(nm) == 2 * len(shapes)  # cusparselt and cusparselt_linear, one row each
    assert (frame.loc[frame["family"] == "nm", "error"] != "").all()  # dtype_gemm's too
    assert (nm["error"] != "").all() and nm["median_s"].isna().all()
    sparse_models = frame[(frame["family"] == "model") & (frame["format"] == "2:4")]
    assert len(sparse_models) == len(collect_models.SMOKE_MODELS + collect_models.MORE_SMOKE_MODELS)
    assert sparse_models["error"].str.startswith("2:4 variant not run").all()
    assert sparse_models["median_s"].isna().all()
    profiles = pd.read_parquet(out / "profiles.parquet")
    assert set(profiles["variant"]) == {"dense"}  # no profile of a sparse model that never ran


def test_speed_of_light_matches_the_hand_computed_roofline(smoke, host_toml):
    out, _ = smoke
    hw = accelerator_models.load(host_toml)
    frame = load_dataset(out / "kernels.parquet")
    cold = frame[(frame["error"] == "") & (frame["cache"] == "cold")
                 & (frame["family"] != "model")
                 & ~frame["why"].str.startswith("collect dtype_gemm")]  # its own test, below
    assert (cold["hw"] == hw.name).all() and cold["sol_s"].notna().all()
    e = 4  # fp32 on the CPU, priced on the spec's tf32 and fp32 vector rates
    bw = hw.dram_bandwidth_bytes_per_s
    for r in cold[(cold["kind"] == "linear") & (cold["format"] == "dense")].itertuples():
        nbytes = e * (r.m * r.k + r.k * r.n + r.m * r.n)
        want = max(2 * r.m * r.k * r.n / hw.tensor_flops_per_s["tf32"], nbytes / bw)
        assert r.bytes == nbytes and math.isclose(r.sol_s, want, rel_tol=1e-9)
    convs = {(*s.gemm, s.groups): s for s in collect_conv.shapes(True)
             + collect_conv.dense_shapes(True) + collect_conv.random_shapes(True)
             + collect_conv.random2_shapes(True)}
    for r in cold[cold["kind"] == "conv"].itertuples():
        # the real tensors: the input rows the windows read (B x C_in x H x W unless the stride
        # outruns the kernel), output B x C x Ho x Wo, weight C x C_in/g x kh x kw
        s = convs[(r.m, r.k, r.n, r.groups)]
        nbytes = e * (s.batch * s.c_in * s.read_size ** 2 + s.batch * s.channels * s.out_size ** 2
                      + s.channels * s.c_in // s.groups * s.kernel ** 2)
        want = max(2 * r.groups * r.m * r.k * r.n / hw.tensor_flops_per_s["tf32"], nbytes / bw)
        assert r.bytes == nbytes and math.isclose(r.sol_s, want, rel_tol=1e-9)
    add = cold[(cold["kind"] == "elementwise") & (cold["kernel"].str.startswith("torch.add"))
               & cold["why"].str.startswith("collect vector:")]
    assert len(add) == 1
    n = int(add["n"].iloc[0])
    assert add["flops"].iloc[0] == n and add["bytes"].iloc[0] == 3 * e * n
    assert math.isclose(add["sol_s"].iloc[0], 3 * e * n / bw, rel_tol=1e-9)
    warm = frame[(frame["error"] == "") & (frame["cache"] == "warm")
                 & (frame["family"] != "model")
                 & ~frame["why"].str.startswith("collect dtype_gemm")]
    if not hw.cache_levels:  # no cache levels: no warm bound, and the rows say why
        assert warm["sol_s"].isna().all() and warm["note"].str.contains("no warm bound").all()


def test_dtype_part_prices_each_row_at_its_own_number_type(smoke, host_toml):
    out, _ = smoke
    hw = accelerator_models.load(host_toml)  # tensor rates: tf32 and bf16 only
    frame = load_dataset(out / "kernels.parquet")
    rows = frame[frame["why"].str.startswith("collect dtype_gemm")]
    shapes = {(s.m, s.k, s.n) for s in collect_dtype.shapes(True)}
    assert set(zip(rows["m"], rows["k"], rows["n"], strict=True)) == shapes
    timed = rows[rows["error"] == ""]
    # torch's CPU kernels run the dense products in every type; 2:4, fp8 2:4 and the int4
    # packing are CUDA only: refused rows, never timed
    assert set(zip(timed["implementation"], timed["dtype"], strict=True)) == {
        ("torch_linear", "fp16"), ("torch", "bf16"), ("torch_linear", "bf16"),
        ("scaled_mm", "fp8"), ("int_mm", "int8"), ("int_mm_weight_first", "int8"),
        ("int8_weight_only", "bf16"),
        ("int8_dequant_linear", "bf16")}
    refused = rows[rows["error"] != ""]
    assert set(refused["implementation"]) == {"cusparselt_linear", "cusparselt",
                                              "cusparselt_fp8", "cusparselt_int8",
                                              "int4_tinygemm"}
    assert refused["median_s"].isna().all() and len(refused) == 6 * len(shapes)
    bw = hw.dram_bandwidth_bytes_per_s
    cold = timed[timed["cache"] == "cold"]
    for r in cold.itertuples():
        mk, kn, mn = r.m * r.k, r.k * r.n, r.m * r.n
        if r.dtype != "bf16":  # no fp16, fp8 or int8 rate on this spec: no bound, and why
            assert math.isnan(r.sol_s) and f"no tensor_flops_per_s.{r.dtype}" in r.note
            continue
        if r.implementation.startswith("int8_"):  # int8 weights, one fp16 scale a row
            nbytes = mk + 2 * r.m + 2 * (kn + mn)
            assert "weights int8" in r.note
        else:
            nbytes = 2 * (mk + kn + mn)
        want = max(2 * r.m * r.k * r.n / hw.tensor_flops_per_s["bf16"], nbytes / bw)
        assert r.bytes == nbytes and math.isclose(r.sol_s, want, rel_tol=1e-9)


def test_sparse_part_times_every_format_on_its_pruned_weight(smoke):
    out, _ = smoke
    frame = load_dataset(out / "kernels.parquet")
    rows = frame[frame["why"].str.startswith("collect sparse_random")]
    (item,) = collect_sparse.shapes(True)  # 128 x 256, blocks at 75%, CSR at 87.5%
    assert set(rows["format"]) == set(item.formats) == {
        "dense", "block16@75%", "block32@75%", "block64@75%", "unstructured@87.5%"}
    assert (rows["error"] == "").all() and set(rows["cache"]) == {"cold", "warm"}
    # the trainer's masks keep a quarter of the blocks and an eighth of the weights, exactly
    nnz = rows.groupby("format")["nnz"].unique().map(lambda v: set(int(x) for x in v))
    assert nnz.to_dict() == {"dense": {128 * 256}, "block16@75%": {8192}, "block32@75%": {8192},
                             "block64@75%": {8192}, "unstructured@87.5%": {4096}}
    dense = rows[rows["format"] == "dense"]["bytes"].max()
    assert (rows[rows["format"] != "dense"]["bytes"] < dense).all()


def test_strided_part_times_the_transposed_add_beside_the_contiguous_one(smoke):
    out, _ = smoke
    frame = load_dataset(out / "kernels.parquet")
    rows = frame[frame["why"].str.startswith("collect strided_add")]
    (shape,) = {(s.rows, s.width) for s in collect_vector.strided_adds(True)}
    n = shape[0] * shape[1]
    assert sorted(set(rows["op"])) == ["add", "add_strided"] and len(rows) == 4
    assert (rows["error"] == "").all() and (rows["n"] == n).all()
    # fp32 on the CPU: two inputs and one output, each element once; one FLOP each
    assert (rows["bytes"] == 3 * 4 * n).all() and (rows["flops"] == n).all()
    assert rows.loc[rows["op"] == "add_strided", "kernel"].str.contains("y.t()", regex=False).all()


def test_math_checks_part_times_the_fp32_checks_at_the_trace_op_sizes(smoke):
    out, _ = smoke
    frame = load_dataset(out / "kernels.parquet")
    rows = frame[frame["why"].str.startswith("collect math_checks")].set_index(["op", "cache"])
    assert sorted(set(rows.index.get_level_values("op"))) == ["all", "isneginf", "where"]
    assert (rows["dtype"] == "fp32").all() and (rows["error"] == "").all()
    groups, t = 2, 16  # the smoke attention: one image, 2 heads, 16 tokens
    assert (rows.loc["isneginf", "n"] == groups * t * t).all()
    assert (rows.loc["all", "n"] == groups * t).all()  # one flag per row of scores
    assert (rows.loc["all", "kind"] == "reduce").all()
    assert (rows["flops"] == groups * t * t).all()


def test_profiles_count_every_linear_of_the_model(smoke):
    out, _ = smoke
    profiles = pd.read_parquet(out / "profiles.parquet")
    for name in collect_models.SMOKE_MODELS + collect_models.MORE_SMOKE_MODELS:
        model = timm.create_model(name, pretrained=False)
        linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
        rows = profiles[(profiles["model"] == name) & (profiles["name"] == "aten::linear")]
        assert rows["calls"].sum() == linears
        assert (rows["level"] == "op").all() and rows["input_shapes"].str.startswith("[[").all()
        ordered = profiles[profiles["model"] == name]["order"]
        assert list(ordered) == list(range(len(ordered)))


def test_energy_without_a_counter_says_why(smoke):
    out, _ = smoke
    energy = pd.read_parquet(out / "energy.parquet")
    if rapl.available():
        assert set(energy["status"]) <= {"ok", "error"}
    else:  # this project's VMs: no RAPL, so no reading and no invented one
        assert (energy["status"] == "unavailable").all()
        assert energy["reason"].str.contains("RAPL").all() and energy["joules"].isna().all()


def test_rerun_does_no_work_for_complete_parts(smoke, host_toml):
    out, _ = smoke
    parts = sorted((out / "parts").glob("*"))
    before = {p: p.stat().st_mtime_ns for p in parts}
    assert collect.main(_args(out, host_toml, "--budget", "5", "--parts", EVERY_PART)) == 0
    assert {p: p.stat().st_mtime_ns for p in parts} == before
    last = _log_sections(out)[-1]
    for part in collect.PARTS:
        assert f"{part}: complete in an earlier invocation; skipped" in last
        assert f"{part}: running" not in last and f"{part} 1/" not in last


def test_rerun_refuses_a_folder_of_another_configuration(smoke, host_toml, capsys):
    out, _ = smoke
    assert collect.main(_args(out, host_toml, "--flush", "write")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "flush='read'" in err and "--out" in err


def test_incomplete_part_resumes_at_the_first_missing_item(tmp_path, host_toml, capsys):
    out = tmp_path / "resume"
    items = [i.key for i in collect.PARTS["vector"].items(True)]
    # 0.03 s: the first item always runs, the budget then has no room for a second
    assert collect.main(_args(out, host_toml, "--parts", "vector", "--budget", "0.0005")) == 3
    assert "incomplete: vector" in capsys.readouterr().err
    assert "vector: budget spent" in _log_sections(out)[-1]
    first = json.loads((out / "parts" / "vector.json").read_text())
    assert first["status"] == "incomplete" and 1 <= len(first["done"]) < len(items)
    assert not (out / "kernels.parquet").exists()  # an incomplete part is never merged
    assert collect.main(_args(out, host_toml, "--parts", "vector", "--budget", "5")) == 0
    second = json.loads((out / "parts" / "vector.json").read_text())
    assert second["done"] == items
    log = _log_sections(out)[-1]
    assert not any(f" {key}: " in log for key in first["done"])  # not run again
    frame = load_dataset(out / "kernels.parquet")
    assert len(frame) == 2 * len(items)  # one cold and one warm row per item, none twice


@pytest.mark.parametrize("budget", ["-5", "nan"])
def test_bad_budget_on_the_command_line_is_one_line_and_a_nonzero_exit(tmp_path, budget):
    out = tmp_path / "never"
    done = subprocess.run(["sh", str(ROOT / "benchmarks/gpu/collect"), "--device", "cpu",
                           "--budget", budget, "--out", str(out)], capture_output=True,
                          text=True, env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
                          timeout=120, check=False)
    assert done.returncode == 2
    assert done.stdout == "" and done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"collect: --budget {budget}: ")
    assert not out.exists()  # refused before anything was written


@pytest.mark.parametrize(("argv", "words"), [
    (["--budget", "0"], "--budget 0: give a positive number of minutes"),
    (["--budget", "inf"], "--budget inf"),
    (["--budget", "soon"], "--budget soon"),
    (["--parts", "gemm24,nonsense"], "--parts gemm24,nonsense: unknown part 'nonsense'"),
    (["--seed", "x"], "--seed"),
    (["--device", "tpu"], "--device"),
    (["--hw", "no_such_gpu"], "--hw no_such_gpu"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, argv, words, capsys):
    assert collect.main(["--device", "cpu", "--out", str(tmp_path / "x"), *argv]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.count("\n") == 0 and words in err and "Traceback" not in err
    assert captured.out == "" and not (tmp_path / "x").exists()


@pytest.mark.parametrize(("text", "seconds"), [("35", 2100.0), ("0.5", 30.0), ("90s", 90.0),
                                                ("1h", 3600.0)])
def test_budget_is_minutes_or_a_duration(text, seconds):
    assert collect.parse_budget(text) == seconds


def test_plan_splits_the_budget_and_passes_unused_time_on():
    parts = ["gemm24", "vector", "models"]
    shares = collect.plan(parts, 600.0)
    assert math.isclose(sum(shares.values()), 600.0)
    weights = {p: collect.PARTS[p].weight for p in parts}
    assert math.isclose(shares["gemm24"], 600.0 * weights["gemm24"] / sum(weights.values()))
    # the last part gets all that is left, whatever the earlier ones spent
    assert collect._share(parts, 2, 123.0) == 123.0
    with pytest.raises(CollectError, match="--parts"):
        collect.parse_parts("gemm24,energy,bogus")
    assert collect.parse_parts("energy,gemm24") == ["gemm24", "energy"]
    # all: the first collection's parts, so that rerunning its command adds nothing new
    assert collect.parse_parts("all") == list(collect.ALL) == list(collect.PARTS)[:5]


def test_conv_rows_charge_only_the_input_their_windows_read():
    stem = collect_conv.ConvShape("stem", 64, 1, 7, 2, 224, 1, in_channels=3, pad=3)
    shortcut = collect_conv.ConvShape("down", 512, 1, 1, 2, 56, 1, in_channels=256, pad=0)
    patch = collect_conv.ConvShape("patch", 384, 1, 16, 16, 224, 1, in_channels=3, pad=0)
    assert (stem.read_size, shortcut.read_size, patch.read_size) == (224, 28, 224)
    assert stem.gemm == (64, 3 * 49, 112 * 112) and shortcut.gemm == (512, 256, 28 * 28)


def test_random_convolutions_are_fixed_and_priceable():
    from workloads.trace import MAX_PER_SAMPLE

    first, again = collect_conv.random_geometries(), collect_conv.random_geometries()
    assert first == again and len(first) == 48  # the same items on every run (resuming)
    for s in collect_conv.random_shapes():
        assert s.batch * max(s.c_in * s.size ** 2, s.channels * s.out_size ** 2) \
            <= MAX_PER_SAMPLE
        assert s.channels * (s.c_in // s.groups) * s.kernel ** 2 * s.out_size ** 2 \
            <= 2 * collect_conv.RANDOM_MAX_MACS
    more = {(s.m, s.k, s.n) for s in collect_gemm.more_shapes()}
    assert more and not more & {(s.m, s.k, s.n) for s in collect_gemm.shapes()}


def test_second_random_draws_are_fixed_new_and_priceable():
    from workloads.trace import MAX_PER_SAMPLE

    draw = collect_conv.random2_geometries()
    assert draw == collect_conv.random2_geometries()  # the same items on every run (resuming)
    names = [g[0] for g in draw]
    assert (names.count("random2 dense"), names.count("random2 grouped"),
            names.count("random2 dw")) == (40, 16, 12)
    # a second draw: no geometry of the first, so that its held-out shapes are new
    assert not {g[1:] for g in draw} & {g[1:] for g in collect_conv.random_geometries()}
    for name, c_in, c_out, groups, *_ in draw:
        assert c_in % groups == 0 and c_out % groups == 0
        assert (groups == 1) == (name == "random2 dense")
        assert name != "random2 dw" or groups == c_in == c_out
    for s in collect_conv.random2_shapes():
        assert s.batch * max(s.c_in * s.size ** 2, s.channels * s.out_size ** 2) \
            <= MAX_PER_SAMPLE
    ops = collect_vector.random_ops()
    assert ops == collect_vector.random_ops() and len({o.key for o in ops}) == len(ops)
    for op in ops:  # each one builds: a norm's rows whole, a scale's width divides its size
        assert 0 < op.input_elems <= 2 * collect_vector.RANDOM_MAX_ELEMS
        if op.kind == "norm":
            assert op.output_elems % (op.weight_elems // 2) == 0
        if op.name == "mul":
            assert op.output_elems % op.weight_elems == 0
        if op.kind == "other":
            assert op.input_elems % 4096 == 0
    assert {o.name for o in ops} >= {"layer_norm", "gelu", "softmax", "add", "mul", "mean",
                                     "clone", "roll", "constant_pad_nd", "index"}


def test_gemm_shapes_cover_llm_decode_and_are_distinct():
    shapes = collect_gemm.shapes()
    assert len(shapes) >= 300
    assert len({(s.m, s.k, s.n) for s in shapes}) == len(shapes)
    decode = {(s.m, s.k) for s in shapes if s.group == "llm-decode"}
    assert {(4096, 4096), (11008, 4096), (14336, 4096), (5120, 5120), (8192, 8192)} <= decode
    assert {s.n for s in shapes if s.group == "llm-decode"} == set(collect_gemm.DECODE_N)
    assert min(collect_gemm.DECODE_N) == 1 and max(collect_gemm.DECODE_N) == 64
    assert all(s.k % 64 == 0 or s.group in ("vit", "convnext") for s in shapes)


@pytest.mark.parametrize("smoke_run", [True, False])
def test_item_keys_are_unique_in_every_part(smoke_run):
    for part in collect.PARTS.values():
        keys = [i.key for i in part.items(smoke_run)]
        assert len(keys) == len(set(keys)), part.name


def test_2to4_weights_keep_the_two_largest_of_every_four():
    from benchmarks.gpu.collect_rows import Bench

    bench = Bench("cpu", True, 0, None, {}, None, None, print)
    ops = collect_gemm.weights(bench, 8, 16)
    w, w24 = ops["w"].numpy(), ops["w24"].numpy()
    runs, kept = np.abs(w).reshape(8, 4, 4), (w24 != 0).reshape(8, 4, 4)
    assert (kept.sum(axis=-1) == 2).all()
    for row, keep in zip(runs.reshape(-1, 4), kept.reshape(-1, 4), strict=True):
        assert set(np.flatnonzero(keep)) == set(np.argsort(row)[-2:])  # naive reference
    assert np.array_equal(w24[w24 != 0], w[w24 != 0])
    assert isinstance(ops["sparse"], Exception)  # torch has no CPU semi-structured kernels


@pytest.mark.parametrize(("name", "spec"), [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H200", "h200"), ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("NVIDIA L4", "l4"), ("NVIDIA L40S", None),
    ("Some Other GPU", None)])
def test_gpu_names_map_to_catalog_specs(name, spec):
    assert collect._catalog_spec(name) == spec
    if spec is not None:
        accelerator_models.load(spec)


class _Event:
    """A ``torch.profiler`` FunctionEvent as ``profile_rows`` reads it (times in us)."""

    def __init__(self, name, start, parent=None, shapes=(), cpu=0.0, self_cpu=0.0,
                 device=0.0, self_device=0.0, kernels=(), device_type="DeviceType.CPU"):
        from types import SimpleNamespace

        self.name, self.cpu_parent, self.device_type = name, parent, device_type
        self.input_shapes = [list(s) for s in shapes]
        self.time_range = SimpleNamespace(start=start)
        self.cpu_time_total, self.self_cpu_time_total = cpu, self_cpu
        self.device_time_total, self.self_device_time_total = device, self_device
        self.kernels = [SimpleNamespace(name=n, duration=d) for n, d in kernels]


def _sparse_linear_forward(t0: float) -> list[_Event]:
    """One forward of a converted linear as torch 2.14 dispatches it: a transpose view, the
    custom op around _cslt_sparse_mm (a 10 us kernel) and a contiguous copy (a 3 us kernel)."""
    linear = _Event("aten::linear", t0, shapes=[(8, 64), (64, 64)], cpu=50, self_cpu=5,
                    device=13, self_device=0)
    t = _Event("aten::t", t0 + 1, linear, [(64, 64)], cpu=2, self_cpu=2)
    mm = _Event("semi_structured::cusparselt_mm", t0 + 2, linear, [(8, 64)], cpu=30,
                self_cpu=10, device=10)
    cslt = _Event("aten::_cslt_sparse_mm", t0 + 3, mm, [(64, 64), (8, 64)], cpu=20,
                  self_cpu=20, device=10, self_device=10, kernels=[("sm90_sparse_gemm", 10)])
    copy = _Event("aten::copy_", t0 + 4, linear, [(64, 8), (64, 8)], cpu=8, self_cpu=8,
                  device=3, self_device=3, kernels=[("elementwise_copy", 3)])
    launch = _Event("cudaLaunchKernel", t0 + 5, cslt, cpu=4, self_cpu=4)
    kernel = _Event("sm90_sparse_gemm", t0 + 6, device_type="DeviceType.CUDA")
    return [linear, t, mm, cslt, copy, launch, kernel]


def test_profile_rows_keep_the_ops_around_the_sparse_gemm_per_forward():
    events = _sparse_linear_forward(0.0) + _sparse_linear_forward(100.0)
    rows = collect_models.profile_rows(events[::-1], 2, True, {"model": "m"})
    by = {(r["level"], r["name"], r["parent"]): r for r in rows}
    assert [r["name"] for r in rows][:3] == ["aten::linear", "aten::t",
                                            "semi_structured::cusparselt_mm"]
    assert [r["order"] for r in rows] == list(range(len(rows)))
    assert all(r["calls"] == 1.0 and r["forwards"] == 2 and r["model"] == "m" for r in rows)
    cslt = by[("op", "aten::_cslt_sparse_mm", "semi_structured::cusparselt_mm")]
    assert cslt["depth"] == 2 and math.isclose(cslt["self_device_s"], 10e-6)
    assert cslt["kernels"] == "sm90_sparse_gemm" and cslt["input_shapes"] == "[[64, 64], [8, 64]]"
    gemm = by[("kernel", "sm90_sparse_gemm", "aten::_cslt_sparse_mm")]
    assert gemm["depth"] == 3 and math.isclose(gemm["device_s"], 10e-6)
    assert math.isclose(by[("kernel", "elementwise_copy", "aten::copy_")]["device_s"], 3e-6)
    assert math.isclose(by[("runtime", "cudaLaunchKernel", "aten::_cslt_sparse_mm")]["self_cpu_s"],
                        4e-6)
    assert math.isclose(by[("op", "aten::linear", "")]["device_s"], 13e-6)
    assert not any(r["name"] == "sm90_sparse_gemm" and r["level"] != "kernel" for r in rows)
    ops = [r for r in rows if r["level"] == "op"]
    assert math.isclose(sum(r["self_device_s"] for r in ops), 13e-6)  # each kernel once
    cpu = collect_models.profile_rows(events, 2, False, {})
    assert all(math.isnan(r["device_s"]) for r in cpu)
