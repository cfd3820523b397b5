"""Every option of one value refuses a second, different value (issue 26).

argparse keeps the last of two values of a single-value option and drops the first without a
word (``dse evaluate --out a.csv --out b.csv`` wrote b.csv only, exit 0). :class:`dse.cli.parser.
Parser` stores every such option with an action that refuses a second, different value (a
first equal to the default included) in one line, exit 2; the same value again is accepted.
The tables walk the built parser, so a new option is covered without a change here.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from dse.cli.main import build_parser
from dse.cli.parser import Parser, _StoreOnce, given_twice
from tests.cli_run import run_cli
from tests.test_cli_reliability_round6 import _refused  # one line, exit 2, no traceback

# values tried, in order, until two of an option's type are taken and differ
CANDIDATES = ["1", "2", "3", "4", "8", "0.5", "0.25", "a.csv", "b.csv", "a.toml", "b.toml",
              "a.json", "b.json", "a.parquet", "b.parquet", "fp16", "fp32", "bf16", "tf32",
              "int8", "box", "other", "1s", "2s", "10", "20", "1e9", "2e9", "auto"]


def _commands(parser: argparse.ArgumentParser, path=()):
    """(command words, its parser) of every command and subcommand, deepest included."""
    found = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen = set()
            for name, sub in action.choices.items():
                if id(sub) in seen:  # an alias
                    continue
                seen.add(id(sub))
                found = True
                yield from _commands(sub, (*path, name))
    if not found and path:
        yield path, parser


def single_value_options(parser: argparse.ArgumentParser):
    return [a for a in parser._actions
            if a.option_strings and isinstance(a, argparse._StoreAction)
            and a.nargs in (None, "?")]


def parsed_values(parser, action, pool=CANDIDATES, n: int = 2) -> list[str] | None:
    """``n`` strings of ``pool`` (or the option's choices) that ``action`` takes, with
    different parsed values; None where the pool has fewer. Shared with the benchmark
    scripts' walk (tests/test_benchmark_options.py)."""
    pool = [str(c) for c in action.choices] if action.choices else pool
    taken: list[tuple[str, object]] = []
    for text in pool:
        try:
            value = parser._get_value(action, text)
            parser._check_value(action, value)
        except (argparse.ArgumentError, argparse.ArgumentTypeError, TypeError, ValueError):
            continue
        if all(value != v for _t, v in taken):
            taken.append((text, value))
        if len(taken) == n:
            return [t for t, _v in taken]
    return None


def _two_values(parser, action) -> tuple[str, str] | None:
    """Two strings the option takes, with different parsed values; None where none were found."""
    got = parsed_values(parser, action)
    return None if got is None else (got[0], got[1])


PARSER = build_parser()
COMMANDS = list(_commands(PARSER))
OPTIONS = [(words, max(a.option_strings, key=len), _two_values(sub, a))
           for words, sub in COMMANDS for a in single_value_options(sub)]
CASES = [pytest.param(words, option, values, id=" ".join((*words, option)))
         for words, option, values in OPTIONS if values is not None]


def test_the_walk_finds_the_commands_and_their_options():
    names = {" ".join(words) for words, _sub in COMMANDS}
    assert {"evaluate", "simulate", "hw probe", "hw show"} <= names, sorted(names)
    assert len(OPTIONS) >= 30, len(OPTIONS)
    # nearly every option gets two values from the pool; the few left are said here
    untested = [" ".join((*w, o)) for w, o, v in OPTIONS if v is None]
    assert len(untested) <= len(OPTIONS) // 4, untested


@pytest.mark.parametrize("words, sub", [pytest.param(w, s, id=" ".join(w)) for w, s in COMMANDS])
def test_every_single_value_option_stores_once(words, sub):
    assert isinstance(sub, Parser), words
    for action in single_value_options(sub):
        assert isinstance(action, _StoreOnce), (words, action.option_strings)


def _parse_error(argv: list[str], capsys) -> tuple[int | None, str]:
    """What parsing ``argv`` with the whole parser exits with, and its stderr."""
    try:
        PARSER.parse_args(argv)
    except SystemExit as exc:
        return exc.code, capsys.readouterr().err
    return 0, capsys.readouterr().err


@pytest.mark.parametrize("words, option, values", CASES)
def test_two_different_values_are_refused(words, option, values, capsys):
    first, second = values
    code, err = _parse_error([*words, option, first, option, second], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    command = f"dse {' '.join(words)}"  # the values as parsed: 1 may read 1.0
    assert lines[0].startswith(f"{command}: error: {option} given twice ("), lines[0]
    assert lines[0].endswith(f"): give it once, or run {command} once for each "
                             f"(see {command} --help)"), lines[0]


@pytest.mark.parametrize("words, option, values", CASES)
def test_the_same_value_twice_is_not_refused(words, option, values, capsys):
    _code, err = _parse_error([*words, option, values[0], option, values[0]], capsys)
    assert "given twice" not in err, err  # may still miss a required option: not this rule


@pytest.mark.parametrize("argv, option", [
    (["evaluate", "--model", "resnet50", "--hw", "a100", "--out", "a.csv", "--out", "b.csv"],
     "--out"),
    (["evaluate", "--model", "resnet50", "--hw", "a100", "--out=a.csv", "--out", "b.csv"],
     "--out"),
    (["evaluate", "--model", "resnet50", "--hw", "a100", "--ou", "a.csv", "--out", "b.csv"],
     "--out"),
    (["evaluate", "--model", "resnet50", "--hw", "a100", "--dtype", "fp16", "--dtype", "bf16",
      "--out", "a.csv"], "--dtype"),
    (["simulate", "--model", "resnet50", "--hw", "a100", "--out", "a.csv", "--out", "b.csv"],
     "--out"),
    (["hw", "probe", "--out", "host.toml", "--out", "b.toml"], "--out"),
    (["hw", "probe", "--device", "cpu", "--device", "cuda"], "--device"),
    (["hw", "probe", "--repeats", "7", "--repeats", "9"], "--repeats"),
], ids=["out", "out=", "abbreviation", "dtype", "simulate out", "probe out default first",
        "probe device", "probe repeats default first"])
def test_the_command_line_refuses_and_writes_nothing(argv, option, tmp_path, monkeypatch,
                                                     capsys):
    from dse.measure import probe

    monkeypatch.setattr(probe, "probe", lambda *a, **k: pytest.fail("the probe ran"))
    monkeypatch.chdir(tmp_path)
    line = _refused(argv, capsys)
    assert f": error: {option} given twice (" in line, line
    assert "): give it once, or run dse " in line and "argument" not in line, line
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("argv", [
    ["evaluate", "--model", "resnet50", "--hw", "a100", "--dtype", "fp16", "--dtype", "fp16",
     "--out", "a.csv", "--out", "a.csv"],
    # a repeatable design option the command takes once, given twice with one value
    ["simulate", "--model", "resnet50", "--hw", "a100", "--format", "2:4", "--batch", "8",
     "--batch", "8", "--out", "a.csv"],
], ids=["option of one value", "simulate batch"])
def test_the_same_value_twice_runs(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = run_cli(argv)
    assert code == 0, capsys.readouterr().err
    assert os.listdir(tmp_path) == ["a.csv"]


def test_the_record_of_values_stays_out_of_the_namespace():
    args = build_parser("hw").parse_args(["hw", "probe", "--device", "cpu", "--device", "cpu"])
    assert args.device == "cpu"
    assert not any(key.startswith("_") for key in vars(args)), vars(args)
    assert args.out == Path("host.toml") and args.name == "host"  # the real defaults
    assert args.repeats == 7 and args.wait_idle == 0.0


def test_a_parser_parses_again_with_a_fresh_record():
    parser = build_parser("hw")
    parser.parse_args(["hw", "probe", "--out", "a.toml"])
    assert parser.parse_args(["hw", "probe", "--out", "b.toml"]).out == Path("b.toml")


def test_hw_probe_device_cpu_twice_is_accepted(tmp_path, monkeypatch, capsys):
    """The same value twice passes parsing; the catalog-name check still runs after it."""
    monkeypatch.chdir(tmp_path)
    line = _refused(["hw", "probe", "--device", "cpu", "--device", "cpu", "--name", "a100"],
                    capsys)
    assert line.startswith("dse: error: --name a100: the name of a catalog spec"), line
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("out, example", [(".toml", "out.toml"), ("host", "host.toml"),
                                          ("sub/.toml", "sub/out.toml")])
def test_hw_probe_out_without_a_type_names_the_fix(out, example, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = _refused(["hw", "probe", "--out", out], capsys)
    assert line == (f"dse: error: --out {out}: the file name has no type; give a name ending "
                    f"in .toml, e.g. --out {example}"), line
    assert "(none)" not in line
    assert os.listdir(tmp_path) == []


def test_the_refusal_masks_a_password(capsys):
    code, err = _parse_error(["search", "--storage", "postgresql://u:pw1@h/db",
                              "--storage", "postgresql://u:pw2@h/db"], capsys)
    assert code == 2 and "given twice" in err, err
    assert "pw1" not in err and "pw2" not in err, err
    # the masked texts read the same: the line says they differ, in the password
    assert "--storage given twice (postgresql://u:***@h/db with two different passwords): " \
           "give it once, or run dse search once for each" in err, err


def test_the_refusal_shows_both_masked_urls_where_more_than_the_password_differs(capsys):
    code, err = _parse_error(["search", "--storage", "postgresql://u:pw1@h/db",
                              "--storage", "postgresql://u:pw1@h/db2"], capsys)
    assert code == 2 and "pw1" not in err, err
    assert "(postgresql://u:***@h/db, postgresql://u:***@h/db2): give it once" in err, err
    assert "password" not in err, err


@pytest.mark.parametrize("argv, option, values", [
    (["simulate", "--model", "resnet50", "--hw", "a100", "--format", "2:4", "--batch", "1",
      "--batch", "8", "--out", "a.csv"], "--batch", "1, 8"),
    (["simulate", "--model", "resnet50", "--model", "deit_small", "--hw", "a100",
      "--out", "a.csv"], "--model", "resnet50, deit_small"),
    (["simulate", "--model", "resnet50", "--hw", "a100", "--hw", "h100", "--out", "a.csv"],
     "--hw", "a100, h100"),
    (["report", "--model", "resnet50", "--hw", "a100", "--format", "2:4", "--fusion", "unfused",
      "--fusion", "fused", "--out", "r"], "--fusion", "unfused, fused"),
], ids=["simulate batch", "simulate model", "simulate hw", "report fusion"])
def test_a_repeatable_option_a_command_takes_once_refuses_a_second_value(
        argv, option, values, tmp_path, monkeypatch, capsys):
    """``dse simulate --batch 1 --batch 8`` simulated batch 8 and dropped batch 1 without a
    word (the same value twice runs: test_the_same_value_twice_runs)."""
    monkeypatch.chdir(tmp_path)
    line = _refused(argv, capsys)
    # the same form as an option of one value given twice (test_the_command_line_refuses...)
    assert line == (f"dse: error: {option} given twice ({values}): give it once, or run "
                    f"dse {argv[0]} once for each"), line
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("values, shown", [
    (["a.csv", "b.csv"], "given twice (a.csv, b.csv)"),
    (["1", "8", "16"], "given 3 different values (1, 8, 16)"),
    (["postgresql://u:p1@h/db", "postgresql://u:p2@h/db"],
     "given twice (postgresql://u:***@h/db with two different passwords)"),
    (["postgresql://u:p1@h/db", "postgresql://u:p2@h/db", "postgresql://u:p3@h/db",
      "sqlite:///s.db"],
     "given 4 different values (postgresql://u:***@h/db with 3 different passwords, sqlite:///s.db)"),
    (["x?password=p1", "x?password=p2"], "given twice (x?password=*** with two different "
                                         "passwords)"),
], ids=["two", "three", "passwords", "three passwords and another", "password parameter"])
def test_the_one_form_of_the_refusal(values, shown):
    assert given_twice("--opt", values, "dse cmd") == (
        f"--opt {shown}: give it once, or run dse cmd once for each")


def test_a_repeatable_option_given_three_values_names_them(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = _refused(["simulate", "--model", "resnet50", "--hw", "a100", "--batch", "1",
                     "--batch", "8", "--batch", "1", "--batch", "16", "--out", "a.csv"], capsys)
    assert line == ("dse: error: --batch given 3 different values (1, 8, 16): give it once, "
                    "or run dse simulate once for each"), line
    assert os.listdir(tmp_path) == []
