"""The cases of tests/test_fuzz_inputs.py: bad or borderline user inputs for every command and
every file type dse loads (issue 26).

A case is a command line, the files it finds in its (empty) working folder, and a word its one
line of error must hold: the option or the file it refuses. Files are corrupted copies of shipped
ones, written only when the case runs, so that collecting the cases costs nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CASES", "Case"]

ROOT = Path(__file__).parents[1]
TRACE = ROOT / "workloads" / "traces" / "toy_hybrid.json"
LLM = ROOT / "workloads" / "llm_configs" / "llama-3-8b.json"
SPEC = ROOT / "tests" / "data" / "round_gpu.toml"
SPACE = ROOT / "search" / "spaces" / "default.toml"
PREDICTOR = ROOT / "dse" / "calibrate" / "models" / "cpu-amd-epyc-2c.json"
DATASET = ROOT / "dse" / "measure" / "datasets" / "cpu-amd-epyc-2c.parquet"
TABLE = ROOT / "dse" / "accuracy" / "tables" / "accuracy_default.csv"

#: A file's content, or a function that writes it into the working folder under the given name.
Content = str | bytes | Callable[[Path], None]


@dataclass(frozen=True)
class Case:
    """``dse *argv`` in a folder holding ``files``; refused with exit ``code`` and one line on
    stderr that holds one of ``needle``."""

    name: str
    argv: tuple[str, ...]
    needle: tuple[str, ...]  # the line holds one of these: the option, the value or the file
    files: dict[str, Content] = field(default_factory=dict)
    code: int = 2

    def write_files(self, folder: Path) -> None:
        for name, content in self.files.items():
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if callable(content):
                content(path)
            elif isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)


CASES: list[Case] = []


def case(name: str, argv: list[str], needle: str | tuple[str, ...],
         files: dict[str, Content] | None = None, code: int = 2) -> None:
    if any(c.name == name for c in CASES):
        raise ValueError(f"two fuzz cases named {name!r}")
    needles = (needle,) if isinstance(needle, str) else tuple(n for n in needle if n.strip())
    CASES.append(Case(name, tuple(argv), needles, dict(files or {}), code))


# --- the commands -------------------------------------------------------------------------------

DESIGN = ["--model", "toy_hybrid", "--hw", "a100", "--format", "2:4"]
#: Each command that takes the design options, with what else it needs (outputs in the folder).
DESIGN_COMMANDS = {
    "evaluate": ["evaluate", *DESIGN],
    "simulate": ["simulate", *DESIGN],
    "compare": ["compare", *DESIGN],
    "report": ["report", *DESIGN, "--out", "rep"],
    "sweep": ["sweep", *DESIGN, "--vary", "batch=1,2", "--out", "s.parquet"],
    "study": ["study", "feature-overhead", *DESIGN, "--out", "st"],
    "measure": ["measure", "--model", "toy_hybrid", "--hw", "a100", "--out", "m.parquet"],
}
SIM_COMMANDS = {
    "simulate": DESIGN_COMMANDS["simulate"],
    "sweep": ["sweep", *DESIGN, "--vary", "batch=1,2", "--evaluator", "simulate", "--out",
              "s.parquet"],
    "search": ["search", "--evaluator", "simulate", "--out", "se"],
}


def _with(argv: list[str], option: str, value: str) -> list[str]:
    """``argv`` with ``option value`` replacing the option's value there, or added."""
    argv = list(argv)
    if option in argv:
        argv[argv.index(option) + 1] = value
    else:
        argv += [option, value]
    return argv


NOT_NUMBERS = ["abc", "", " ", "1e", "0x10", "1,5", "--", "½"]
NAN_INF = ["nan", "inf", "-inf", "NaN", "Infinity"]

# Every design option, each with values that no command may take.
DESIGN_BAD = {
    "--batch": ["0", "-1", "1.5", "nan", "inf", "1e308", "abc", "", "9" * 40],
    "--format": ["", "3:2", "0:4", "2:0", "4:4", "2:4:8", "block0@50%", "block4@150%",
                 "unstructured@-10%", "unstructured@nan", "block4@", "blockx@50%", "xyz",
                 "unstructured@100%"],
    "--hw": ["", "no_such_gpu", "gone.toml", ",", " , ", "/proc"],
    "--set": ["no_such_field=1", "dram_bandwidth_bytes_per_s=-1", "=1",
              "dram_bandwidth_bytes_per_s=nan", "dram_bandwidth_bytes_per_s=inf",
              "dram_bandwidth_bytes_per_s=abc", "dram_bandwidth_bytes_per_s", "l2_bytes=-5",
              "sm_count=0", "sparse_tensor.nonzero_rate=2", "tensor_flops_per_s.fp16=0",
              "name="],
    "--model": ["", "no_such_model", "gone.json", ".", "toy_hybrid.json"],
    "--fusion": ["", "fusedd", "rules:", "rules:no-such-backend"],
    "--scope": ["", "every"],
    "--dtype": ["", "fp13", "FP16x", "int3"],
    "--vector-dtype": ["", "fp7"],
    "--csr-dtype": ["", "fp7"],
    "--index-bytes": ["0", "3", "-2", "nan", "abc", "16"],
    "--context": ["0", "-1", "nan", "abc", "1.5"],
    "--phase": ["", "train"],
}
#: Options measure does not take.
MEASURE_LACKS = {"--fusion", "--scope", "--dtype", "--vector-dtype", "--csr-dtype",
                 "--index-bytes"}


def _needle(option: str, value: str) -> str:
    return option


for command, base in DESIGN_COMMANDS.items():
    for option, values in DESIGN_BAD.items():
        if command == "measure" and option in MEASURE_LACKS:
            continue
        for value in values:
            case(f"{command} {option} {value!r}", _with(base, option, value),
                 (option, value))

