"""``dse accuracy`` end to end on a tiny timm model, its masks, resuming, and bad input.

Needs the accuracy extra (torch, timm, scikit-learn), which the test command installs."""

from __future__ import annotations

import json

import pytest
import torch

import formats
from dse.accuracy import AccuracyConfig, AccuracyError, plan, run_accuracy, table_frame
from dse.cli import main
from formats import NM, Block, Unstructured
from formats.masks import PrunableWeight, global_masks, mask_violations
from workloads.export import export_trace

TINY = AccuracyConfig(models=("test_convnext",), patterns=("unstructured", "block4", "2:8"),
                      levels=(0.5, 0.75), dense_epochs=1, finetune_epochs=1, train_limit=192)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("work")
    checkpoints = tmp_path_factory.mktemp("checkpoints")
    rows = run_accuracy(TINY, work, log=lambda line: None, checkpoints_dir=checkpoints)
    return rows, work, checkpoints


def _weights(state: dict, model) -> dict:
    """PrunableWeight views of a state dict, grouped as the model's layers are."""
    weights = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Conv2d | torch.nn.Linear):
            groups = module.groups if isinstance(module, torch.nn.Conv2d) else 1
            weights[f"{name}.weight"] = PrunableWeight(state[f"{name}.weight"], groups)
    return weights


def test_plan_of_the_default_patterns():
    stages = plan(("unstructured", "block4", "2:4", "1:4", "2:8", "2:16"),
                  (0.5, 0.75, 0.875, 0.9375, 0.96875))
    names = [s.fmt.name for s in stages]
    assert names[:5] == ["unstructured@50%", "unstructured@75%", "unstructured@87.5%",
                         "unstructured@93.75%", "unstructured@96.875%"]
    # One chain per N: 1:2 -> 1:4 and 2:4 -> 2:8 -> 2:16, each link a level.
    assert names[10:] == ["1:2", "1:4", "2:4", "2:8", "2:16"]


def test_rows_cover_every_stage_and_dense(tiny_run):
    rows, _, _ = tiny_run
    table = table_frame(rows, "test")
    assert list(table["pattern"]) == ["dense", "unstructured@50%", "unstructured@75%",
                                      "block4@50%", "block4@75%", "2:4", "2:8"]
    assert table["value"].between(0, 100).all()
    assert set(table["family"]) == {"dense", "unstructured", "block", "nm"}
    assert list(table.loc[table["family"] == "nm", "sparsity"]) == [0.5, 0.75]


@pytest.mark.parametrize("pattern", ["unstructured@75%", "block4@75%", "2:8"])
def test_saved_masks_meet_the_pattern_after_fine_tuning(tiny_run, pattern):
    import timm

    _, _, checkpoints = tiny_run
    fmt = formats.parse(pattern)
    safe = fmt.name.replace(":", "-").replace("@", "_").replace("%", "")
    state = torch.load(checkpoints / f"test_convnext.{safe}.pt", weights_only=True)
    model = timm.create_model("test_convnext", num_classes=10)
    weights = _weights(state, model)
    masks = {n: w.weight != 0 for n, w in weights.items() if fmt.applies_to(w.m, w.k)}
    assert masks, "the format applies to some layers"
    assert mask_violations(weights, fmt, masks) == []
    if isinstance(fmt, NM):  # every run of M along K holds at most N nonzeros
        for name, keep in masks.items():
            runs = keep.reshape(keep.shape[0], -1, fmt.m).sum(dim=-1)
            assert int(runs.max()) <= fmt.n, name


def test_resume_skips_finished_work_and_refuses_other_settings(tiny_run, tmp_path):
    rows, work, _ = tiny_run
    logged = []
    again = run_accuracy(TINY, work, log=logged.append)
    assert again == rows
    assert not any("epoch" in line for line in logged)  # nothing was trained again
    with pytest.raises(AccuracyError, match="other settings"):
        run_accuracy(AccuracyConfig(**{**TINY.__dict__, "seed": 1}), work, log=lambda x: None)


def test_pruned_checkpoint_exports_with_its_densities(tiny_run):
    _, _, checkpoints = tiny_run
    trace = export_trace("test_convnext", img_size=32, num_classes=10,
                         sparsity_from=str(checkpoints / "test_convnext.unstructured_75.pt"))
    density = trace.ops["density"].dropna()
    assert len(density) == int(trace.ops["prunable"].sum())
    weights = trace.ops.loc[trace.ops["prunable"], ["m", "k", "groups"]].prod(axis=1)
    assert (density * weights).sum() / weights.sum() == pytest.approx(0.25, abs=1e-3)


# --- masks ------------------------------------------------------------------------------


@pytest.fixture
def random_weights():
    torch.manual_seed(0)
    return {"fc": PrunableWeight(torch.randn(64, 128)),
            "conv": PrunableWeight(torch.randn(32, 16, 3, 3)),
            "dw": PrunableWeight(torch.randn(16, 1, 7, 7), groups=16)}


@pytest.mark.parametrize("fmt", [Unstructured(0.9), Block(4, 0.875), Block(16, 0.5), NM(2, 4),
                                 NM(1, 8)], ids=str)
