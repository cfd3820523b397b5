"""Reliability, eighth round (issue 26): the defects round 7 left and a probe of the newest
surfaces (the dtype check, compare_dtype, collect's dtype_gemm part, the weight and KV-cache
dtypes), each with its regression test.

1. A spec's ``sm_count`` and ``name`` were unbounded: sm_count = 1e12 loaded (and sized the
   simulator's buffer at 1e12 SMs), and so did a 10,000-character name or one holding a
   newline. sm_count now lies in 1 to 1,000,000 (accelerator_models.loader.MAX_SM_COUNT) and a
   name has the form ``dse hw probe --name`` takes.
2. ``--index-bytes`` and ``--csr-dtype`` were taken where no format reads them (dense alone, an
   N:M pattern the hardware runs): they moved nothing but a column. Refused, naming the command
   and the formats that read them.
3. ``python -m benchmarks.gpu.compare_dtype``: a rows file that is not Parquet, lacks columns
   or holds no variant's rows ended in a traceback; an --out in a missing folder failed after
   the whole comparison. The dtype check dse quotes (models/dtype_check/DEVICE.json) was read
   unchecked: NaN printed "took nanx", a negative ratio "-1.00x", malformed JSON a traceback.
   ``benchmarks/gpu/collect`` took --budget 1e9 (minutes: 1,900 years), a seed torch
   overflows on (every item failed, exit 3), --out '' (the current folder) and a name no file
   system takes (traceback). ``dse search --weight-dtype`` on a trace ranked quantised designs
   by the accuracy measured unquantised, labelled "measured"; a --weight-group-size with the
   weights in the compute dtype was refused without naming the option.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

import accelerator_models
from accelerator_models import SpecError
from accelerator_models.loader import MAX_SM_COUNT
from tests.cli_run import run_cli
from tests.test_cli_reliability_round6 import _refused  # one line, exit 2, no traceback

ROOT = Path(__file__).parents[1]
ROUND_GPU = ROOT / "tests" / "data" / "round_gpu.toml"
TOY = ["--model", "toy_hybrid", "--hw", "a100"]
LLM = ["--model", "llama-3-8b", "--phase", "decode", "--context", "128", "--hw", "h100-sxm"]


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1, f"{len(lines)} lines on stderr:\n{err}"
    return lines[0]


# --- 1. sm_count and the spec's name -----------------------------------------------------------

def test_a_spec_with_a_trillion_sms_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text('extends = "a100"\nsm_count = 1e12\n')
    line = _refused(["simulate", "--model", "toy_hybrid", "--hw", "s.toml", "--format", "2:4"],
                    capsys)
    assert line == ("dse: error: s.toml: sm_count: 1,000,000,000,000 SMs is above the 1,000,000 "
                    "dse takes (a GPU has a few hundred); give the machine's count of SMs, "
                    "cores or compute units")
    assert sorted(os.listdir(tmp_path)) == ["s.toml"]


@pytest.mark.parametrize("argv, option", [
    (["simulate", *TOY, "--format", "2:4", "--set", "sm_count=1e12"], "--set sm_count"),
    (["sweep", *TOY, "--format", "2:4", "--evaluator", "simulate",
      "--vary", "hw.sm_count=108,2e6", "--out", "s.csv"], "--vary hw.sm_count"),
], ids=["set", "vary"])
def test_a_count_of_sms_past_the_range_is_refused_on_the_command_line(argv, option, tmp_path,
                                                                     monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = _refused(argv, capsys)
    assert line.startswith(f"dse: error: {option}: ") and "above the 1,000,000 dse takes" in line
    assert os.listdir(tmp_path) == []


def test_the_ends_of_the_sm_range_are_taken():
    assert MAX_SM_COUNT == 1_000_000
    acc = accelerator_models.load("a100", [f"sm_count={MAX_SM_COUNT}"])
    assert acc.sm_count == MAX_SM_COUNT
    assert accelerator_models.load("a100", ["sm_count=1"]).sm_count == 1
    with pytest.raises(SpecError, match="above the 1,000,000"):
        accelerator_models.load("a100", [f"sm_count={MAX_SM_COUNT + 1}"])


@pytest.mark.parametrize("name, shown", [
    ("x" * 10_000, "'xxxxxxxxxxxxxxxxxxxx'... (10,000 characters)"),
    ("x" * 101, "'xxxxxxxxxxxxxxxxxxxx'... (101 characters)"),
    ("my gpu", "'my gpu'"),
    ("a\\nb", "'a\\nb'"),
    ("-lead", "'-lead'"),
], ids=["10000 characters", "101 characters", "space", "newline", "leading dash"])
def test_a_spec_name_out_of_form_is_refused(name, shown, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text(ROUND_GPU.read_text().replace('name = "round-gpu"',
                                                                   f'name = "{name}"'))
    line = _refused(["evaluate", "--model", "toy_hybrid", "--hw", "s.toml"], capsys)
    assert line == ("dse: error: s.toml: name: expected the spec's name, a non-empty string of "
                    "letters, digits and . _ + : - (1 to 100 characters, the first a letter or "
                    f"digit), got {shown}; fix the name")
    assert len(line) < 300
    assert sorted(os.listdir(tmp_path)) == ["s.toml"]


def test_names_of_the_form_are_taken(tmp_path):
    for name in ("a" * 100, "h100-sxm+2:4", "my_gpu.v2", "7nm"):
        spec = tmp_path / "s.toml"
        spec.write_text(f'extends = "a100"\nname = "{name}"\n')
        assert accelerator_models.load(str(spec)).name == name
    for entry in accelerator_models.catalog_names():  # every catalog name has the form
        accelerator_models.load(entry)


# --- 2. --index-bytes and --csr-dtype where nothing reads them --------------------------------

UNREAD_NUMERICS = {
    "evaluate dense --index-bytes": (["evaluate", *TOY, "--index-bytes", "2", "--out", "e.csv"],
                                     "--index-bytes 2: dse evaluate does not read it here",
                                     "dense"),
    "evaluate 2:4 --csr-dtype": (["evaluate", *TOY, "--format", "2:4", "--csr-dtype", "fp16",
                                  "--out", "e.csv"],
                                 "--csr-dtype fp16: dse evaluate does not read it here", "2:4"),
    "evaluate block --csr-dtype": (["evaluate", *TOY, "--format", "block4@0.875",
                                    "--csr-dtype", "fp16"],
                                   "--csr-dtype fp16: dse evaluate", "block4@87.5%"),
    "simulate 2:4 --index-bytes": (["simulate", *TOY, "--format", "2:4", "--index-bytes", "2"],
                                   "--index-bytes 2: dse simulate does not read it here", "2:4"),
    "compare 2:4 --index-bytes": (["compare", "--model", "toy_hybrid", "--hw", "a100,h100",
                                   "--format", "2:4", "--index-bytes", "8", "--out", "c.csv"],
                                  "--index-bytes 8: dse compare", "2:4"),
    "sweep 2:4 --csr-dtype": (["sweep", *TOY, "--format", "2:4", "--vary", "batch=1,2",
                               "--csr-dtype", "fp32", "--out", "s.csv"],
                              "--csr-dtype fp32: dse sweep", "2:4"),
    "report 2:4 --index-bytes": (["report", *TOY, "--format", "2:4", "--index-bytes", "2",
                                  "--out", "r"], "--index-bytes 2: dse report", "2:4"),
    "study 2:4 --csr-dtype": (["study", "feature-overhead", "--model", "toy_hybrid", "--batch",
                               "1", "--format", "2:4", "--csr-dtype", "fp16", "--out", "st"],
                              "--csr-dtype fp16: dse study feature-overhead", "2:4"),
    "evaluate llm dense --index-bytes": (["evaluate", *LLM, "--index-bytes", "2"],
                                         "--index-bytes 2: dse evaluate", "dense"),
}


@pytest.mark.parametrize("name", sorted(UNREAD_NUMERICS))
def test_a_numerics_option_no_format_reads_is_refused(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv, head, formats = UNREAD_NUMERICS[name]
    line = _refused(argv, capsys)
    assert line.startswith(f"dse: error: {head}"), line
    assert f"--format {formats} on " in line
    assert line.endswith(", or leave it out")
    assert os.listdir(tmp_path) == []


def test_the_refusal_names_what_reads_each(capsys):
    line = _refused(["evaluate", *TOY, "--index-bytes", "2"], capsys)
    assert line == ("dse: error: --index-bytes 2: dse evaluate does not read it here: only block "
                    "and unstructured formats store indices (and a sparse format the hardware "
                    "lacks, run as CSR), and --format dense on a100-40gb stores none; add "
                    "--format unstructured@0.9 or block4@0.875, or leave it out")
    line = _refused(["evaluate", *TOY, "--format", "2:4", "--csr-dtype", "fp16"], capsys)
    assert line == ("dse: error: --csr-dtype fp16: dse evaluate does not read it here: only "
                    "unstructured formats run CSR kernels (and a sparse format the hardware "
                    "lacks), and --format 2:4 on a100-40gb runs none; add --format "
                    "unstructured@0.9, or leave it out")


def _latency(argv: list[str], out: Path) -> pd.Series:
    assert run_cli([*argv, "--out", str(out)]) == 0
    return pd.read_csv(out).set_index("format")["latency_s"]


@pytest.mark.parametrize("fmt, option, value", [
    ("unstructured@0.9", "--index-bytes", "1"),
    ("unstructured@0.9", "--csr-dtype", "fp16"),
    ("block4@0.875", "--index-bytes", "1"),
    ("1:8", "--csr-dtype", "fp16"),  # the A100 runs 2:4 only: 1:8 falls back to CSR
], ids=["csr index", "csr dtype", "bsr index", "nm fallback"])
def test_where_a_format_reads_the_option_it_moves_the_latency(fmt, option, value, tmp_path,
                                                              capsys):
    """ConvNeXt-T on the A100: each option a format reads moves that format's bound."""
    argv = ["evaluate", "--model", "convnext_tiny", "--hw", "a100", "--format", fmt]
    base = _latency(argv, tmp_path / "a.csv")
    moved = _latency([*argv, option, value], tmp_path / "b.csv")
    capsys.readouterr()
    name = base.index[-1]
    assert moved[name] < base[name]  # narrower indices or a faster CSR dtype
    assert moved["dense"] == base["dense"]


