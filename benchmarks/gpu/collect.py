"""Gather the GPU data dse's calibrated expectation lacks, in one resumable command.

``python -m benchmarks.gpu.collect`` (or ``benchmarks/gpu/collect``) runs five parts, each with a
share of ``--budget`` (minutes, default 35: one H100's worth):

* ``gemm24``  2:4 cuSPARSELt and dense cuBLAS on 384 shapes, LLM decode first (collect_gemm);
* ``vector``  layer norm, GELU / SiLU / ReLU, softmax, add, multiply, mean (collect_vector);
* ``conv``    depthwise and grouped convolutions (collect_conv);
* ``models``  DeiT-S, ViT-B, ConvNeXt-T, dense and 2:4, batch 1 / 8 / 128: latency rows and
  per-op torch.profiler tables (collect_models);
* ``energy``  NVML (CPU: RAPL) joules per call of representative workloads (collect_energy);
* ``dense_conv``  convolutions reading the image (patch embeddings, stems), ConvNeXt's
  downsampling and ResNet-50's dense layers (collect_conv);
* ``narrow_norm``  layer norms over 96-1024 channels at ConvNeXt / Swin sizes (collect_vector);
* ``gemm_more``  Swin-T's linears and ConvNeXt-T's MLP linears at batch 1-128, as ``gemm24``;
* ``conv_random``  48 dense and depthwise convolutions drawn at random (collect_conv);
* ``copy``  the data movement traces call ``other``: permute-contiguous, roll, pad, gather
  (collect_vector);
* ``math_attention``  DeiT-S and ViT-B attention products and softmax in fp32, as torch's math
  SDPA path runs them under 2:4 (collect_attention);
* ``models_more``  ResNet-50 and Swin-T as ``models`` (collect_models);
* ``dtype_gemm``  LLM and ViT linears in bf16, fp8 and int8, dense and 2:4, and the weight-only
  int4 / int8 kernels, beside fp16 (collect_dtype).

``all`` runs the first five; the others were added after the first collection, which a
full run would otherwise repeat: name them with ``--parts``.

Kernel rows are timed cold (cache flushed before each call) and warm, and follow dse's kernel
dataset schema (``dse.measure.dataset.SCHEMA``); profiles and energy go to tables of their own
(``collect_models.PROFILE_SCHEMA``, ``collect_energy.ENERGY_SCHEMA``). Progress is saved per
item; a rerun of the same command skips complete parts and the done items of the others
(``collect_store``). Everything is logged to ``OUT/collect.log``. See ``COLLECT.md``.

Exit status: 0 when every asked part is complete; 3 when one is not (its budget ran out, or items
failed: rerun the command to continue); 2 for input it cannot use (one line, nothing run);
130 when interrupted (progress saved).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import shlex
import signal
import sys
import time
import traceback
from pathlib import Path

from dse.cli.parser import Parser
from dse.measure.budget import MAX_BUDGET_S, Budget, parse_duration

from . import (
    collect_attention,
    collect_conv,
    collect_dtype,
    collect_energy,
    collect_gemm,
    collect_models,
    collect_sparse,
    collect_vector,
)
from .collect_items import Part
from .collect_rows import Bench, error_text, numerics_for
from .collect_store import CollectError, Progress, Store

__all__ = ["PARTS", "main", "parse_budget", "parse_parts", "plan"]

#: The parts, in the order they run; weights are relative shares of the budget.
PARTS: dict[str, Part] = {p.name: p for p in (
    Part("gemm24", 30, "2:4 (cuSPARSELt) and dense GEMMs, cold and warm",
         collect_gemm.items, collect_gemm.run, collect_gemm.finish),
    Part("vector", 8, "vector ops, cold and warm", collect_vector.items, collect_vector.run),
    Part("conv", 12, "depthwise and grouped convolutions, cold and warm",
         collect_conv.items, collect_conv.run),
    Part("models", 35, "DeiT-S, ViT-B, ConvNeXt-T dense and 2:4: latency and per-op profiles",
         collect_models.items, collect_models.run, collect_models.finish),
    Part("energy", 15, "energy per call (NVML; RAPL on the CPU)",
         collect_energy.items, collect_energy.run, collect_energy.finish),
    Part("dense_conv", 10, "image-reading, downsampling and ResNet-50 dense convolutions",
         collect_conv.dense_items, collect_conv.run),
    Part("narrow_norm", 4, "layer norms over 96-1024 channels, cold and warm",
         collect_vector.narrow_items, collect_vector.run),
    Part("gemm_more", 12, "Swin-T linears and ConvNeXt-T MLP linears at batch 1-128, dense "
         "and 2:4", collect_gemm.more_items, collect_gemm.run, collect_gemm.finish),
    Part("conv_random", 10, "dense and depthwise convolutions drawn at random (held-out shapes)",
         collect_conv.random_items, collect_conv.run),
    Part("conv_random2", 12, "dense, grouped and depthwise convolutions drawn at random, a "
         "second draw", collect_conv.random2_items, collect_conv.run),
    Part("vector_random", 5, "vector ops and copies at sizes drawn at random",
         collect_vector.random_items, collect_vector.run),
    Part("sparse_random", 15, "block (BSR) and unstructured (CSR) GEMMs at random weight shapes, "
         "beside dense", collect_sparse.items, collect_sparse.run),
    Part("strided_add", 4, "the residual add of a 2:4 linear's transposed output, beside the "
         "contiguous add", collect_vector.strided_items, collect_vector.run_strided),
    Part("copy", 4, "copies a trace calls other: permute-contiguous, roll, pad, gather",
         collect_vector.copy_items, collect_vector.run),
    Part("math_attention", 4, "fp32 attention products and softmax of torch's math SDPA path",
         collect_attention.items, collect_attention.run, collect_attention.finish),
    Part("math_checks", 3, "the fp32 masked-row checks of torch's math SDPA path",
         collect_attention.check_items, collect_attention.run_check, collect_attention.finish),
    Part("dtype_gemm", 12, "LLM and ViT linears in bf16, fp8, int8 (dense and 2:4) and weight-only "
         "int4 / int8, beside fp16", collect_dtype.items, collect_dtype.run,
         collect_dtype.finish),
    Part("models_more", 25, "ResNet-50 and Swin-T dense and 2:4: latency and per-op profiles",
         collect_models.more_items, collect_models.run, collect_models.finish),
)}
#: What ``--parts all`` runs: the first collection's parts.
ALL = ("gemm24", "vector", "conv", "models", "energy")

DEFAULT_BUDGET_MIN = 35.0
#: Consecutive failed items after which a part stops (a broken device fails every item).
MAX_FAILURES_IN_A_ROW = 3
EXIT_INCOMPLETE, EXIT_INTERRUPTED = 3, 130


# --- input ------------------------------------------------------------------------------------


def parse_budget(text: str) -> float:
    """Seconds of a ``--budget``: a number of minutes (``35``, ``0.5``) or a duration with a
    unit (``90s``, ``20m``, ``1h``). CollectError for anything else, zero, negative or NaN."""
    try:
        minutes = float(text)
    except ValueError:
        seconds = parse_duration(text, "--budget", CollectError)
    else:
        if not math.isfinite(minutes) or minutes <= 0:
            raise CollectError(f"--budget {text}: give a positive number of minutes, e.g. "
                               "--budget 35 (or a duration such as 90s)")
        seconds = minutes * 60.0
    # As dse measure: a day at most (1e9 minutes once planned 1,900 years); a collection
    # resumes, so longer work is the same command run again.
    if seconds > MAX_BUDGET_S:
        raise CollectError(f"--budget {text}: {seconds / 60:,.0f} minutes is longer than the "
                           f"{MAX_BUDGET_S / 60:,.0f} minutes (a day) a run plans; give at most "
                           "24h and rerun the same command to continue")
    return seconds


def parse_parts(text: str) -> list[str]:
    """The parts of ``--parts`` (``all`` or a comma list), in run order."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    if names == ["all"]:
        return list(ALL)
    unknown = [n for n in names if n not in PARTS]
    if unknown or not names:
        what = f"unknown part {unknown[0]!r}" if unknown else "no part named"
        raise CollectError(f"--parts {text}: {what}; choose from {', '.join(PARTS)} or all")
    return [p for p in PARTS if p in names]


