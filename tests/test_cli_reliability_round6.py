"""Reliability, sixth round (issue 26): the defects a hand fuzz of lists, ``--set`` and long
prompts found, each with its regression test.

1. An empty item in a comma list (``--hw a100,``) was dropped without a word: a typo is refused,
   in one line naming the option, wherever a list is split on commas.
2. ``--set sparse_tensor.patterns=`` (no pattern) silently removed the sparse tensor core.
3. ``dse evaluate --set kernel_launch_overhead_s=1`` changed nothing: only the simulator reads
   that field. A ``--set`` (or a sweep's ``--vary hw.FIELD``) of a field the command never reads
   is refused, naming the command that reads it.
4. The longest-prompt check of a language model counted only the attention scores: a config
   with wide heads passed it and the trace then refused its rotary op without the hint.
5. ``fusion-rules`` and ``workloads export`` under SIGINT and SIGKILL: a result complete or
   absent (their full-device cases are in tests/test_disk_full.py).
6. ``dse bench spmv`` on a full device.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

import accelerator_models
from accelerator_models import SpecError
from tests.cli_run import run_cli
from tests.test_disk_full import PAGE, device  # noqa: F401 (the small tmpfs fixture)
from workloads import TraceError
from workloads.llm import LLMConfigError, llm_config_from_dict, llm_trace
from workloads.trace import MAX_PER_SAMPLE


def _refused(argv: list[str], capsys) -> str:
    """The one line a refused command prints; exit 2, no traceback."""
    code = run_cli(argv)
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, f"exit {code}; stderr: {err}"
    assert "Traceback" not in out + err, err
    assert len(lines) == 1, f"{len(lines)} lines on stderr:\n{err}"
    return lines[0]


# --- 1. an empty item in a comma list ------------------------------------------------------------

EMPTY_ITEMS = {
    "evaluate --hw a100,": (["evaluate", "--model", "toy_hybrid", "--hw", "a100,"], "--hw 'a100,'"),
    "evaluate --hw a100,,h100": (["evaluate", "--model", "toy_hybrid", "--hw", "a100,,h100"],
                                 "--hw 'a100,,h100'"),
    "evaluate --hw ,a100": (["evaluate", "--model", "toy_hybrid", "--hw", ",a100"],
                            "--hw ',a100'"),
    "compare --hw ,": (["compare", "--model", "toy_hybrid", "--format", "2:4", "--hw", ","],
                       "--hw ','"),
    "search --hw h100,": (["search", "--hw", "h100,"], "--hw 'h100,'"),
    "bench spmv --blocks 1,": (["bench", "spmv", "--blocks", "1,"], "--blocks"),
    "bench spmv --blocks 1,,2": (["bench", "spmv", "--blocks", "1,,2"], "--blocks"),
    "bench spmv-blocks --models": (["bench", "spmv-blocks", "--models", "resnet50,"],
                                   "--models 'resnet50,'"),
    "accuracy --patterns": (["accuracy", "--model", "test_vit", "--patterns", "2:4,"],
                            "--patterns '2:4,'"),
    "accuracy --levels": (["accuracy", "--model", "test_vit", "--levels", "0.5,,0.75"],
                          "--levels '0.5,,0.75'"),
    "sweep --vary batch=1,,2": (["sweep", "--model", "toy_hybrid", "--hw", "a100", "--format",
                                 "2:4", "--vary", "batch=1,,2", "--out", "s.csv"],
                                "--vary batch=1,,2"),
    "sweep --vary hw.X=1e12,": (["sweep", "--model", "toy_hybrid", "--hw", "a100", "--format",
                                 "2:4", "--vary", "hw.dram_bandwidth_bytes_per_s=1e12,",
                                 "--out", "s.csv"], "--vary hw.dram_bandwidth_bytes_per_s"),
}


@pytest.mark.parametrize("name", sorted(EMPTY_ITEMS))
def test_an_empty_item_in_a_comma_list_is_refused(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv, needle = EMPTY_ITEMS[name]
    line = _refused(argv, capsys)
    assert needle in line, line
    assert "empty" in line, line
    assert os.listdir(tmp_path) == []  # nothing written, no folder made


def test_a_list_without_an_empty_item_is_still_taken(tmp_path, capsys):
    out = tmp_path / "e.csv"
    assert run_cli(["evaluate", "--model", "toy_hybrid", "--hw", " a100 , h100",
                    "--out", str(out)]) == 0
    capsys.readouterr()
    assert list(pd.read_csv(out)["hardware"]) == ["a100-40gb", "h100-sxm"]


# --- 2. --set of a list field with no item ------------------------------------------------------

@pytest.mark.parametrize("value, needle", [
    ("", "no pattern"), (" ", "no pattern"), ("2:4,", "an empty pattern"),
    ("2:4,,1:4", "an empty pattern"), (",", "an empty pattern")])
def test_an_empty_pattern_list_on_the_command_line_is_refused(value, needle, capsys):
    with pytest.raises(SpecError, match=needle) as info:
        accelerator_models.load("a100", [f"sparse_tensor.patterns={value}"])
    assert "\n" not in str(info.value)
    assert "sparse_tensor.patterns=2:4,1:4" in str(info.value)  # the fix, by example
    line = _refused(["evaluate", "--model", "toy_hybrid", "--hw", "a100",
                     "--set", f"sparse_tensor.patterns={value}"], capsys)
    assert line.startswith("dse: error: --set sparse_tensor.patterns="), line


def test_a_pattern_list_is_still_taken():
    acc = accelerator_models.load("a100", ["sparse_tensor.patterns= 2:4 , 1:4"])
    assert acc.sparse_tensor.patterns == ((2, 4), (1, 4))


# --- 3. a --set the command never reads ----------------------------------------------------------

UNREAD = {
    "evaluate launch": (["evaluate", "--model", "toy_hybrid", "--hw", "a100",
                         "--set", "kernel_launch_overhead_s=1"],
                        "--set kernel_launch_overhead_s=1: dse evaluate does not read "
                        "kernel_launch_overhead_s", "dse simulate"),
    "evaluate sm_count": (["evaluate", "--model", "toy_hybrid", "--hw", "a100",
                           "--set", "sm_count=4"], "dse evaluate does not read sm_count",
                          "dse simulate"),
    "compare smem": (["compare", "--model", "toy_hybrid", "--hw", "a100,h100", "--format", "2:4",
                      "--set", "shared_memory_per_sm_bytes=1e5"],
                     "dse compare does not read shared_memory_per_sm_bytes", "dse simulate"),
    "sweep --set launch": (["sweep", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4",
                            "--vary", "batch=1,2", "--set", "kernel_launch_overhead_s=1e-3",
                            "--out", "s.csv"],
                           "dse sweep does not read kernel_launch_overhead_s",
                           "add --evaluator simulate"),
    "sweep --vary launch": (["sweep", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4",
                             "--vary", "hw.kernel_launch_overhead_s=0,1e-3", "--out", "s.csv"],
                            "--vary hw.kernel_launch_overhead_s=0,1e-3: dse sweep does not "
                            "read kernel_launch_overhead_s", "add --evaluator simulate"),
    "report launch": (["report", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4",
                       "--set", "kernel_launch_overhead_s=1e-3", "--out", "rep"],
                      "dse report does not read kernel_launch_overhead_s", "dse simulate"),
    "measure energy": (["measure", "--model", "toy_hybrid", "--hw", "a100",
                        "--set", "dram_pj_per_byte=10"],
                       "dse measure does not read dram_pj_per_byte", "leave it out"),
}


@pytest.mark.parametrize("name", sorted(UNREAD))
def test_a_set_of_a_field_the_command_never_reads_is_refused(name, tmp_path, monkeypatch,
                                                             capsys):
    monkeypatch.chdir(tmp_path)
    argv, said, fix = UNREAD[name]
    line = _refused(argv, capsys)
    assert said in line and fix in line, line
    assert os.listdir(tmp_path) == []


def test_the_simulator_honours_the_launch_overhead_it_reads(capsys):
    """dse simulate reads kernel_launch_overhead_s: each of toy_hybrid's kernels costs its
    launch, so 1 ms a launch makes the latency at least kernels x 1 ms."""
    import dse.api as api

    acc = accelerator_models.load("a100", ["kernel_launch_overhead_s=1e-3"])
    sim = api.simulate("toy_hybrid", acc, "2:4")
    kernels = int(sim.ops["kernel_start"].sum())
    assert kernels >= 1
    assert sim.latency_s >= kernels * 1e-3
    assert run_cli(["simulate", "--model", "toy_hybrid", "--hw", "a100", "--format", "2:4",
                    "--set", "kernel_launch_overhead_s=1e-3"]) == 0
    capsys.readouterr()


def test_which_commands_read_the_simulators_fields():
    """simulate reads them; sweep only with --evaluator simulate; the roofline commands
    never, and they read every field of the bound, its memory and its energy."""
    from argparse import Namespace

    from dse.cli.options import _unread_field

    assert _unread_field(Namespace(command_name="dse simulate", launch_overhead_s=None),
                         "kernel_launch_overhead_s") is None
    sweep = Namespace(command_name="dse sweep", launch_overhead_s=None, evaluator="simulate")
    assert _unread_field(sweep, "sm_count") is None
    sweep.evaluator = None
    assert "add --evaluator simulate" in _unread_field(sweep, "sm_count")
    evaluate = Namespace(command_name="dse evaluate")
    for field in ("dram_bandwidth_bytes_per_s", "l2_bytes", "dram_pj_per_byte",
                  "sparse_tensor.patterns", "tensor_flops_per_s.fp16", "dram_capacity_bytes"):
        assert _unread_field(evaluate, field) is None, field
    measure = Namespace(command_name="dse measure", warm=False)
    assert _unread_field(measure, "cache.l2_bytes") is None  # the cold bound's links too
    for field in ("cache.l2_bytes", "cache.l2_bandwidth_bytes_per_s"):
        assert _unread_field(evaluate, field) is None, field
    assert _unread_field(measure, "block_sparse.min_block_size") is None


def test_evaluate_still_honours_l2_bytes(tmp_path, capsys):
    """l2_bytes is read by the memory columns (fits_on_chip): fused, toy_hybrid keeps 294,912
    bytes of activations on chip (147,456 fp16 elements), which fit a 40 MB L2 and not a
    294,911-byte one."""
    out = tmp_path / "e.csv"
    for l2, fits in (("4e7", True), ("294912", True), ("294911", False)):
        assert run_cli(["evaluate", "--model", "toy_hybrid", "--hw", "a100", "--fusion", "fused",
                        "--set", f"l2_bytes={l2}", "--out", str(out)]) == 0
        row = pd.read_csv(out).iloc[0]
        assert row["onchip_peak_bytes"] == 294_912
        assert bool(row["fits_on_chip"]) is fits
    capsys.readouterr()


# --- 4. the longest prompt a trace holds: every op counted ---------------------------------------

#: Two query heads of width 16,383 over one KV head: the rotary op (queries and keys) holds
#: t x (2 + 1) x 16,383 = 49,149 t elements, the largest of a prefill's ops at every t, so the
#: longest prompt is floor(2**29 / 49,149) = 10,923 tokens (49,149 x 10,923 = 536,854,527;
#: x 10,924 = 536,903,676 > 536,870,912). The attention scores' own count (2 x t(t+1)/2 +
#: 16,383 t, the old check) allows 16,384.
WIDE = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 16383, "vocab_size": 100, "max_position_embeddings": 100_000}


def test_the_prompt_limit_counts_the_rotary_op():
    c = llm_config_from_dict(WIDE, name="wide")
    trace = llm_trace(c, "prefill", 10_923)
    ops = trace.ops.set_index("name")
    assert ops.loc["model.layers.0.self_attn.rotary", "input_elems"] == 536_854_527
    assert trace.ops["input_elems"].max() <= MAX_PER_SAMPLE
    for context in (10_924, 16_384, 20_000):
        with pytest.raises(LLMConfigError) as info:
            llm_trace(c, "prefill", context)
        text = str(info.value)
        assert text.endswith("give at most 10923 prompt tokens"), text
        assert "\n" not in text


def test_the_context_limit_of_decode_counts_every_op():
    """Decode at k keys: the context op reads 2 k scores and k x 16,383 values, 16,385 k
    elements: k <= 32,766 (536,870,910); 32,767 gives 536,887,295 > 2**29."""
    c = llm_config_from_dict(WIDE, name="wide")
    ops = llm_trace(c, "decode", 32_766).ops.set_index("name")
    assert ops.loc["model.layers.0.self_attn.context", "input_elems"] == 536_870_910
    with pytest.raises(LLMConfigError, match="give at most 32766 tokens of context$"):
        llm_trace(c, "decode", 32_767)


def test_a_model_too_wide_for_one_token_is_told_by_the_trace_not_a_zero_hint():
    """Width 2**29 (256 heads of 2**21, each field within the widths a config may have): one
    token's rotary op holds 2 x 2**29 elements; no prompt is short enough, so no "give at most
    N" (the old check said 1, which failed too)."""
    c = llm_config_from_dict(dict(WIDE, num_attention_heads=2**8, num_key_value_heads=2**8,
                                  head_dim=2**21), name="huge")
    with pytest.raises(TraceError) as info:
        llm_trace(c, "prefill", 2)
    assert "give at most" not in str(info.value)
    assert "input_elems" in str(info.value) or "output_elems" in str(info.value)


