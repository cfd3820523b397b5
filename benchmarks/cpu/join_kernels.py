"""Join the CPU kernel runs into the shipped dataset dse/measure/datasets/cpu-amd-epyc-2c.parquet.

Reads every dataset under benchmarks/cpu/results/kernels/ (cold timings, 4 rounds, adaptive
sampling: measure_kernels.sh) and benchmarks/cpu/results/warm/ (each model's trace shapes and
vector ops cold and warm, 2 rounds: measure_warm.sh), and writes them as one dataset with a
.json that keeps every run's provenance and the probe the speed of light refers to.
Run from the repository root: python benchmarks/cpu/join_kernels.py
"""

import json
from pathlib import Path

from dse.measure.dataset import concat, load_dataset
from dse.output import write_atomic, write_table

RESULTS = Path("benchmarks/cpu/results")
TARGET = Path("dse/measure/datasets/cpu-amd-epyc-2c.parquet")


def main() -> None:
    paths = sorted((RESULTS / "kernels").glob("*.parquet")) + sorted(
        (RESULTS / "warm").glob("*.parquet"))
    if not paths:
        raise SystemExit("no runs under benchmarks/cpu/results/kernels or warm: run "
                         "measure_kernels.sh or measure_warm.sh first")
    frame = concat(load_dataset(p) for p in paths)
    runs = {str(p): json.loads(p.with_suffix(".json").read_text()) for p in paths}
    side = {
        "command": "sh benchmarks/cpu/measure_kernels.sh; sh benchmarks/cpu/measure_warm.sh; "
                   "python benchmarks/cpu/join_kernels.py",
        "made_by": "the dse measure runs named in runs (their own commands and provenance), "
                   "joined by benchmarks/cpu/join_kernels.py with dse.measure.dataset.concat",
        "machine": "a 2-core AMD EPYC (Zen 5, family 26) KVM guest, 48 KiB L1d + 1 MiB L2 per "
                   "core, 32 MiB L3, 24 GB",
        "schema": next(iter(runs.values()))["schema"], "rows": len(frame),
        "hw": next(iter(runs.values()))["hw"],
        "probe_command": "dse hw probe --device cpu --out host.toml",
        "probe_spec_toml": (RESULTS / "host.toml").read_text(),
        "runs": runs,
    }
    write_table(frame, TARGET)
    text = json.dumps(side, indent=1, default=str) + "\n"
    write_atomic(TARGET.with_suffix(".json"), lambda handle: handle.write(text.encode()))
    print(f"wrote {len(frame)} rows of {len(paths)} runs to {TARGET}")


if __name__ == "__main__":
    main()