SIM_BAD = {
    "--buffer-bytes": ["-1", "0", "nan", "abc", "-inf", "1e400x"],
    "--depth": ["0", "-1", "65", "nan", "abc", "2.5"],
    "--launch-overhead-s": ["-1", "nan", "inf", "2", "abc", "-1e-9"],
    "--prefetch-depth": ["-1", "abc", "1.5", str(2**40)],
    "--overlap": ["", "partial"],
    "--buffer": ["", "dram"],
}
for command, base in SIM_COMMANDS.items():
    for option, values in SIM_BAD.items():
        for value in values:
            argv = _with(base, option, value)
            if option == "--prefetch-depth" and command != "search":
                argv = _with(argv, "--fusion", "fused_prefetched")
            case(f"{command} {option} {value!r}", argv, (option, value))

# --- command by command -----------------------------------------------------------------------

EVALUATE = DESIGN_COMMANDS["evaluate"]
SIMULATE = DESIGN_COMMANDS["simulate"]
for value in ["x.txt", "x", "nodir/x.csv", "f.txt/x.csv", "/proc/x/y.csv", "."]:
    files = {"f.txt": ""} if value.startswith("f.txt") else {}
    case(f"evaluate --out {value!r}", [*EVALUATE, "--out", value], "--out", files)
    case(f"simulate --out {value!r}", [*SIMULATE, "--out", value], "--out", files)
    case(f"simulate --timeline {value!r}", [*SIMULATE, "--timeline", value], "--timeline",
         files)
    case(f"compare --out {value!r}", [*DESIGN_COMMANDS["compare"], "--out", value], "--out",
         files)
for value in ["f.txt", "nodir/deeper/r", "f.txt/r", "/proc/x/r", ""]:
    files = {"f.txt": ""} if value.startswith("f.txt") else {}
    case(f"simulate --report {value!r}", [*SIMULATE, "--report", value], "--report", files)
    case(f"compare --report {value!r}", [*DESIGN_COMMANDS["compare"], "--report", value],
         "--report", files)
    case(f"sweep --report {value!r}", [*DESIGN_COMMANDS["sweep"], "--report", value],
         "--report", files)
    case(f"report --out {value!r}", _with(DESIGN_COMMANDS["report"], "--out", value), "--out",
         files)
    case(f"study --out {value!r}", _with(DESIGN_COMMANDS["study"], "--out", value), "--out",
         files)
for value in ["0", "-1", "abc", "nan", ""]:
    case(f"simulate --top {value!r}", [*SIMULATE, "--top", value], ("--top", value))
for value in ["no_such_device", "", "gone.json", ".", "cpu-amd-epyc-2c.json/"]:
    for command in ("evaluate", "simulate", "compare", "sweep"):
        case(f"{command} --calibrated {value!r}",
             [*DESIGN_COMMANDS[command], "--calibrated", value], ("--calibrated", value))
case("evaluate --per-layer --out to a file in a missing folder",
     [*EVALUATE, "--per-layer", "--out", "a/b/c.csv"], "--out")
case("evaluate --phase on a CNN", [*EVALUATE, "--phase", "decode"], "--phase")
case("evaluate --context on a CNN", [*EVALUATE, "--context", "128"], "--context")
case("simulate two hw", [*SIMULATE, "--hw", "a100,h100"], "--hw")

SWEEP = ["sweep", *DESIGN, "--out", "s.parquet"]
for value in ["batch", "batch=", "=1,2", "no_such=1,2", "batch=a,b", "batch=0,1", "batch=-1",
              "hw.dram_bandwidth_bytes_per_s=-1,2e12", "hw.no_such_field=1,2",
              "batch=1..10:0", "batch=10..1:5", "batch=1..10:-2", "batch=1..nan:3",
              "hw.dram_bandwidth_bytes_per_s=nan", "hw.dram_bandwidth_bytes_per_s=inf,1e12",
              "format.sparsity=0.5", "format.n=1,2", "fusion=fusedd", "batch=,",
              "batch=1.5,2", "hw.sm_count=0,1"]:
    case(f"sweep --vary {value!r}", [*SWEEP, "--vary", value], ("--vary", value))
case("sweep without --vary", SWEEP, "--vary")
case("sweep the same dimension twice", [*SWEEP, "--vary", "batch=1,2", "--vary", "batch=4,8"],
     "batch")
for value in ["0", "-1", "abc", "nan", "100000"]:
    case(f"sweep --workers {value!r}",
         _with(SIM_COMMANDS["sweep"], "--workers", value), ("--workers", value))
for value in ["x.txt", "nodir/s.parquet", "f.txt/s.parquet", "s"]:
    case(f"sweep --out {value!r}", [*SWEEP[:-2], "--vary", "batch=1,2", "--out", value],
         "--out", {"f.txt": ""} if value.startswith("f.txt") else {})
for value in ["", "http://x", "tcp://", "tcp://host:notaport"]:
    case(f"sweep --dask {value!r}", [*SIM_COMMANDS["sweep"], "--dask", value], ("--dask", value))
for value in ["", "x", "roofline2"]:
    case(f"sweep --evaluator {value!r}", [*DESIGN_COMMANDS["sweep"], "--evaluator", value],
         ("--evaluator", value))

STUDY = DESIGN_COMMANDS["study"]
for value in ["nan", "-1", "0", "abc", "", "-inf"]:
    case(f"study --threshold {value!r}", _with(STUDY, "--threshold", value), ("--threshold", value))
for value in ["", "3:2", "xyz", "block0@50%"]:
    case(f"study --tornado-format {value!r}", _with(STUDY, "--tornado-format", value),
         ("--tornado-format", value))
for value in ["", "no_such_model", "gone.json"]:
    case(f"study --tornado-model {value!r}", _with(STUDY, "--tornado-model", value),
         ("--tornado-model", value))
case("study without --out", ["study", "feature-overhead", *DESIGN], "--out")
case("study unknown", ["study", "no-such-study", "--out", "st"], "no-such-study")

SEARCH = ["search", "--out", "se"]
for value in ["", "1.3x", "x_over_2:4", "nanx_over_2:4", "-1x_over_2:4", "0x_over_2:4",
              "1.3x_over_9:4", "1.3x_over_", "1.3_over_2:4", "infx_over_2:4", "1.3x_under_2:4"]:
    case(f"search --target {value!r}", [*SEARCH, "--target", value], ("--target", value))
