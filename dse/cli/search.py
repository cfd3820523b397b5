"""`dse search` and `dse search worker`: the command line of the search package."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .commands import help_of
from .first_run import evaluation_begins
from .names import (
    DEFAULT_INT4_GROUP,
    DEFAULT_MAX_ACC_DROP,
    DTYPES,
    LLM_METRICS,
    OBJECTIVES,
    PHASES,
    WEIGHT_DTYPES,
)
from .options import (
    CALIBRATED_FIX,
    HARDWARE_LIST,
    MAX_WEIGHT_GROUP,
    InputError,
    Parser,
    add_evaluator_options,
    assumptions_line,
    batch_size,
    check_outputs,
    identifier,
    integer,
    nonempty_text,
    number,
    path_value,
    positive_int,
    refuse_unused_sim_options,
    seed,
    sim_config_from_args,
)
from .progress import StatusLine

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

__all__ = ["add_parsers"]

_EPILOG = """\
Targets: <r>x_over_<format> holds when a design's speedup over dense is at least r times the
baseline format's on the same model, hardware and batch, and its accuracy is at most
--max-acc-drop points below the baseline's. Spaces: see search/spaces/default.toml (the
built-in one: N:M up to M=32, block and unstructured formats at the accuracy table's levels,
on an A100 whose sparse tensor core runs every candidate N:M pattern; ConvNeXt-Tiny and
Swin-Tiny, batch 1). Writes OUT/results.parquet (every design), OUT/ranked.parquet (those that
meet the target, ranked per model and batch; .csv with --results csv) and OUT/summary.json.

