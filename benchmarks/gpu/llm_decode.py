"""Measure LLM prefill and decode latency on a GPU, dense and 2:4, for dse's LLM checks.

    python -m benchmarks.gpu.llm_decode --models llama-3-8b --out llm_decode.csv

Each shipped configuration (``workloads/llm_configs``) is built by transformers with random
fp16 weights (random values time the same as trained ones for dense and 2:4 kernels), then:

- *prefill*: one forward of ``--prompt`` tokens at batch 1 (the time to first token, less the
  tokenizer and sampling);
- *decode*: at each ``--batches`` B, a cache of ``--context`` tokens is filled, then single-token
  steps are timed.

Two figures per row: ``wall_s``, CUDA events around the call (what a user waits for, the host's
dispatch gaps included: eager transformers launches each kernel from Python), and ``kernel_s``,
the GPU time of the kernels the call launched (torch.profiler, summed): the part a roofline
bound speaks to. The 2:4 variant prunes every decoder linear by the trainer's rule (2 largest
|w| of every 4 along K) and converts it with ``torch.sparse.to_sparse_semi_structured``
(cuSPARSELt); the embedding and the LM head stay dense. Rows are appended to ``--out`` as they
finish, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path

from dse.cli.parser import Parser

ROOT = Path(__file__).resolve().parents[2]
FIELDS = ["model", "variant", "phase", "batch", "tokens", "context", "wall_s", "kernel_s",
          "tokens_per_s", "repeats", "converted_linears", "device_name", "torch", "transformers",
          "date", "command", "note", "top_kernels"]
TOP_KERNELS = 12


def _config(name: str, layers: int | None):
    from transformers import AutoConfig
    doc = json.loads((ROOT / "workloads" / "llm_configs" / f"{name}.json").read_text())
    doc = {k: v for k, v in doc.items() if not k.startswith("_")}
    if layers:
        doc["num_hidden_layers"] = layers
    model_type = doc.pop("model_type")
    return AutoConfig.for_model(model_type, **doc)


def _events_time(torch, fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return times


def _kernel_time(torch, fn, calls: int) -> tuple[float, list[dict]]:
    """GPU seconds of the kernels ``fn`` launches, per call (profiler, summed), and the
    kernels that took them, largest first: name, calls and seconds per call of ``fn``."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.self_device_time_total > 0]
    total_us = sum(e.self_device_time_total for e in events)
    top = sorted(events, key=lambda e: -e.self_device_time_total)[:TOP_KERNELS]
    kernels = [{"name": e.key[:160], "calls": e.count / calls,
                "s": e.self_device_time_total / 1e6 / calls} for e in top]
    return total_us / 1e6 / calls, kernels


def _sparsify(torch, model) -> int:
    from torch.sparse import to_sparse_semi_structured
    converted = 0
    for layer in model.model.layers:
        for module in layer.modules():
            if isinstance(module, torch.nn.Linear):
                w = module.weight.detach()
                groups = w.reshape(w.shape[0], -1, 4)
                keep = groups.abs().topk(2, dim=-1).indices
                mask = torch.zeros_like(groups, dtype=torch.bool).scatter_(-1, keep, True)
                pruned = (groups * mask).reshape_as(w).contiguous()
                module.weight = torch.nn.Parameter(to_sparse_semi_structured(pruned),
                                                   requires_grad=False)
                converted += 1
    return converted


