"""Shared fixtures: a small hand-checkable trace and the round-figure test accelerator."""

from __future__ import annotations

from pathlib import Path

import pytest

import accelerator_models
from workloads import Trace

DATA = Path(__file__).parent / "data"


def pytest_report_header(config):
    """The fuzz suite's sample, so that a failing run can be repeated exactly."""
    from tests.test_fuzz_inputs import SAMPLE, SEED

    return f"fuzz inputs: a sample of {SAMPLE} cases drawn with seed {SEED} (all: -m slow)"
ROUND_GPU = DATA / "round_gpu.toml"


def op(name, kind, m=0, k=0, n=0, groups=1, weight=0, inp=0, out=0, vflops=0.0,
       prunable=False, producers=()):
    """One trace record; GEMM ops with weights default to prunable via the caller."""
    return {"name": name, "kind": kind, "m": m, "k": k, "n": n, "groups": groups,
            "weight_elems": weight, "input_elems": inp, "output_elems": out,
            "vector_flops": float(vflops), "prunable": prunable, "producers": list(producers)}


def chain_trace() -> Trace:
    """fc -> GELU -> fc2 on 16 tokens of width 1024; the model input is the [16, 1024] tensor
    fc reads, the model output is what fc2 writes."""
    records = [
        op("fc", "linear", 1024, 1024, 16, 1, 1024 * 1024, 16384, 16384, 0, True, ["input"]),
        op("act", "activation", inp=16384, out=16384, vflops=8 * 16384, producers=["fc"]),
        op("fc2", "linear", 1024, 1024, 16, 1, 1024 * 1024, 16384, 16384, 0, True, ["act"]),
    ]
    return Trace.from_records("chain", [16, 1024], records, {"source": "tests/conftest.py"})


def conv_trace() -> Trace:
    """A 3x3 stem conv (K = 27) and a depthwise 3x3 conv over 64 channels at 16 x 16."""
    records = [
        op("stem", "conv", 64, 27, 256, 1, 64 * 27, 3072, 16384, 0, True, ["input"]),
        op("dw", "conv", 1, 9, 256, 64, 64 * 9, 16384, 16384, 0, True, ["stem"]),
    ]
    return Trace.from_records("convs", [3, 32, 32], records, {"source": "tests/conftest.py"})


@pytest.fixture(scope="session")
def round_gpu():
    return accelerator_models.load(str(ROUND_GPU))


@pytest.fixture(scope="session")
def chain():
    return chain_trace()


@pytest.fixture(scope="session")
def convs():
    return conv_trace()


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory):
    """URL of a real PostgreSQL server on 127.0.0.1, shared by the whole test session."""
    from tests.postgres_server import postgres_server

    with postgres_server(tmp_path_factory.mktemp("postgres")) as url:
        yield url
