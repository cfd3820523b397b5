"""Every benchmark script refuses a second, different value of an option of one value, as dse
does (issue 26).

argparse keeps the last of two values and drops the first without a word
(``python -m benchmarks.gpu.llm_decode --out a.csv --out b.csv`` appended to b.csv only). Every
script under benchmarks/ builds its parser with :class:`dse.cli.parser.Parser` (collect's
``_Parser`` is one, with its own one-line error), which refuses it in one line, exit 2; the same
value twice is accepted. The scripts are found by their source (every one that parses a command
line), and each parser is walked, so a new script or option is covered without a change here.

dse is importable wherever the scripts run: from the repository root (``python -m
benchmarks...``, the checkout on ``sys.path``), on the GPU machine after ``pip install -e
'.[export]'`` (benchmarks/gpu/COLLECT.md; collect.py imported dse before this), and
``python3 benchmarks/gpu/summarize.py`` (stdlib only) adds the checkout itself:
``dse.cli.parser`` needs nothing outside the standard library.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from dse.cli.parser import Parser, _StoreOnce
from tests.test_cli_single_values import parsed_values, single_value_options

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"

#: The one script that cannot be imported without torch and timm (it imports them at the top
#: to time trace export); skipped where they are not installed.
NEEDS_TORCH = {"benchmarks.export_time": ("torch", "timm")}

# values tried, in order, until two of an option's type are taken and differ
CANDIDATES = ["1", "2", "3", "8", "0.5", "a.csv", "b.csv", "a", "b", "cpu", "cuda"]


def _scripts() -> list[str]:
    """The module of every script under benchmarks/ that parses a command line."""
    found = []
    for path in sorted(BENCHMARKS.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "parse_args(" in text or "parse_benchmark_args(" in text:
            found.append(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return found


SCRIPTS = _scripts()


class _Built(Exception):
    """Raised in place of parsing: carries the parser main() built."""


def _parser(module) -> argparse.ArgumentParser:
    """The parser the script's main() parses with."""
    for name in ("build_parser", "_parser"):
        if hasattr(module, name):
            return getattr(module, name)()
    if hasattr(module, "parse_benchmark_args"):  # evaluator_throughput's, shared
        from benchmarks.evaluator_throughput import benchmark_parser

        def built(prog, doc, repeats, repeats_help, strict_help, argv, more=None):
            raise _Built(benchmark_parser(prog, doc, repeats, repeats_help, strict_help, more))

        original = module.parse_benchmark_args
        module.parse_benchmark_args = built
        try:
            module.main([])
        except _Built as done:
            return done.args[0]
        finally:
            module.parse_benchmark_args = original
    raise AssertionError(f"{module.__name__}: build its parser in a build_parser() function")


def _import(name: str):
    for package in NEEDS_TORCH.get(name, ()):
        pytest.importorskip(package, reason=f"{name} imports {package} at the top")
    return importlib.import_module(name)


def _values(parser: argparse.ArgumentParser, action: argparse.Action, n: int = 2) -> list[str]:
    """``n`` strings the option takes, with different parsed values."""
    got = parsed_values(parser, action, CANDIDATES, n)
    assert got is not None, f"{action.option_strings}: no {n} values in the pool; add some"
    return got


def _required(parser: argparse.ArgumentParser, but: argparse.Action) -> list[str]:
    """A command line giving every required option and positional other than ``but``."""
    argv: list[str] = []
    for action in parser._actions:
        if action is but or not action.required:
            continue
        value = _values(parser, action, 1)[0] if action.type is not None or action.choices \
            else "x"
        argv += [action.option_strings[0], value] if action.option_strings else [value]
    return argv


def _parse(parser: argparse.ArgumentParser, argv: list[str], capsys):
    """(exit code, stderr lines, namespace) of parsing ``argv``."""
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        err = capsys.readouterr().err
        return exc.code, [line for line in err.splitlines() if line.strip()], None
    return 0, [line for line in capsys.readouterr().err.splitlines() if line.strip()], args


def test_the_walk_finds_every_script():
    assert len(SCRIPTS) >= 29, SCRIPTS
    assert {"benchmarks.gpu.collect", "benchmarks.gpu.summarize", "benchmarks.simulator_speed",
            "benchmarks.llm.design_cost", "benchmarks.mutation"} <= set(SCRIPTS), SCRIPTS


def test_no_script_builds_a_plain_argparse_parser():
    plain = [str(p.relative_to(ROOT)) for p in sorted(BENCHMARKS.rglob("*.py"))
             if "argparse.ArgumentParser(" in p.read_text(encoding="utf-8")]
    assert plain == [], f"build these with dse.cli.parser.Parser: {plain}"


def test_the_scripts_import_without_torch():
    """Blocked torch, timm and transformers: every script but NEEDS_TORCH still imports."""
    names = [n for n in SCRIPTS if n not in NEEDS_TORCH]
    code = ("import importlib, sys\n"
            "for blocked in ('torch', 'timm', 'transformers'):\n"
            "    sys.modules[blocked] = None\n"
            f"for name in {names!r}:\n"
            "    importlib.import_module(name)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_second_different_value_is_refused_in_one_line(name, capsys):
    parser = _parser(_import(name))
    assert isinstance(parser, Parser), name
    options = single_value_options(parser)
    for action in options:
        assert isinstance(action, _StoreOnce), (name, action.option_strings)
    for action in options:
        option = max(action.option_strings, key=len)
        first, second = _values(parser, action)
        others = _required(parser, but=action)
        code, lines, _ = _parse(parser, [*others, option, first, option, second], capsys)
        assert code == 2, (name, option, lines)
        assert len(lines) == 1 and "Traceback" not in lines[0], (name, option, lines)
        assert f": {option} given twice (" in lines[0], lines[0]
        assert "): give it once, or run " in lines[0], lines[0]
        # the same value twice is one value
        code, lines, args = _parse(parser, [*others, option, first, option, first], capsys)
        assert code == 0, (name, option, lines)
        assert getattr(args, action.dest) == parser._get_value(action, first), (name, option)


def test_collect_keeps_its_own_one_line_form(capsys):
    from benchmarks.gpu import collect

    code = collect.main(["--device", "cpu", "--seed", "1", "--seed", "2"])
    assert code == 2
    assert capsys.readouterr().err == ("collect: --seed given twice (1, 2): give it once, or "
                                       "run benchmarks/gpu/collect once for each\n")


def test_summarize_runs_without_dse_installed(tmp_path):
    """``python3 benchmarks/gpu/summarize.py``, stdlib only: dse's parser from the checkout."""
    done = subprocess.run([sys.executable, "-S", str(BENCHMARKS / "gpu" / "summarize.py"),
                           "--repeat", "a.csv", "--repeat", "b.csv"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr == ("summarize.py: error: --repeat given twice (a.csv, b.csv): give it "
                           "once, or run summarize.py once for each (see summarize.py --help)\n")
