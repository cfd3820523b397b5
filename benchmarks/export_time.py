"""Export time of the six Sparsity Roofline models, against a plain meta-device forward.

Run from the repository root (needs the torch/timm extra)::

    python -m benchmarks.export_time [--repeats N]

For each model it times, in the same process: building the model on the meta device plus one
forward (the reference: what any meta-device trace must pay), and the full export (build,
forward under the capturing dispatch mode, per-sample division, validation), in process; and
the whole `dse workloads export` command in a new process (imports of torch and timm included).
Target (issue 3): each export under 10 s on this 2-core machine.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time

import timm
import torch

from dse.cli.parser import Parser
from workloads.export import export_trace

MODELS = ("resnet50", "efficientnet_b4", "convnext_tiny", "deit_small_patch16_224",
          "swin_tiny_patch4_window7_224", "mixer_s16_224")
TARGET_S = 10.0


def reference(name: str) -> None:
    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False)
    model.eval()
    x = torch.empty(2, *model.pretrained_cfg["input_size"], device="meta")
    with torch.no_grad():
        model(x)


def best(fn, repeats: int) -> tuple[float, float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def cli_wall(name: str) -> float:
    """Wall time of the whole command in a new process, as a user runs it."""
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dse", "workloads", "export", name, "--out",
                        f"{folder}/{name}.json"], check=True, capture_output=True)
        return time.perf_counter() - start


def build_parser() -> Parser:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per model (best kept)")
    return parser


def main() -> int:
    args = build_parser().parse_args()
    print(f"torch {torch.__version__}, timm {timm.__version__}, {torch.get_num_threads()} "
          f"threads; best of {args.repeats}")
    print(f"{'model':32s} {'ops':>5s} {'reference s':>12s} {'export s':>9s} {'ratio':>6s} "
          f"{'CLI s':>6s} {'target':>7s}")
    worst = 0.0
    for name in MODELS:
        reference(name)  # warm timm's registry and torch's meta kernels for this model
        ref_best, _ = best(lambda name=name: reference(name), args.repeats)
        trace = export_trace(name)
        export_best, _ = best(lambda name=name: export_trace(name), args.repeats)
        cli_s = cli_wall(name)
        worst = max(worst, cli_s)
        print(f"{name:32s} {len(trace):5d} {ref_best:12.3f} {export_best:9.3f} "
              f"{export_best / ref_best:5.1f}x {cli_s:6.2f} "
              f"{'met' if cli_s < TARGET_S else 'MISSED':>7s}")
    print(f"slowest `dse workloads export` (a new process: imports, export, write) {worst:.2f} s "
          f"against the {TARGET_S:.0f} s target: {'met' if worst < TARGET_S else 'NOT MET'}")
    return 0 if worst < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
