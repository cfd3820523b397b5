"""How much does choosing each family's method on the rows it is then scored on flatter the
held-out figures, and which selection criterion validates best once nested?

    python -m benchmarks.bounds.nested_selection --data h100-sxm --data h100-sxm-collect \\
        --seed 0 --seed 1

For each fold seed: the out-of-fold predictions of ``dse calibrate --validate``
(:func:`dse.calibrate.validate.validated_predictions`), then per family and criterion
(:data:`dse.calibrate.validate.CRITERIA`) the share of configurations within +-10%, with the
method chosen on every fold's rows (``flat``: what ``dse calibrate`` printed before selection
was nested) and chosen per fold without that fold (``nested``: what it prints now). ``--family``
restricts the rows (repeatable; the folds then differ from the full run's). Needs scikit-learn
(the ``accuracy`` extra); about two minutes per seed on two cores for the H100 data.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from dse.cli.parser import Parser


def selection_table(predictions: pd.DataFrame) -> pd.DataFrame:
    """Per family (and ``all``), the share within +-10% for each criterion, flat and nested;
    the last row ``median |error|`` over all configurations."""
    from dse.calibrate.validate import CRITERIA, choose_methods, chosen_column, held_out_column

    columns = {}
    measured = predictions["time_s"].to_numpy()
    keys = predictions["key"].astype(str).to_numpy()
    for criterion in CRITERIA:
        chosen = choose_methods(predictions, criterion=criterion)
        for label, predicted in (("flat", chosen_column(predictions, chosen)),
                                 ("nested", held_out_column(predictions, chosen,
                                                            criterion=criterion))):
            error = np.abs(predicted / measured - 1.0)
            share = pd.Series(error <= 0.10).groupby(keys).mean()
            share["all"] = float(np.mean(error <= 0.10))
            share["median |error|"] = float(np.median(error))
            columns[f"{criterion} {label}"] = share
    return pd.DataFrame(columns)


def build_parser() -> Parser:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", action="append", required=True)
    parser.add_argument("--seed", action="append", type=int, default=None)
    parser.add_argument("--family", action="append", default=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from dse.calibrate.validate import DeviceRows, device_rows, validated_predictions
    from dse.measure.dataset import concat, load_dataset

    frame = concat([load_dataset(n) for n in args.data])
    data = device_rows(frame, args.data[0], ", ".join(args.data))
    if args.family:
        data = DeviceRows(data.name, data.rows[data.rows["key"].isin(args.family)]
                          .reset_index(drop=True), data.device, data.units, data.reference_hw,
                          data.provenance, data.residual)
    print(f"$ python -m benchmarks.bounds.nested_selection {' '.join(sys.argv[1:])}")
    for seed in args.seed or [0]:
        table = selection_table(validated_predictions(data, seed=seed))
        print(f"\nseed {seed}: share within +-10% held out (median |error| last), by the "
              "criterion each family's method is chosen by, on every fold (flat) or per fold "
              "without it (nested)")
        print(table.map(lambda v: f"{v:.1%}").to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
