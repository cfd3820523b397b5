"""`dse calibrate`: train kernel predictors on measured datasets and validate them on held-out
weight shapes (expectations, not bounds)."""

from __future__ import annotations

import argparse
import datetime
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from . import spmv_estimator
from .commands import help_of
from .names import RESIDUALS, shipped_datasets
from .options import check_outputs, identifier, nonempty_text, path_value, seed
from .progress import StatusLine

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

__all__ = ["add_parsers"]

#: dse.calibrate.validate.CRITERIA, kept here so that parsing the command imports no pandas.
CRITERIA = ("rmspe", "log", "within_10")


def add_parsers(commands) -> None:
    cal = commands.add_parser(
        "calibrate", help=help_of("calibrate"),
        description="Train one predictor per kernel family (dense GEMM, convolution, grouped "
                    "convolution, N:M, BSR per block size, CSR, vector ops) on datasets "
                    "written by dse measure: a physical model (floor + speed of light / "
                    "ceiling) times a residual learned by gradient-boosted trees. --validate "
                    "prints held-out errors, leaving whole weight shapes out. Training needs "
                    "scikit-learn (the accuracy extra); using a predictor does not.",
        epilog=f"Shipped datasets: {', '.join(shipped_datasets())}.")
    cal.add_argument("--data", action="append", metavar="DATASET",
                     type=nonempty_text("a shipped dataset or a .parquet/.csv file of dse measure"),
                     help="shipped dataset name or .parquet/.csv file; repeatable (one device "
                          "for --out); default: every shipped dataset")
    cal.add_argument("--out", type=path_value, metavar="MODEL.json",
                     help="write the trained predictors (JSON, numpy-loadable) to this file")
    cal.add_argument("--name", type=identifier("a predictor set name"),
                     help="name of the predictor set (default: the dataset's name)")
    cal.add_argument("--validate", action="store_true",
                     help="print the held-out error table per family and device, the "
                          "speedup errors and the noise floor")
    cal.add_argument("--whole-models", action="append", default=[], metavar="DEVICE=FILE",
                     type=nonempty_text("DEVICE=FILE, e.g. h100-sxm=models.csv"),
                     help="also compare calibrated whole-model latency with measured whole "
                          "models for predictor set DEVICE: a CSV of model,variant,batch,"
                          "median_s (dense_cudagraph or dense_eager, and sparse24_cudagraph "
                          "or a format's variant), a dataset or FILE.models.csv written by dse "
                          "measure --whole-models, or a folder of them (its *.models.csv "
                          "where there are any); repeatable (one device's files are joined)")
    cal.add_argument("--hold-out-models", action="store_true",
                     help="with --whole-models: also validate each whole model held out, the "
                          "way a user meets a new model: predictors retrained without any "
                          "shape of that model (methods chosen inside the training rows), "
                          "whole-model constants fitted on the other models; prints in-sample "
                          "and held-out errors side by side (minutes: one training per model)")
    cal.add_argument("--seed", type=seed, default=0, help="seed of folds and trees (default 0)")
    cal.add_argument("--residual", choices=RESIDUALS, default=None,  # None: trees, and not given
                     help="the learned residual on the physical model: trees (gradient "
                          "boosting, the default: it validates better held out) or monotone "
                          "(histogram gradient boosting constrained where physics gives a "
                          "direction: a fuller last wave or less tile padding never slows a "
                          "kernel)")
    cal.add_argument("--select-by", choices=CRITERIA, default=None,  # None: CRITERION
                     help="how each family's method is chosen on held-out rows: within_10 "
                          "(the share within +-10%%, the default), rmspe or log (root mean "
                          "squared relative or log error); the figures --validate prints "
                          "choose it per fold without that fold (nested). Where repeat "
                          "measurements differ by more than 10%% in most kernels (the noise "
                          "floor --validate prints), the share within 10%% is chosen by noise: "
                          "use rmspe (the shipped CPU predictor does)")
    spmv_estimator.add_arguments(cal)
    cal.set_defaults(run=_cmd_calibrate)


