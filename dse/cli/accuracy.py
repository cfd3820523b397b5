"""`dse accuracy` (measure accuracy by pruning and fine-tuning) and `dse accuracy-table` (check
an accuracy table and look formats up in it)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from search.credentials import mask_credentials

from .commands import help_of
from .names import ACCURACY_LEVELS, ACCURACY_PATTERNS, ACCURACY_TABLE, MAX_IMG_SIZE
from .options import check_outputs, comma_list, integer, nonempty_text, number, path_value, seed
from .progress import StatusLine

__all__ = ["add_parsers"]

#: Epochs a run may be asked for (each epoch is at least seconds of training).
MAX_EPOCHS = 10_000


def add_parsers(commands) -> None:
    acc = commands.add_parser(
        "accuracy", help=help_of("accuracy"),
        description="Train a dense baseline of each model (or load --checkpoint), then for "
                    "each pattern prune by global magnitude and fine-tune level by level with "
                    "learning-rate rewinding, masks fixed; write an accuracy table (CSV) and "
                    "its provenance (JSON beside it). Resumable: rerun the same command to "
                    "continue. Needs: pip install 'sparsity-dse[accuracy]'.")
    acc.add_argument("--model", dest="models", action="append", required=True, metavar="NAME",
                     type=nonempty_text("a timm model name, e.g. convnext_tiny"),
                     help="timm model name (swin_tiny is accepted); repeatable")
    acc.add_argument("--img-size", type=integer(1, MAX_IMG_SIZE), default=32, metavar="N",
                     help="input size in pixels (default 32)")
    acc.add_argument("--dataset", default="digits", metavar="digits|PATH",
                     type=nonempty_text("digits or an ImageFolder tree"),
                     help="'digits' (scikit-learn's, upsampled; no download) or an ImageFolder "
                          "tree (default digits)")
    acc.add_argument("--patterns", default=",".join(ACCURACY_PATTERNS), metavar="P,P,...",
                     type=comma_list("patterns", "2:4,block4"),
                     help="unstructured, blockB, N:M (default: %(default)s)")
    acc.add_argument("--levels", default=",".join(f"{x:g}" for x in ACCURACY_LEVELS),
                     type=comma_list("sparsity levels", "0.5,0.75"),
                     metavar="S,S,...", help="sparsity levels of block and unstructured "
                                             "patterns (default: %(default)s)")
    acc.add_argument("--dense-epochs", type=integer(1, MAX_EPOCHS), default=30, metavar="E",
                     help="epochs of the dense baseline (default 30)")
    acc.add_argument("--finetune-epochs", type=integer(1, MAX_EPOCHS), default=3, metavar="E",
                     help="fine-tuning epochs per level; the last E epochs of the dense "
                          "schedule are replayed (default 3)")
    acc.add_argument("--lr", type=number(0.0, 10.0, above=True), default=1e-3,
                     help="peak AdamW learning rate")
    acc.add_argument("--batch-size", type=integer(1, 65536), default=64, metavar="B")
    acc.add_argument("--seed", type=seed, default=0)
    acc.add_argument("--checkpoint", metavar="PATH", type=nonempty_text("a saved state dict (.pt)"),
                     help="dense weights to start from instead of training")
    acc.add_argument("--train-limit", type=integer(1, 10**9), metavar="N",
                     help="use only N training images (quick trials)")
    acc.add_argument("--work-dir", type=path_value, default=Path("dse-accuracy-work"),
                     help="progress and weights, for resuming (default dse-accuracy-work)")
    acc.add_argument("--out", type=path_value, default=Path("accuracy.csv"),
                     help="table to write (default accuracy.csv); provenance goes to "
                          "OUT.json")
    acc.add_argument("--save-checkpoints", type=path_value, metavar="DIR",
                     help="also write each pruned model's state dict there (readable by "
                          "`dse workloads export --sparsity-from`)")
    acc.set_defaults(run=_cmd_accuracy)

    table = commands.add_parser(
        "accuracy-table", help=help_of("accuracy-table"),
        description="Validate an accuracy table (CSV), summarize it per model, and look "
                    "formats up: measured, interpolated within the pattern family, or out of "
                    "range (never extrapolated). Default table: the shipped one.")
    table.add_argument("path", nargs="?", type=path_value, default=ACCURACY_TABLE,
                       metavar="TABLE.csv", help="default: the shipped table")
    table.add_argument("--model", metavar="NAME", type=nonempty_text("a model of the table"),
                       help="only this model (alias swin_tiny ok)")
    table.add_argument("--format", dest="formats", action="append", default=[], metavar="F",
                       type=nonempty_text("a sparse format, e.g. 2:4"),
                       help="look this format up for the model(s); repeatable")
    table.add_argument("--metric", default="top1", type=nonempty_text("a metric of the table"),
                       help="the accuracy metric to show (default top1; one the table has)")
    table.set_defaults(run=_cmd_accuracy_table)



def _floats(text: str, flag: str) -> tuple[float, ...]:
    from ..accuracy import AccuracyError

    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise AccuracyError(f"{flag} {text!r}: expected numbers separated by commas, "
                            "e.g. 0.5,0.75") from None


def _cmd_accuracy(args: argparse.Namespace) -> int:
    import datetime
    import time

    from ..accuracy import AccuracyConfig, AccuracyTable, environment, table_frame
    from ..accuracy.pipeline import check_config
    from ..output import FileSet, write_atomic

    check_outputs(files=[("--out", args.out, (".csv",))],
                  folders=[("--work-dir", args.work_dir),
                           ("--save-checkpoints", args.save_checkpoints)],
                  inputs=[("--checkpoint", args.checkpoint, "file")])
    # Every option is checked here, in a moment, before timm is imported or a folder created.
    config = AccuracyConfig(
        models=tuple(args.models), img_size=args.img_size, dataset=args.dataset,
        patterns=tuple(p.strip() for p in args.patterns.split(",") if p.strip()),
        levels=_floats(args.levels, "--levels"), dense_epochs=args.dense_epochs,
        finetune_epochs=args.finetune_epochs, lr=args.lr, weight_decay=0.05,
        batch_size=args.batch_size, seed=args.seed, checkpoint=args.checkpoint,
        train_limit=args.train_limit)
    check_config(config, args.work_dir, args.save_checkpoints)
    _check_timm_models(config.models)
    command = mask_credentials("dse accuracy " + " ".join(
        [f"--model {m}" for m in config.models]
        + [f"--{k.replace('_', '-')} {v}" for k, v in (
            ("img_size", args.img_size), ("dataset", args.dataset),
            ("patterns", args.patterns), ("levels", args.levels),
            ("dense_epochs", args.dense_epochs), ("finetune_epochs", args.finetune_epochs),
            ("lr", args.lr), ("batch_size", args.batch_size), ("seed", args.seed),
            ("checkpoint", args.checkpoint), ("train_limit", args.train_limit))
           if v is not None]))
    start = time.perf_counter()
    rows = run_accuracy(config, args.work_dir, log=lambda line: print(line, flush=True),
                        checkpoints_dir=args.save_checkpoints,
                        progress=StatusLine("trained", "epochs", every_s=30.0))
    table = AccuracyTable.from_frame(table_frame(rows, command), where=str(args.out))
    state = json.loads((args.work_dir / "state.json").read_text())
    provenance = {
        "command": command, "seed": args.seed, "config": state["config"],
        "environment": environment(),
        "finished": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "wall_s_this_invocation": round(time.perf_counter() - start, 1),
        "wall_s": {model: {"dense": record["dense"]["wall_s"],
                           **{chain: c["wall_s"] for chain, c in record["chains"].items()}}
                   for model, record in state["models"].items()},
    }
    sidecar = args.out.with_suffix(".json")
    with FileSet():  # the table and its provenance: both, or neither
        table.to_csv(args.out)
        write_atomic(sidecar,
                     lambda h: h.write((json.dumps(provenance, indent=1) + "\n").encode()))
    print(f"wrote {len(table)} rows to {args.out} and provenance to {sidecar}")
    return 0


def run_accuracy(config, work_dir, **kwargs):
    """:func:`dse.accuracy.run_accuracy`, imported once a run starts (pandas, torch): the
    training that tests replace."""
    from ..accuracy import run_accuracy as run

    return run(config, work_dir, **kwargs)


def _cmd_accuracy_table(args: argparse.Namespace) -> int:
    from formats import parse as parse_format

    from ..accuracy import MODEL_ALIASES, AccuracyTableError, load_accuracy_table

    table = load_accuracy_table(args.path)
    models = table.models()
    if args.model is not None:
        model = MODEL_ALIASES.get(args.model, args.model)
        if model not in models:
            raise AccuracyTableError(f"{args.path}: no rows for model {args.model!r}; it has "
                                     f"{', '.join(models)}")
        models = [model]
    frame = table.frame
    metrics = sorted(frame["metric"].unique())
    if args.metric not in metrics:
        raise AccuracyTableError(f"{args.path}: --metric {args.metric!r} is not in the table; "
                                 f"it has {', '.join(metrics)}")
    for text in args.formats:  # every --format parses before anything is printed
        parse_format(text)
    print(f"{args.path}: {len(table)} rows, {len(table.models())} models")
    for model in models:
        rows = frame[(frame["model"] == model) & (frame["metric"] == args.metric)]
        datasets = ", ".join(sorted(rows["dataset"].unique()))
        print(f"\n{model} ({args.metric}, {datasets})")
        # Every measured pattern shows: N:M patterns of one sparsity (1:2 and 2:4 at 50%)
        # share a cell, each value named by its pattern.
        cells = rows.assign(
            column=rows["pattern"].map(_family_label),
            cell=[f"{v:.2f} ({pat})" if fam == "nm" else f"{v:.2f}"
                  for v, pat, fam in zip(rows["value"], rows["pattern"], rows["family"],
                                         strict=True)])
        grid = cells.pivot_table(index="sparsity", columns="column", values="cell",
                                 aggfunc=" ".join)
        grid.index = [f"{s:.2%}" for s in grid.index]
        grid = grid[sorted(grid.columns, key=_column_order)]
        grid.columns.name = "sparsity"
        print(grid.fillna("-").to_string())
        if args.formats:
            found = table.lookup_many(model, args.formats, metric=args.metric)
            print(found.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    return 0


def _column_order(label: str) -> tuple[int, int]:
    """dense, N:M, block sizes ascending, unstructured."""
    if label.startswith("block"):
        return 2, int(label[5:])
    return {"dense": (0, 0), "N:M": (1, 0), "unstructured": (3, 0)}[label]


def _family_label(pattern: str) -> str:
    from formats import parse as parse_format

    fmt = parse_format(pattern)
    if fmt.family == "block":
        return f"block{fmt.block}"
    return {"nm": "N:M", "dense": "dense", "unstructured": "unstructured"}[fmt.family]


def _check_timm_models(models) -> None:
    import difflib

    from ..accuracy import MODEL_ALIASES, AccuracyError

    try:
        import timm
    except ImportError:
        raise AccuracyError("dse accuracy needs torch, timm and scikit-learn: "
                            "pip install 'sparsity-dse[accuracy]'") from None

    known = set(timm.list_models())
    for model in models:
        if MODEL_ALIASES.get(model, model) not in known:
            close = difflib.get_close_matches(model, known, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise AccuracyError(f"unknown timm model {model!r}{hint}")
