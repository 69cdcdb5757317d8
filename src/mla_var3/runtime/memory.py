"""Refuse a problem that cannot fit before allocating anything for it.

A problem kind may say how many bytes one call's inputs and outputs take while they are made
(`Problem.footprint_bytes()`; None = unknown). The harness compares that with the free memory
of the device it is about to use, so b=4096 x 1M-token sequences is one line naming both
numbers instead of a 10 TB allocation that crashes deep inside torch.
"""
from __future__ import annotations

from mla_var3.errors import ProblemError


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} PB"


def free_bytes(device: str) -> int | None:
    """Free memory of `device` ("cuda" or "cpu"); None when it cannot be read."""
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            return None
        return int(torch.cuda.mem_get_info()[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def require_fits(problem, device: str, sets: int = 1) -> None:
    """Raise ProblemError when `sets` copies of the problem's inputs and outputs cannot fit."""
    need = getattr(problem, "footprint_bytes", lambda: None)()
    if need is None:
        return
    free = free_bytes(device)
    if free is not None and need * sets > free:
        raise ProblemError(f"{problem.key()}: needs ~{human_bytes(need * sets)} for its inputs and outputs, "
                           f"{device} has {human_bytes(free)} free")
