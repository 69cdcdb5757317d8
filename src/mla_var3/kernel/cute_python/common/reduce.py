"""Warp-level reductions shared by CuTe DSL versions.

On sm_90a `redux.sync` has no f32 form (CUTEDSL-HOPPER.md pitfall 6), so these are butterfly
shuffles. A "quad" is the 4 consecutive lanes that own one row of a wgmma accumulator.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute


def quad_allreduce_max(x: cutlass.Float32) -> cutlass.Float32:
    """Max over the 4 lanes of a quad (lane ^ 2, lane ^ 1); every lane gets the result."""
    return cute.arch.warp_reduction_max(x, threads_in_group=4)


def quad_allreduce_sum(x: cutlass.Float32) -> cutlass.Float32:
    """Sum over the 4 lanes of a quad; every lane gets the result."""
    return cute.arch.warp_reduction_sum(x, threads_in_group=4)
