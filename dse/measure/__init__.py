"""Measuring real kernels on the machine at hand: probes, timed CPU (and CUDA) kernels and
whole models, feeding calibration. The BeBOP sparse matrix-vector benchmark has its own
package, :mod:`dse.spmv`.

Submodules are imported explicitly (``from dse.measure import measure``); nothing is
imported eagerly here.
"""