def run(args) -> int:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, DynamicCache

    torch.manual_seed(0)
    device_name = torch.cuda.get_device_name(0)
    date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    command = "python -m benchmarks.gpu.llm_decode " + " ".join(sys.argv[1:])
    out = Path(args.out)
    new = not out.exists()
    sink = out.open("a", newline="")
    writer = csv.DictWriter(sink, fieldnames=FIELDS)
    if new:
        writer.writeheader()
    deadline = time.monotonic() + args.budget
    base = {"device_name": device_name, "torch": torch.__version__,
            "transformers": transformers.__version__, "date": date, "command": command}
    for name in args.models.split(","):
        for variant in args.variants.split(","):
            if time.monotonic() > deadline:
                print(f"budget spent: {name} {variant} not run", flush=True)
                continue
            cfg = _config(name, args.layers)
            with torch.device("cuda"):
                model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float16,
                                                         attn_implementation="sdpa")
            model.eval()
            converted = _sparsify(torch, model) if variant == "2:4" else 0
            note = "" if variant == "dense" else "embedding and lm_head dense"
            row = dict(base, model=name, variant=variant, converted_linears=converted, note=note)
            vocab = cfg.vocab_size
            with torch.inference_mode():
                ids = torch.randint(0, vocab, (1, args.prompt), device="cuda")

                prefill = partial(model, ids, use_cache=False, logits_to_keep=1)
                for _ in range(2):
                    prefill()
                wall = statistics.median(_events_time(torch, prefill, args.repeats))
                kern, top = _kernel_time(torch, prefill, 2)
                writer.writerow(dict(row, phase="prefill", batch=1, tokens=args.prompt,
                                     context=0, wall_s=wall, kernel_s=kern,
                                     tokens_per_s=args.prompt / wall, repeats=args.repeats,
                                     top_kernels=json.dumps(top)))
                sink.flush()
                print(f"{name} {variant} prefill {args.prompt}: {wall * 1e3:.2f} ms wall, "
                      f"{kern * 1e3:.2f} ms kernels", flush=True)
                for batch in [int(b) for b in args.batches.split(",")]:
                    if time.monotonic() > deadline:
                        break
                    cache = DynamicCache(config=cfg)
                    chunk = max(1, 16384 // batch)
                    ctx = torch.randint(0, vocab, (batch, args.context), device="cuda")
                    for s in range(0, args.context, chunk):
                        model(ctx[:, s:s + chunk], past_key_values=cache, use_cache=True,
                              logits_to_keep=1)
                    step_ids = torch.randint(0, vocab, (batch, 1), device="cuda")

                    step = partial(model, step_ids, past_key_values=cache, use_cache=True,
                                   logits_to_keep=1)
                    for _ in range(3):
                        step()
                    wall = statistics.median(_events_time(torch, step, args.repeats))
                    kern, top = _kernel_time(torch, step, 3)
                    writer.writerow(dict(row, phase="decode", batch=batch, tokens=1,
                                         context=args.context, wall_s=wall, kernel_s=kern,
                                         tokens_per_s=batch / wall, repeats=args.repeats,
                                         top_kernels=json.dumps(top)))
                    sink.flush()
                    print(f"{name} {variant} decode B={batch} L={args.context}: "
                          f"{wall * 1e3:.2f} ms wall, {kern * 1e3:.2f} ms kernels", flush=True)
                    del cache, ctx
                    torch.cuda.empty_cache()
            del model
            torch.cuda.empty_cache()
    sink.close()
    return 0


def build_parser() -> Parser:
    p = Parser(description=__doc__.split("\n\n")[0],
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="llama-3-8b", help="shipped LLM names, comma-separated")
    p.add_argument("--variants", default="dense,2:4", help="dense and/or 2:4")
    p.add_argument("--batches", default="1,8,32", help="decode batches")
    p.add_argument("--context", type=int, default=2048, help="decode context length")
    p.add_argument("--prompt", type=int, default=512, help="prefill tokens (batch 1)")
    p.add_argument("--repeats", type=int, default=20, help="timed calls per figure (median)")
    p.add_argument("--layers", type=int, default=None, help="override the layer count (smoke)")
    p.add_argument("--budget", type=float, default=480, help="seconds; models after it are skipped")
    p.add_argument("--out", default="llm_decode.csv", help="CSV to append rows to")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from .out_check import file_problem

    problem = file_problem(args.out)  # before loading a model, not after it
    if problem:
        print(f"llm_decode: {problem}", file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