def test_masks_exact(random_weights, fmt):
    masks = global_masks(random_weights, fmt)
    # The depthwise conv (M = 1, K = 49) takes no blocks and no N:M.
    assert ("dw" in masks) == isinstance(fmt, Unstructured)
    pruned = {n: PrunableWeight(w.weight * masks[n], w.groups) if n in masks else w
              for n, w in random_weights.items()}
    assert mask_violations(pruned, fmt, masks) == []


def test_incremental_masks_are_nested(random_weights):
    for coarse, fine in [(Block(4, 0.5), Block(4, 0.75)), (NM(2, 4), NM(2, 8)),
                         (Unstructured(0.5), Unstructured(0.875))]:
        first = global_masks(random_weights, coarse)
        pruned = {n: PrunableWeight(w.weight * first[n], w.groups) if n in first else w
                  for n, w in random_weights.items()}
        second = global_masks(pruned, fine)
        for name, keep in second.items():
            assert not bool((keep & ~first[name]).any()), (coarse, fine, name)


def test_mask_violations_catches_a_broken_mask(random_weights):
    masks = global_masks(random_weights, NM(2, 4))
    masks["fc"] = masks["fc"].clone()
    masks["fc"][0, :4] = True  # a run of 4 that keeps 4
    assert any("keeps 4" in p for p in mask_violations(random_weights, NM(2, 4), masks))


# --- bad input --------------------------------------------------------------------------


def _exit_2(argv, capsys, needle):
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert needle in lines[0]


def test_bad_input(tmp_path, capsys):
    base = ["accuracy", "--work-dir", str(tmp_path / "w"), "--out", str(tmp_path / "a.csv")]
    _exit_2([*base, "--model", "test_convnext", "--patterns", "diagonal"], capsys, "diagonal")
    _exit_2([*base, "--model", "convnext_tinny"], capsys, "did you mean convnext_tiny")
    _exit_2([*base, "--model", "test_convnext", "--dataset", str(tmp_path / "nowhere")],
            capsys, "nowhere")
    (tmp_path / "empty" / "cats").mkdir(parents=True)
    _exit_2([*base, "--model", "test_convnext", "--dataset", str(tmp_path / "empty")],
            capsys, "no images")
    _exit_2([*base, "--model", "test_convnext", "--levels", "0.5,1.5"], capsys, "1.5")
    _exit_2([*base[:-1], str(tmp_path / "a.xlsx"), "--model", "test_convnext"], capsys,
            "a.xlsx")
    assert not (tmp_path / "a.csv").exists()


def test_cli_writes_table_and_provenance(tmp_path, capsys):
    out = tmp_path / "acc.csv"
    assert main(["accuracy", "--model", "test_vit", "--patterns", "2:4", "--levels", "0.5",
                 "--dense-epochs", "1", "--finetune-epochs", "1", "--train-limit", "64",
                 "--work-dir", str(tmp_path / "w"), "--out", str(out)]) == 0
    provenance = json.loads(out.with_suffix(".json").read_text())
    assert provenance["command"].startswith("dse accuracy --model test_vit")
    assert provenance["environment"]["torch"].startswith("2.")
    assert "test_vit" in out.read_text()


def _write_images(folder, classes=("cat", "dog"), per_class=10, size=12):
    from PIL import Image

    for index, name in enumerate(classes):
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            shade = 40 + 150 * index + i
            Image.new("RGB", (size, size), (shade, 255 - shade, i)).save(folder / name / f"{i}.png")


def test_image_folder_split_here(tmp_path):
    from dse.accuracy import load_dataset

    _write_images(tmp_path / "pets")
    data = load_dataset(str(tmp_path / "pets"), img_size=16, seed=0)
    assert data.classes == 2
    assert tuple(data.train_x.shape[1:]) == (3, 16, 16)
    assert len(data.train_y) + len(data.val_y) == 20
    assert sorted(set(data.val_y.tolist())) == [0, 1]  # stratified
    assert data.name == "imagefolder:pets-16px"


def test_image_folder_with_train_and_val(tmp_path):
    from dse.accuracy import load_dataset

    _write_images(tmp_path / "set" / "train", per_class=6)
    _write_images(tmp_path / "set" / "val", per_class=2)
    data = load_dataset(str(tmp_path / "set"), img_size=8, seed=0)
    assert (len(data.train_y), len(data.val_y)) == (12, 4)


def test_block_ranking_does_not_collapse_a_small_scale_layer():
    # Two layers of equal importance but 100x different scale: raw block norms would prune the
    # small one entirely at 50%; layer-normalized norms keep about half of each.
    torch.manual_seed(0)
    weights = {"big": PrunableWeight(torch.randn(64, 64)),
               "small": PrunableWeight(0.01 * torch.randn(64, 64))}
    masks = global_masks(weights, Block(8, 0.5))
    for name, keep in masks.items():
        assert 0.3 < float(keep.float().mean()) < 0.7, name


def test_progress_counts_every_epoch_this_invocation_trains(tmp_path):
    heard = []
    run_accuracy(TINY, tmp_path / "work", progress=lambda done, total: heard.append((done, total)))
    assert heard and heard[-1][0] == heard[-1][1] == len(heard)
    assert [d for d, _ in heard] == list(range(1, len(heard) + 1))
    # Resumed: nothing left to train, so nothing to count.
    again = []
    run_accuracy(TINY, tmp_path / "work", progress=lambda done, total: again.append(done))
    assert again == []
