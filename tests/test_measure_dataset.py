"""Measurement datasets: the shipped ones load with the one documented function and match the
schema; the H100 converter by value on known rows; validation refuses bad frames in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dse.measure.dataset import (
    DATASETS_DIR,
    SCHEMA,
    DatasetError,
    concat,
    load_dataset,
    provenance,
    shipped_datasets,
    validate,
)

ROOT = Path(__file__).resolve().parents[1]
H100_CSV = ROOT / "benchmarks" / "gpu" / "results" / "gemm_measurements.csv"


def test_shipped_datasets_are_there():
    names = shipped_datasets()
    assert "h100-sxm" in names
    assert any(n.startswith("cpu-") for n in names)


@pytest.mark.parametrize("name", shipped_datasets())
def test_shipped_dataset_schema(name):
    frame = load_dataset(name)
    assert list(frame.columns) == list(SCHEMA)
    for column, (dtype, _) in SCHEMA.items():
        assert str(frame[column].dtype).lower() == dtype.lower(), column
    assert len(frame) > 0
    timed = frame[frame["error"] == ""]
    assert (timed["median_s"] > 0).all() and (timed["min_s"] <= timed["median_s"]).all()
    assert timed["sol_fraction"].notna().all()
    assert set(frame["family"]) <= {"dense", "nm", "block", "unstructured", "vector", "model"}
    assert frame["run_id"].str.len().min() > 0
    prov = provenance(name)
    assert prov["command"] and prov["rows"] == len(frame)


def test_cpu_dataset_covers_every_prunable_shape():
    import workloads

    name = next(n for n in shipped_datasets() if n.startswith("cpu-"))
    frame = load_dataset(name)
    prov = provenance(name)
    # joined runs: each keeps its own dse measure command; the join says how it was made
    assert "join_kernels.py" in prov["command"]
    commands = [run["command"] for run in prov["runs"].values()]
    assert any(c.startswith("dse measure --model convnext_tiny") for c in commands)
    assert all(c.startswith("dse measure --model") for c in commands)
    assert set(frame["run_id"]) == {f"{run['facts']['device_name']}:{run['facts']['date']}:"
                                    f"{run['trace']}" for run in prov["runs"].values()}
    assert {"cold", "warm"} <= set(frame["cache"]) and frame["round"].max() == 3
    trace = frame[frame["source"] == "trace"]
    ops = workloads.load_trace("convnext_tiny").ops
    shapes = ops[ops["prunable"]][["m", "k", "n", "groups"]].drop_duplicates()
    for batch in (1, 8):
        for family in ("dense", "block", "unstructured"):
            got = trace[(trace["batch"] == batch) & (trace["family"] == family)]
            have = set(zip(got["m"], got["k"], got["n"] // batch, got["groups"], strict=True))
            want = set(map(tuple, shapes.to_numpy().tolist()))
            assert want <= have, (batch, family, want - have)
    assert (frame["why"] != "").all()


def test_converter_by_value_on_known_rows():
    frame = load_dataset("h100-sxm")
    raw = pd.read_csv(H100_CSV, dtype=str, keep_default_na=False)
    main = frame[frame["run_id"].str.endswith(":main")].reset_index(drop=True)
    raw = raw[~raw["kernel"].str.startswith("calib")].reset_index(drop=True)
    assert len(main) == len(raw)
    checks = {"dense_mm": ("dense", "cublas", "dense"),
              "sparse24_mm": ("nm", "cusparselt", "2:4"),
              "bsr_triton": ("block", "triton_bsr", None),
              "csr_mm": ("unstructured", "cusparse_csr", None)}
    for kernel, (family, impl, fmt) in checks.items():
        i = raw.index[(raw["kernel"] == kernel) & (raw["error"] == "")
                      & (raw["backend"] != "cusparselt_algsearch")][0]
        row, rec = main.loc[i], raw.loc[i]
        assert (row["family"], row["implementation"]) == (family, impl)
        assert (row["m"], row["k"], row["n"]) == (int(rec["M"]), int(rec["K"]), int(rec["N"]))
        assert row["median_s"] == pytest.approx(float(rec["median_s"]))
        assert row["min_s"] == pytest.approx(float(rec["min_s"]))
        assert row["repeats"] == int(rec["reps"])
        assert row["dtype"] == "fp16" and row["cache"] == "cold"
        if fmt:
            assert row["format"] == fmt
        if kernel in ("dense_mm", "sparse24_mm"):
            # dse's bound on the catalog H100 equals the benchmark's own datasheet SOL
            assert row["sol_s"] == pytest.approx(float(rec["time_sol_s"]), rel=1e-5)
    bsr = main[main["implementation"] == "triton_bsr"].iloc[0]
    assert bsr["format"].startswith(f"block{bsr['block']}@")
    csr = main[main["implementation"] == "cusparse_csr"].iloc[0]
    assert csr["format"].startswith("unstructured@") and csr["block"] == 1


def test_converter_recomputes_the_same_frame(tmp_path):
    from dse.measure.dataset import convert_h100_csv

    fresh = convert_h100_csv([H100_CSV])
    shipped = load_dataset("h100-sxm")
    shipped = shipped[shipped["run_id"].str.endswith(":main")].reset_index(drop=True)
    pd.testing.assert_frame_equal(fresh, shipped)


def test_validate_refuses_missing_and_unknown_columns():
    frame = load_dataset("h100-sxm").head(3)
    with pytest.raises(DatasetError, match="missing column 'sol_s'") as info:
        validate(frame.drop(columns=["sol_s"]))
    assert "\n" not in str(info.value)
    with pytest.raises(DatasetError, match="unknown column 'extra'"):
        validate(frame.assign(extra=1))
    bad = frame.copy()
    bad.loc[bad.index[0], "median_s"] = -1.0
    bad.loc[bad.index[0], "error"] = ""
    with pytest.raises(DatasetError, match="min_s <= median_s"):
        validate(bad)


def test_load_dataset_refuses_unknown_names_and_bad_files(tmp_path):
    with pytest.raises(DatasetError, match="no such dataset"):
        load_dataset("no-such-dataset")
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    with pytest.raises(DatasetError, match="cannot read"):
        load_dataset(junk)


def test_datasets_concatenate():
    names = shipped_datasets()
    frames = [load_dataset(n) for n in names]
    both = concat(frames)
    assert len(both) == sum(len(f) for f in frames)
    assert both["run_id"].nunique() >= len(names)


def test_provenance_json_sits_beside_each_dataset():
    for name in shipped_datasets():
        prov = json.loads((DATASETS_DIR / f"{name}.json").read_text())
        assert prov["command"] and prov["schema"] == "dse-measurements/1"


def test_shipped_datasets_load_without_torch():
    code = ("import sys, dse; from dse.measure.dataset import load_dataset, shipped_datasets; "
            "[load_dataset(n) for n in shipped_datasets()]; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
