"""The ``dse`` command line: help, happy paths, result files, and a corpus of malformed inputs,
each of which must exit with code 2 and one line on stderr naming the offending input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest

import accelerator_models
import dse
from accelerator_models import ENERGY_FIELDS
from tests.cli_run import run_cli
from workloads import load_trace

REPO = Path(__file__).resolve().parents[1]
BASE = ["evaluate", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4"]
FORMATS = ["2:4", "block4@87.5%", "unstructured@0.9"]




def run_subprocess(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dse", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


# --- help -------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["--help"],
    ["evaluate", "--help"],
    ["hw", "--help"],
    ["hw", "list", "--help"],
    ["hw", "show", "--help"],
    ["workloads", "--help"],
    ["workloads", "list", "--help"],
    ["workloads", "show", "--help"],
    ["workloads", "export", "--help"],
])
def test_help_exits_0(argv, capsys):
    assert run_cli(argv) == 0
    out, err = capsys.readouterr()
    assert "usage:" in out
    assert err == ""


def test_evaluate_help_documents_the_options(capsys):
    run_cli(["evaluate", "--help"])
    out = capsys.readouterr().out
    for option in ("--model", "--hw", "--set", "--format", "--batch", "--fusion", "--scope",
                   "--per-layer", "--out", "--dtype", "--index-bytes"):
        assert option in out
    assert "toy_hybrid" in out  # shipped models are listed


def test_top_level_help_lists_commands(capsys):
    run_cli(["--help"])
    out = capsys.readouterr().out
    assert "evaluate" in out and "hw" in out


def test_python_m_dse_help():
    result = run_subprocess(["--help"], REPO)
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout and "evaluate" in result.stdout
    assert "Traceback" not in result.stderr


def test_version(capsys):
    assert run_cli(["--version"]) == 0
    assert dse.__version__ in capsys.readouterr().out


# --- evaluate: happy paths --------------------------------------------------------------------


def _evaluate_argv(*extra: str) -> list[str]:
    argv = ["evaluate", "--model", "toy_hybrid", "--hw", "a100", "--hw", "h100"]
    for fmt in FORMATS:
        argv += ["--format", fmt]
    argv += ["--batch", "1", "--batch", "16", "--fusion", "unfused", "--fusion", "fused"]
    return argv + list(extra)


def _expected(scope: str = "gemm") -> pd.DataFrame:
    return dse.evaluate("toy_hybrid", ["a100", "h100"], FORMATS, [1, 16],
                        fusion=["unfused", "fused"], scope=scope, numerics=dse.Numerics())


def test_evaluate_prints_table_with_formats_and_speedups(capsys):
    assert run_cli(_evaluate_argv()) == 0
    out, err = capsys.readouterr()
    assert err == ""
    expected = _expected()
    for name in ("dense", "2:4", "block4@87.5%", "unstructured@90%", "a100-40gb", "h100-sxm"):
        assert name in out
    for speedup in expected["speedup"]:
        assert f"{speedup:.3f}x" in out
    # one printed line per design, plus the title and the column header (then the energy and
    # memory table: one line per design again, its title, header and the unpriced note)
    assert len(_latency_table(out)) == len(expected) + 2
    assert len(out.strip().splitlines()) == 2 * len(expected) + 5


def _latency_table(out: str) -> list[str]:
    """The printed latency table: the lines before the energy and memory table."""
    lines = out.strip().splitlines()
    return lines[:next(i for i, line in enumerate(lines) if line.startswith("energy per"))]


def test_evaluate_default_is_batch_1_unfused(capsys):
    assert run_cli(BASE) == 0
    out = capsys.readouterr().out
    expected = dse.evaluate("toy_hybrid", "a100", ["2:4"], [1], fusion="unfused")
    assert len(_latency_table(out)) == len(expected) + 2
    assert "unfused" in out and "fused_prefetched" not in out


KEY_COLUMNS = ["model", "hardware", "format", "batch", "fusion", "scope"]
VALUE_COLUMNS = ["latency_s", "dense_latency_s", "speedup", "feature_bytes_share"]


def _read(path: Path) -> pd.DataFrame:
    if path.suffix == ".csv":
        return pd.read_csv(path)
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    records = json.loads(path.read_text())
    assert isinstance(records, list)
    return pd.DataFrame.from_records(records)


def _assert_same_values(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert len(got) == len(expected)
    for column in KEY_COLUMNS:
        assert list(got[column].astype(str)) == list(expected[column].astype(str)), column
    for column in VALUE_COLUMNS:
        for a, b in zip(got[column], expected[column], strict=True):
            assert a == pytest.approx(b, rel=1e-13, abs=0.0), column


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".json"])
@pytest.mark.parametrize("scope", ["gemm", "all"])
def test_evaluate_out_file_equals_api(tmp_path, capsys, suffix, scope):
    out = tmp_path / f"result{suffix}"
    assert run_cli(_evaluate_argv("--scope", scope, "--out", str(out))) == 0
    stdout, err = capsys.readouterr()
    assert err == ""
    assert str(out) in stdout
    assert files_under(tmp_path) == {out.name}
    got = _read(out)
    expected = _expected(scope)
    assert set(expected.columns) <= set(got.columns)
    _assert_same_values(got, expected)


def test_evaluate_json_is_a_list_of_records(tmp_path):
    out = tmp_path / "designs.json"
    assert run_cli(_evaluate_argv("--out", str(out))) == 0
    records = json.loads(out.read_text())
    assert isinstance(records, list)
    # one record per design: 2 hardware x 4 formats (dense included) x 2 batches x 2 fusions
    assert len(records) == 2 * 4 * 2 * 2
    required = {"model", "hardware", "format", "batch", "fusion", "scope", "latency_s",
                "dense_latency_s", "speedup", "feature_bytes_share"}
    keys = set()
    for record in records:
        assert isinstance(record, dict)
        assert required <= set(record)
        assert record["model"] == "toy_hybrid"
        assert isinstance(record["batch"], int)
        assert record["latency_s"] > 0
        keys.add((record["hardware"], record["format"], record["batch"], record["fusion"]))
    assert len(keys) == len(records)


def test_evaluate_numerics_options_reach_the_evaluator(tmp_path):
    out = tmp_path / "r.parquet"
    argv = ["evaluate", "--model", "toy_hybrid", "--hw", "h100", "--format", "unstructured@0.9",
            "--format", "block4@0.5", "--dtype", "bf16", "--vector-dtype", "fp32",
            "--csr-dtype", "fp16", "--index-bytes", "2", "--scope", "all", "--batch", "4",
            "--out", str(out)]
    assert run_cli(argv) == 0
    numerics = dse.Numerics(dtype="bf16", vector_dtype="fp32", csr_dtype="fp16",
                            index_width_bytes=2)
    expected = dse.evaluate("toy_hybrid", "h100", ["unstructured@0.9", "block4@0.5"], [4],
                            fusion="unfused", scope="all", numerics=numerics)
    _assert_same_values(pd.read_parquet(out), expected)
    default = dse.evaluate("toy_hybrid", "h100", ["unstructured@0.9", "block4@0.5"], [4],
                           fusion="unfused", scope="all")
    assert not (default["latency_s"].to_numpy() == expected["latency_s"].to_numpy()).all()


def test_evaluate_set_and_spec_file_reach_the_evaluator(tmp_path):
    spec = tmp_path / "in" / "hypo.toml"
    spec.parent.mkdir()
    spec.write_text('extends = "a100"\nsources = ["test"]\ndram_bandwidth_bytes_per_s = 3e12\n')
    out = tmp_path / "out.csv"
    argv = ["evaluate", "--model", "toy_hybrid", "--hw", str(spec), "--format", "1:4",
            "--set", "sparse_tensor.patterns=2:4,1:4", "--batch", "64", "--out", str(out)]
    assert run_cli(argv) == 0
    acc = accelerator_models.load(str(spec), ["sparse_tensor.patterns=2:4,1:4"])
    expected = dse.evaluate("toy_hybrid", acc, ["1:4"], [64], fusion="unfused")
    got = _read(out)
    _assert_same_values(got, expected)
    assert all("sparse_tensor.patterns=2:4,1:4" in h for h in got["hardware"])


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_per_layer_one_row_per_op_and_design(tmp_path, capsys, suffix):
    out = tmp_path / f"layers{suffix}"
    argv = ["evaluate", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4",
            "--format", "unstructured@0.9", "--batch", "1", "--batch", "8", "--fusion",
            "unfused", "--fusion", "fused_prefetched", "--scope", "all", "--per-layer",
            "--out", str(out)]
    assert run_cli(argv) == 0
    stdout = capsys.readouterr().out
    got = _read(out)
    n_ops = len(load_trace("toy_hybrid"))  # scope all: every op of the shipped trace
    designs = 1 * 3 * 2 * 2  # hardware x (dense, 2:4, unstructured) x batches x fusions
    assert len(got) == n_ops * designs
    assert not got.duplicated(["hardware", "format", "batch", "fusion", "op"]).any()
    assert set(got["fusion"]) == {"unfused", "fused_prefetched"}
    for fusion in ("unfused", "fused_prefetched"):
        expected = dse.evaluate_layers("toy_hybrid", "a100", ["2:4", "unstructured@0.9"],
                                       [1, 8], fusion=fusion, scope="all")
        part = got[got["fusion"] == fusion].reset_index(drop=True)
        assert list(part["op"]) == list(expected["op"])
        for column in ("compute_s", "memory_s", "time_s"):
            for a, b in zip(part[column], expected[column], strict=True):
                assert a == pytest.approx(b, rel=1e-13, abs=0.0)
    assert "stem.conv" in stdout and "attn.softmax" in stdout


def test_per_layer_gemm_scope_has_only_prunable_ops(tmp_path):
    out = tmp_path / "layers.csv"
    argv = [*BASE, "--per-layer", "--out", str(out)]
    assert run_cli(argv) == 0
    got = pd.read_csv(out)
    prunable = load_trace("toy_hybrid").ops.query("prunable")
    assert len(got) == 2 * len(prunable)  # dense and 2:4, each prunable op
    assert sorted(got["op"]) == sorted(list(prunable["name"]) * 2)
    assert set(got["kind"]) <= {"conv", "linear"}


def test_out_is_atomic_no_temp_leftovers(tmp_path):
    out = tmp_path / "x.csv"
    assert run_cli([*BASE, "--out", str(out)]) == 0
    assert sorted(os.listdir(tmp_path)) == ["x.csv"]
    first = out.read_text()
    assert first.startswith("model,")
    # Overwriting an existing result also leaves nothing else behind.
    assert run_cli([*BASE, "--batch", "8", "--out", str(out)]) == 0
    assert sorted(os.listdir(tmp_path)) == ["x.csv"]
    assert out.read_text() != first


def test_out_relative_path_in_working_directory(tmp_path, monkeypatch_free_cwd):
    assert run_cli([*BASE, "--out", "rel.json"]) == 0
    assert sorted(os.listdir(tmp_path)) == ["rel.json"]
    assert isinstance(json.loads((tmp_path / "rel.json").read_text()), list)


@pytest.fixture
def monkeypatch_free_cwd(tmp_path):
    """Run in tmp_path and restore the working directory afterwards."""
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(old)


# --- hw ---------------------------------------------------------------------------------------


def test_hw_list_lists_every_catalog_entry(capsys):
    assert run_cli(["hw", "list"]) == 0
    out = capsys.readouterr().out
    for name in accelerator_models.catalog_names():
        assert name in out
    assert len(out.strip().splitlines()) == len(accelerator_models.catalog_names()) + 1
    assert "312" in out  # A100 fp16 TFLOP/s


def test_hw_show_a100_prints_fields_and_sources(capsys):
    assert run_cli(["hw", "show", "a100"]) == 0
    out = capsys.readouterr().out
    acc = accelerator_models.load("a100")
    assert "a100-40gb" in out
    for path in accelerator_models.FIELDS:
        if path in ("tensor_flops_per_s.fp8", "vector_flops_per_s.bf16"):
            continue  # the A100 has no such rate
        if path == "kernel_launch_overhead_s":
            continue  # optional, and no catalog entry sets it
        if path in ENERGY_FIELDS and acc.field_value(path) is None:
            continue  # optional energy figures the A100's sources do not give
        if path in accelerator_models.CACHE_FIELDS and acc.field_value(path) is None:
            continue  # no public source gives the A100's cache bandwidths
        assert path in out, path
    assert "dram_bandwidth_bytes_per_s = 1.555e+12" in out
    # Counts and byte sizes print in full (6 digits would round 41943040 to 4.1943e+07).
    assert "  sm_count = 108\n" in out
    assert "  shared_memory_per_sm_bytes = 167936\n" in out
    assert "  l2_bytes = 41943040\n" in out
    assert "kernel_launch_overhead_s" not in out
    assert "sources:" in out
    for source in acc.sources:
        assert source in out
    assert _unverified_marks(out) == set(acc.unverified)  # derived energy figures only


def _unverified_marks(out: str) -> set[str]:
    marked = set()
    for line in out.splitlines():
        path, sep, _ = line.strip().partition(" = ")
        if sep and path in accelerator_models.FIELDS and line.endswith("(unverified)"):
            marked.add(path)
    return marked


@pytest.mark.parametrize("name", accelerator_models.catalog_names())
def test_hw_show_marks_exactly_the_unverified_fields(name, capsys):
    assert run_cli(["hw", "show", name]) == 0
    out = capsys.readouterr().out
    acc = accelerator_models.load(name)
    assert _unverified_marks(out) == set(acc.unverified)
    for source in acc.sources:
        assert f"  - {source}" in out


def test_hw_show_marks_unverified_fields_of_a_spec_file(tmp_path, capsys):
    spec = tmp_path / "guess.toml"
    spec.write_text('extends = "a100"\nsources = ["a guess"]\n'
                    'unverified = ["dram_bandwidth_bytes_per_s", "sparse_tensor.nonzero_rate"]\n'
                    "dram_bandwidth_bytes_per_s = 2.5e12\n")
    assert run_cli(["hw", "show", str(spec)]) == 0
    out = capsys.readouterr().out
    # Its own marks, and the parent's for the figures it takes over from the A100 unchanged.
    parent = set(accelerator_models.load("a100").unverified)
    assert _unverified_marks(out) == {"dram_bandwidth_bytes_per_s",
                                      "sparse_tensor.nonzero_rate"} | parent
    assert "dram_bandwidth_bytes_per_s = 2.5e+12  (unverified)" in out


def test_hw_show_applies_set(capsys):
    argv = ["hw", "show", "h100", "--set", "sparse_tensor.patterns=2:4,1:4",
            "--set", "dram_bandwidth_bytes_per_s=5e12"]
    assert run_cli(argv) == 0
    out = capsys.readouterr().out
    assert 'sparse_tensor.patterns = ["2:4", "1:4"]' in out
    assert "dram_bandwidth_bytes_per_s = 5e+12" in out
    assert "sparse_tensor.patterns=2:4,1:4" in out.splitlines()[0]  # the name records it


def test_hw_show_skips_the_optional_fields_a_spec_leaves_out(capsys):
    assert run_cli(["hw", "show", "b200"]) == 0
    out = capsys.readouterr().out
    for path in ("sm_count", "shared_memory_per_sm_bytes", "l2_bytes",
                 "kernel_launch_overhead_s"):
        assert f"  {path} = " not in out, path


def test_hw_show_prints_set_launch_overhead_and_sm_count(capsys):
    argv = ["hw", "show", "b200", "--set", "kernel_launch_overhead_s=0", "--set",
            "sm_count=148.0", "--set", "kernel_launch_overhead_s=4.5e-6"]
    assert run_cli(argv) == 0
    out = capsys.readouterr().out
    assert "  sm_count = 148\n" in out
    assert "  kernel_launch_overhead_s = 4.5e-06\n" in out


def test_hw_show_a_spec_file(tmp_path, capsys):
    spec = tmp_path / "mine.toml"
    spec.write_text('extends = "v100"\nsources = ["mine"]\n[tensor_flops_per_s]\nbf16 = 1e14\n')
    assert run_cli(["hw", "show", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "name: mine" in out
    assert "tensor_flops_per_s.bf16 = 1e+14" in out
    assert "- mine" in out


# --- bad-input corpus -------------------------------------------------------------------------

HW_OK = 'extends = "a100"\nsources = ["test"]\n'

TRACE_OP = {"name": "fc", "kind": "linear", "m": 64, "k": 64, "n": 16, "groups": 1,
            "weight_elems": 4096, "input_elems": 1024, "output_elems": 1024,
            "vector_flops": 0.0, "prunable": True, "producers": ["input"]}


def _trace_text(*ops: dict, **top) -> str:
    document = {"schema": "dse-trace/1", "model": "tiny", "input_shape": [16, 64],
                "provenance": {"source": "test"}, "ops": list(ops)}
    document.update(top)
    return json.dumps(document)


def _without(record: dict, key: str) -> dict:
    return {k: v for k, v in record.items() if k != key}


@dataclass
class Case:
    """argv (``{in}`` and ``{out}`` are replaced by the input and output folders), files to
    write into the input folder first, and the substrings stderr must contain."""

    argv: list[str]
    expect: list[str]
    files: dict[str, str] = field(default_factory=dict)
    add_out: bool = True  # append --out {out}/result.csv so a stray result would show
    setup: Callable[[Path], list[str]] | None = None  # returns the --out args it chose


def _hw(name: str, text: str, *extra: str, expect: list[str]) -> Case:
    argv = ["evaluate", "--model", "toy_hybrid", "--hw", f"{{in}}/{name}", "--format", "2:4",
            *extra]
    return Case(argv, [name, *expect], files={name: text})


def _trace(name: str, text: str, expect: list[str]) -> Case:
    argv = ["evaluate", "--model", f"{{in}}/{name}", "--hw", "a100", "--format", "2:4"]
    return Case(argv, [name, *expect], files={name: text})


def _fmt(spec: str, expect: list[str] | None = None) -> Case:
    return Case(["evaluate", "--model", "toy_hybrid", "--hw", "a100", "--format", spec],
                expect or [spec])


def _readonly_out(folder: Path) -> list[str]:
    """--out into a folder we cannot write; as root chmod does not stop writes, so use a
    path under a regular file instead, which no user can create."""
    locked = folder / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    if os.access(locked, os.W_OK):  # running as root
        locked.chmod(0o700)
        afile = folder / "afile"
        afile.write_text("not a folder\n")
        return ["--out", str(afile / "x.csv")]
    return ["--out", str(locked / "x.csv")]


CASES: dict[str, Case] = {
    # hardware specs
    "hw_unknown_key": _hw("unknown.toml", HW_OK + "clock_mhz = 1410\n", expect=["clock_mhz"]),
    "hw_unknown_key_in_table": _hw("unknown2.toml", HW_OK + "[vector_flops_per_s]\nfp64 = 1e13\n",
                                   expect=["vector_flops_per_s.fp64"]),
    "hw_unknown_table": _hw("table.toml", HW_OK + "[memory]\nl2_bytes = 4e7\n",
                            expect=["memory"]),
    "hw_duplicate_key": _hw("dup.toml", HW_OK + "[tensor_flops_per_s]\nfp16 = 1e14\n"
                                                "fp16 = 2e14\n",
                            expect=["tensor_flops_per_s.fp16", "duplicate"]),
    "hw_zero_bandwidth": _hw("zero.toml", HW_OK + "dram_bandwidth_bytes_per_s = 0\n",
                             expect=["dram_bandwidth_bytes_per_s"]),
    "hw_negative_bandwidth": _hw("neg.toml", HW_OK + "dram_bandwidth_bytes_per_s = -1.5e12\n",
                                 expect=["dram_bandwidth_bytes_per_s"]),
    "hw_string_bandwidth": _hw("str.toml", HW_OK + 'dram_bandwidth_bytes_per_s = "fast"\n',
                               expect=["dram_bandwidth_bytes_per_s"]),
    "hw_nonzero_rate_1.5": _hw("rate.toml", HW_OK + "[sparse_tensor]\nnonzero_rate = 1.5\n",
                               expect=["sparse_tensor.nonzero_rate"]),
    "hw_pattern_n_ge_m": _hw("pat.toml", HW_OK + '[sparse_tensor]\npatterns = ["4:4"]\n',
                             expect=["sparse_tensor.patterns", "4:4"]),
    "hw_min_block_size_65": _hw("blk.toml", HW_OK + "[block_sparse]\nmin_block_size = 65\n",
                                expect=["block_sparse.min_block_size"]),
    "hw_sm_count_zero": _hw("sms.toml", HW_OK + "sm_count = 0\n", expect=["sm_count"]),
    "hw_sparse_only_patterns": _hw("half.toml", 'extends = "v100"\n[sparse_tensor]\n'
                                                'patterns = ["2:4"]\n',
                                   expect=["nonzero_rate"]),
    "hw_malformed_toml": _hw("broken.toml", HW_OK + "dram_bandwidth_bytes_per_s = = 2\n",
                             expect=["malformed TOML"]),
    "hw_extends_cycle": Case(
        ["evaluate", "--model", "toy_hybrid", "--hw", "{in}/ca.toml", "--format", "2:4"],
        ["ca.toml", "cb.toml"],
        files={"ca.toml": 'extends = "cb.toml"\n', "cb.toml": 'extends = "ca.toml"\n'}),
    "hw_missing_file": Case(
        ["evaluate", "--model", "toy_hybrid", "--hw", "{in}/missing.toml", "--format", "2:4"],
        ["missing.toml"]),
    "hw_unknown_name": Case(
        ["evaluate", "--model", "toy_hybrid", "--hw", "tpu9000", "--format", "2:4"],
        ["tpu9000"]),
    "hw_show_unknown_name": Case(["hw", "show", "tpu9000"], ["tpu9000"], add_out=False),
    # --set
    "set_nonnumeric_bandwidth": Case([*BASE, "--set", "dram_bandwidth_bytes_per_s=fast"],
                                     ["dram_bandwidth_bytes_per_s=fast"]),
    "set_negative_bandwidth": Case([*BASE, "--set", "dram_bandwidth_bytes_per_s=-2e12"],
                                   ["dram_bandwidth_bytes_per_s"]),
    "set_zero_bandwidth": Case([*BASE, "--set", "dram_bandwidth_bytes_per_s=0"],
                               ["dram_bandwidth_bytes_per_s"]),
    "set_unknown_field": Case([*BASE, "--set", "clock_mhz=1410"], ["clock_mhz"]),
    "set_metadata_field": Case([*BASE, "--set", "name=fake"], ["name=fake"]),
    "set_empty": Case([*BASE, "--set", "="], ["--set", "'='"]),
    "set_without_equals": Case([*BASE, "--set", "dram_bandwidth_bytes_per_s"],
                               ["dram_bandwidth_bytes_per_s", "FIELD=VALUE"]),
    "set_nonzero_rate_1.5": Case([*BASE, "--set", "sparse_tensor.nonzero_rate=1.5"],
                                 ["sparse_tensor.nonzero_rate"]),
    "set_pattern_n_ge_m": Case([*BASE, "--set", "sparse_tensor.patterns=2:4,8:4"], ["8:4"]),
    "set_bool_garbage": Case([*BASE, "--set", "block_sparse.supported=maybe"],
                             ["block_sparse.supported"]),
    "set_block_size_0": Case([*BASE, "--set", "block_sparse.min_block_size=0"],
                             ["block_sparse.min_block_size"]),
    "set_sm_count_fraction": Case([*BASE, "--set", "sm_count=1.5"], ["sm_count", "1.5"]),
    "set_negative_launch_overhead": Case([*BASE, "--set", "kernel_launch_overhead_s=-1e-6"],
                                         ["kernel_launch_overhead_s"]),
    "hw_show_bad_set": Case(["hw", "show", "a100", "--set", "dram_bandwidth_bytes_per_s=-1"],
                            ["dram_bandwidth_bytes_per_s"], add_out=False),
    # formats
    "format_4:2": _fmt("4:2"),
    "format_2:2": _fmt("2:2"),
    "format_0:4": _fmt("0:4"),
    "format_block0": _fmt("block0@50%"),
    "format_block65": _fmt("block65@50%"),
    "format_block_without_sparsity": _fmt("block4", ["block4", "sparsity"]),
    "format_sparsity_1.5": _fmt("unstructured@1.5"),
    "format_sparsity_150%": _fmt("unstructured@150%"),
    "format_sparsity_100%": _fmt("csr@100%"),
    "format_sparsity_garbage": _fmt("unstructured@lots"),
    "format_unknown": _fmt("fast"),
    # models and traces
    "model_unknown_name": Case(["evaluate", "--model", "resnet9000", "--hw", "a100",
                                "--format", "2:4"], ["resnet9000"]),
    "trace_missing_file": Case(["evaluate", "--model", "{in}/nope.json", "--hw", "a100",
                                "--format", "2:4"], ["nope.json"]),
    "trace_missing_column": _trace("nocol.json", _trace_text(_without(TRACE_OP, "groups")),
                                   ["groups"]),
    "trace_negative_dimension": _trace("negdim.json", _trace_text({**TRACE_OP, "m": -64}),
                                       ["'m'", "negative"]),
    "trace_producer_not_earlier": _trace(
        "order.json", _trace_text({**TRACE_OP, "producers": ["ghost"]}), ["ghost"]),
    "trace_malformed_json": _trace("bad.json", _trace_text(TRACE_OP)[:-7], ["malformed JSON"]),
    "trace_wrong_schema": _trace("schema.json", _trace_text(TRACE_OP, schema="dse-trace/0"),
                                 ["dse-trace/0"]),
    "trace_string_dimension": _trace("strdim.json", _trace_text({**TRACE_OP, "k": "64"}),
                                     ["'k'"]),
    # output paths
    "out_missing_folder": Case([*BASE, "--out", "{out}/no/such/folder/r.csv"],
                               ["no/such/folder"], add_out=False),
    "out_unknown_suffix": Case([*BASE, "--out", "{out}/r.xlsx"], [".xlsx"], add_out=False),
    "out_no_suffix": Case([*BASE, "--out", "{out}/results"], ["results"], add_out=False),
    "out_is_a_folder": Case([*BASE, "--out", "{out}/dir.csv"], ["dir.csv"], add_out=False,
                            setup=lambda out: (out / "dir.csv").mkdir() or []),
    "out_read_only_folder": Case(BASE, ["x.csv"], add_out=False, setup=_readonly_out),
    "out_under_a_file": Case([*BASE, "--out", "{out}/afile/r.json"], ["afile", "not a folder"],
                             add_out=False,
                             setup=lambda out: (out / "afile").write_text("x\n") and []),
    # options
    "batch_0": Case([*BASE, "--batch", "0"], ["--batch", "'0'"]),
    "batch_negative": Case([*BASE, "--batch", "-3"], ["--batch", "'-3'"]),
    "batch_not_a_number": Case([*BASE, "--batch", "many"], ["--batch", "many"]),
    "fusion_unknown": Case([*BASE, "--fusion", "magic"], ["--fusion", "magic"]),
    "scope_unknown": Case([*BASE, "--scope", "most"], ["--scope", "most"]),
    "dtype_fp64": Case([*BASE, "--dtype", "fp64"], ["fp64"]),
    "vector_dtype_fp8": Case([*BASE, "--vector-dtype", "fp8"],
                             ["--vector-dtype fp8", "not a vector dtype"]),
    "csr_dtype_int8": Case([*BASE, "--csr-dtype", "int8"],
                           ["--csr-dtype int8", "not a vector dtype"]),
    "index_bytes_3": Case([*BASE, "--index-bytes", "3"], ["--index-bytes 3", "1, 2, 4 or 8 bytes"]),
    "index_bytes_not_a_number": Case([*BASE, "--index-bytes", "four"], ["--index-bytes",
                                                                       "four"]),
    "dtype_missing_on_hardware": Case(["evaluate", "--model", "toy_hybrid", "--hw", "v100",
                                       "--format", "2:4", "--dtype", "bf16"],
                                      ["v100", "tensor_flops_per_s.bf16"]),
    "missing_required_model": Case(["evaluate", "--hw", "a100", "--format", "2:4"],
                                   ["--model"]),
    "unknown_command": Case(["simulate"], ["simulate"], add_out=False),
}
if sys.platform == "linux" and Path("/proc/self").is_dir():
    # A folder that passes every up-front check (it exists, and as root it is "writable")
    # but in which no file can be created: the write itself must fail cleanly.
    CASES["out_unwritable_proc"] = Case([*BASE, "--out", "/proc/dse-result.csv"],
                                        ["/proc/dse-result.csv"], add_out=False)


def _prepare(case: Case, tmp_path: Path) -> tuple[list[str], Path, Path]:
    inputs, outputs = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    outputs.mkdir()
    for name, text in case.files.items():
        (inputs / name).write_text(text, encoding="utf-8")
    argv = [a.replace("{in}", str(inputs)).replace("{out}", str(outputs)) for a in case.argv]
    if case.setup is not None:
        argv += case.setup(outputs)
    if case.add_out:
        argv += ["--out", str(outputs / "result.csv")]
    return argv, inputs, outputs


def _check_stderr(err: str, expect: list[str]) -> None:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert len(err.splitlines()) == 1, err
    for fragment in expect:
        assert fragment in lines[0], (fragment, lines[0])


def test_corpus_is_large_enough():
    assert len(CASES) >= 20


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_exits_2_with_one_line(name, tmp_path, capsys):
    case = CASES[name]
    argv, inputs, outputs = _prepare(case, tmp_path)
    before = files_under(tmp_path)
    try:
        code = run_cli(argv)
        out, err = capsys.readouterr()
        after = files_under(tmp_path)
    finally:
        for p in outputs.rglob("*"):
            if p.is_dir():
                p.chmod(0o700)
    assert code == 2, (code, out, err)
    _check_stderr(err, case.expect)
    assert after == before, after - before  # no result file, no temporary file
    if "/proc/" in " ".join(argv):
        assert not Path("/proc/dse-result.csv").exists()


SUBPROCESS_CASES = ["format_4:2", "hw_duplicate_key", "batch_0", "trace_missing_column"]


@pytest.mark.parametrize("name", SUBPROCESS_CASES)
def test_bad_input_through_python_m_dse(name, tmp_path):
    case = CASES[name]
    argv, inputs, outputs = _prepare(case, tmp_path)
    before = files_under(tmp_path)
    result = run_subprocess(argv, tmp_path)
    assert result.returncode == 2, result
    _check_stderr(result.stderr, case.expect)
    assert files_under(tmp_path) == before


# --- workloads ------------------------------------------------------------------------------


def test_workloads_list_lists_shipped_traces_and_aliases(capsys):
    assert run_cli(["workloads", "list"]) == 0
    out = capsys.readouterr().out
    for name in ["resnet50", "efficientnet_b4", "convnext_tiny", "deit_small_patch16_224",
                 "swin_tiny_patch4_window7_224", "mixer_s16_224", "vit_base_patch16_224",
                 "convnext_base", "toy_hybrid", "swin_tiny"]:
        assert name in out


def test_workloads_show_by_alias(capsys):
    assert run_cli(["workloads", "show", "swin_tiny"]) == 0
    out = capsys.readouterr().out
    assert "model: swin_tiny_patch4_window7_224" in out
    assert "prunable share:" in out and "FLOPs share" in out and "bytes share" in out
    assert "timm: 1.0" in out and "command: dse workloads export" in out


def test_evaluate_accepts_the_swin_alias_and_several_models(tmp_path):
    out = tmp_path / "r.json"
    assert run_cli(["evaluate", "--model", "convnext_tiny", "--model", "swin_tiny", "--hw",
                    "a100", "--format", "2:4", "--out", str(out)]) == 0
    models = {r["model"] for r in json.loads(out.read_text())}
    assert models == {"convnext_tiny", "swin_tiny_patch4_window7_224"}