def test_a_sweep_that_varies_the_format_keeps_the_options(tmp_path, capsys):
    """A swept block size may leave the hardware's block support: the CSR dtype may be read."""
    out = tmp_path / "s.csv"
    assert run_cli(["sweep", *TOY, "--format", "block4@0.5", "--vary", "format.block=1,2",
                    "--csr-dtype", "fp16", "--out", str(out)]) == 0
    capsys.readouterr()
    assert set(pd.read_csv(out)["csr_dtype"]) == {"fp16"}


# --- 3a. compare_dtype: rows files and --out ---------------------------------------------------

SHIPPED_PART = ROOT / "benchmarks/gpu/results/collect-dtype/parts/dtype_gemm.kernels.parquet"


def _compare(argv: list[str], capsys) -> tuple[int, str]:
    from benchmarks.gpu import compare_dtype

    code = compare_dtype.main(argv)
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def part() -> pd.DataFrame:
    return pd.read_parquet(SHIPPED_PART)


def _first_timed(rows: pd.DataFrame) -> int:
    return int(rows.index[rows["error"].fillna("") == ""][0])


BAD_ROWS = {
    "not parquet": (lambda rows: b"hello", "cannot read it as kernel rows (ArrowInvalid"),
    "no columns": (lambda rows: pd.DataFrame({"a": [1]}), "missing column 'run_id'"),
    "negative time": (lambda rows: rows.assign(median_s=rows["median_s"].where(
        rows.index != _first_timed(rows), -1.0)), "has no positive min_s <= median_s"),
    "unknown dtype": (lambda rows: rows.assign(dtype=rows["dtype"].where(
        rows.index != _first_timed(rows), "fp99")), "has dtype 'fp99'"),
    "no dtype_gemm rows": (lambda rows: rows.assign(why="collect gemm24"),
                           "no timed dtype_gemm rows"),
    "no variant's rows": (lambda rows: rows.assign(implementation="other"),
                          "no timed row of an implementation it compares (cublas_linear"),
}


