"""Reliability, ninth round (issue 26): the defects round 8 left, a probe of the commands changed
since, and the mutation benchmark's journal, each with its regression test.

1. ``benchmarks/gpu/collect --out /proc/col`` passed the check of its folder (``os.access``
   says yes to root everywhere) and ended in a FileNotFoundError traceback inside the run;
   ``compare_dtype`` did the same after its whole comparison, and ``compare_llm``,
   ``compare_models``, ``compare_predictions``, ``compare_simulator`` and ``llm_decode``
   checked nothing. Each now creates and removes a file where its output goes, before any work
   (``benchmarks/gpu/out_check.py``).
2. ``--backend torch`` on a trace no timm export made (the shipped toy_hybrid) was priced with
   the timm conversion rule, which moved its 2:4 expectation to about its dense value (0.49x
   -> 1.04x), exit 0. What torch runs was measured for timm models only: refused, as a
   language model already was, in one line.
3. A spec's ``aliases`` and ``description`` had no limits: an alias with a space, 10,000 of
   them, a description of a megabyte or holding a newline loaded. Aliases have the name's form
   (at most 16, no repeats); a description is one line of at most 1,000 characters.
5. A probe of the commands changed lately:
   - ``dse search --model llama-2-7b --trials 2`` (and ``--seed``) ran the exhaustive engine,
     which reads neither, exit 0: refused where the exhaustive engine runs;
   - ``--dtype fp32``, ``--vector-dtype int4``, ``--csr-dtype int4``, ``--index-bytes 3`` and
     ``--weight-dtype int8 --dtype fp8`` were refused naming the library's field (``dtype``,
     ``vector_dtype``, ``index width``, ``weight dtype``), not the option;
   - ``dse calibrate --validate --hold-out-models --estimator spmv-cnn`` ignored
     --hold-out-models and started a 4-hour validation;
   - ``dse hw probe --out a.toml --out b.toml`` wrote b.toml only (likewise --name, --repeats,
     --wait-idle, --device), and ``--name a100`` labelled a probed machine as the catalog's
     A100 in every table.
6. ``python -m benchmarks.mutation --journal FILE``: each result appended as it ends; a rerun
   skips what the journal holds for the same file and tests and prints the totals of both.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import accelerator_models
from accelerator_models import SpecError
from tests.cli_run import run_cli
from tests.test_cli_reliability_round6 import _refused  # one line, exit 2, no traceback

ROOT = Path(__file__).parents[1]
UNWRITABLE = Path("/proc")  # a folder no file can be created in, even by root
needs_proc = pytest.mark.skipif(not (UNWRITABLE / "self").exists(), reason="needs Linux /proc")


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1, f"{len(lines)} lines on stderr:\n{err}"
    return lines[0]


# --- 1. output paths of the GPU scripts, checked by writing ----------------------------------

@needs_proc
@pytest.mark.parametrize("out", ["/proc/col", "/proc/a/b/c"])
def test_collect_refuses_a_folder_no_file_can_be_made_in_before_any_work(out, monkeypatch,
                                                                        capsys):
    from benchmarks.gpu import collect

    def no_work(*args, **kwargs):
        raise AssertionError("collect started work")

    monkeypatch.setattr(collect, "collect", no_work)
    code = collect.main(["--device", "cpu", "--smoke", "--parts", "vector", "--out", out])
    line = _one_line(capsys.readouterr().err)
    assert code == 2
    assert line.startswith(f"collect: --out {out}: cannot write in /proc (")
    assert line.endswith("); give a writable folder")


def test_collect_still_takes_a_new_nested_folder(tmp_path, monkeypatch):
    from benchmarks.gpu import collect

    seen = []
    monkeypatch.setattr(collect, "collect", lambda args, *rest: seen.append(args.out) or 0)
    out = tmp_path / "a" / "b"
    assert collect.main(["--device", "cpu", "--smoke", "--parts", "vector",
                         "--out", str(out)]) == 0
    assert seen == [out] and os.listdir(tmp_path) == []  # the check leaves nothing behind
    (tmp_path / "f").write_text("")
    assert collect.main(["--device", "cpu", "--out", str(tmp_path / "f")]) == 2


SCRIPTS = ["compare_dtype", "compare_llm", "compare_models", "compare_predictions",
           "compare_simulator", "llm_decode"]


@needs_proc
@pytest.mark.parametrize("script", SCRIPTS)
def test_each_gpu_script_refuses_an_out_it_cannot_write_before_any_work(script, capsys):
    import importlib

    module = importlib.import_module(f"benchmarks.gpu.{script}")
    code = module.main(["--out", "/proc/x.csv"])
    line = _one_line(capsys.readouterr().err)
    assert code == 2
    assert line.startswith(f"{script}: --out /proc/x.csv: cannot write in /proc ("), line
    assert line.endswith("); give a writable folder")


def test_the_out_checks_name_the_path_and_leave_nothing(tmp_path):
    from benchmarks.gpu.out_check import file_problem, folder_problem

    assert file_problem(tmp_path / "x.csv") is None
    assert folder_problem(tmp_path / "new" / "deeper") is None
    assert os.listdir(tmp_path) == []
    assert file_problem(tmp_path / "none" / "x.csv") == (
        f"--out {tmp_path / 'none' / 'x.csv'}: folder {tmp_path / 'none'} does not exist; "
        "create it first")
    assert file_problem(tmp_path / "x.txt") == (
        f"--out {tmp_path / 'x.txt'}: unknown file type '.txt'; use one of .csv")
    (tmp_path / "f").write_text("")
    assert folder_problem(tmp_path / "f" / "sub") == (
        f"--out {tmp_path / 'f' / 'sub'}: {tmp_path / 'f'} is a file; give a folder path")


# --- 2. --backend torch where torch's run was never measured ---------------------------------

TORCH_REFUSAL = ("dse: error: --backend torch: toy_hybrid is not a timm model exported by dse "
                 "workloads export; what torch runs was measured for timm models only: price "
                 "it as exported (leave out --backend torch)")


@pytest.mark.parametrize("command", ["evaluate", "compare"])
def test_backend_torch_on_a_trace_not_from_timm_is_refused(command, tmp_path, monkeypatch,
                                                           capsys):
    monkeypatch.chdir(tmp_path)
    hw = "h100-sxm" if command == "evaluate" else "h100-sxm,a100"
    line = _refused([command, "--model", "toy_hybrid", "--hw", hw, "--format", "2:4",
                     "--calibrated", "h100-sxm", "--backend", "torch", "--out", "e.csv"], capsys)
    assert line == TORCH_REFUSAL
    assert os.listdir(tmp_path) == []


def test_backend_torch_on_a_language_model_names_it(capsys):
    line = _refused(["evaluate", "--model", "llama-3-8b", "--phase", "decode", "--context",
                     "128", "--hw", "h100-sxm", "--calibrated", "h100-sxm", "--backend",
                     "torch"], capsys)
    assert line.startswith("dse: error: --backend torch: llama-3-8b.decode.128 is a language "
                           "model's step; what torch runs was measured for timm models only")


def test_which_traces_torch_runs_are_known():
    import workloads
    from workloads.backend import torch_run_unknown

    assert torch_run_unknown(workloads.load_trace("vit_base_patch16_224")) is None
    toy = workloads.load_trace("toy_hybrid")
    assert torch_run_unknown(toy) == ("toy_hybrid is not a timm model exported by dse "
                                      "workloads export")
    exported = workloads.Trace.from_records(toy.model, toy.input_shape, toy.to_json()["ops"],
                                            {**toy.provenance, "timm": "1.0.31"})
    assert torch_run_unknown(exported) is None  # what dse workloads export records


def test_the_library_refuses_backend_torch_on_a_trace_not_from_timm():
    import dse
    from dse.roofline import EvaluationError

    with pytest.raises(EvaluationError, match="backend torch: toy_hybrid is not a timm model"):
        dse.evaluate("toy_hybrid", "h100-sxm", "2:4", 1, calibrated="h100-sxm",
                     backend="torch")


def test_the_exported_backend_still_prices_the_toy(capsys):
    assert run_cli(["evaluate", "--model", "toy_hybrid", "--hw", "h100-sxm", "--format", "2:4",
                    "--calibrated", "h100-sxm", "--backend", "exported"]) == 0


# --- 3. a spec's aliases and description --------------------------------------------------

FORM = ("expected a list of at most 16 other names of the spec, each a non-empty string of "
        "letters, digits and . _ + : - (1 to 100 characters, the first a letter or digit)")
SPEC_CASES = {
    "alias with a space": ('aliases = ["my gpu"]', f"aliases: {FORM}, got 'my gpu'; fix that "
                                                   "alias"),
    "alias too long": (f'aliases = ["{"x" * 10_000}"]',
                       f"aliases: {FORM}, got 'xxxxxxxxxxxxxxxxxxxx'... (10,000 characters); "
                       "fix that alias"),
    "alias empty": ('aliases = [""]', f"aliases: {FORM}, got ''; fix that alias"),
    "aliases not a list": ('aliases = "h1"', f"aliases: {FORM}, got 'h1'; fix the aliases"),
    "alias a number": ("aliases = [3]", f"aliases: {FORM}, got 3; fix that alias"),
    "17 aliases": ("aliases = [" + ", ".join(f'"a{i}"' for i in range(17)) + "]",
                   f"aliases: {FORM}, got 17 aliases; keep the few it is known by"),
    "alias twice": ('aliases = ["g", "g"]', "aliases: 'g' is given twice; keep one"),
    "description newline": ('description = "one\\ntwo"',
                            "description: holds the control character '\\n' at character 4; "
                            "keep the description on one line of printable text"),
    "description tab": ('description = "a\\tb"',
                        "description: holds the control character '\\t' at character 2; keep "
                        "the description on one line of printable text"),
    "description huge": (f'description = "{"d" * 1_000_001}"',
                         "description: 1,000,001 characters is above the 1,000 a description "
                         "takes (one line of prose); shorten it, and put sources in sources = "
                         "[...]"),
    "description a list": ('description = ["a"]',
                           "description: expected a string, got ['a']; fix the description"),
}


@pytest.mark.parametrize("case", sorted(SPEC_CASES))
def test_a_spec_alias_or_description_out_of_form_is_refused(case, tmp_path, monkeypatch,
                                                            capsys):
    key_line, message = SPEC_CASES[case]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text(f'extends = "a100"\nname = "mine"\n{key_line}\n')
    line = _refused(["evaluate", "--model", "toy_hybrid", "--hw", "s.toml"], capsys)
    assert line == f"dse: error: s.toml: {message}"
    assert len(line) < 400
    assert sorted(os.listdir(tmp_path)) == ["s.toml"]


def test_aliases_and_descriptions_of_the_form_are_taken(tmp_path):
    spec = tmp_path / "s.toml"
    aliases = [f"gpu-{i}" for i in range(16)]
    spec.write_text(f'extends = "a100"\nname = "mine"\naliases = {json.dumps(aliases)}\n'
                    f'description = "{"d" * 1000}"\n')
    acc = accelerator_models.load(str(spec))
    assert acc.aliases == tuple(aliases) and len(acc.description) == 1000
    for name in accelerator_models.catalog_names():  # the catalog keeps loading
        accelerator_models.load(name)
    with pytest.raises(SpecError, match="control character"):
        spec.write_text('extends = "a100"\nname = "mine"\ndescription = "a\\u2028b"\n')
        accelerator_models.load(str(spec))


# --- 5. round 9's probe ----------------------------------------------------------------------

@pytest.mark.parametrize("extra, option", [
    (["--model", "llama-2-7b", "--trials", "2"], "--trials 2"),
    (["--model", "llama-2-7b", "--seed", "3"], "--seed 3"),
], ids=["trials", "seed"])
def test_a_language_model_search_refuses_the_optuna_options(extra, option, tmp_path,
                                                            monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = _refused(["search", *extra], capsys)
    what = "trial budget" if option.startswith("--trials") else "sampler seed"
    assert line == (f"dse: error: {option}: a search over language models runs the exhaustive "
                    "engine, which evaluates every one of the 10 design points and takes no "
                    f"{what}; leave it out")
    assert os.listdir(tmp_path) == []


def test_an_exhaustive_search_refuses_a_trial_budget(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = _refused(["search", "--trials", "5"], capsys)
    assert line.startswith("dse: error: --trials 5: the search runs the exhaustive engine, "
                           "which evaluates every one of the ")
    assert line.endswith("design points and takes no trial budget; leave it out, or give "
                         "--engine optuna to sample the space")
    assert os.listdir(tmp_path) == []


NUMERICS = {
    "dtype": (["--dtype", "fp32"], "--dtype fp32: dtype 'fp32' is not a tensor-core dtype; use "
              "one of fp16, bf16, tf32, fp8, int8 (elementwise ops: --vector-dtype)"),
    "vector dtype": (["--vector-dtype", "int4"], "--vector-dtype int4: not a vector dtype; use "
                     "one of fp32, fp16, bf16"),
    "csr dtype": (["--format", "unstructured@50%", "--csr-dtype", "int4"],
                  "--csr-dtype int4: not a vector dtype; use one of fp32, fp16, bf16"),
    "index bytes": (["--format", "unstructured@50%", "--index-bytes", "3"],
                    "--index-bytes 3: an index is 1, 2, 4 or 8 bytes wide; give one of those"),
    "weights no narrower": (["--dtype", "fp8", "--weight-dtype", "int8"],
                            "--weight-dtype int8 with --dtype fp8: weight dtype int8 is no "
                            "narrower than the compute dtype fp8"),
}


@pytest.mark.parametrize("case", sorted(NUMERICS))
def test_a_number_type_is_refused_naming_its_option(case, tmp_path, monkeypatch, capsys):
    extra, message = NUMERICS[case]
    monkeypatch.chdir(tmp_path)
    line = _refused(["evaluate", "--model", "llama-3-8b", "--phase", "decode", "--context",
                     "128", "--hw", "h100-sxm", *extra, "--out", "e.csv"], capsys)
    assert line.startswith(f"dse: error: {message}"), line
    assert os.listdir(tmp_path) == []


def test_calibrate_refuses_hold_out_models_with_the_spmv_estimator(tmp_path, monkeypatch,
                                                                  capsys):
    monkeypatch.chdir(tmp_path)
    line = _refused(["calibrate", "--validate", "--hold-out-models", "--estimator", "spmv-cnn"],
                    capsys)
    assert line == ("dse: error: --hold-out-models validates the kernel predictors on whole "
                    "models; it does not go with --estimator spmv-cnn (drop it)")
    assert os.listdir(tmp_path) == []


@pytest.fixture
def no_probe(monkeypatch):
    from dse.measure import probe

    def refuse(*args, **kwargs):
        raise AssertionError("the probe ran")

    monkeypatch.setattr(probe, "probe", refuse)


@pytest.mark.parametrize("name, taken", [("a100", "an alias of a100-40gb"),
                                         ("H100", "an alias of h100-sxm"),
                                         ("mi300x", "mi300x")])
def test_hw_probe_refuses_a_catalog_name(name, taken, no_probe, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = _refused(["hw", "probe", "--name", name], capsys)
    assert line == (f"dse: error: --name {name}: the name of a catalog spec ({taken}; see dse "
                    "hw list): the probed figures would be labelled as that spec's in every "
                    f"table; give another, e.g. --name {name}-probed")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("twice", [
    ["--out", "host.toml", "--out", "b.toml"], ["--out", "a.toml", "--out", "b.toml"],
    ["--name", "host", "--name", "box"], ["--repeats", "7", "--repeats", "9"],
    ["--wait-idle", "0", "--wait-idle", "5"], ["--device", "cpu", "--device", "cuda"],
], ids=["out default first", "out", "name", "repeats", "wait-idle", "device"])
def test_hw_probe_refuses_an_option_given_twice(twice, no_probe, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = _refused(["hw", "probe", *twice], capsys)
    assert line.startswith(f"dse hw probe: error: {twice[0]} given twice ({twice[1]}"), line
    assert os.listdir(tmp_path) == []


def test_hw_probe_applies_its_defaults(monkeypatch):
    from dse.cli.main import build_parser

    args = build_parser("hw").parse_args(["hw", "probe"])
    assert (args.device, args.out, args.name, args.repeats, args.wait_idle) == (
        "cpu", Path("host.toml"), "host", 7, 0.0)


# --- 6. the mutation benchmark's journal ------------------------------------------------------

TINY = "def add(a, b):\n    return a + b\n\n\nLIMIT = 3\n"
TINY_TEST = "from tiny import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """benchmarks.mutation pointed at a two-file project: tiny.py (two mutants: ``+ -> -``,
    killed, and ``3 -> 4``, which no test reads) and its test; pytest's runs counted."""
    from benchmarks import mutation

    project = tmp_path / "project"
    project.mkdir()
    (project / "tiny.py").write_text(TINY)
    (project / "test_tiny.py").write_text(TINY_TEST)
    monkeypatch.setattr(mutation, "ROOT", project)
    monkeypatch.setattr(mutation, "MODULES", {"tiny": (("tiny.py",), ("test_tiny.py",))})
    monkeypatch.setattr(mutation, "EQUIVALENT", {})
    runs = []
    real = mutation._run_tests

    def counted(repo, tests, timeout_s):
        runs.append(tests)
        return real(repo, tests, timeout_s)

    monkeypatch.setattr(mutation, "_run_tests", counted)
    return mutation, project, runs