Language models (--model llama-3-8b --phase decode --context 2048; built-in space
search/spaces/llm.toml): accuracy comes from published figures
(dse/accuracy/tables/accuracy_llm.csv), as the perplexity increase over the same paper's dense
model, where lower is better; the target allows --max-ppl-increase over the baseline's
increase. A format without a published figure is kept, evaluated and reported as "no
accuracy"; it never meets a target. A model without figures is refused with a target.
"""


def add_parsers(commands) -> None:
    sp = commands.add_parser(
        "search", help=help_of("search"),
        description="Search a space of formats and hardware against the accuracy table: "
                    "exhaustively through the vectorized evaluator, or with Optuna (TPE; "
                    "NSGA-II for Pareto fronts). The study lives in SQLite in the output "
                    "folder, or in PostgreSQL (--storage) to share it between processes and "
                    "machines; an interrupted search continues with --resume.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp.add_argument("--space", type=path_value, metavar="FILE.toml",
                    help="search space (default: the built-in one, search/spaces/default.toml)")
    sp.add_argument("--target", metavar="RxOVER",
                    type=nonempty_text("a target such as 1.3x_over_2:4"),
                    help="e.g. 1.3x_over_2:4: at least 1.3 times 2:4's speedup at no more than "
                         "--max-acc-drop points below its accuracy")
    drop = sp.add_mutually_exclusive_group()
    drop.add_argument("--max-acc-drop", type=number(0.0, 100.0, unit=" points"),
                      metavar="POINTS",
                      help=f"accuracy (percentage points) a design may lose against the target's "
                           f"baseline (default {DEFAULT_MAX_ACC_DROP:g}); for language models, "
                           "in their metric's unit (as --max-ppl-increase for perplexity)")
    drop.add_argument("--max-ppl-increase", type=number(0.0, 1e6, unit=" perplexity"),
                      metavar="PPL",
                      help="language models, perplexity metric: how much more a design's "
                           "perplexity may rise over dense than the baseline's does "
                           f"(default {DEFAULT_MAX_ACC_DROP:g})")
    lm = sp.add_argument_group("models and numerics (override the space's; language models: "
                               "the built-in space search/spaces/llm.toml)")
    lm.add_argument("--model", dest="models", action="append", metavar="NAME|PATH",
                    type=nonempty_text("a shipped trace or language model (dse workloads list)"),
                    help="model to search (repeatable): a shipped trace, or a language model, "
                         "shipped or a config.json, with --phase and --context")
    lm.add_argument("--phase", choices=PHASES,
                    help="language models: prefill or decode (default: the space's; the "
                         "built-in one's is decode)")
    lm.add_argument("--context", type=positive_int, metavar="TOKENS",
                    help="language models: prompt tokens (prefill) or context length (decode) "
                         "(default: the space's; the built-in one's is 2048)")
    lm.add_argument("--batch", dest="batches", action="append", type=batch_size, metavar="B",
                    help="batch size (repeatable), instead of the space's batches")
    lm.add_argument("--hw", dest="hardware", action="append", metavar="NAME|PATH",
                    type=HARDWARE_LIST,
                    help="hardware base (repeatable or comma-separated), instead of the "
                         "space's hardware.base; the space's [hardware.set] still applies")
    lm.add_argument("--weight-dtype", choices=WEIGHT_DTYPES,
                    help="weight-only quantisation of the linear layers (as dse evaluate); the "
                         "accuracy is then looked up for that storage (int4-g128, fp8, ...)")
    lm.add_argument("--weight-group-size", type=integer(1, MAX_WEIGHT_GROUP), metavar="G",
                    help=f"int4 quantisation group along K (default {DEFAULT_INT4_GROUP})")
    lm.add_argument("--accuracy-metric", choices=tuple(LLM_METRICS),
                    help="language models: the published metric the target compares, as its "
                         "degradation from dense (default wikitext2_ppl, the perplexity "
                         "increase; zeroshot_mean and openllm_v1_mean: points lost)")
    lm.add_argument("--kv-dtype", choices=DTYPES,
                    help="dtype of a language model's KV cache (default: the compute dtype)")
    for option in _UNSEARCHED:  # refused in one line by _cmd_search, not by argparse's guess
        lm.add_argument(option, dest="unsearched_" + option[2:].replace("-", "_"),
                        metavar="VALUE", help=argparse.SUPPRESS)
    sp.add_argument("--objective", choices=OBJECTIVES,
                    help="rank designs (that meet the target) by speedup (default), accuracy, "
                         "the Pareto front of speedup against accuracy, the least energy per "
                         "inference (energy) or the least energy x delay (edp)")
    sp.add_argument("--minimize", metavar="FIELD",
                    type=nonempty_text("a varied hardware field or an energy or memory column"),
                    help="rank by the least value of a varied hardware field instead, e.g. "
                         "dram_bandwidth_bytes_per_s: the cheapest hardware that meets the "
                         "target; or of an energy or memory column, e.g. avg_power_w, "
                         "energy_per_inference_j, peak_memory_bytes")
    sp.add_argument("--engine", choices=("auto", "exhaustive", "optuna"),
                    help="auto (default): exhaustive for finite spaces of up to 5 million "
                         "design points, Optuna otherwise")
    sp.add_argument("--trials", type=integer(1, 10_000_000), metavar="N",
                    help="Optuna trial budget, exact across workers (default 200); on --resume "
                         "a larger N extends the study")
    sp.add_argument("--seed", type=seed, help="Optuna sampler seed (default 0; worker i uses "
                                             "seed + i)")
    # An empty URL is refused by search.storage.open_storage, which names where it may come from.
    sp.add_argument("--storage", metavar="URL",
                    help="study database: sqlite:///PATH or postgresql://USER:PASS@HOST/DB "
                         "(default: sqlite in the output folder)")
    sp.add_argument("--study", metavar="NAME", type=identifier("a study name", 200),
                    help="study name (default: the space's name and the UTC time)")
    sp.add_argument("--out", type=path_value, metavar="DIR",
                    help="output folder (default dse-search/STUDY)")
    sp.add_argument("--workers", type=integer(1, 256), default=1, metavar="N",
                    help="local worker processes (default 1: this process); more join from "
                         "other machines with `dse search worker`")
    sp.add_argument("--resume", action="store_true",
                    help="continue the interrupted study --study NAME with its stored "
                         "settings: redo the work of gone workers, wait for live ones")
    sp.add_argument("--results", dest="results_format", choices=("parquet", "csv"),
                    default="parquet",
                    help="file type of results and ranked tables (default parquet)")
    sp.add_argument("--top", type=integer(1, 1_000_000), default=10, metavar="K",
                    help="rows of each ranked table to print (default 10)")
    sp.add_argument("--report", type=path_value, metavar="DIR",
                    help="also write a report folder: the Pareto front and the target results")
    add_evaluator_options(sp, workers=False)
    sp.add_argument("--calibrated", type=nonempty_text(CALIBRATED_FIX), metavar="DEVICE",
                    help="rank by the expected speedup (kernels as they exist, one op at a time) "
                         "from the kernel predictors of DEVICE (shipped: h100-sxm, "
                         "cpu-amd-epyc-2c; or a file written by dse calibrate --out) instead of "
                         "the bound's: the target and the objective use expected_speedup, and "
                         "where the bound ranks another design first both are printed. Adds "
                         "expected_latency_s, expected_speedup and fraction_of_sol to the "
                         "results. Hardware points other than DEVICE keep its fraction of the "
                         "speed of light. Both engines; not with --evaluator simulate")
    sp.add_argument("--chunk-points", type=integer(1, 100_000_000), metavar="N",
                    help=argparse.SUPPRESS)  # work-unit size, for tests and benchmarks
    sp.add_argument("--lease-seconds", type=_lease_seconds, metavar="S",
                    help=argparse.SUPPRESS)  # how long a gone worker holds work; for tests
    sp.set_defaults(run=_cmd_search, evaluates=True)

    sub = sp.add_subparsers(dest="search_command", parser_class=Parser,
                            metavar="[worker]")
    wk = sub.add_parser(
        "worker", help="join a shared study and work until it is done",
        description="Join a study from any machine that reaches its storage, and claim its "
                    "chunks (exhaustive) or trials (Optuna) until every one is stored: it "
                    "waits for those other workers hold and redoes those of gone workers. The "
                    "storage URL may come from the DSE_SEARCH_STORAGE environment variable "
                    "(keeps the password out of the process list).")
    wk.add_argument("--storage", metavar="URL", default=os.environ.get("DSE_SEARCH_STORAGE"),
                    help="the study's database URL (default $DSE_SEARCH_STORAGE)")
    wk.add_argument("--study", required=True, metavar="NAME", type=identifier("a study name", 200))
    wk.add_argument("--worker-index", type=integer(0, 1_000_000), default=0, metavar="I",
                    help="this worker's number; Optuna seeds with seed + I (default 0)")
    wk.add_argument("--quiet", action="store_true", help="print nothing but errors")
    wk.add_argument("--lease-seconds", type=_lease_seconds, metavar="S",
                    help=argparse.SUPPRESS)  # as dse search's
    wk.set_defaults(run=_cmd_worker)


#: The longest a lease may be asked to last (a hidden option, for tests): a day.
_MAX_LEASE_S = 86400.0


def _lease_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= _MAX_LEASE_S:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive number of seconds, at "
                                         f"most {_MAX_LEASE_S:g}")
    return value


def _cmd_worker(args: argparse.Namespace) -> int:
    from search.storage import LEASE_S, StorageError
    from search.study import resume_command, run_worker

    if not args.storage:
        raise StorageError("dse search worker: give --storage URL (or set DSE_SEARCH_STORAGE)")
    _check_worker_study(args.storage, args.study)
    evaluation_begins(args)  # the study is there: the first run's note, if any
    meter = None if args.quiet else StatusLine(f"worker {args.worker_index} on {args.study}")
    outcome = run_worker(args.storage, args.study, args.worker_index,
                         progress=meter or (lambda done, total, unit: None),
                         notify=(lambda line: None) if args.quiet
                         else (lambda line: print(line, file=sys.stderr)),
                         lease_s=args.lease_seconds or LEASE_S)
    if not args.quiet:
        print(f"worker {args.worker_index}: {outcome.ran} {outcome.unit} done here; every "
              f"{outcome.unit[:-1]} of the study is stored. Results: "
              f"{resume_command(args.study, None, args.storage)}", file=sys.stderr)
    return 0


def _check_worker_study(url: str, study: str) -> None:
    """Refuse, in one line and before any work, a worker whose study is not in ``url``; a
    SQLite file that is not there is not created (opening it would leave an empty one)."""
    from sqlalchemy.engine import make_url

    from search.storage import StorageError, open_storage, redact

    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001 - open_storage says what is wrong with it
        parsed = None
    if parsed is not None and parsed.get_backend_name() == "sqlite" \
            and parsed.database not in (None, "", ":memory:"):
        database = Path(parsed.database)
        if database.parent.is_dir() and not database.exists():
            raise StorageError(f"--storage {redact(url)}: no study database at {database}; "
                               "give the --storage the study was created with")
    storage = open_storage(url)
    try:
        storage.settings(study)  # "no study NAME in URL" where it is not there
    finally:
        storage.dispose()


#: Numerics options of dse evaluate that a search does not vary: every design of a search is
#: priced at fp16 (vector ops fp16, CSR fp32, 4-byte indices). Refused in one line rather than
#: argparse's "invalid choice" of the worker subcommand.
_UNSEARCHED = {"--dtype": "fp16", "--vector-dtype": "fp16", "--csr-dtype": "fp32",
               "--index-bytes": "4"}


def _refuse_unsearched(args: argparse.Namespace) -> None:
    for option, priced in _UNSEARCHED.items():
        value = getattr(args, "unsearched_" + option[2:].replace("-", "_"), None)
        if value is not None and value.strip() != priced:  # the value searched is honoured
            raise InputError(f"{option} {value}: dse search prices every design at fp16 "
                             "(vector ops fp16, CSR fp32, 4-byte indices) and does not take "
                             f"{option}; leave it out, or price that dtype with dse evaluate, "
                             "compare or sweep")


def _cmd_search(args: argparse.Namespace) -> int:
    from search.storage import LEASE_S
    from search.study import SearchRequest, run_search

    _refuse_unsearched(args)
    refuse_unused_sim_options(args)
    check_outputs(folders=[("--report", args.report), ("--out", args.out)],
                  inputs=[("--space", args.space, "file")])
    overrides = _overrides(args)
    _check_drop_unit(args)
    drop = args.max_acc_drop if args.max_ppl_increase is None else args.max_ppl_increase
    request = SearchRequest(
        space=args.space, target=args.target, max_acc_drop=drop, overrides=overrides,
        objective=args.objective, minimize=args.minimize, engine=args.engine,
        trials=args.trials, seed=args.seed, storage=args.storage, study=args.study,
        out=args.out, workers=args.workers, resume=args.resume,
        results_format=args.results_format, top=args.top, chunk_points=args.chunk_points,
        evaluator=args.evaluator,
        simulation=sim_config_from_args(args) if args.evaluator == "simulate" else None,
        lease_s=args.lease_seconds or LEASE_S, calibrated=args.calibrated)
    outcome = run_search(request, notify=_notify_after_checks(args),
                         progress=StatusLine("search"))
    print(report(outcome, args.top))
    if args.report is not None:
        from .report import write_search_report

        index = write_search_report(args.report, outcome.results, f"dse search {outcome.study}",
                                    args.command_line, outcome.problem.target)
        print(f"wrote {index}")
    return 0


def _notify_after_checks(args: argparse.Namespace):
    """The search's ``notify``: prints each line on stderr. Its first line (the study created
    or resumed) comes once the search has checked every input, before any design is
    evaluated: the first run's note about compiling the kernels goes just before it."""
    def notify(line: str) -> None:
        evaluation_begins(args)
        print(line, file=sys.stderr)
    return notify