@pytest.mark.parametrize("name", sorted(BAD_ROWS))
def test_compare_dtype_refuses_a_bad_rows_file(name, part, tmp_path, capsys):
    make, needle = BAD_ROWS[name]
    data = tmp_path / "rows.parquet"
    made = make(part)
    if isinstance(made, bytes):
        data.write_bytes(made)
    else:
        made.to_parquet(data)
    out = tmp_path / "o.csv"
    code, err = _compare(["--data", str(data), "--out", str(out)], capsys)
    line = _one_line(err)
    assert code == 2 and line.startswith("compare_dtype: --data") and needle in line, line
    assert not out.exists()


def test_compare_dtype_checks_its_output_before_the_work(tmp_path, monkeypatch, capsys):
    from benchmarks.gpu import compare_dtype

    monkeypatch.setattr(compare_dtype, "read_rows", lambda paths: pytest.fail("work began"))
    for out, needle in ((tmp_path / "none" / "o.csv", "no folder"), (tmp_path, "is a folder")):
        code, err = _compare(["--out", str(out)], capsys)
        assert code == 2 and f"compare_dtype: --out {out}: {needle}" in _one_line(err)
    assert os.listdir(tmp_path) == []


def test_compare_dtype_takes_a_results_folder(part, tmp_path, capsys):
    """A collect results folder stands for its parts/dtype_gemm.kernels.parquet; one without
    it is refused, and a file given twice (its runs would count twice) too."""
    empty = tmp_path / "empty"
    empty.mkdir()
    code, err = _compare(["--data", str(empty), "--out", str(tmp_path / "o.csv")], capsys)
    assert code == 2 and "a folder without parts/dtype_gemm.kernels.parquet" in _one_line(err)
    folder = tmp_path / "run"
    (folder / "parts").mkdir(parents=True)
    part.to_parquet(folder / "parts" / "dtype_gemm.kernels.parquet")
    code, err = _compare(["--data", str(folder), "--data",
                          str(folder / "parts" / "dtype_gemm.kernels.parquet"),
                          "--out", str(tmp_path / "o.csv")], capsys)
    assert code == 2 and "is given twice" in _one_line(err)
    out = tmp_path / "o.csv"
    code, _ = _compare(["--data", str(folder), "--out", str(out)], capsys)
    assert code == 0 and set(pd.read_csv(out)["variant"]) >= {"fp16", "int4 weights"}