def _totals(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("tiny "))


def test_a_journal_holds_each_result_and_a_rerun_runs_nothing(tiny, tmp_path, capsys):
    mutation, project, runs = tiny
    journal = tmp_path / "j.jsonl"
    assert mutation.main(["--module", "tiny", "--journal", str(journal)]) == 0
    first = capsys.readouterr().out
    assert len(runs) == 3  # the unmutated subset, then each mutant
    entries = [json.loads(line) for line in journal.read_text().splitlines()]
    assert sorted((e["change"], e["killed"]) for e in entries) == [("+ -> -", True),
                                                                   ("3 -> 4", False)]
    assert {e["file_sha256"] for e in entries} == {
        mutation.file_digest(project, "tiny.py")}
    assert _totals(first).split()[1:4] == ["1", "/", "2"]

    runs.clear()
    assert mutation.main(["--module", "tiny", "--journal", str(journal)]) == 0
    again = capsys.readouterr().out
    assert runs == []  # every result from the journal: not even the unmutated run
    assert "tiny: 2 of 2 mutants (2 from the journal, 0 to run)" in again
    assert _totals(again) == _totals(first)
    assert "survived tiny.py:5: 3 -> 4" in again
    assert len(journal.read_text().splitlines()) == 2  # nothing appended


def test_an_edited_file_runs_its_mutants_again(tiny, tmp_path, capsys):
    mutation, project, runs = tiny
    journal = tmp_path / "j.jsonl"
    assert mutation.main(["--module", "tiny", "--journal", str(journal)]) == 0
    path = project / "tiny.py"
    path.write_text(path.read_text() + "\n# edited\n")
    runs.clear()
    capsys.readouterr()
    assert mutation.main(["--module", "tiny", "--journal", str(journal)]) == 0
    out = capsys.readouterr().out
    assert len(runs) == 3 and "(0 from the journal, 2 to run)" in out
    assert len(journal.read_text().splitlines()) == 4  # the old entries stay, unread