def _overrides(args: argparse.Namespace) -> dict:
    """The models and numerics options given, as the space overrides a study stores."""
    if args.weight_group_size is not None and args.weight_dtype is None:
        raise InputError(f"--weight-group-size {args.weight_group_size}: a group size is for "
                         "quantised weights; give --weight-dtype "
                         f"({', '.join(WEIGHT_DTYPES)}) too")
    if (args.phase is None) != (args.context is None) and args.models:
        _space_step(args)
    _refuse_trace_weights(args)
    hardware = None
    if args.hardware:
        hardware = [h.strip() for v in args.hardware for h in v.split(",") if h.strip()]
        if not hardware:
            raise InputError(f"--hw {','.join(args.hardware)!r}: no hardware name; give a "
                             "catalog name (see `dse hw list`) or a spec .toml")
    return {"models": args.models, "phase": args.phase, "context": args.context,
            "batches": args.batches, "hardware": hardware, "weight_dtype": args.weight_dtype,
            "weight_group_size": args.weight_group_size, "kv_dtype": args.kv_dtype,
            "metric": args.accuracy_metric}


def _refuse_trace_weights(args: argparse.Namespace) -> None:
    """--weight-dtype on traces (timm models): their accuracy table has fp16 weights only, so
    the search once ranked int4 designs by an accuracy measured unquantised, labelled
    "measured". Language models' table has a row per weight storage and takes it."""
    if args.weight_dtype is None or not args.models:
        return
    from workloads.registry import is_language_model

    traces = [m for m in args.models if not is_language_model(m)]
    if traces:
        raise InputError(f"--weight-dtype {args.weight_dtype}: {traces[0]} is a trace, and its "
                         "accuracy table has no row for quantised weights (the search would "
                         f"rank {args.weight_dtype} designs by accuracy measured unquantised); "
                         "leave it out, or price the weights with dse evaluate, compare or sweep")