for value in ["-1", "inf", "abc", "", "101"]:
    case(f"search --max-acc-drop {value!r}", [*SEARCH, "--max-acc-drop", value],
         ("--max-acc-drop", value))
for option, values in {
    "--objective": ["", "latency"], "--engine": ["", "random"], "--results": ["", "json"],
    "--evaluator": ["", "exact"],
}.items():
    for value in values:
        case(f"search {option} {value!r}", [*SEARCH, option, value], (option, value))
for value in ["", "no_such_field", "hw.no_such_field", "batch"]:
    case(f"search --minimize {value!r}", [*SEARCH, "--minimize", value], ("--minimize", value))
for value in ["0", "-1", "abc", "nan", "1e12"]:
    case(f"search --trials {value!r}", [*SEARCH, "--engine", "optuna", "--trials", value],
         ("--trials", value))
for value in ["0", "-1", "abc", "100000"]:
    case(f"search --workers {value!r}", [*SEARCH, "--workers", value], ("--workers", value))
for value in ["0", "-1", "abc"]:
    case(f"search --top {value!r}", [*SEARCH, "--top", value], ("--top", value))
for value in ["nan", "abc", "1.5", str(2**64)]:
    case(f"search --seed {value!r}", [*SEARCH, "--seed", value], ("--seed", value))
for value in ["mysql://u@h/db", "notaurl", "sqlite://", "sqlite:///nodir/deeper/s.db",
              "sqlite:///f.txt/s.db", "postgresql://"]:
    case(f"search --storage {value!r}", [*SEARCH, "--storage", value], "--storage",
         {"f.txt": ""} if "f.txt" in value else {})
for value in ["a/b", "\n", " "]:
    case(f"search --study {value!r}", [*SEARCH, "--study", value], ("--study", value))
case("search --resume without --study", [*SEARCH, "--resume"], "--resume")
case("search --resume of a study that is not there",
     [*SEARCH, "--resume", "--study", "gone", "--storage", "sqlite:///s.db"], "s.db")
for value in ["f.txt", "f.txt/x"]:
    case(f"search --out {value!r}", ["search", "--out", value], "--out", {"f.txt": ""})
    case(f"search --report {value!r}", [*SEARCH, "--report", value], "--report",
         {"f.txt": ""})
for value in ["no_such_device", "gone.json"]:
    case(f"search --calibrated {value!r}", [*SEARCH, "--calibrated", value],
         ("--calibrated", value))

REPORT = DESIGN_COMMANDS["report"]
case("report --measured without --calibrated", [*REPORT, "--measured", "cpu-amd-epyc-2c"],
     "--measured")
for value in ["", "gone.parquet", "no_such_dataset", "x.txt"]:
    case(f"report --measured {value!r}",
         [*REPORT, "--calibrated", "cpu-amd-epyc-2c", "--measured", value],
         ("--measured", value),
         {"x.txt": "hello\n"} if value == "x.txt" else {})
for value in ["", "gone.csv", ".", "no_such_table"]:
    case(f"report --accuracy-table {value!r}", [*REPORT, "--accuracy-table", value],
         ("--accuracy-table", value))

MEASURE = DESIGN_COMMANDS["measure"]
for option, values in {
    "--budget": ["", "abc", "-5s", "5x", "inf", "1e400", "0s", "nan", "25h", "-1"],
    "--threads": ["0", "-1", "abc", "100000", "1.5"],
    "--wait-idle": ["-5", "inf", "abc", "1e9"],
    "--rounds": ["0", "-1", "abc", "1.5", "101"],
    "--seed": ["nan", "abc", "1.5", str(2**64), "-5"],
    "--device": ["", "tpu"],
}.items():
    for value in values:
        case(f"measure {option} {value!r}", _with(MEASURE, option, value), (option, value))
for value in ["m.txt", "nodir/m.parquet", "f.txt/m.parquet", "m", ""]:
    case(f"measure --out {value!r}", _with(MEASURE, "--out", value), "--out",
         {"f.txt": ""} if value.startswith("f.txt") else {})
case("measure two hw", _with(MEASURE, "--hw", "a100,h100"), "--hw")

FUSION = ["fusion-rules", "--out", "r.json"]
for option, values in {
    "--backend": ["", "no-such", "inductor"],
    "--budget": ["", "abc", "-1m", "0", "inf", "nan"],
    "--threshold": ["nan", "-1", "2", "abc", "inf"],
    "--batch": ["0", "-1", "abc", "1e9"],
    "--threads": ["0", "-1", "abc", "100000"],
}.items():
    for value in values:
        case(f"fusion-rules {option} {value!r}", [*FUSION, option, value], (option, value))
for value in ["r.txt", "nodir/r.json", "f.txt/r.json", ""]:
    case(f"fusion-rules --out {value!r}", ["fusion-rules", "--out", value], "--out",
         {"f.txt": ""} if value.startswith("f.txt") else {})

CALIBRATE = ["calibrate", "--validate"]
for value in ["", "no_such_dataset", "gone.csv", "x.txt", "."]:
    case(f"calibrate --data {value!r}", [*CALIBRATE, "--data", value], ("--data", value),
         {"x.txt": "a,b\n1,2\n"} if value == "x.txt" else {})
for value in ["m.txt", "nodir/m.json", "f.txt/m.json", ""]:
    case(f"calibrate --out {value!r}", ["calibrate", "--out", value], "--out",
         {"f.txt": ""} if value.startswith("f.txt") else {})
for value in ["", "h100-sxm", "=w.csv", "h100-sxm=", "h100-sxm=gone.csv", "nodev=w.csv",
              "h100-sxm=w.txt"]:
    case(f"calibrate --whole-models {value!r}",
         [*CALIBRATE, "--data", "h100-sxm", "--whole-models", value], "--whole-models",
         {"w.txt": "x\n"} if "w.txt" in value else {})
for option, values in {
    "--seed": ["nan", "abc", str(2**64)],
    "--name": ["a/b", " ", "\t"],
    "--estimator": ["", "trees"],
}.items():
    for value in values:
        case(f"calibrate {option} {value!r}", [*CALIBRATE, option, value], (option, value))
