"""Accelerator specs: the shipped catalog, ``extends``, ``--set`` overrides, strict loading,
and the acceptance criterion that every field moves some output of the evaluator (the on-chip
sizes and launch overhead move the simulator's instead)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import accelerator_models
import dse
from accelerator_models import FIELDS, Accelerator, SpecError
from accelerator_models.loader import ENERGY_FIELDS
from workloads import Trace

CATALOG = accelerator_models.catalog_names()

# --- the catalog ------------------------------------------------------------------------------


def test_catalog_is_not_empty_and_has_the_reference_gpus():
    for name in ("a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "b200", "l4",
                 "rtx4090", "mi300x", "v100"):
        assert name in CATALOG


@pytest.mark.parametrize("name", CATALOG)
def test_catalog_entry_loads(name):
    acc = accelerator_models.load(name)
    assert isinstance(acc, Accelerator)
    assert acc.name == name
    assert acc.overrides == ()
    assert acc.dram_bandwidth_bytes_per_s > 0
    assert acc.tensor_flops_per_s and all(v > 0 for v in acc.tensor_flops_per_s.values())
    assert acc.vector_flops_per_s and all(v > 0 for v in acc.vector_flops_per_s.values())
    assert set(acc.tensor_flops_per_s) <= set(accelerator_models.TENSOR_DTYPES)
    assert set(acc.vector_flops_per_s) <= set(accelerator_models.VECTOR_DTYPES)


@pytest.mark.parametrize("name", CATALOG)
def test_catalog_entry_has_sources_and_unverified_fields_are_fields(name):
    acc = accelerator_models.load(name)
    assert len(acc.sources) > 0
    assert all(isinstance(s, str) and s.strip() for s in acc.sources)
    for path in acc.unverified:
        assert path in FIELDS, f"{name}: unverified lists {path!r}, not a field"


@pytest.mark.parametrize("alias, target", [("a100", "a100-40gb"), ("h100", "h100-sxm")])
def test_aliases_resolve(alias, target):
    assert accelerator_models.aliases()[alias] == target
    assert accelerator_models.resolve_path(alias) == accelerator_models.CATALOG_DIR / (
        f"{target}.toml")
    by_alias = accelerator_models.load(alias)
    by_name = accelerator_models.load(target)
    assert by_alias == by_name
    assert by_alias.name == target
    assert alias in by_alias.aliases


def test_catalog_file_path_loads_like_its_name():
    path = accelerator_models.CATALOG_DIR / "h200.toml"
    assert accelerator_models.load(str(path)) == accelerator_models.load("h200")


def test_unknown_name_suggests_close_matches():
    with pytest.raises(SpecError, match=r"unknown hardware 'a10O'.*a100"):
        accelerator_models.load("a10O")


# Spot checks against shared/reference/gpu_specs.md (FLOP/s and bytes/s).
@pytest.mark.parametrize("name, path, expected", [
    ("a100-40gb", "tensor_flops_per_s.fp16", 312e12),
    ("a100-40gb", "tensor_flops_per_s.bf16", 312e12),
    ("a100-40gb", "tensor_flops_per_s.tf32", 156e12),
    ("a100-40gb", "tensor_flops_per_s.int8", 624e12),
    ("a100-40gb", "vector_flops_per_s.fp32", 19.5e12),
    ("a100-40gb", "vector_flops_per_s.fp16", 78e12),
    ("a100-40gb", "dram_bandwidth_bytes_per_s", 1.555e12),
    ("a100-80gb", "dram_bandwidth_bytes_per_s", 2.039e12),
    ("a100-80gb", "tensor_flops_per_s.fp16", 312e12),
    ("h100-sxm", "tensor_flops_per_s.fp16", 989.4e12),
    ("h100-sxm", "tensor_flops_per_s.fp8", 1978.9e12),
    ("h100-sxm", "tensor_flops_per_s.tf32", 494.7e12),
    ("h100-sxm", "vector_flops_per_s.fp32", 66.9e12),
    ("h100-sxm", "dram_bandwidth_bytes_per_s", 3.35e12),
    ("h100-pcie", "tensor_flops_per_s.fp16", 756e12),
    ("h100-pcie", "dram_bandwidth_bytes_per_s", 2.0e12),
    ("h200", "tensor_flops_per_s.fp16", 989.4e12),
    ("h200", "dram_bandwidth_bytes_per_s", 4.8e12),
    ("b200", "tensor_flops_per_s.fp16", 2250e12),
    ("b200", "dram_bandwidth_bytes_per_s", 8e12),
    ("l4", "tensor_flops_per_s.fp16", 121e12),
    ("l4", "dram_bandwidth_bytes_per_s", 300e9),
    ("rtx4090", "dram_bandwidth_bytes_per_s", 1.008e12),
    ("rtx4090", "vector_flops_per_s.fp32", 82.6e12),
    ("mi300x", "tensor_flops_per_s.fp16", 1307.4e12),
    ("mi300x", "dram_bandwidth_bytes_per_s", 5.3e12),
    ("v100", "tensor_flops_per_s.fp16", 125e12),
    ("v100", "vector_flops_per_s.fp32", 15.7e12),
    ("v100", "dram_bandwidth_bytes_per_s", 900e9),
])
def test_catalog_values_match_reference(name, path, expected):
    assert _field(accelerator_models.load(name), path) == pytest.approx(expected, rel=1e-9)


def test_a100_fp16_tensor_core_is_16x_its_fp32_vector_rate():
    a100 = accelerator_models.load("a100")
    assert a100.tensor_rate("fp16") / a100.vector_rate("fp32") == pytest.approx(16.0)


def test_v100_has_no_sparse_tensor_core():
    v100 = accelerator_models.load("v100")
    assert v100.sparse_tensor is None
    assert v100.nonzero_rate == 0.0
    assert not v100.supports_nm(2, 4)
    assert "bf16" not in v100.tensor_flops_per_s


@pytest.mark.parametrize("name", ["a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200",
                                  "b200", "l4", "rtx4090"])
def test_nvidia_ampere_and_later_run_2_4_at_the_dense_rate(name):
    acc = accelerator_models.load(name)
    assert acc.supports_nm(2, 4)
    assert acc.nonzero_rate == 1.0


KIB, MIB = 1024, 1024 * 1024

# On-chip sizes from shared/reference/gpu_specs.md, binary units; None where the table gives no
# figure or marks it unverified (the spec leaves the field out).
ON_CHIP = {  # name: (sm_count, shared_memory_per_sm_bytes, l2_bytes)
    "v100": (80, 96 * KIB, 6 * MIB),
    "a100-40gb": (108, 164 * KIB, 40 * MIB),
    "a100-80gb": (108, 164 * KIB, 40 * MIB),
    "h100-sxm": (132, 228 * KIB, 50 * MIB),
    "h100-pcie": (114, 228 * KIB, 50 * MIB),
    "h200": (132, 228 * KIB, 50 * MIB),
    "l4": (58, None, 48 * MIB),
    "rtx4090": (128, None, 72 * MIB),
    "b200": (None, None, None),
    "mi300x": (304, None, 256 * MIB),  # CUs; the Infinity Cache is the last-level cache
    # A CPU: its caches are in the [cache] table (tests/test_bound.py), not the simulator's fields.
    "epyc-zen5-2c": (None, None, None),
}


def test_every_catalog_entry_has_an_on_chip_row():
    assert set(ON_CHIP) == set(CATALOG)


@pytest.mark.parametrize("name", sorted(ON_CHIP))
def test_catalog_on_chip_sizes_match_reference(name):
    acc = accelerator_models.load(name)
    assert (acc.sm_count, acc.shared_memory_per_sm_bytes, acc.l2_bytes) == ON_CHIP[name]
    assert acc.sm_count is None or isinstance(acc.sm_count, int)
    # No sourced figure exists; the simulator documents its own default.
    assert acc.kernel_launch_overhead_s is None


def test_on_chip_bytes_of_smem_sums_over_the_sms_and_l2_is_the_l2():
    a100 = accelerator_models.load("a100")
    assert a100.on_chip_bytes("smem") == 108 * 164 * KIB
    assert a100.on_chip_bytes("l2") == 40 * MIB


@pytest.mark.parametrize("name, buffer, missing", [
    ("l4", "smem", "shared_memory_per_sm_bytes"),
    ("b200", "l2", "l2_bytes"),
    ("b200", "smem", "shared_memory_per_sm_bytes"),
])
def test_on_chip_bytes_names_the_missing_field_and_the_fix(name, buffer, missing):
    with pytest.raises(SpecError) as info:
        accelerator_models.load(name).on_chip_bytes(buffer)
    message = str(info.value)
    assert f"has no {missing}" in message and f"--set {missing}=VALUE" in message
    assert "--buffer-bytes" in message and "\n" not in message


def test_on_chip_bytes_of_smem_needs_the_sm_count_too():
    acc = accelerator_models.load("b200", ["shared_memory_per_sm_bytes=233472"])
    with pytest.raises(SpecError, match=r"has no sm_count.*--set sm_count=VALUE"):
        acc.on_chip_bytes("smem")
    acc = accelerator_models.load("b200", ["shared_memory_per_sm_bytes=233472", "sm_count=148"])
    assert acc.on_chip_bytes("smem") == 148 * 233472


def test_on_chip_bytes_rejects_an_unknown_buffer():
    with pytest.raises(SpecError, match=r"unknown on-chip buffer 'dram'.*smem.*l2"):
        accelerator_models.load("a100").on_chip_bytes("dram")


# --- extends ----------------------------------------------------------------------------------


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_extends_takes_parent_fields_and_one_override(tmp_path):
    spec = _write(tmp_path / "fast_a100.toml", """
