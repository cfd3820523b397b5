"""`dse calibrate --estimator spmv-cnn`: train and validate the blockwise SpMV estimator on
per-block timings written by `dse bench spmv-blocks`."""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from .names import SPMV_CNN_EPOCHS as EPOCHS
from .options import check_outputs, integer
from .progress import StatusLine

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["add_arguments", "run"]

#: Where ``dse.spmv.blocks`` keeps the shipped block datasets (its ``DATASETS_DIR``).
_BLOCK_DATASETS_DIR = Path(__file__).resolve().parents[1] / "measure" / "datasets" / "spmv"


def _shipped_block_datasets() -> list[str]:
    """``dse.spmv.blocks.shipped_block_datasets()`` without importing that module
    (scipy and numba), which building ``dse --help`` must not."""
    return sorted(p.stem for p in _BLOCK_DATASETS_DIR.glob("*.parquet"))


def add_arguments(parser) -> None:
    parser.add_argument("--estimator", choices=("kernels", "spmv-cnn"), default="kernels",
                        help="kernels: the per-family kernel predictors (default); spmv-cnn: "
                             "the blockwise SpMV estimator, a 1D CNN over blocks of 250 "
                             "nonzeros, on datasets of dse bench spmv-blocks (shipped: "
                             f"{', '.join(_shipped_block_datasets()) or 'none'}); needs torch")
    # Defaults applied in run(): an option given to the other estimator is refused, not
    # ignored, and only a value left as None tells that it was not given.
    parser.add_argument("--epochs", type=integer(1, 10_000), default=None, metavar="E",
                        help=f"spmv-cnn training epochs (default {EPOCHS})")
    parser.add_argument("--folds", type=integer(2, 100), default=None, metavar="F",
                        help=f"spmv-cnn --validate folds, whole matrices left out (default "
                             f"{FOLDS})")


#: Folds of the SpMV estimator's --validate unless --folds says otherwise.
FOLDS = 5


def refuse_spmv_options(args: argparse.Namespace) -> None:
    """The kernel predictors take no epochs and no folds: --epochs or --folds given to them
    would be ignored, so they are refused."""
    from ..calibrate.predictor import CalibrationError

    for option, value in (("--epochs", args.epochs), ("--folds", args.folds)):
        if value is not None:
            raise CalibrationError(f"{option} {value}: only --estimator spmv-cnn trains in "
                                   "epochs and folds; the kernel predictors take neither "
                                   f"(drop {option}, or add --estimator spmv-cnn)")


def _row(label: str, summary: dict) -> dict:
    return {"": label, "n": summary["n"], "median |err|": f"{summary['median']:.1%}",
            "mean": f"{summary['mean']:.1%}", "p90": f"{summary['p90']:.1%}",
            "within 5%": f"{summary['within_5']:.0%}",
            "within 10%": f"{summary['within_10']:.0%}",
            "within 25%": f"{summary['within_25']:.0%}"}


def run(args: argparse.Namespace) -> int:
    from ..calibrate.predictor import CalibrationError
    from ..calibrate.spmv_cnn import BLOCKS_PER_MATRIX, block_inputs, spmv_cnn_json, train_spmv_cnn
    from ..output import write_atomic
    from ..spmv.blocks import load_block_dataset, shipped_block_datasets

    if args.whole_models:
        raise CalibrationError("--whole-models compares kernel predictors; it does not go with "
                               "--estimator spmv-cnn")
    if getattr(args, "hold_out_models", False):  # once ignored: a 4-hour validation ran
        raise CalibrationError("--hold-out-models validates the kernel predictors on whole "
                               "models; it does not go with --estimator spmv-cnn (drop it)")
    if getattr(args, "residual", None) is not None:
        raise CalibrationError(f"--residual {args.residual}: the residual is the kernel "
                               "predictors'; --estimator spmv-cnn learns no residual (drop it)")
    if getattr(args, "select_by", None) is not None:
        raise CalibrationError(f"--select-by {args.select_by}: it chooses the kernel "
                               "predictors' methods; --estimator spmv-cnn has none (drop it)")
    if args.folds is not None and not args.validate:
        raise CalibrationError(f"--folds {args.folds}: folds are for --validate; add "
                               "--validate or drop --folds")
    args.epochs = EPOCHS if args.epochs is None else args.epochs
    args.folds = FOLDS if args.folds is None else args.folds
    for name, value in (("--epochs", args.epochs), ("--folds", args.folds)):
        if value < (2 if name == "--folds" else 1):
            raise CalibrationError(f"{name} {value}: give at least "
                                   f"{2 if name == '--folds' else 1}")
    check_outputs(files=[("--out", args.out, (".json",))])
    if not args.validate and args.out is None:
        raise CalibrationError("--estimator spmv-cnn: give --validate, --out MODEL.json or both")
    names = args.data or shipped_block_datasets()
    if len(names) != 1:
        raise CalibrationError(f"--data {' '.join(names)}: the SpMV estimator learns one "
                               "machine; give one block dataset")
    source = names[0]
    data = load_block_dataset(source)
    matrices = data.matrices
    meter = StatusLine("read", "matrices")
    inputs = block_inputs(matrices, data.blocks, BLOCKS_PER_MATRIX, seed=args.seed,
                          progress=meter)
    name = args.name or Path(str(source)).stem
    validated: dict = {}
    if args.validate:
        validated = _validate(args, name, matrices, data.blocks, inputs)
    if args.out is not None:
        meter = StatusLine("trained", "epochs")
        provenance = {
            "command": getattr(args, "command_line", "dse calibrate --estimator spmv-cnn"),
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "dataset": str(source), "matrices": int(len(matrices)),
            "training_blocks": int(len(inputs.target)), "epochs": args.epochs,
            "seed": args.seed, "energy": _energy_note()}
        estimator = train_spmv_cnn(inputs, epochs=args.epochs, seed=args.seed,
                                   provenance=provenance, validated=validated, progress=meter)
        text = spmv_cnn_json(estimator)
        write_atomic(args.out, lambda handle: handle.write(text.encode()))
        print(f"wrote the SpMV estimator ({sum(v.size for v in estimator.weights.values()):,} "
              f"weights, trained on {len(inputs.target):,} blocks of {len(matrices)} matrices) "
              f"to {args.out}")
    return 0