for option, values in {"--epochs": ["-1", "abc", "1e9", "nan"],
                       "--folds": ["0", "1", "-1", "abc", "1000"]}.items():
    for value in values:
        case(f"calibrate spmv-cnn {option} {value!r}",
             [*CALIBRATE, "--estimator", "spmv-cnn", option, value], (option, value))
case("calibrate --hold-out-models without --whole-models",
     [*CALIBRATE, "--hold-out-models"], "--hold-out-models")
case("calibrate with nothing to do", ["calibrate"], "--out")

ACCURACY = ["accuracy", "--model", "test_convnext", "--work-dir", "work", "--out", "a.csv"]
for option, values in {
    "--img-size": ["0", "-1", "abc", "nan"],
    "--patterns": ["", ",", " , ", "3:2", "block0", "dense2"],
    "--levels": ["", "nan", "1", "-0.1", "0.5,abc", "0"],
    "--dense-epochs": ["-1", "abc", "nan"],
    "--finetune-epochs": ["-1", "abc", "1e9"],
    "--lr": ["0", "-inf", "abc", ""],
    "--batch-size": ["0", "-1", "abc", "1e9"],
    "--seed": ["nan", "abc", str(2**64)],
    "--train-limit": ["0", "-1", "abc"],
    "--dataset": ["", "gone", "f.txt"],
    "--model": ["", "no_such_model_xyz"],
}.items():
    for value in values:
        case(f"accuracy {option} {value!r}", _with(ACCURACY, option, value), (option, value),
             {"f.txt": "x"} if value == "f.txt" else {})
for value in ["a.txt", "nodir/a.csv", "f.txt/a.csv", ""]:
    case(f"accuracy --out {value!r}", _with(ACCURACY, "--out", value), "--out",
         {"f.txt": ""} if value.startswith("f.txt") else {})
for value in ["f.txt", "f.txt/ck", "/proc/x/ck"]:
    case(f"accuracy --save-checkpoints {value!r}", [*ACCURACY, "--save-checkpoints", value],
         "--save-checkpoints", {"f.txt": ""} if value.startswith("f.txt") else {})

for option, values in {"--model": ["", "no_such_model"], "--format": ["", "3:2", "xyz"],
                       "--metric": ["", "top99"]}.items():
    for value in values:
        case(f"accuracy-table {option} {value!r}", ["accuracy-table", option, value],
             (option, value))
for value in ["gone.csv", ".", "x.parquet"]:
    case(f"accuracy-table {value!r}", ["accuracy-table", value], value)

for value in ["", "no_such_gpu", "gone.toml", ".", "/proc"]:
    case(f"hw show {value!r}", ["hw", "show", value], value or "''")
PROBE = ["hw", "probe", "--out", "h.toml"]
for option, values in {
    "--repeats": ["0", "-1", "abc", "1e9", "nan", "1000000"],
    "--wait-idle": ["inf", "abc", "1e9", ""],
    "--name": ["a/b", "..", " ", "x" * 300, "a b"],
    "--device": ["", "tpu"],
}.items():
    for value in values:
        case(f"hw probe {option} {value!r}", [*PROBE, option, value], (option, value))
for value in ["h.json", "nodir/h.toml", "f.txt/h.toml", ""]:
    case(f"hw probe --out {value!r}", ["hw", "probe", "--out", value], "--out",
         {"f.txt": ""} if value.startswith("f.txt") else {})

SPMV = ["bench", "spmv", "--out", "sp"]
for option, values in {
    "--budget": ["", "abc", "0", "-1s", "inf", "nan", "100h"],
    "--max-dim": ["0", "-1", "abc", "1", "nan", str(2**80)],
    "--blocks": ["", "a", "-1", ",", "100", "1.5", "0"],
    "--bandwidth": ["-1", "nan", "abc", "1.5", str(2**40)],
    "--seed": ["nan", "abc", str(2**64)],
}.items():
    for value in values:
        case(f"bench spmv {option} {value!r}", [*SPMV, option, value], (option, value))
for value in ["f.txt", "f.txt/sp", "nodir/deeper/sp", ""]:
    case(f"bench spmv --out {value!r}", ["bench", "spmv", "--out", value], "--out",
         {"f.txt": ""} if value.startswith("f.txt") else {})
BLOCKS = ["bench", "spmv-blocks", "--out", "b.parquet"]
for option, values in {
    "--budget": ["", "abc", "0", "inf"],
    "--max-dim": ["0", "-1", "abc"],
    "--models": ["", "no_such_model", ","],
    "--repeats": ["0", "-1", "abc", "nan"],
    "--sample": ["0", "-1", "abc", "1e12"],
    "--seed": ["nan", "abc"],
}.items():
    for value in values:
        case(f"bench spmv-blocks {option} {value!r}", [*BLOCKS, option, value], (option, value))
for value in ["b.txt", "nodir/b.parquet", "f.txt/b.parquet", ""]:
    case(f"bench spmv-blocks --out {value!r}", ["bench", "spmv-blocks", "--out", value],
         "--out", {"f.txt": ""} if value.startswith("f.txt") else {})

for value in ["", "no_such_model", "gone.json", "."]:
    case(f"workloads show {value!r}", ["workloads", "show", value], value or "''")
EXPORT = ["workloads", "export", "convnext_tiny", "--out", "t.json"]
for option, values in {"--img-size": ["-1", "abc", "nan", "100000"],
                       "--trace-batch": ["0", "-1", "abc"],
                       "--num-classes": ["0", "-1", "abc"]}.items():
    for value in values:
        case(f"workloads export {option} {value!r}", [*EXPORT, option, value], (option, value))
for value in ["t.txt", "nodir/t.json", "f.txt/t.json", ""]:
    case(f"workloads export --out {value!r}", _with(EXPORT, "--out", value), "--out",
         {"f.txt": ""} if value.startswith("f.txt") else {})
case("bench spmv-blocks --models with one unknown",
     [*BLOCKS, "--models", "toy_hybrid,no_such_model"], "no_such_model")
case("workloads export of no timm model", ["workloads", "export", "no_such_model_xyz", "--out",
                                           "t.json"], "no_such_model_xyz")

