"""v50: the seesaw's tile statistics exchanged before P (`stats_first`), and WG0's re-store of P_A.

Why: in v5-v46 a warpgroup publishes a tile's max, correction and P together, so the partner waits
for the P store (stmatrix, fence) before it can even start its own softmax, and WG1's softmax of B
follows its P_A V_A issue. In v50 barrier A and B carry only the statistics (the max and the
correction, written right after the softmax); P_A and P_B get barriers of their own (BAR_PA,
BAR_PB). WG1 then puts both of its P V against m_B, the max after tile B, with one rescale of its O
half per pair: P_A' = 2^(s_A - m_B) = P_A * 2^(m_A - m_B) = P_A * s_B. WG0 still holds P_A in
float32 (the QK^T accumulator, exponentiated in place), so once it reads s_B it re-stores P_A * s_B
over P_A, in the warps where s_B is not exactly 1 for some row: with the lazy max (lazy_rescale.py)
that is a tile that moved the reference max by more than 2^8, rare after a split's first tiles. In
every other warp the P_A already stored is P_A'. Idea from FlashMLA's sm90 dense decode, which
always rescales and stores P_0 after its partner's statistics (`wg0_scale_rP0`); written here.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import warpgroup

from mla_var3.kernel.cute_python.common.online_softmax import scale_rows

BF16, F32 = cutlass.BFloat16, cutlass.Float32


@cute.jit
def restore_p_against_new_max(s_rc: cute.Tensor, scale: cute.Tensor, r2s: cute.TiledCopy, tRS_acc: cute.Tensor,
                              r_p32: cute.Tensor, r_p: cute.Tensor, tRS_sP: cute.Tensor):
    """WG0, after reading tile B's correction `scale` (s_B per row): P_A := P_A * s_B in shared memory,
    from the float32 P_A still in the accumulator (s_rc / tRS_acc are views of it). Warp-uniform: a
    warp whose rows all have s_B == 1 does nothing. A warp that re-stores first waits for its
    P_A V_A (whose wgmma reads the warp's 16 rows of P_A from the same slot); the others do not
    wait, so WG1's P_A V_A need not follow WG0's. The caller fences the stores for the async proxy
    and then signals P_A. (A wait_group(1) whose pending group count differed between branches made
    ptxas serialize every wgmma of the kernel; this wait inside a warp-uniform branch does not:
    check the SASS's `WARPGROUP.DEPBAR` count after moving any wgmma wait.)"""
    need = scale[0] != F32(1.0)
    for r in cutlass.range_constexpr(1, cute.size(scale)):
        need = need | (scale[r] != F32(1.0))
    if cute.arch.vote_any_sync(need):
        warpgroup.wait_group(0)
        scale_rows(s_rc, scale)
        for v in cutlass.range_constexpr(cute.size(r_p32)):
            r_p32[v] = tRS_acc[v]
        r_p.store(r_p32.load().to(BF16))
        cute.copy(r2s, r_p, tRS_sP)
