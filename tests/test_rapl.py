"""RAPL energy on a sample of sysfs's powercap tree (no machine here has RAPL counters)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dse.measure.rapl import RaplError, available, measure_energy, read_zones

SAMPLE = Path(__file__).parent / "data" / "powercap"


@pytest.fixture
def powercap(tmp_path) -> Path:
    root = tmp_path / "powercap"
    shutil.copytree(SAMPLE, root)
    return root


def _advance(root: Path, zone: str, to_uj: int) -> None:
    (root / zone / "energy_uj").write_text(f"{to_uj}\n")


def test_zones_and_energy_with_a_counter_wrap(powercap):
    assert [z.name for z in read_zones(powercap)] == ["package-0", "core (intel-rapl:0:0)"]
    ticks = iter([10.0, 12.0])

    def work():  # the package counter wraps (max 262143328850 uJ); the cores use 3.5 J
        _advance(powercap, "intel-rapl:0", 171_150)
        _advance(powercap, "intel-rapl:0:0", 4_500_000)

    reading = measure_energy(work, powercap, clock=lambda: next(ticks))
    assert reading.seconds == 2.0
    assert reading.joules["package-0"] == pytest.approx((262143328850 - 262143000000
                                                          + 171_150) * 1e-6)
    assert reading.joules["core (intel-rapl:0:0)"] == pytest.approx(3.5)
    assert reading.watts["core (intel-rapl:0:0)"] == pytest.approx(1.75)


def test_no_powercap_is_one_clear_error(tmp_path):
    assert not available(tmp_path / "nothing")
    with pytest.raises(RaplError, match="no powercap folder"):
        read_zones(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RaplError, match="no RAPL zone"):
        read_zones(tmp_path / "empty")

