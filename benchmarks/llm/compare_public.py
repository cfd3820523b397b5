"""Published LLM throughput against dse's bound: no published run may beat it.

    python -m benchmarks.llm.compare_public            # prints the table; exit 1 if one beats it
    python -m benchmarks.llm.compare_public --out benchmarks/llm/public_vs_bound.csv

``public_figures.csv`` holds published measurements, each with its source: NVIDIA's
TensorRT-LLM performance overview (``trtllm-bench throughput`` at maximum load, "Total Output
Throughput", FP8 checkpoints of LLaMA 3.1 8B and 3.3 70B, one GPU). Those models have the
architecture of the shipped ``llama-3-8b`` and ``llama-3-70b`` configurations (they differ in
rotary scaling and maximum context, which change neither FLOPs nor bytes).

The bound of such a run, from ``dse evaluate`` on the same GPU, in fp8 with an fp8 KV cache
(narrower than anything the run used, so the bound can only be higher): requests of ``isl``
prompt and ``osl`` generated tokens, run at the largest batch whose weights and KV cache fit at
context ``isl``, each decode step priced at context ``isl`` (the shortest any step reads), and
the prompts' prefill left out. Every one of those choices makes the bound higher than what any
schedule of those requests could reach, so ``output tokens/s <= B / time_per_step(B, isl)``
with ``B`` that batch (tokens/s grows with the batch). The gap to it is reported: prefill
(which the bound leaves out; 2048/128 spends most of its time there), longer contexts as
tokens are generated, kernel efficiency and scheduling.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

import pandas as pd

from dse.cli.main import main as dse_main

HERE = Path(__file__).resolve().parent
FIGURES = HERE / "public_figures.csv"


def _evaluate(model: str, hardware: str, context: int, batch: int, folder: Path) -> dict:
    out = folder / f"{model}-{hardware}-{context}-{batch}.json"
    argv = ["evaluate", "--model", model, "--phase", "decode", "--context", str(context),
            "--batch", str(batch), "--hw", hardware, "--dtype", "fp8", "--kv-dtype", "fp8",
            "--out", str(out)]
    with contextlib.redirect_stdout(io.StringIO()):  # the command's own table: not ours
        code = dse_main(argv)
    if code != 0:
        raise RuntimeError(f"dse {' '.join(argv)} exited {code}")
    return json.loads(out.read_text())[0]


def bounds(figures: pd.DataFrame) -> pd.DataFrame:
    """``figures`` with the bound's batch, tokens/s and the published share of it."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for _, f in figures.iterrows():
            context = int(f["isl"])
            first = _evaluate(f["model"], f["hardware"], context, 1, folder)
            batch = int(first["largest_batch_that_fits"])
            at = _evaluate(f["model"], f["hardware"], context, batch, folder)
            rows.append({**f.to_dict(), "bound_batch": batch,
                         "bound_tokens_per_s": float(at["tokens_per_s"]),
                         "bound_time_per_step_s": float(at["latency_s"])})
    out = pd.DataFrame(rows)
    out["published_over_bound"] = out["output_tokens_per_s"] / out["bound_tokens_per_s"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--figures", type=Path, default=FIGURES,
                        help="published figures (CSV, the columns of public_figures.csv)")
    parser.add_argument("--out", type=Path, help="write the joined table to this CSV")
    args = parser.parse_args(argv)
    table = bounds(pd.read_csv(args.figures))
    if args.out:
        table.to_csv(args.out, index=False)
    show = table[["model", "hardware", "isl", "osl", "output_tokens_per_s", "bound_batch",
                  "bound_tokens_per_s", "published_over_bound"]].copy()
    show["bound_tokens_per_s"] = show["bound_tokens_per_s"].map("{:,.0f}".format)
    show["published_over_bound"] = show["published_over_bound"].map("{:.2f}".format)
    print(show.to_string(index=False))
    beaten = table[table["output_tokens_per_s"] > table["bound_tokens_per_s"]]
    print(f"\n{len(table)} published figures; published / bound: median "
          f"{table['published_over_bound'].median():.2f}, max "
          f"{table['published_over_bound'].max():.2f}; {len(beaten)} beat the bound")
    return 1 if len(beaten) else 0


if __name__ == "__main__":
    sys.exit(main())
