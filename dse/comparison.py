"""Accelerators side by side: :func:`compare` prices the same models and formats on several
real or hypothetical accelerators, with energy, power and memory beside the bound and, given
kernel predictors, the expectation; ``dse compare`` prints and writes what it returns.

>>> import dse
>>> c = dse.compare("toy_hybrid", ["a100", "h100-sxm"], ["2:4"])
>>> c.frame()[["hardware", "format"]].values.tolist()
[['a100-40gb', '2:4'], ['h100-sxm', '2:4'], ['a100-40gb', 'dense'], ['h100-sxm', 'dense']]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from accelerator_models import Accelerator
from formats import Format
from workloads import Trace, load_trace

from .api import Predictors, evaluation, predictors
from .calibrate.predictor import DevicePredictors
from .design_columns import accelerators, with_dtype_columns
from .roofline import DEFAULT_NUMERICS, Numerics

__all__ = ["Comparison", "compare"]


@dataclass(frozen=True, eq=False)
class Comparison:
    """What :func:`compare` returns.

    ``designs``: one row per model, format, batch, fusion model and accelerator (sorted by
    model, batch, format, accelerator), the columns of :func:`dse.evaluate` with the energy,
    power and memory ones (:func:`dse.design_columns.with_energy_and_memory`), for a language
    model's step those of :func:`dse.design_columns.with_language_model_columns` (tokens/s,
    the KV cache, the memory fit with it) and, when calibrated, the expectation's.
    ``expected``: the op rows the expectation sums (:func:`dse.api.expected_ops`), None
    without predictors. ``hardware``: the accelerators compared, loaded. ``numerics``: the
    number types every design was priced in."""

    designs: pd.DataFrame
    hardware: tuple[Accelerator, ...]
    expected: pd.DataFrame | None = None
    predictors: DevicePredictors | None = None
    numerics: Numerics = DEFAULT_NUMERICS

    def frame(self) -> pd.DataFrame:
        """The design rows with the number types they were priced in
        (:func:`dse.design_columns.with_dtype_columns`), as ``dse compare --out`` writes
        them."""
        language = self.designs["phase"].notna().tolist() if "phase" in self.designs else False
        return with_dtype_columns(self.designs, self.numerics, language)

    @property
    def unpriced_energy(self) -> list[str]:
        """What an accelerator's spec has no energy figure for: there the energy is a lower
        bound (an accelerator with no energy figure at all has NaN energy, not a bound)."""
        known = self.designs[self.designs["energy_j"].notna()]
        return sorted({g.strip() for gaps in known["energy_unpriced"]
                       for g in str(gaps).split(";") if g.strip()})


def compare(
    models: Trace | str | Sequence[Trace | str],
    hardware: Accelerator | str | Sequence[Accelerator | str],
    formats: Format | str | Sequence[Format | str],
    batches: int | Sequence[int] = 1,
    fusion: str | Sequence[str] = "unfused",
    scope: str = "gemm",
    numerics: Numerics = DEFAULT_NUMERICS,
    calibrated: Predictors | None = None,
    backend: str = "exported",
) -> Comparison:
    """Evaluate every model of ``models`` under ``formats`` (dense is always the baseline) at
    ``batches`` and ``fusion`` models on every accelerator of ``hardware``, side by side.

    ``calibrated``: kernel predictors (as for :func:`dse.evaluate`): adds the expectation
    beside the bound on every accelerator (an accelerator other than the predictors' device
    keeps its fraction of the speed of light); kernels are priced one op at a time (unfused)
    whatever ``fusion``; ``backend``: the ops it prices (:func:`dse.api.expected_ops`). The
    same numbers as ``dse compare``."""
    traces = [m if isinstance(m, Trace) else load_trace(m) for m in
              ([models] if isinstance(models, Trace | str) else models)]
    accs = accelerators(hardware)
    device = None if calibrated is None else predictors(calibrated)
    # Each model's rows are dse.evaluate's (evaluation: the one place they are built).
    results = [evaluation(trace, accs, formats, batches, fusion=fusion, scope=scope,
                          numerics=numerics, calibrated=device, backend=backend)
               for trace in traces]
    expected = [r.expected for r in results if r.expected is not None]
    designs = pd.concat([r.table for r in results], ignore_index=True)
    designs = designs.sort_values(["model", "batch", "format", "hardware"], kind="stable",
                                  ignore_index=True)
    return Comparison(designs=designs, hardware=tuple(accs),
                      expected=pd.concat(expected, ignore_index=True) if expected else None,
                      predictors=device, numerics=numerics)
