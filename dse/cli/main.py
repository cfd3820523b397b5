"""The ``dse`` parser and entry point. A user's error prints one line and exits with code 2;
an interrupt (Ctrl-C) one line and code 130; output that cannot be written one line and 2."""

from __future__ import annotations

import _thread
import argparse
import errno
import importlib
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence

import dse
from search.credentials import masked_command
from search.errors import SearchInterrupted

from .commands import COMMANDS
from .parser import Parser

__all__ = ["main"]

#: The errors a user's input causes, by the module that defines each: told in one line, exit
#: code 2. Looked up when an exception reaches main(), among the modules already loaded (a
#: module never imported raised none of them), so that `dse --help` loads none of them.
USER_ERRORS = (
    ("accelerator_models", "SpecError"), ("formats", "FormatError"),
    ("workloads", "TraceError"), ("dse.roofline", "EvaluationError"),
    ("dse.roofline", "NumericsError"), ("dse.output", "OutputError"),
    ("dse.accuracy", "AccuracyError"), ("dse.accuracy", "AccuracyTableError"),
    ("search.errors", "SearchError"), ("dse.explore", "SweepError"),
    ("dse.sim", "SimulationError"), ("dse.sim", "FanoutError"),
    ("dse.measure.errors", "BenchError"), ("dse.measure.errors", "MeasureError"),
    ("dse.measure.errors", "ProbeError"), ("dse.measure.errors", "DatasetError"),
    ("dse.roofline.fusion_rules", "FusionRulesError"),
    ("dse.calibrate.predictor", "CalibrationError"), ("dse.cli.options", "InputError"))

#: What ``dse`` answers without loading a command (pandas, numba): the command list and the
#: version, from :mod:`.commands`.
LIGHT = ([], ["-h"], ["--help"], ["--version"])


def user_errors() -> tuple[type[BaseException], ...]:
    """The classes of :data:`USER_ERRORS` whose modules are loaded."""
    loaded = (getattr(sys.modules[module], name, None) for module, name in USER_ERRORS
              if module in sys.modules)
    return tuple(c for c in loaded if isinstance(c, type))


def _top_parser() -> tuple[Parser, argparse._SubParsersAction]:
    parser = Parser(
        prog="dse",
        description="Speed-of-light design-space exploration of sparse neural-network "
                    "inference: what a sparsity pattern, on given hardware, could buy.")
    parser.add_argument("--version", action="version", version=f"dse {dse.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser,
                                     metavar="COMMAND")
    return parser, commands


def light_parser() -> Parser:
    """The top-level parser with each command's name and help only (no options): what ``dse``,
    ``dse --help`` and ``dse --version`` need, without importing any command module."""
    parser, commands = _top_parser()
    for name, (_module, text) in COMMANDS.items():
        commands.add_parser(name, help=text)
    return parser


def build_parser(command: str | None = None) -> Parser:
    """The whole parser: every command module's, in the order of :data:`COMMANDS`. With
    ``command``, only the module that builds that command's parser is imported; the others'
    commands are listed by name and help, as in :func:`light_parser`: a refused argument of one
    command then costs no other command's imports."""
    parser, commands = _top_parser()
    for module in dict.fromkeys(module for module, _text in COMMANDS.values()):
        if command is None or COMMANDS[command][0] == module:
            importlib.import_module(f"{__package__}.{module}").add_parsers(commands)
        else:
            for name, (owner, text) in COMMANDS.items():
                if owner == module:
                    commands.add_parser(name, help=text)
    return parser


def _command_of(given: Sequence[str]) -> str | None:
    """The command ``given`` names (its first word that is not an option: the top-level parser
    takes no option with a value), or None where that is not one of :data:`COMMANDS`."""
    first = next((word for word in given if not word.startswith("-")), None)
    return first if first in COMMANDS else None


class StdoutError(Exception):
    """Standard output took no more text: a full device, a reader that went away."""


class _GuardedStdout:
    """``sys.stdout`` while a command runs: a failed write or flush becomes a
    :class:`StdoutError`, told apart from the OSErrors of files and the library."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise StdoutError(exc.strerror or str(exc)) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise StdoutError(exc.strerror or str(exc)) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _silence_stdout(stream) -> None:
    """After a failed write: drop what is still buffered, so that the interpreter's own flush
    at exit does not fail a second time with a traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (tests capture it)
        pass