def _space_step(args: argparse.Namespace) -> None:
    """With one of --phase and --context, the space searched must give the other (the
    built-in language-model space: decode at context 2048); else one line asks for it."""
    from search.space import DEFAULT_SPACE, LLM_SPACE, SpaceError, load_space
    from workloads.registry import is_language_model

    language = any(is_language_model(m) for m in args.models)
    if not language:
        return  # loading the model says that --phase and --context are for language models
    missing = "--context TOKENS" if args.context is None else "--phase prefill|decode"
    try:
        space, _ = load_space(args.space or (LLM_SPACE if language else DEFAULT_SPACE))
    except SpaceError:
        space = None  # the search reports a bad space itself
    if space is None or getattr(space, "context" if args.context is None else "phase") is None:
        raise InputError(f"a language model's step needs --phase and --context; give {missing}")


def _check_drop_unit(args: argparse.Namespace) -> None:
    """Refuse, in one line and before any work: --max-ppl-increase for a metric that is not a
    perplexity, and --report for language models (its charts draw accuracy where higher is
    better; theirs is a perplexity increase)."""
    if args.accuracy_metric is not None and not args.models and args.space is None:
        raise InputError(f"--accuracy-metric {args.accuracy_metric}: the metrics are those of "
                         "language models; give --model NAME --phase --context")
    if args.max_ppl_increase is None and args.report is None:
        return
    from search.space import DEFAULT_SPACE, LLM_SPACE, load_space
    from workloads.registry import is_language_model

    language = any(is_language_model(m) for m in args.models or ())
    space, _ = load_space(args.space or (LLM_SPACE if language else DEFAULT_SPACE))
    language = language or (not args.models and any(is_language_model(m)
                                                    for m in space.models))
    if language and args.report is not None:
        raise InputError(f"--report {args.report}: the search report draws accuracy where "
                         "higher is better, and a language model's is a perplexity increase; "
                         "not drawn yet (the results are in --out); leave out --report")
    if args.max_ppl_increase is None:
        return
    metric = args.accuracy_metric or space.metric or ("wikitext2_ppl" if language else "top1")
    if metric != "wikitext2_ppl":
        raise InputError(f"--max-ppl-increase {args.max_ppl_increase:g}: the search's accuracy "
                         f"metric is {metric}, not a perplexity; give --max-acc-drop POINTS")


