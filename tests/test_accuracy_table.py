"""Accuracy tables: the CSV schema's checks, lookups worked by hand, and lookup invariants."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dse.accuracy import COLUMNS, AccuracyTable, AccuracyTableError, load_accuracy_table
from formats import NM, Block, Unstructured, parse

MODEL = "resnet18"
DATASET = "sklearn-digits-32px"
HEADER = ",".join(COLUMNS)
# Row numbers as in a spreadsheet: the header is row 1.
ROWS = [
    "resnet18,dense,dense,,,,0,top1,95.0,sklearn-digits-32px,test",                     # 2
    "resnet18,unstructured@50%,unstructured,,,,0.5,top1,90.0,sklearn-digits-32px,test",  # 3
    "resnet18,unstructured@75%,unstructured,,,,0.75,top1,80.0,sklearn-digits-32px,test",  # 4
    # Noisy: above the 75% point; capped to 80.0 when interpolating.
    "resnet18,unstructured@87.5%,unstructured,,,,0.875,top1,82.0,sklearn-digits-32px,test",  # 5
    "resnet18,unstructured@93.75%,unstructured,,,,0.9375,top1,60.0,sklearn-digits-32px,test",  # 6
    "resnet18,block4@50%,block,4,,,0.5,top1,88.0,sklearn-digits-32px,test",  # 7
    "resnet18,block4@75%,block,4,,,0.75,top1,70.0,sklearn-digits-32px,test",  # 8
    "resnet18,block8@87.5%,block,8,,,0.875,top1,50.0,sklearn-digits-32px,test",  # 9
    "resnet18,2:4,nm,,2,4,0.5,top1,89.0,sklearn-digits-32px,test",  # 10
    "resnet18,1:4,nm,,1,4,0.75,top1,80.0,sklearn-digits-32px,test",  # 11
    "resnet18,2:8,nm,,2,8,0.75,top1,78.0,sklearn-digits-32px,test",  # 12
    "resnet18,2:16,nm,,2,16,0.875,top1,70.0,sklearn-digits-32px,test",  # 13
]


def csv_text(rows=ROWS, header=HEADER) -> str:
    return "\n".join([header, *rows]) + "\n"


def edited(row: int, column: str, value: str) -> str:
    """The good table with one cell (spreadsheet row number, column name) replaced."""
    rows = [line.split(",") for line in ROWS]
    rows[row - 2][COLUMNS.index(column)] = value
    return csv_text([",".join(cells) for cells in rows])


def record(pattern: str, value: float, model: str = MODEL, dataset: str = DATASET,
           metric: str = "top1") -> dict:
    """A consistent row for ``pattern``, for tables built in memory."""
    fmt = parse(pattern)
    return {"model": model, "pattern": fmt.name, "family": fmt.family,
            "block": fmt.block if isinstance(fmt, Block) else None,
            "n": fmt.n if isinstance(fmt, NM) else None,
            "m": fmt.m if isinstance(fmt, NM) else None,
            "sparsity": fmt.sparsity, "metric": metric, "value": value, "dataset": dataset,
            "source": "tests/test_accuracy_table.py"}


@pytest.fixture
def table_path(tmp_path):
    path = tmp_path / "accuracy.csv"
    path.write_text(csv_text())
    return path


@pytest.fixture
def table(table_path):
    return load_accuracy_table(table_path)


# --- loading ----------------------------------------------------------------------------------

def test_load_types_and_listing(table):
    assert len(table) == 12
    assert table.models() == [MODEL]
    assert table.patterns(MODEL) == [
        "dense", "2:4", "1:4", "2:8", "2:16", "block4@50%", "block4@75%", "block8@87.5%",
        "unstructured@50%", "unstructured@75%", "unstructured@87.5%", "unstructured@93.75%"]
    assert table.patterns("vit_small") == []
    assert table.scale == {("top1", DATASET): "percent"}
    frame = table.frame
    assert list(frame.columns) == list(COLUMNS)
    assert frame.loc[frame["pattern"] == "block4@50%", "block"].item() == 4
    assert frame.loc[frame["pattern"] == "2:16", ["n", "m"]].values.tolist() == [[2, 16]]
    assert frame["block"].isna().sum() == 9


def test_csv_round_trip(table, tmp_path):
    out = tmp_path / "copy.csv"
    table.to_csv(out)
    assert out.read_text().splitlines()[0] == HEADER
    again = load_accuracy_table(out)
    pd.testing.assert_frame_equal(again.frame, table.frame)
    # Atomic: nothing but the result is left beside it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["accuracy.csv", "copy.csv"]


def test_to_csv_overwrites_and_reports_unwritable(table, tmp_path):
    out = tmp_path / "copy.csv"
    out.write_text("old")
    table.to_csv(out)
    assert load_accuracy_table(out).frame.equals(table.frame)
    with pytest.raises(AccuracyTableError, match="cannot write"):
        table.to_csv(tmp_path / "no" / "such" / "dir.csv")


def test_fraction_table_is_converted_to_percent(tmp_path):
    # Same table on the 0-1 scale, plus a 0 (reads the same on both scales, decides nothing).
    rows = [line.replace(f",{v},", f",{float(v) / 100:g},")
            for line in ROWS for v in [line.split(",")[8]]]
    rows.append("resnet18,1:16,nm,,1,16,0.9375,top1,0,sklearn-digits-32px,test")
    path = tmp_path / "fractions.csv"
    path.write_text(csv_text(rows))
    table = load_accuracy_table(path)
    assert table.scale == {("top1", DATASET): "fraction"}
    assert table.lookup(MODEL, "dense").value == pytest.approx(95.0)
    assert table.lookup(MODEL, "1:16").value == 0.0
    assert table.lookup(MODEL, "unstructured@62.5%").value == pytest.approx(85.0)
    # Written back in percent.
    table.to_csv(path)
    assert load_accuracy_table(path).scale == {("top1", DATASET): "percent"}


def test_spreadsheet_habits_are_accepted(tmp_path):
    # A byte-order mark, spaces around cells, a blank line and a trailing empty row.
    path = tmp_path / "excel.csv"
    text = "\ufeff" + HEADER + "\n" + ROWS[0].replace(",", " , ") + "\n\n" + ROWS[1] + "\n"
    path.write_text(text + ",,,,,,,,,,\n", encoding="utf-8")
    table = load_accuracy_table(path)
    assert table.patterns(MODEL) == ["dense", "unstructured@50%"]


def test_sparsity_cell_is_a_rounded_check_on_the_pattern(tmp_path):
    # 1:3 removes 0.666...; a hand-written 0.6667 stands for it, the pattern's figure is kept.
    path = tmp_path / "third.csv"
    path.write_text(csv_text(ROWS[:1] + ["resnet18,1:3,nm,,1,3,0.6667,top1,85,"
                                         "sklearn-digits-32px,test"]))
    table = load_accuracy_table(path)
    assert table.frame["sparsity"].iloc[1] == 1 - 1 / 3


def test_from_frame_takes_float_integer_columns_and_names_itself():
    frame = pd.DataFrame([record("dense", 95.0), record("2:4", 89.0), record("block4@50%", 88.0)])
    assert frame["n"].dtype == float  # ints and NaN become float in a frame
    table = AccuracyTable.from_frame(frame, where="sweep results")
    assert table.lookup(MODEL, "2:4").value == 89.0
    bad = frame.assign(value=[95.0, 189.0, 88.0])
    with pytest.raises(AccuracyTableError, match=r"^sweep results, row 3, column 'value'"):
        AccuracyTable.from_frame(bad, where="sweep results")


# Every bad input: (table text, row named, column named or None, phrase in the message).
BAD = {
    "missing column": (csv_text([r.rsplit(",", 1)[0] for r in ROWS], HEADER.rsplit(",", 1)[0]),
                       1, None, "missing columns 'source'"),
    "unknown column": (csv_text([r + ",x" for r in ROWS], HEADER + ",notes"),
                       1, None, "unknown columns 'notes'"),
    "duplicate column": (csv_text([r + ",x" for r in ROWS], HEADER + ",model"),
                         1, "model", "appears twice"),
    "empty value": (edited(4, "value", ""), 4, "value", "empty"),
    "empty model": (edited(3, "model", ""), 3, "model", "empty"),
    "empty source": (edited(13, "source", ""), 13, "source", "empty"),
    "bad N:M": (edited(10, "pattern", "3:2"), 10, "pattern", "1 <= N < M"),
    "no sparsity": (edited(7, "pattern", "block4"), 7, "pattern", "need a sparsity"),
    "not canonical": (edited(3, "pattern", "csr@0.5"), 3, "pattern", "'unstructured@50%'"),
    "unknown family": (edited(10, "family", "sparse"), 10, "family", "unknown family"),
    "family differs": (edited(10, "family", "block"), 10, "family", "inconsistent"),
    "n differs": (edited(10, "n", "1"), 10, "n", "inconsistent"),
    "m not whole": (edited(10, "m", "4.5"), 10, "m", "not a whole number"),
    "block on unstructured": (edited(3, "block", "4"), 3, "block", "leave it empty"),
    "block missing": (edited(7, "block", ""), 7, "block", "needs block = 4"),
    "block differs": (edited(9, "block", "4"), 9, "block", "inconsistent"),
    "sparsity differs": (edited(3, "sparsity", "0.6"), 3, "sparsity", "inconsistent"),
    "sparsity in percent": (edited(5, "sparsity", "87.5"), 5, "sparsity", "0.875 for 87.5%"),
    "sparsity 1": (edited(5, "sparsity", "1"), 5, "sparsity", "outside [0, 1)"),
    "sparsity text": (edited(5, "sparsity", "87.5%"), 5, "sparsity", "not a number"),
    "value above 100": (edited(4, "value", "120"), 4, "value", "outside [0, 100]"),
    "value negative": (edited(4, "value", "-1"), 4, "value", "outside [0, 100]"),
    "value nan": (edited(4, "value", "nan"), 4, "value", "not a finite number"),
    "duplicate key": (csv_text(ROWS + [ROWS[1].replace("90.0", "91.0")]), 14, "pattern",
                      "rows 3 and 14 both measure model 'resnet18', pattern 'unstructured@50%'"),
    "mixed scales": (edited(4, "value", "0.76"), 4, "value",
                     "mixed scales: row 4 is 0.76 but row 2 is 95; use percent (0-100) or "
                     "fractions (0-1) throughout"),
    "cell count": (csv_text(ROWS[:4] + [ROWS[4] + ",extra"] + ROWS[5:]), 6, None,
                   "12 cells but the header has 11"),
    "no header": ("", 1, None, "no header"),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_table_names_file_row_and_column(tmp_path, name):
    text, row, column, phrase = BAD[name]
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(AccuracyTableError) as caught:
        load_accuracy_table(path)
    message = str(caught.value)
    place = f"{path}, row {row}" + (f", column {column!r}" if column else "") + ": "
    assert message.startswith(place), message
    assert phrase in message
    assert "\n" not in message


def test_malformed_and_unreadable_files(tmp_path):
    quote = tmp_path / "quote.csv"
    quote.write_text(csv_text() + '"resnet18,dense\n')
    with pytest.raises(AccuracyTableError, match=rf"^{quote}, line \d+: malformed CSV"):
        load_accuracy_table(quote)
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00model")
    with pytest.raises(AccuracyTableError, match=rf"^{binary}: not UTF-8"):
        load_accuracy_table(binary)
    with pytest.raises(AccuracyTableError, match="cannot read"):
        load_accuracy_table(tmp_path / "absent.csv")
    with pytest.raises(AccuracyTableError, match="cannot read"):
        load_accuracy_table(tmp_path)


# --- lookups, worked by hand ------------------------------------------------------------------

# (format, expected accuracy, status). Points: dense 95; unstructured 50% 90, 75% 80,
# 87.5% 82 (capped to 80), 93.75% 60; block4 50% 88, 75% 70; block8 87.5% 50;
# N:M 2:4 (50%) 89, 1:4 and 2:8 (75%) 80 and 78 (mean 79), 2:16 (87.5%) 70.
GOLDEN = [
    ("unstructured@50%", 90.0, "measured"),
    ("dense", 95.0, "measured"),
    # Noisy points are returned as measured; the cap applies only between points.
    ("unstructured@87.5%", 82.0, "measured"),
    ("2:8", 78.0, "measured"),
    # 90 + (62.5 - 50) / (75 - 50) * (80 - 90) = 85
    ("unstructured@62.5%", 85.0, "interpolated"),
    # Dense anchors every family at 0%: 95 + (25 / 50) * (90 - 95) = 92.5
    ("unstructured@25%", 92.5, "interpolated"),
    # Between 75% (80) and 87.5% (82, capped to 80): 80, not 81.
    ("unstructured@81.25%", 80.0, "interpolated"),
    # Between 87.5% (capped 80) and 93.75% (60): 70, not (82 + 60) / 2 = 71.
    ("unstructured@90.625%", 70.0, "interpolated"),
    # block4: 88 + (62.5 - 50) / 25 * (70 - 88) = 79
    ("block4@62.5%", 79.0, "interpolated"),
    # block8 has only 87.5% (50) besides dense (95): 95 - (50 / 87.5) * 45 = 69.2857...
    ("block8@50%", 95.0 - 50.0 / 87.5 * 45.0, "interpolated"),
    # 3:16 is 81.25%, between the 75% point (mean of 1:4 and 2:8 = 79) and 2:16 (70): 74.5
    ("3:16", 74.5, "interpolated"),
    # 3:12 is 75%: the mean of 1:4 and 2:8
    ("3:12", 79.0, "interpolated"),
    # 3:8 is 62.5%: 89 + (12.5 / 25) * (79 - 89) = 84
    ("3:8", 84.0, "interpolated"),
    # 1:2 is 50% like 2:4, which is measured
    ("1:2", 89.0, "interpolated"),
]


@pytest.mark.parametrize(("fmt", "expected", "status"), GOLDEN)
def test_lookup_golden(table, fmt, expected, status):
    found = table.lookup(MODEL, fmt)
    assert found.status == status, found.note
    assert found.value == pytest.approx(expected, abs=1e-9)
    assert found.note


def test_lookup_neighbours_and_notes(table):
    found = table.lookup(MODEL, "unstructured@81.25%")
    assert found.neighbours == ("unstructured@75%", "unstructured@87.5%")
    assert "capped from 82.00" in found.note
    assert table.lookup(MODEL, "3:16").neighbours == ("1:4", "2:8", "2:16")
    assert table.lookup(MODEL, "unstructured@25%").neighbours == ("dense", "unstructured@50%")
    assert table.lookup(MODEL, "2:4").neighbours == ("2:4",)


def test_block_sizes_do_not_serve_each_other(table):
    # block8@87.5% is measured, yet block4 stops at 75%.
    found = table.lookup(MODEL, "block4@87.5%")
    assert found.status == "out_of_range" and math.isnan(found.value)
    assert "block4 range 0% to 75%" in found.note
    # No block16 rows at all: dense alone does not make a family.
    found = table.lookup(MODEL, "block16@50%")
    assert found.status == "missing" and math.isnan(found.value)
    assert "no block16 rows" in found.note


@pytest.mark.parametrize(("fmt", "measured_range"), [
    ("unstructured@96.875%", "0% to 93.75%"),
    ("1:16", "0% to 87.5%"),
    ("block8@93.75%", "0% to 87.5%"),
])
def test_never_extrapolates(table, fmt, measured_range):
    found = table.lookup(MODEL, fmt)
    assert found.status == "out_of_range"
    assert math.isnan(found.value)
    assert found.neighbours == ()
    assert measured_range in found.note and "not extrapolated" in found.note


def test_without_dense_row_the_lowest_point_bounds_the_range():
    table = AccuracyTable.from_frame(pd.DataFrame([
        record("unstructured@50%", 90.0), record("unstructured@75%", 80.0)]))
    assert table.lookup(MODEL, "unstructured@25%").status == "out_of_range"
    assert table.lookup(MODEL, "dense").status == "missing"
    assert table.lookup(MODEL, "unstructured@60%").value == pytest.approx(86.0)


def test_missing_model_metric_and_dataset(table):
    for found in (table.lookup("vit_small_patch16_224", "2:4"),
                  table.lookup(MODEL, "2:4", metric="top5"),
                  table.lookup(MODEL, "2:4", dataset="imagenet-val")):
        assert found.status == "missing"
        assert math.isnan(found.value)
    assert "resnet18" in table.lookup("vit_small_patch16_224", "2:4").note


def test_dataset_must_be_named_when_a_model_has_several():
    table = AccuracyTable.from_frame(pd.DataFrame([
        record("dense", 95.0), record("2:4", 89.0),
        record("dense", 76.0, dataset="imagenet-val"), record("2:4", 0.7, dataset="other"),
        record("dense", 0.8, dataset="other")]))
    with pytest.raises(AccuracyTableError, match="name one with dataset="):
        table.lookup(MODEL, "2:4")
    assert table.lookup(MODEL, "2:4", dataset=DATASET).value == 89.0
    # Scales are per (metric, dataset): "other" is on the 0-1 scale.
    assert table.scale[("top1", "other")] == "fraction"
    assert table.lookup(MODEL, "2:4", dataset="other").value == pytest.approx(70.0)


def test_lookup_many(table):
    frame = table.lookup_many(MODEL, ["dense", "csr@0.625", parse("3:16"), "block4@87.5%"])
    assert list(frame.columns) == ["format", "accuracy", "status", "note"]
    assert frame["format"].tolist() == ["dense", "unstructured@62.5%", "3:16", "block4@87.5%"]
    assert frame["status"].tolist() == ["measured", "interpolated", "interpolated",
                                        "out_of_range"]
    assert frame["accuracy"].iloc[:3].tolist() == pytest.approx([95.0, 85.0, 74.5])
    assert math.isnan(frame["accuracy"].iloc[3])


# --- invariants -------------------------------------------------------------------------------

GRID = [k / 32 for k in range(1, 32)]
# Every pattern a family can be asked about; N:M patterns share sparsities (1:4, 2:8, 4:16).
CANDIDATES = {
    "unstructured": [Unstructured(s).name for s in GRID],
    "block4": [Block(4, s).name for s in GRID],
    "nm": [NM(n, m).name for m in (2, 4, 8, 16, 32) for n in range(1, m)],
}


@st.composite
def family_tables(draw):
    """A random table for one family: an optional dense row, some measured patterns (noisy, or
    non-increasing in sparsity), and another block size's rows that must not matter."""
    family = draw(st.sampled_from(sorted(CANDIDATES)))
    measured = draw(st.lists(st.sampled_from(CANDIDATES[family]), min_size=1, max_size=8,
                             unique=True))
    with_dense = draw(st.booleans())
    monotone = draw(st.booleans())
    points = sorted({round(parse(p).sparsity, 9) for p in measured} | ({0.0} if with_dense
                                                                           else set()))
    # One value per sparsity, so that a monotone table is monotone across 1:4 and 2:8 too.
    values = draw(st.lists(st.floats(2, 100), min_size=len(points), max_size=len(points)))
    if monotone:
        values = sorted(values, reverse=True)
    by_sparsity = dict(zip(points, values, strict=True))
    rows = [record(p, by_sparsity[round(parse(p).sparsity, 9)]) for p in measured]
    if with_dense:
        rows.append(record("dense", by_sparsity[0.0]))
    rows += [record(Block(8, s).name, draw(st.floats(2, 100))) for s in (0.5, 0.96875)]
    return family, AccuracyTable.from_frame(pd.DataFrame(rows)), points, values, monotone


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family_tables())
def test_lookups_are_monotone_and_bounded(case):
    family, table, points, values, monotone = case
    queries = sorted(CANDIDATES[family], key=lambda p: parse(p).sparsity)
    found = [(parse(p).sparsity, table.lookup(MODEL, p)) for p in queries]
    low, high = min(values), max(values)
    for sparsity, result in found:
        inside = points[0] - 1e-9 <= sparsity <= points[-1] + 1e-9
        if inside:
            assert result.status in ("measured", "interpolated"), result.note
            assert low - 1e-9 <= result.value <= high + 1e-9
        else:
            assert result.status == "out_of_range" and math.isnan(result.value)
    # Estimates never rise with sparsity; measured values too where the data do not.
    kept = [(s, r.value) for s, r in found
            if r.status == "interpolated" or (monotone and r.status == "measured")]
    for (_, before), (_, after) in zip(kept, kept[1:], strict=False):
        assert after <= before + 1e-9


