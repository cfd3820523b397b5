"""The command line's option groups, defined once, and the one function that turns them into inputs.

Every command that describes designs takes the same design options (``--model``, ``--hw``,
``--set``, ``--format``, ``--batch``, ``--fusion``, ``--scope``) and numerics options
(``--dtype``, ``--vector-dtype``, ``--csr-dtype``, ``--index-bytes``), spelled, parsed and
refused the same way everywhere: every one is repeatable, ``--hw`` also takes comma-separated
names, ``--set`` applies to every ``--hw``. A command that evaluates one design (``dse simulate``)
takes the same options and refuses more than one value with one line. :func:`design_from_args`
loads traces and accelerators and checks formats, batches and fusions for all of them.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

import accelerator_models
from accelerator_models import Accelerator
from formats import parse as parse_format
from workloads import MAX_BATCH, Trace, load_trace

from ..calibrate.expected import expected_layers
from ..calibrate.predictor import DevicePredictors, load_predictors
from ..explore import EVALUATORS, ROOFLINE, Evaluator, Simulator
from ..output import check_output_path, check_report_dir
from ..roofline import SCOPES, EvaluationError, Numerics, evaluate_layers
from ..roofline.evaluator import fusion_models
from ..sim import LOCAL, SimConfig, SimulationError
from .progress import StatusLine

__all__ = [
    "MAX_BATCH",
    "SIM_OPTIONS",
    "Default",
    "Design",
    "Parser",
    "add_design_options",
    "add_evaluator_options",
    "add_numerics_options",
    "add_set_option",
    "add_sim_options",
    "batch_size",
    "check_outputs",
    "fusion_model",
    "design_from_args",
    "evaluator_from_args",
    "expected_ops",
    "numerics_from_args",
    "positive_int",
    "predictors_from_args",
    "refuse_unused_sim_options",
    "sim_config_from_args",
]



class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the command and pointing at --help."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}{_suggestion(message)} "
                     f"(see {self.prog} --help)\n")


def _suggestion(message: str) -> str:
    """"; did you mean evaluate?" for argparse's invalid-choice message of a near miss."""
    match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if not match:
        return ""
    choices = re.findall(r"'([^']*)'", match.group(2))
    close = difflib.get_close_matches(match.group(1), choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (and, for sizes, <= MAX_BATCH)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def batch_size(text: str) -> int:
    """An argparse type: a batch size, 1 to :data:`MAX_BATCH`."""
    value = positive_int(text)
    if value > MAX_BATCH:
        raise argparse.ArgumentTypeError(f"{text!r} is above the largest batch size taken, "
                                         f"{MAX_BATCH:,}")
    return value


def fusion_model(text: str) -> str:
    """An argparse type: a fusion model, ``FUSIONS`` or ``rules:NAME`` of a shipped table;
    refused in argparse's own words, so a near miss gets a suggestion."""
    allowed = fusion_models()
    if text not in allowed:
        raise argparse.ArgumentTypeError(
            f"invalid choice: {text!r} (choose from {', '.join(map(repr, allowed))})")
    return text


def _number(text: str) -> float:
    """A float, where ``inf`` means unlimited; the range is checked by SimConfig."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


# --- design ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Default:
    """What an optional design option stands for when not given, and how its help says it."""

    values: tuple
    text: str


def add_design_options(p: argparse.ArgumentParser, *, single: Sequence[str] = (),
                       models: Default | None = None, hardware: Default | None = None,
                       formats: Default | None = None,
                       batches: Default = Default((1,), "1"),
                       fusion: bool = True, numerics: bool = True) -> None:
    """``--model --hw --set --format --batch --fusion --scope`` and the numerics options on
    ``p``. ``single``: the options of which this command takes one value (the last given, as
    for any option given twice; one ``--hw`` naming several is refused). A :class:`Default`
    makes the option optional (:func:`design_from_args` applies it) and its help says so.
    ``fusion=False`` leaves out ``--fusion`` and ``--scope``, ``numerics=False`` the numerics
    options, for commands whose designs do not have them (``dse measure`` times kernels)."""
    def said(default: Default | None) -> str:
        return f" (default: {default.text})" if default is not None else ""

    title = "design (options repeatable"
    if single:
        title += "; the last " + ", ".join(single) + " counts here"
    g = p.add_argument_group(title + ")")
    g.add_argument("--model", dest="models", action="append", required=models is None,
                   metavar="NAME|PATH",
                   help="shipped trace name or alias (`dse workloads list`) or a trace .json"
                        + said(models))
    g.add_argument("--hw", dest="hardware", action="append", required=hardware is None,
                   metavar="NAME|PATH",
                   help="catalog name (`dse hw list`) or spec .toml; also comma-separated, "
                        "e.g. a100,h100,my_gpu.toml" + said(hardware))
    add_set_option(g)
    g.add_argument("--format", dest="formats", action="append", required=formats is None,
                   metavar="F",
                   help="sparse format, e.g. 2:4, block4@87.5%%, unstructured@0.875; dense is "
                        "always evaluated as the baseline" + said(formats))
    g.add_argument("--batch", dest="batches", action="append", type=batch_size, metavar="B",
                   help=f"batch size, 1 to {MAX_BATCH:,}" + said(batches))
    if fusion:
        g.add_argument("--fusion", dest="fusions", action="append", type=fusion_model,
                       metavar="{" + ",".join(fusion_models()) + "}",
                       help="fusion model (default unfused); rules:NAME fuses only the op-kind "
                            "pairs a shipped rule table lists (`dse fusion-rules`)")
        g.add_argument("--scope", choices=SCOPES, default="gemm",
                       help="gemm: prunable weight GEMMs only; all: every op (default gemm)")
    if numerics:
        add_numerics_options(p)
    p.set_defaults(evaluates=True, single_options=tuple(single), command_name=p.prog,
                   design_defaults={"--model": models, "--hw": hardware, "--format": formats,
                                    "--batch": batches})


def add_set_option(p) -> None:
    """``--set FIELD=VALUE``, repeatable: hardware overrides (on every --hw where there are
    several)."""
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="FIELD=VALUE",
                   help="override a hardware field (on every --hw), e.g. --set "
                        "dram_bandwidth_bytes_per_s=3e12 or --set sparse_tensor.patterns="
                        "2:4,1:4,2:8,2:16; repeatable (fields: see `dse hw show`)")


def add_numerics_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("numerics")
    g.add_argument("--dtype", default="fp16",
                   help="tensor-core dtype; values and features are stored in it (default fp16)")
    g.add_argument("--vector-dtype", default="fp16",
                   help="dtype of elementwise ops on the vector cores (default fp16)")
    g.add_argument("--csr-dtype", default="fp32",
                   help="dtype of CSR kernels on the vector cores (default fp32: sparse "
                        "libraries accumulate in FP32)")
    g.add_argument("--index-bytes", type=int, default=4,
                   help="CSR/BSR index width in bytes (default 4)")


def numerics_from_args(args: argparse.Namespace) -> Numerics:
    return Numerics(dtype=args.dtype, vector_dtype=args.vector_dtype, csr_dtype=args.csr_dtype,
                    index_width_bytes=args.index_bytes)


@dataclass(frozen=True)
class Design:
    """The inputs the design options describe, loaded and checked."""

    traces: list[Trace]
    hardware: list[Accelerator]  # every --hw with every --set applied
    hardware_names: list[str]  # the --hw names as given (bases of sweeps and studies)
    overrides: list[str]
    formats: list[str]
    batches: list[int]
    fusions: list[str]
    scope: str
    numerics: Numerics

    @property
    def trace(self) -> Trace:
        return self.traces[0]

    @property
    def accelerator(self) -> Accelerator:
        return self.hardware[0]


def _unique(values: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(values))


def design_from_args(args: argparse.Namespace) -> Design:
    """Load and check what the design options name (the command's defaults where an option is
    not given). Bad names, formats and hardware raise the ground packages' one-line errors."""
    single = getattr(args, "single_options", ())
    given = {"--model": args.models, "--hw": args.hardware, "--format": args.formats,
             "--batch": args.batches, "--fusion": getattr(args, "fusions", None)}
    defaults = {o: list(d.values) if d is not None else []
                for o, d in args.design_defaults.items()}
    # Where a command takes one value, the last one given wins, as for any option given twice.
    last = {o: (v[-1:] if v and o in single else v) or defaults.get(o, [])
            for o, v in given.items()}
    names = _unique(h.strip() for v in last["--hw"] for h in v.split(",") if h.strip())
    if "--hw" in single and len(names) > 1:
        raise EvaluationError(f"--hw {','.join(names)}: {args.command_name} takes one "
                              "accelerator; give one name")
    design = Design(
        traces=[load_trace(m) for m in _unique(last["--model"])],
        hardware=[accelerator_models.load(h, args.overrides) for h in names],
        hardware_names=names,
        overrides=list(args.overrides),
        formats=_unique(last["--format"]),
        batches=_unique(last["--batch"]),
        fusions=_unique(last["--fusion"] or ["unfused"]),
        scope=getattr(args, "scope", "gemm"),
        numerics=numerics_from_args(args) if hasattr(args, "dtype") else Numerics(),
    )
    for fmt in design.formats:
        parse_format(fmt)  # a bad format fails before any work
    return design


# --- the expectation beside the bound (--calibrated DEVICE) ---------------------------------------


def predictors_from_args(args: argparse.Namespace) -> DevicePredictors | None:
    """The kernel predictors ``--calibrated DEVICE`` names (a shipped set or a file of ``dse
    calibrate --out``), None without it; a bad DEVICE raises ``CalibrationError``'s one line."""
    name = getattr(args, "calibrated", None)
    return load_predictors(name) if name else None


def expected_ops(trace: Trace, design: Design, predictors: DevicePredictors) -> pd.DataFrame:
    """Every op of every design of ``trace`` on ``design``'s hardware, formats and batches,
    priced by ``predictors`` (``dse.calibrate.expected.expected_layers``). Kernels as they
    exist run one op at a time, so the expectation is unfused whatever ``--fusion`` says."""
    layers = evaluate_layers(trace, design.hardware, design.formats, design.batches,
                             fusion="unfused", scope=design.scope, numerics=design.numerics)
    return expected_layers(layers, trace, predictors)


# --- outputs --------------------------------------------------------------------------------------


def check_outputs(files: Sequence[tuple[str, Path | None]] = (),
                  folders: Sequence[tuple[str, Path | None]] = ()) -> None:
    """Check every output path of a command before any work: ``(option, path)`` pairs of result
    files (.csv, .parquet, .json) and of report folders; ``None`` paths are skipped."""
    for option, path in files:
        if path is not None:
            check_output_path(path, option=option)
    for option, path in folders:
        if path is not None:
            check_report_dir(path, option=option)


# --- evaluator and simulator ----------------------------------------------------------------------

#: SimConfig field -> the option that sets it (None on the command line: not given).
SIM_OPTIONS = {"buffer": "--buffer", "buffer_bytes": "--buffer-bytes", "depth": "--depth",
               "launch_overhead_s": "--launch-overhead-s", "overlap": "--overlap",
               "prefetch_depth": "--prefetch-depth"}


def add_sim_options(p: argparse.ArgumentParser) -> None:
    """The simulator's settings (also used by --evaluator simulate)."""
    g = p.add_argument_group("simulator settings")
    g.add_argument("--buffer", choices=("smem", "l2"),
                   help="on-chip buffer the tiles are sized to: shared memory per SM x SMs "
                        "(smem, default) or the L2, from the hardware spec")
    g.add_argument("--buffer-bytes", type=_number, metavar="BYTES",
                   help="buffer size in bytes instead of the spec's (inf = unlimited)")
    g.add_argument("--depth", type=_integer, metavar="N",
                   help="buffer stages per op: 1 = no overlap inside an op, 2 = double "
                        "buffering (default 2)")
    g.add_argument("--launch-overhead-s", type=_number, metavar="S",
                   help="fixed cost of each kernel (default: the spec's "
                        "kernel_launch_overhead_s, else 3.2e-6, fitted to models measured on an "
                        "H100)")
    g.add_argument("--overlap", choices=("pipelined", "full"),
                   help="pipelined: a tile computes after its load and stores after its "
                        "compute (default); full: compute and memory overlap completely, the "
                        "roofline's assumption")
    g.add_argument("--prefetch-depth", type=_integer, metavar="N",
                   help="with --fusion fused_prefetched, how many ops ahead weights may load "
                        "(default 1: the next op's; 0: none)")


def add_evaluator_options(p: argparse.ArgumentParser, workers: bool = True,
                          dask: bool = False) -> None:
    """--evaluator roofline|simulate (with --workers and --dask where the command fans out) and
    the simulator settings."""
    p.add_argument("--evaluator", choices=EVALUATORS,
                   help="roofline: speed of light (default); simulate: the event-level "
                        "simulator (latency, dense latency and speedup become the simulated "
                        "ones; the roofline's stay as roofline_latency_s, roofline_speedup)")
    fanout = (("--workers", "workers"),) * workers + (("--dask", "dask"),) * dask
    p.set_defaults(sim_fanout_options=fanout)
    if workers:
        p.add_argument("--workers", type=positive_int, metavar="N",
                       help="local processes for --evaluator simulate (default 1)")
    if dask:
        p.add_argument("--dask", nargs="?", const=LOCAL, metavar="tcp://HOST:PORT",
                       help="with --evaluator simulate: run the simulations on a Dask "
                            "cluster; alone, a LocalCluster of --workers processes (at least 2)")
    add_sim_options(p)


def sim_config_from_args(args: argparse.Namespace) -> SimConfig:
    """The SimConfig the options give (defaults where not given), checked; errors name the
    option."""
    given = {f: getattr(args, f) for f in SIM_OPTIONS if getattr(args, f) is not None}
    return SimConfig(**given).check(names=SIM_OPTIONS)


def refuse_unused_sim_options(args: argparse.Namespace) -> None:
    """Simulator options without --evaluator simulate would be silently ignored: refuse them."""
    if getattr(args, "evaluator", None) == "simulate":
        return
    for field, option in SIM_OPTIONS.items():
        if getattr(args, field) is not None:
            raise SimulationError(f"{option} is a simulator setting; add --evaluator simulate")
    for option, name in getattr(args, "sim_fanout_options", ()):
        if getattr(args, name) is not None:
            raise SimulationError(f"{option} runs simulations; add --evaluator simulate")


def evaluator_from_args(args: argparse.Namespace) -> Evaluator:
    """The roofline, or the simulator with the options' settings and fan-out (refusing simulator
    options given without --evaluator simulate)."""
    refuse_unused_sim_options(args)
    if args.evaluator != "simulate":
        return ROOFLINE
    workers = getattr(args, "workers", None) or 1
    dask = getattr(args, "dask", None)
    if dask == LOCAL:
        workers = max(workers, 2)
    return Simulator(sim_config_from_args(args), workers=workers, dask=dask,
                     progress=StatusLine("simulated", "designs"))