# --- the printed report -----------------------------------------------------------------------

def _fmt(value: float, spec: str) -> str:
    import pandas as pd

    return "" if pd.isna(value) else format(value, spec)


def report(outcome, top: int) -> str:
    """Ranked tables per model and batch, and why the other candidates missed."""
    import pandas as pd

    problem = outcome.problem
    results, ranked = outcome.results, outcome.ranked
    target = problem.target
    space = problem.space
    lines = [f"study {outcome.study} ({outcome.engine}; {outcome.storage})",
             f"space: {space.where} ({space.fusion}, scope {space.scope}); objective: "
             f"{problem.objective.text}"
             + (f"; target {target.text}, {_allowed(problem)}" if target is not None else ""),
             _hardware_line(space, problem.numerics)]
    if getattr(problem, "language", False):
        lines.append(_llm_accuracy_line(problem))
    if "fits" in results:
        unfit = ~results["fits"].to_numpy(dtype=bool, na_value=True) & candidate_rows(results)
        if unfit.any():
            lines.append(f"{int(unfit.sum()):,} candidate designs do not fit in DRAM (peak "
                         "memory above dram_capacity_bytes): verdict `does not fit`, never "
                         "ranked")
    if problem.simulation is not None:
        c = problem.simulation
        buffer = (f"{c.buffer_bytes:g} bytes" if c.buffer_bytes is not None
                  else f"{c.buffer} of the spec")
        lines.append(f"latencies and speedups from the event-level simulator (buffer {buffer}, "
                     f"depth {c.depth}, overlap {c.overlap}); the roofline's are in the "
                     "results as roofline_latency_s and roofline_speedup")
    if problem.predictors is not None:
        lines.extend(_calibration_lines(results, problem))
        lines.extend(outcome.extrapolated.values())  # language models: GEMMs never timed
    # Masks over the full results (possibly millions of rows): numpy on categorical codes.
    models = [t.model for t in problem.traces]
    model_code = pd.Categorical(results["model"], categories=models).codes
    batch = results["batch"].to_numpy()
    candidate = (results["role"] == "candidate").to_numpy()
    formats = pd.Categorical(results["format"])
    verdicts = pd.Categorical(results["verdict"])
    for m, model in enumerate(models):
        for b in space.batches:
            here = (model_code == m) & (batch == b)
            if not here.any():
                continue
            lines.append("")
            lines.append(f"{model}, batch {b}: {int((here & candidate).sum()):,} candidate "
                         "designs")
            if problem.predictors is not None:
                lines.extend(_dense_first(results, here, problem))
            if target is not None:
                lines.extend(_baseline_line(results, here, formats, target, problem.speed,
                                            _accuracy_text(problem)))
            group = ranked[(ranked["model"] == model) & (ranked["batch"] == b)]
            lines.extend(_ranked_lines(group, problem, top))
            if problem.predictors is not None:
                lines.extend(_two_answers(results, here, problem))
            if target is not None:
                met = results["meets_target"].to_numpy(dtype=bool)
                lines.extend(_misses(here & candidate & ~met, formats, verdicts,
                                     met=here & candidate & met))
            else:
                lines.extend(_misses(here & candidate & (verdicts == "does not fit"), formats,
                                     verdicts))
    lines.append("")
    lines.append("wrote " + ", ".join(str(p) for p in outcome.files)
                 + f" ({len(results):,} rows) in {outcome.seconds:.2f} s")
    return "\n".join(lines)


