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
import math
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..measure.budget import MAX_BUDGET_S, duration_text, parse_duration
from .names import (
    DEFAULT_INT4_GROUP,
    DTYPES,
    EVALUATORS,
    LOCAL,
    MAX_BATCH,
    PHASES,
    SCOPES,
    WEIGHT_DTYPES,
    fusion_models,
)
from .parser import OptionValueError, Parser, given_twice
from .progress import StatusLine

if TYPE_CHECKING:
    import pandas as pd

    from accelerator_models import Accelerator
    from workloads import Trace

    from ..calibrate.predictor import DevicePredictors
    from ..explore import Evaluator
    from ..roofline import Numerics
    from ..sim import SimConfig

__all__ = [
    "CALIBRATED_FIX",
    "HARDWARE_LIST",
    "MAX_BATCH",
    "MAX_SEED",
    "MAX_THREADS",
    "MAX_WAIT_S",
    "SIM_OPTIONS",
    "Default",
    "Design",
    "InputError",
    "OptionValueError",
    "Parser",
    "add_design_options",
    "add_evaluator_options",
    "add_numerics_options",
    "add_set_option",
    "add_sim_options",
    "batch_size",
    "check_outputs",
    "comma_list",
    "fusion_model",
    "design_from_args",
    "duration",
    "evaluator_from_args",
    "expected_ops",
    "integer",
    "identifier",
    "number",
    "numerics_from_args",
    "assumed_dtypes",
    "assumptions_line",
    "dtypes_text",
    "with_dtype_columns",
    "path_value",
    "positive_int",
    "predictors_from_args",
    "refuse_unread_overrides",
    "refuse_unused_sim_options",
    "seed",
    "set_overrides",
    "sim_config_from_args",
    "nonempty_text",
]



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


# --- typed option values: every number has a range, every string a form -----------------------
#
# Each factory returns an argparse ``type``: the value is refused while the command line is
# parsed, before any file is read or any work starts, in one line ``--option VALUE: the fix``.


#: Seeds: numpy, torch and scikit-learn take 0 .. 2**32 - 1, and commands add offsets to a
#: seed (per worker, per level, per sampled configuration), so the range leaves room for them.
MAX_SEED = 2**31 - 1
#: Time a command may be asked to spend waiting for an idle machine.
MAX_WAIT_S = 24 * 3600.0
#: Threads and processes a command may be asked for.
MAX_THREADS = 4096
#: The largest quantisation group (weights along K per scale): beyond any layer's K.
MAX_WEIGHT_GROUP = 2**24


def _range_text(low: int, high: int) -> str:
    return f"from {low:,} to {high:,}"


def integer(low: int, high: int, rule: str | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high`` (``1e3`` is taken as 1000).
    ``rule``: the fix the refusal gives instead of the range, e.g. ``"an integer >= 1 and
    <= 64 (2 = double buffering)"``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            try:
                as_float = float(text)
            except ValueError:
                as_float = math.nan
            if not (math.isfinite(as_float) and as_float.is_integer()):
                raise OptionValueError(f"{text!r}: not a whole number; give "
                                       f"{rule or 'one ' + _range_text(low, high)}") from None
            value = int(as_float)
        if value < low:
            raise OptionValueError(f"{text.strip()}: give {rule or f'at least {low:,}'}"
                                   + ("" if rule else f" (and at most {high:,})"))
        if value > high:
            raise OptionValueError(f"{text.strip()}: give {rule or f'at most {high:,}'}"
                                   + ("" if rule else f" (and at least {low:,})"))
        return value

    parse.__name__ = "integer"
    return parse


def number(low: float, high: float, *, above: bool = False, unlimited: bool = False,
           unit: str = "", rule: str | None = None) -> Callable[[str], float]:
    """An argparse type: a finite number from ``low`` (excluded with ``above``) to ``high``;
    ``unlimited``: ``inf`` is taken too (meaning no limit). NaN is always refused."""
    span = (f"above {low:g} and at most {high:g}{unit}" if above
            else f"from {low:g} to {high:g}{unit}")
    fix = rule or f"a number {span}" + (" (inf for unlimited)" if unlimited else "")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise OptionValueError(f"{text!r}: not a number; give {fix}") from None
        if math.isinf(value) and value > 0 and unlimited:
            return value
        if not math.isfinite(value) or value < low or (above and value == low) or value > high:
            raise OptionValueError(f"{value!r}: give {fix}")
        return value

    parse.__name__ = "number"
    return parse


def seed(text: str) -> int:
    """An argparse type: a seed, 0 to :data:`MAX_SEED`."""
    return integer(0, MAX_SEED, f"a seed from 0 to {MAX_SEED:,}")(text)


def duration(option_max_s: float | None = None) -> Callable[[str], float]:
    """An argparse type: a duration (``90s``, ``5m``, ``1.5h``, a bare number of seconds) in
    seconds, positive and at most ``option_max_s`` (default :data:`MAX_BUDGET_S`); refused
    with how long the run would plan and the longest one taken."""
    limit = MAX_BUDGET_S if option_max_s is None else option_max_s

    def parse(text: str) -> float:
        try:
            seconds = parse_duration(text, option="", error=ValueError)
        except ValueError as exc:
            raise OptionValueError(str(exc).strip()) from None
        if seconds > limit:
            raise OptionValueError(f"{text}: a run of {duration_text(seconds)}, beyond the "
                                   f"longest one dse plans, {duration_text(limit)}; give at most "
                                   f"{duration_text(limit)} and split longer work into several "
                                   "runs")
        return seconds

    parse.__name__ = "duration"
    return parse


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def nonempty_text(fix: str) -> Callable[[str], str]:
    """An argparse type: a non-empty string without control characters (a name, a shipped
    entry or a path); ``fix`` says what to give instead, e.g. ``"a shipped predictor set or a
    file written by dse calibrate --out"``."""
    def parse(value: str) -> str:
        if not value.strip() or _CONTROL.search(value):
            raise OptionValueError(f"{value!r}: give {fix}")
        return value

    parse.__name__ = "text"
    return parse


def comma_list(fix: str, example: str) -> Callable[[str], str]:
    """An argparse type: items separated by commas (``a100,h100,my_gpu.toml``), none of them
    empty and none with control characters; the text comes back as given, split by the command.
    ``fix`` names the items (``"catalog names or spec .toml files"``), ``example`` is a list
    that would be taken. An empty item (``a100,``, ``a100,,h100``) is refused: it is a typo, not
    a request, and dropping it without a word would hide one."""
    def parse(value: str) -> str:
        if not value.strip() or _CONTROL.search(value):
            raise OptionValueError(f"{value!r}: give {fix} separated by commas, e.g. {example}")
        if any(not item.strip() for item in value.split(",")):
            raise OptionValueError(f"{value!r}: an empty item between commas; give {fix} "
                                   f"separated by single commas, none empty, e.g. {example}")
        return value

    parse.__name__ = "list"
    return parse


#: What --hw takes, as its refusal says it.
HARDWARE_LIST = comma_list("catalog names (dse hw list) or spec .toml files", "a100,h100")


def identifier(what: str, longest: int = 100) -> Callable[[str], str]:
    """An argparse type: a name of letters, digits and ``. _ + : -`` (1 to ``longest``
    characters, the first a letter or digit), as names of specs, predictor sets and studies
    are written."""
    form = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9._+:-]{{0,{longest - 1}}}$")

    def parse(value: str) -> str:
        if not form.match(value):
            raise OptionValueError(f"{value!r}: give {what} of letters, digits and . _ + : - "
                                   f"(1 to {longest} characters, the first a letter or digit)")
        return value

    parse.__name__ = "name"
    return parse