def test_the_cli_gives_the_hint_for_a_wide_config(tmp_path, capsys):
    config = tmp_path / "wide.json"
    config.write_text(json.dumps(WIDE))
    line = _refused(["evaluate", "--model", str(config), "--phase", "prefill", "--context",
                     "16384", "--hw", "a100"], capsys)
    assert "self_attn.rotary" in line and line.endswith("give at most 10923 prompt tokens"), line


# --- 6. dse bench spmv on a full device ---------------------------------------------------------

#: The smallest run the command takes: one block size, no banded matrices, 512 rows at most
#: (its least --max-dim): 22 runs, about 3 s of kernels whatever the budget. --budget is only a
#: ceiling the plan ends far below; it must outlast the calibration, which took 2 s on an idle
#: 2-core machine and 19 s on a loaded one (a 31 s budget was refused then), so 2 minutes.
SPMV = ["bench", "spmv", "--budget", "2m", "--max-dim", "512", "--blocks", "1",
        "--bandwidth", "0"]


@pytest.mark.parametrize("free, where", [
    (2 * PAGE, "/spmv.parquet:"),  # the Parquet file (about 14 kB) does not fit
    # The Parquet file fits in the 512 kB left, the report (about 1.5 MB) does not: the line
    # names the run's folder, and the Parquet file already written goes with the rest.
    (128 * PAGE, "/bench: cannot write"),
])
def test_bench_spmv_on_a_full_device_leaves_nothing(free, where, device, capsys):  # noqa: F811
    if device is None:
        pytest.skip("no tmpfs can be mounted here (needs root): bench spmv writes a folder, "
                    "which /dev/full cannot stand in for")
    out = device.root / "out"
    out.mkdir()
    device.leave(free)
    run = out / "bench"
    line = _refused([*SPMV, "--out", str(run)], capsys)
    assert "no space left" in line.lower(), line
    assert f"{run}" in line and where in line, line
    assert device.files() == {"out"}, f"left behind: {sorted(device.files())}"


