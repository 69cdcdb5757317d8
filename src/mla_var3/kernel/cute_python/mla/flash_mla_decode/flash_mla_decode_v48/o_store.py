"""v48: a one-split CTA's O leaves through the TMA unit (`tma_store_o`).

v9-v46 stage O (bf16) in the dead K ring one 2-byte element per store into padded rows (128 stores
per thread), meet at a barrier, then every math thread copies 16-byte row chunks to global memory
(16 shared loads and 16 global stores each): 2.1 us of a CTA's 5.9 us fixed cost in v46's
timeline. Here each warpgroup puts its four 64-column chunks into K ring slots with stmatrix, the
store P already uses (v20), through the score accumulator, which is dead by the epilogue; one
thread then issues eight 64 x 64 TMA stores and waits only until the TMA unit has read them.

Why the chunk copy is a plain slice: a warpgroup's wgmma accumulator of N = 256 columns is four
N = 64 accumulators side by side: a thread holds the same rows and, in each 64-column block, the
same columns as in an N = 64 accumulator (tests/test_tma_store_o.py checks this on the layouts).
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

O_CHUNKS_PER_WG = 4          # 64-column chunks of O per math warpgroup (256 of the 512 value columns)


@cute.jit
def o_chunk_to_scores(o_rc: cute.Tensor, s_rc: cute.Tensor, j: cutlass.Constexpr[int]):
    """Columns [64 j, 64 j + 64) of this warpgroup's O (rows x cols view of the N = 256 accumulator)
    into the N = 64 score accumulator's rows x cols view, element for element."""
    n = cute.size(s_rc, mode=[1])
    for r in cutlass.range_constexpr(cute.size(s_rc, mode=[0])):
        for k in cutlass.range_constexpr(n):
            s_rc[r, k] = o_rc[r, j * n + k]


@cute.jit
def store_o_boxes(tma_o: cute.CopyAtom, o_tma: cute.Tensor, sK: cute.Tensor, rb: cutlass.Int32,
                  bidx: cutlass.Int32, n_chunks: cutlass.Constexpr[int], block_m: cutlass.Constexpr[int],
                  box: cutlass.Constexpr[int]):
    """One thread: K ring slots 0..n_chunks-1 -> O's row block rb of sequence bidx, column chunk c
    from slot c; commit, and wait until the TMA unit has read the slots (the CTA may then exit)."""
    tOsO, tOgO = cpasync.tma_partition(tma_o, 0, cute.make_layout(1), cute.group_modes(sK, 0, 2),
                                       cute.zipped_divide(o_tma, (block_m, box)))
    for c in cutlass.range_constexpr(n_chunks):
        cute.copy(tma_o, tOsO[(None, c)], tOgO[(None, (rb, c, bidx))])
    cute.arch.cp_async_bulk_commit_group()
    cute.arch.cp_async_bulk_wait_group(0, read=True)