def test_a_test_added_reruns_the_survivors_and_the_kills_stand(tiny, tmp_path, capsys):
    mutation, project, runs = tiny
    journal = tmp_path / "j.jsonl"
    assert mutation.main(["--module", "tiny", "--journal", str(journal)]) == 0
    test = project / "test_tiny.py"  # a test that kills the survivor (LIMIT 3 -> 4)
    test.write_text(test.read_text() + "\n\ndef test_limit():\n    from tiny import LIMIT\n"
                    "    assert LIMIT == 3\n")
    runs.clear()
    capsys.readouterr()
    assert mutation.main(["--module", "tiny", "--journal", str(journal)]) == 0
    out = capsys.readouterr().out
    assert "(1 from the journal, 1 to run)" in out and len(runs) == 2  # unmutated + 3 -> 4
    assert _totals(out).split()[1:4] == ["2", "/", "2"]
    assert len(journal.read_text().splitlines()) == 3


def test_a_torn_last_line_is_left_out_and_its_mutant_runs_again(tiny, tmp_path, capsys):
    mutation, _, runs = tiny
    journal = tmp_path / "j.jsonl"
    assert mutation.main(["--module", "tiny", "--journal", str(journal)]) == 0
    lines = journal.read_text().splitlines()
    torn = json.loads(lines[1])["change"]
    journal.write_text(lines[0] + "\n" + lines[1][:30])  # killed while writing the second
    runs.clear()
    capsys.readouterr()
    assert mutation.main(["--module", "tiny", "--journal", str(journal)]) == 0
    out = capsys.readouterr().out
    assert "1 line(s) that do not parse left out" in out
    assert "(1 from the journal, 1 to run)" in out and len(runs) == 2
    assert _totals(out).split()[1:4] == ["1", "/", "2"]
    kept = journal.read_text().splitlines()
    assert len(kept) == 3 and json.loads(kept[2])["change"] == torn


