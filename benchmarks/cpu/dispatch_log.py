"""Which aten ops a dense CPU whole model calls, and which of their tensor inputs are not
contiguous: the evidence for copies a model runs that its trace lacks (a layer norm over a
transposed view copies it first; ``docs/fidelity.md``, CPU whole models).

    python -m benchmarks.cpu.dispatch_log --model mixer_s16_224 --batch 1 \\
        --out benchmarks/cpu/results/dispatch_log_mixer_b1.txt

Builds the model as ``dse measure --whole-models`` times it
(:func:`dse.measure.kernels_cpu.build_model`), runs one forward, then logs one forward under a
``TorchDispatchMode``: one line per (op, input shapes), with its count, a shape marked ``T``
where that input is not contiguous. Counts, not times. Needs the ``export`` extra.
"""

from __future__ import annotations

import collections
import shlex
import sys
from pathlib import Path

from dse.cli.parser import Parser


def dispatch_counts(model: str, batch: int) -> collections.Counter:
    """(op, input shapes) -> calls in one forward of ``model`` at ``batch``."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    import workloads
    from dse.measure.kernels_cpu import build_model

    shape = tuple(int(s) for s in workloads.load_trace(model).input_shape)
    kernel = build_model(model, shape, batch, None, seed=0)
    kernel.fn()
    counts: collections.Counter = collections.Counter()

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            shapes = [tuple(a.shape) + (() if a.is_contiguous() else ("T",))
                      for a in args if isinstance(a, torch.Tensor)]
            counts[(str(func), str(shapes))] += 1
            return func(*args, **(kwargs or {}))

    with Log():
        kernel.fn()
    return counts


def build_parser() -> Parser:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="timm model name")
    parser.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    parser.add_argument("--out", type=Path, required=True, help="text file to write")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.batch < 1:
        print("dispatch_log: --batch must be at least 1", file=sys.stderr)
        return 2
    counts = dispatch_counts(args.model, args.batch)
    command = "python -m benchmarks.cpu.dispatch_log " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    lines = [f"$ {command}", "calls  op  input shapes (T: not contiguous)"]
    lines += [f"{n:5d}  {op}  {shapes}" for (op, shapes), n in sorted(counts.items())]
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
