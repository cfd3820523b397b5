"""What a convolution reads of its input: the positions some window covers. Pure arithmetic,
shared by the trace exporter (a trace op's ``input_elems``) and the bound of benchmarked
convolutions (:func:`dse.measure.sol.row_features`)."""

from __future__ import annotations

__all__ = ["out_positions", "read_positions"]


def out_positions(size: int, kernel: int, stride: int, padding: int, dilation: int = 1) -> int:
    """Output positions along one axis (PyTorch's formula)."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def read_positions(size: int, out: int, kernel: int, stride: int, padding: int,
                   dilation: int = 1) -> int:
    """Input positions along one spatial axis that some window of a convolution reads: all of
    them, unless the stride outruns the kernel's extent (or the last rows fit no window).
    ResNet's 1x1 stride-2 shortcuts read every other row and column, a quarter of their input,
    and a bound that charged the rest was beaten by 1.45x on an H100."""
    read = {o * stride - padding + j * dilation for o in range(out) for j in range(kernel)}
    return sum(1 for i in read if 0 <= i < size)
