"""The ``dse`` command line: the only place that joins the engines, ``search`` and ``reports``.

:mod:`.main` builds the parser from one module per command group and turns user errors into one
line and exit code 2; :mod:`.options` defines every shared option group once (design, numerics,
evaluator and simulator, outputs) and turns parsed arguments into inputs; :mod:`.progress` is
the one progress meter. Command modules: :mod:`.evaluate`, :mod:`.workloads`, :mod:`.hw`,
:mod:`.accuracy`, :mod:`.simulate`, :mod:`.search`, :mod:`.report` (report, compare, sweep,
study).
"""

from .main import main

__all__ = ["main"]
