"""The BeBOP sparse matrix-vector benchmark, reproduced: OSKI-style register blocking.

After Gahvari, Hoemmen, Demmel and Yelick, *Benchmarking Sparse Matrix-Vector Multiply in Five
Minutes* (2007), with the ``r x c`` register-blocked kernels of Im, Yelick and Vuduc's Sparsity
and OSKI. ``dse bench spmv`` runs it; ``dse bench spmv-blocks`` times its matrices block by block
for the blockwise SpMV estimator (``dse.calibrate.spmv_cnn``).

- :mod:`dse.spmv.matrices`: the synthetic matrices (random and banded, dense ``r x c`` blocks)
  and the benchmark's space of them;
- :mod:`dse.spmv.kernels`: the numba CSR and register-blocked BCSR kernels;
- :mod:`dse.spmv.bench`: calibrate, price and prune the space to a time budget, then run it;
- :mod:`dse.spmv.blocks`: per-block times measured in context, the data behind the estimator.

Submodules are imported explicitly (``from dse.spmv import bench``); nothing is imported
eagerly here, so the command line's help never loads scipy or numba.
"""