for argv, needle in [(["no-such-command"], "no-such-command"), (["evaluat"], "evaluat"),
                     (["hw", "probes"], "probes"), (["bench", "spmv-cnn"], "spmv-cnn"),
                     (["evaluate", *DESIGN, "--no-such-option"], "--no-such-option"),
                     (["hw", "show"], "NAME"), (["workloads", "show"], "NAME")]:
    case(f"usage: {' '.join(argv)}", argv, needle)

# --- the files dse loads ----------------------------------------------------------------------


def _json_file(source: Path, change: Callable[[dict], object]) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        document = json.loads(source.read_text())
        result = change(document)
        path.write_text(json.dumps(document if result is None else result))
    return write


def _set(dotted: str, value) -> Callable[[dict], None]:
    def change(document):
        *keys, last = dotted.split(".")
        table = document
        for key in keys:
            table = table[int(key)] if isinstance(table, list) else table[key]
        if isinstance(table, list):
            table[int(last)] = value
        else:
            table[last] = value
    return change


def _drop(dotted: str) -> Callable[[dict], None]:
    def change(document):
        *keys, last = dotted.split(".")
        table = document
        for key in keys:
            table = table[int(key)] if isinstance(table, list) else table[key]
        del table[int(last) if isinstance(table, list) else last]
    return change


def _replace(document: dict, whole) -> object:
    return whole


BAD_TEXT = {"empty": "", "not JSON": "{not json", "a list": "[1, 2]", "a number": "3",
            "null": "null", "truncated": '{"model": "x", "ops": [',
            "binary": b"\x00\xff\xfe\x80garbage"}

# Traces: toy_hybrid.json corrupted, loaded by `workloads show` and `evaluate --model t.json`.
TRACE_CHANGES: dict[str, Callable] = {
    "ops empty": _set("ops", []),
    "ops null": _set("ops", None),
    "ops missing": _drop("ops"),
    "input_shape missing": _drop("input_shape"),
    "input_shape empty": _set("input_shape", []),
    "input_shape negative": _set("input_shape", [3, -32, 32]),
    "input_shape text": _set("input_shape", "3x32x32"),
    "input_shape float": _set("input_shape", [3, 32.5, 32]),
    "provenance missing": _drop("provenance"),
    "provenance a list": _set("provenance", [1]),
    "duplicate op names": lambda d: d["ops"][1].update(name=d["ops"][0]["name"]),
    "producer unknown": _set("ops.1.producers", ["no_such_op"]),
    "producer later op": lambda d: d["ops"][0].update(producers=[d["ops"][5]["name"]]),
    "producers a string": _set("ops.1.producers", "input"),
    "op a list": _set("ops.0", [1, 2]),
    "unknown op key": _set("ops.0.colour", "red"),
    "unknown kind": _set("ops.0.kind", "teleport"),
    "kind empty": _set("ops.0.kind", ""),
    "name empty": _set("ops.0.name", ""),
    "name a number": _set("ops.0.name", 7),
    "prunable a string": _set("ops.0.prunable", "yes"),
    "groups 0": _set("ops.0.groups", 0),
    "groups not dividing": _set("ops.0.groups", 7),
    "density 1.5": _set("ops.0.density", 1.5),
    "density -0.5": _set("ops.0.density", -0.5),
    "density nan": _set("ops.0.density", math.nan),
}
for key in ("name", "kind", "m", "k", "n", "groups", "weight_elems", "input_elems",
            "output_elems", "vector_flops", "prunable", "producers"):
    TRACE_CHANGES[f"op without {key}"] = _drop(f"ops.0.{key}")
for key in ("m", "k", "weight_elems", "input_elems", "output_elems", "vector_flops"):
    TRACE_CHANGES[f"{key} negative"] = _set(f"ops.0.{key}", -5)
    TRACE_CHANGES[f"{key} a string"] = _set(f"ops.0.{key}", "12")
for key in ("k", "input_elems", "output_elems"):
    TRACE_CHANGES[f"{key} 1.5"] = _set(f"ops.0.{key}", 1.5)
    TRACE_CHANGES[f"{key} inf"] = _set(f"ops.0.{key}", math.inf)
    TRACE_CHANGES[f"{key} true"] = _set(f"ops.0.{key}", True)

for name, change in TRACE_CHANGES.items():
    case(f"trace {name} (workloads show)", ["workloads", "show", "t.json"], "t.json",
         {"t.json": _json_file(TRACE, change)})
for name in ("ops empty", "input_shape negative", "producer unknown", "m negative",
             "op without kind", "duplicate op names", "unknown kind", "k inf"):
    for command in ("evaluate", "simulate", "sweep"):
        case(f"trace {name} ({command})",
             _with(DESIGN_COMMANDS[command], "--model", "t.json"), "t.json",
             {"t.json": _json_file(TRACE, TRACE_CHANGES[name])})
for name, text in BAD_TEXT.items():
    case(f"trace {name}", ["workloads", "show", "t.json"], "t.json", {"t.json": text})
    case(f"trace {name} (report)", _with(DESIGN_COMMANDS["report"], "--model", "t.json"),
         "t.json", {"t.json": text})

# LLM configurations: a config.json given as --model with --phase and --context.
LLM_CHANGES: dict[str, Callable] = {}
for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers",
            "vocab_size"):
    LLM_CHANGES[f"without {key}"] = _drop(key)
    LLM_CHANGES[f"{key} 0"] = _set(key, 0)
    LLM_CHANGES[f"{key} negative"] = _set(key, -8)
    LLM_CHANGES[f"{key} a string"] = _set(key, "4096")
    LLM_CHANGES[f"{key} 1.5"] = _set(key, 1.5)
