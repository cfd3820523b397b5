"""Published LLM throughput against dse's bound: no published run may beat it.

    python -m benchmarks.llm.compare_public            # prints the table; exit 1 if one beats it
    python -m benchmarks.llm.compare_public --out benchmarks/llm/public_vs_bound.csv
    python -m benchmarks.llm.compare_public --calibrated h100-sxm \
        --out benchmarks/llm/public_vs_expected.csv     # the expectation beside it

``public_figures.csv`` holds published measurements, each with its source (URL or repository
file at a commit, and the table and row): NVIDIA's TensorRT-LLM performance overview
(``trtllm-bench throughput`` at maximum load, "Total Output Throughput", FP8 checkpoints of
LLaMA 3.1 8B and 3.3 70B, one GPU), and the same document as of release 0.9.0 (Mistral 7B at
fixed batches, FP16 on an A100 and FP8 on an H100 and an H200); torchao's LLaMA-3-8B runs on
one A100-80GB (batch 1, bf16 dense, int8 and int4 weight-only, and 2:4 with int4 through the
sparse Marlin kernel); and Qwen's speed benchmark of Qwen2.5-7B-Instruct under vLLM on one
A100 80GB (batch 1, BF16, GPTQ-Int8, GPTQ-Int4 and AWQ). Those models have the architecture
of the shipped configurations (LLaMA 3.1 and 3.3 differ in rotary scaling and maximum context,
and the instruct model in its weights, which change neither FLOPs nor bytes).

Columns: ``precision``, the dtype of activations and of the KV cache (``fp8``, ``bf16``,
``fp16``); ``weights``, the weight storage (``int8``, ``int4-gG``; empty for ``precision``);
``format`` (``dense`` or ``2:4``); ``batch`` (empty for a run at maximum load); ``isl`` and
``osl``, prompt and generated tokens per request.

The bound of such a run, from ``dse evaluate`` on the same GPU with the same format and
weights: the run's precision, and fp8 for the KV cache of an fp8 run (narrower than anything
it used, so the bound can only be higher); int8 and int4 weights with one scale per channel or
group and no zero points (at most what the run stored); requests of ``isl`` prompt and ``osl``
generated tokens, at the run's batch or, at maximum load, the largest batch whose weights and
KV cache fit at context ``isl``; each decode step priced at context ``isl`` (the shortest any
step reads), and the prompts' prefill left out. Every one of those choices makes the bound
higher than what any schedule of those requests could reach, so ``output tokens/s <= B /
time_per_step(B, isl)`` with ``B`` that batch (tokens/s grows with the batch). The gap to it
is reported: prefill (which the bound leaves out; 2048/128 spends most of its time there),
longer contexts as tokens are generated, dequantisation and kernel efficiency, launch overhead
at batch 1, and scheduling.

With ``--calibrated DEVICE`` the table adds the expectation of the same step
(``expected_tokens_per_s``, kernel predictors of DEVICE, their fraction of the speed of light
carried over to the run's GPU) and ``published_over_expected``. The published run times more
than the step it is compared with (see above), so a ratio below 1 is expected; the rows with
int8 or int4 weights (``weights``) and 2:4 check the expectation's extrapolation to quantised
weights, which no shipped predictor timed.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
import tempfile
from pathlib import Path

import pandas as pd

from dse.cli.main import main as dse_main
from dse.cli.parser import Parser

HERE = Path(__file__).resolve().parent
FIGURES = HERE / "public_figures.csv"


def _text(figure: dict, column: str, default: str) -> str:
    """A cell of ``figure``, or ``default`` where the column is absent or the cell empty."""
    value = figure.get(column)
    return value.strip() if isinstance(value, str) and value.strip() else default


def _options(figure: dict) -> list[str]:
    """The ``dse evaluate`` options for a published run's dtypes and format."""
    precision = _text(figure, "precision", "fp8")
    argv = ["--dtype", precision, "--kv-dtype", precision]
    weights = _text(figure, "weights", "")
    if weights:
        dtype, _, group = weights.partition("-g")
        argv += ["--weight-dtype", dtype] + (["--weight-group-size", group] if group else [])
    fmt = _text(figure, "format", "dense")
    if fmt != "dense":
        argv += ["--format", fmt]
    return argv


