"""The shipped default accuracy table: complete, produced by its recorded command, sane."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

import formats
from dse.accuracy import DEFAULT_LEVELS, DEFAULT_PATTERNS, load_accuracy_table, plan
from dse.cli.main import build_parser

TABLES = Path(__file__).resolve().parent.parent / "dse" / "accuracy" / "tables"
TABLE = TABLES / "accuracy_default.csv"
MODELS = ("convnext_tiny", "swin_tiny_patch4_window7_224")


@pytest.fixture(scope="module")
def table():
    return load_accuracy_table(TABLE)


@pytest.fixture(scope="module")
def provenance():
    return json.loads(TABLE.with_suffix(".json").read_text())


def test_every_default_pattern_and_level_for_both_models(table):
    expected = {"dense"} | {s.fmt.name for s in plan(DEFAULT_PATTERNS, DEFAULT_LEVELS)}
    assert set(table.models()) == set(MODELS)
    for model in MODELS:
        assert set(table.patterns(model)) == expected, model
    # 5 unstructured + 25 block + 5 N:M (1:2, 1:4, 2:4, 2:8, 2:16) + dense.
    assert len(expected) == 36


def test_dense_baselines_far_above_chance(table):
    for model in MODELS:
        dense = table.lookup(model, "dense")
        assert dense.status == "measured"
        assert dense.value > 80.0, (model, dense.value)  # 10 classes: chance is 10%


def test_rows_were_produced_by_the_recorded_command(table, provenance):
    command = provenance["command"]
    assert set(table.frame["source"]) == {command}
    args = build_parser().parse_args(shlex.split(command)[1:])
    config = provenance["config"]
    assert tuple(args.models) == tuple(config["models"])
    assert args.img_size == config["img_size"] == 32
    assert args.dataset == config["dataset"]
    assert [p.strip() for p in args.patterns.split(",")] == config["patterns"]
    assert [float(x) for x in args.levels.split(",")] == config["levels"]
    assert (args.dense_epochs, args.finetune_epochs, args.seed) == (
        config["dense_epochs"], config["finetune_epochs"], config["seed"])
    for key in ("python", "torch", "timm", "scikit-learn"):
        assert provenance["environment"][key]
    for model in MODELS:
        assert provenance["wall_s"][model]["dense"] > 0


def test_nm_rows_carry_their_implied_sparsity(table):
    frame = table.frame
    nm = frame[frame["family"] == "nm"]
    for row in nm.itertuples():
        assert row.sparsity == pytest.approx(formats.parse(row.pattern).sparsity)