LLM_CHANGES.update({
    "kv heads not dividing heads": _set("num_key_value_heads", 5),
    "kv heads above heads": _set("num_key_value_heads", 64),
    "kv heads 0": _set("num_key_value_heads", 0),
    "heads not dividing hidden": _set("num_attention_heads", 31),
    "unknown activation": _set("hidden_act", "swishy"),
    "activation a number": _set("hidden_act", 3),
    "hidden_size NaN": _set("hidden_size", math.nan),
    "layers 1e30": _set("num_hidden_layers", 1e30),
    "hidden 2**40": _set("hidden_size", 2**40),
    "max positions 0": _set("max_position_embeddings", 0),
    "a list": lambda d: [d],
    "empty object": lambda d: {},
})
LLM_RUN = ["evaluate", "--model", "c.json", "--phase", "prefill", "--context", "128", "--hw",
           "a100", "--format", "2:4"]
for name, change in LLM_CHANGES.items():
    case(f"config.json {name}", LLM_RUN, ("c.json", "c's"),
         {"c.json": _json_file(LLM, change)})
for name in ("without hidden_size", "kv heads not dividing heads", "unknown activation"):
    case(f"config.json {name} (workloads show)", ["workloads", "show", "c.json"], "c.json",
         {"c.json": _json_file(LLM, LLM_CHANGES[name])})
for value in ["0", "-1", "abc", "nan", str(2**40)]:
    case(f"llm --context {value!r}", _with(LLM_RUN, "--context", value), ("--context", value),
         {"c.json": LLM.read_text()})
case("llm context beyond max positions", _with(LLM_RUN, "--context", "10000000"), "context",
     {"c.json": LLM.read_text()})
case("llm without --phase", ["evaluate", "--model", "llama-3-8b", "--hw", "a100"], "--phase")
for name, text in BAD_TEXT.items():
    case(f"config.json text: {name}", LLM_RUN, "c.json", {"c.json": text})

# Hardware specs: round_gpu.toml corrupted; loaded by `hw show` and `--hw s.toml`.
spec = SPEC.read_text()
BANDWIDTH = "dram_bandwidth_bytes_per_s = 1e12"
SPEC_TEXTS = {
    "empty": "",
    "syntax error": spec.replace("= 1e12", "== 1e12"),
    "unclosed table": spec.replace("[sparse_tensor]", "[sparse_tensor"),
    "duplicate key": spec.replace(BANDWIDTH, f"{BANDWIDTH}\n{BANDWIDTH}"),
    "duplicate table": spec + "\n[block_sparse]\nsupported = false\n",
    "unknown key": spec.replace(BANDWIDTH, f"{BANDWIDTH}\nbandwith = 1e12"),
    "unknown table": spec + "\n[warp_drive]\nfactor = 9\n",
    "missing bandwidth": spec.replace(BANDWIDTH, ""),
    "name a number": spec.replace('name = "round-gpu"', "name = 7"),
    "bandwidth a string": spec.replace("= 1e12", '= "1e12"'),
    "bandwidth zero": spec.replace("= 1e12", "= 0"),
    "bandwidth negative": spec.replace("= 1e12", "= -1e12"),
    "bandwidth inf": spec.replace("= 1e12", "= inf"),
    "bandwidth a bool": spec.replace("= 1e12", "= true"),
    "bandwidth an array": spec.replace("= 1e12", "= [1e12]"),
    "tensor rate a string": spec.replace("fp16 = 100e12", 'fp16 = "fast"'),
    "tensor rate nan": spec.replace("fp16 = 100e12", "fp16 = nan"),
    "tensor rates empty": spec.replace("fp16 = 100e12", ""),
    "unknown dtype": spec.replace("fp16 = 100e12", "fp16 = 100e12\nfp13 = 1e12"),
    "vector rate zero": spec.replace("fp32 = 10e12", "fp32 = 0"),
    "pattern 3:2": spec.replace('patterns = ["2:4"]', 'patterns = ["3:2"]'),
    "pattern text": spec.replace('patterns = ["2:4"]', 'patterns = "2:4"'),
    "pattern garbage": spec.replace('patterns = ["2:4"]', 'patterns = ["x"]'),
    "nonzero rate 0": spec.replace("nonzero_rate = 1.0", "nonzero_rate = 0"),
    "nonzero rate nan": spec.replace("nonzero_rate = 1.0", "nonzero_rate = nan"),
    "nonzero rate negative": spec.replace("nonzero_rate = 1.0", "nonzero_rate = -1.0"),
    "block supported a string": spec.replace("supported = true", 'supported = "yes"'),
    "min block 0": spec.replace("min_block_size = 1", "min_block_size = 0"),
    "min block 1.5": spec.replace("min_block_size = 1", "min_block_size = 1.5"),
    "sm_count 0": spec.replace(BANDWIDTH, f"{BANDWIDTH}\nsm_count = 0"),
    "sm_count -4": spec.replace(BANDWIDTH, f"{BANDWIDTH}\nsm_count = -4"),
    "l2 negative": spec.replace(BANDWIDTH, f"{BANDWIDTH}\nl2_bytes = -1"),
    "l2 nan": spec.replace(BANDWIDTH, f"{BANDWIDTH}\nl2_bytes = nan"),
    "shared memory a string": spec.replace(BANDWIDTH,
                                           f'{BANDWIDTH}\nshared_memory_per_sm_bytes = "x"'),
    "energy negative": spec.replace(BANDWIDTH, f"{BANDWIDTH}\ndram_pj_per_byte = -3"),
    "energy nan": spec.replace(BANDWIDTH, f"{BANDWIDTH}\ndram_pj_per_byte = nan"),
    "power zero": spec.replace(BANDWIDTH, f"{BANDWIDTH}\nboard_power_w = 0"),
    "capacity negative": spec.replace(BANDWIDTH, f"{BANDWIDTH}\ndram_capacity_bytes = -1"),
    "launch overhead negative": spec.replace(BANDWIDTH,
                                             f"{BANDWIDTH}\nkernel_launch_overhead_s = -1e-6"),
    "sources a string": spec.replace('sources = ["hand-made for tests/test_golden.py"]',
                                     'sources = "hand"'),
    "unverified unknown field": spec.replace("unverified = []", 'unverified = ["warp"]'),
    "extends itself": 'extends = "s.toml"\nname = "loop"\n',
    "extends a number": "extends = 3\n",
    "extends empty": 'extends = ""\n',
    "binary": "\x00\x01\x02",
    "a top-level array": "[[x]]\na = 1\n",
    "description a table": spec.replace('description = "test', 'descriptio = "test'),
}
for name, text in SPEC_TEXTS.items():
    case(f"spec {name} (hw show)", ["hw", "show", "s.toml"], "s.toml", {"s.toml": text})
