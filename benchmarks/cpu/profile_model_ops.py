"""Which ops a dense CPU whole model runs, and their shares of a forward: the evidence for how
``dse calibrate --whole-models`` prices a dense CPU model's convolutions, norms and copies.

    python -m benchmarks.cpu.profile_model_ops --model resnet50 --batch 1 --batch 8 \\
        --out benchmarks/cpu/results/profile_model_ops.csv

Builds each model as ``dse measure --whole-models`` times it
(:func:`dse.measure.kernels_cpu.build_model`: eval, fp32, ``torch.inference_mode``, the trace's
input size, all cores), runs three warm-up forwards and profiles ``--forwards`` forwards with
torch.profiler (CPU activities, shapes recorded), one profile a forward. Writes one row per
(model, batch, op, input shapes): calls per forward, self CPU time in the fastest forward
(``self_cpu_s_per_forward``; other work sharing the machine only adds time, in bursts) and in
the median one, the fastest's share of their sum, and ``forward_s``, the fastest of as many
unprofiled forwards. Read shares and counts, not times: on a machine shared with other work
every op is slower by whatever else ran. Needs the ``export`` extra (torch, timm).
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import pandas as pd

from dse.cli.parser import Parser


def profile(model: str, batch: int, forwards: int = 7) -> pd.DataFrame:
    """One row per (op, input shapes) of ``forwards`` dense forwards of ``model``."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    import workloads
    from dse.measure.kernels_cpu import build_model

    shape = tuple(int(s) for s in workloads.load_trace(model).input_shape)
    kernel = build_model(model, shape, batch, None, seed=0)
    for _ in range(3):  # warm-up: allocations, oneDNN primitives, one-time conversions
        kernel.fn()
    walls = []
    for _ in range(forwards):  # unprofiled: the forward's own time, fastest of them
        start = time.perf_counter()
        kernel.fn()
        walls.append(time.perf_counter() - start)
    per_forward = []
    for _ in range(forwards):  # one profile a forward: each op's fastest forward is kept
        with torch_profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            kernel.fn()
        per_forward.append({(e.key, str(e.input_shapes)): (e.count, e.self_cpu_time_total / 1e6)
                            for e in prof.key_averages(group_by_input_shape=True)})
    keys = set().union(*per_forward)
    rows = [{"op": op, "input_shapes": shapes,
             "calls_per_forward": max(f.get((op, shapes), (0, 0.0))[0] for f in per_forward),
             "self_cpu_s_per_forward": min(f.get((op, shapes), (0, 0.0))[1]
                                           for f in per_forward),
             "self_cpu_s_median": float(pd.Series([f.get((op, shapes), (0, 0.0))[1]
                                                   for f in per_forward]).median())}
            for op, shapes in keys]
    frame = pd.DataFrame(rows)
    frame["share"] = frame["self_cpu_s_per_forward"] / frame["self_cpu_s_per_forward"].sum()
    return frame.sort_values("self_cpu_s_per_forward", ascending=False).assign(
        model=model, batch=batch, forward_s=min(walls))


def build_parser() -> Parser:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", required=True, help="timm model name "
                        "(repeat for several)")
    parser.add_argument("--batch", type=int, action="append", help="batch size (repeat; "
                        "default 1 and 8)")
    parser.add_argument("--forwards", type=int, default=7, help="profiled forwards (default 7)")
    parser.add_argument("--out", type=Path, required=True, help="CSV to write (first line: "
                        "the command)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    batches = args.batch or [1, 8]
    if min(batches) < 1 or args.forwards < 1:
        print("profile_model_ops: --batch and --forwards must be at least 1", file=sys.stderr)
        return 2
    frames = []
    for model in args.model:
        for batch in batches:
            frame = profile(model, batch, args.forwards)
            frames.append(frame)
            top = frame.groupby("op")["share"].sum().sort_values(ascending=False).head(10)
            ops_ms = frame["self_cpu_s_per_forward"].sum() * 1e3
            print(f"{model} batch {batch}: forward {frame['forward_s'].iloc[0] * 1e3:.0f} ms "
                  f"unprofiled, ops {ops_ms:.0f} ms; "
                  + ", ".join(f"{op} {s:.0%}" for op, s in top.items()))
    command = "python -m benchmarks.cpu.profile_model_ops " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(f"# {command}\n")
        pd.concat(frames, ignore_index=True).to_csv(f, index=False)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