def _validate(args, name: str, matrices: pd.DataFrame, blocks: pd.DataFrame, inputs) -> dict:
    import pandas as pd

    from ..calibrate.predictor import CalibrationError, load_predictors, reference_hardware
    from ..calibrate.spmv_cnn import (
        BLOCKS_PER_MATRIX,
        SEED_RANGE,
        cross_validate,
        csr_predictor_times,
        error_summary,
    )
    from ..spmv.blocks import drift_factor

    meter = StatusLine("validated", "steps")
    per_block, per_matrix = cross_validate(matrices, inputs, folds=args.folds,
                                           epochs=args.epochs, seed=args.seed, progress=meter)
    per_matrix = per_matrix.merge(matrices[["matrix", "source", "spmv_s", "spmv_spread"]],
                                  on="matrix")
    block_err = per_block["predicted_s"] / per_block["measured_s"] - 1
    rows = [_row("per block (in context)", error_summary(block_err)),
            _row("per matrix, all", error_summary(per_matrix["rel_err"]))]
    for label, source in (("  BeBOP synthetic", "bebop"), ("  pruned weights", "pruned")):
        part = per_matrix[per_matrix["source"] == source]
        if len(part):
            rows.append(_row(label, error_summary(part["rel_err"])))
    rows.append(_row("per matrix, vs instrumented", error_summary(
        per_matrix["rel_err_instrumented"])))
    rows.append(_row("per matrix, raw (no drift)", error_summary(per_matrix["rel_err_raw"])))
    csr_note = ""
    try:
        predictors = load_predictors(name)
        hardware = reference_hardware(predictors, [name])
        ordered = matrices.set_index("matrix").loc[per_matrix["matrix"]].reset_index()
        csr = csr_predictor_times(ordered, predictors, hardware)
        measured = ordered["spmv_s"].to_numpy() * drift_factor(ordered)  # drift-corrected
        csr_err = csr / measured - 1
        rows.append(_row(f"CSR kernel predictor ({name})", error_summary(csr_err)))
        csr_note = (f"\nThe CSR kernel predictor of dse calibrate ({name}) learned scipy's and "
                    "torch's CSR SpMM on trace shapes, not this numba SpMV: its error includes "
                    "the kernels' difference.")
    except CalibrationError as exc:
        csr_note = f"\nno CSR kernel predictor to compare with: {exc}"
    sources = matrices.groupby("source").size().to_dict()
    print(f"\n{name}: SpMV estimator (1D CNN over blocks of 250 nonzeros), held out by matrix "
          f"({args.folds} folds; a pruned layer's masks held out together); {len(matrices)} "
          f"matrices ({sources.get('bebop', 0)} BeBOP, {sources.get('pruned', 0)} pruned "
          f"weights), {len(blocks):,} measured blocks; trained on up to {BLOCKS_PER_MATRIX} "
          f"blocks a matrix, {args.epochs} epochs")
    print(pd.DataFrame(rows).to_string(index=False))
    abs_err = per_matrix["rel_err"].abs()
    print(f"per-matrix |error| here: {abs_err.min():.1%} to {abs_err.max():.1%}, median "
          f"{abs_err.median():.1%}; the design this estimator follows reported "
          f"{SEED_RANGE[0]:.1%} to {SEED_RANGE[1]:.0%} per matrix")
    spread = matrices["spmv_spread"]
    drift = ""
    if "reference_s" in matrices:
        reference = matrices["reference_s"]
        drift = (f"; the machine's speed (a reference product timed around every matrix) "
                 f"varied {reference.quantile(0.9) / reference.quantile(0.1):.2f}x (p90 / p10) "
                 "over the run, and per-matrix errors are against times corrected for it "
                 "(raw: the row above)")
    print(f"noise floor: the plain kernel's repeats differ by (max - min) / median > 10% on "
          f"{(spread > 0.10).mean():.0%} of matrices (median spread {spread.median():.1%})"
          + drift + csr_note)
    print(f"energy head: {_energy_note()}")
    summary = error_summary(per_matrix["rel_err"])
    return {"per_matrix": summary, "per_block": error_summary(block_err),
            "per_matrix_instrumented": error_summary(per_matrix["rel_err_instrumented"]),
            "folds": args.folds, "held_out": "whole matrices; a pruned layer's masks together"}


def _energy_note() -> str:
    """Whether energy could be measured here; the estimator has no energy head otherwise."""
    from ..measure.rapl import POWERCAP, available

    if available():
        return ("RAPL counters exist here but the block benchmark does not read them per "
                "block; no energy head trained")
    return (f"left out: no RAPL counters on this machine ({POWERCAP} absent or unreadable) "
            "and no GPU, so no measured energy to learn from")
