"""Format strings.

Grammar (case-insensitive, spaces ignored)::

    format       := "dense" | nm | block | unstructured
    nm           := N ":" M                       2:4, 1:4, 2:8, 2:16   (1 <= N < M <= 65,536)
    block        := "block" B "@" sparsity        block4@87.5%, block16@0.9   (1 <= B <= 64)
    unstructured := ("unstructured" | "csr") "@" sparsity
                                                  unstructured@0.875, csr@90%
    sparsity     := a fraction in [0, 1)          0.875
                  | a percentage in [0, 100) "%"  87.5%

N:M fixes its own sparsity (1 - N/M); block and unstructured formats must state theirs.
"""

from __future__ import annotations

import re

from .base import Format, FormatError
from .block import MAX_BLOCK, Block
from .dense import Dense
from .nm import MAX_M, NM, RULE
from .unstructured import Unstructured

__all__ = ["parse", "GRAMMAR_HELP"]

GRAMMAR_HELP = ("dense | N:M (2:4, 1:4, 2:8) | blockB@S (block4@87.5%, block16@0.9) | "
                "unstructured@S (unstructured@0.875, csr@90%)")

_NM = re.compile(r"^(\d+):(\d+)$")
_BLOCK = re.compile(r"^block(\d+)@(.+)$")
_UNSTRUCTURED = re.compile(r"^(?:unstructured|csr)@(.+)$")
_NUMBER = re.compile(r"^[-+]?[0-9]*\.?[0-9]+(?:e[-+]?\d+)?$")


def _whole(digits: str) -> int:
    # Python refuses int() of over 4,300 digits; anything past 18 is out of range anyway.
    # Leading zeros are not digits of the value: 0002 is 2, however many zeros it has.
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= 18 else 10**18


def _sparsity(text: str, spec: str) -> float:
    is_percent = text.endswith("%")
    number = text[:-1] if is_percent else text
    if not _NUMBER.match(number):
        raise FormatError(f"format {spec!r}: sparsity {text!r} is not a number; "
                          "write a fraction such as 0.875 or a percentage such as 87.5%")
    value = float(number) / 100.0 if is_percent else float(number)
    if not 0.0 <= value < 1.0:
        raise FormatError(f"format {spec!r}: sparsity {text} is outside [0, 1) "
                          "(0% to below 100%); write e.g. 0.875 or 87.5%")
    return value


def parse(spec: str | Format) -> Format:
    """Parse a format string (see the module docstring); a :class:`Format` passes through."""
    if isinstance(spec, Format):
        return spec
    if not isinstance(spec, str):
        raise FormatError(f"format {spec!r} is not a string; expected {GRAMMAR_HELP}")
    text = re.sub(r"\s+", "", spec).lower()
    if text == "dense":
        return Dense()
    if match := _NM.match(text):
        n, m = _whole(match.group(1)), _whole(match.group(2))
        if not 1 <= n < m <= MAX_M:
            raise FormatError(f"format {spec!r}: {RULE}")
        return NM(n, m)
    if match := _BLOCK.match(text):
        block = _whole(match.group(1))
        if not 1 <= block <= MAX_BLOCK:
            raise FormatError(f"format {spec!r}: block size {match.group(1)} is out of range; "
                              f"use 1 to {MAX_BLOCK}")
        return Block(block, _sparsity(match.group(2), spec))
    if match := _UNSTRUCTURED.match(text):
        return Unstructured(_sparsity(match.group(1), spec))
    hint = ""
    if text.startswith(("block", "unstructured", "csr")) and "@" not in text:
        hint = " (block and unstructured formats need a sparsity, e.g. block4@87.5%)"
    raise FormatError(f"unknown format {spec!r}{hint}; expected {GRAMMAR_HELP}")