def path_value(value: str) -> Path:
    """An argparse type: a file or folder path; an empty one (which would mean the current
    folder) is refused."""
    if not value.strip() or _CONTROL.search(value):
        raise OptionValueError(f"{value!r}: give a file or folder path")
    return Path(value)


#: The simulator's settings, in physical ranges: a buffer up to 2**63 bytes (inf: unlimited),
#: up to 64 stages, a launch of at most a second (none takes that long; 1e308 would make every
#: latency infinite), prefetching up to 2**30 ops ahead (SimConfig.roofline's "unlimited").
MAX_BUFFER_BYTES = float(2**63)
MAX_DEPTH = 64
MAX_LAUNCH_S = 1.0
MAX_PREFETCH = 1 << 30
BUFFER_RULE = "a positive size in bytes up to 2**63 (inf for unlimited)"
LAUNCH_RULE = "a finite number of seconds >= 0 and <= 1 (0 = no launch cost)"


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
                       fusion: bool = True, numerics: bool = True,
                       quantisation: bool = False) -> None:
    """``--model --hw --set --format --batch --fusion --scope`` and the numerics options on
    ``p``. ``single``: the options of which this command takes one value (a second, different
    value of these repeatable options is refused, as is one ``--hw`` naming several; every
    option of one value refuses a second, different one: :class:`.parser.Parser`). A
    :class:`Default` makes the option optional (:func:`design_from_args` applies it) and its
    help says so.
    ``fusion=False`` leaves out ``--fusion`` and ``--scope``, ``numerics=False`` the numerics
    options, for commands whose designs do not have them (``dse measure`` times kernels);
    ``quantisation=True`` adds ``--weight-dtype``, ``--weight-group-size`` and ``--kv-dtype``."""
    def said(default: Default | None) -> str:
        return f" (default: {default.text})" if default is not None else ""

    title = "design (options repeatable"
    if single:
        title += "; one value of " + ", ".join(single) + " here"
    g = p.add_argument_group(title + ")")
    g.add_argument("--model", dest="models", action="append", required=models is None,
                   type=nonempty_text("a shipped trace name (dse workloads list) or a trace .json"),
                   metavar="NAME|PATH",
                   help="shipped trace name or alias (`dse workloads list`) or a trace .json; "
                        "or a language model, shipped or a config.json, with --phase and "
                        "--context" + said(models))
    g.add_argument("--phase", choices=PHASES,
                   help="language models (dse workloads list): prefill (--context prompt "
                        "tokens per request) or decode (one new token per request)")
    g.add_argument("--context", type=positive_int, metavar="TOKENS",
                   help="language models: prompt tokens (prefill) or the context length the "
                        "new token attends to (decode)")
    g.add_argument("--hw", dest="hardware", action="append", required=hardware is None,
                   type=HARDWARE_LIST,
                   metavar="NAME|PATH",
                   help="catalog name (`dse hw list`) or spec .toml; also comma-separated, "
                        "e.g. a100,h100,my_gpu.toml" + said(hardware))
    add_set_option(g)
    g.add_argument("--format", dest="formats", action="append", required=formats is None,
                   type=nonempty_text("a sparse format, e.g. 2:4 or block4@87.5%"),
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
        g.add_argument("--scope", choices=SCOPES,
                       help="gemm: prunable weight GEMMs only; all: every op (default gemm; "
                            "all for language models, whose attention reads the KV cache)")
    if numerics:
        add_numerics_options(p, quantisation)
    p.set_defaults(evaluates=True, single_options=tuple(single), command_name=p.prog,
                   design_defaults={"--model": models, "--hw": hardware, "--format": formats,
                                    "--batch": batches})


def add_set_option(p) -> None:
    """``--set FIELD=VALUE``, repeatable: hardware overrides (on every --hw where there are
    several)."""
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   type=nonempty_text("FIELD=VALUE, e.g. dram_bandwidth_bytes_per_s=3e12"),
                   metavar="FIELD=VALUE",
                   help="override a hardware field (on every --hw), e.g. --set "
                        "dram_bandwidth_bytes_per_s=3e12 or --set sparse_tensor.patterns="
                        "2:4,1:4,2:8,2:16; repeatable (fields: see `dse hw show`)")


