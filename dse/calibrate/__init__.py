"""Calibration: per (device, kernel family) predictors of the time real kernels take, trained
on ``dse measure`` datasets and validated on held-out weight shapes, and their application to
``dse.evaluate`` frames (the expectation beside the bound).

Submodules are imported explicitly (``from dse.calibrate import expected``); nothing is
imported eagerly here, so that loading one part never pulls in another's dependencies.
"""
