"""Online softmax over wgmma accumulator fragments (log2 domain), shared by CuTe DSL versions.

Each thread owns `n_rows` rows of a 64-row tile (2 for a wgmma M=64 accumulator) and a quad of
4 lanes shares each row (reduce.py). Scores are scaled into the log2 domain once, so P is
exp2(s - m) and lse = (m + log2 l) * ln 2. A row that has seen no key keeps m = -inf; the
offset then falls back to 0 so no -inf - (-inf) appears, and l stays 0.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

from mla_var3.kernel.cute_python.common.reduce import quad_allreduce_max

F32 = cutlass.Float32


@cute.jit
def masked_softmax_step(s_rc: cute.Tensor, c_rc: cute.Tensor, o_rc: cute.Tensor, row_max: cute.Tensor,
                        row_sum: cute.Tensor, row_lim: cute.Tensor, key0: cutlass.Int32, scale_log2: F32):
    """One KV tile: scale and mask scores in place (columns at or past row_lim - key0 get
    -inf), update the running max, turn scores into P = exp2(s - m), rescale O by the
    correction, and add this lane's part of the row sum (quad-summed once, at the end).

    s_rc, c_rc, o_rc: (rows, cols) views of S, the identity coordinates of S, and O."""
    n_rows = cute.size(s_rc, mode=[0])
    n_cols = cute.size(s_rc, mode=[1])
    n_ocols = cute.size(o_rc, mode=[1])
    for r in cutlass.range_constexpr(n_rows):
        lim = row_lim[r] - key0                       # columns < lim are visible
        m_old = row_max[r]
        m_new = m_old
        for j in cutlass.range_constexpr(n_cols):
            v = s_rc[r, j] * scale_log2
            v = v if c_rc[r, j][1] < lim else -F32.inf
            s_rc[r, j] = v
            m_new = cute.arch.fmax(m_new, v)
        m_new = quad_allreduce_max(m_new)
        m_off = m_new if m_new != -F32.inf else F32(0.0)     # no -inf - (-inf)
        corr = cute.math.exp2(m_old - m_off, fastmath=True)
        row_max[r] = m_new
        psum = F32(0.0)
        for j in cutlass.range_constexpr(n_cols):
            p = cute.math.exp2(s_rc[r, j] - m_off, fastmath=True)
            s_rc[r, j] = p
            psum += p
        row_sum[r] = row_sum[r] * corr + psum
        for j in cutlass.range_constexpr(n_ocols):
            o_rc[r, j] = o_rc[r, j] * corr


@cute.jit
def scale_mask_rowmax(s_rc: cute.Tensor, c_rc: cute.Tensor, row_lim: cute.Tensor, key0: cutlass.Int32,
                      scale_log2: F32, tile_max: cute.Tensor):
    """First half of a step whose tile is shared by two warpgroups (each holds some of its keys):
    scale and mask this warpgroup's scores in place and put each row's max over them (quad-reduced,
    -inf when all are masked) in tile_max. The caller exchanges tile_max with the other warpgroup."""
    n_rows = cute.size(s_rc, mode=[0])
    n_cols = cute.size(s_rc, mode=[1])
    for r in cutlass.range_constexpr(n_rows):
        lim = row_lim[r] - key0
        m = F32(-F32.inf)
        for j in cutlass.range_constexpr(n_cols):
            v = s_rc[r, j] * scale_log2
            v = v if c_rc[r, j][1] < lim else -F32.inf
            s_rc[r, j] = v
            m = cute.arch.fmax(m, v)
        tile_max[r] = quad_allreduce_max(m)


@cute.jit
def exp_and_rescale(s_rc: cute.Tensor, o_rc: cute.Tensor, row_max: cute.Tensor, row_sum: cute.Tensor,
                    tile_max: cute.Tensor):
    """Second half: with tile_max now the max over the whole tile (both warpgroups), update the
    running max, turn this warpgroup's scores into P = exp2(s - m), rescale O by the correction
    and add this lane's part of the row sum (of this warpgroup's keys only)."""
    n_rows = cute.size(s_rc, mode=[0])
    n_cols = cute.size(s_rc, mode=[1])
    n_ocols = cute.size(o_rc, mode=[1])
    for r in cutlass.range_constexpr(n_rows):
        m_old = row_max[r]
        m_new = cute.arch.fmax(m_old, tile_max[r])
        m_off = m_new if m_new != -F32.inf else F32(0.0)     # no -inf - (-inf)
        corr = cute.math.exp2(m_old - m_off, fastmath=True)
        row_max[r] = m_new
        psum = F32(0.0)
        for j in cutlass.range_constexpr(n_cols):
            p = cute.math.exp2(s_rc[r, j] - m_off, fastmath=True)
            s_rc[r, j] = p
            psum += p
        row_sum[r] = row_sum[r] * corr + psum
        for j in cutlass.range_constexpr(n_ocols):
            o_rc[r, j] = o_rc[r, j] * corr


@cute.jit
def exp_against_new_max(s_rc: cute.Tensor, row_max: cute.Tensor, row_sum: cute.Tensor,
                        tile_max: cute.Tensor, scale: cute.Tensor):
    """For a warpgroup that owns a whole tile's scores (the seesaw, v4+): m_new = max(m, tile_max),
    P = exp2(s - m_new) in place, l = l * 2^(m - m_new) + this lane's row sum of P. The O
    correction 2^(m - m_new) goes to `scale` instead of being applied, because in the seesaw the
    O it applies to may live in the other warpgroup (see `scale_rows`)."""
    n_rows = cute.size(s_rc, mode=[0])
    n_cols = cute.size(s_rc, mode=[1])
    for r in cutlass.range_constexpr(n_rows):
        m_old = row_max[r]
        m_new = cute.arch.fmax(m_old, tile_max[r])
        m_off = m_new if m_new != -F32.inf else F32(0.0)     # no -inf - (-inf)
        corr = cute.math.exp2(m_old - m_off, fastmath=True)
        row_max[r] = m_new
        scale[r] = corr
        psum = F32(0.0)
        for j in cutlass.range_constexpr(n_cols):
            p = cute.math.exp2(s_rc[r, j] - m_off, fastmath=True)
            s_rc[r, j] = p
            psum += p
        row_sum[r] = row_sum[r] * corr + psum


@cute.jit
def scale_rows(o_rc: cute.Tensor, scale: cute.Tensor):
    """O[r, :] *= scale[r] for this thread's rows (o_rc: the (rows, cols) view of O)."""
    for r in cutlass.range_constexpr(cute.size(o_rc, mode=[0])):
        for j in cutlass.range_constexpr(cute.size(o_rc, mode=[1])):
            o_rc[r, j] = o_rc[r, j] * scale[r]
