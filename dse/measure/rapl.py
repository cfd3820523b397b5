"""CPU energy from RAPL (Running Average Power Limit) counters, to check dse's energy model
against the machine where the machine allows it.

Linux exposes RAPL under ``/sys/class/powercap``: one folder per zone (``intel-rapl:0`` is a
package, ``intel-rapl:0:0`` its cores; AMD's ``amd-rapl`` zones look the same), each with
``name``, ``energy_uj`` (a counter in microjoules that wraps at ``max_energy_range_uj``). This
project's machines have no such folder (virtual machines rarely pass it through), so the code
is tested on a recorded sample of that tree; on a machine that has one, :func:`measure_energy`
gives the joules a piece of work took per zone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["POWERCAP", "EnergyReading", "RaplError", "available", "measure_energy", "read_zones"]

POWERCAP = Path("/sys/class/powercap")


class RaplError(ValueError):
    """No RAPL counters here, or unreadable ones; the message says which and why."""


@dataclass(frozen=True)
class Zone:
    path: Path
    name: str
    max_uj: int


@dataclass(frozen=True)
class EnergyReading:
    """Joules per zone (``package-0``, ``core``, ...) over ``seconds``; ``watts`` averages."""

    joules: dict[str, float]
    seconds: float

    @property
    def watts(self) -> dict[str, float]:
        return {k: v / self.seconds for k, v in self.joules.items()} if self.seconds else {}


def read_zones(root: Path = POWERCAP) -> list[Zone]:
    """The RAPL zones under ``root`` (top-level packages and their sub-zones)."""
    if not root.is_dir():
        raise RaplError(f"{root}: no powercap folder; RAPL energy cannot be read on this machine "
                        "(common in virtual machines)")
    zones = []
    for folder in sorted(root.glob("*rapl:*")):
        energy = folder / "energy_uj"
        if not energy.exists():
            continue
        try:
            name = (folder / "name").read_text().strip()
            max_uj = int((folder / "max_energy_range_uj").read_text().strip())
            int(energy.read_text().strip())
        except (OSError, ValueError) as exc:
            raise RaplError(f"{energy}: cannot read it ({exc}); reading RAPL needs root on "
                            "recent kernels") from None
        # Sub-zones are named e.g. "core"; the folder names keep them apart.
        label = name if folder.name.count(":") == 1 else f"{name} ({folder.name})"
        zones.append(Zone(folder, label, max_uj))
    if not zones:
        raise RaplError(f"{root}: no RAPL zone (no *rapl:* folder with energy_uj)")
    return zones


def available(root: Path = POWERCAP) -> bool:
    try:
        read_zones(root)
    except RaplError:
        return False
    return True


def _counters(zones: list[Zone]) -> dict[str, int]:
    return {z.name: int((z.path / "energy_uj").read_text().strip()) for z in zones}


def measure_energy(work: Callable[[], object], root: Path = POWERCAP,
                   clock: Callable[[], float] = time.perf_counter) -> EnergyReading:
    """Run ``work`` once and return the energy each zone's counter advanced by, in joules (a
    counter that wrapped during the run is unwrapped once; runs longer than one wrap, minutes
    at full power, need several calls)."""
    zones = read_zones(root)
    before, start = _counters(zones), clock()
    work()
    after, seconds = _counters(zones), clock() - start
    joules = {}
    for z in zones:
        delta = after[z.name] - before[z.name]
        if delta < 0:  # the counter wrapped
            delta += z.max_uj
        joules[z.name] = delta * 1e-6
    return EnergyReading(joules, seconds)
