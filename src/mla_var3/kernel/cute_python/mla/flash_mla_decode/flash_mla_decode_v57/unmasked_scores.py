"""The scale-and-row-max step without the causal / end-of-sequence mask (v21), for tiles every row
of the CTA sees whole.

Why: common/online_softmax.scale_mask_rowmax compares every score's key index with its row's limit
and selects -inf past it: per thread and tile 32 compares and 32 selects, half of the step's
instructions. Only the tiles at the end of a sequence can hold a masked key (keys
seqlen - s_q + 1 .. seqlen - 1 for the first query token, and the rows past seqlen in a partial
last tile), so the pairs of tiles before them skip it.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

from mla_var3.kernel.cute_python.common.reduce import quad_allreduce_max

F32 = cutlass.Float32


@cute.jit
def scale_rowmax(s_rc: cute.Tensor, scale_log2: F32, tile_max: cute.Tensor):
    """common/online_softmax.scale_mask_rowmax for a tile with no masked key: scale this
    warpgroup's scores in place and put each row's max (quad-reduced) in tile_max."""
    n_rows = cute.size(s_rc, mode=[0])
    n_cols = cute.size(s_rc, mode=[1])
    for r in cutlass.range_constexpr(n_rows):
        m = F32(-F32.inf)
        for j in cutlass.range_constexpr(n_cols):
            v = s_rc[r, j] * scale_log2
            s_rc[r, j] = v
            m = cute.arch.fmax(m, v)
        tile_max[r] = quad_allreduce_max(m)