def plan(parts: list[str], budget_s: float) -> dict[str, float]:
    """Seconds each part starts with: the budget split by the parts' weights. (A part that
    finishes early leaves its time to the parts after it: :func:`_share`.)"""
    total = sum(PARTS[p].weight for p in parts)
    return {p: budget_s * PARTS[p].weight / total for p in parts}


def _share(parts: list[str], index: int, remaining_s: float) -> float:
    """The seconds part ``index`` may spend: its weight's share of what is left for it and the
    parts after it."""
    later = sum(PARTS[p].weight for p in parts[index:])
    return remaining_s * PARTS[parts[index]].weight / later


class _Parser(Parser):  # dse's: a second, different value of an option refused
    def error(self, message: str):  # one line, "collect: ..." as its other refusals
        print(f"collect: {message}", file=sys.stderr)
        sys.exit(2)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="benchmarks/gpu/collect",
                description="Gather 2:4 and dense GEMMs, vector ops, depthwise and grouped "
                            "convolutions (cold and warm), per-op profiles of DeiT-S, ViT-B "
                            "and ConvNeXt-T dense and 2:4, and energy, as dse kernel datasets "
                            "(--parts all); and, named with --parts, image-reading and dense "
                            "convolutions, narrow norms, Swin-T linears, random convolutions, "
                            "data movement, fp32 math attention, ResNet-50 and Swin-T "
                            "profiles, bf16 / fp8 / int8 / int4 GEMMs; resumable (rerun "
                            "the same command to continue).",
                epilog="Then: dse calibrate --data h100-sxm --data OUT/kernels.parquet "
                       "--validate (see benchmarks/gpu/COLLECT.md).")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="where the kernels run (default cuda)")
    p.add_argument("--budget", default=str(DEFAULT_BUDGET_MIN), metavar="MINUTES",
                   help="time for the whole run in minutes, or a duration (90s, 1h); split "
                        f"over the parts by weight (default {DEFAULT_BUDGET_MIN:g})")
    p.add_argument("--parts", default="all", metavar="LIST",
                   help=f"comma-separated parts to run: {', '.join(PARTS)}; all: "
                        f"{', '.join(ALL)} (default all)")
    p.add_argument("--out", type=_out_folder, default=Path("benchmarks/gpu/results/collect"),
                   metavar="DIR", help="folder of the collection: a new one, or one to "
                                       "continue (default benchmarks/gpu/results/collect)")
    p.add_argument("--smoke", action="store_true",
                   help="a few tiny shapes and test models per part: checks the whole path "
                        "in seconds (never mixes with a full collection's folder)")
    p.add_argument("--hw", metavar="SPEC",
                   help="accelerator spec the speed of light is priced on: catalog name or "
                        "TOML file (default on CUDA: the catalog spec of the GPU; on the CPU: "
                        "none, unless given, e.g. a `dse hw probe` file)")
    p.add_argument("--flush", choices=("read", "write"), default="read",
                   help="how cold rows flush the cache: read-sweep a buffer larger than it "
                        "(default; no dirty lines left) or zero-fill it")
    p.add_argument("--seed", type=_seed, default=0,
                   help=f"operand seed, 0 to {MAX_SEED:,} (default 0)")
    return p


