"""Masked pruning with learning-rate rewinding: the measurements behind an accuracy table.

For each model: train a dense baseline (or load a checkpoint), then for each pattern prune by
global magnitude under that pattern and fine-tune, level by level: prune further, rewind the
learning-rate schedule, fine-tune with the masks held fixed, measure top-1. Block and
unstructured patterns go through the sparsity levels (default 50, 75, 87.5, 93.75, 96.875%);
N:M patterns of one N form a chain N:2N -> N:4N -> ... (2:4 -> 2:8 -> 2:16 is 50 -> 75 ->
87.5%), each link a level with its own row.

Learning-rate rewinding (Renda et al., ICLR 2020): every fine-tuning stage replays the last
``finetune_epochs`` epochs of the dense run's cosine schedule.

Progress is saved after the dense baseline and after every finished pattern in ``work_dir``
(``state.json`` + weights), so an interrupted run continues pattern by pattern.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import formats
from formats import NM, Block, Format, Unstructured

from .data import AccuracyError, Dataset, check_dataset, load_dataset

__all__ = ["DEFAULT_LEVELS", "DEFAULT_PATTERNS", "MAX_IMG_SIZE", "AccuracyConfig", "Stage",
           "check_config", "environment", "plan", "run_accuracy", "table_frame"]

DEFAULT_PATTERNS = ("unstructured", "block2", "block4", "block8", "block16", "block32",
                    "2:4", "1:4", "2:8", "2:16")
DEFAULT_LEVELS = (0.5, 0.75, 0.875, 0.9375, 0.96875)
MODEL_ALIASES = {"swin_tiny": "swin_tiny_patch4_window7_224"}
#: The largest input size: the data set is held in memory, 3 x size^2 floats an image (the
#: 1,797 digits at 512 px take 5.7 GB).
MAX_IMG_SIZE = 512
#: Seeds seed torch's generators (seed + 1000 + level for the fine-tuning ones).
MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class AccuracyConfig:
    """Everything that decides the numbers; a resumed run must have the same."""

    models: tuple[str, ...]
    img_size: int = 32
    dataset: str = "digits"
    patterns: tuple[str, ...] = DEFAULT_PATTERNS
    levels: tuple[float, ...] = DEFAULT_LEVELS
    dense_epochs: int = 30
    finetune_epochs: int = 3
    lr: float = 1e-3
    weight_decay: float = 0.05
    batch_size: int = 64
    seed: int = 0
    checkpoint: str | None = None  # start from these dense weights instead of training
    train_limit: int | None = None  # cap on training images (tests)


@dataclass(frozen=True)
class Stage:
    """One measurement: a pattern chain and the format at this link of it."""

    chain: str  # the pattern as asked ("block4", "2:*" for the N = 2 chain)
    fmt: Format


def check_config(config: AccuracyConfig, work_dir: Path,
                 checkpoints_dir: Path | None = None) -> None:
    """Refuse a configuration that cannot run, in a moment and before anything is created or
    trained: every number in range, the patterns and levels, the data set and checkpoint
    present, the work folder usable (and, when resuming, holding the same settings)."""
    plan(config.patterns, config.levels)
    for what, value, low in (("--lr", config.lr, "> 0"), ("weight decay", config.weight_decay,
                                                            ">= 0")):
        if not math.isfinite(value) or (value <= 0 if low == "> 0" else value < 0):
            raise AccuracyError(f"{what} {value!r}: must be a finite number {low}, e.g. 1e-3")
    if not 0 <= config.seed <= MAX_SEED:
        raise AccuracyError(f"--seed {config.seed}: must be from 0 to {MAX_SEED:,}")
    if not 1 <= config.img_size <= MAX_IMG_SIZE:
        raise AccuracyError(f"--img-size {config.img_size}: must be from 1 to {MAX_IMG_SIZE} "
                            "(the images are held in memory)")
    check_dataset(config.dataset)
    if config.checkpoint is not None and not Path(config.checkpoint).is_file():
        raise AccuracyError(f"--checkpoint {config.checkpoint}: no such file; give the path "
                            "of a saved state dict (.pt)")
    for option, folder in (("--work-dir", work_dir), ("--save-checkpoints", checkpoints_dir)):
        if folder is not None and folder.exists() and not folder.is_dir():
            raise AccuracyError(f"{option} {folder}: is a file, not a folder")
    _State.open(work_dir, config)  # a resume with other settings fails here


def _pattern_chain(pattern: str, levels: Sequence[float]) -> list:
    text = pattern.strip().lower()
    if text == "unstructured":
        return [Unstructured(s) for s in levels]
    try:
        if text.startswith("block") and text[5:].isdigit():
            return [formats.parse(f"{text}@{s}") for s in levels]
        fmt = formats.parse(text) if ":" in text else None
    except formats.FormatError as exc:
        raise AccuracyError(f"--patterns {pattern}: {exc}") from None
    if isinstance(fmt, NM):
        return []  # N:M chains are built per N below
    raise AccuracyError(f"--patterns: unknown pattern {pattern!r}; use unstructured, blockB "
                        "(B = 1..64) or N:M (e.g. 2:4)")


def plan(patterns: Sequence[str], levels: Sequence[float]) -> list[Stage]:
    """The stages of one model, in order: each pattern's chain of levels."""
    if not patterns:
        raise AccuracyError("no patterns given; use e.g. --patterns unstructured,block4,2:4")
    for level in levels:
        if not 0.0 < level < 1.0:
            raise AccuracyError(f"--levels: sparsity level {level:g} is outside (0, 1)")
    stages: list[Stage] = []
    nm_max: dict[int, int] = {}
    for pattern in patterns:
        for fmt in _pattern_chain(pattern, levels):
            stages.append(Stage(pattern.strip().lower(), fmt))
        if ":" in pattern:
            nm = formats.parse(pattern)
            if isinstance(nm, NM):
                nm_max[nm.n] = max(nm_max.get(nm.n, 0), nm.m)
    for n, m_max in sorted(nm_max.items()):
        # N:2N, N:4N, ... up to the largest M asked for; an M that is not N times a power of
        # two is its own one-link chain.
        m, chain = 2 * n, []
        while m <= m_max:
            chain.append(NM(n, m))
            m *= 2
        if not chain or chain[-1].m != m_max:
            chain = [NM(n, m_max)] if not chain else chain + [NM(n, m_max)]
        for fmt in chain:
            stages.append(Stage(f"{n}:*", fmt))
    return stages