def test_a_cache_level_narrower_than_dram_moves_evaluates_cold_bound():
    """A cold byte passes every cache level's link on its way from DRAM, so the slowest link
    bounds it (dse.roofline.cold_seconds_per_byte): --set of a cache level is read by
    evaluate, not refused. An L2 link of 1e10 B/s against the A100's 2.039e12 B/s DRAM makes
    every op's memory time DRAM bytes / 1e10."""
    import dse.api as api

    plain = accelerator_models.load("a100")
    narrow = accelerator_models.load("a100", ["cache.l2_bytes=4e7",
                                              "cache.l2_bandwidth_bytes_per_s=1e10"])
    base = api.evaluate_layers("toy_hybrid", plain, "dense")
    slow = api.evaluate_layers("toy_hybrid", narrow, "dense")
    assert slow["memory_s"].to_numpy() == pytest.approx(
        base["memory_s"].to_numpy() * plain.dram_bandwidth_bytes_per_s / 1e10, rel=1e-12)


@pytest.mark.parametrize("table", ["set", "vary"])
def test_a_search_space_setting_only_the_simulator_reads_is_refused(table, tmp_path, capsys):
    """A space's [hardware.set] or [hardware.vary] goes through the same rule as --set: in a
    roofline study kernel_launch_overhead_s changed nothing, so it is refused, and nothing is
    written; with --evaluator simulate it is read."""
    text = (Path(__file__).parents[1] / "search" / "spaces" / "default.toml").read_text()
    value = "0.001" if table == "set" else "[0.0, 0.001]"
    if table == "set":
        rate = '"sparse_tensor.nonzero_rate" = 1.0'
        text = text.replace(rate, f'{rate}\n"kernel_launch_overhead_s" = {value}')
    else:
        text += f'\n[hardware.vary]\n"kernel_launch_overhead_s" = {value}\n'
    space = tmp_path / "space.toml"
    space.write_text(text)
    out = tmp_path / "out"
    line = _refused(["search", "--space", str(space), "--out", str(out)], capsys)
    assert f"hardware.{table} 'kernel_launch_overhead_s'" in line, line
    assert "add --evaluator simulate" in line, line
    assert not out.exists()