def _whole_models(values: list[str]) -> dict[str, list[Path]]:
    from ..calibrate.predictor import CalibrationError

    out: dict[str, list[Path]] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not path or not Path(path).exists():
            raise CalibrationError(f"--whole-models {value}: give DEVICE=FILE with an existing "
                                   "CSV, dataset or folder, e.g. h100-sxm=benchmarks/gpu/"
                                   "results/models_measurements.csv")
        files = [Path(path)] if Path(path).is_file() else _folder_files(Path(path))
        if not files:
            raise CalibrationError(f"--whole-models {value}: no .csv or .parquet file in "
                                   f"{path}")
        out.setdefault(name, []).extend(files)
    return out


def _folder_files(folder: Path) -> list[Path]:
    """A folder's whole-model tables: its ``*.models.csv`` (what dse measure writes beside a
    dataset) where there are any, else every .csv and .parquet file in it."""
    tables = sorted(folder.glob("*.models.csv"))
    return tables or sorted(p for p in folder.iterdir() if p.suffix in (".csv", ".parquet"))


def _read_whole_models(paths: list[Path]) -> pd.DataFrame:
    """The measured whole models of the files: ``model,variant,batch,median_s`` tables as
    they are, ``dse measure`` datasets (a ``family`` column) through
    :func:`dse.measure.dataset.whole_model_rows`."""
    import pandas as pd

    from ..calibrate.predictor import CalibrationError
    from ..measure.dataset import load_dataset, whole_model_rows

    frames = []
    for path in paths:
        try:
            frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
        except Exception as exc:  # pandas and pyarrow raise many kinds
            raise CalibrationError(f"--whole-models {path}: cannot read it "
                                   f"({type(exc).__name__})") from None
        if "family" in frame.columns and "variant" not in frame.columns:
            frame = whole_model_rows(load_dataset(path))
        missing = [c for c in ("model", "variant", "batch", "median_s")
                   if c not in frame.columns]
        if missing:
            raise CalibrationError(f"--whole-models {path}: no column {missing[0]!r}; give "
                                   "model,variant,batch,median_s rows or a dse measure dataset")
        _check_whole_model_values(frame, path)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def _check_whole_model_values(frame: pd.DataFrame, path: Path) -> None:
    """Each row a model and variant by name, a whole batch >= 1 and a positive finite median
    time (empty: not measured); refused in one line naming the file, the row and the column."""
    import numpy as np
    import pandas as pd

    from ..calibrate.predictor import CalibrationError

    batch = pd.to_numeric(frame["batch"], errors="coerce").to_numpy(dtype=float)
    median = pd.to_numeric(frame["median_s"], errors="coerce").to_numpy(dtype=float)
    given = frame["median_s"].notna().to_numpy()
    with np.errstate(invalid="ignore"):
        checks = [
            ("model", frame["model"].isna().to_numpy()
             | (frame["model"].astype(str).str.strip() == "").to_numpy(), "a model name"),
            ("variant", frame["variant"].isna().to_numpy(), "a variant name"),
            ("batch", ~(np.isfinite(batch) & (batch >= 1) & (batch % 1 == 0)),
             "a whole batch size >= 1"),
            ("median_s", given & ~(np.isfinite(median) & (median > 0)),
             "a positive finite time in seconds (empty: not measured)"),
        ]
    for column, bad, wanted in checks:
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            value = frame[column].iloc[row]
            value = value.item() if isinstance(value, np.generic) else value
            raise CalibrationError(f"--whole-models {path}: row {row} has {column} = "
                                   f"{value!r}; give {wanted}")