def _evaluate(figure: dict, context: int, batch: int, folder: Path,
              calibrated: str | None = None) -> dict:
    model, hardware = figure["model"], figure["hardware"]
    options = _options(figure) + (["--calibrated", calibrated] if calibrated else [])
    out = folder / f"{model}-{hardware}-{context}-{batch}-{'_'.join(options)}.json"
    argv = ["evaluate", "--model", model, "--phase", "decode", "--context", str(context),
            "--batch", str(batch), "--hw", hardware, *options, "--out", str(out)]
    with contextlib.redirect_stdout(io.StringIO()):  # the command's own table: not ours
        code = dse_main(argv)
    if code != 0:
        raise RuntimeError(f"dse {' '.join(argv)} exited {code}")
    fmt = _text(figure, "format", "dense")
    rows = [r for r in json.loads(out.read_text()) if str(r["format"]) == fmt]
    if len(rows) != 1:
        raise RuntimeError(f"dse {' '.join(argv)} gave {len(rows)} rows of format {fmt}")
    return rows[0]


def _batch(figure: dict) -> int | None:
    value = figure.get("batch")
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        return None
    return int(value)


def bounds(figures: pd.DataFrame, calibrated: str | None = None) -> pd.DataFrame:
    """``figures`` with the bound's batch, tokens/s and the published share of it; with
    ``calibrated`` (a predictor set), the expected tokens/s at that batch and the published
    share of it too."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for _, f in figures.iterrows():
            figure = f.to_dict()
            context = int(f["isl"])
            batch = _batch(figure)
            if batch is None:  # at maximum load: the largest batch that fits
                first = _evaluate(figure, context, 1, folder)
                batch = int(first["largest_batch_that_fits"])
            at = _evaluate(figure, context, batch, folder, calibrated)
            row = {**figure, "bound_batch": batch,
                   "bound_tokens_per_s": float(at["tokens_per_s"]),
                   "bound_time_per_step_s": float(at["latency_s"])}
            if calibrated:
                row["expected_tokens_per_s"] = float(at["expected_tokens_per_s"])
            rows.append(row)
    out = pd.DataFrame(rows)
    out["published_over_bound"] = out["output_tokens_per_s"] / out["bound_tokens_per_s"]
    if calibrated:
        out["published_over_expected"] = (out["output_tokens_per_s"]
                                           / out["expected_tokens_per_s"])
    return out


def _groups(table: pd.DataFrame):
    """The rows by how their weights are stored: what the expectation's extrapolation to
    quantised weights is checked on."""
    weights = table["weights"].fillna("").astype(str).str.partition("-g")[0] \
        if "weights" in table else pd.Series("", index=table.index)
    fmt = table["format"].fillna("dense").astype(str) if "format" in table \
        else pd.Series("dense", index=table.index)
    label = weights.where(weights != "", table["precision"].astype(str) + " (not quantised)")
    label = label.where(fmt == "dense", label + " " + fmt)
    for name in sorted(pd.unique(label)):
        yield name, table[label == name]


def build_parser() -> Parser:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--figures", type=Path, default=FIGURES,
                        help="published figures (CSV, the columns of public_figures.csv)")
    parser.add_argument("--out", type=Path, help="write the joined table to this CSV")
    parser.add_argument("--calibrated", metavar="DEVICE",
                        help="add the expectation of these kernel predictors (e.g. h100-sxm)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    table = bounds(pd.read_csv(args.figures), args.calibrated)
    if args.out:
        table.to_csv(args.out, index=False)
    columns = ["model", "hardware", "precision", "weights", "format", "isl", "osl",
               "output_tokens_per_s", "bound_batch", "bound_tokens_per_s", "published_over_bound",
               "expected_tokens_per_s", "published_over_expected"]
    show = table[[c for c in columns if c in table.columns]].copy()
    for column in ("weights", "format"):
        if column in show:
            show[column] = show[column].fillna("-")
    show["bound_tokens_per_s"] = show["bound_tokens_per_s"].map("{:,.0f}".format)
    show["published_over_bound"] = show["published_over_bound"].map("{:.2f}".format)
    if args.calibrated:
        show["expected_tokens_per_s"] = show["expected_tokens_per_s"].map("{:,.0f}".format)
        show["published_over_expected"] = show["published_over_expected"].map("{:.2f}".format)
    print(show.to_string(index=False))
    beaten = table[table["output_tokens_per_s"] > table["bound_tokens_per_s"]]
    print(f"\n{len(table)} published figures; published / bound: median "
          f"{table['published_over_bound'].median():.2f}, max "
          f"{table['published_over_bound'].max():.2f}; {len(beaten)} beat the bound")
    if args.calibrated:
        for label, rows in _groups(table):
            ratio = rows["published_over_expected"]
            print(f"published / expected ({args.calibrated}), {label}: {len(rows)} rows, "
                  f"{ratio.min():.2f}-{ratio.max():.2f} (median {ratio.median():.2f})")
    return 1 if len(beaten) else 0


if __name__ == "__main__":
    sys.exit(main())