def _error(message: str, code: int) -> int:
    print(f"dse: {message}", file=sys.stderr, flush=True)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Exit codes: 0 done; 2 a user's error (one line on stderr, nothing left
    behind: result files are written atomically); 130 interrupted (Ctrl-C), one line, no
    partial files. Output that cannot be written (stdout closed or refused: a full device, a
    reader that exited) is an error too (exit 2), never a silent loss."""
    stream = sys.stdout
    if stream is None or getattr(stream, "closed", False):
        # Python sets sys.stdout to None when file descriptor 1 is closed (`dse ... >&-`).
        return _error("error: standard output is closed; run dse with an open standard "
                      "output (redirect it to a file or /dev/null)", 2)
    sys.stdout = _GuardedStdout(stream)
    interrupt = _InterruptFlag()
    args = None
    try:
        given = list(sys.argv[1:] if argv is None else argv)
        if given in LIGHT:
            light_parser().parse_args(given)  # prints the help or the version, and exits
        from .first_run import first_run_done, first_run_started

        parser = build_parser(_command_of(given))
        args = parser.parse_args(given)
        # The command as run, for the files that record it (reports, datasets, probes,
        # predictors): credentials masked here, once, for every one of them.
        args.command_line = masked_command(sys.argv[1:] if argv is None else argv)
        # An evaluating command says it compiles the kernels (first_run.evaluation_begins)
        # once its inputs are checked, not here: a refused input is told alone.
        code = args.run(args)
        sys.stdout.flush()  # a full device shows here, not at the interpreter's exit
        started = first_run_started(args)
        if started is not None and code == 0:
            print(first_run_done(time.perf_counter() - started), file=sys.stderr, flush=True)
        return code
    # From here the outcome is decided: an interrupt that lands while it is printed (the
    # user's second Ctrl-C, or one re-sent for a finalizer) is absorbed, never escaping main()
    # to kill the process by SIGINT after the line announced another exit. `closed` is set
    # first, by a plain attribute store: a method call would itself let the interrupt in.
    except SearchInterrupted as exc:
        interrupt.closed = True
        return _error(str(exc), 130)
    except KeyboardInterrupt:
        interrupt.closed = True
        # Result files are written atomically (dse.output, reports): none is left half-written.
        return _error("interrupted; no partial result file was left", 130)
    except user_errors() as exc:
        interrupt.closed = True
        return _error(f"error: {exc}", 2)
    except StdoutError as exc:
        interrupt.closed = True
        _silence_stdout(stream)
        return _error(f"error: cannot write to standard output ({exc}); results shown "
                      "there are incomplete", 2)
    except Exception as exc:
        interrupt.closed = True
        if _is_report_error(exc):
            return _error(f"error: {exc}", 2)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            # A full device under a writer that does not name its files itself (the reports'
            # staging folder): not a bug; that writer removes what it was writing.
            from ..output import write_failure

            return _error(f"error: {write_failure(_written(exc, args), exc)}", 2)
        if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
            # A path given as an input (a model, a dataset, a predictor file) that no file
            # system takes: the user's error, found by the first look at the file.
            name = str(exc.filename or "a path given")
            name = name if len(name) <= 80 else f"{name[:60]}...{name[-12:]}"
            return _error(f"error: {name}: the name is longer than the file system takes; "
                          "give a shorter path", 2)
        if interrupt.pressed:
            # Ctrl-C inside a library callback (numba compiling and caching a kernel) can be
            # swallowed there and resurface as another error: it is still the interrupt.
            return _error("interrupted; no partial result file was left", 130)
        raise
    finally:
        interrupt.restore()
        sys.stdout = stream


class _InterruptFlag:
    """Remembers that Ctrl-C was pressed (and still raises KeyboardInterrupt, as Python does),
    so that an interrupt a library turned into another exception is still told as one.

    Python cannot raise an exception out of a finalizer: a KeyboardInterrupt that lands while
    the garbage collector runs a weakref callback (numba disposes of typing globals that way)
    is printed as "Exception ignored" and dropped, and the command would carry on and exit 0.
    The unraisable hook catches that case, keeps it off the screen and sends SIGINT again, so
    the interrupt lands at the next point where it can propagate."""

    def __init__(self) -> None:
        self.pressed = False
        self.closed = False  # the run has ended: a late re-sent interrupt must not land
        self.pending: list[threading.Thread] = []
        self.previous_hook = sys.unraisablehook
        self.previous = None
        try:
            if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
                # Started with SIGINT ignored (`dse ... &` in a script, nohup): the starter
                # asked for no interrupts, and dse keeps to that.
                return
            self.previous = signal.signal(signal.SIGINT, self._handle)
        except ValueError:  # not the main thread: leave the handler alone
            return
        sys.unraisablehook = self._unraisable

    def _handle(self, signum, frame) -> None:
        if self.closed:  # the outcome is decided and being told: absorbed
            return
        self.pressed = True
        raise KeyboardInterrupt

    def _unraisable(self, unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            # Raised from here it would be dropped too: another thread asks for the handler
            # to run again in the main thread, after the finalizer has returned.
            # Under load, starting the thread can outlast the 10 ms: they count from the end
            # of this hook, or the interrupt lands inside it (and prints a traceback).
            returned = threading.Event()
            thread = threading.Thread(target=self._interrupt_main_soon, args=(returned,),
                                      daemon=True)
            self.pending.append(thread)
            thread.start()
            returned.set()
            return
        self.previous_hook(unraisable)

    def _interrupt_main_soon(self, returned: threading.Event) -> None:
        returned.wait()
        time.sleep(0.01)  # long enough for the finalizer (and the hook) to return
        if not self.closed:
            _thread.interrupt_main(signal.SIGINT)

    def restore(self) -> None:
        # An interrupt re-sent for a finalizer that swallowed one must land before the handler
        # is restored, or it would land after main() returned and kill the process by SIGINT
        # (exit status -2 instead of the 130 already decided). Stop any still waiting, and
        # absorb one already on its way: the run has ended and said so.
        self.closed = True
        for thread in self.pending:
            while thread.is_alive():
                try:
                    thread.join(timeout=1.0)
                except KeyboardInterrupt:
                    pass
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
            sys.unraisablehook = self.previous_hook


def _written(exc: OSError, args) -> str:
    """What a failed write was writing: its file, or else the command's outputs."""
    if exc.filename:
        return str(exc.filename)
    outputs = [f"{option} {getattr(args, name)}"
               for option, name in (("--out", "out"), ("--report", "report"),
                                    ("--timeline", "timeline"))
               if getattr(args, name, None) is not None]
    return " or ".join(outputs) or "an output file"


def _is_report_error(exc: Exception) -> bool:
    # `reports` (Altair) is imported only by the commands that draw; so is its error type.
    reports = sys.modules.get("reports")
    return reports is not None and isinstance(exc, reports.ReportError)


if __name__ == "__main__":
    sys.exit(main())