for name in ("syntax error", "bandwidth zero", "unknown key", "pattern 3:2", "sm_count 0",
             "extends itself", "empty"):
    for command in ("evaluate", "simulate", "compare", "sweep", "report"):
        case(f"spec {name} ({command})", _with(DESIGN_COMMANDS[command], "--hw", "s.toml"),
             "s.toml", {"s.toml": SPEC_TEXTS[name]})
case("spec not UTF-8", ["hw", "show", "s.toml"], "s.toml", {"s.toml": b'name = "\xff\xfe"\n'})

# Search spaces: search/spaces/default.toml corrupted, given as --space.
space = SPACE.read_text()
SPACE_TEXTS = {
    "empty": "",
    "syntax error": space.replace('name = "nm-over-2-4"', 'name = "nm-over-2-4'),
    "models empty": space.replace('models = ["convnext_tiny", "swin_tiny"]', "models = []"),
    "unknown model": space.replace('"swin_tiny"]', '"no_such_model"]'),
    "models numbers": space.replace('models = ["convnext_tiny", "swin_tiny"]',
                                    'models = [1, 2]'),
    "batch 0": space.replace("batches = [1]", "batches = [0]"),
    "batch a string": space.replace("batches = [1]", 'batches = ["one"]'),
    "batch huge": space.replace("batches = [1]", "batches = [99999999999]"),
    "batch 1.5": space.replace("batches = [1]", "batches = [1.5]"),
    "unknown fusion": space.replace('fusion = "unfused"', 'fusion = "fusedd"'),
    "unknown scope": space.replace('scope = "gemm"', 'scope = "some"'),
    "unknown key": space.replace('scope = "gemm"', 'scope = "gemm"\ncolour = "red"'),
    "unknown table": space + "\n[warp]\nx = 1\n",
    "unknown accuracy table": space.replace('table = "default"', 'table = "no_such_table"'),
    "unknown metric": space.replace('metric = "top1"', 'metric = "top99"'),
    "nm m 1": space.replace("m = [2, 4, 8, 16, 32]", "m = [1]"),
    "nm m 0": space.replace("m = [2, 4, 8, 16, 32]", "m = [0, 4]"),
    "nm m negative": space.replace("m = [2, 4, 8, 16, 32]", "m = [-4]"),
    "nm sparsity 1.5": space.replace('nm = { m = [2, 4, 8, 16, 32], sparsity = "table" }',
                                     "nm = { m = [4], sparsity = [1.5] }"),
    "block sizes 0": space.replace('block = { sizes = "table", sparsity = "table" }',
                                   'block = { sizes = [0], sparsity = "table" }'),
    "unstructured sparsity nan": space.replace('unstructured = { sparsity = "table" }',
                                               "unstructured = { sparsity = [nan] }"),
    "unknown format kind": space.replace("[formats]", "[formats]\nwavelet = { m = [2] }"),
    "no formats": space.replace("nm = { m", "# nm = { m").replace(
        "block = {", "# block = {").replace("unstructured = {", "# unstructured = {"),
    "unknown base": space.replace('base = ["a100"]', 'base = ["no_such_gpu"]'),
    "base empty": space.replace('base = ["a100"]', "base = []"),
    "unknown set field": space.replace('"sparse_tensor.nonzero_rate" = 1.0',
                                       '"warp_factor" = 9'),
    "set rate 0": space.replace('"sparse_tensor.nonzero_rate" = 1.0',
                                '"sparse_tensor.nonzero_rate" = 0'),
    "set candidates unknown": space.replace('= "candidates"', '= "everything"'),
    "name empty": space.replace('name = "nm-over-2-4"', 'name = ""'),
    "binary": "\x00\x01",
    "duplicate key": space.replace("batches = [1]", "batches = [1]\nbatches = [2]"),
}
for name, text in SPACE_TEXTS.items():
    case(f"space {name}", ["search", "--space", "sp.toml", "--out", "se"], "sp.toml",
         {"sp.toml": text})
for value in [".", "sp.json"]:
    case(f"search --space {value!r}", ["search", "--space", value, "--out", "se"],
         ("--space", value),
         {"sp.json": "{}"} if value == "sp.json" else {})

# Predictors: the shipped CPU set corrupted, given as --calibrated p.json.
FAMILY = "families.gemm"
PREDICTOR_CHANGES = {
    "format unknown": _set("format", "dse-kernel-predictors/99"),
    "format missing": _drop("format"),
    "launch floor nan": _set("launch_floor_s", math.nan),
    "launch floor inf": _set("launch_floor_s", math.inf),
    "launch floor a string": _set("launch_floor_s", "1e-6"),
    "launch floor 10 s": _set("launch_floor_s", 10.0),
    "units negative": _set("units", -2),
    "units 1.5": _set("units", 1.5),
    "tile 0": _set("tile", 0),
    "name empty": _set("name", ""),
    "families empty": _set("families", {}),
    "families a list": _set("families", []),
    "gemm floor nan": _set(f"{FAMILY}.floor_s", math.nan),
    "gemm floor a string": _set(f"{FAMILY}.floor_s", "x"),
    "gemm ceiling 0": _set(f"{FAMILY}.ceiling", 0),
    "gemm ceiling negative": _set(f"{FAMILY}.ceiling", -0.5),
    "gemm without residual": _drop(f"{FAMILY}.residual"),
    "gemm residual a number": _set(f"{FAMILY}.residual", 3),
    "vector floor negative": _set("families.vector.floor_s", -1e-6),
    "conv ceiling inf": _set("families.conv.ceiling", math.inf),
    "unknown family": lambda d: d["families"].update(teleport=d["families"]["gemm"]),
    "context a list": _set("context", [1]),
    "context shift nan": _set("context.shift_s", math.nan),
    "context floor negative": _set("context.unmeasured_floor_s", -1.0),
    "grouped conv ceiling 2": _set("context.grouped_conv_ceiling", 2.0),
    "a list": lambda d: [d],
}
for name, change in PREDICTOR_CHANGES.items():
    case(f"predictor {name}", [*EVALUATE, "--calibrated", "p.json"], "p.json",
         {"p.json": _json_file(PREDICTOR, change)})