#: The largest --seed: dse's own (torch takes 64 bits, and every item adds an offset to it).
MAX_SEED = 2**31 - 1


def _seed(text: str) -> int:
    """An argparse type: a whole seed from 0 to MAX_SEED (99999999999999999999999 once failed
    every item, each with an overflow in torch, exit 3)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text}: give a whole number from 0 to "
                                         f"{MAX_SEED:,}") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"{text}: give a whole number from 0 to "
                                         f"{MAX_SEED:,}")
    return value


def _out_folder(text: str) -> Path:
    """An argparse type: the collection folder; not empty (which would be the current folder),
    no name longer than a file system takes (once an OSError traceback)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: give a folder path, e.g. "
                                         "--out benchmarks/gpu/results/collect")
    for part in Path(text).parts:
        if len(part.encode()) > 255:
            raise argparse.ArgumentTypeError(f"{part[:20]}...: a name longer than the "
                                             "file system takes (255); give a shorter one")
    return Path(text)


def _check_out(out: Path) -> None:
    """Before any work: the folder's nearest existing ancestor must be a folder a file can be
    created in (``os.access`` says yes to root in ``/proc``: a traceback after the work
    started, issue 26 round 9)."""
    from .out_check import folder_problem

    if out.exists() and not out.is_dir():
        raise CollectError(f"--out {out}: is a file; give a folder path")
    problem = folder_problem(out)
    if problem:
        raise CollectError(problem)