def add_numerics_options(p: argparse.ArgumentParser, quantisation: bool = False) -> None:
    """``--dtype --vector-dtype --csr-dtype --index-bytes``; with ``quantisation``, also
    ``--weight-dtype --weight-group-size --kv-dtype``."""
    g = p.add_argument_group("numerics")
    g.add_argument("--dtype", default=None, type=nonempty_text("a dtype, e.g. fp16"),
                   help="tensor-core dtype; values and features are stored in it (default "
                        "fp16, or where a spec has no fp16 rate, such as a probed CPU, the "
                        "first of bf16 and tf32 it has, said in the output)")
    g.add_argument("--vector-dtype", default=None, type=nonempty_text("a dtype, e.g. fp16"),
                   help="dtype of elementwise ops on the vector cores (default fp16, or fp32 "
                        "where a spec has no fp16 vector rate)")
    # Both default to None so that a value given where no format reads it can be refused
    # (refuse_unread_numerics); numerics_from_args applies the defaults.
    g.add_argument("--csr-dtype", default=None, type=nonempty_text("a dtype, e.g. fp32"),
                   help="dtype of CSR kernels on the vector cores (default fp32: sparse "
                        "libraries accumulate in FP32); read by unstructured formats and by "
                        "sparse formats the hardware lacks (run as CSR)")
    g.add_argument("--index-bytes", type=integer(1, 8, "1, 2, 4 or 8"), default=None,
                   help="CSR/BSR index width in bytes (default 4); read by block and "
                        "unstructured formats and by sparse formats the hardware lacks")
    if not quantisation:
        return
    g.add_argument("--weight-dtype", choices=WEIGHT_DTYPES,
                   help="weight-only quantisation of the linear layers' weights (the LM head "
                        "included): values in this dtype plus fp16 scales (int4: one per group "
                        "of --weight-group-size along K; int8, fp8: one per output channel); "
                        "activations, the KV cache and FLOPs stay in --dtype (default: --dtype)")
    g.add_argument("--weight-group-size", type=integer(1, MAX_WEIGHT_GROUP), metavar="G",
                   help="quantisation group along K: one fp16 scale per G weights of a row "
                        f"(default {DEFAULT_INT4_GROUP} for int4, per channel for int8 and fp8)")
    g.add_argument("--kv-dtype", choices=DTYPES,
                   help="dtype of a language model's KV cache: its read in decode, its size "
                        "in the memory fit (default: --dtype)")


def numerics_from_args(args: argparse.Namespace, hardware=()) -> Numerics:
    """The run's numerics; a dtype not given is fp16 where every accelerator of ``hardware``
    has an fp16 rate, else the first dtype they all have (a CPU spec from ``dse hw probe``
    has no fp16 rate): see :func:`assumed_dtypes` for what was assumed."""
    from ..roofline import Numerics

    dtype, vector = args.dtype, args.vector_dtype
    if dtype is None:
        dtype = next((d for d in ("fp16", "bf16", "tf32")
                      if all(d in h.tensor_flops_per_s for h in hardware)), "fp16")
    if vector is None:
        vector = next((d for d in ("fp16", "fp32")
                       if all(d in h.vector_flops_per_s for h in hardware)), "fp16")
    weight_dtype = getattr(args, "weight_dtype", None)
    group = getattr(args, "weight_group_size", None)
    if group is not None and weight_dtype is None:
        raise InputError(f"--weight-group-size {group}: a group size is for quantised weights; "
                         f"give --weight-dtype ({', '.join(WEIGHT_DTYPES)}) too")
    if group is not None and weight_dtype == dtype:
        # Weights stored in the compute dtype are not quantised: no scales for a group to size.
        raise InputError(f"--weight-group-size {group}: --weight-dtype {weight_dtype} is the "
                         f"compute dtype (--dtype {dtype}), so the weights take no scales; give "
                         "a wider --dtype, or leave the group size out")
    csr = args.csr_dtype if args.csr_dtype is not None else "fp32"
    index = args.index_bytes if args.index_bytes is not None else 4
    _check_numerics_options(dtype, vector, csr, index)
    from ..roofline.numerics import NumericsError

    try:
        return Numerics(dtype=dtype, vector_dtype=vector, csr_dtype=csr,
                        index_width_bytes=index, weight_dtype=weight_dtype,
                        weight_group_size=group, kv_dtype=getattr(args, "kv_dtype", None))
    except NumericsError as exc:  # the weights against the compute dtype: name both options
        raise InputError(f"--weight-dtype {weight_dtype} with --dtype {dtype}: {exc}") from None


