"""`dse calibrate`: train kernel predictors on measured datasets and validate them on held-out
weight shapes (expectations, not bounds)."""

from __future__ import annotations

import argparse
import datetime
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..calibrate.predictor import CalibrationError, save_predictors
from ..calibrate.validate import (
    METHODS,
    calibrate,
    choose_methods,
    device_rows,
    noise_floor,
    speedup_summary,
    validated_predictions,
    validation_table,
    whole_model_table,
)
from ..measure.dataset import concat, load_dataset, shipped_datasets
from .options import check_outputs
from .progress import StatusLine

__all__ = ["add_parsers"]


def add_parsers(commands) -> None:
    cal = commands.add_parser(
        "calibrate", help="train and validate kernel predictors on measured datasets",
        description="Train one predictor per kernel family (dense GEMM, convolution, grouped "
                    "convolution, N:M, BSR per block size, CSR, vector ops) on datasets "
                    "written by dse measure: a physical model (floor + speed of light / "
                    "ceiling) times a residual learned by gradient-boosted trees. --validate "
                    "prints held-out errors, leaving whole weight shapes out. Training needs "
                    "scikit-learn (the accuracy extra); using a predictor does not.",
        epilog=f"Shipped datasets: {', '.join(shipped_datasets())}.")
    cal.add_argument("--data", action="append", metavar="DATASET",
                     help="shipped dataset name or .parquet/.csv file; repeatable (one device "
                          "for --out); default: every shipped dataset")
    cal.add_argument("--out", type=Path, metavar="MODEL.json",
                     help="write the trained predictors (JSON, numpy-loadable) to this file")
    cal.add_argument("--name", help="name of the predictor set (default: the dataset's name)")
    cal.add_argument("--validate", action="store_true",
                     help="print the held-out error table per family and device, the "
                          "speedup errors and the noise floor")
    cal.add_argument("--whole-models", action="append", default=[], metavar="DEVICE=CSV",
                     help="also compare calibrated whole-model latency with measured whole "
                          "models (model,variant,batch,median_s; dense_cudagraph and "
                          "sparse24_cudagraph variants) for predictor set DEVICE")
    cal.add_argument("--seed", type=int, default=0, help="seed of folds and trees (default 0)")
    cal.set_defaults(run=_cmd_calibrate)


def _whole_models(values: list[str]) -> dict[str, Path]:
    out = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not Path(path).is_file():
            raise CalibrationError(f"--whole-models {value}: give DEVICE=CSV with an existing "
                                   "CSV, e.g. h100-sxm=benchmarks/gpu/results/"
                                   "models_measurements.csv")
        out[name] = Path(path)
    return out


def _pct(value: float) -> str:
    return "-" if not np.isfinite(value) else f"{value:.0%}"


def _print_validation(table: pd.DataFrame, speedups: pd.DataFrame, noise: dict) -> None:
    shown = table.copy()
    others = [f"rmspe_{m}" for m in METHODS]
    for column in ["rmspe", "within_5", "within_10", "within_25", "rmspe_physical",
                   "rmspe_bound", *others]:
        shown[column] = shown[column].map(_pct)
    shown = shown.rename(columns={"n": "configs", "within_5": "+-5%", "within_10": "+-10%",
                                  "within_25": "+-25%", "rmspe_physical": "physical",
                                  "rmspe_bound": "bound",
                                  **{f"rmspe_{m}": m for m in METHODS}})
    print(shown.to_string(index=False))
    print("method: target/kernels (fraction: physical model x learned residual, carries over "
          "to other hardware; time: learned directly; impl: implementation as a feature, the "
          "fastest predicted; best: fastest measured implementation only); last columns: "
          "RMSPE of every method, the physical model alone and the bare bound")
    if not speedups.empty:
        s = speedups.copy()
        for column in ("rmspe", "within_10", "within_25", "sign", "measured_faster"):
            s[column] = s[column].map(_pct)
        s = s.rename(columns={"n": "pairs", "within_10": "+-10%", "within_25": "+-25%",
                              "sign": "same side of 1x", "measured_faster": "measured >1x"})
        print("predicted speedup over dense on the same held-out shape:")
        print(s.to_string(index=False))
    print(f"noise floor: {noise['pairs']} repeated kernel measurements, "
          f"{_pct(noise['share_over_10'])} differ by more than 10% "
          f"(median difference {_pct(noise['median_diff'])})")


