"""What building the command line imports: `dse --help` must not pull in the SpMV benchmark's
scipy.sparse and numba kernels (dse.spmv.blocks), scikit-learn or torch; the commands
that need them import them when they run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dse.cli.spmv_estimator import _shipped_block_datasets
from dse.spmv.blocks import shipped_block_datasets

ROOT = Path(__file__).resolve().parents[1]
#: Imported by none of the parsers: each costs time on every `dse` call.
NOT_FOR_HELP = ("scipy.sparse", "dse.spmv.blocks", "dse.spmv.kernels",
                "dse.spmv.matrices", "sklearn", "torch")


def test_help_imports_no_spmv_benchmark_sklearn_or_torch():
    code = ("import sys\n"
            "from dse.cli import main\n"
            "try:\n"
            "    main(['--help'])\n"
            "except SystemExit:\n"
            "    pass\n"
            f"print('IMPORTED', [m for m in {NOT_FOR_HELP!r} if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert "IMPORTED []" in out, out[-500:]


def test_help_lists_the_shipped_block_datasets_without_importing_them():
    """`dse calibrate --help` names the shipped block datasets from their folder, as
    dse.spmv.blocks lists them."""
    assert _shipped_block_datasets() == shipped_block_datasets()


def test_help_and_version_load_no_command_and_neither_pandas_nor_numba():
    code = ("import sys\n"
            "from dse.cli import main\n"
            "for argv in (['--help'], ['--version'], []):\n"
            "    try:\n"
            "        main(argv)\n"
            "    except SystemExit:\n"
            "        pass\n"
            "print('IMPORTED', [m for m in ('pandas', 'numba', 'dse.cli.options', "
            "'dse.cli.evaluate') if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert "IMPORTED []" in out, out[-500:]


def test_the_light_parser_lists_what_the_full_parser_lists():
    """`dse --help` comes from dse.cli.commands, the full parser from every command module:
    the same text, so neither can drift from the other."""
    from dse.cli.main import build_parser, light_parser

    assert light_parser().format_help() == build_parser().format_help()