# --- training -------------------------------------------------------------------------------


def _cosine(epoch_float: float, epochs: int, lr: float) -> float:
    return 0.01 * lr + 0.99 * lr * 0.5 * (1.0 + math.cos(math.pi * epoch_float / epochs))


def _prunable(model) -> dict:
    import torch

    from formats.masks import PrunableWeight

    weights = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Conv2d | torch.nn.Linear):
            groups = module.groups if isinstance(module, torch.nn.Conv2d) else 1
            weights[f"{name}.weight"] = PrunableWeight(module.weight, groups)
    return weights


def _epoch(model, data: Dataset, config: AccuracyConfig, epoch: int, lr_at: Callable,
           masks: dict, params: dict, optimizer, generator) -> float:
    import torch

    model.train()
    n = len(data.train_y)
    order = torch.randperm(n, generator=generator)
    steps = math.ceil(n / config.batch_size)
    total = 0.0
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(epoch + step / steps)
        index = order[step * config.batch_size:(step + 1) * config.batch_size]
        x, y = data.train_x[index], data.train_y[index]
        # A random shift of up to 2 pixels: the only augmentation, cheap and label-safe.
        dx, dy = (int(v) for v in torch.randint(-2, 3, (2,), generator=generator))
        x = torch.roll(x, shifts=(dy, dx), dims=(2, 3))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        for name, mask in masks.items():
            params[name].grad.mul_(mask)
        optimizer.step()
        with torch.no_grad():  # weight decay and momentum must not revive pruned weights
            for name, mask in masks.items():
                params[name].mul_(mask)
        total += loss.item() * len(index)
    return total / n


def _top1(model, data: Dataset) -> float:
    import torch

    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, len(data.val_y), 256):
            logits = model(data.val_x[start:start + 256])
            correct += int((logits.argmax(dim=1) == data.val_y[start:start + 256]).sum())
    return 100.0 * correct / len(data.val_y)


def _train(model, data, config, epochs, lr_at, masks, generator, log, label, tick) -> float:
    import torch

    params = dict(model.named_parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr,
                                  weight_decay=config.weight_decay)
    start = time.perf_counter()
    top1 = float("nan")
    for epoch in range(epochs):
        loss = _epoch(model, data, config, epoch, lr_at, masks, params, optimizer, generator)
        top1 = _top1(model, data)
        log(f"{label} epoch {epoch + 1}/{epochs} loss {loss:.4f} val top-1 {top1:.2f}% "
            f"({time.perf_counter() - start:.0f} s)")
        tick()
    return top1