def test_a_sample_counts_only_its_own_mutants_from_the_journal(tiny, tmp_path, capsys):
    mutation, _, runs = tiny
    journal = tmp_path / "j.jsonl"
    assert mutation.main(["--module", "tiny", "--journal", str(journal), "--at",
                          "tiny.py:2"]) == 0
    runs.clear()
    capsys.readouterr()
    assert mutation.main(["--module", "tiny", "--journal", str(journal)]) == 0
    out = capsys.readouterr().out
    assert "(1 from the journal, 1 to run)" in out and len(runs) == 2


@needs_proc
@pytest.mark.parametrize("where, says", [
    ("/proc/j.jsonl", "cannot write in /proc ("),
    ("{tmp}", "is a folder; give a file"),
    ("{tmp}/none/j.jsonl", "no folder {tmp}/none; create it or give another path"),
])
def test_a_journal_that_cannot_be_written_is_refused_before_any_run(where, says, tiny,
                                                                     tmp_path, capsys):
    mutation, _, runs = tiny
    where, says = where.format(tmp=tmp_path), says.format(tmp=tmp_path)
    assert mutation.main(["--module", "tiny", "--journal", where]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"mutation: --journal {where}: {says}"), line
    assert runs == []


def test_an_explanation_that_a_test_disproves_is_named(tiny, tmp_path, capsys):
    """A mutant listed as equivalent that the tests kill: the run names its entry to drop, and
    so does its journal; the survivor's entry is not named."""
    mutation, _, _ = tiny
    kept = ("tiny.py", "LIMIT = 3", "3 -> 4")
    wrong = ("tiny.py", "return a + b", "+ -> -")
    mutation.EQUIVALENT.update({kept: "no test reads LIMIT", wrong: "said equivalent"})
    journal = tmp_path / "j.jsonl"
    assert mutation.main(["--module", "tiny", "--journal", str(journal)]) == 0
    assert mutation.disproved_equivalents(journal) == [wrong]  # as tests/test_mutation_table
    out = capsys.readouterr().out
    named = [line for line in out.splitlines() if line.startswith("EQUIVALENT entry")]
    assert named == ["EQUIVALENT entry of a mutant the tests kill (tiny.py:2: + -> -; a test "
                     f"tells it apart, so drop the entry): {wrong!r}"]
    assert _totals(out).split()[1:] == ["1", "/", "2", "50.0%", "1", "/", "1"]  # explained