# --- through the command line: one line, exit 2, no traceback --------------------------------

CLI_GOOD = ("model,pattern,family,block,n,m,sparsity,metric,value,dataset,source\n"
            "m1,dense,dense,,,,0,top1,90,d,t\n"
            "m1,2:4,nm,,2,4,0.5,top1,85,d,t\n")


@pytest.mark.parametrize("name, text, needle", [
    ("missing column", CLI_GOOD.replace(",source", "").replace(",t\n", "\n"), "source"),
    ("duplicate rows", CLI_GOOD + "m1,2:4,nm,,2,4,0.5,top1,84,d,t\n", "row 4"),
    ("mixed scales", CLI_GOOD.replace(",85,", ",0.85,"), "mixed scales"),
    ("unknown pattern", CLI_GOOD.replace("2:4,nm,,2,4", "4:2,nm,,4,2"), "4:2"),
])
def test_cli_rejects_bad_tables(tmp_path, capsys, name, text, needle):
    from dse.cli import main

    path = tmp_path / "t.csv"
    path.write_text(text)
    code = main(["accuracy-table", str(path)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert needle in lines[0] and str(path) in lines[0]


def test_cli_shows_a_table_and_looks_up(tmp_path, capsys):
    from dse.cli import main

    path = tmp_path / "t.csv"
    path.write_text(CLI_GOOD)
    assert main(["accuracy-table", str(path), "--format", "1:4", "--format", "3:4"]) == 0
    out = capsys.readouterr().out
    assert "m1 (top1, d)" in out
    # 1:4 (75%) is beyond the measured N:M range (0-50%): not extrapolated.
    assert "out_of_range" in out
    # 3:4 (25%) lies halfway between dense (90 at 0%) and 2:4 (85 at 50%): 87.5.
    assert "87.50" in out and "interpolated" in out


def test_the_grid_shows_every_pattern_at_a_sparsity(capsys):
    from dse.cli import main

    assert main(["accuracy-table", "--model", "swin_tiny"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("50.00%"))
    assert "(1:2)" in row and "(2:4)" in row  # 2:4, the baseline, beside 1:2 at 50%
    header = next(line for line in out.splitlines() if line.startswith("sparsity"))
    assert header.split()[1:] == ["dense", "N:M", "block2", "block4", "block8", "block16",
                                  "block32", "unstructured"]
