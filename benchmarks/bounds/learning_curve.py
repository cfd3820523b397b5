"""Would more measured shapes move the held-out figures? A learning curve per kernel family.

    python -m benchmarks.bounds.learning_curve --data h100-sxm --data h100-sxm-collect \\
        --out benchmarks/bounds/results/learning_curve_h100-sxm.txt

``dse calibrate --validate`` holds out whole weight shapes in 10 folds: each prediction is
made by predictors trained on 90% of the device's shapes. This script repeats that
validation with 2, 3, 5 and 10 folds (trained on 50%, 67%, 80% and 90% of the shapes), two
fold seeds each, and prints each family's share of configurations within +-10% per training
share. A family whose share still rises towards 90% would gain from more shapes of the kinds
already measured; a flat one would not (it misses something the features do not see). Needs
scikit-learn (the ``accuracy`` extra); minutes on two cores.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from dse.cli.parser import Parser

FOLDS = (2, 3, 5, 10)
SEEDS = (0, 1)
METHODS = ("fraction/best", "fraction/impl", "time/best", "time/impl")


def learning_curve(data, folds=FOLDS, seeds=SEEDS, progress=None) -> pd.DataFrame:
    """Per family, method and number of folds: the share of configurations within +-10%,
    averaged over ``seeds`` (columns ``key``, ``method``, ``folds``, ``train_share``,
    ``within_10``, ``configurations``)."""
    from dse.calibrate.validate import validated_predictions

    rows = []
    for n_folds in folds:
        for seed in seeds:
            predicted = validated_predictions(data, seed=seed, max_folds=n_folds)
            for key, group in predicted.groupby("key"):
                for method in METHODS:
                    error = np.abs(group[f"pred_{method}"] / group["time_s"] - 1.0)
                    rows.append({"key": key, "method": method, "folds": n_folds,
                                 "train_share": 1.0 - 1.0 / n_folds,
                                 "within_10": float((error <= 0.10).mean()),
                                 "configurations": len(group)})
            if progress is not None:
                progress(n_folds, seed)
    table = pd.DataFrame(rows)
    return (table.groupby(["key", "method", "folds", "train_share"], as_index=False)
            .agg(within_10=("within_10", "mean"), configurations=("configurations", "first")))


def render(table: pd.DataFrame, command: str) -> str:
    wide = table.pivot_table(index=["key", "configurations", "method"], columns="train_share",
                             values="within_10")
    wide.columns = [f"{share:.0%} of shapes" for share in wide.columns]
    lines = [f"$ {command}",
             "share of configurations within +-10% held out, by the share of the device's weight "
             f"shapes trained on (mean of fold seeds {', '.join(map(str, SEEDS))})",
             wide.map(lambda v: f"{v:.0%}").to_string()]
    return "\n".join(lines) + "\n"


def build_parser() -> Parser:
    parser = Parser(
        prog="python -m benchmarks.bounds.learning_curve",
        description="Held-out share within +-10% per kernel family against the share of "
   "weight shapes trained on (2, 3, 5 and 10 folds).")
    parser.add_argument("--data", action="append", required=True,
                        help="a shipped dataset name or a dataset file (repeat to combine)")
    parser.add_argument("--out", type=Path, help="also write the table to this text file")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    from dse.calibrate.validate import device_rows
    from dse.measure.dataset import concat, load_dataset

    try:  # a missing file, a malformed dataset, one without training rows: one line
        frame = concat([load_dataset(name) for name in args.data])
        data = device_rows(frame, Path(args.data[0]).stem, ", ".join(args.data))
    except (OSError, ValueError) as exc:
        print(f"learning_curve: {exc}", file=sys.stderr)
        return 2
    done = lambda folds, seed: print(f"  {folds} folds, seed {seed} done",  # noqa: E731
                                     file=sys.stderr, flush=True)
    command = "python -m benchmarks.bounds.learning_curve " + " ".join(
        f"--data {name}" for name in args.data)
    text = render(learning_curve(data, progress=done), command)
    print(text, end="")
    if args.out is not None:
        from dse.output import write_atomic

        write_atomic(args.out, lambda out: out.write(text.encode()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