def _check_whole_model_table(frame: pd.DataFrame, paths: list[Path]) -> None:
    """What the comparison needs of one device's joined tables, checked before any training
    (it was found only after it, or not at all: a table of no dense run compared nothing and
    exited 0): a measured row, a dense run (the variant every comparison is against) and
    models that are traces."""
    import workloads

    from ..calibrate.predictor import CalibrationError
    from ..calibrate.validate import whole_model_variants

    label = ", ".join(map(str, paths))
    measured = frame[frame["median_s"].notna()]
    if "error" in measured.columns:
        measured = measured[measured["error"].isna() | (measured["error"].astype(str) == "")]
    if measured.empty:
        raise CalibrationError(f"--whole-models {label}: no row holds a measured median_s; "
                               "give model,variant,batch,median_s rows with their times")
    dense, _sparse, _format = whole_model_variants(measured)
    variants = sorted(set(measured["variant"].astype(str)))
    if dense not in variants:
        raise CalibrationError(f"--whole-models {label}: no measured row of variant "
                               "dense_cudagraph or dense_eager, the dense run every comparison "
                               f"is against (variants given: {', '.join(variants[:6])})")
    for row, model in measured["model"].astype(str).drop_duplicates().items():
        try:
            workloads.load_trace(model)
        except (workloads.TraceError, ValueError, OSError):
            raise CalibrationError(f"--whole-models {label}: row {row} has model = {model!r}, "
                                   "which is no shipped trace (dse workloads list) nor a trace "
                                   "file") from None


def _check_whole_model_device(name: str, measured: pd.DataFrame, device: str) -> None:
    """Refuse, before the training, a whole-model table whose sparse format torch runs no whole
    model in on ``device`` (a dense-only CPU table defaults to 2:4, a GPU format): it once
    failed after minutes of training, naming an option calibrate does not have."""
    import formats

    from ..calibrate.predictor import CalibrationError
    from ..calibrate.validate import TORCH_RUNS, whole_model_variants

    _dense, _sparse, fmt = whole_model_variants(measured)
    runs = TORCH_RUNS.get(device, ())
    if formats.parse(fmt).family not in runs or (device == "cuda" and fmt != "2:4"):
        ran = "2:4" if device == "cuda" else "block or unstructured formats"
        raise CalibrationError(f"--whole-models {name}=...: its sparse format is {fmt} (2:4 "
                               f"where no row names one), and torch runs whole {device} models "
                               f"only in {ran}; give rows of such a variant beside the dense "
                               "one, as dse measure --whole-models writes them")


def _pct(value: float) -> str:
    import numpy as np

    return "-" if not np.isfinite(value) else f"{value:.0%}"


def _print_validation(table: pd.DataFrame, speedups: pd.DataFrame, noise: dict) -> None:
    from ..calibrate.validate import METHODS

    shown = table.copy()
    others = [f"rmspe_{m}" for m in METHODS]
    for column in ["rmspe", "within_5", "within_10", "within_25", "rmspe_physical",
                   "rmspe_bound", "in_sample_10", *others]:
        if column in shown:
            shown[column] = shown[column].map(_pct)
    if "in_sample_10" in shown:  # beside the held-out share, so that memorising shows
        order = list(shown.columns)
        order.remove("in_sample_10")
        order.insert(order.index("within_10") + 1, "in_sample_10")
        shown = shown[order]
    shown = shown.rename(columns={"n": "configs", "within_5": "+-5%", "within_10": "+-10%",
                                  "folds": "same in folds",
                                  "in_sample_10": "+-10% in-sample",
                                  "within_25": "+-25%", "rmspe_physical": "physical",
                                  "rmspe_bound": "bound",
                                  **{f"rmspe_{m}": m for m in METHODS}})
    print(shown.to_string(index=False))
    print("method: target/kernels (fraction: physical model x learned residual, carries over "
          "to other hardware; time: learned directly; impl: implementation as a feature, the "
          "fastest predicted; best: fastest measured implementation only), the one chosen on "
          "every fold and shipped; held-out figures: each fold predicted by the method chosen "
          "on the other folds (nested), the same in the folds counted; last columns: RMSPE of "
          "every method, the physical model alone and the bare bound")
    if not speedups.empty:
        s = speedups.copy()
        for column in ("rmspe", "within_10", "within_25", "sign", "measured_faster"):
            s[column] = s[column].map(_pct)
        s = s.rename(columns={"n": "pairs", "within_10": "+-10%", "within_25": "+-25%",
                              "sign": "same side of 1x", "measured_faster": "measured >1x"})
        print("predicted speedup over dense on the same held-out shape:")
        print(s.to_string(index=False))
    lines = {
        "runs": "kernels measured in two or more runs; each run's fastest round (what "
                "calibration learns from): the slowest and the fastest run differ by",
        "halves": "kernels timed in 4 or more rounds; the fastest even and fastest odd round "
                  "of a run differ by",
        "repeats": "repeated kernel measurements; the slowest and the fastest differ by",
        "rounds": "kernels timed in 2 or more rounds; round 0 and round 1 differ by",
    }

    def line(basis: str, figures: dict) -> str:
        return (f"{figures['pairs']} {lines[basis]} more than 10% in "
                f"{_pct(figures['share_over_10'])} (median difference "
                f"{_pct(figures['median_diff'])})")

    print(f"noise floor: {line(noise['basis'], noise)}")
    for basis in ("halves", "rounds"):
        if basis in noise:
            print(f"  {line(basis, noise[basis])}")


