"""Image-classification data for ``dse accuracy``, held in memory as tensors.

The default, ``digits``, ships inside scikit-learn (no download at run time): 1797 grey 8x8
handwritten digits, 10 classes, upsampled bilinearly to the model's input size and repeated over
three channels. Any ImageFolder tree works too: ``ROOT/train/CLASS/*.png`` and
``ROOT/val/CLASS/*.png``, or ``ROOT/CLASS/*.png`` split 80/20 here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["AccuracyError", "Dataset", "check_dataset", "load_dataset"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm")


class AccuracyError(ValueError):
    """Bad input to ``dse accuracy``: the message names it and the fix."""


@dataclass(frozen=True)
class Dataset:
    name: str  # recorded in the table's ``dataset`` column
    train_x: object  # float tensor [N, 3, H, W], normalized
    train_y: object  # long tensor [N]
    val_x: object
    val_y: object
    classes: int


def _split(n_labels, labels, seed: int, fraction: float = 0.2):
    """Stratified split indices: the same classes in the same proportions on both sides."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    train, val = [], []
    for c in range(n_labels):
        members = (labels == c).nonzero().flatten()
        members = members[torch.randperm(len(members), generator=generator)]
        n_val = max(1, round(fraction * len(members)))
        val.append(members[:n_val])
        train.append(members[n_val:])
    return torch.cat(train).sort().values, torch.cat(val).sort().values


def _normalize(train_x, val_x):
    mean = train_x.mean(dim=(0, 2, 3), keepdim=True)
    std = train_x.std(dim=(0, 2, 3), keepdim=True).clamp_min(1e-6)
    return (train_x - mean) / std, (val_x - mean) / std


def _digits(img_size: int, seed: int, limit: int | None) -> Dataset:
    import torch
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32)[:, None] / 16.0
    x = torch.nn.functional.interpolate(x, size=(img_size, img_size), mode="bilinear",
                                        align_corners=False).repeat(1, 3, 1, 1)
    y = torch.tensor(digits.target, dtype=torch.long)
    train, val = _split(10, y, seed)
    if limit is not None:
        train, val = train[:limit], val[: max(limit // 4, 10)]
    train_x, val_x = _normalize(x[train], x[val])
    return Dataset(f"sklearn-digits-{img_size}px", train_x, y[train], val_x, y[val], 10)


def _folder_images(root: Path) -> dict[str, list[Path]]:
    classes = sorted(p for p in root.iterdir() if p.is_dir())
    return {c.name: sorted(f for f in c.rglob("*") if f.suffix.lower() in IMAGE_SUFFIXES)
            for c in classes}


def _load_images(paths: list[Path], img_size: int):
    import torch
    from PIL import Image

    tensors = []
    for path in paths:
        try:
            with Image.open(path) as image:
                image = image.convert("RGB").resize((img_size, img_size), Image.BILINEAR)
                data = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8)
        except OSError as exc:
            raise AccuracyError(f"{path}: not a readable image ({exc})") from None
        tensors.append(data.reshape(img_size, img_size, 3).permute(2, 0, 1).float() / 255.0)
    return torch.stack(tensors)


def _folder_files(root: Path) -> tuple[dict[str, list[Path]], dict[str, list[Path]] | None,
                                        list[str]]:
    """The training and validation files of an ImageFolder tree (``None``: split here) and
    its classes; refuses a missing folder and one without images."""
    if not root.is_dir():
        raise AccuracyError(f"--dataset {root}: no such folder; give an ImageFolder tree "
                            "(ROOT/CLASS/*.png, or ROOT/train and ROOT/val) or 'digits'")
    splits = (root / "train", root / "val")
    try:
        if all(s.is_dir() for s in splits):
            train_files, val_files = (_folder_images(s) for s in splits)
        else:
            train_files, val_files = _folder_images(root), None
    except OSError as exc:
        raise AccuracyError(f"--dataset {root}: cannot read the folder "
                            f"({exc.strerror or exc})") from None
    classes = sorted(c for c, files in train_files.items() if files)
    if not classes:
        raise AccuracyError(f"--dataset {root}: holds no images (expected ROOT/CLASS/*.png "
                            f"with one of {', '.join(IMAGE_SUFFIXES)})")
    if val_files is not None and not any(val_files.get(c) for c in classes):
        raise AccuracyError(f"--dataset {root}: val/ holds no images")
    return train_files, val_files, classes


def check_dataset(spec: str) -> None:
    """Refuse a ``--dataset`` that cannot be loaded, without loading it: ``digits`` or an
    ImageFolder tree with images."""
    if spec != "digits":
        _folder_files(Path(spec))


def _image_folder(root: Path, img_size: int, seed: int, limit: int | None) -> Dataset:
    import torch

    train_files, val_files, classes = _folder_files(root)
    index = {c: i for i, c in enumerate(classes)}

    def gather(files):
        paths = [p for c in classes for p in files.get(c, [])]
        labels = [index[c] for c in classes for _ in files.get(c, [])]
        return paths, torch.tensor(labels, dtype=torch.long)

    paths, labels = gather(train_files)
    x = _load_images(paths, img_size)
    if val_files is None:
        train, val = _split(len(classes), labels, seed)
        train_x, train_y, val_x, val_y = x[train], labels[train], x[val], labels[val]
    else:
        val_paths, val_y = gather(val_files)
        if not val_paths:
            raise AccuracyError(f"--dataset {root}: val/ holds no images")
        train_x, train_y, val_x = x, labels, _load_images(val_paths, img_size)
    if limit is not None:
        train_x, train_y = train_x[:limit], train_y[:limit]
    train_x, val_x = _normalize(train_x, val_x)
    return Dataset(f"imagefolder:{root.name}-{img_size}px", train_x, train_y, val_x, val_y,
                   len(classes))


def load_dataset(spec: str, img_size: int, seed: int, limit: int | None = None) -> Dataset:
    """``"digits"`` or an ImageFolder path. ``limit`` caps the training images (tests)."""
    if spec == "digits":
        return _digits(img_size, seed, limit)
    return _image_folder(Path(spec), img_size, seed, limit)
