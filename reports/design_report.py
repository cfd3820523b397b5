"""The report of designs that ``dse report`` writes, from Python: :func:`design_report`
evaluates models under formats on accelerators and returns the charts and tables of the page
(:class:`DesignReport`); :meth:`DesignReport.write` writes the folder.

Per accelerator: the Sparsity Roofline (accuracy from the accuracy table against speedup), the
per-layer roofline, the bound mix by format and the feature share of DRAM traffic across the
batch sizes; for a language model's decode step, also tokens/s against batch with each
format's memory-fit limit. Given kernel predictors, the expectation is drawn beside the bound,
with the measured kernels of their dataset.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from accelerator_models import Accelerator
from dse.accuracy import (
    DEFAULT_TABLE,
    AccuracyTable,
    AccuracyTableError,
    attach_accuracy,
    load_accuracy_table,
)
from dse.accuracy.llm_table import (
    DEFAULT_LLM_METRIC,
    LLM_METRICS,
    LLM_TABLE,
    LLMAccuracyTable,
    load_llm_accuracy_table,
    weights_key,
)
from dse.api import Predictors, evaluation, predictors
from dse.calibrate.predictor import CalibrationError, DevicePredictors
from dse.comparison import Comparison
from dse.design_columns import (
    accelerators,
    with_dtype_columns,
)
from dse.measure.dataset import concat, load_dataset
from dse.measure.errors import DatasetError
from dse.roofline import (
    DEFAULT_NUMERICS,
    NO_ENERGY_FIGURES,
    Numerics,
    evaluate_layers,
)
from formats import Format
from workloads import Trace, load_trace

from .calibration import calibration_fallbacks, calibration_text, measured_data, predictor_table
from .charts import (
    bound_mix_chart,
    bound_mix_data,
    energy_breakdown_chart,
    energy_breakdown_data,
    feature_share_chart,
    feature_share_data,
    hardware_comparison_chart,
    hardware_comparison_data,
    pareto_chart,
    pareto_data,
    roofline_chart,
    roofline_data,
    sparsity_roofline_chart,
    sparsity_roofline_data,
    target_chart,
    target_data,
)
from .decode import decode_chart, decode_data
from .html import Section, write_report

__all__ = ["ENERGY_IS_THE_BOUNDS", "DesignReport", "calibration_tables", "comparison_report",
           "design_report", "search_report"]

#: What a calibrated report's energy chart says of itself: energy has no expected counterpart.
ENERGY_IS_THE_BOUNDS = ("Energy comes from the bound (the speed-of-light latency and its "
                        "traffic); the kernel predictors price time only, so this chart has no "
                        "expected series.")


@dataclass(frozen=True, eq=False)
class DesignReport:
    """What :func:`design_report` and :func:`search_report` return: the page, not yet written.

    ``designs``: one row per model, accelerator, format and batch (:func:`dse.evaluate`, with
    the expectation's columns when calibrated; a search's results for
    :func:`search_report`); ``expected``: the op rows the expectation sums (None without
    predictors); ``measured``: the measured kernels drawn (None when none); ``decode_fits``:
    per decode chart, the line saying the largest batch of each format that fits in DRAM;
    ``sections``, ``tables``, ``intro``: what :meth:`write` puts on the page."""

    title: str
    sections: tuple[Section, ...]
    tables: tuple[tuple[str, pd.DataFrame], ...]
    intro: tuple[str, ...]
    hardware: tuple[Accelerator, ...]
    designs: pd.DataFrame
    expected: pd.DataFrame | None = None
    measured: pd.DataFrame | None = None
    dataset: str | None = None
    predictors: DevicePredictors | None = None
    decode_fits: tuple[str, ...] = ()

    def frame(self) -> pd.DataFrame:
        """The design rows (the page's "Designs" table)."""
        return self.designs

    def write(self, folder: Path | str, command: str | None = None) -> Path:
        """Write the report folder (``index.html``, PNG, SVG and CSV of every chart, the
        tables as CSV; atomically); returns the path of its ``index.html``. ``command``: the
        command line recorded on the page."""
        return write_report(folder, self.title, list(self.sections), tables=list(self.tables),
                            command=command, hardware=list(self.hardware),
                            intro=list(self.intro))


def design_report(
    models: Trace | str | Sequence[Trace | str],
    hardware: Accelerator | str | Sequence[Accelerator | str],
    formats: Format | str | Sequence[Format | str],
    batches: int | Sequence[int] = 1,
    fusion: str = "unfused",
    scope: str = "gemm",
    numerics: Numerics = DEFAULT_NUMERICS,
    calibrated: Predictors | None = None,
    measured: str | None = None,
    accuracy_table: AccuracyTable | LLMAccuracyTable | str | Path | None = None,
) -> DesignReport:
    """The charts and tables of ``dse report`` for ``models`` under ``formats`` (dense is the
    baseline) at ``batches`` on every accelerator of ``hardware`` (four charts each; names
    suffixed by the accelerator where there are several).

    ``calibrated``: kernel predictors (as for :func:`dse.evaluate`): expected points on the
    per-layer roofline and an expected curve on the Sparsity Roofline, with the measured
    kernels of ``measured`` (a shipped dataset or a file of ``dse measure``; default: the
    dataset the predictors were trained on, when it is here). ``accuracy_table``: default the
    shipped one; for language models (every model a prefill or decode step) a table of
    published figures (:func:`dse.accuracy.llm_table.load_llm_accuracy_table`, default the
    shipped one), whose WikiText-2 perplexity increase over dense the Sparsity Roofline draws."""
    if measured is not None and calibrated is None:
        raise CalibrationError("--measured draws measured kernels beside the expectation; "
                               "give --calibrated DEVICE too")
    traces = [m if isinstance(m, Trace) else load_trace(m) for m in
              ([models] if isinstance(models, Trace | str) else models)]
    accs = accelerators(hardware)
    format_list = [formats] if isinstance(formats, Format | str) else list(formats)
    batch_list = [batches] if isinstance(batches, int) else list(batches)
    device = None if calibrated is None else predictors(calibrated)
    dataset_name, dataset = _measured_dataset(measured, device)
    table = accuracy_table_for(traces, accuracy_table)  # before any work
    # Each model's rows are dse.evaluate's (evaluation: the one place they are built).
    results = [evaluation(t, accs, format_list, batch_list, fusion=fusion, scope=scope,
                          numerics=numerics, calibrated=device) for t in traces]
    frames = [r.table for r in results]
    expected = [r.expected for r in results if r.expected is not None]
    decode = _decode_sections(traces, accs, format_list, batch_list, fusion, scope, numerics,
                              frames)
    evaluated = pd.concat(frames, ignore_index=True)
    # The number types every row was priced in, last, as dse evaluate's and dse compare's files.
    evaluated = with_dtype_columns(evaluated, numerics, evaluated["phase"].notna().tolist()
                                   if "phase" in evaluated else False)
    ops = pd.concat(expected, ignore_index=True) if expected else None
    sections, drawn = [], None
    for hw in accs:
        charts, points = _hardware_sections(hw, traces, format_list, batch_list, fusion, scope,
                                            numerics, evaluated, ops, table, device, dataset,
                                            dataset_name, several=len(accs) > 1)
        sections += charts
        drawn = points if drawn is None else drawn
    sections += [section for section, _ in decode]
    tables, intro = [("Designs", evaluated)], []
    if device is not None:
        intro = calibration_text(device, ops, drawn, dataset_name)
        if dataset_name is not None and dataset is None:
            intro.append(f"Measured points: none (dataset {dataset_name} of the predictors "
                         "cannot be found here; give one with --measured).")
        tables += calibration_tables(device, ops)
    return DesignReport(title="dse report", sections=tuple(sections), tables=tuple(tables),
                        intro=tuple(intro), hardware=tuple(accs), designs=evaluated,
                        expected=ops, measured=drawn, dataset=dataset_name, predictors=device,
                        decode_fits=tuple(line for _, line in decode))


def _is_language_model(trace: Trace) -> bool:
    return bool(trace.provenance.get("phase"))


def accuracy_table_for(traces: Sequence[Trace],
                       given: AccuracyTable | LLMAccuracyTable | str | Path | None = None
                       ) -> AccuracyTable | LLMAccuracyTable:
    """The table the Sparsity Roofline of ``traces`` reads: for language models only (every
    trace a prefill or decode step), published figures (``given`` read as a table of them,
    default the shipped one); else trained accuracy (``given``, default the shipped table).
    A report of language models beside vision models draws the vision models (one y axis, one
    metric) and names the others as not drawn."""
    if isinstance(given, LLMAccuracyTable):
        return given
    if traces and all(_is_language_model(t) for t in traces):
        if isinstance(given, AccuracyTable):
            raise AccuracyTableError("language models take a table of published figures "
                                     "(dse/accuracy/tables/accuracy_llm.csv's columns), not "
                                     "a trained-accuracy table")
        return load_llm_accuracy_table(given or LLM_TABLE)
    return given if isinstance(given, AccuracyTable) else \
        load_accuracy_table(given or DEFAULT_TABLE)


def _table_where(table: AccuracyTable | LLMAccuracyTable) -> str:
    return table.where if isinstance(table, LLMAccuracyTable) else "the accuracy table"


def _with_llm_accuracy(frame: pd.DataFrame, table: LLMAccuracyTable, traces: list[Trace],
                       numerics: Numerics) -> pd.DataFrame:
    """``frame`` (designs of language-model steps) with ``accuracy``: each format's published
    WikiText-2 perplexity increase over the same source's dense model, for the weights the
    designs store (NaN where nothing was published: not drawn, never guessed), and the axis
    it is drawn on (``accuracy_axis``, ``accuracy_lower_is_better``)."""
    config = {t.model: t.provenance.get("config", t.model) for t in traces}
    weights = weights_key(numerics.weight_dtype, numerics.weight_group_size)
    metric = LLM_METRICS[DEFAULT_LLM_METRIC]
    found = {}
    for model, fmt in set(zip(frame["model"].astype(str), frame["format"].astype(str),
                              strict=True)):
        hit = table.lookup(config.get(model, model), fmt, weights, metric.name)
        found[(model, fmt)] = hit.degradation
    values = [found[(m, f)] for m, f in zip(frame["model"].astype(str),
                                            frame["format"].astype(str), strict=True)]
    missing = sorted({f"{m} {f}" for (m, f), v in found.items() if math.isnan(v)})
    note = (f"y: WikiText-2 {metric.degradation} (each paper's own dense model), published "
            f"figures for {weights} weights ({table.where}), the least where several are; the "
            "axis runs down, so better is up"
            + (f"; no figure, not drawn: {', '.join(missing)}" if missing else ""))
    return frame.assign(accuracy=values, accuracy_axis="perplexity increase (lower is better)",
                        accuracy_lower_is_better=True, accuracy_note=note)


def comparison_report(comparison: Comparison) -> DesignReport:
    """The report of :func:`dse.compare` (``dse compare --report``): latency and speedup by
    accelerator (a chart per fusion model where there are several), the energy per inference
    by unit and traffic class of each model and fusion model, and with predictors the
    expectation beside the bound."""
    frame, device = comparison.frame(), comparison.predictors
    beside = "" if device is None else f": bound and expected (predictors {device.name})"
    sections = []
    fusions = list(dict.fromkeys(frame["fusion"].astype(str)))
    for fusion in fusions:  # the chart compares accelerators under one fusion model
        data = hardware_comparison_data(frame[frame["fusion"].astype(str) == fusion])
        several = f", {fusion}" if len(fusions) > 1 else ""
        sections.append(Section(
            "hardware-comparison" + (f"-{_slug(fusion)}" if len(fusions) > 1 else ""),
            f"Latency and speedup by accelerator{several}{beside}",
            hardware_comparison_chart(data), data))
    groups = frame.groupby(["model", "fusion"], sort=False)
    for (model, fusion), all_rows in groups:
        # A spec without energy figures has NaN energy: left out of the chart, and said.
        rows = all_rows[all_rows["energy_j"].notna()]
        unknown = list(dict.fromkeys(all_rows.loc[all_rows["energy_j"].isna(), "hardware"]))
        if rows.empty:
            continue
        energy = energy_breakdown_data(rows)
        name = "energy" + ("" if groups.ngroups == 1 else f"-{_slug(model)}-{_slug(fusion)}")
        notes = [ENERGY_IS_THE_BOUNDS] if device is not None else []
        if unknown:
            notes.append(f"Not shown: {', '.join(map(str, unknown))}, energy "
                         f"{NO_ENERGY_FIGURES}.")
        sections.append(Section(
            name, f"Energy per inference by unit and traffic class, {model}, {fusion}",
            energy_breakdown_chart(energy), energy, note=" ".join(notes)))
    tables, intro = [("Designs", frame)], []
    if device is not None:
        intro = calibration_text(device, comparison.expected, marked=None,
                                 draws_measured=False)
        tables += calibration_tables(device, comparison.expected)
    return DesignReport(title="dse compare", sections=tuple(sections), tables=tuple(tables),
                        intro=tuple(intro), hardware=comparison.hardware, designs=frame,
                        expected=comparison.expected, predictors=device)


def search_report(results: pd.DataFrame, title: str = "dse search",
                  target=None) -> DesignReport:
    """The report of a search (``search.run_search(...).results``): its Pareto front and, for
    a search with a target, its results against the target (``target``: the search's
    :class:`search.target.Target`, ``outcome.problem.target``, drawn as the chart's edges). A
    calibrated search's charts draw the expectation it ranked by beside the bound."""
    beside = ": bound and expected" if "expected_speedup" in results.columns else ""
    pareto = pareto_data(results)
    sections = [Section("pareto", f"Accuracy against speedup, Pareto front{beside}",
                        pareto_chart(pareto), pareto)]
    if "speedup_over_baseline" in results.columns:
        data = target_data(results)
        chart = (target_chart(data) if target is None else
                 target_chart(data, target.ratio, target.max_acc_drop, target.text))
        sections.append(Section("target", "Speedup over the baseline against accuracy "
                                f"drop{beside}", chart, data))
    return DesignReport(title=title, sections=tuple(sections), tables=(), intro=(),
                        hardware=(), designs=results)


def calibration_tables(device: DevicePredictors,
                       expected: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The tables a calibrated report adds: the predictors with their held-out errors, and
    the ops priced without their family's kernel data (when there are any)."""
    tables = [(f"Kernel predictors {device.name} and their held-out errors",
               predictor_table(device, expected))]
    fallbacks = calibration_fallbacks(expected)
    if len(fallbacks):
        tables.append(("Expected: ops priced without their family's kernel data", fallbacks))
    return tables


def _decode_sections(traces, accs, formats, batches, fusion, scope, numerics,
                     frames: list[pd.DataFrame]) -> list[tuple[Section, str]]:
    """For each decode trace and accelerator: the chart of tokens/s against batch with the
    memory-fit limits, and the line that says those limits."""
    out = []
    several = len(accs) > 1 or sum(t.provenance.get("phase") == "decode" for t in traces) > 1
    for trace, frame in zip(traces, frames, strict=True):
        if trace.provenance.get("phase") != "decode":
            continue
        for hw in accs:  # frame: dse.evaluate's rows, tokens/s and the memory fit included
            data = decode_data(frame[frame["hardware"] == hw.name])
            name = f"decode-{_slug(trace.model)}-{_slug(hw.name)}" if several else "decode"
            title = (f"Decode tokens/s against batch, {trace.provenance['config']} on "
                     f"{hw.name} at context {trace.provenance['context']:,}")
            limits = data.drop_duplicates("series")
            fit = "; ".join(f"{r.series} " + ("-" if pd.isna(r.largest_batch_that_fits)
                                               else f"{int(r.largest_batch_that_fits):,}")
                            for r in limits.itertuples())
            out.append((Section(name, title, decode_chart(data), data),
                        f"{name}: largest batch that fits in DRAM (speed-of-light tokens/s "
                        f"drawn against batch): {fit}"))
    return out


def _slug(name: str) -> str:
    """An accelerator's name as a section name (``[a-z0-9][a-z0-9_-]*``)."""
    slug = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-_")
    return slug[:40] or "hw"


def _hardware_sections(hw, traces, formats, batches, fusion, scope, numerics, evaluated,
                       expected, table, device, dataset, dataset_name, several: bool):
    """The report's four charts on one accelerator (Sparsity Roofline, per-layer roofline,
    bound mix, feature share) and the measured points drawn on it."""
    batch_text = ", ".join(map(str, batches))
    exp_hw = None if expected is None else \
        expected[expected["hardware"] == hw.name].reset_index(drop=True)
    layers = pd.concat([evaluate_layers(t, hw, formats, batches, fusion=fusion, scope=scope,
                                        numerics=numerics) for t in traces], ignore_index=True)
    on_hw = evaluated[evaluated["hardware"] == hw.name]
    with_accuracy = (_with_llm_accuracy(on_hw.copy(), table, traces, numerics)
                     if isinstance(table, LLMAccuracyTable) else attach_accuracy(on_hw.copy(),
                                                                                 table))
    roof = pd.concat([sparsity_roofline_data(
        with_accuracy[with_accuracy["batch"] == b],
        None if exp_hw is None else exp_hw[exp_hw["batch"] == b])
        for b in batches], ignore_index=True)
    measured = None if dataset is None else measured_data(dataset, layers, traces,
                                                          name=dataset_name)
    per_layer = roofline_data(layers, hw, numerics, expected=exp_hw, measured=measured)
    mix = pd.concat([bound_mix_data(layers[layers["batch"] == b]) for b in batches],
                    ignore_index=True)
    shares = feature_share_data(on_hw)
    where = f"on {hw.name}"
    beside = roof_beside = ""
    if device is not None:
        roof_beside = f": bound and expected (predictors {device.name})"
        beside = (f": bound, expected (predictors {device.name})"
                  + (f" and measured (dataset {dataset_name})" if measured is not None else ""))
    lacking = [t.model for t in traces if t.model not in set(roof["model"])]
    suffix = f"-{_slug(hw.name)}" if several else ""
    return [
        Section(f"sparsity-roofline{suffix}",
                f"Sparsity Roofline {where}, batch {batch_text}{roof_beside}",
                sparsity_roofline_chart(roof), roof,
                note=f"Not drawn: {', '.join(lacking)} (no accuracy in "
                     f"{_table_where(table)}; give one with --accuracy-table)"
                if lacking else ""),
        Section(f"roofline{suffix}", f"Per-layer roofline {where}, batch {batch_text}{beside}",
                roofline_chart(per_layer), per_layer),
        Section(f"bound-mix{suffix}", f"Memory- and compute-bound share of time by format "
                f"{where}, batch {batch_text}", bound_mix_chart(mix), mix),
        Section(f"feature-share{suffix}", f"Feature share of DRAM traffic and speedup by batch "
                f"{where}", feature_share_chart(shares), shares),
    ], measured


def _measured_dataset(name: str | None, device) -> tuple[str | None, pd.DataFrame | None]:
    """The measured kernels to draw: ``name`` (its errors are the user's), else the dataset
    the predictors were trained on, when it can be loaded here."""
    if device is None:
        return None, None
    if name:
        return name, load_dataset(name)
    name = device.provenance.get("dataset") or None
    if name is None:
        return None, None
    try:  # predictors trained on several datasets name them "a, b"
        frames = [load_dataset(part.strip()) for part in str(name).split(",")]
    except DatasetError:
        return name, None
    return name, frames[0] if len(frames) == 1 else concat(frames)