def with_warm_capacity(predictors, sources: list[str]):
    """``predictors`` with the last-level cache of the spec their warm timings were taken on
    (:func:`dse.calibrate.predictor.warm_capacity`), and a note line where none is known: then
    every op of a model is priced warm, however large, and the user should know."""
    from ..calibrate.predictor import CalibrationError, reference_hardware, warm_capacity

    try:  # the caches the device's warm timings were taken in
        hardware = reference_hardware(predictors, sources)
    except CalibrationError as exc:
        why = f"its spec cannot be loaded ({str(exc).splitlines()[0]})"
    else:
        capacity = warm_capacity(hardware)
        if capacity > 0:
            return replace(predictors, warm_capacity_bytes=capacity), None
        why = f"the spec {hardware.name!r} gives no cache levels and no l2_bytes"
    return predictors, (f"note: {predictors.name}: no last-level cache is known for the "
                        f"reference {predictors.reference_hw!r}: {why}; every op of a model "
                        "will be priced warm, whatever its size")


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from ..calibrate.predictor import CalibrationError, reference_hardware, save_predictors
    from ..calibrate.validate import (
        calibrate,
        choose_methods,
        device_rows,
        held_out_models,
        noise_floor,
        speedup_summary,
        validated_predictions,
        validation_table,
        whole_model_table,
        with_in_sample,
    )
    from ..measure.dataset import concat, load_dataset

    if args.estimator == "spmv-cnn":
        return spmv_estimator.run(args)
    spmv_estimator.refuse_spmv_options(args)
    if args.hold_out_models and not args.whole_models:
        raise CalibrationError("dse calibrate --hold-out-models validates whole models: give "
                               "--whole-models DEVICE=FILE too")
    if args.out is None and not args.validate:
        raise CalibrationError("dse calibrate: give --out MODEL.json to train, --validate to "
                               "print held-out errors, or both")
    check_outputs(files=[("--out", args.out, (".json",))])
    # Every whole-model table is read and checked now, not after the training.
    whole = {name: _read_whole_models(paths)
             for name, paths in _whole_models(args.whole_models).items()}
    for name, paths in _whole_models(args.whole_models).items():
        _check_whole_model_table(whole[name], paths)
    names = args.data or shipped_datasets()
    seen: dict[object, str] = {}
    for n in names:  # once trained on every row twice, each counted as another measurement
        key = Path(n).resolve() if Path(n).exists() else n
        if key in seen:
            raise CalibrationError(f"--data {n}: the dataset {seen[key]} is given twice; give "
                                   "each dataset once")
        seen[key] = n
    if args.out is not None:
        frame = concat([load_dataset(n) for n in names])
        name = args.name or Path(names[0]).stem
        sets = [(name, frame, ", ".join(map(str, names)))]
    else:
        sets = [(Path(n).stem, load_dataset(n), n) for n in names]
    trained = [name for name, _frame, _source in sets]
    for name in whole:
        if name not in trained:  # once skipped without a word, after the whole training
            raise CalibrationError(f"--whole-models {name}=...: this run trains no predictor set "
                                   f"named {name!r} (it trains {', '.join(trained)}); give "
                                   "DEVICE as one of those, or --data its dataset")
    for name, frame, _source in sets:
        if name in whole and len(frame):
            _check_whole_model_device(name, whole[name], str(frame["device"].iloc[0]))
    print("held-out validation: whole weight shapes (m x k x groups) left out; errors of the "
          "expected kernel time (an expectation, not a bound)")
    for name, frame, source in sets:
        data = device_rows(frame, name, source)
        data.residual = args.residual or "trees"
        predictions = validated_predictions(
            data, seed=args.seed, progress=StatusLine(f"{name}: validated", "folds"))
        chosen = choose_methods(predictions, criterion=args.select_by)
        predictors = calibrate(data, predictions, seed=args.seed, criterion=args.select_by)
        predictors, note = with_warm_capacity(predictors, names)
        if note:
            print(note)
        if args.validate:
            predictions = with_in_sample(predictions, data, predictors)
            print(f"\n{name} (reference {data.reference_hw}, {data.units} "
                  f"{'SMs' if data.device == 'cuda' else 'cores'}; "
                  f"{data.provenance['configurations']} configurations "
                  f"({data.provenance['training_rows']} implementation rows) from "
                  f"{data.provenance['dataset_rows']} rows, "
                  f"{data.provenance['dropped_busy_rows']} busy-machine rows dropped)")
            _print_validation(validation_table(predictions, chosen, name,
                                               criterion=args.select_by),
                              speedup_summary(predictions, chosen, name,
                                              criterion=args.select_by), noise_floor(frame))
        if name in whole:
            measured = whole[name]
            hardware = reference_hardware(predictors, names)  # its error, in one line
            table, context = whole_model_table(measured, predictors, hardware)
            _print_whole_models(name, table, context, measured,
                                roofline="bound" if hardware.is_bound else "ceiling roofline")
            if args.hold_out_models:
                held = held_out_models(data, measured, hardware, seed=args.seed,
                                       criterion=args.select_by,
                                       progress=StatusLine(f"{name}: models held out",
                                                           "models"))
                _print_held_out(name, table, held)
            predictors = replace(predictors, context=context)
        if args.out is not None:
            made = {"command": getattr(args, "command_line", "dse calibrate"),
                    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
            predictors = replace(predictors, provenance={**predictors.provenance, **made})
            save_predictors(predictors, args.out)  # OutputError: the path, the reason, the fix
            print(f"wrote {len(predictors.families)} predictors "
                  f"({', '.join(sorted(predictors.families))}) to {args.out}")
    return 0


def _print_held_out(name: str, in_sample: pd.DataFrame, held: pd.DataFrame) -> None:
    """Per model: the whole-model error with the model's shapes in the training data (what
    the table above shows) beside the error with every shape of the model held out."""
    import numpy as np
    import pandas as pd

    if held.empty:
        print(f"\n{name}: no whole model to hold out")
        return
    fmt = held.attrs.get("sparse_format", "2:4")

    def per_model(table: pd.DataFrame) -> pd.DataFrame:
        out = table.groupby("model", sort=False).agg(
            batches=("batch", "size"), error=("error", lambda e: e.abs().median()))
        if "measured_speedup" in table:
            pairs = table[table["measured_speedup"].notna()]
            def agree(g: pd.DataFrame) -> str:
                same = _side(g["measured_speedup"]) == _side(g["expected_speedup"])
                return f"{int(np.sum(same))}/{len(g)}"

            out["side"] = pairs.groupby("model", sort=False).apply(agree, include_groups=False)
        return out

    a, b = per_model(in_sample), per_model(held)
    shown = pd.DataFrame({
        "model": b.index, "batches": b["batches"].to_numpy(),
        "in-sample |error|": a.reindex(b.index)["error"].map(_pct).to_numpy(),
        "held-out |error|": b["error"].map(_pct).to_numpy(),
        "rows left to learn from": held.groupby("model", sort=False)["train_rows"].first()
        .reindex(b.index).to_numpy(),
        "rows of its shapes dropped": held.groupby("model", sort=False)["dropped_rows"].first()
        .reindex(b.index).to_numpy()})
    if "side" in b:  # "-": no sparse variant of the model was measured
        shown[f"{fmt} side of 1x in-sample"] = a.reindex(b.index)["side"].fillna("-").to_numpy()
        shown[f"{fmt} side of 1x held out"] = b["side"].fillna("-").to_numpy()
    print(f"\n{name}: whole models held out (median |error| over batches per model; "
          "in-sample: the model's shapes in the training data)")
    print(shown.to_string(index=False))
    print(f"median model: in-sample {_pct(a['error'].median())}, held out "
          f"{_pct(b['error'].median())}")


def _side(x: pd.Series) -> np.ndarray:
    """-1 slower, 0 within 1% of dense, +1 faster."""
    import numpy as np

    return np.where(np.abs(x - 1) < 0.01, 0, np.sign(x - 1))


def _print_whole_models(name: str, table: pd.DataFrame, context: dict,
                        measured: pd.DataFrame | None = None, roofline: str = "bound") -> None:
    """``roofline``: what the roofline column is on the reference spec: ``bound`` on peaks,
    ``ceiling roofline`` on a probe's measured ceilings (which a run may beat)."""
    import numpy as np
    import pandas as pd

    def ms(v):
        return f"{v * 1e3:.3f}"

    def pct(v):
        return "-" if not np.isfinite(v) else f"{v:+.0%}"

    def times(v):
        return "-" if not np.isfinite(v) else f"{v:.2f}x"

    if table.empty:
        print(f"\n{name}: no measured whole model has the dense variant "
              f"{table.attrs.get('dense_variant', '?')}; nothing to compare")
        return
    fmt = table.attrs.get("sparse_format", "2:4")
    nan = pd.Series(np.nan, index=table.index)
    shown = pd.DataFrame({
        "model": table["model"], "batch": table["batch"],
        "measured ms": table["measured_s"].map(ms), "expected ms": table["expected_s"].map(ms),
        "error": table["error"].map(pct),
        "kernels only": table["kernels_only_error"].map(pct),
        roofline: table["bound_error"].map(pct),
        f"{fmt} speedup measured": table.get("measured_speedup", nan).map(times),
        "expected": table.get("expected_speedup", nan).map(times),
        f"{fmt} error": table.get("sparse_error", nan).map(pct),
    })
    variant = table.attrs.get("dense_variant", "dense_cudagraph")
    print(f"\n{name}: whole models, expected (calibrated, unfused, every op) against measured "
          f"{variant} latency; whole-model constants fitted leaving the model out")
    print(shown.to_string(index=False))
    per_model = table.groupby("model")["error"].apply(lambda e: e.abs().median())
    line = (f"median |error|: {table['error'].abs().median():.0%} over models and batches, "
            f"{per_model.median():.0%} for the median model")
    if "measured_speedup" in table:
        pairs = table["measured_speedup"].notna()
        same = np.mean(_side(table.loc[pairs, "measured_speedup"])
                       == _side(table.loc[pairs, "expected_speedup"]))
        line += f"; {fmt} speedup on the same side of 1x: {same:.0%} of {int(pairs.sum())}"
    print(line)
    if measured is not None and "idle" in measured.columns:
        busy = int((measured["idle"].astype(str).str.lower() == "false").sum())
        if busy:
            print(f"NOT IDLE: {busy} of {len(measured)} measured whole-model rows were timed "
                  "while other processes kept cores busy")
    if context:
        print(f"shipped whole-model constants (all models): kernel shift "
              f"{context['shift_s'] * 1e6:.2f} us, floor of families without data "
              f"{context['unmeasured_floor_s'] * 1e6:.2f} us, their ceiling "
              f"{context['unmeasured_ceiling']:.2f} (grouped convs "
              f"{context['grouped_conv_ceiling']:.3f}) of the bound")