# --- the machine ------------------------------------------------------------------------------

#: GPU name tokens -> catalog spec (first match wins).
_GPU_SPECS = ((("H100", "PCIe"), "h100-pcie"), (("H100",), "h100-sxm"), (("H200",), "h200"),
              (("A100", "40GB"), "a100-40gb"), (("A100",), "a100-80gb"), (("B200",), "b200"),
              (("L4",), "l4"), (("4090",), "rtx4090"), (("V100",), "v100"),
              (("MI300X",), "mi300x"))


def _catalog_spec(gpu_name: str) -> str | None:
    tokens = gpu_name.replace("-", " ").split()
    for needed, spec in _GPU_SPECS:
        if all(any(n in t for t in tokens) if len(n) > 2 else n in tokens for n in needed):
            return spec
    return None


def _environment(args, parts: list[str]):
    """torch (and timm where a part needs it), the device, and the spec to price on; one
    CollectError line for whatever is missing, before any work."""
    try:
        import torch
    except ImportError:
        raise CollectError("collect needs torch: pip install 'sparsity-dse[export]'") from None
    if args.device == "cuda" and not torch.cuda.is_available():
        raise CollectError("--device cuda: no CUDA device is visible here "
                           "(torch.cuda.is_available() is False); use --device cpu")
    if {"models", "models_more", "energy"} & set(parts):
        try:
            import timm  # noqa: F401
        except ImportError:
            raise CollectError("parts models, models_more and energy need timm: pip install "
                               "'sparsity-dse[export]', or leave them out with --parts") from None
    import accelerator_models

    name = args.hw
    if name is None and args.device == "cuda":
        name = _catalog_spec(torch.cuda.get_device_name(0))
    hw = None
    if name is not None:
        try:
            hw = accelerator_models.load(name)
        except accelerator_models.SpecError as exc:
            raise CollectError(f"--hw {name}: {exc}") from None
    return torch, hw


