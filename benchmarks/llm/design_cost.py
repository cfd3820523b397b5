"""What evaluating one language-model design costs, against one timm design (issue 24).

Run from the repository root::

    python -m benchmarks.llm.design_cost [--json PATH] [--repeats N] [--strict]

For each trace (three shipped timm traces, four language-model steps built from their
configurations) and one design (H100 SXM, 2:4, unfused, every op in scope), timed warm:

* ``build``: getting the trace, uncached: a timm trace is read from its shipped JSON
  (``read_trace_file``; ``load_trace`` caches it), a language model's step is traced from its
  ``config.json`` (``workloads.llm.llm_trace``; ``load_model`` caches shipped steps);
* ``designs``: ``dse.evaluate_designs`` (the search path's totals, no DataFrame);
* ``evaluate``: ``dse.roofline.evaluate`` (the bound's DataFrame of one design, dense
  included);
* ``table``: ``dse.evaluate``, the whole table ``dse evaluate --out`` writes: the bound with
  energy, power and memory and, for a language model, its columns (tokens/s, KV cache, memory
  fit).

The figure is the median over the timed calls, in microseconds, per design (and per op of
the trace, in brackets: a language-model step has more ops than a timm model, LLaMA-3-8B
decode 547 and LLaMA-3-70B 1,363 against ViT-B's 209). The issue's "evaluating one LLM design
costs about what one timm design costs" is checked per design: with ``--strict`` the exit
status is 2 when the dearest LLM design's ``designs``, ``evaluate`` or ``table`` is above
:data:`TARGET_RATIO` times the dearest timm design's. ``build`` happens once per trace, not per
design (a search or sweep builds each step once), and is reported, not checked.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable

import accelerator_models
import dse
from benchmarks.evaluator_throughput import environment, parse_benchmark_args
from dse.measure.host import cpu_clock, other_cores, wait_idle
from workloads import Trace
from workloads.llm import llm_trace, load_llm_config
from workloads.registry import TRACES_DIR, read_trace_file

TIMM = ("resnet50", "deit_small_patch16_224", "vit_base_patch16_224")
#: (config, phase, context, batch): decode at the usual context, a long prefill, the MoE at a
#: batch of 32 (its tokens touch 8 x (1 - (3/4)^32) of the 8 experts, as the evaluator prices).
LLM_STEPS = (("llama-3-8b", "decode", 2048, 1), ("llama-3-70b", "decode", 2048, 1),
             ("qwen2.5-7b", "prefill", 512, 1), ("mixtral-8x7b", "decode", 2048, 32))
HW, FORMAT = "h100-sxm", "2:4"
REPEATS = 30
#: One LLM design may cost at most this many times the dearest timm design.
TARGET_RATIO = 2.0


def median_us(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm: pricing caches, numba dispatch, pandas paths
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def measure(label: str, build: Callable[[], Trace], batch: int, acc, repeats: int) -> dict:
    clock = cpu_clock()
    trace = build()
    language = bool(trace.provenance.get("phase"))

    def designs():
        return dse.evaluate_designs(trace, acc, FORMAT, batch, fusion="unfused", scope="all")

    def evaluate():
        return dse.roofline.evaluate(trace, acc, FORMAT, batch, fusion="unfused", scope="all")

    def table():
        return dse.evaluate(trace, acc, FORMAT, batch, fusion="unfused", scope="all")

    row = {"trace": label, "language_model": language, "ops": len(trace), "batch": batch,
           "build_us": median_us(build, max(3, repeats // 3)),
           "designs_us": median_us(designs, repeats),
           "evaluate_us": median_us(evaluate, repeats),
           "table_us": median_us(table, repeats)}
    for key in ("build", "designs", "evaluate", "table"):
        row[f"{key}_us_per_op"] = row[f"{key}_us"] / row["ops"]
    row["other_processes_cores"] = other_cores(clock)
    return row


def report(rows: list[dict]) -> tuple[str, dict]:
    lines = [f"one design ({FORMAT} on {HW}, unfused, scope all), median us (per op in "
             "brackets):",
             f"{'trace':<28} {'ops':>5} {'build':>16} {'designs':>16} {'evaluate':>16} "
             f"{'table':>16}"]
    for r in rows:
        cells = " ".join(f"{r[f'{k}_us']:>8,.0f} ({r[f'{k}_us_per_op']:>4.1f})"
                         for k in ("build", "designs", "evaluate", "table"))
        lines.append(f"{r['trace']:<28} {r['ops']:>5} {cells}")
    timm = [r for r in rows if not r["language_model"]]
    llm = [r for r in rows if r["language_model"]]
    targets = {}
    for key in ("designs", "evaluate", "table"):
        worst_timm = max(r[f"{key}_us"] for r in timm)
        worst_llm = max(r[f"{key}_us"] for r in llm)
        ratio = worst_llm / worst_timm
        met = ratio <= TARGET_RATIO
        targets[key] = {"timm_us": worst_timm, "llm_us": worst_llm, "ratio": ratio,
                        "target": TARGET_RATIO, "met": met}
        lines.append(f"{key}: dearest LLM design {worst_llm:,.0f} us against the dearest timm "
                     f"design's {worst_timm:,.0f} us: {ratio:.2f}x (target <= {TARGET_RATIO:g}x) "
                     + ("ok" if met else "MISSED"))
    return "\n".join(lines), targets


def main(argv: list[str] | None = None) -> int:
    args = parse_benchmark_args(
        "python -m benchmarks.llm.design_cost", __doc__, REPEATS,
        f"timed calls per figure (the median is reported; default {REPEATS})",
        "exit 2 when an LLM design costs more than the target allows", argv)
    wall = time.perf_counter()
    acc = accelerator_models.load(HW)
    rows, waited = [], 0.0
    for name in TIMM:
        waited += wait_idle(args.wait_idle)
        rows.append(measure(name, lambda n=name: read_trace_file(TRACES_DIR / f"{n}.json"), 1,
                            acc, args.repeats))
    for name, phase, context, batch in LLM_STEPS:
        waited += wait_idle(args.wait_idle)
        rows.append(measure(f"{name}.{phase}.{context}",
                            lambda n=name, p=phase, c=context: llm_trace(load_llm_config(n), p, c),
                            batch, acc, args.repeats))
    text, targets = report(rows)
    wall = time.perf_counter() - wall
    print(text)
    print(f"(benchmark wall time {wall:.1f} s, of which {waited:.1f} s waiting for idle cores)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"benchmark": "llm.design_cost", "environment": environment(),
                       "design": {"hardware": HW, "format": FORMAT, "fusion": "unfused",
                                  "scope": "all"},
                       "rows": rows, "targets": targets, "wall_s": wall,
                       "waited_for_idle_s": waited}, f, indent=2)
            f.write("\n")
    if args.strict and not all(t["met"] for t in targets.values()):
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