def _check_numerics_options(dtype: str, vector: str, csr: str, index: int) -> None:
    """Each number type as the option that gave it: the library's check names its field
    (``dtype 'fp32' is not a tensor-core dtype``), not ``--dtype`` (issue 26, round 9)."""
    from ..roofline.numerics import TENSOR_DTYPES, VECTOR_DTYPES

    if dtype not in TENSOR_DTYPES:
        raise InputError(f"--dtype {dtype}: dtype {dtype!r} is not a tensor-core dtype; use "
                         f"one of {', '.join(TENSOR_DTYPES)} (elementwise ops: --vector-dtype)")
    for option, value in (("--vector-dtype", vector), ("--csr-dtype", csr)):
        if value not in VECTOR_DTYPES:
            raise InputError(f"{option} {value}: not a vector dtype; use one of "
                             f"{', '.join(VECTOR_DTYPES)}")
    if index not in (1, 2, 4, 8):
        raise InputError(f"--index-bytes {index}: an index is 1, 2, 4 or 8 bytes wide; give "
                         "one of those")


def dtypes_text(numerics: Numerics) -> str:
    """The dtypes a run priced, in words: ``fp16 (vector ops fp16)``, with the weights' and the
    KV cache's where they differ from the compute dtype."""
    text = f"{numerics.dtype} (vector ops {numerics.vector_dtype}"
    weights = getattr(numerics, "weight_dtype", None)
    if weights and weights != numerics.dtype:
        text += f", weights {weights}"
    kv = getattr(numerics, "kv_dtype", None)
    if kv and kv != numerics.dtype:
        text += f", KV cache {kv}"
    return text + ")"


def assumed_dtypes(args: argparse.Namespace, numerics: Numerics) -> str:
    """One line saying which dtypes were chosen for the user because the hardware has no fp16
    rate (empty when fp16 applied or the user chose)."""
    parts = []
    if getattr(args, "dtype", "") is None and numerics.dtype != "fp16":
        parts.append(f"--dtype {numerics.dtype}")
    if getattr(args, "vector_dtype", "") is None and numerics.vector_dtype != "fp16":
        parts.append(f"--vector-dtype {numerics.vector_dtype}")
    if not parts:
        return ""
    return (f"note: the hardware has no fp16 rate, so this run assumed {' '.join(parts)} "
            "(give --dtype to choose)")


def assumptions_line(hardware: Sequence[str], numerics: Numerics, *,
                     batches: Sequence[int] = (), fusions: Sequence[str] = (),
                     scope: str | None = None, fixed: Sequence[tuple[str, Any]] = (),
                     varied: Sequence[str] = ()) -> str:
    """What a run priced, in one line, as every command prints it (the issue's "output that
    says what it assumed"): ``hardware: a100 at fp16 (vector ops fp16); batch 1, 8; fusion
    unfused, scope gemm; set sparse_tensor.patterns = [2:4]; varied batch``. ``fixed``: the
    overrides applied to all of it (``(path, value)``; ``--set`` or a space's
    ``[hardware.set]``); ``varied``: what a sweep or search varies. Parts not given are left
    out (a search names its batches and fusion on lines of their own)."""
    said = f"hardware: {', '.join(hardware)} at {dtypes_text(numerics)}"
    if batches:
        said += f"; batch {', '.join(str(b) for b in batches)}"
    if fusions:
        said += f"; fusion {', '.join(fusions)}" + (f", scope {scope}" if scope else "")
    if fixed:
        said += "; set " + ", ".join(f"{path} = {_shown(value)}" for path, value in fixed)
    if varied:
        said += "; varied " + ", ".join(varied)
    return said


def set_overrides(overrides: Sequence[str]) -> list[tuple[str, str]]:
    """``--set FIELD=VALUE`` overrides as the ``fixed`` pairs of :func:`assumptions_line`."""
    return [tuple(part.strip() for part in o.split("=", 1)) for o in overrides]


def _shown(value) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


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

    @property
    def hardware_labels(self) -> list[str]:
        """Each accelerator by the name its rows carry, without the ``--set`` overrides
        (:func:`assumptions_line` names them apart), and the spec file it came from: ``a100``
        is ``a100-40gb``, ``h.toml`` is ``host (h.toml)``."""
        labels = []
        for given, acc in zip(self.hardware_names, self.hardware, strict=True):
            name = acc.name.split("[", 1)[0]
            labels.append(f"{name} ({given})" if given.endswith(".toml") else name)
        return labels


#: Hardware fields dse measure's speed of light reads (the caches: the warm rows' levels and
#: the cold rows' narrowest link).
MEASURE_FIELDS = ("dram_bandwidth_bytes_per_s", "tensor_flops_per_s.", "vector_flops_per_s.",
                  "sparse_tensor.", "block_sparse.", "cache.")

#: Hardware fields dse study feature-overhead never reads: the memory fit's (its tables and
#: charts are latency, traffic and energy), so a --set of them once moved nothing but a label.
STUDY_UNREAD_FIELDS = ("l2_bytes", "dram_capacity_bytes")