def _hardware_line(space, numerics) -> str:
    """The hardware the search priced, its dtypes, every override it applied and every
    knob (its fusion and batches are on lines of their own)."""
    return assumptions_line(space.hardware, numerics, fixed=space.fixed,
                            varied=[k.path for k in space.knobs])


def _dense_first(results, here, problem) -> list[str]:
    """A calibrated search says first when no sparse candidate is expected to beat dense:
    a target over a slower baseline can still be met, and that reads as a win it is not."""
    import numpy as np

    speed = problem.speed
    sparse = here & candidate_rows(results) & (results["format"] != "dense").to_numpy()
    if not sparse.any() or speed not in results:
        return []
    speeds = results[speed].to_numpy(dtype=float)
    rows = np.flatnonzero(sparse)
    top = rows[np.nanargmax(speeds[rows])]
    if speeds[top] >= 1.0:
        return _accurate_dense_first(results, sparse, speeds, top)
    return [f"  no sparse format is expected to beat dense here: the fastest, "
            f"{results['format'].iloc[top]}, runs at {speeds[top]:.3f}x of dense by the "
            "expectation (the bound's speedups are beside it)"]


def _accurate_dense_first(results, sparse, speeds, fastest) -> list[str]:
    """With a target: where only formats past the accuracy limit beat dense, the designs that
    meet the target are all slower than dense, and the line says so first."""
    import numpy as np

    if "meets_accuracy" not in results:
        return []
    accurate = sparse & results["meets_accuracy"].to_numpy(dtype=bool)
    if not accurate.any():
        return []
    rows = np.flatnonzero(accurate)
    top = rows[np.nanargmax(speeds[rows])]
    if speeds[top] >= 1.0:
        return []
    return [f"  no sparse format within the accuracy limit is expected to beat dense here: the "
            f"fastest, {results['format'].iloc[top]}, runs at {speeds[top]:.3f}x of dense by "
            f"the expectation; only formats that lose more accuracy are faster (the fastest, "
            f"{results['format'].iloc[fastest]}, at {speeds[fastest]:.3f}x)"]


def candidate_rows(results: pd.DataFrame) -> np.ndarray:
    return (results["role"] == "candidate").to_numpy()


def _allowed(problem) -> str:
    """The target's accuracy allowance, in the metric's words."""
    drop = problem.target.max_acc_drop
    if getattr(problem, "lower_is_better", False):
        what = ("perplexity increase over dense" if problem.metric == "wikitext2_ppl"
                else f"{problem.metric} points lost against dense")
        return f"{what} at most {drop:g} above the baseline's"
    return f"accuracy drop <= {drop:g} points"


def _llm_accuracy_line(problem) -> str:
    metric = ("WikiText-2 perplexity increase over the same source's dense model"
              if problem.metric == "wikitext2_ppl"
              else f"{problem.metric} points lost against the same source's dense model")
    return (f"accuracy: published figures from {problem.table.where} for {problem.weights} "
            f"weights, as the {metric} (lower is better); formats without a published figure "
            "are kept and reported as 'no accuracy', never guessed")


def _accuracy_text(problem):
    """How an accuracy value reads in the report: ``(value, status) -> text``."""
    import pandas as pd

    if not getattr(problem, "lower_is_better", False):
        return lambda value, status: f"accuracy {_fmt(value, '.2f')} ({status})"
    perplexity = problem.metric == "wikitext2_ppl"

    def text(value, status):
        if pd.isna(value):
            return "no accuracy (no published figure)"
        if perplexity:
            return f"perplexity {value:+.2f} over dense ({status})"
        return f"{problem.metric} {value:.2f} points below dense ({status})"
    return text


