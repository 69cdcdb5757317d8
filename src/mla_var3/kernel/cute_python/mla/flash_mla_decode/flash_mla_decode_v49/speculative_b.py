"""v49: warpgroup 1 exponentiates tile B before tile A's statistics arrive (`speculative_b`).

Why: in the seesaw (kernel.py's pair loop) WG1 computes P_B against m_B = lazy(max(m_A, rowmax S_B)),
so it waited for WG0's publish of tile A before its softmax, and WG0, having issued P_A V_A, waited
for that whole softmax before its P_B V_B. ncu's source counters on b=128 s_q=2 h_q=128 4096 varlen
(docs/kernels/flash_mla_decode.md, "Where v46's extra cycles go") put 6.8% of v46's warp samples on
that wait, three times FlashMLA's corresponding one.

How: the reference max after a pair is the same in both warpgroups (the exchange guarantees it), so
WG1 can exponentiate S_B against m_spec = lazy(m_prev, rowmax S_B) while WG0 works on tile A. Once A's
max arrives, the lazy update against it gives m_ref; P_B was computed against m_spec, and
exp2(s - m_ref) = exp2(s - m_spec) * 2^(m_spec - m_ref), so a row multiplies its P by that factor,
which is exactly 1 (and skipped, warp-uniformly) when tile A did not move the max: after a split's
first tiles, almost always. The lazy rule only raises the max, and it bounds the factor: at most
2^8 (tile B's max within 8 of m_A), at most 1 otherwise. Rows whose P is all zero (every key
masked) keep factor 1, so no 0 * inf appears.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

from .lazy_rescale import RESCALE_THRESHOLD

F32 = cutlass.Float32


@cute.jit
def lazy_ref(m_old: F32, tile_max: F32):
    """lazy_rescale.exp_against_lazy_max's rule for one row: (m_ref, its offset). m_ref moves to
    max(m_old, tile_max) only past RESCALE_THRESHOLD (or from -inf); the offset is m_ref, or 0 where
    m_ref is -inf (no -inf - (-inf))."""
    m_hi = cute.arch.fmax(m_old, tile_max)
    m_ref = m_old
    if m_hi - m_old > F32(RESCALE_THRESHOLD):          # -inf old: +inf > 8; both -inf: NaN, kept
        m_ref = m_hi
    m_off = m_ref if m_ref != -F32.inf else F32(0.0)
    return m_ref, m_off


@cute.jit
def exp_speculative(s_rc: cute.Tensor, row_max: cute.Tensor, tile_max: cute.Tensor,
                    spec_off: cute.Tensor, psum: cute.Tensor):
    """P = exp2(s - m_off) in place, m_off the offset of m_spec = lazy(row_max, tile_max)
    (lazy_rescale.exp_against_lazy_max's rule); keeps m_off in `spec_off` and the row sums of P in
    `psum`. Leaves row_max and row_sum alone: settle_speculative updates them once m_A is known."""
    n_rows = cute.size(s_rc, mode=[0])
    n_cols = cute.size(s_rc, mode=[1])
    for r in cutlass.range_constexpr(n_rows):
        _, m_off = lazy_ref(row_max[r], tile_max[r])
        spec_off[r] = m_off
        acc = F32(0.0)
        for j in cutlass.range_constexpr(n_cols):
            p = cute.math.exp2(s_rc[r, j] - m_off, fastmath=True)
            s_rc[r, j] = p
            acc += p
        psum[r] = acc


@cute.jit
def settle_speculative(s_rc: cute.Tensor, row_max: cute.Tensor, row_sum: cute.Tensor, tile_max: cute.Tensor,
                       spec_off: cute.Tensor, psum: cute.Tensor, scale: cute.Tensor, fix: cute.Tensor):
    """Tile B's lazy update against row_max = m_A (what exp_against_lazy_max does after the wait):
    m_ref = lazy(m_A, tile_max), scale = 2^(m_A - m_ref), l = l * scale + (row sum of P) * fix,
    and P (exponentiated against spec_off by exp_speculative) multiplied by fix = 2^(spec_off - m_ref's
    offset), skipped when fix is exactly 1 on every row of the warp."""
    n_rows = cute.size(s_rc, mode=[0])
    n_cols = cute.size(s_rc, mode=[1])
    for r in cutlass.range_constexpr(n_rows):
        m_old = row_max[r]
        m_ref, m_off = lazy_ref(m_old, tile_max[r])
        corr = cute.math.exp2(m_old - m_off, fastmath=True)
        f = F32(1.0)                                       # the common case: the same offset
        if spec_off[r] != m_off:
            if psum[r] > F32(0.0):                         # an all-zero P row keeps 1: no 0 * inf
                f = cute.math.exp2(spec_off[r] - m_off, fastmath=True)
        fix[r] = f
        row_max[r] = m_ref
        scale[r] = corr
        row_sum[r] = row_sum[r] * corr + psum[r] * f
    need = fix[0] != F32(1.0)
    for r in cutlass.range_constexpr(1, n_rows):
        need = need | (fix[r] != F32(1.0))
    if cute.arch.vote_any_sync(need):
        for r in cutlass.range_constexpr(n_rows):
            for j in cutlass.range_constexpr(n_cols):
                s_rc[r, j] = s_rc[r, j] * fix[r]
