"""The design options mean the same thing on every command that takes them.

Every command with ``--batch``, ``--fusion``, ``--hw``, ``--set`` and ``--format`` accepts the same
spellings (repeated options, ``--hw a,b``, the last value where a command takes one) and refuses
the same bad value with the same one-line error.
"""

from __future__ import annotations

import pytest

from dse.cli import main
from dse.cli.main import build_parser
from dse.cli.options import InputError, design_from_args

#: Each command with the design options: its argv up to them, its own required options, and
#: whether it takes one design (simulate) or one --hw (the study).
COMMANDS = {
    "evaluate": (["evaluate"], []),
    "simulate": (["simulate"], []),
    "report": (["report"], ["--out", "{tmp}/report"]),
    "compare": (["compare"], []),
    "sweep": (["sweep"], ["--vary", "batch=1,2", "--out", "{tmp}/sweep.parquet"]),
    "study": (["study", "feature-overhead"], ["--out", "{tmp}/study"]),
}
BASE = ["--model", "toy_hybrid", "--hw", "a100", "--format", "2:4"]
SINGLE_HW = {"simulate", "study"}
#: The repeatable design options each command takes one value of (a second is refused).
SINGLE = {"simulate": {"--model", "--hw", "--format", "--batch", "--fusion"},
          "report": {"--fusion"}, "study": {"--hw", "--fusion"}}


def _argv(command: str, tmp_path, *extra: str) -> list[str]:
    """The command with BASE's design, where extra gives one of its options of one value in
    place of BASE's."""
    head, own = COMMANDS[command]
    own = [a.replace("{tmp}", str(tmp_path)) for a in own]
    replaced = set(extra) & SINGLE.get(command, set())
    base = [a for pair in zip(BASE[::2], BASE[1::2], strict=True) if pair[0] not in replaced
            for a in pair]
    return [*head, *base, *own, *extra]


def _design(command, tmp_path, *extra):
    args = build_parser().parse_args(_argv(command, tmp_path, *extra))
    return design_from_args(args)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_design_command_has_every_design_option(command, capsys):
    head, _ = COMMANDS[command]
    with pytest.raises(SystemExit):
        main([*head, "--help"])
    text = capsys.readouterr().out
    for option in ("--model", "--hw", "--set", "--format", "--batch", "--fusion", "--scope",
                   "--dtype", "--vector-dtype", "--csr-dtype", "--index-bytes"):
        assert option in text, (command, option)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_same_spellings_mean_the_same(command, tmp_path):
    d = _design(command, tmp_path, "--batch", "8", "--fusion", "fused",
                "--set", "dram_bandwidth_bytes_per_s=2e12", "--dtype", "bf16")
    assert d.batches == [8] and d.fusions == ["fused"] and d.formats == ["2:4"]
    assert d.hardware[0].dram_bandwidth_bytes_per_s == 2e12
    assert d.hardware[0].name == "a100-40gb[dram_bandwidth_bytes_per_s=2e12]"
    assert d.numerics.dtype == "bf16"
    # Repeated options: every value, or refused where the command takes one.
    repeated = ("--batch", "4", "--batch", "16", "--fusion", "unfused",
                "--fusion", "fused_prefetched", "--format", "1:4")
    one = SINGLE.get(command, set()) & {"--batch", "--fusion", "--format"}
    if one:
        with pytest.raises(InputError, match=r"given twice \(.*\): give it once, or run "
                                             r"dse [\w -]+ once for each"):
            _design(command, tmp_path, *repeated)
        return
    d = _design(command, tmp_path, *repeated)
    assert d.batches == [4, 16]
    assert d.fusions == ["unfused", "fused_prefetched"]
    assert d.formats == ["2:4", "1:4"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_hw_lists(command, tmp_path, capsys):
    if command in SINGLE_HW:
        assert main(_argv(command, tmp_path, "--hw", "a100,h100")) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--hw a100,h100" in err[0] and "takes one" in err[0]
        return
    d = _design(command, tmp_path, "--hw", "h100, a100-80gb", "--hw", "a100")
    assert [a.name for a in d.hardware] == ["a100-40gb", "h100-sxm", "a100-80gb"]


#: Bad values, each refused with the same message (after the command's prefix) everywhere.
BAD = {
    "batch zero": (["--batch", "0"], "argument --batch: '0' must be at least 1"),
    "batch text": (["--batch", "two"], "argument --batch: 'two' is not an integer"),
    "batch huge": (["--batch", "99999999999999999999999"], "above the largest batch size"),
    "fusion": (["--fusion", "fusedd"], "argument --fusion: invalid choice: 'fusedd'"),
    "hw": (["--hw", "a1000"], "unknown hardware 'a1000'"),
    "set field": (["--set", "dram_bandwith_bytes_per_s=2e12"], "unknown field"),
    "set value": (["--set", "dram_bandwidth_bytes_per_s=-1"], "dram_bandwidth_bytes_per_s"),
    "format": (["--format", "3:2"], "3:2"),
    "dtype": (["--dtype", "fp64"], "dtype 'fp64' is not a tensor-core dtype"),
}


def _error(command: str, tmp_path, capsys, extra: list[str]) -> str:
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(_argv(command, tmp_path, *extra)) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
    return lines[0]


@pytest.mark.parametrize("case", sorted(BAD))
def test_the_same_bad_value_gives_the_same_error_everywhere(case, tmp_path, capsys):
    extra, needle = BAD[case]
    messages = {}
    for command in COMMANDS:
        try:
            line = _error(command, tmp_path, capsys, extra)
        except SystemExit as exc:  # argparse's own errors exit from inside main
            assert exc.code == 2
            line = capsys.readouterr().err.strip()
            assert len(line.splitlines()) == 1
        assert needle in line, (command, line)
        # The message after "dse ...: error: " is the same for every command.
        messages[command] = line.split("error: ", 1)[1].split(" (see dse")[0]
    assert len(set(messages.values())) == 1, messages


@pytest.mark.parametrize(("argv", "hint"), [
    (["evaulate"], "did you mean evaluate?"),
    (["hw", "shwo", "a100"], "did you mean show?"),
    (["evaluate", "--model", "toy_hybrid", "--hw", "a100", "--fusion", "fusd"],
     "did you mean fused?"),
])
def test_a_near_miss_gets_a_suggestion(argv, hint, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1 and hint in err, err


def test_a_far_miss_gets_none(capsys):
    with pytest.raises(SystemExit):
        main(["qqqqqq"])
    assert "did you mean" not in capsys.readouterr().err