def _baseline_line(results, here, formats, target, speed: str = "speedup",
                   accuracy_text=None) -> list[str]:
    import numpy as np

    rows = np.flatnonzero(here & (formats == target.baseline.name))
    if len(rows) == 0:
        return []
    b = results.iloc[rows[0]]
    said = (f"speedup {b['speedup']:.3f}x over dense" if speed == "speedup" else
            f"expected speedup {b[speed]:.3f}x over dense (bound {b['speedup']:.3f}x)")
    accuracy_text = accuracy_text or (
        lambda value, status: f"accuracy {_fmt(value, '.2f')} ({status})")
    source = (f"; {b['accuracy_source']}" if "accuracy_source" in b and b["accuracy_source"]
              else "")
    return [f"  baseline {target.baseline.name}: {said}, "
            f"{accuracy_text(b['accuracy'], b['accuracy_status'])}{source}"
            + (f" at hardware point {b['hw_point']} (it varies with the hardware)"
               if len(rows) > 1
               else "")]


def _ranked_lines(group: pd.DataFrame, problem, top: int) -> list[str]:
    import numpy as np
    import pandas as pd

    target = problem.target
    if group.empty:
        return ["  no design meets the target" if target is not None else "  no design ranked"]
    shown_rows = group.head(top)
    shown = pd.DataFrame({
        "rank": shown_rows["rank"].astype(int),
        "format": shown_rows["format"].astype(str),
        **({"hardware": shown_rows["hardware"].astype(str)}
           if len(problem.space.hardware) > 1 else {}),
        **{k[3:]: shown_rows[k] for k in problem.knob_columns},
        "speedup": shown_rows["speedup"].map(lambda v: f"{v:.3f}"),
    })
    if problem.speed != "speedup":  # calibrated: the expectation ranks, the bound beside it
        shown.insert(shown.columns.get_loc("speedup"), "exp. speedup",
                     shown_rows["expected_speedup"].map(lambda v: f"{v:.3f}"))
        shown = shown.rename(columns={"speedup": "bound speedup"})
        shown["frac of SOL"] = shown_rows["fraction_of_sol"].map(lambda v: _fmt(v, ".3f"))
    if target is not None:
        shown[f"x {target.baseline.name}"] = shown_rows["speedup_over_baseline"].map(
            lambda v: f"{v:.3f}")
    if getattr(problem, "lower_is_better", False):  # a language model: degradation from dense
        label = "ppl incr." if problem.metric == "wikitext2_ppl" else "pts lost"
        shown[label] = shown_rows["accuracy"].map(
            lambda v: "no accuracy" if pd.isna(v) else f"{v:+.2f}")
        if target is not None:
            shown["vs base"] = shown_rows["accuracy_drop"].map(lambda v: _fmt(v, "+.2f"))
        if "tokens_per_s" in shown_rows and shown_rows["tokens_per_s"].notna().any():
            shown["tokens/s"] = shown_rows["tokens_per_s"].map(lambda v: _fmt(v, ",.1f"))
        if "ttft_s" in shown_rows and shown_rows["ttft_s"].notna().any():
            shown["TTFT (ms)"] = shown_rows["ttft_s"].map(lambda v: _fmt(v * 1e3, ".4g"))
        shown["acc. from"] = [s or "no published figure"
                              for s in shown_rows["accuracy_source"].astype(str)]
    else:
        shown["accuracy"] = shown_rows["accuracy"].map(lambda v: _fmt(v, ".2f"))
        if target is not None:
            shown["drop"] = shown_rows["accuracy_drop"].map(lambda v: _fmt(v, "+.2f"))
        shown["acc. from"] = shown_rows["accuracy_status"].astype(str)
    column = problem.objective.column
    if problem.objective.needs_energy:
        shown["energy/inf (mJ)"] = shown_rows["energy_per_inference_j"].map(
            lambda v: _fmt(v * 1e3, ".4g"))
        if column not in ("energy_per_inference_j", "capped_latency_s"):
            shown[column] = shown_rows[column].map(lambda v: _fmt(v, ".4g"))
        if shown_rows["power_capped"].any():
            shown["power cap"] = np.where(shown_rows["power_capped"], "active", "-")
    if column == "peak_memory_bytes" or (
            "fits" in shown_rows and shown_rows["fits"].notna().any()):
        shown["peak mem (GiB)"] = shown_rows["peak_memory_bytes"].map(
            lambda v: _fmt(v / 2**30, ".3g"))
    shown["bound mix"] = [f"{m}/{n} ops mem-bound" for m, n in
                          zip(shown_rows["memory_bound_ops"], shown_rows["ops"], strict=True)]
    if (shown_rows["hw_fallback"].astype(str) != "").any():
        shown["hw fallback"] = shown_rows["hw_fallback"].astype(str)
    speed = "speedup" if problem.speed == "speedup" else "expected speedup"
    title = (f"on the Pareto front of {speed} and accuracy"
             + (" among those that meet the target" if target is not None else "")
             if problem.objective.kind == "pareto"
             else ("meets" if len(group) == 1 else "meet") + " the target"
             if target is not None else "ranked")
    head = f"  {len(group):,} {title}" + (f"; top {top}:" if len(group) > top else ":")
    return [head] + ["  " + line for line in shown.to_string(index=False).splitlines()]


