"""Sparse weight formats: dense, N:M, block (BSR) and unstructured (CSR), and their grammar.

>>> from formats import parse
>>> parse("block4@87.5%").density
0.125
>>> parse("2:4").index_bits_per_nonzero
2
"""

from .base import Capabilities, Format, FormatError, Unit, kept_share, read_share
from .block import Block
from .dense import Dense
from .grammar import GRAMMAR_HELP, parse
from .nm import NM
from .unstructured import Unstructured

__all__ = [
    "Block",
    "Capabilities",
    "Dense",
    "Format",
    "FormatError",
    "GRAMMAR_HELP",
    "NM",
    "Unit",
    "Unstructured",
    "kept_share",
    "parse",
    "read_share",
]
