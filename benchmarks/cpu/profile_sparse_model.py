"""Which ops a CPU whole model runs, dense and with its linears on torch's sparse path: the
evidence for how ``dse calibrate --whole-models`` prices a sparse CPU model
(:mod:`workloads.backend`).

    python -m benchmarks.cpu.profile_sparse_model --model deit_small_patch16_224 --batch 8 \\
        --format block4@87.5% --out benchmarks/cpu/results/profile_deit_small_b8.csv

Builds the model as ``dse measure --whole-models`` times it
(:func:`dse.measure.kernels_cpu.build_model`: eval, fp32, the linears as ``W @ X`` in BSR or
CSR), runs one warm-up forward and profiles ``--forwards`` forwards of each variant with
torch.profiler (CPU activities, shapes recorded). Writes one row per (variant, op, input
shapes): calls per forward and self CPU time per forward. The op names and counts are the
finding; the times are of whatever else the machine was doing (a busy machine slows them),
so read them as shares, not as kernel timings. Needs the ``export`` extra (torch, timm).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from dse.cli.parser import Parser


def profile(model: str, batch: int, fmt_text: str | None, forwards: int = 2) -> pd.DataFrame:
    """One row per (op, input shapes) of ``forwards`` forwards of the model."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    import formats
    from dse.measure.kernels_cpu import build_model

    fmt = formats.parse(fmt_text) if fmt_text else None
    kernel = build_model(model, (3, 224, 224), batch, fmt, seed=0)
    kernel.fn()  # warm-up: allocations and one-time conversions stay out of the profile
    with torch_profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(forwards):
            kernel.fn()
    rows = [{"op": e.key, "input_shapes": str(e.input_shapes),
             "calls_per_forward": e.count / forwards,
             "self_cpu_s_per_forward": e.self_cpu_time_total / 1e6 / forwards}
            for e in prof.key_averages(group_by_input_shape=True)]
    return pd.DataFrame(rows).sort_values("self_cpu_s_per_forward", ascending=False)


def build_parser() -> Parser:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="deit_small_patch16_224", help="timm model name")
    parser.add_argument("--batch", type=int, default=8, help="batch size (default 8)")
    parser.add_argument("--format", default="block4@87.5%",
                        help="sparse format of the sparse variant (default block4@87.5%%)")
    parser.add_argument("--forwards", type=int, default=2, help="profiled forwards (default 2)")
    parser.add_argument("--out", type=Path, required=True, help="CSV to write")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.batch < 1 or args.forwards < 1:
        print("profile_sparse_model: --batch and --forwards must be at least 1",
              file=sys.stderr)
        return 2
    frames = [profile(args.model, args.batch, None, args.forwards).assign(variant="dense"),
              profile(args.model, args.batch, args.format, args.forwards).assign(
                  variant=args.format)]
    frame = pd.concat(frames, ignore_index=True).assign(model=args.model, batch=args.batch)
    frame.to_csv(args.out, index=False)
    for variant, group in frame.groupby("variant", sort=False):
        top = group.groupby("op")["self_cpu_s_per_forward"].sum().sort_values(
            ascending=False).head(12)
        print(f"{args.model} batch {args.batch}, {variant}: "
              f"{group['self_cpu_s_per_forward'].sum() * 1e3:.0f} ms of CPU per forward; "
              + ", ".join(f"{op} {s * 1e3:.0f}" for op, s in top.items()))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
