"""The decode report (issue 24): tokens/s against batch for each format of a language model's
decode step, with the largest batch that fits the device's DRAM drawn. Its data by value
against ``dse evaluate`` for the same designs, its title, and ``dse report --phase decode`` end
to end, with bad input refused in one line."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import reports
from tests.cli_run import run_cli

MODEL, HW, CONTEXT = "llama-3-8b", "h100-sxm", 2048
BATCHES = (1, 8, 64, 512)
DESIGN = ["--model", MODEL, "--phase", "decode", "--context", str(CONTEXT), "--hw", HW,
          "--format", "2:4", *[a for b in BATCHES for a in ("--batch", str(b))]]


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory) -> pd.DataFrame:
    """``dse evaluate``'s rows (with its language-model columns) for the report's designs."""
    out = tmp_path_factory.mktemp("evaluate") / "decode.csv"
    assert run_cli(["evaluate", *DESIGN, "--out", str(out)]) == 0
    return pd.read_csv(out)


def test_tokens_per_s_and_fit_limit_are_evaluates(evaluated):
    data = reports.decode_data(evaluated)
    assert list(data["format"]) == ["dense"] * 4 + ["2:4"] * 4
    assert list(data["batch"]) == [*BATCHES, *BATCHES]
    rows = evaluated.set_index(["format", "batch"])
    for r in data.itertuples():
        design = rows.loc[(r.format, r.batch)]
        # tokens/s is the batch over the step's latency, the bound dse evaluate prints.
        assert r.tokens_per_s == pytest.approx(r.batch / design["latency_s"], rel=1e-12)
        assert r.largest_batch_that_fits == design["largest_batch_that_fits"]
        assert bool(r.fits) == (r.batch <= r.largest_batch_that_fits)
    limits = data.drop_duplicates("format").set_index("format")["largest_batch_that_fits"]
    # LLaMA-3-8B at context 2048 in fp16 on 80 GiB: 2:4's smaller weights leave room for more
    # requests' KV cache (131,072 bytes a token, 268 MB a request).
    assert (int(limits["dense"]), int(limits["2:4"])) == (259, 282)
    # Decode at batch 1 reads every weight once: 2:4 pays; at 512 the KV cache dominates.
    speedup = data[data["format"] == "2:4"].set_index("batch")["speedup"]
    assert speedup[1] > 1.6 > 1.1 > speedup[512] > 1.0


def test_title_names_the_design_and_the_bound(evaluated):
    spec = reports.decode_chart(reports.decode_data(evaluated)).to_dict()
    title = spec["title"]["text"]
    for words in (MODEL, HW, "context 2,048", "weights fp16", "KV cache fp16"):
        assert words in title, (words, title)
    assert ".decode." not in title  # the model's name, not the trace's
    subtitle = " ".join(spec["title"]["subtitle"])
    assert "speed-of-light bound" in subtitle and "not a measurement" in subtitle
    assert "fit 80 GiB of DRAM (dense 259; 2:4 282)" in subtitle
    assert "hollow markers beyond a rule do not fit" in subtitle


def test_a_weight_dtype_is_in_the_title_and_moves_the_limit(tmp_path):
    out = tmp_path / "int4.csv"
    assert run_cli(["evaluate", *DESIGN, "--weight-dtype", "int4", "--kv-dtype", "fp8",
                    "--out", str(out)]) == 0
    frame = pd.read_csv(out)
    data = reports.decode_data(frame)
    title = reports.decode_chart(data).to_dict()["title"]["text"]
    assert "weights int4 (group 128)" in title and "KV cache fp8" in title
    limits = data.drop_duplicates("format")["largest_batch_that_fits"].astype(int)
    assert list(limits) == list(frame.drop_duplicates("format")["largest_batch_that_fits"])
    assert min(limits) > 282  # half the KV bytes a token, a quarter of the weights


def test_decode_data_refuses_a_prefill_frame(evaluated):
    with pytest.raises(ValueError, match="phase prefill; the decode report"):
        reports.decode_data(evaluated.assign(phase="prefill"))
    with pytest.raises(ValueError, match="2 values of hardware"):
        reports.decode_data(evaluated.assign(hardware=np.where(
            evaluated["batch"] == 1, "a", "b")))


def test_report_writes_the_decode_chart(evaluated, tmp_path, capsys):
    out = tmp_path / "report"
    assert run_cli(["report", *DESIGN, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "(5 charts, 1 of decode tokens/s)" in printed
    assert "decode: largest batch that fits in DRAM" in printed and "dense 259; 2:4 282" in printed
    for suffix in ("png", "svg", "csv"):
        assert (out / f"decode.{suffix}").stat().st_size > 0
    assert (out / "decode.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "chart-decode" in (out / "index.html").read_text(encoding="utf-8")
    written = pd.read_csv(out / "decode.csv")
    rows = evaluated.set_index(["format", "batch"])
    for r in written.itertuples():
        assert r.tokens_per_s == pytest.approx(rows.loc[(r.format, r.batch), "tokens_per_s"],
                                               rel=1e-12)


@pytest.mark.parametrize(("argv", "words"), [
    (["--model", "convnext_tiny", "--phase", "decode", "--context", "2048"],
     "--phase and --context are for language models"),
    (["--model", "convnext_tiny", "--kv-dtype", "fp8"], "convnext_tiny has no KV cache"),
])
def test_bad_input_is_one_line(argv, words, tmp_path, capsys):
    out = tmp_path / "report"
    assert run_cli(["report", *argv, "--hw", HW, "--format", "2:4", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err
    assert not out.exists()
