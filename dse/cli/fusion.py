"""`dse fusion-rules`: detect which producer-consumer pairs of op kinds a backend fuses."""

from __future__ import annotations

import argparse
import json

from .commands import help_of
from .options import (
    MAX_THREADS,
    check_outputs,
    duration,
    integer,
    nonempty_text,
    number,
    path_value,
)
from .progress import StatusLine

__all__ = ["add_parsers"]


def add_parsers(commands) -> None:
    fp = commands.add_parser(
        "fusion-rules", help=help_of("fusion-rules"),
        description="For every (producer kind, consumer kind) pair of op kinds in the shipped "
                    "traces, compile two small modules with the pair's shapes apart and as one "
                    "graph (torch.compile, inductor), time them, and record a rule where the "
                    "joined graph's work is below --threshold x the two graphs' work. Writes "
                    "the rule table as JSON, every pair's timings and the command included. "
                    "Needs torch: pip install 'sparsity-dse[export]'.",
        epilog="Example: dse fusion-rules --backend inductor-cpu --budget 30m "
               "--out inductor-cpu.json")
    fp.add_argument("--backend", default="inductor-cpu", metavar="NAME",
                    type=nonempty_text("a backend, inductor-cpu or inductor-cuda"),
                    help="inductor-cpu or inductor-cuda (default inductor-cpu)")
    fp.add_argument("--out", type=path_value, required=True, metavar="FILE.json",
                    help="rule table to write")
    fp.add_argument("--budget", default="30m", metavar="DURATION", type=duration(),
                    help="time for the whole run, e.g. 90s, 20m (default 30m); pairs not "
                         "reached are recorded as skipped and do not fuse")
    fp.add_argument("--threshold", type=number(0.0, 1.0, above=True), default=None,
                    metavar="SHARE",
                    help="fused when joined work < SHARE x separate work (default 0.85)")
    fp.add_argument("--batch", type=integer(1, 1024), default=None, metavar="B",
                    help="samples per graph call (default 4)")
    fp.add_argument("--threads", type=integer(1, MAX_THREADS), default=None, metavar="N",
                    help="torch threads while timing (default 1: steadier on a shared machine)")
    fp.set_defaults(run=_cmd_fusion_rules)


def _cmd_fusion_rules(args: argparse.Namespace) -> int:
    from ..measure.budget import parse_duration
    from ..measure.fusion_rules import (
        BATCH,
        THREADS,
        THRESHOLD,
        detect_rules,
        summary_counts,
    )
    from ..output import write_atomic
    from ..roofline.fusion_rules import FusionRulesError

    check_outputs(files=[("--out", args.out, (".json",))])
    budget = parse_duration(args.budget, error=FusionRulesError)
    for option, value in (("--batch", args.batch), ("--threads", args.threads)):
        if value is not None and value < 1:
            raise FusionRulesError(f"{option} {value}: give a positive number")
    table = detect_rules(args.backend,
                         threshold=THRESHOLD if args.threshold is None else args.threshold,
                         batch=BATCH if args.batch is None else args.batch,
                         threads=THREADS if args.threads is None else args.threads,
                         budget_s=budget,
                         progress=StatusLine("timed", "pairs"), command=args.command_line)
    text = json.dumps(table.to_json(), indent=1) + "\n"
    write_atomic(args.out, lambda handle: handle.write(text.encode()))
    counts = summary_counts(table)
    rules = ", ".join(f"{a}->{b}" for a, b in sorted(table.rules)) or "none"
    print(f"{args.backend}: {len(table.rules)} of {len(table.pairs)} pairs fuse ({rules}); "
          f"{counts.get('measured', 0)} measured, {counts.get('skipped', 0)} skipped, "
          f"{counts.get('failed', 0)} failed")
    print(f"wrote {args.out}")
    return 0
