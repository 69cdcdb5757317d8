"""Roofline math, in one place: FLOPs and bytes over a time, against the device's ceilings.

% of roofline = the time the roofline allows (max of FLOPs/peak and bytes/bandwidth) over the
time measured: 100% means the kernel runs at its ceiling, whichever bound applies.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from mla_var3.runtime.devices import DeviceSpec


@dataclass(frozen=True)
class RooflinePoint:
    flops: int
    bytes: int
    time_us: float
    tflops: float            # achieved
    gbps: float              # achieved, algorithmic bytes
    intensity: float         # FLOP / byte
    ridge: float             # FLOP / byte where the bound changes (measured ceilings)
    bound: str               # "memory" | "compute"
    floor_us: float          # the roofline's time at the measured ceilings
    pct_measured: float      # floor_us / time_us * 100 (measured ceilings)
    pct_datasheet: float     # the same against the datasheet peaks

    def to_dict(self) -> dict:
        return asdict(self)


def floor_us(flops: int, nbytes: int, tflops: float, gbps: float) -> float:
    """The least time the roofline allows, in microseconds."""
    return max(flops / (tflops * 1e12), nbytes / (gbps * 1e9)) * 1e6


def roofline(flops: int, nbytes: int, time_us: float, device: DeviceSpec) -> RooflinePoint:
    if time_us <= 0:
        raise ValueError(f"time_us: expected > 0, got {time_us}")
    peak_m, bw_m = device.ceilings(measured=True)
    peak_d, bw_d = device.ceilings(measured=False)
    intensity = flops / nbytes
    ridge = peak_m * 1e12 / (bw_m * 1e9)
    fl_m = floor_us(flops, nbytes, peak_m, bw_m)
    fl_d = floor_us(flops, nbytes, peak_d, bw_d)
    return RooflinePoint(
        flops=flops, bytes=nbytes, time_us=time_us,
        tflops=flops / (time_us * 1e-6) / 1e12, gbps=nbytes / (time_us * 1e-6) / 1e9,
        intensity=intensity, ridge=ridge, bound="memory" if intensity < ridge else "compute",
        floor_us=fl_m, pct_measured=100.0 * fl_m / time_us, pct_datasheet=100.0 * fl_d / time_us)