def _calibration_lines(results: pd.DataFrame, problem) -> list[str]:
    """What the expectation is, the predictors that priced the designs' ops with their
    held-out errors, and every op family priced without its own data."""
    from .tables import predictors_used

    predictors = problem.predictors
    return [f"ranked by the expected speedup: kernels as measured on {predictors.name} "
            f"(reference {predictors.reference_hw}), one op at a time (unfused) whatever the "
            "space's fusion; an expectation, not a bound (the bound's speedup is `speedup`, "
            "its answer bound_rank)", *predictors_used(results, predictors)]


def _two_answers(results: pd.DataFrame, here: np.ndarray, problem) -> list[str]:
    """The best design by the expectation beside the best by the bound (one model and batch),
    each with both speedups, when the two differ."""
    import numpy as np
    import pandas as pd

    def best(column: str) -> int | None:
        ranks = results[column].to_numpy(dtype=np.float64, na_value=np.nan)
        rows = np.flatnonzero(here & (ranks == 1))
        return int(rows[0]) if len(rows) else None

    expected, bound = best("rank"), best("bound_rank")
    what = ("meets the target" if problem.target is not None else "is ranked")
    if expected == bound:
        if bound is None:
            return [f"  by the bound too, no design {what}"]
        return ["  the bound ranks the same design first"]
    picks = [(label, row) for label, row in (("by expected", expected), ("by bound", bound))
             if row is not None]
    rows = results.iloc[[row for _, row in picks]]
    shown = pd.DataFrame({
        "best": [label for label, _ in picks],
        "format": rows["format"].astype(str).to_numpy(),
        **({"hardware": rows["hardware"].astype(str).to_numpy()}
           if len(problem.space.hardware) > 1 else {}),
        **{k[3:]: rows[k].to_numpy() for k in problem.knob_columns},
        "exp. speedup": [f"{v:.3f}" for v in rows["expected_speedup"]],
        "bound speedup": [f"{v:.3f}" for v in rows["speedup"]],
        "frac of SOL": [_fmt(v, ".3f") for v in rows["fraction_of_sol"]],
        "accuracy": [_fmt(v, ".2f") for v in rows["accuracy"]],
    })
    head = "  the bound ranks another design first; both answers:"
    if expected is None:
        head = f"  by the expectation no design {what}; by the bound:"
    elif bound is None:
        head = f"  by the bound no design {what}; by the expectation:"
    return [head] + ["    " + line for line in shown.to_string(index=False).splitlines()]


def _misses(missed: np.ndarray, formats: pd.Categorical, verdicts: pd.Categorical,
            met: np.ndarray | None = None) -> list[str]:
    """The designs that miss the target, grouped by why. A format that meets it at another
    hardware point (``met``) is named apart, so that no format reads as both meeting and
    missing it."""
    import pandas as pd

    if not missed.any():
        return []
    parts = []
    fmt_codes, verdict_codes = formats.codes, verdicts.codes
    met_codes = set() if met is None else set(fmt_codes[met].tolist())
    for verdict in ("too slow", "too inaccurate", "too slow and too inaccurate",
                    "does not fit", "no accuracy"):
        if verdict not in verdicts.categories:
            continue
        rows = missed & (verdict_codes == verdicts.categories.get_loc(verdict))
        if not rows.any():
            continue
        codes = pd.unique(fmt_codes[rows])
        names = [str(formats.categories[c]) for c in codes if c not in met_codes]
        shown = ", ".join(names[:8]) + (f", ... ({len(names) - 8} more)" if len(names) > 8
                                        else "")
        elsewhere = [str(formats.categories[c]) for c in codes if c in met_codes]
        if elsewhere:
            shown += (("; and " if names else "") + ", ".join(elsewhere[:8])
                      + (f", ... ({len(elsewhere) - 8} more)" if len(elsewhere) > 8 else "")
                      + " at the hardware points where they miss it (they meet it at another)")
        label = {"does not fit": "does not fit in DRAM, never ranked",
                 "no accuracy": "no accuracy (no published figure), never ranked"}.get(
            verdict, verdict)
        parts.append(f"    {label} ({int(rows.sum()):,}): {shown}")
    return [f"  {int(missed.sum()):,} not ranked:" if all("does not fit" in p for p in parts)
            else f"  {int(missed.sum()):,} miss it:"] + parts
