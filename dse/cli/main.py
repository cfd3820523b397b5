"""The ``dse`` parser and entry point. A user's error prints one line and exits with code 2."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from accelerator_models import SpecError
from formats import FormatError
from search.errors import SearchError, SearchInterrupted
from workloads import TraceError

from ..accuracy import AccuracyError, AccuracyTableError
from ..explore import SweepError
from ..measure.errors import BenchError
from ..output import OutputError
from ..roofline import EvaluationError, NumericsError
from ..sim import FanoutError, SimulationError
from . import accuracy, bench, evaluate, hw, report, simulate, workloads
from . import search as search_command
from .options import Parser

__all__ = ["main"]

#: The command groups, in the order `dse --help` lists them; each module has add_parsers().
COMMANDS = (evaluate, workloads, accuracy, hw, simulate, search_command, report, bench)

USER_ERRORS = (SpecError, FormatError, TraceError, EvaluationError, NumericsError, OutputError,
               AccuracyError, AccuracyTableError, SearchError, SweepError, SimulationError,
               FanoutError, BenchError)


def build_parser() -> Parser:
    parser = Parser(
        prog="dse",
        description="Speed-of-light design-space exploration of sparse neural-network "
                    "inference: what a sparsity pattern, on given hardware, could buy.")
    parser.add_argument("--version", action="version", version="dse 0.1.0")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser,
                                     metavar="COMMAND")
    for module in COMMANDS:
        module.add_parsers(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except SearchInterrupted as exc:
        print(f"dse: {exc}", file=sys.stderr)
        return 130
    except USER_ERRORS as exc:
        print(f"dse: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `dse ... | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