def _unread_field(args: argparse.Namespace, field: str) -> str | None:
    """Why the command ``args`` runs does not read hardware ``field`` and what would, or None
    where it reads it."""
    from accelerator_models import SIMULATOR_FIELDS

    command = args.command_name
    if hasattr(args, "evaluator"):  # the roofline unless --evaluator simulate
        simulated = args.evaluator == "simulate"
    else:  # dse simulate has the simulator's settings and no choice of evaluator
        simulated = hasattr(args, "launch_overhead_s")
    if command == "dse study feature-overhead" and field in STUDY_UNREAD_FIELDS:
        return ("the study prices latency, traffic and energy, never the memory fit; "
                "dse evaluate --out prints the fit (fits, fits_on_chip), or leave it out")
    if command in ("dse simulate", "dse sweep"):
        why = _unread_by_latency_only(args, field, simulated)
        if why is not None:
            return why
    if command == "dse measure":
        if not field.startswith(MEASURE_FIELDS):
            return ("its speed of light reads only the rates, the sparse kernels and the "
                    "caches; leave it out")
    if field in SIMULATOR_FIELDS and not simulated:
        fix = ("add --evaluator simulate" if hasattr(args, "evaluator")
               else "run dse simulate (or dse sweep --evaluator simulate) for it")
        return ("only the event-level simulator reads it: the roofline bound prices kernels "
                f"at peak, with no launch cost or on-chip buffer; {fix}, or leave it out")
    return None


def _unread_by_latency_only(args: argparse.Namespace, field: str, simulated: bool) -> str | None:
    """What dse simulate and dse sweep never read: they price latency and the DRAM fit (a sweep
    only where it varies the batch), never energy or power; the simulator sizes its buffer from one
    source (--buffer-bytes, else the --buffer level's fields) and takes --launch-overhead-s
    over the spec's launch cost. Each of these once moved nothing but a label."""
    from accelerator_models import ENERGY_FIELDS

    command = args.command_name
    if field in ENERGY_FIELDS and field != "dram_capacity_bytes":
        return ("it prices latency, never energy or power; dse evaluate, compare and search "
                "(--objective energy) read it, or leave it out")
    if field == "dram_capacity_bytes" and command == "dse sweep":
        if not any(v.partition("=")[0].strip() == "batch"
                   for v in getattr(args, "vary", None) or []):
            return ("a sweep prices the memory fit only when it varies the batch; add --vary "
                    "batch=..., or leave it out")
    if not simulated:
        if field == "l2_bytes":
            return ("only the event-level simulator reads it here (--evaluator simulate "
                    "--buffer l2); add those, or leave it out")
        return None
    if field in ("l2_bytes", "shared_memory_per_sm_bytes", "sm_count"):
        given = getattr(args, "buffer_bytes", None)
        if given is not None:
            return (f"--buffer-bytes {given:g} sizes the simulator's buffer instead "
                    "of the spec; leave one of them out")
        buffer = getattr(args, "buffer", None) or "smem"
        used = ("l2_bytes",) if buffer == "l2" else ("shared_memory_per_sm_bytes", "sm_count")
        if field not in used:
            other = "l2" if buffer == "smem" else "smem"
            return (f"the simulator's buffer is the {buffer}, sized by {' x '.join(used)}; add "
                    f"--buffer {other}, or leave it out")
    if field == "kernel_launch_overhead_s" and getattr(args, "launch_overhead_s", None) is not None:
        return ("--launch-overhead-s sets the launch cost instead of the spec; leave one of "
                "them out")
    return None


def refuse_unread_overrides(args: argparse.Namespace) -> None:
    """Refuse, in one line, a ``--set FIELD=VALUE`` (or a sweep's ``--vary hw.FIELD=...``) of a
    hardware field the command never reads: an option is honoured or refused, never ignored
    (``dse evaluate --set kernel_launch_overhead_s=1`` once changed nothing)."""
    from accelerator_models import SpecError

    given = [(f"--set {o}", o.partition("=")[0].strip()) for o in args.overrides]
    given += [(f"--vary {v}", v.partition("=")[0].strip()[3:])
              for v in getattr(args, "vary", None) or [] if v.strip().startswith("hw.")]
    for option, field in given:
        why = _unread_field(args, field)
        if why is not None:
            raise SpecError(f"{option}: {args.command_name} does not read {field}: {why}")


#: --vary dimensions after which a sparse format may no longer run natively (a block size
#: below the spec's minimum): a sweep with one of them may fall back to CSR anywhere.
_NATIVITY_VARIED = ("format.", "hw.block_sparse.", "hw.sparse_tensor.")


def _numerics_readers(args: argparse.Namespace, formats, hardware) -> tuple[bool, bool]:
    """Whether some format of the run reads --index-bytes and whether some reads --csr-dtype.
    Block formats store BSR indices, unstructured ones CSR indices and run CSR kernels; a
    sparse format the hardware does not run natively falls back to CSR (or dense) and reads
    both; dense and natively run N:M read neither (N:M metadata has its own width)."""
    from formats import NM, Block, Dense, Unstructured

    varied = any(v.strip().startswith(_NATIVITY_VARIED) for v in getattr(args, "vary", None)
                 or [])
    # The study runs every N:M format on the sparse tensor core unless --set names its patterns.
    study_nm = (args.command_name == "dse study feature-overhead"
                and not any(o.partition("=")[0].strip() == "sparse_tensor.patterns"
                            for o in args.overrides))
    index = csr = False
    for fmt in formats:
        if isinstance(fmt, Dense):
            continue
        native = not varied and all(fmt.runs_natively_on(h) for h in hardware)
        if isinstance(fmt, NM) and study_nm:
            native = True
        index |= isinstance(fmt, Block | Unstructured) or not native
        csr |= isinstance(fmt, Unstructured) or not native
    return index, csr