extends = "a100"
sources = ["hypothetical"]
dram_bandwidth_bytes_per_s = 3.0e12
""")
    child = accelerator_models.load(str(spec))
    parent = accelerator_models.load("a100")
    assert child.dram_bandwidth_bytes_per_s == 3.0e12
    assert child.tensor_flops_per_s == parent.tensor_flops_per_s
    assert child.vector_flops_per_s == parent.vector_flops_per_s
    assert child.sparse_tensor == parent.sparse_tensor
    assert child.block_sparse == parent.block_sparse
    assert child.sources == ("hypothetical",)
    # Identity is not inherited.
    assert child.name == "fast_a100"
    assert child.aliases == ()
    assert child.description == ""


def test_extends_override_inside_a_table_keeps_the_table_siblings(tmp_path):
    spec = _write(tmp_path / "hypo.toml", """
extends = "h100-sxm"
[sparse_tensor]
patterns = ["2:4", "1:4", "2:8"]
""")
    child = accelerator_models.load(str(spec))
    assert child.sparse_tensor.patterns == ((2, 4), (1, 4), (2, 8))
    assert child.sparse_tensor.nonzero_rate == 1.0
    assert child.tensor_flops_per_s["fp16"] == 989.4e12


def test_extends_by_relative_path(tmp_path):
    _write(tmp_path / "base" / "parent.toml", """
