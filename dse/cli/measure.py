"""`dse measure`: real kernels for the shapes of a trace, and beyond them by adaptive sampling."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..output import check_output_path
from .options import Default, add_design_options, design_from_args, positive_int
from .progress import StatusLine

__all__ = ["add_parsers"]


def add_parsers(commands) -> None:
    mp = commands.add_parser(
        "measure", help="time real kernels for a trace's layer shapes (measurements, not bounds)",
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
               "--hw host.toml --format block4@87.5%% --format unstructured@90%% --batch 1 "
               "--batch 8 --budget 5m --out cpu.parquet")
    add_design_options(mp, single=("--model", "--hw"), formats=Default((), "dense only"),
                       fusion=False, numerics=False)
    mp.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="where the kernels run (default cpu)")
    mp.add_argument("--budget", default="10m", metavar="DURATION",
                    help="time for the whole run, e.g. 90s, 5m, 1h (default 10m); the trace's "
                         "own shapes first, then adaptive sampling")
    mp.add_argument("--out", type=Path, default=Path("measurements.parquet"), metavar="FILE",
                    help="dataset to write, .parquet or .csv, with FILE.json beside it "
                         "(default measurements.parquet)")
    mp.add_argument("--threads", type=positive_int, metavar="N",
                    help="torch and numba threads (default: every usable core; recorded)")
    mp.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS",
                    help="first wait up to this long for other processes to leave the cores "
                         "alone (default 0)")
    mp.add_argument("--rounds", type=positive_int, metavar="N",
                    help="time every configuration N times, once a round, minutes apart "
                         "(default 4 on the CPU, whose speed changes for seconds at a time on "
                         "a shared host, 1 on CUDA); calibration takes each kernel's fastest "
                         "round. Sampling stops when the first round has spent 1/N of "
                         "--budget")
    mp.add_argument("--warm", action="store_true",
                    help="also time every trace shape and vector op without the cache flush "
                         "(rows with cache = warm): inputs and weights stay in the caches "
                         "from the previous call, as activations do inside a model; sampled "
                         "configurations stay cold")
    mp.add_argument("--seed", type=int, default=0, help="weights and sampling seed (default 0)")
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
    from ..measure.measure import measure, parse_budget, write_dataset
    from ..output import write_table

    check_output_path(args.out, (".parquet", ".csv"))
    budget = parse_budget(args.budget)
    if args.wait_idle < 0:
        from ..measure.errors import MeasureError

        raise MeasureError(f"--wait-idle {args.wait_idle:g}: give 0 or more seconds")
    d = design_from_args(args)
    whole = True if (args.whole_models or args.whole_models_only) else None
    result = measure(d.trace, d.accelerator, d.formats, d.batches, device=args.device,
                     budget_s=budget, progress=StatusLine(
                         "measured", "whole models" if args.whole_models_only else "kernels"),
                     threads=args.threads, vector_ops=not args.no_vector_ops,
                     whole_models=whole, wait_idle_s=args.wait_idle, seed=args.seed,
                     kernels=not args.whole_models_only, rounds=args.rounds,
                     warm=args.warm)
    print(result.summary_text())
    out = write_dataset(result, args.out, args.command_line)
    print(f"wrote {len(result.frame)} rows to {out} and provenance to {out.with_suffix('.json')}")
    models = whole_model_rows(result.frame)
    if len(models):
        side = out.with_suffix(".models.csv")
        write_table(models, side)
        print(f"wrote {len(models)} whole-model rows to {side} (dse calibrate --validate "
              f"--whole-models DEVICE={side})")
    return 0
