"""`dse measure`: real kernels for the shapes of a trace, and beyond them by adaptive sampling."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..measure.errors import MeasureError
from .commands import help_of
from .first_run import evaluation_begins
from .options import (
    MAX_THREADS,
    MAX_WAIT_S,
    Default,
    add_design_options,
    check_outputs,
    design_from_args,
    duration,
    integer,
    number,
    path_value,
    seed,
)
from .progress import StatusLine

__all__ = ["add_parsers"]


def add_parsers(commands) -> None:
    mp = commands.add_parser(
        "measure", help=help_of("measure"),
        description="Time real kernels on this machine for every distinct prunable layer shape "
                    "of the trace, per format family the device has a kernel for (CPU: torch "
                    "dense GEMM and convolution, torch and scipy CSR, scipy and torch BSR, the "
                    "trace's vector ops, with --whole-models the whole timm model dense and with "
                    "its linears sparse; CUDA: cuBLAS, cuSPARSELt 2:4, Triton BSR, cuSPARSE "
                    "CSR, vector ops, whole models eager and as CUDA graphs), then spend the "
                    "rest of "
                    "--budget on new configurations chosen by adaptive sampling (nn-Meter's "
                    "method). Every row carries the kernel's speed of light on --hw and the "
                    "fraction of it reached. Weights are real masks of each format. Needs torch: "
                    "pip install 'sparsity-dse[export]'.",
        epilog="Example: dse hw probe --out host.toml && dse measure --model convnext_tiny "
               "--hw host.toml --format block4@87.5% --format unstructured@90% --batch 1 "
               "--batch 8 --budget 5m --out cpu.parquet")
    add_design_options(mp, single=("--model", "--hw"), formats=Default((), "dense only"),
                       fusion=False, numerics=False)
    mp.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="where the kernels run (default cpu)")
    mp.add_argument("--budget", default="10m", metavar="DURATION", type=duration(),
                    help="time for the whole run, e.g. 90s, 5m, 1h (default 10m); the trace's "
                         "own shapes first (always timed once: a budget they cannot fit is "
                         "refused before them, or as soon as their pace shows it), then "
                         "adaptive sampling")
    mp.add_argument("--out", type=path_value, default=Path("measurements.parquet"), metavar="FILE",
                    help="dataset to write, .parquet or .csv, with FILE.json beside it "
                         "(default measurements.parquet)")
    mp.add_argument("--threads", type=integer(1, MAX_THREADS), metavar="N",
                    help="torch and numba threads (default: every usable core; recorded)")
    mp.add_argument("--wait-idle", type=number(0.0, MAX_WAIT_S, unit=" s"), default=0.0,
                    metavar="SECONDS",
                    help="first wait up to this long for other processes to leave the cores "
                         "alone (default 0)")
    mp.add_argument("--rounds", type=integer(1, 100), metavar="N",
                    help="time every configuration N times, once a round, minutes apart "
                         "(default 4 on the CPU, whose speed changes for seconds at a time on "
                         "a shared host, 1 on CUDA); calibration takes each kernel's fastest "
                         "round. Sampling stops when the first round has spent 1/N of "
                         "--budget; a later round runs only while --budget has room for it "
                         "(the summary says how many ran)")
    mp.add_argument("--warm", action="store_true",
                    help="also time every trace shape and vector op without the cache flush "
                         "(rows with cache = warm): inputs and weights stay in the caches "
                         "from the previous call, as activations do inside a model; sampled "
                         "configurations stay cold")
    mp.add_argument("--seed", type=seed, default=0, help="weights and sampling seed (default 0)")
    mp.add_argument("--no-vector-ops", action="store_true",
                    help="time only the GEMM-like kernels, not the trace's norms, activations "
                         "and softmax")
    mp.add_argument("--whole-models", action="store_true",
                    help="also time the trace's whole timm model (eval mode, the trace's input "
                         "size, every --batch, warm caches): on the CPU eager in fp32, dense "
                         "and per block or unstructured --format with every linear it applies "
                         "to run as torch CSR/BSR (convolutions stay dense); on CUDA always on "
                         "(eager and as a CUDA graph, fp16, dense). Rows of family 'model'; "
                         "FILE.models.csv beside --out holds them as dse calibrate "
                         "--whole-models reads them")
    mp.add_argument("--whole-models-only", action="store_true",
                    help="time only the whole models (implies --whole-models): no kernel "
                         "shapes, no sampling")
    mp.set_defaults(run=_cmd_measure)


def _cmd_measure(args: argparse.Namespace) -> int:
    from ..measure.dataset import whole_model_rows
    from ..measure.measure import check_wait_idle, measure, parse_budget, write_dataset
    from ..output import FileSet, write_table

    check_outputs(files=[("--out", args.out, (".parquet", ".csv"))])
    _check_side_files(args.out)
    budget = parse_budget(args.budget)
    check_wait_idle(args.wait_idle, budget)
    d = design_from_args(args)
    asked_whole = args.whole_models or args.whole_models_only
    if asked_whole:
        _check_timm_model(d.trace, "--whole-models-only" if args.whole_models_only
                          else "--whole-models")
    whole = True if asked_whole else None
    _check_measure_inputs(d, args.device)
    evaluation_begins(args)  # every input checked: the first run's note, if any
    result = measure(d.trace, d.accelerator, d.formats, d.batches, device=args.device,
                     budget_s=budget, progress=StatusLine(
                         "measured", "whole models" if args.whole_models_only else "kernels"),
                     threads=args.threads, vector_ops=not args.no_vector_ops,
                     whole_models=whole, wait_idle_s=args.wait_idle, seed=args.seed,
                     kernels=not args.whole_models_only, rounds=args.rounds,
                     warm=args.warm)
    untimed = _untimed_whole_models(result.frame) if asked_whole else None
    if untimed is not None and args.whole_models_only:
        raise MeasureError(f"--whole-models-only: no whole model of {d.trace.model} could be "
                           f"timed ({untimed}); nothing was written")
    print(result.summary_text())
    models = whole_model_rows(result.frame)
    side = args.out.with_suffix(".models.csv")
    with FileSet():  # the dataset, its provenance and its whole models: all three, or none
        out = write_dataset(result, args.out, args.command_line)
        if len(models):
            write_table(models, side)
    print(f"wrote {len(result.frame)} rows to {out} and provenance to {out.with_suffix('.json')}")
    if len(models):
        print(f"wrote {len(models)} whole-model rows to {side} (dse calibrate --validate "
              f"--whole-models DEVICE={side})")
    if untimed is not None:
        # The kernels are measured and written; the whole models asked for are not there.
        print(f"dse: error: --whole-models: no whole model of {d.trace.model} could be timed "
              f"({untimed}); {out} holds the kernels only", file=sys.stderr)
        return 1
    return 0


def _check_side_files(out: Path) -> None:
    """The files written beside --out (its provenance, its whole models): a folder under one of
    their names would stop the set only after the measuring."""
    for side, what in ((out.with_suffix(".json"), "provenance goes"),
                       (out.with_suffix(".models.csv"), "whole-model rows go")):
        if side.is_dir():
            raise MeasureError(f"--out {out}: {side}, where its {what}, is a folder; remove "
                               "it or choose another --out")


def _check_measure_inputs(d, device: str) -> None:
    """What measure() refuses before it prices the trace (the device, the formats it has
    kernels for, the dtypes the spec must rate), checked here first: a refusal comes before
    the first run's note about compiling the kernels, never after it."""
    from ..measure.measure import check_inputs

    check_inputs(d.trace, d.accelerator, d.formats, d.batches, device)


def _check_timm_model(trace, option: str) -> None:
    """Whole models are timm's: a trace of another model (a hand-written or custom one) has
    none to time, which is said before any work rather than as an error row after it."""
    try:
        import timm
    except ImportError:
        raise MeasureError(f"{option} builds the trace's timm model: pip install "
                           "'sparsity-dse[export]'") from None
    if not timm.is_model(trace.model):
        raise MeasureError(f"{option}: {trace.model} is no timm model, so there is no whole "
                           "model to time; give the trace of a timm model (dse workloads "
                           "export) or drop the option")


def _untimed_whole_models(frame) -> str | None:
    """None when a whole model was timed; else why not (the first error row's reason)."""
    models = frame[frame["family"] == "model"]
    if len(models) and (models["error"] == "").any():
        return None
    errors = [e for e in models["error"] if e]
    return errors[0] if errors else "no whole-model row"
