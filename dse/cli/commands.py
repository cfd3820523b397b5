"""The commands ``dse --help`` lists, in its order: each one's name, the module that builds
its parser, and its one-line help. The full parser (every module's ``add_parsers``) takes the
help from here, and so does the light parser that answers ``dse``, ``dse --help`` and
``dse --version`` without importing any command module (pandas, numba: see
:func:`dse.cli.main.main`)."""

from __future__ import annotations

__all__ = ["COMMANDS", "help_of"]

#: name -> (module under dse.cli that adds its parser, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "evaluate": ("evaluate",
        "speed-of-light latency and speedup of formats on hardware"),
    "workloads": ("workloads",
        "model traces: list, show, export from timm"),
    "accuracy": ("accuracy",
        "measure accuracy of sparse patterns by pruning and fine-tuning"),
    "accuracy-table": ("accuracy",
        "check an accuracy table and look formats up in it"),
    "hw": ("hw",
        "the hardware catalog, and this machine's probe"),
    "simulate": ("simulate",
        "event-level simulation: tiles, buffers, launch overhead, overlap"),
    "search": ("search",
        "search formats and hardware for a target, e.g. 1.3x_over_2:4"),
    "report": ("report",
        "an HTML report: Sparsity Roofline, roofline, bound mix, feature share"),
    "compare": ("report",
        "real and hypothetical GPUs side by side"),
    "sweep": ("report",
        "vary hardware fields, batch size or format parameters"),
    "study": ("report",
        "built-in sensitivity studies"),
    "measure": ("measure",
        "time real kernels for a trace's layer shapes (measurements, not bounds)"),
    "bench": ("bench",
        "benchmarks of real kernels on this machine"),
    "fusion-rules": ("fusion",
        "detect the op-kind pairs a compiler backend fuses (nn-Meter's method); the "
        "table behind --fusion rules:NAME"),
    "calibrate": ("calibrate",
        "train and validate kernel predictors on measured datasets"),
}


def help_of(name: str) -> str:
    """The one-line help of command ``name``."""
    return COMMANDS[name][1]
