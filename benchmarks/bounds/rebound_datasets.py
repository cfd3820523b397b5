"""Recompute the bound (``sol_s``, ``sol_bound``, ``flops``, ``bytes``, ``hw``, ``sol_fraction``)
of every row of the shipped kernel datasets on a spec of physical peaks, under the condition each
row was timed in (cold: DRAM; warm: the cache hierarchy), charging sparse kernels only the rows
of X they read. Rewrites the datasets in place and records what it did in their ``.json``.

    python -m benchmarks.bounds.rebound_datasets            # every shipped dataset
    python -m benchmarks.bounds.rebound_datasets --check    # report only, write nothing

The timings are untouched: only the columns dse computes change. Whole-model rows are checked
by tests/test_bound.py against the same specs.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime

import pandas as pd

import accelerator_models
from dse.cli.parser import Parser
from dse.measure.dataset import DATASETS_DIR, load_dataset
from dse.measure.sol import bound_columns, row_features

#: Dataset -> (peak spec, value dtype, vector dtype, CSR dtype): the numerics the rows ran in.
BOUND_SPECS = {
    "cpu-amd-epyc-2c": ("epyc-zen5-2c", "tf32", "fp32", "fp32"),
    "h100-sxm": ("h100-sxm", "fp16", "fp16", "fp32"),
    "h100-sxm-collect": ("h100-sxm", "fp16", "fp16", "fp32"),
}


def rebound(name: str) -> tuple[pd.DataFrame, dict]:
    spec, dtype, vector_dtype, csr_dtype = BOUND_SPECS[name]
    hw = accelerator_models.load(spec)
    frame = load_dataset(name)
    ok = frame["error"] == ""
    before = int((frame.loc[ok, "min_s"] < frame.loc[ok, "sol_s"]).sum())
    out = frame.copy()
    # Rows with an error are priced too (their timings are NaN): as `dse measure` and the
    # converter price them, so that a fresh conversion gives the same frame.
    rows = out["family"] != "model"
    priced = bound_columns(out[rows], hw, dtype, vector_dtype, csr_dtype,
                           features=row_features(out[rows]))
    for column in ("sol_s", "sol_bound", "flops", "bytes", "hw", "sol_fraction"):
        out.loc[rows, column] = priced[column].to_numpy()
    timed = rows & ok
    after = int((out.loc[timed, "min_s"] < out.loc[timed, "sol_s"]).sum())
    summary = {"spec": spec, "numerics": [dtype, vector_dtype, csr_dtype],
               "rows_repriced": int(rows.sum()), "rows_beating_old_bound": before,
               "rows_beating_new_bound": after,
               "min_ratio_min_s_over_sol_s": float((out.loc[timed, "min_s"]
                                                    / out.loc[timed, "sol_s"]).min())}
    return out, summary


def build_parser() -> Parser:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report only; write nothing")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in BOUND_SPECS:
        out, summary = rebound(name)
        print(f"{name}: {json.dumps(summary)}")
        if args.check:
            continue
        out.to_parquet(DATASETS_DIR / f"{name}.parquet", index=False)
        meta_path = DATASETS_DIR / f"{name}.json"
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if "sol" in meta and "see 'bound'" not in str(meta["sol"]):
            meta["sol"] = f"replaced by the bound on {summary['spec']}: see 'bound'"
        meta["bound"] = {
            "command": "python -m benchmarks.bounds.rebound_datasets",
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "what": ("sol_s, sol_bound, flops, bytes, hw and sol_fraction recomputed on the "
                     "peak spec below, cold rows on DRAM and warm rows on its cache levels; "
                     "sparse rows charged the expected share of X's rows read under a random "
                     "mask; timings untouched"),
            **summary}
        meta_path.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