def _create(name: str, config: AccuracyConfig, classes: int):
    import timm

    kwargs = {"pretrained": False, "num_classes": classes}
    try:
        return timm.create_model(name, img_size=config.img_size, **kwargs)
    except TypeError:  # convolutional models take any size and have no img_size argument
        return timm.create_model(name, **kwargs)


# --- state on disk --------------------------------------------------------------------------


@dataclass
class _State:
    path: Path
    config: dict
    models: dict = field(default_factory=dict)  # model -> {"dense": {...}, "chains": {...}}

    @classmethod
    def open(cls, work_dir: Path, config: AccuracyConfig) -> _State:
        """The saved state of ``work_dir``; the folder itself is created with the first save,
        so that a run refused before any work leaves nothing behind."""
        path = work_dir / "state.json"
        wanted = json.loads(json.dumps(asdict(config)))
        if path.exists():
            try:
                saved = json.loads(path.read_text())
                saved["config"], saved["models"]  # noqa: B018 - both keys must be there
            except (OSError, ValueError, KeyError, TypeError):
                raise AccuracyError(f"--work-dir {work_dir}: {path.name} is unreadable or "
                                    "not a dse accuracy state; use a new --work-dir") from None
            if saved["config"] != wanted:
                raise AccuracyError(f"--work-dir {work_dir} holds a run with other settings; "
                                    "resume with the same ones or use a new --work-dir")
            return cls(path, saved["config"], saved["models"])
        return cls(path, wanted)

    def save(self) -> None:
        text = json.dumps({"config": self.config, "models": self.models}, indent=1)
        _replace_atomically(self.path, lambda tmp: tmp.write_text(text))