# --- 3b. the dtype check dse quotes ------------------------------------------------------------

SHIPPED_CHECK = ROOT / "dse/calibrate/models/dtype_check/h100-sxm.json"
INT4 = "checks.int4 weights.decode"


def _broken(doc: dict, case: str) -> str:
    if case == "malformed":
        return "{not json"
    if case == "nan":
        doc["checks"]["int4 weights"]["decode"]["median_measured_over_expected"] = float("nan")
    elif case == "negative":
        doc["checks"]["int4 weights"]["decode"]["median_measured_over_expected"] = -1.0
    elif case == "unknown dtype":
        doc["checks"]["fp99 weights"] = doc["checks"].pop("int4 weights")
    elif case == "no shapes":
        doc["checks"]["int4 weights"]["decode"]["shapes"] = 0
    elif case == "no kernel":
        del doc["kernels"]["int4 weights"]
    return json.dumps(doc)


CHECKS = {
    "malformed": "cannot read the dtype check (Expecting property name",
    "nan": f"{INT4}.median_measured_over_expected: expected a finite ratio from 0.001 to 1000, "
           "got nan",
    "negative": f"{INT4}.median_measured_over_expected: expected a finite ratio from 0.001 to "
                "1000, got -1.0",
    "unknown dtype": "checks.fp99 weights: not a dtype mark dse gives",
    "no shapes": f"{INT4}.shapes: expected a whole number of shapes >= 1, got 0",
    "no kernel": "kernels.int4 weights: expected the kernel's name, got None",
}


@pytest.mark.parametrize("case", sorted(CHECKS))
def test_a_broken_dtype_check_is_refused_naming_the_file_and_key(case, tmp_path, monkeypatch,
                                                                capsys):
    from dse.calibrate import coverage

    checks = tmp_path / "checks"
    checks.mkdir()
    doc = json.loads(SHIPPED_CHECK.read_text())
    (checks / "h100-sxm.json").write_text(_broken(doc, case))
    monkeypatch.setattr(coverage, "DTYPE_CHECK_DIR", checks)
    monkeypatch.chdir(tmp_path)
    line = _refused(["evaluate", *LLM, "--calibrated", "h100-sxm", "--weight-dtype", "int4",
                     "--out", "e.csv"], capsys)
    assert line.startswith(f"dse: error: {checks / 'h100-sxm.json'}: "), line
    assert CHECKS[case] in line, line
    assert line.endswith("; rerun python -m benchmarks.gpu.compare_dtype --ship, or fix the file")
    assert os.listdir(tmp_path) == ["checks"]


def test_the_shipped_dtype_check_loads_and_is_quoted(capsys):
    from dse.calibrate.coverage import load_dtype_check

    checks = load_dtype_check(SHIPPED_CHECK)["checks"]
    assert set(checks) == {
        "bf16 compute", "fp8 compute", "int8 compute", "int4 weights", "int8 weights"}
    assert run_cli(["evaluate", *LLM, "--calibrated", "h100-sxm", "--weight-dtype", "int4"]) == 0
    ratio = checks["int4 weights"]["decode"]["median_measured_over_expected"]
    assert f"int4 weights (torch._weight_int4pack_mm) took {ratio:.2f}x this expectation at " \
        "decode" in capsys.readouterr().out


