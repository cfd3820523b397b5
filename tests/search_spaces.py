"""Small search spaces for the search tests, as TOML text."""

from __future__ import annotations

from pathlib import Path


def space_text(extra_hw: str = "", formats: str = 'list = ["2:4", "1:8"]',
               models: str = '["convnext_tiny"]', head: str = "") -> str:
    """One A100 whose sparse tensor core runs every N:M candidate, batch 1; ``extra_hw`` adds
    lines after [hardware.set] (e.g. a [hardware.vary] table), ``head`` top-level keys."""
    return f"""name = "t"
models = {models}
batches = [1]
{head}
[formats]
{formats}
[hardware]
base = ["a100"]
[hardware.set]
"sparse_tensor.patterns" = "candidates"
"sparse_tensor.nonzero_rate" = 1.0
{extra_hw}
"""


def write_space(folder: Path, text: str) -> Path:
    path = folder / "space.toml"
    path.write_text(text)
    return path
