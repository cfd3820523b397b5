"""Ship collections of ``benchmarks/gpu/collect`` as one dse dataset (no GPU needed).

    python -m benchmarks.gpu.ship --name h100-sxm-collect \\
        benchmarks/gpu/results/collect benchmarks/gpu/results/collect-seed1

Joins each folder's ``kernels.parquet`` (validated by :func:`dse.measure.dataset.concat`;
every run keeps its ``run_id``, so repeats across runs give the noise floor) and writes
``dse/measure/datasets/NAME.parquet`` with ``NAME.json`` beside it: this command, and each
folder's own provenance (its ``kernels.json``: the commands of every invocation, the machine's
fingerprint, versions). ``dse calibrate --data NAME`` then finds it.
"""

from __future__ import annotations

import datetime
import json
import shlex
import sys
from pathlib import Path

import pandas as pd

from dse.cli.parser import Parser
from dse.measure.dataset import DATASETS_DIR, SCHEMA_VERSION, DatasetError, concat
from dse.output import FileSet, write_atomic, write_table


def ship(name: str, folders: list[Path], out_dir: Path = DATASETS_DIR) -> tuple[Path, int]:
    """Write the joined dataset and its provenance; returns the parquet path and row count."""
    frames, sources = [], []
    for folder in folders:
        path = folder / "kernels.parquet"
        if not path.exists():
            raise DatasetError(f"{folder}: no kernels.parquet (is the collection complete? "
                               "rerun benchmarks/gpu/collect on it)")
        frames.append(pd.read_parquet(path))
        side = folder / "kernels.json"
        sources.append({"folder": str(folder),
                        "provenance": json.loads(side.read_text()) if side.exists() else {}})
    frame = concat(frames)
    command = "python -m benchmarks.gpu.ship " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    meta = {"name": name, "schema": SCHEMA_VERSION, "rows": int(len(frame)),
            "command": command.strip(),
            "converted": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "runs": sorted(map(str, frame["run_id"].unique())), "sources": sources}
    target = out_dir / f"{name}.parquet"
    with FileSet():
        write_table(frame, target)
        _write_json(meta, out_dir / f"{name}.json")
    return target, len(frame)


def _write_json(document: dict, path: Path) -> None:
    text = json.dumps(document, indent=1, default=str) + "\n"
    write_atomic(path, lambda handle: handle.write(text.encode("utf-8")))


def build_parser() -> Parser:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="collect --out folders")
    parser.add_argument("--name", required=True, help="dataset name (dse calibrate --data NAME)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        path, rows = ship(args.name, args.folders)
    except DatasetError as exc:
        print(f"ship: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path} ({rows} rows) and {path.with_suffix('.json').name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
