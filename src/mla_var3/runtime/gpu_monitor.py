"""The SM clock and board power while a plan's timed replay runs, read in process through NVML.

Why: under a long benchmark the H200 reaches its power limit and lowers its SM clock (a bench
run on 2026-12-02 started at 1965 MHz and ended at 1695 MHz, 681 W). A kernel that draws more
power per unit of work then runs at a lower clock than one beside it, so its time ratio in the
benchmark is worse than its ratio in cycles (ncu measures single launches, before the clock
drops). Sampling the clock during each plan's own replays says which of the two a gap is.

NVML is called through ctypes on the driver's libnvidia-ml (no Python package needed); where it
is missing (CPU machines) every reading is None and the benchmark runs unchanged.
"""
from __future__ import annotations

import ctypes
import statistics
import time
from dataclasses import dataclass

NVML_CLOCK_SM = 1            # nvmlClockType_t: NVML_CLOCK_SM


class Nvml:
    """One GPU's SM clock (MHz) and power draw (W) through NVML; `available` False when the
    library or the device cannot be opened (then both readings are None)."""

    def __init__(self, index: int = 0, lib_name: str = "libnvidia-ml.so.1"):
        self._lib = self._handle = None
        try:
            lib = ctypes.CDLL(lib_name)
            if lib.nvmlInit_v2() != 0:
                return
            handle = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle)) != 0:
                return
            self._lib, self._handle = lib, handle
        except (OSError, AttributeError):
            pass

    @property
    def available(self) -> bool:
        return self._lib is not None

    def sm_mhz(self) -> float | None:
        if self._lib is None:
            return None
        v = ctypes.c_uint()
        ok = self._lib.nvmlDeviceGetClockInfo(self._handle, ctypes.c_int(NVML_CLOCK_SM), ctypes.byref(v)) == 0
        return float(v.value) if ok else None

    def power_w(self) -> float | None:
        if self._lib is None:
            return None
        v = ctypes.c_uint()                                    # milliwatts
        ok = self._lib.nvmlDeviceGetPowerUsage(self._handle, ctypes.byref(v)) == 0
        return v.value / 1000.0 if ok else None


@dataclass
class ClockSample:
    """Means over one replay of the readings taken while it ran (None: nothing was read)."""
    sm_mhz: float | None
    power_w: float | None
    readings: int


def sample_while(running, monitor, interval_s: float = 0.002) -> ClockSample:
    """Read `monitor` every `interval_s` until `running()` is False (a CUDA event not yet
    reached); at least one reading is taken, so a short replay still gets its clock."""
    mhz, watts = [], []
    while True:
        m, w = monitor.sm_mhz(), monitor.power_w()
        if m is not None:
            mhz.append(m)
        if w is not None:
            watts.append(w)
        if not running():
            break
        time.sleep(interval_s)
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    return ClockSample(mean(mhz), mean(watts), max(len(mhz), len(watts)))


def summarize(samples: list[ClockSample]) -> dict | None:
    """The `clocks_during` field of a bench record: the median over the timed replays of each
    replay's mean SM clock and power, and every replay's clock; None when nothing was read."""
    mhz = [s.sm_mhz for s in samples if s.sm_mhz is not None]
    watts = [s.power_w for s in samples if s.power_w is not None]
    if not mhz and not watts:
        return None
    return {"sm_mhz": round(statistics.median(mhz), 1) if mhz else None,
            "power_w": round(statistics.median(watts), 1) if watts else None,
            "sm_mhz_samples": [round(m, 1) for m in mhz]}


def kcycles(time_us: float, sm_mhz: float | None) -> float | None:
    """Thousands of SM cycles a call took at the clock it ran at: the clock-free comparison."""
    return None if sm_mhz is None else time_us * sm_mhz / 1000.0
