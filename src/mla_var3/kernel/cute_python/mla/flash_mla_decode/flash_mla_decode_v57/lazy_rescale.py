"""Online softmax with a lazily moved reference max (v19, unchanged since): O is rescaled only when a tile's max
beats the reference by more than 2^RESCALE_THRESHOLD, and a warp skips the multiply when none of its
rows needs it.

Why: in the seesaw each math thread holds 128 floats of O (2 rows x 64 columns) and multiplied all
of them by the correction 2^(m_old - m_new) twice per pair of tiles (once for each tile's
statistics): 256 FMULs per thread per pair, more than the softmax of the thread's own 32 scores. After
the first tiles of a split the running max almost never moves by much, so most of those multiplies
are by 1 or nearly 1. Keeping the old reference max while the new one exceeds it by at most
RESCALE_THRESHOLD (log2 units) makes the correction exactly 1 then; P = 2^(s - m_ref) is then at
most 2^RESCALE_THRESHOLD = 256, harmless in bf16 P and fp32 O / l. The final lse = m_ref + log2 l is
exact whatever m_ref is, as long as both warpgroups use the same m_ref for a row, which the seesaw's
statistics exchange (x_max / x_scale) already guarantees: the owner of a tile decides and
publishes, the other warpgroup follows.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

from mla_var3.kernel.cute_python.common.online_softmax import scale_rows

F32 = cutlass.Float32
RESCALE_THRESHOLD = 8.0       # log2 units: the reference max moves when a tile's max beats it by > 8 (x256)


@cute.jit
def exp_against_lazy_max(s_rc: cute.Tensor, row_max: cute.Tensor, row_sum: cute.Tensor,
                         tile_max: cute.Tensor, scale: cute.Tensor, scale_log2: F32,
                         raw: cutlass.Constexpr):
    """common/online_softmax.exp_against_new_max with a lazy reference max: m_ref = max(m, tile_max)
    only if that exceeds m by more than RESCALE_THRESHOLD (or m is -inf), else m_ref = m and the
    correction `scale` is exactly 1. P = exp2(s - m_ref) in place; l = l * scale + row sum of P.
    v57: with `raw` the scores are unscaled (short_rowmax.py) and P = exp2(s * scale_log2 - m_ref),
    one FFMA per score where v46 had an FMUL in the row-max step and an FADD here."""
    n_rows = cute.size(s_rc, mode=[0])
    n_cols = cute.size(s_rc, mode=[1])
    for r in cutlass.range_constexpr(n_rows):
        m_old = row_max[r]
        m_hi = cute.arch.fmax(m_old, tile_max[r])
        m_ref = m_old
        if m_hi - m_old > F32(RESCALE_THRESHOLD):          # -inf old: +inf > 8; both -inf: NaN, kept
            m_ref = m_hi
        m_off = m_ref if m_ref != -F32.inf else F32(0.0)   # no -inf - (-inf)
        corr = cute.math.exp2(m_old - m_off, fastmath=True)
        row_max[r] = m_ref
        scale[r] = corr
        psum = F32(0.0)
        for j in cutlass.range_constexpr(n_cols):
            x = s_rc[r, j] * scale_log2 - m_off if cutlass.const_expr(raw) else s_rc[r, j] - m_off
            p = cute.math.exp2(x, fastmath=True)
            s_rc[r, j] = p
            psum += p
        row_sum[r] = row_sum[r] * corr + psum


@cute.jit
def scale_rows_unless_one(o_rc: cute.Tensor, scale: cute.Tensor):
    """common/online_softmax.scale_rows, skipped (warp-uniformly) when every row of the warp has
    scale exactly 1."""
    need = scale[0] != F32(1.0)
    for r in cutlass.range_constexpr(1, cute.size(scale)):
        need = need | (scale[r] != F32(1.0))
    if cute.arch.vote_any_sync(need):
        scale_rows(o_rc, scale)