def refuse_unread_numerics(args: argparse.Namespace, formats, hardware) -> None:
    """Refuse, in one line, ``--index-bytes`` or ``--csr-dtype`` where no format of the run
    reads it (dense alone, N:M the hardware runs): an option is honoured or refused, never
    ignored (``dse evaluate --index-bytes 2`` on dense once moved nothing but a column)."""
    if not hasattr(args, "index_bytes"):
        return
    index, csr = _numerics_readers(args, formats, hardware)
    names = ",".join(f.name for f in formats) or "dense"
    on = ", ".join(h.name.split("[", 1)[0] for h in hardware)
    command = args.command_name
    if args.index_bytes is not None and not index:
        raise InputError(
            f"--index-bytes {args.index_bytes}: {command} does not read it here: only block and "
            "unstructured formats store indices (and a sparse format the hardware lacks, run "
            f"as CSR), and --format {names} on {on} stores none; add --format "
            "unstructured@0.9 or block4@0.875, or leave it out")
    if args.csr_dtype is not None and not csr:
        raise InputError(
            f"--csr-dtype {args.csr_dtype}: {command} does not read it here: only unstructured "
            "formats run CSR kernels (and a sparse format the hardware lacks), and --format "
            f"{names} on {on} runs none; add --format unstructured@0.9, or leave it out")


def _unique(values: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(values))


def design_from_args(args: argparse.Namespace) -> Design:
    """Load and check what the design options name (the command's defaults where an option is
    not given). Bad names, formats and hardware raise the ground packages' one-line errors."""
    import accelerator_models
    from formats import parse as parse_format
    from workloads import load_model
    from workloads.llm import check_priceable

    single = getattr(args, "single_options", ())
    given = {"--model": args.models, "--hw": args.hardware, "--format": args.formats,
             "--batch": args.batches, "--fusion": getattr(args, "fusions", None)}
    defaults = {o: list(d.values) if d is not None else []
                for o, d in args.design_defaults.items()}
    # Where a command takes one value of these repeatable options, a second, different one is
    # refused, as for every option of one value (the first was dropped without a word).
    for option in single:
        values = _unique(str(v) for v in given.get(option) or [])
        if len(values) > 1:
            raise InputError(given_twice(option, values, args.command_name))
    last = {o: (v[-1:] if v and o in single else v) or defaults.get(o, [])
            for o, v in given.items()}
    names = _unique(h.strip() for v in last["--hw"] for h in v.split(",") if h.strip())
    if not names and last["--hw"]:
        raise InputError(f"--hw {','.join(last['--hw'])!r}: no hardware name; give a catalog "
                         "name (see `dse hw list`) or a spec .toml, e.g. --hw a100")
    if "--hw" in single and len(names) > 1:
        from ..roofline import EvaluationError

        raise EvaluationError(f"--hw {','.join(names)}: {args.command_name} takes one "
                              "accelerator; give one name")
    traces = [load_model(m, getattr(args, "phase", None), getattr(args, "context", None))
              for m in _unique(last["--model"])]
    language = any(t.provenance.get("phase") for t in traces)
    hardware = [accelerator_models.load(h, args.overrides) for h in names]
    refuse_unread_overrides(args)  # after the loader's own refusals of a bad --set
    from ..roofline import Numerics  # the engine (numba), once the names are known good

    design = Design(
        traces=traces,
        hardware=hardware,
        hardware_names=names,
        overrides=list(args.overrides),
        formats=_unique(last["--format"]),
        batches=_unique(last["--batch"]),
        fusions=_unique(last["--fusion"] or ["unfused"]),
        scope=getattr(args, "scope", None) or ("all" if language else "gemm"),
        numerics=numerics_from_args(args, hardware) if hasattr(args, "dtype") else Numerics(),
    )
    parsed = [parse_format(fmt) for fmt in design.formats]  # a bad format fails before work
    refuse_unread_numerics(args, parsed, design.hardware)
    for trace in design.traces:  # language-model designs the evaluator cannot price yet
        check_priceable(trace, design.batches, design.fusions)
    return design


# --- the expectation beside the bound (--calibrated DEVICE) ---------------------------------------

#: What --calibrated takes, said when it is refused.
CALIBRATED_FIX = ("a shipped predictor set (h100-sxm, cpu-amd-epyc-2c) or a file written by "
                  "dse calibrate --out")


def predictors_from_args(args: argparse.Namespace) -> DevicePredictors | None:
    """The kernel predictors ``--calibrated DEVICE`` names (a shipped set or a file of ``dse
    calibrate --out``), None without it; a bad DEVICE raises ``CalibrationError``'s one line."""
    from ..calibrate.predictor import load_predictors

    name = getattr(args, "calibrated", None)
    return load_predictors(name) if name else None


def expected_ops(trace: Trace, design: Design, predictors: DevicePredictors,
                 backend: str = "exported") -> pd.DataFrame:
    """Every op of every design of ``trace`` on ``design``'s hardware, formats and batches,
    priced by ``predictors``: :func:`dse.api.expected_ops` of the options' design (unfused
    whatever ``--fusion`` says; ``backend`` as there)."""
    from .. import api

    return api.expected_ops(trace, design.hardware, design.formats, design.batches, predictors,
                            design.scope, design.numerics, backend)