def _facts(torch, device: str, clock) -> dict:
    """The fingerprint every row carries: dse's machine facts plus the GPU's SM count (what
    ``dse calibrate`` counts waves over), L2, library versions and the timing method."""
    from importlib import metadata

    from dse.measure import host

    facts = host.fingerprint(device)
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        facts.update({"sm_count": props.multi_processor_count,
                      "l2_cache_bytes": int(getattr(props, "L2_cache_size", 0) or 0),
                      "torch_cuda_version": torch.version.cuda})
    for dist in ("timm", "triton", "nvidia-ml-py"):
        try:
            facts[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    facts["collect"] = clock.describe()
    return facts


# --- the run ----------------------------------------------------------------------------------


class _Log:
    """``OUT/collect.log``, appended; ``echo`` also prints the line."""

    def __init__(self, path: Path):
        self.handle = path.open("a", encoding="utf-8")

    def __call__(self, message: str, echo: bool = False) -> None:
        stamp = datetime.datetime.now().isoformat(timespec="seconds")
        for line in str(message).splitlines() or [""]:
            self.handle.write(f"{stamp} {line}\n")
        self.handle.flush()
        if echo:
            print(message, flush=True)

    def close(self) -> None:
        self.handle.close()


def _run_part(part: Part, bench: Bench, store: Store, budget: Budget, log: _Log) -> Progress:
    """Run the items of ``part`` that earlier invocations left, while ``budget`` affords the
    next (estimated as the slowest of the last three); saves progress every 15 s and at the
    end, whatever ends it."""
    from dse.cli.progress import StatusLine

    progress = store.progress(part.name)
    items = part.items(bench.smoke)
    done = set(progress.done)
    keys = {item.key for item in items}
    for key in [k for k in progress.failed if k not in keys]:  # an item no longer asked for
        progress.failed.pop(key)
    todo = [item for item in items if item.key not in done]
    status = StatusLine(part.name, "items", every_s=30.0)
    costs: list[float] = []
    failures_in_a_row = 0
    saved = started = time.perf_counter()
    try:
        for item in todo:
            if costs and not budget.affords(max(costs[-3:])):
                log(f"{part.name}: budget spent, {len(items) - len(progress.done)} items left")
                break
            t0 = time.perf_counter()
            try:
                tables = part.run(item, bench)
            except Exception as exc:  # a bug or a broken device: logged, retried by a rerun
                progress.failed[item.key] = error_text(exc)
                log(f"{part.name} {item.key}: FAILED\n{traceback.format_exc()}")
                part.finish(bench)  # free what it held (out of memory is a common cause)
                failures_in_a_row += 1
                if failures_in_a_row >= MAX_FAILURES_IN_A_ROW:
                    log(f"{part.name}: {failures_in_a_row} items failed in a row; stopping "
                        "this part", echo=True)
                    break
                continue
            finally:
                costs.append(time.perf_counter() - t0)
            failures_in_a_row = 0
            for table, rows in tables.items():
                progress.tables[table].extend(rows)
            progress.done.append(item.key)
            progress.failed.pop(item.key, None)
            errors = sum(bool(r.get("error") or r.get("status") not in (None, "ok"))
                         for rows in tables.values() for r in rows)
            log(f"{part.name} {len(progress.done)}/{len(items)} {item.key}: "
                f"{sum(map(len, tables.values()))} rows ({errors} not run) in {costs[-1]:.2f} s")
            status(len(progress.done), len(items))
            if time.perf_counter() - saved > 15.0:
                store.save(part.name, progress, [i.key for i in items])
                saved = time.perf_counter()
    finally:
        progress.seconds += time.perf_counter() - started
        store.save(part.name, progress, [i.key for i in items])
        part.finish(bench)
    return progress


def _summary(name: str, progress: Progress, items: int) -> str:
    rows = progress.tables["kernels"]
    not_run = sum(bool(r["error"]) for r in rows)
    text = (f"{name}: {progress.status}, {len(progress.done)}/{items} items, {len(rows)} kernel "
            f"rows ({not_run} not run)")
    if progress.tables["profiles"]:
        text += f", {len(progress.tables['profiles'])} profile rows"
    if progress.tables["energy"]:
        states = [r["status"] for r in progress.tables["energy"]]
        text += f", {len(states)} energy rows ({states.count('ok')} read)"
    if progress.failed:
        text += f"; FAILED items: {', '.join(list(progress.failed)[:5])} (see collect.log)"
    return text + f"; {progress.seconds:.0f} s in all"


def _plan_text(store: Store, parts: list[str], budget_s: float, smoke: bool) -> str:
    shares = plan(parts, budget_s)
    lines = [f"plan: {budget_s / 60:.1f} min split by weight (time a part leaves passes to the "
             "parts after it):", f"  {'part':<12}{'share':>7}{'minutes':>9}{'items':>7}"
             f"{'done':>6}  status"]
    for p in parts:
        progress = store.progress(p)
        count = len(PARTS[p].items(smoke))
        status = "complete: skipped" if progress.status == "complete" else "to run"
        lines.append(f"  {p:<12}{shares[p] / budget_s:>7.0%}{shares[p] / 60:>9.1f}{count:>7}"
                     f"{len(progress.done):>6}  {status}  ({PARTS[p].what})")
    return "\n".join(lines)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def collect(args, budget_s: float, parts: list[str], command: str) -> int:
    """The run after the input was checked (:func:`main`); returns the exit status."""
    torch, hw = _environment(args, parts)
    from .collect_timing import METHODS, DeviceClock

    try:
        numerics = numerics_for(args.device, hw)
    except ValueError as exc:
        raise CollectError(str(exc)) from None
    device_name = (torch.cuda.get_device_name(0) if args.device == "cuda" else None)
    store = Store(args.out)
    clock = DeviceClock(args.device, args.flush, METHODS["smoke"] if args.smoke else None)
    facts = _facts(torch, args.device, clock)
    device_name = device_name or str(facts["device_name"])
    identity = {"device": args.device, "device_name": device_name, "torch": torch.__version__,
                "smoke": args.smoke, "flush": args.flush, "seed": args.seed,
                "hw": hw.name if hw is not None else ""}
    state = store.open_run(identity, command)
    log = _Log(args.out / "collect.log")
    base = {"run_id": f"{device_name}:{state['date']}:collect{'-smoke' if args.smoke else ''}",
            "date": state["date"], "device": args.device, "device_name": device_name,
            "fingerprint": json.dumps(facts, sort_keys=True, default=str), "round": 0}
    bench = Bench(args.device, args.smoke, args.seed, clock, base, hw, numerics, log)
    versions = ", ".join(f"{k} {facts[k]}" for k in ("torch", "cuda", "cusparselt", "driver")
                         if facts.get(k) is not None)
    log(f"=== {command}", echo=False)
    log(f"collect: {device_name} ({versions}); out {args.out}; speed of light on "
        f"{hw.name if hw is not None else 'nothing (no --hw)'}", echo=True)
    log(_plan_text(store, parts, budget_s, args.smoke), echo=True)
    budget = Budget(budget_s)  # from here: the setup above (seconds) is not the parts' time
    old = signal.signal(signal.SIGTERM, _interrupt)
    results: dict[str, Progress] = {}
    interrupted = False
    try:
        for index, name in enumerate(parts):
            progress = store.progress(name)
            if progress.status == "complete":
                log(f"{name}: complete in an earlier invocation; skipped", echo=True)
                results[name] = progress
                continue
            seconds = _share(parts, index, budget.remaining())
            if seconds <= 0:
                log(f"{name}: no time left in the budget; not started", echo=True)
                results[name] = progress
                continue
            log(f"{name}: running, {seconds:.0f} s", echo=True)
            part_budget = Budget(seconds)
            results[name] = _run_part(PARTS[name], bench, store, part_budget, log)
            log(_summary(name, results[name], len(PARTS[name].items(args.smoke))), echo=True)
    except KeyboardInterrupt as exc:
        interrupted = True
        log(f"interrupted ({exc or 'Ctrl-C'}); progress saved, rerun the command to continue",
            echo=True)
    finally:
        signal.signal(signal.SIGTERM, old)
    complete = [p for p in parts if p in results and results[p].status == "complete"]
    provenance = {"command": command, "invocations": state["invocations"], "identity": identity,
                  "fingerprint": facts, "hw": identity["hw"], "numerics": {
                      "dtype": numerics.dtype, "vector_dtype": numerics.vector_dtype,
                      "csr_dtype": numerics.csr_dtype},
                  "sol": "dse roofline, unfused, on the hw column's spec: each row under the "
                         "cache condition it was timed in (cold: DRAM; warm: the spec's cache "
                         "levels, none where the spec has none); whole models: the shipped "
                         "trace's cold bound with the converted linears priced 2:4",
                  "made_by": "benchmarks/gpu/collect (benchmarks/gpu/COLLECT.md)"}
    all_complete = [p for p in PARTS if store.progress(p).status == "complete"]
    written = store.write_outputs(all_complete, provenance) if all_complete else {}
    if written:
        log(f"wrote {', '.join(f'{t}.parquet ({n} rows)' for t, n in written.items())} from the "
            f"complete parts {', '.join(all_complete)} to {args.out}", echo=True)
    missing = [p for p in parts if p not in complete]
    code = EXIT_INTERRUPTED if interrupted else EXIT_INCOMPLETE if missing else 0
    if missing and not interrupted:
        print(f"collect: incomplete: {', '.join(missing)} (budget spent or items failed); "
              "rerun the same command to continue", file=sys.stderr)
    log(f"exit {code}" + (f"; incomplete: {', '.join(missing)}" if missing else ""))
    log.close()
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or the parser's one-line refusal (2)
        return int(exc.code or 0)
    command = "benchmarks/gpu/collect " + " ".join(shlex.quote(a) for a in argv)
    try:
        budget_s = parse_budget(args.budget)
        parts = parse_parts(args.parts)
        _check_out(args.out)
        return collect(args, budget_s, parts, command.strip())
    except CollectError as exc:
        print(f"collect: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