for name in ("launch floor nan", "gemm ceiling 0", "families empty"):
    for command in ("simulate", "compare", "sweep", "report"):
        case(f"predictor {name} ({command})",
             [*DESIGN_COMMANDS[command], "--calibrated", "p.json"], "p.json",
             {"p.json": _json_file(PREDICTOR, PREDICTOR_CHANGES[name])})
for name, text in BAD_TEXT.items():
    case(f"predictor text: {name}", [*EVALUATE, "--calibrated", "p.json"], "p.json",
         {"p.json": text})


# Datasets: the shipped CPU dataset corrupted, given to calibrate --data.
def _frame_file(change: Callable) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        import pandas as pd

        frame = change(pd.read_parquet(DATASET))
        if path.suffix == ".csv":
            frame.to_csv(path, index=False)
        else:
            frame.to_parquet(path)
    return write


def _without(column: str) -> Callable:
    return lambda frame: frame.drop(columns=[column])


def _cell(column: str, value, cast=None) -> Callable:
    def change(frame):
        if cast is not None:
            frame[column] = frame[column].astype(cast)
        row = int((frame["error"] == "").to_numpy().nonzero()[0][0])
        frame.loc[row, column] = value
        return frame
    return change


DATASET_CHANGES = {
    "no rows": lambda f: f.iloc[:0],
    "k infinite": _cell("k", math.inf, cast=float),
    "n NaN": _cell("n", math.nan, cast=float),
    "groups 0": _cell("groups", 0),
    "batch 0": _cell("batch", 0),
    "median negative": _cell("median_s", -1e-3),
    "p90 below median": _cell("p90_s", 1e-12),
    "min NaN": _cell("min_s", math.nan),
    "bytes negative": _cell("bytes", -1.0),
    "sparsity negative": _cell("sparsity", -0.5),
    "unknown family": _cell("family", "teleport"),
    "unknown device": _cell("device", "tpu"),
    "repeats 0": _cell("repeats", 0),
    "threads negative": _cell("threads", -1),
}
for column in ("m", "k", "n", "median_s", "family", "device", "error", "sol_s", "kind",
               "format", "batch", "groups"):
    DATASET_CHANGES[f"without {column}"] = _without(column)
for name, change in DATASET_CHANGES.items():
    for suffix in (".parquet", ".csv") if name in ("k infinite", "without m", "no rows",
                                                   "median negative") else (".parquet",):
        file = f"d{suffix}"
        case(f"dataset {name} ({suffix})", [*CALIBRATE, "--data", file], (file, "d:"),
             {file: _frame_file(change)})
for name, text in {"empty csv": "", "header only": "m,k,n\n", "garbage csv": "\x00\x01,\n",
                   "not parquet": "PAR1 nope"}.items():
    file = "d.parquet" if "parquet" in name else "d.csv"
    case(f"dataset {name}", [*CALIBRATE, "--data", file], file, {file: text})
case("dataset m a string (.csv)", [*CALIBRATE, "--data", "d.csv"], "d.csv",
     {"d.csv": _frame_file(_cell("m", "sixty-four", cast=object))})
case("dataset in report --measured", [*REPORT, "--calibrated", "cpu-amd-epyc-2c",
                                      "--measured", "d.parquet"], "d.parquet",
     {"d.parquet": _frame_file(DATASET_CHANGES["median negative"])})


# Accuracy tables: the shipped table corrupted, loaded by accuracy-table and report.
def _table(change: Callable[[list[str]], list[str]]) -> str:
    return "\n".join(change(TABLE.read_text().splitlines())) + "\n"


def _column(name: str, value: str, row: int = 3) -> Callable[[list[str]], list[str]]:
    def change(lines):
        header = lines[0].split(",")
        cells = lines[row].split(",")
        cells[header.index(name)] = value
        lines[row] = ",".join(cells)
        return lines
    return change


def _drop_column(name: str) -> Callable[[list[str]], list[str]]:
    def change(lines):
        index = lines[0].split(",").index(name)
        return [",".join(c for i, c in enumerate(line.split(",")) if i != index)
                for line in lines]
    return change


TABLE_TEXTS = {
    "empty": "",
    "header only": TABLE.read_text().splitlines()[0] + "\n",
    "value inf": _table(_column("value", "inf")),
    "value negative": _table(_column("value", "-3")),
    "value text": _table(_column("value", "high")),
    "sparsity 1.5": _table(_column("sparsity", "1.5")),
    "sparsity nan": _table(_column("sparsity", "nan")),
    "unknown family": _table(_column("family", "wavelet")),
    "pattern garbage": _table(_column("pattern", "3:2")),
    "model empty": _table(_column("model", "")),
    "metric empty": _table(_column("metric", "")),
    "duplicate row": _table(lambda lines: [*lines, lines[3]]),
    "without value": _table(_drop_column("value")),
    "without model": _table(_drop_column("model")),
    "without pattern": _table(_drop_column("pattern")),
    "without metric": _table(_drop_column("metric")),
    "binary": "\x00\xff",
    "a row too short": _table(lambda lines: [*lines, "convnext_tiny,2:4"]),
}
for name, text in TABLE_TEXTS.items():
    case(f"accuracy table {name}", ["accuracy-table", "a.csv"], "a.csv", {"a.csv": text})
for name in ("value inf", "without value", "sparsity 1.5", "duplicate row"):
    case(f"accuracy table {name} (report)", [*REPORT, "--accuracy-table", "a.csv"], "a.csv",
         {"a.csv": TABLE_TEXTS[name]})
    case(f"accuracy table {name} (search)",
         ["search", "--space", "sp.toml", "--out", "se"], "a.csv",
         {"a.csv": TABLE_TEXTS[name],
          "sp.toml": space.replace('table = "default"', 'table = "a.csv"')})