def add_backend_option(parser) -> None:
    """``--backend``: the ops a calibrated expectation prices (:func:`dse.api.expected_ops`)."""
    parser.add_argument(
        "--backend", choices=("exported", "torch"), default=None,
        help="with --calibrated: the ops the expectation prices: exported (the default: the "
             "trace as exported) or torch (what torch runs on the predictors' device, as the "
             "fidelity figures are priced: attention fused when dense and its math path when "
             "sparse, only the linears torch converts sparse; 2:4 on cuda, block and "
             "unstructured on cpu). The bound stays the exported trace's")


#: What a calibrated command says when it priced the exported trace and torch runs other ops.
TORCH_NOTE = ("  note: priced as exported; torch runs this model's attention fused when dense and "
              "by its math path when sparse (and converts only some linears): --backend torch "
              "prices that, as the fidelity figures do")


def backend_from_args(args, traces: Sequence[Trace] = ()) -> str:
    """The ops the expectation prices (``--backend``), refused in one line where it cannot
    apply: without --calibrated, with --per-layer (whose rows are the exported ops), and
    ``torch`` for a trace whose torch run is not known (:func:`workloads.backend.
    torch_run_unknown`: a language model, a trace not exported from timm)."""
    if args.backend is None:
        return "exported"
    if not args.calibrated:
        raise InputError(f"--backend {args.backend}: it chooses the ops the expectation "
                         "prices; give --calibrated DEVICE too, or leave out --backend")
    if getattr(args, "per_layer", False) and args.backend != "exported":
        raise InputError(f"--backend {args.backend} with --per-layer: the per-layer rows are "
                         "the exported trace's ops; leave out one of the two")
    if args.backend == "torch":
        from workloads.backend import torch_run_unknown

        for trace in traces:
            why = torch_run_unknown(trace)
            if why:
                raise InputError(f"--backend torch: {why}; what torch runs was measured for "
                                 "timm models only: price it as exported (leave out "
                                 "--backend torch)")
    return args.backend


def torch_runs_otherwise(trace: Trace) -> bool:
    """Whether torch runs ops other than ``trace``'s as exported (a timm model's: language
    models are not covered): attention it fuses, or prunable ops it would not convert to 2:4
    (convolutions, linears whose dims are not multiples of 64)."""
    if trace.provenance.get("phase"):
        return False
    from workloads.backend import attention_regions

    from ..calibrate.validate import torch_converts_to_24

    ops = trace.ops
    unconverted = ops["prunable"] & ~torch_converts_to_24(ops["kind"], ops["m"], ops["k"])
    return bool(attention_regions(trace)) or bool(unconverted.any())


# --- inputs and outputs: checked before any work -------------------------------------------------


class InputError(ValueError):
    """An input path that does not exist or cannot be read; the message names the option, the
    path and the fix."""


def _probe_writable(folder: Path, option: str, path: Path) -> None:
    """Create and remove a file in ``folder``: what a result will do, and the only test that
    tells a read-only mount, ``/proc`` or ``/sys`` apart when ``os.access`` says yes (it
    always does for root)."""
    from ..output import OutputError

    try:
        handle, name = tempfile.mkstemp(prefix=".dse-write-check-", dir=folder)
    except OSError as exc:
        raise OutputError(f"{option} {path}: cannot write in {folder} "
                          f"({exc.strerror or exc}); give a writable folder") from None
    os.close(handle)
    os.unlink(name)


def check_outputs(files: Sequence[tuple] = (), folders: Sequence[tuple[str, Path | None]] = (),
                  inputs: Sequence[tuple] = ()) -> None:
    """Check every path of a command before any work: it fails at once, in one line, rather
    than after minutes of work.

    ``files``: ``(option, path)`` or ``(option, path, suffixes)`` of result files (default
    suffixes .csv, .parquet, .json): the suffix, a folder that exists, and a file can be
    created there. ``folders``: ``(option, path)`` of folders a command creates or fills
    (reports, benchmark outputs): not a file, and a file can be created in it or beside it.
    ``inputs``: ``(option, path)`` or ``(option, path, kind)`` (``"file"``, ``"folder"`` or
    ``"any"``, the default) of inputs given as paths: they exist and can be read. ``None``
    paths are skipped. A result file and another output naming one path are refused: the
    second would replace the first (a silent loss), or find it in the way after the work.
    (Two folders may be one: their files go in side by side.)"""
    from ..output import OutputError, check_output_path

    for option, path, *_rest in [*files, *folders]:
        _check_name_length(option, path, OutputError)
    for option, path, *_rest in inputs:
        _check_name_length(option, path, InputError)
    named: dict[Path, tuple[str, bool]] = {}
    for (option, path, *_suffixes), is_file in [*((f, True) for f in files),
                                                *((f, False) for f in folders)]:
        if path is not None:
            where = Path(os.path.abspath(path))
            if where in named and (is_file or named[where][1]):
                raise OutputError(f"{named[where][0]} and {option} {path} are one path; give "
                                  "each output its own")
            named.setdefault(where, (f"{option} {path}", is_file))
    for option, path, *kind in inputs:
        if path is not None:
            _check_input(option, Path(path), kind[0] if kind else "any")
    for option, path, *suffixes in files:
        if path is not None:
            path = Path(path)
            check_output_path(path, *suffixes, option=option) if suffixes \
                else check_output_path(path, option=option)
            _probe_writable(path.parent if str(path.parent) else Path("."), option, path)
    for option, path in folders:
        if path is not None:
            _check_folder(option, Path(path))