def test_a_journal_with_list_is_refused(tiny, tmp_path, capsys):
    mutation, _, _ = tiny
    assert mutation.main(["--list", "--journal", str(tmp_path / "j.jsonl")]) == 2
    assert _one_line(capsys.readouterr().err) == (
        "mutation: --journal with --list: --list runs nothing, so nothing is journaled; leave "
        "out one of the two")
    assert not (tmp_path / "j.jsonl").exists()


# --- lead: two refusals the helpers' reports named ----------------------------------------

def test_whole_models_with_an_empty_path_names_the_form(capsys):
    assert run_cli(["calibrate", "--data", "h100-sxm", "--whole-models", "h100-sxm=",
                    "--validate"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["dse: error: --whole-models h100-sxm=: give DEVICE=FILE with an existing "
                   "CSV, dataset or folder, e.g. h100-sxm=benchmarks/gpu/results/"
                   "models_measurements.csv"]


def test_select_by_with_the_spmv_estimator_is_refused(capsys):
    assert run_cli(["calibrate", "--estimator", "spmv-cnn", "--select-by", "rmspe",
                    "--validate"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--select-by rmspe: it chooses the kernel predictors' methods" \
        in err[0]


def _timing_out(mutation, monkeypatch, times: int):
    """``_run_tests`` as the fixture's, but a run of the ``3 -> 4`` mutant times out its first
    ``times`` runs (a loaded machine, or a slow mutant)."""
    real, seen = mutation._run_tests, []

    def run(repo, tests, timeout_s):
        seen.append("mutant" if "LIMIT = 4" in (repo / "tiny.py").read_text() else "plain")
        if seen[-1] == "mutant" and seen.count("mutant") <= times:
            return False, timeout_s, f"timed out after {timeout_s:.0f} s"
        return real(repo, tests, timeout_s)

    monkeypatch.setattr(mutation, "_run_tests", run)
    return seen


def test_a_timeout_from_load_is_checked_and_the_mutant_survives(tiny, tmp_path, capsys,
                                                                 monkeypatch):
    mutation, _, _ = tiny
    seen = _timing_out(mutation, monkeypatch, times=1)
    journal = tmp_path / "j.jsonl"
    assert mutation.main(["--module", "tiny", "--journal", str(journal)]) == 0
    # the 3 -> 4 mutant times out, the unmutated subset is timed again right after, and the
    # mutant runs again (and passes: it survives); "+ -> -" and the first unmutated run aside
    i = seen.index("mutant")
    assert seen[i:i + 3] == ["mutant", "plain", "mutant"] and seen.count("mutant") == 2
    entries = {e["change"]: e for e in map(json.loads, journal.read_text().splitlines())}
    assert entries["3 -> 4"]["killed"] is False
    assert "survived tiny.py:5: 3 -> 4" in capsys.readouterr().out


def test_a_slow_mutant_is_killed_by_its_checked_timeout_and_old_timeouts_rerun(
        tiny, tmp_path, capsys, monkeypatch):
    mutation, _, _ = tiny
    seen = _timing_out(mutation, monkeypatch, times=2)
    journal = tmp_path / "j.jsonl"
    assert mutation.main(["--module", "tiny", "--journal", str(journal)]) == 0
    entries = {e["change"]: e for e in map(json.loads, journal.read_text().splitlines())}
    assert entries["3 -> 4"]["killed"] is True
    assert mutation.TIMEOUT_CHECKED in entries["3 -> 4"]["last"]
    assert seen.count("mutant") == 2
    # a rerun holds it; a timeout journaled without the check (as before it) runs again
    seen.clear()
    assert mutation.main(["--module", "tiny", "--journal", str(journal)]) == 0
    assert seen == []
    lines = journal.read_text().splitlines()
    old = json.loads(lines[-1])
    old["last"] = "timed out after 52 s"
    journal.write_text("\n".join(lines[:-1] + [json.dumps(old)]) + "\n")
    capsys.readouterr()
    assert mutation.main(["--module", "tiny", "--journal", str(journal)]) == 0
    assert "(1 from the journal, 1 to run)" in capsys.readouterr().out
