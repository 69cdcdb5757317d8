"""Comparison helpers the problem kinds build their tolerances from (float64 math)."""
from __future__ import annotations

import torch


def special_positions_match(x: torch.Tensor, y: torch.Tensor) -> str:
    """'' when NaN, +inf and -inf sit at the same positions in x and y, else what differs."""
    for name, fn in (("NaN", torch.isnan), ("+inf", torch.isposinf), ("-inf", torch.isneginf)):
        a, b = fn(x), fn(y)
        if not torch.equal(a, b):
            return f"{name} positions differ ({int((a != b).sum())} elements)"
    return ""


def elementwise(x: torch.Tensor, y: torch.Tensor, abs_tol: float, rel_tol: float) -> tuple[bool, float, float]:
    """Each finite element of the reference y passes if |x-y| < abs_tol OR |x-y|/|y| < rel_tol.
    Returns (all passed, max abs error, worst relative error among failures or of the whole)."""
    finite = torch.isfinite(y)
    x, y = x[finite].double(), y[finite].double()
    if x.numel() == 0:
        return True, 0.0, 0.0
    abs_err = (x - y).abs()
    rel_err = abs_err / y.abs().clamp_min(1e-30)
    bad = ~((abs_err < abs_tol) | (rel_err < rel_tol))
    ok = not bool(bad.any())
    worst_rel = float(torch.where(abs_err < abs_tol, 0, rel_err).max()) if ok else float(rel_err[bad].max())
    return ok, float(abs_err.max()), worst_rel


def cosine_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """1 - 2<x,y> / (|x|^2 + |y|^2), in float64 over finite elements."""
    x, y = x.double().nan_to_num(0, 0, 0), y.double().nan_to_num(0, 0, 0)
    denom = (x * x).sum() + (y * y).sum()
    if denom == 0:
        return 0.0
    return float(1 - 2 * (x * y).sum() / denom)


def rel_norm_error(x: torch.Tensor, y: torch.Tensor) -> float:
    """|x - y| / |y| in float64, non-finite elements as 0."""
    num = (x.double() - y.double()).nan_to_num(0).norm()
    den = y.double().nan_to_num(0).norm().clamp_min(1e-30)
    return float(num / den)