#: The longest name of one file or folder, and of a whole path, in bytes (Linux's NAME_MAX and
#: PATH_MAX): a longer one fails every file call with ENAMETOOLONG, once as a traceback.
NAME_MAX, PATH_MAX = 255, 4095


def _check_name_length(option: str, path: Path | str | None, error: type[Exception]) -> None:
    if path is None:
        return
    shown = str(path) if len(str(path)) <= 80 else f"{str(path)[:60]}...{str(path)[-12:]}"
    longest = max((len(os.fsencode(part)) for part in Path(path).parts), default=0)
    if longest > NAME_MAX:
        raise error(f"{option} {shown}: a name of {longest} bytes is longer than the file "
                    f"system takes ({NAME_MAX}); give a shorter one")
    if len(os.fsencode(os.path.abspath(path))) > PATH_MAX:
        raise error(f"{option} {shown}: the path is longer than the file system takes "
                    f"({PATH_MAX} bytes); give a shorter one")


def _check_folder(option: str, path: Path) -> None:
    """A folder a command creates or fills: not a file, its parent there, writable."""
    from ..output import OutputError

    if path.exists() and not path.is_dir():
        raise OutputError(f"{option} {path}: is a file, not a folder; give a folder")
    parent = path if path.is_dir() else (path.parent if str(path.parent) else Path("."))
    if not parent.is_dir():
        raise OutputError(f"{option} {path}: folder {parent} is missing or not writable; "
                          "create it or choose another")
    _probe_writable(parent, option, path)


def _check_input(option: str, path: Path, kind: str) -> None:
    if not path.exists():
        raise InputError(f"{option} {path}: no such {'folder' if kind == 'folder' else 'file'}; "
                         "give an existing one")
    if kind == "file" and not path.is_file():
        raise InputError(f"{option} {path}: is a folder; give a file")
    if kind == "folder" and not path.is_dir():
        raise InputError(f"{option} {path}: is a file; give a folder")
    if not os.access(path, os.R_OK | (os.X_OK if path.is_dir() else 0)):
        raise InputError(f"{option} {path}: cannot be read; fix its permissions")


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
    g.add_argument("--buffer-bytes", type=number(0.0, MAX_BUFFER_BYTES, above=True,
                                                 unlimited=True, rule=BUFFER_RULE),
                   metavar="BYTES",
                   help="buffer size in bytes instead of the spec's (inf = unlimited)")
    g.add_argument("--depth", type=integer(1, MAX_DEPTH, f"an integer >= 1 and <= {MAX_DEPTH} "
                                                      "(2 = double buffering)"),
                   metavar="N",
                   help="buffer stages per op: 1 = no overlap inside an op, 2 = double "
                        "buffering (default 2)")
    g.add_argument("--launch-overhead-s", type=number(0.0, MAX_LAUNCH_S, rule=LAUNCH_RULE),
                   metavar="S",
                   help="fixed cost of each kernel (default: the spec's "
                        "kernel_launch_overhead_s, else 3.2e-6, fitted to models measured on an "
                        "H100)")
    g.add_argument("--overlap", choices=("pipelined", "full"),
                   help="pipelined: a tile computes after its load and stores after its "
                        "compute (default); full: compute and memory overlap completely, the "
                        "roofline's assumption")
    g.add_argument("--prefetch-depth",
                   type=integer(0, MAX_PREFETCH, f"an integer >= 0 and <= {MAX_PREFETCH:,} "
                                                 "(0 = no prefetch)"),
                   metavar="N",
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
        p.add_argument("--workers", type=integer(1, MAX_THREADS), metavar="N",
                       help="local processes for --evaluator simulate (default 1)")
    if dask:
        p.add_argument("--dask", nargs="?", const=LOCAL, metavar="tcp://HOST:PORT",
                       type=nonempty_text("a Dask scheduler address, tcp://HOST:PORT, or "
                                          "nothing for a local cluster"),
                       help="with --evaluator simulate: run the simulations on a Dask "
                            "cluster; alone, a LocalCluster of --workers processes (at least 2)")
    add_sim_options(p)


def sim_config_from_args(args: argparse.Namespace) -> SimConfig:
    """The SimConfig the options give (defaults where not given), checked; errors name the
    option."""
    from ..sim import SimConfig

    given = {f: getattr(args, f) for f in SIM_OPTIONS if getattr(args, f) is not None}
    return SimConfig(**given).check(names=SIM_OPTIONS)


def refuse_unused_sim_options(args: argparse.Namespace) -> None:
    """Simulator options without --evaluator simulate would be silently ignored: refuse them."""
    from ..sim import SimulationError

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
    from ..explore import ROOFLINE, Simulator

    refuse_unused_sim_options(args)
    if args.evaluator != "simulate":
        return ROOFLINE
    workers = getattr(args, "workers", None) or 1
    dask = getattr(args, "dask", None)
    if dask == LOCAL:
        workers = max(workers, 2)
    return Simulator(sim_config_from_args(args), workers=workers, dask=dask,
                     progress=StatusLine("simulated", "designs"))



def with_dtype_columns(*args, **kwargs):
    """:func:`dse.design_columns.with_dtype_columns`, imported when called (it loads the
    roofline engine)."""
    from ..design_columns import with_dtype_columns as add

    return add(*args, **kwargs)
