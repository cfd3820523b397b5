"""dse: speed-of-light design-space exploration of sparse neural-network inference.

>>> import dse
>>> table = dse.evaluate("toy_hybrid", hardware="a100", formats=["2:4"], fusion="unfused")
>>> list(table["format"])
['dense', '2:4']
"""

from .evaluator import FUSIONS, SCOPES, EvaluationError, evaluate, evaluate_layers
from .numerics import DTYPE_BYTES, Numerics, NumericsError

__all__ = [
    "DTYPE_BYTES",
    "FUSIONS",
    "SCOPES",
    "EvaluationError",
    "Numerics",
    "NumericsError",
    "evaluate",
    "evaluate_layers",
]
__version__ = "0.1.0"