name = "parent-gpu"
aliases = ["pgpu"]
sources = ["test"]
dram_bandwidth_bytes_per_s = 1e12
[tensor_flops_per_s]
fp16 = 100e12
[vector_flops_per_s]
fp32 = 10e12
[block_sparse]
supported = false
min_block_size = 16
""")
    child_path = _write(tmp_path / "derived" / "child.toml", """
extends = "../base/parent.toml"
[tensor_flops_per_s]
fp16 = 200e12
""")
    child = accelerator_models.load(str(child_path))
    assert child.tensor_flops_per_s == {"fp16": 200e12}
    assert child.dram_bandwidth_bytes_per_s == 1e12
    assert child.block_sparse.supported is False
    assert child.block_sparse.min_block_size == 16
    assert child.name == "child"
    assert child.aliases == ()


def test_extends_chain_of_three(tmp_path):
    _write(tmp_path / "one.toml", 'extends = "a100"\ndram_bandwidth_bytes_per_s = 2e12\n')
    _write(tmp_path / "two.toml", 'extends = "one.toml"\n[vector_flops_per_s]\nfp32 = 1e12\n')
    two = accelerator_models.load(str(tmp_path / "two.toml"))
    assert two.dram_bandwidth_bytes_per_s == 2e12
    assert two.vector_flops_per_s["fp32"] == 1e12
    assert two.tensor_flops_per_s["fp16"] == 312e12


def test_extends_cycle_is_an_error_naming_the_cycle(tmp_path):
    a = _write(tmp_path / "cyc_a.toml", 'extends = "cyc_b.toml"\n')
    _write(tmp_path / "cyc_b.toml", 'extends = "cyc_a.toml"\n')
    with pytest.raises(SpecError) as info:
        accelerator_models.load(str(a))
    message = str(info.value)
    assert "cyc_a.toml" in message and "cyc_b.toml" in message
    assert "cycle" in message or "extends itself" in message


def test_extends_self_is_an_error(tmp_path):
    me = _write(tmp_path / "me.toml", 'extends = "me.toml"\n')
    with pytest.raises(SpecError, match="me.toml"):
        accelerator_models.load(str(me))


def test_extends_a_missing_parent_is_an_error(tmp_path):
    spec = _write(tmp_path / "orphan.toml", 'extends = "no-such-gpu"\n')
    with pytest.raises(SpecError, match="no-such-gpu"):
        accelerator_models.load(str(spec))


# --- --set overrides --------------------------------------------------------------------------


def test_set_number():
    acc = accelerator_models.load("a100", ["dram_bandwidth_bytes_per_s=3e12"])
    assert acc.dram_bandwidth_bytes_per_s == 3e12
    assert acc.tensor_flops_per_s == accelerator_models.load("a100").tensor_flops_per_s


def test_set_number_in_a_table_and_a_new_dtype():
    acc = accelerator_models.load("v100", ["tensor_flops_per_s.bf16=1e14",
                                           "vector_flops_per_s.fp32=2e13"])
    assert acc.tensor_flops_per_s["bf16"] == 1e14
    assert acc.tensor_flops_per_s["fp16"] == 125e12
    assert acc.vector_flops_per_s["fp32"] == 2e13


@pytest.mark.parametrize("text, expected", [("false", False), ("true", True), ("FALSE", False)])
def test_set_bool(text, expected):
    acc = accelerator_models.load("a100", [f"block_sparse.supported={text}"])
    assert acc.block_sparse.supported is expected


def test_set_block_size_is_an_int():
    acc = accelerator_models.load("a100", ["block_sparse.min_block_size=16"])
    assert acc.block_sparse.min_block_size == 16
    assert isinstance(acc.block_sparse.min_block_size, int)
    assert not acc.supports_block(8) and acc.supports_block(16)


@pytest.mark.parametrize("override, attribute, expected", [
    ("sm_count=100", "sm_count", 100),
    ("sm_count=108.0", "sm_count", 108),  # how dse sweep hands a swept value over
    ("shared_memory_per_sm_bytes=65536", "shared_memory_per_sm_bytes", 65536.0),
    ("l2_bytes=2.5e7", "l2_bytes", 2.5e7),
    ("kernel_launch_overhead_s=4e-6", "kernel_launch_overhead_s", 4e-6),
    ("kernel_launch_overhead_s=0", "kernel_launch_overhead_s", 0.0),  # no launch cost
])
def test_set_on_chip_and_launch_fields(override, attribute, expected):
    acc = accelerator_models.load("b200", [override])
    value = getattr(acc, attribute)
    assert value == expected
    assert type(value) is type(expected)


def test_set_pattern_list():
    acc = accelerator_models.load("a100", ["sparse_tensor.patterns=2:4,1:4,2:8,2:16"])
    assert acc.sparse_tensor.patterns == ((2, 4), (1, 4), (2, 8), (2, 16))
    assert acc.sparse_tensor.nonzero_rate == 1.0
    for n, m in ((2, 4), (1, 4), (2, 8), (2, 16)):
        assert acc.supports_nm(n, m)
    assert not acc.supports_nm(1, 8)


def test_set_sparse_core_on_hardware_without_one():
    acc = accelerator_models.load("v100", ["sparse_tensor.patterns=2:4",
                                           "sparse_tensor.nonzero_rate=0.5"])
    assert acc.sparse_tensor.patterns == ((2, 4),)
    assert acc.nonzero_rate == 0.5


def test_set_later_override_wins():
    acc = accelerator_models.load("a100", ["dram_bandwidth_bytes_per_s=2e12",
                                           "dram_bandwidth_bytes_per_s=4e12"])
    assert acc.dram_bandwidth_bytes_per_s == 4e12


def test_set_name_records_the_overrides():
    overrides = ["sparse_tensor.patterns=2:4,1:4", "dram_bandwidth_bytes_per_s=3e12"]
    acc = accelerator_models.load("a100", overrides)
    assert acc.name.startswith("a100-40gb")
    assert "sparse_tensor.patterns=2:4,1:4" in acc.name
    assert "dram_bandwidth_bytes_per_s=3e12" in acc.name
    assert acc.overrides == tuple(overrides)
    assert acc.name != accelerator_models.load("a100").name


def test_set_applies_over_extends(tmp_path):
    spec = _write(tmp_path / "x.toml", 'extends = "a100"\ndram_bandwidth_bytes_per_s = 3e12\n')
    acc = accelerator_models.load(str(spec), ["dram_bandwidth_bytes_per_s=5e12"])
    assert acc.dram_bandwidth_bytes_per_s == 5e12


@pytest.mark.parametrize("override, fragment", [
    ("dram_bandwidth_bytes_per_s=fast", "dram_bandwidth_bytes_per_s"),
    ("dram_bandwidth_bytes_per_s=0", "dram_bandwidth_bytes_per_s"),
    ("dram_bandwidth_bytes_per_s=-1e12", "dram_bandwidth_bytes_per_s"),
    ("dram_bandwidth_bytes_per_s=nan", "dram_bandwidth_bytes_per_s"),
    ("dram_bandwidth_bytes_per_s=inf", "dram_bandwidth_bytes_per_s"),
    ("dram_bandwidth_bytes_per_s", "dram_bandwidth_bytes_per_s"),
    ("dram_bandwith_bytes_per_s=1e12", "dram_bandwith_bytes_per_s"),
    ("tensor_flops_per_s.fp64=1e12", "tensor_flops_per_s.fp64"),
    ("sparse_tensor.nonzero_rate=1.5", "sparse_tensor.nonzero_rate"),
    ("sparse_tensor.patterns=4:2", "4:2"),
    ("sparse_tensor.patterns=2:2", "2:2"),
    ("sparse_tensor.patterns=two:four", "two:four"),
    ("sparse_tensor.patterns=2:4,2:4", "sparse_tensor.patterns"),
    ("block_sparse.supported=yes", "block_sparse.supported"),
    ("block_sparse.min_block_size=0", "block_sparse.min_block_size"),
    ("block_sparse.min_block_size=65", "block_sparse.min_block_size"),
    ("block_sparse.min_block_size=2.5", "block_sparse.min_block_size"),
    ("sm_count=0", "sm_count"),
    ("sm_count=1.5", "sm_count"),
    ("sm_count=-108", "sm_count"),
    ("sm_count=many", "sm_count"),
    ("shared_memory_per_sm_bytes=0", "shared_memory_per_sm_bytes"),
    ("l2_bytes=-1", "l2_bytes"),
    ("l2_bytes=inf", "l2_bytes"),
    ("kernel_launch_overhead_s=-1e-6", "kernel_launch_overhead_s"),
    ("kernel_launch_overhead_s=nan", "kernel_launch_overhead_s"),
])
def test_bad_set_is_a_spec_error_naming_the_field(override, fragment):
    with pytest.raises(SpecError) as info:
        accelerator_models.load("a100", [override])
    assert fragment in str(info.value)
    assert "--set" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("override", ["name=fake", "sources=x", "clock_mhz=1"])
def test_unknown_set_field_suggests_only_settable_fields(override):
    with pytest.raises(SpecError) as info:
        accelerator_models.load("a100", [override])
    message = str(info.value)
    assert repr(override.partition("=")[0]) in message
    assert "dram_bandwidth_bytes_per_s" in message  # a real field is suggested
    # descriptive keys cannot be --set, so they must not be offered
    suggestion = message.split(";", 1)[1]
    for key in ("name", "description", "aliases", "sources", "unverified", "extends"):
        assert key not in suggestion.replace(",", " ").split(), key


def test_set_only_one_sparse_key_on_hardware_without_a_sparse_core():
    with pytest.raises(SpecError, match="nonzero_rate"):
        accelerator_models.load("v100", ["sparse_tensor.patterns=2:4"])


# --- strict loading of files ------------------------------------------------------------------

MINIMAL = """
sources = ["test"]
dram_bandwidth_bytes_per_s = 1e12
[tensor_flops_per_s]
fp16 = 100e12
[vector_flops_per_s]
fp32 = 10e12
[block_sparse]
supported = true
min_block_size = 1
"""


def test_minimal_file_loads(tmp_path):
    acc = accelerator_models.load(str(_write(tmp_path / "mini.toml", MINIMAL)))
    assert acc.name == "mini"
    assert acc.sparse_tensor is None
    assert acc.dram_bandwidth_bytes_per_s == 1e12


def test_empty_pattern_list_means_no_sparse_core(tmp_path):
    text = MINIMAL + '[sparse_tensor]\npatterns = []\nnonzero_rate = 1.0\n'
    acc = accelerator_models.load(str(_write(tmp_path / "nosparse.toml", text)))
    assert acc.sparse_tensor is None
    assert not acc.supports_nm(2, 4)


# Each case: TOML text, the key path (or other fragment) the error must name.
BAD_FILES = {
    "unknown_top_level_key": (MINIMAL + "clock_mhz = 1410\n", "clock_mhz"),
    "unknown_key_in_table": (MINIMAL.replace("fp16 = 100e12", "fp16 = 100e12\nfp64 = 1e12"),
                             "tensor_flops_per_s.fp64"),
    "unknown_key_in_block_table": (MINIMAL + "max_block_size = 8\n",
                                   "block_sparse.max_block_size"),
    "unknown_table": (MINIMAL + "[memory]\nl2_bytes = 40e6\n", "memory"),
    "unknown_nested_table": (MINIMAL.replace("[block_sparse]", "[block_sparse.extra]\nx = 1\n"
                                             "[block_sparse]"), "block_sparse.extra"),
    "duplicate_key_in_table": (MINIMAL.replace("fp16 = 100e12", "fp16 = 100e12\nfp16 = 2e14"),
                               "tensor_flops_per_s.fp16"),
    "duplicate_top_level_key": (MINIMAL + "", "dram_bandwidth_bytes_per_s"),  # patched below
    "zero_bandwidth": (MINIMAL.replace("= 1e12", "= 0"), "dram_bandwidth_bytes_per_s"),
    "negative_bandwidth": (MINIMAL.replace("= 1e12", "= -1e12"), "dram_bandwidth_bytes_per_s"),
    "string_bandwidth": (MINIMAL.replace("= 1e12", '= "1 TB/s"'), "dram_bandwidth_bytes_per_s"),
    "bool_bandwidth": (MINIMAL.replace("= 1e12", "= true"), "dram_bandwidth_bytes_per_s"),
    "inf_bandwidth": (MINIMAL.replace("= 1e12", "= inf"), "dram_bandwidth_bytes_per_s"),
    "zero_tensor_rate": (MINIMAL.replace("fp16 = 100e12", "fp16 = 0.0"),
                         "tensor_flops_per_s.fp16"),
    "negative_vector_rate": (MINIMAL.replace("fp32 = 10e12", "fp32 = -10e12"),
                             "vector_flops_per_s.fp32"),
    "nonzero_rate_above_one": (MINIMAL + '[sparse_tensor]\npatterns = ["2:4"]\n'
                               "nonzero_rate = 1.5\n", "sparse_tensor.nonzero_rate"),
    "nonzero_rate_zero": (MINIMAL + '[sparse_tensor]\npatterns = ["2:4"]\nnonzero_rate = 0\n',
                          "sparse_tensor.nonzero_rate"),
    "pattern_n_above_m": (MINIMAL + '[sparse_tensor]\npatterns = ["4:2"]\nnonzero_rate = 1.0\n',
                          "sparse_tensor.patterns"),
    "pattern_n_equals_m": (MINIMAL + '[sparse_tensor]\npatterns = ["2:2"]\n'
                           "nonzero_rate = 1.0\n", "sparse_tensor.patterns"),
    "pattern_zero_n": (MINIMAL + '[sparse_tensor]\npatterns = ["0:4"]\nnonzero_rate = 1.0\n',
                       "sparse_tensor.patterns"),
    "pattern_not_a_list": (MINIMAL + '[sparse_tensor]\npatterns = "2:4"\nnonzero_rate = 1.0\n',
                           "sparse_tensor.patterns"),
    "pattern_garbage": (MINIMAL + '[sparse_tensor]\npatterns = ["2/4"]\nnonzero_rate = 1.0\n',
                        "sparse_tensor.patterns"),
    "min_block_size_zero": (MINIMAL.replace("min_block_size = 1", "min_block_size = 0"),
                            "block_sparse.min_block_size"),
    "min_block_size_65": (MINIMAL.replace("min_block_size = 1", "min_block_size = 65"),
                          "block_sparse.min_block_size"),
    "min_block_size_float": (MINIMAL.replace("min_block_size = 1", "min_block_size = 4.0"),
                             "block_sparse.min_block_size"),
    "sm_count_zero": (MINIMAL + "sm_count = 0\n", "sm_count"),
    "sm_count_fraction": (MINIMAL.replace("sources", "sm_count = 1.5\nsources"), "sm_count"),
    "sm_count_bool": (MINIMAL.replace("sources", "sm_count = true\nsources"), "sm_count"),
    "sm_count_string": (MINIMAL.replace("sources", 'sm_count = "108"\nsources'), "sm_count"),
    "negative_l2": (MINIMAL.replace("sources", "l2_bytes = -41943040\nsources"), "l2_bytes"),
    "zero_smem": (MINIMAL.replace("sources", "shared_memory_per_sm_bytes = 0\nsources"),
                  "shared_memory_per_sm_bytes"),
    "negative_launch_overhead": (MINIMAL.replace("sources", "kernel_launch_overhead_s = -5e-6\n"
                                                 "sources"), "kernel_launch_overhead_s"),
    "string_launch_overhead": (MINIMAL.replace("sources", 'kernel_launch_overhead_s = "5us"\n'
                                               "sources"), "kernel_launch_overhead_s"),
    "supported_not_bool": (MINIMAL.replace("supported = true", 'supported = "yes"'),
                           "block_sparse.supported"),
    "sparse_only_patterns": (MINIMAL + '[sparse_tensor]\npatterns = ["2:4"]\n',
                             "sparse_tensor.nonzero_rate"),
    "sparse_only_rate": (MINIMAL + "[sparse_tensor]\nnonzero_rate = 1.0\n",
                         "sparse_tensor.patterns"),
    "missing_dram_bandwidth": (MINIMAL.replace("dram_bandwidth_bytes_per_s = 1e12\n", ""),
                               "dram_bandwidth_bytes_per_s"),
    "missing_block_sparse": (MINIMAL.split("[block_sparse]")[0], "block_sparse.supported"),
    "no_tensor_rates": (MINIMAL.replace("[tensor_flops_per_s]\nfp16 = 100e12\n", ""),
                        "tensor_flops_per_s"),
    "no_vector_rates": (MINIMAL.replace("[vector_flops_per_s]\nfp32 = 10e12\n", ""),
                        "vector_flops_per_s"),
    "unverified_not_a_field": (MINIMAL.replace('sources = ["test"]',
                                               'sources = ["test"]\nunverified = ["clock"]'),
                               "clock"),
    "sources_not_strings": (MINIMAL.replace('sources = ["test"]', "sources = [1, 2]"),
                            "sources"),
    "malformed_toml": (MINIMAL + "dram_bandwidth_bytes_per_s 2e12\n", "malformed TOML"),
}
BAD_FILES["duplicate_top_level_key"] = (MINIMAL.replace(
    "dram_bandwidth_bytes_per_s = 1e12",
    "dram_bandwidth_bytes_per_s = 1e12\ndram_bandwidth_bytes_per_s = 2e12"),
    "dram_bandwidth_bytes_per_s")


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_file_is_a_spec_error_naming_file_and_key(tmp_path, case):
    text, fragment = BAD_FILES[case]
    path = _write(tmp_path / f"bad_{case}.toml", text)
    with pytest.raises(SpecError) as info:
        accelerator_models.load(str(path))
    message = str(info.value)
    assert str(path) in message, message
    assert fragment in message, message
    assert "\n" not in message


def test_file_on_chip_fields_load_and_zero_launch_overhead_is_allowed(tmp_path):
    text = MINIMAL.replace("sources", "sm_count = 4\nshared_memory_per_sm_bytes = 1024\n"
                                      "l2_bytes = 1e6\nkernel_launch_overhead_s = 0\nsources")
    acc = accelerator_models.load(str(_write(tmp_path / "chip.toml", text)))
    assert (acc.sm_count, acc.shared_memory_per_sm_bytes, acc.l2_bytes) == (4, 1024.0, 1e6)
    assert acc.kernel_launch_overhead_s == 0.0
    assert acc.on_chip_bytes("smem") == 4096.0


def test_a_derived_gpu_inherits_and_overrides_on_chip_fields(tmp_path):
    spec = _write(tmp_path / "bigl2.toml", 'extends = "h100"\nl2_bytes = 104857600\n')
    acc = accelerator_models.load(str(spec))
    assert acc.l2_bytes == 100 * MIB
    assert acc.sm_count == 132 and acc.shared_memory_per_sm_bytes == 228 * KIB


def test_duplicate_key_error_says_duplicate(tmp_path):
    text, _ = BAD_FILES["duplicate_key_in_table"]
    path = _write(tmp_path / "dup.toml", text)
    with pytest.raises(SpecError, match=r"duplicate key 'tensor_flops_per_s\.fp16'"):
        accelerator_models.load(str(path))


def test_bad_value_in_a_child_file_names_the_child(tmp_path):
    child = _write(tmp_path / "child.toml", 'extends = "a100"\n[sparse_tensor]\n'
                                            "nonzero_rate = 2.0\n")
    with pytest.raises(SpecError) as info:
        accelerator_models.load(str(child))
    assert "child.toml" in str(info.value)
    assert "sparse_tensor.nonzero_rate" in str(info.value)


def test_missing_file_is_a_spec_error(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(SpecError, match="nope.toml"):
        accelerator_models.load(str(path))


# --- every field moves some output (acceptance criterion) -------------------------------------


def _field(acc: Accelerator, path: str):
    head, _, tail = path.partition(".")
    if head in ("tensor_flops_per_s", "vector_flops_per_s"):
        return getattr(acc, head).get(tail)
    if head == "sparse_tensor":
        if acc.sparse_tensor is None:
            return None
        return getattr(acc.sparse_tensor, tail)
    if head == "block_sparse":
        return getattr(acc.block_sparse, tail)
    return getattr(acc, path)


def _big_trace() -> Trace:
    """One large prunable linear layer (4096 x 4096 over 128 tokens a sample) followed by a
    vector-heavy op: compute-bound on the tensor cores at batch 64 even at 1:4."""
    def op(name, kind, m, k, n, weight, inp, out, vflops, prunable, producers):
        return {"name": name, "kind": kind, "m": m, "k": k, "n": n, "groups": 1,
                "weight_elems": weight, "input_elems": inp, "output_elems": out,
                "vector_flops": float(vflops), "prunable": prunable, "producers": producers}

    tokens, width = 128, 4096
    act = tokens * width
    records = [
        op("fc", "linear", width, width, tokens, width * width, act, act, 0, True, ["input"]),
        op("act", "activation", 0, 0, 0, 0, act, act, 2000 * act, False, ["fc"]),
    ]
    return Trace.from_records("big_linear", [tokens, width], records, {"source": "test"})


BIG = _big_trace()

# field -> (base hardware, base overrides, perturbation, format, batch, scope, numerics)
# The perturbation changes only that field; the settings are those under which it matters.
MOVES = {
    "dram_bandwidth_bytes_per_s":
        ("a100", [], "dram_bandwidth_bytes_per_s=0.5e12", "2:4", 1, "gemm", dse.Numerics()),
    "tensor_flops_per_s.fp16":
        ("a100", [], "tensor_flops_per_s.fp16=156e12", "2:4", 64, "gemm", dse.Numerics()),
    "tensor_flops_per_s.bf16":
        ("a100", [], "tensor_flops_per_s.bf16=156e12", "block4@87.5%", 64, "gemm",
         dse.Numerics(dtype="bf16")),
    "tensor_flops_per_s.tf32":
        ("a100", [], "tensor_flops_per_s.tf32=78e12", "2:4", 64, "gemm",
         dse.Numerics(dtype="tf32")),
    "tensor_flops_per_s.fp8":
        ("h100", [], "tensor_flops_per_s.fp8=989.4e12", "2:4", 64, "gemm",
         dse.Numerics(dtype="fp8")),
    "tensor_flops_per_s.int8":
        ("a100", [], "tensor_flops_per_s.int8=312e12", "1:4", 64, "gemm",
         dse.Numerics(dtype="int8")),
    "vector_flops_per_s.fp32":
        ("a100", [], "vector_flops_per_s.fp32=9.75e12", "unstructured@0.9", 64, "gemm",
         dse.Numerics()),
    "vector_flops_per_s.fp16":
        ("a100", [], "vector_flops_per_s.fp16=39e12", "2:4", 1, "all",
         dse.Numerics(vector_dtype="fp16")),
    "vector_flops_per_s.bf16":
        ("a100", ["vector_flops_per_s.bf16=78e12"], "vector_flops_per_s.bf16=39e12",
         "unstructured@0.9", 64, "gemm", dse.Numerics(csr_dtype="bf16")),
    "sparse_tensor.patterns":
        ("a100", [], "sparse_tensor.patterns=2:4,1:4", "1:4", 64, "gemm", dse.Numerics()),
    "sparse_tensor.nonzero_rate":
        ("a100", [], "sparse_tensor.nonzero_rate=0.5", "2:4", 64, "gemm", dse.Numerics()),
    "block_sparse.supported":
        ("a100", [], "block_sparse.supported=false", "block4@87.5%", 1, "gemm", dse.Numerics()),
    "block_sparse.min_block_size":
        ("a100", [], "block_sparse.min_block_size=8", "block4@87.5%", 1, "gemm",
         dse.Numerics()),
}


# The on-chip sizes and the launch overhead move the simulator's outputs (dse.sim.simulate), not the
# roofline evaluator's; a test that each moves a simulated latency comes with the simulator.
SIMULATOR_FIELDS = {"sm_count", "shared_memory_per_sm_bytes", "l2_bytes",
                    "kernel_launch_overhead_s"}
# The energy, power and capacity fields move dse.roofline.energy's and memory's outputs and no
# latency: tests/test_energy.py and tests/test_memory.py hold each to that.
# The cache levels move only warm bounds (dse.roofline.memory_time); tests/test_bound.py holds
# each to that.
NOT_LATENCY_FIELDS = SIMULATOR_FIELDS | set(ENERGY_FIELDS) | set(accelerator_models.CACHE_FIELDS)


def test_every_field_has_a_moves_case():
    assert set(MOVES) == set(FIELDS) - NOT_LATENCY_FIELDS


@pytest.mark.parametrize("path", [p for p in FIELDS if p not in NOT_LATENCY_FIELDS])
def test_every_field_moves_some_output(path):
    assert path in MOVES, f"no evaluation setting known under which {path} matters"
    hw, base_overrides, perturbation, fmt, batch, scope, numerics = MOVES[path]
    assert perturbation.partition("=")[0] == path
    base = accelerator_models.load(hw, base_overrides)
    perturbed = accelerator_models.load(hw, [*base_overrides, perturbation])
    # The perturbation changed exactly this field.
    assert _field(base, path) != _field(perturbed, path)
    for other in FIELDS:
        if other != path:
            assert _field(base, other) == _field(perturbed, other), other

    def latency(acc):
        table = dse.evaluate(BIG, acc, [fmt], [batch], fusion="unfused", scope=scope,
                             numerics=numerics)
        row = table[table["format"] != "dense"]
        assert len(row) == 1
        value = float(row["latency_s"].iloc[0])
        assert math.isfinite(value) and value > 0
        return value

    before, after = latency(base), latency(perturbed)
    assert not math.isclose(before, after, rel_tol=1e-6), (path, before, after)


@pytest.mark.parametrize("override", ["sm_count=1", "shared_memory_per_sm_bytes=1024",
                                      "l2_bytes=1024", "kernel_launch_overhead_s=1e-3"])
def test_the_roofline_evaluator_ignores_the_simulator_fields(override):
    assert override.partition("=")[0] in SIMULATOR_FIELDS

    def table(acc):
        return dse.evaluate(BIG, acc, ["2:4", "unstructured@0.9"], [1, 64],
                            fusion="unfused", scope="all").drop(columns="hardware")

    base = accelerator_models.load("a100")
    changed = accelerator_models.load("a100", [override])
    assert table(base).equals(table(changed))


def test_slower_rates_never_speed_things_up():
    """The perturbations above all make hardware weaker; latency may only grow."""
    for path, (hw, base_overrides, perturbation, fmt, batch, scope, numerics) in MOVES.items():
        base = accelerator_models.load(hw, base_overrides)
        perturbed = accelerator_models.load(hw, [*base_overrides, perturbation])
        if path == "sparse_tensor.patterns":  # adding a pattern makes it stronger
            base, perturbed = perturbed, base
        lat = [float(dse.evaluate(BIG, a, [fmt], [batch], fusion="unfused", scope=scope,
                                  numerics=numerics).query("format != 'dense'")["latency_s"]
                     .iloc[0]) for a in (base, perturbed)]
        assert lat[1] > lat[0], path