def _cmd_calibrate(args: argparse.Namespace) -> int:
    if args.out is None and not args.validate:
        raise CalibrationError("dse calibrate: give --out MODEL.json to train, --validate to "
                               "print held-out errors, or both")
    check_outputs(files=[("--out", args.out)])
    whole = _whole_models(args.whole_models)
    names = args.data or shipped_datasets()
    if args.out is not None:
        frame = concat([load_dataset(n) for n in names])
        name = args.name or Path(names[0]).stem
        sets = [(name, frame, ", ".join(map(str, names)))]
    else:
        sets = [(Path(n).stem, load_dataset(n), n) for n in names]
    print("held-out validation: whole weight shapes (m x k x groups) left out; errors of the "
          "expected kernel time (an expectation, not a bound)")
    for name, frame, source in sets:
        data = device_rows(frame, name, source)
        predictions = validated_predictions(
            data, seed=args.seed, progress=StatusLine(f"{name}: validated", "folds"))
        chosen = choose_methods(predictions)
        if args.validate:
            print(f"\n{name} (reference {data.reference_hw}, {data.units} "
                  f"{'SMs' if data.device == 'cuda' else 'cores'}; "
                  f"{data.provenance['configurations']} configurations "
                  f"({data.provenance['training_rows']} implementation rows) from "
                  f"{data.provenance['dataset_rows']} rows, "
                  f"{data.provenance['dropped_busy_rows']} busy-machine rows dropped)")
            _print_validation(validation_table(predictions, chosen, name),
                              speedup_summary(predictions, chosen, name), noise_floor(frame))
        predictors = calibrate(data, predictions, seed=args.seed)
        if name in whole:
            table, context = whole_model_table(pd.read_csv(whole[name]), predictors,
                                               predictors.reference_hw)
            _print_whole_models(name, table, context)
            predictors = replace(predictors, context=context)
        if args.out is not None:
            made = {"command": getattr(args, "command_line", "dse calibrate"),
                    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
            predictors = replace(predictors, provenance={**predictors.provenance, **made})
            save_predictors(predictors, args.out)
            print(f"wrote {len(predictors.families)} predictors "
                  f"({', '.join(sorted(predictors.families))}) to {args.out}")
    return 0


def _side(x: pd.Series) -> np.ndarray:
    """-1 slower, 0 within 1% of dense, +1 faster."""
    return np.where(np.abs(x - 1) < 0.01, 0, np.sign(x - 1))


def _print_whole_models(name: str, table: pd.DataFrame, context: dict) -> None:
    def ms(v):
        return f"{v * 1e3:.3f}"

    def pct(v):
        return f"{v:+.0%}"

    shown = pd.DataFrame({
        "model": table["model"], "batch": table["batch"],
        "measured ms": table["measured_s"].map(ms), "expected ms": table["expected_s"].map(ms),
        "error": table["error"].map(pct),
        "kernels only": table["kernels_only_error"].map(pct),
        "bound": table["bound_error"].map(pct),
        "2:4 speedup measured": table["measured_speedup"].map(lambda v: f"{v:.2f}x"),
        "expected": table["expected_speedup"].map(lambda v: f"{v:.2f}x"),
        "2:4 error": table["sparse_error"].map(pct),
    })
    print(f"\n{name}: whole models, expected (calibrated, unfused, every op) against measured "
          "CUDA-graph latency; whole-model constants fitted leaving the model out")
    print(shown.to_string(index=False))
    per_model = table.groupby("model")["error"].apply(lambda e: e.abs().median())
    same = np.mean(_side(table["measured_speedup"]) == _side(table["expected_speedup"]))
    print(f"median |error|: {table['error'].abs().median():.0%} over models and batches, "
          f"{per_model.median():.0%} for the median model; 2:4 speedup on the same side of "
          f"1x: {same:.0%}")
    if context:
        print(f"shipped whole-model constants (all models): kernel shift "
              f"{context['shift_s'] * 1e6:.2f} us, floor of families without data "
              f"{context['unmeasured_floor_s'] * 1e6:.2f} us, their ceiling "
              f"{context['unmeasured_ceiling']:.2f} (grouped convs "
              f"{context['grouped_conv_ceiling']:.3f}) of the bound")
