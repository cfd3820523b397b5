"""Measuring real kernels on the machine at hand: timed CPU (and CUDA) kernels and the BeBOP
sparse matrix-vector benchmark, feeding calibration.

Submodules are imported explicitly (``from dse.measure import spmv_bench``); nothing is
imported eagerly here.
"""