# --- 3c. benchmarks/gpu/collect's arguments ----------------------------------------------------

COLLECT = ["--device", "cpu", "--parts", "dtype_gemm", "--smoke"]
COLLECT_BAD = {
    "budget 1e9 minutes": (["--budget", "1e9", "--out", "c"],
                           "collect: --budget 1e9: 1,000,000,000 minutes is longer than the "
                           "1,440 minutes (a day) a run plans; give at most 24h and rerun the "
                           "same command to continue"),
    "budget 25h": (["--budget", "25h", "--out", "c"], "collect: --budget 25h: 1,500 minutes"),
    "seed -1": (["--seed", "-1", "--out", "c"],
                "collect: argument --seed: -1: give a whole number from 0 to 2,147,483,647"),
    "seed past torch": (["--seed", "99999999999999999999999", "--out", "c"],
                        "collect: argument --seed: 99999999999999999999999: give a whole number"),
    "out empty": (["--out", ""], "collect: argument --out: '': give a folder path"),
    "out too long": (["--out", "x" * 300], "collect: argument --out: xxxxxxxxxxxxxxxxxxxx...: a "
                                           "name longer than the file system takes (255)"),
    "out below a file": (["--out", "f/c"], "collect: --out f/c: f is a file; give a folder path"),
}


@pytest.mark.parametrize("name", sorted(COLLECT_BAD))
def test_collect_refuses_a_bad_argument_before_any_work(name, tmp_path, monkeypatch, capsys):
    from benchmarks.gpu import collect

    monkeypatch.chdir(tmp_path)
    (tmp_path / "f").write_text("")
    monkeypatch.setattr(collect, "collect", lambda *a, **k: pytest.fail("work began"))
    argv, needle = COLLECT_BAD[name]
    code = collect.main([*COLLECT, *argv])
    line = _one_line(capsys.readouterr().err)
    assert code == 2 and line.startswith(needle), line
    assert os.listdir(tmp_path) == ["f"]


def test_collect_takes_a_day_and_the_largest_seed(tmp_path, monkeypatch):
    from benchmarks.gpu import collect

    seen = {}
    monkeypatch.setattr(collect, "collect",
                        lambda args, budget_s, parts, command: seen.update(b=budget_s, s=args.seed)
                        or 0)
    assert collect.main([*COLLECT, "--budget", "24h", "--seed", "2147483647",
                         "--out", str(tmp_path / "c")]) == 0
    assert seen == {"b": 86400.0, "s": 2**31 - 1}


# --- 3d. weight and KV-cache dtypes ------------------------------------------------------------

def test_search_refuses_quantised_weights_on_a_trace(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = _refused(["search", "--model", "convnext_tiny", "--weight-dtype", "int4",
                     "--out", "so"], capsys)
    assert line == ("dse: error: --weight-dtype int4: convnext_tiny is a trace, and its "
                    "accuracy table has no row for quantised weights (the search would rank "
                    "int4 designs by accuracy measured unquantised); leave it out, or price the "
                    "weights with dse evaluate, compare or sweep")
    assert os.listdir(tmp_path) == []


def test_a_space_file_with_quantised_weights_on_a_trace_is_refused(tmp_path, monkeypatch,
                                                                    capsys):
    # The same as --weight-dtype, through the space file's [numerics] table.
    monkeypatch.chdir(tmp_path)
    space = (Path(__file__).parent.parent / "examples" / "my_space.toml").read_text()
    (tmp_path / "q.toml").write_text(space + '\n[numerics]\nweight_dtype = "int4"\n')
    line = _refused(["search", "--space", "q.toml", "--out", "so"], capsys)
    assert line == ("dse: error: weight_dtype int4: convnext_tiny is a trace, and its accuracy "
                    "table has no row for quantised weights; leave it out")
    assert sorted(os.listdir(tmp_path)) == ["q.toml"]


@pytest.mark.parametrize("command", ["evaluate", "simulate", "compare"])
def test_a_group_size_for_weights_in_the_compute_dtype_names_the_option(command, tmp_path,
                                                                        monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = _refused([command, *LLM, "--format", "2:4", "--weight-dtype", "int8", "--dtype",
                     "int8", "--weight-group-size", "32"], capsys)
    assert line == ("dse: error: --weight-group-size 32: --weight-dtype int8 is the compute "
                    "dtype (--dtype int8), so the weights take no scales; give a wider --dtype, "
                    "or leave the group size out")
    assert os.listdir(tmp_path) == []
