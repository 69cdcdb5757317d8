"""The SM clock and board power while a plan's timed replay runs, read in process through NVML.

Why: under a long benchmark the H200 reaches its power limit and lowers its SM clock (a bench
run on 2026-12-02 started at 1965 MHz and ended at 1695 MHz, 681 W). A kernel that draws more
power per unit of work then runs at a lower clock than one beside it, so its time ratio in the
benchmark is worse than its ratio in cycles (ncu measures single launches, before the clock
drops). Sampling the clock during each plan's own replays says which of the two a gap is.

Each timed replay also follows NVML's cumulative energy counter, giving the energy one call took
(mJ). At the power cap the board's power is fixed, so the clock a kernel gets is set by how much
energy each unit of its work costs: a kernel that spends more energy per call gets a lower clock,
and the energy ratio says so even where the sampled clock (a reading every ~7 ms) misses
fine-grained throttling. The counter advances in steps (every ~100 ms on the H200), so only
replays spanning two or more of its updates get a reading (`counter_power`).

NVML is called through ctypes on the driver's libnvidia-ml (no Python package needed); where it
is missing (CPU machines) every reading is None and the benchmark runs unchanged.
"""
from __future__ import annotations

import ctypes
import statistics
import time
from dataclasses import dataclass, replace

NVML_CLOCK_SM = 1            # nvmlClockType_t: NVML_CLOCK_SM


class Nvml:
    """One GPU's SM clock (MHz), power draw (W) and total energy (mJ) through NVML; `available`
    False when the library or the device cannot be opened (then every reading is None)."""

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

    def energy_mj(self) -> float | None:
        """Millijoules the GPU used since the driver loaded (NVML's cumulative counter, Volta and
        later); None where the counter cannot be read."""
        if self._lib is None:
            return None
        v = ctypes.c_ulonglong()
        try:
            ok = self._lib.nvmlDeviceGetTotalEnergyConsumption(self._handle, ctypes.byref(v)) == 0
        except AttributeError:                                 # a driver library without the call
            return None
        return float(v.value) if ok else None


@dataclass
class ClockSample:
    """Means over one replay of the readings taken while it ran (None: nothing was read); the
    mean power from the energy counter's updates seen during it (`counter_power`) and, once the
    replay's time per call is known (`with_energy`), the energy per call (mJ)."""
    sm_mhz: float | None
    power_w: float | None
    readings: int
    power_w_energy: float | None = None
    mj_per_call: float | None = None


def sample_while(running, monitor, interval_s: float = 0.002, clock=None) -> ClockSample:
    """Read `monitor` every `interval_s` until `running()` is False (a CUDA event not yet
    reached); at least one reading is taken, so a short replay still gets its clock. Where the
    monitor has an energy counter (`energy_mj`), the time (`clock()`, s; default perf_counter)
    and value of each of its updates seen are kept for `counter_power`. Reading the counter takes
    ~5 ms on the H200 (the clock and power ~0.05 ms), so with it the clock is read every ~7 ms."""
    clock = clock or time.perf_counter
    read_energy = getattr(monitor, "energy_mj", None)
    mhz, watts, updates, last = [], [], [], None
    while True:
        m, w = monitor.sm_mhz(), monitor.power_w()
        if m is not None:
            mhz.append(m)
        if w is not None:
            watts.append(w)
        if read_energy is not None:
            t, e = clock(), read_energy()
            if e is not None and last is not None and e != last:
                updates.append((t, e))
            last = e if e is not None else last
        if not running():
            break
        time.sleep(interval_s)
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    return ClockSample(mean(mhz), mean(watts), max(len(mhz), len(watts)), power_w_energy=counter_power(updates))


def counter_power(updates: list[tuple[float, float]]) -> float | None:
    """Mean power (W) from the energy counter's updates seen during one replay, each (time s,
    counter mJ): the energy between the first and the last over the time between them. The
    counter does not count continuously: on the H200 (driver 580) it advances every ~100 ms by
    the energy of the interval just ended (~70 J at 700 W), so the advance from before a replay to
    after it counts whole intervals, not the replay (a 100 ms replay reads 0, 1 or 2 of them).
    Only intervals that ended inside the replay count; None with fewer than two updates seen (a
    replay shorter than two intervals, ~200 ms: bench --rep_ms 300 or more), or one going back."""
    if len(updates) < 2:
        return None
    (t0, e0), (t1, e1) = updates[0], updates[-1]
    if t1 <= t0 or e1 <= e0:
        return None
    return (e1 - e0) / (t1 - t0) / 1000.0


def with_energy(sample: ClockSample, ms_per_call: float) -> ClockSample:
    """`sample` with its energy per call (mJ): the replay's mean power from the energy counter
    times the time one call took (W x ms = mJ); None where that power was not read."""
    if sample.power_w_energy is None or ms_per_call <= 0:
        return sample
    return replace(sample, mj_per_call=sample.power_w_energy * ms_per_call)


def _sig4(x: float) -> float:
    return float(f"{x:.4g}")


def summarize(samples: list[ClockSample]) -> dict | None:
    """The `clocks_during` field of a bench record: the median over the timed replays of each
    replay's mean SM clock and power, and every replay's clock; `mj_per_call` the median energy
    per call (mJ, 4 significant digits) and `power_w_energy` the median mean power from the
    energy counter (W), over the `energy_replays` replays that got a reading (None, 0 where
    none did; older records lack all three); None when nothing was read.

    `power_w` is NVML's power reading, which lags (about a 1 s average on the H200: with 1 s
    replays of two plans interleaved, a 682 W plan read 620-690 W and a 423 W one 423-510 W,
    each pulled toward the plan before it); `power_w_energy` is each plan's own."""
    mhz = [s.sm_mhz for s in samples if s.sm_mhz is not None]
    watts = [s.power_w for s in samples if s.power_w is not None]
    energy = [s.mj_per_call for s in samples if s.mj_per_call is not None]
    e_watts = [s.power_w_energy for s in samples if s.power_w_energy is not None]
    if not mhz and not watts and not energy:
        return None
    return {"sm_mhz": round(statistics.median(mhz), 1) if mhz else None,
            "power_w": round(statistics.median(watts), 1) if watts else None,
            "sm_mhz_samples": [round(m, 1) for m in mhz],
            "mj_per_call": _sig4(statistics.median(energy)) if energy else None,
            "power_w_energy": round(statistics.median(e_watts), 1) if e_watts else None,
            "energy_replays": len(energy)}


def kcycles(time_us: float, sm_mhz: float | None) -> float | None:
    """Thousands of SM cycles a call took at the clock it ran at: the clock-free comparison."""
    return None if sm_mhz is None else time_us * sm_mhz / 1000.0