def _replace_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """``write`` a temporary file beside ``path``, then rename it into place; an interrupt
    (Ctrl-C) or a failure leaves no temporary file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _save_tensor_file(obj, path: Path) -> None:
    import torch

    _replace_atomically(path, lambda tmp: torch.save(obj, tmp))


def _quiet(line: str) -> None:
    """The default listener: library code never prints."""


def run_accuracy(config: AccuracyConfig, work_dir: Path, log: Callable[[str], None] = _quiet,
                 checkpoints_dir: Path | None = None,
                 progress: Callable[[int, int], None] | None = None) -> list[dict]:
    """Run (or resume) the whole measurement; returns the table rows (accuracy in percent).
    ``log(line)`` hears each epoch and result; ``progress(done, total)`` counts the training
    epochs still to run this invocation (for a progress meter with a time estimate)."""
    import torch

    check_config(config, work_dir, checkpoints_dir)
    stages = plan(config.patterns, config.levels)
    data = load_dataset(config.dataset, config.img_size, config.seed, config.train_limit)
    checkpoint = _load_checkpoint(config.checkpoint) if config.checkpoint else None
    state = _State.open(work_dir, config)
    log(f"dataset {data.name}: {len(data.train_y)} training and {len(data.val_y)} validation "
        f"images, {data.classes} classes; {len(stages)} pruning stages per model")
    dense_lr = lambda e: _cosine(e, config.dense_epochs, config.lr)  # noqa: E731
    # Rewinding: replay the last finetune_epochs epochs of the dense schedule.
    rewind = max(config.dense_epochs - config.finetune_epochs, 0)
    rewound_lr = lambda e: _cosine(rewind + e, config.dense_epochs, config.lr)  # noqa: E731
    rows: list[dict] = []
    epochs_left = 0
    for requested in config.models:  # what this invocation trains (resumed work excluded)
        record = state.models.get(MODEL_ALIASES.get(requested, requested),
                                  {"dense": None, "chains": {}})
        if record["dense"] is None and not config.checkpoint:
            epochs_left += config.dense_epochs
        epochs_left += sum(config.finetune_epochs for s in stages
                           if s.chain not in record["chains"])
    done = [0]

    def tick() -> None:
        done[0] += 1
        if progress is not None:
            progress(done[0], epochs_left)

    for requested in config.models:
        name = MODEL_ALIASES.get(requested, requested)
        record = state.models.setdefault(name, {"dense": None, "chains": {}})
        dense_path = work_dir / f"{name}.dense.pt"
        torch.manual_seed(config.seed)
        model = _create(name, config, data.classes)
        if record["dense"] is None:
            start = time.perf_counter()
            if config.checkpoint:
                try:
                    model.load_state_dict(checkpoint)
                except RuntimeError as exc:  # missing keys or other shapes
                    raise AccuracyError(f"--checkpoint {config.checkpoint}: does not fit {name} "
                                        f"with {data.classes} classes "
                                        f"({str(exc).splitlines()[0][:160]})") from None
                top1 = _top1(model, data)
            else:
                generator = torch.Generator().manual_seed(config.seed)
                top1 = _train(model, data, config, config.dense_epochs, dense_lr, {},
                              generator, log, f"[{name}] dense", tick)
            _save_tensor_file(model.state_dict(), dense_path)
            record["dense"] = {"top1": top1, "wall_s": time.perf_counter() - start}
            state.save()
        log(f"[{name}] dense top-1 {record['dense']['top1']:.2f}%")
        dense_state = torch.load(dense_path, weights_only=True)
        for chain in dict.fromkeys(s.chain for s in stages):
            links = [s.fmt for s in stages if s.chain == chain]
            if chain in record["chains"]:
                continue
            model.load_state_dict(dense_state)
            weights = _prunable(model)
            masks: dict = {}
            results = []
            start = time.perf_counter()
            for index, fmt in enumerate(links):
                from formats.masks import global_masks, mask_violations

                generator = torch.Generator().manual_seed(config.seed + 1000 + index)
                with torch.no_grad():
                    masks = global_masks(weights, fmt)
                    for weight_name, mask in masks.items():
                        weights[weight_name].weight.mul_(mask)
                top1 = _train(model, data, config, config.finetune_epochs, rewound_lr,
                              masks, generator, log, f"[{name}] {fmt.name}", tick)
                problems = mask_violations(weights, fmt, masks)
                if problems:  # a bug, not bad input: the masks are ours
                    raise RuntimeError(f"{name} {fmt.name}: masks broken: {problems[0]}")
                results.append({"pattern": fmt.name, "top1": top1})
                log(f"[{name}] {fmt.name}: top-1 {top1:.2f}%")
                if checkpoints_dir is not None:
                    checkpoints_dir.mkdir(parents=True, exist_ok=True)
                    safe = fmt.name.replace(":", "-").replace("@", "_").replace("%", "")
                    _save_tensor_file(model.state_dict(),
                                      checkpoints_dir / f"{name}.{safe}.pt")
            record["chains"][chain] = {"results": results,
                                       "wall_s": time.perf_counter() - start}
            state.save()
        rows.extend(_rows(name, record, data.name))
    return rows


def table_frame(rows: list[dict], source: str):
    """The rows in the accuracy-table schema (see ``dse.accuracy.table``)."""
    import pandas as pd

    records = []
    for row in rows:
        fmt = formats.parse(row["pattern"])
        records.append({
            "model": row["model"], "pattern": fmt.name, "family": fmt.family,
            "block": fmt.block if isinstance(fmt, Block) else None,
            "n": fmt.n if isinstance(fmt, NM) else None,
            "m": fmt.m if isinstance(fmt, NM) else None,
            "sparsity": fmt.sparsity, "metric": "top1", "value": row["top1"],
            "dataset": row["dataset"], "source": source,
        })
    frame = pd.DataFrame(records)
    for column in ("block", "n", "m"):
        frame[column] = frame[column].astype("Int64")
    return frame


def _rows(model: str, record: dict, dataset: str) -> list[dict]:
    rows = [{"model": model, "pattern": "dense", "top1": record["dense"]["top1"],
             "dataset": dataset}]
    for chain in record["chains"].values():
        for result in chain["results"]:
            rows.append({"model": model, "pattern": result["pattern"], "top1": result["top1"],
                         "dataset": dataset})
    return rows


def _load_checkpoint(path: str) -> dict:
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise AccuracyError(f"--checkpoint {path}: no such file") from None
    except Exception as exc:  # torch explains over several lines; the first says what is wrong
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        first = first.strip().split(". ")[0].rstrip(".")[:160]
        raise AccuracyError(f"--checkpoint {path}: not a readable state dict ({first})") from None
    for key in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict):
        raise AccuracyError(f"--checkpoint {path}: holds a {type(state).__name__}, not a "
                            "state dict")
    return state


def environment() -> dict:
    """Versions recorded beside a table."""
    import sklearn
    import timm
    import torch

    from formats.masks import BLOCK_SCORE

    return {"block_score": BLOCK_SCORE,
            "python": platform.python_version(), "torch": torch.__version__,
            "timm": timm.__version__, "scikit-learn": sklearn.__version__,
            "torch_threads": torch.get_num_threads(), "machine": platform.machine()}
