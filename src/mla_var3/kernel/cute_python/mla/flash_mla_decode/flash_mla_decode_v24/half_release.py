"""v24: a KV stage is released in two halves. The left half (chunks 0-3: the value columns 0-255
that only warpgroup 0's P V reads) is free once warpgroup 0 is done with the tile; the right half
(chunks 4-7, read by warpgroup 1's P V, and chunk 8, which holds the tile's P that both P V read)
once both are. The producer refills each half as soon as it is free, so the next tile's first
boxes - the ones its QK^T waits for first - no longer wait for the slower warpgroup."""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

LEFT_CHUNKS = 4                 # chunks 0..3 = value columns 0..255 (warpgroup 0's half of O)


@cute.jit
def load_chunks_from_ids(tma: cute.CopyAtom, src: cute.Tensor, dst: cute.Tensor, bars, ids: cute.Tensor,
                         n_pages: cutlass.Int32, stage: cutlass.Int32, c_lo: cutlass.Constexpr[int],
                         c_hi: cutlass.Constexpr[int], n_chunks: cutlass.Constexpr[int],
                         pages_per_tile: cutlass.Constexpr[int], box_bytes: cutlass.Constexpr[int]):
    """common/paged_kv.py's `load_tile_from_ids` for chunks c_lo .. c_hi - 1 only: arm each chunk's
    mbarrier for the pages that hold keys and issue one box per such page. One whole warp calls it."""
    for c in cutlass.range_constexpr(c_lo, c_hi):
        bar = bars + stage * n_chunks + c
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(bar, box_bytes * n_pages)
        for j in cutlass.range_constexpr(pages_per_tile):
            if j < n_pages:
                cute.copy(tma, src[(None, (0, c, ids[j]))],
                          dst[(None, (stage * n_chunks + c) * pages_per_tile + j)], tma_bar_ptr=bar)
