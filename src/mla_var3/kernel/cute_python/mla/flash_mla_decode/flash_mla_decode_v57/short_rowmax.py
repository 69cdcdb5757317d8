"""v57: the row-max step of a tile's scores without the softmax scale, as a tree (`rowmax`).

Why: in v46 the step between a warpgroup's QK^T and its exponentials multiplies each of its 32
scores per thread by the scale (32 FMUL) and folds them into the row max one after another (two
chains of 16 dependent FMNMX, one per row), and only then shuffles across the quad. Warpgroup 0
runs it on the pair's critical chain (QK^T of A -> rowmax -> exponentials -> barrier A), and its
timeline span there is about 3.2x warpgroup 1's for the same SASS (v46 468 / 144 cycles, v54 498 /
149), while warpgroup 1's QK^T wgmmas run. The scale is positive, so max(s) * c = max(s * c) exactly
(rounding is monotonic): the max can read the raw scores and the scale go into the exponent, where
`exp2(s * c - m)` is one FFMA per score (v46: FMUL here, FADD there). fmax is exact, so a tree gives
the same max as the chain in 4 dependent steps instead of 16.

Modes (a compile-time string): "chain" is v46's step (unmasked_scores.scale_rowmax and
common/online_softmax.scale_mask_rowmax, scores scaled in place); "fold" reads raw scores with
v46's chain order; "tree" reads raw scores and reduces pairwise. With "fold" and "tree" the
scores stay unscaled (masked ones -inf) and the exponent step multiplies by the scale
(lazy_rescale.exp_against_lazy_max with `raw`).
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

from mla_var3.kernel.cute_python.common.reduce import quad_allreduce_max

F32 = cutlass.Float32
ROWMAX_MODES = ("tree", "fold", "chain")   # the plan's list too (flash_mla_decode_v57.py: no DSL import there)


def row_max(vals: list, tree: bool):
    """Max of a Python list of traced floats (plain Python: unrolled while tracing): pairwise
    ("tree"), or folded from -inf in order (v46's chain)."""
    if not tree:
        m = F32(-F32.inf)
        for v in vals:
            m = cute.arch.fmax(m, v)
        return m
    while len(vals) > 1:
        nxt = [cute.arch.fmax(vals[i], vals[i + 1]) for i in range(0, len(vals) - 1, 2)]
        if len(vals) % 2:
            nxt.append(vals[-1])
        vals = nxt
    return vals[0]


@cute.jit
def raw_rowmax(s_rc: cute.Tensor, scale_log2: F32, tile_max: cute.Tensor, tree: cutlass.Constexpr):
    """Each row's max over this warpgroup's raw scores of a tile no row masks (quad-reduced), times
    the scale: the log2-domain tile max of v46's `scale_rowmax`, with the scores left unscaled."""
    n_rows = cute.size(s_rc, mode=[0])
    n_cols = cute.size(s_rc, mode=[1])
    for r in cutlass.range_constexpr(n_rows):
        vals = []
        for j in cutlass.range_constexpr(n_cols):
            vals.append(s_rc[r, j])
        tile_max[r] = quad_allreduce_max(row_max(vals, tree)) * scale_log2


@cute.jit
def raw_mask_rowmax(s_rc: cute.Tensor, c_rc: cute.Tensor, row_lim: cute.Tensor, key0: cutlass.Int32,
                    scale_log2: F32, tile_max: cute.Tensor, tree: cutlass.Constexpr):
    """`raw_rowmax` for a tile that may hold keys a row must not see (key index >= its limit):
    those scores become -inf in place (exp2 of -inf * scale - m is 0), as in v46's
    `scale_mask_rowmax`; a row with every key masked gets tile max -inf."""
    n_rows = cute.size(s_rc, mode=[0])
    n_cols = cute.size(s_rc, mode=[1])
    for r in cutlass.range_constexpr(n_rows):
        lim = row_lim[r] - key0
        vals = []
        for j in cutlass.range_constexpr(n_cols):
            v = s_rc[r, j] if c_rc[r, j][1] < lim else -F32.inf
            s_rc[r, j] = v
            vals.append(v)
        tile_max[r] = quad_allreduce_max(row_max(vals, tree)) * scale_log2
