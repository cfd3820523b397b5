"""The expectation beside the bound in reports: measured kernels matched to a trace's ops, the
predictors a report used with their held-out errors, and the ops priced without their own
family's kernel data.

Data first, like :mod:`reports.charts`: every function returns a tidy DataFrame (or text) and
draws nothing. The expected numbers come from :mod:`dse.calibrate.expected`; this module only
sums and labels them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from dse.calibrate.expected import op_configs

__all__ = [
    "CARRIED_OVER",
    "calibration_fallbacks",
    "calibration_text",
    "expected_fallback_share",
    "is_calibration_fallback",
    "measured_data",
    "predictor_table",
    "predictors_text",
]

#: Starts of the ``calibration`` notes that say the predictors were measured on another
#: accelerator spec than the one evaluated (the fraction carries over): not a fallback.
CARRIED_OVER = ("fraction carried over from", "time learned on")

#: Where a ``dse report`` page marks the ops priced without their own family's kernel data.
_MARKED = "hollow triangles in the per-layer roofline"

#: Dataset families that are kernels (``model`` rows are whole models).
_KERNEL_FAMILIES = ("dense", "nm", "block", "unstructured", "vector")
_KEY = ["family", "kind", "m", "k", "n", "groups", "block", "sparsity"]


def _notes(note) -> list[str]:
    return [n for n in str(note if isinstance(note, str) else "").split("; ") if n]


def is_calibration_fallback(note: str) -> bool:
    """Whether a ``calibration`` note of :func:`dse.calibrate.expected.expected_layers` says
    the op was priced without its own family's kernel data (by another family's predictor,
    the nearest block size, constants fitted on whole models, or the bound plus the launch
    floor); notes that only say the fraction carries over to other hardware are not."""
    return any(not n.startswith(CARRIED_OVER) for n in _notes(note))


def _fallback_notes(note) -> str:
    return "; ".join(n for n in _notes(note) if not n.startswith(CARRIED_OVER))


def expected_fallback_share(expected: pd.DataFrame) -> pd.DataFrame:
    """Per design (``model, hardware, format, batch`` of ``expected_layers`` rows): the share
    of the expected latency priced without the family's own kernel data
    (``expected_fallback_share``, 0..1) and those notes (``expected_fallbacks``)."""
    for column in ("format", "batch", "expected_s", "calibration"):
        if column not in expected.columns:
            raise ValueError(f"expected_fallback_share: the frame lacks {column}; give the "
                             "rows of dse.calibrate.expected.expected_layers")
    keys = [c for c in ("model", "hardware", "format", "batch") if c in expected.columns]
    frame = expected[keys].astype(object).assign(
        _time=expected["expected_s"].to_numpy(dtype=float),
        _fell=np.where([is_calibration_fallback(n) for n in expected["calibration"]],
                       expected["expected_s"].to_numpy(dtype=float), 0.0),
        _note=[_fallback_notes(n) for n in expected["calibration"]])
    rows = []
    for key, group in frame.groupby(keys, sort=False):
        total = group["_time"].sum()
        notes = sorted({n for note in group["_note"] for n in _notes(note)})
        rows.append({**dict(zip(keys, key, strict=True)),
                     "expected_fallback_share": float(group["_fell"].sum() / total)
                     if total > 0 else 0.0,
                     "expected_fallbacks": "; ".join(notes)})
    return pd.DataFrame(rows, columns=[*keys, "expected_fallback_share", "expected_fallbacks"])


def calibration_fallbacks(expected: pd.DataFrame) -> pd.DataFrame:
    """The ops priced without their own family's kernel data, per design and note: ``model,
    hardware, format, batch, calibration`` (the note), ``ops`` (distinct ops), ``kinds``
    (their op kinds), ``predictor`` (what priced them) and ``expected_share`` (their share of
    the design's expected latency). Empty when every op had its family's data."""
    keys = [c for c in ("model", "hardware", "format", "batch") if c in expected.columns]
    total = expected.groupby(keys, sort=False)["expected_s"].sum()
    rows = []
    fell = expected[[is_calibration_fallback(n) for n in expected["calibration"]]]
    fell = fell.assign(calibration=[_fallback_notes(n) for n in fell["calibration"]])
    for key, group in fell.groupby([*keys, "calibration"], sort=False):
        design = key[:-1] if len(keys) > 1 else key[0]
        whole = float(total.loc[design]) if len(keys) > 1 else float(total.loc[key[0]])
        rows.append({**dict(zip([*keys, "calibration"], key, strict=True)),
                     "ops": int(group["op"].nunique()),
                     "kinds": ", ".join(sorted(set(map(str, group["kind"])))),
                     "predictor": ", ".join(sorted(set(map(str, group["predictor"])))),
                     "expected_share": float(group["expected_s"].sum() / whole)
                     if whole > 0 else 0.0})
    return pd.DataFrame(rows, columns=[*keys, "calibration", "ops", "kinds", "predictor",
                                       "expected_share"])


def predictor_table(predictors, expected: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per kernel predictor of ``predictors`` (``dse.calibrate.predictor
    .DevicePredictors``): ``predictor`` (``device:key:target``), ``family``, ``target``,
    ``method``, the held-out errors of ``dse calibrate --validate`` (``heldout_rmspe``,
    ``within_10``, ``within_25``, ``heldout_shapes``), ``training_rows``; with ``expected``
    (``expected_layers`` rows) also ``op_rows`` priced by it, and rows for the pricing without
    kernel data the report used (constants fitted on whole models, the bound plus the launch
    floor), whose errors are not validated per kernel (empty)."""
    rows = []
    for key, fam in sorted(predictors.families.items()):
        v = fam.validated or {}
        rows.append({"predictor": f"{predictors.name}:{key}:{fam.target}", "family": key,
                     "target": fam.target, "method": v.get("method", ""),
                     "heldout_rmspe": v.get("rmspe", np.nan),
                     "within_10": v.get("within_10", np.nan),
                     "within_25": v.get("within_25", np.nan),
                     "heldout_shapes": v.get("held_out_shapes", np.nan),
                     "training_rows": fam.rows})
    table = pd.DataFrame(rows)
    if expected is None:
        return table
    used = expected[expected["expected_s"] > 0]
    counts = used.groupby("predictor").size()
    table["op_rows"] = table["predictor"].map(counts).fillna(0).astype(np.int64)
    extra = [{"predictor": name, "family": "(no kernel data)",
              "target": "whole-model fit" if name.endswith(":whole-model-fit")
              else "bound + launch floor", "method": "", "heldout_rmspe": np.nan,
              "within_10": np.nan, "within_25": np.nan, "heldout_shapes": np.nan,
              "training_rows": np.nan, "op_rows": int(n)}
             for name, n in counts.items() if name not in set(table["predictor"])]
    return pd.concat([table, pd.DataFrame(extra)], ignore_index=True) if extra else table


def predictors_text(predictors) -> str:
    """The paragraph that names the predictors of an expectation, their held-out errors, and
    says that expected numbers are expectations, not bounds."""
    p = predictors
    device = p.provenance.get("device_name", p.device)
    errors = ", ".join(
        f"{k} {f.validated['rmspe']:.0%}" for k, f in sorted(p.families.items())
        if f.validated and "rmspe" in f.validated)
    return (f"Expected numbers (expected latency, expected speedup, the expected points and "
            f"curves) are expectations from the kernel predictors {p.name} (measured on "
            f"{device}, reference spec {p.reference_hw}; trained with dse calibrate on dataset "
            f"{p.provenance.get('dataset', '?')}), not bounds: kernels as they exist, run one "
            f"op at a time (unfused) whatever the report's fusion model. Held-out error of "
            f"each family's predictor on weight shapes it was not trained on (RMSPE): "
            f"{errors or 'not validated'}. The bound is the speed of light (roofline).")


def calibration_text(predictors, expected: pd.DataFrame,
                     measured: pd.DataFrame | None = None,
                     dataset: str | None = None, *, marked: str | None = _MARKED,
                     draws_measured: bool = True) -> list[str]:
    """Paragraphs for a report's page: which predictors priced the expectation, that it is an
    expectation (with the held-out errors), not a bound, what falls back, and which measured
    kernels are drawn. ``marked``: where the page's charts mark the ops priced without their
    own family's data (None: no chart marks them); ``draws_measured=False``: the page draws
    no measured kernels (``dse compare``), so nothing is said of them."""
    p = predictors
    out = [predictors_text(p)]
    fell = [is_calibration_fallback(n) for n in expected["calibration"]]
    notes = sorted({n for note, f in zip(expected["calibration"], fell, strict=True) if f
                    for n in _notes(_fallback_notes(note))})
    if notes:
        out.append(f"Fallbacks in the expectation: {int(np.sum(fell))} of {len(expected)} op "
                   "rows were priced without their own family's kernel data ("
                   + (f"{marked}; " if marked else "") + "the table below gives each design's "
                   "share): " + "; ".join(notes) + ".")
    else:
        out.append("Fallbacks in the expectation: none; every op was priced by its own "
                   "family's predictor.")
    if p.context.get("shift_s"):
        out.append(f"The expectation is for kernels inside a model: the predictors take "
                   f"{p.context['shift_s'] * 1e6:.1f} us off each kernel of a measured family "
                   f"(constants fitted on whole models: {p.context.get('source', '?')})"
                   + (", so expected points can lie above the measured kernels, which are "
                      "isolated calls." if draws_measured else "."))
    carried = sorted({n for note in expected["calibration"] for n in _notes(note)
                      if n.startswith(CARRIED_OVER)})
    if carried:
        out.append("Other hardware than the predictors' reference: " + "; ".join(carried)
                   + ".")
    if not draws_measured:
        return out
    if measured is not None and len(measured):
        matched = bool(measured["match"].eq("same shape").all())
        rows = int(len(measured.drop_duplicates(["m", "k", "n", "groups", "kernel_format"])))
        out.append(
            f"Measured points: the fastest kernel per configuration of dataset "
            f"{dataset or '?'} ({measured['device_name'].iloc[0]}), "
            + (f"{rows} configurations with the very shape and format of an op of the trace."
               if matched else
               f"all {rows} configurations of the device: none has the shape of an op of "
               "the trace, so they show what kernels reach on this device, not the trace's "
               "ops."))
    elif dataset is None:
        out.append("Measured points: none (no dataset for these predictors; give one with "
                   "--measured).")
    return out


def measured_data(dataset: pd.DataFrame, layers: pd.DataFrame,
                  traces: Sequence | object, *, name: str = "") -> pd.DataFrame:
    """The measured kernels of ``dataset`` (``dse.measure.dataset.load_dataset``) to draw beside
    the ops of ``layers`` (``dse.evaluate_layers`` rows of ``traces``, one trace or several).

    Per kernel configuration (family, m, k, n in all, groups, block, sparsity; op kind for
    vector ops) the dataset's fastest implementation (least ``median_s``) is kept. An op
    matches a configuration when it runs that very kernel (the family it runs, after any
    fallback, as :func:`dse.calibrate.expected.op_configs` says). When at least one op
    matches, the rows are the matches (``match = "same shape"``): one per model, format,
    batch and configuration, ``op`` the first op with that shape and ``ops`` how many; when
    none does, every configuration of the dataset (``match = "every shape"``; ``model``,
    ``format`` and ``op`` empty; repeated per batch of ``layers`` so that every batch's panel
    draws them).

    Columns: ``series`` (``measured``), ``model, format, op, ops, batch, intensity`` (the
    measured call's FLOPs per DRAM byte, as the dataset gives them), ``flops_per_s`` (FLOPs
    / median time), ``measured_s`` (median), ``implementation``, ``kernel_format`` (the
    measured kernel's format), ``dtype``, ``m, k, n, groups``, ``idle``, ``cache`` (how the
    isolated call was timed: ``cold`` or ``warm``), ``match``, ``dataset`` (``name``) and
    ``device_name``.
    """
    for column in ("family", "m", "k", "n", "groups", "block", "sparsity", "median_s", "flops",
                   "bytes", "implementation", "format"):
        if column not in dataset.columns:
            raise ValueError(f"measured_data: the dataset lacks column {column}; load it with "
                             "dse.measure.dataset.load_dataset")
    traces = list(traces) if isinstance(traces, list | tuple) else [traces]
    rows = dataset[dataset["family"].astype(str).isin(_KERNEL_FAMILIES)]
    median = rows["median_s"].to_numpy(dtype=float, na_value=np.nan)
    flops = rows["flops"].to_numpy(dtype=float, na_value=np.nan)
    nbytes = rows["bytes"].to_numpy(dtype=float, na_value=np.nan)
    rows = rows[(median > 0) & (flops > 0) & (nbytes > 0)]
    kernels = _configs(pd.DataFrame({
        "family": rows["family"].astype(str).to_numpy(),
        "kind": rows["kind"].astype(str).to_numpy() if "kind" in rows else "",
        "m": rows["m"].to_numpy(dtype=np.int64), "k": rows["k"].to_numpy(dtype=np.int64),
        "n": rows["n"].to_numpy(dtype=np.int64),
        "groups": rows["groups"].to_numpy(dtype=np.int64),
        "block": rows["block"].to_numpy(dtype=np.int64),
        "sparsity": rows["sparsity"].to_numpy(dtype=float)}))
    kernels["measured_s"] = rows["median_s"].to_numpy(dtype=float)
    kernels["flops"] = rows["flops"].to_numpy(dtype=float)
    kernels["bytes"] = rows["bytes"].to_numpy(dtype=float)
    for column in ("implementation", "format", "dtype", "device_name", "cache"):
        kernels[column if column != "format" else "kernel_format"] = (
            rows[column].astype(str).to_numpy() if column in rows else "")
    kernels["idle"] = rows["idle"].astype(object).to_numpy() if "idle" in rows else None
    best = kernels.sort_values("measured_s", kind="stable").drop_duplicates(_KEY)

    matched = []
    by_model = {getattr(t, "model", None): t for t in traces}
    for model, part in layers.groupby("model", sort=False) if "model" in layers \
            else [(None, layers)]:
        trace = by_model.get(model, traces[0] if len(traces) == 1 else None)
        if trace is None:
            raise ValueError(f"measured_data: no trace for model {model!r}; give the traces "
                             "of every model in the layers")
        ops = _configs(op_configs(part.reset_index(drop=True), trace))[_KEY]
        ops["model"] = model
        ops["format"] = part["format"].astype(str).to_numpy()
        ops["batch"] = part["batch"].to_numpy(dtype=np.int64)
        ops["op"] = part["op"].astype(str).to_numpy()
        ops["_order"] = np.arange(len(ops))
        hit = ops.merge(best, on=_KEY, how="inner").sort_values("_order", kind="stable")
        if len(hit):
            group = hit.groupby(["model", "format", "batch", *_KEY], sort=False, dropna=False)
            first = group.head(1).copy()
            first["ops"] = group["op"].transform("size").loc[first.index].to_numpy()
            matched.append(first.drop(columns="_order"))
    if matched:
        out = pd.concat(matched, ignore_index=True)
        out["match"] = "same shape"
    else:
        batches = sorted(set(layers["batch"].astype(int))) if "batch" in layers else [None]
        out = pd.concat([best.assign(model=None, format=None, op=None, ops=0, batch=b)
                         for b in batches], ignore_index=True)
        out["match"] = "every shape"
    out["series"] = "measured"
    out["intensity"] = out["flops"] / out["bytes"]
    out["flops_per_s"] = out["flops"] / out["measured_s"]
    out["dataset"] = name
    columns = ["series", "model", "format", "op", "ops", "batch", "intensity", "flops_per_s",
               "measured_s", "implementation", "kernel_format", "dtype", "m", "k", "n",
               "groups", "idle", "cache", "match", "dataset", "device_name"]
    return out[columns].reset_index(drop=True)


def _configs(frame: pd.DataFrame) -> pd.DataFrame:
    """The matching key of kernel configurations: the op kind counts for vector ops only
    (their shape is the element count), block and sparsity for sparse kernels only."""
    out = frame.copy()
    vector = out["family"].astype(str).to_numpy() == "vector"
    dense = out["family"].astype(str).to_numpy() == "dense"
    out["kind"] = np.where(vector, out["kind"].astype(str), "")
    out["block"] = np.where(vector | dense, 0, out["block"]).astype(np.int64)
    out["sparsity"] = np.where(vector | dense, 0.0,
                               np.round(out["sparsity"].astype(float), 6))
    for column in ("m", "k", "n", "groups"):
        out[column] = out[column].astype(np.int64)
    out["family"] = out["family"].astype(str)
    return out
