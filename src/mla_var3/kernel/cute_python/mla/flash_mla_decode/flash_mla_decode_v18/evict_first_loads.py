"""The paged K/V tile loads of common/paged_kv with an L2 eviction hint on every TMA box (v18).

Why: every latent-cache line a decode CTA loads is read by the CTAs of one split at about the same
time (its row blocks) and never again in the call, yet it enters L2 with normal priority and
pushes out what is reused: Q, the block table, the split partials the combine reads back. TMA
takes a 64-bit L2 cache-policy word (PTX `.L2::cache_hint`); EVICT_FIRST is CUTLASS's
`CacheHintSm90::EVICT_FIRST` (cute/arch/copy_sm90_desc.hpp), the hint FlashMLA's SM90 decode puts
on its K loads. Same boxes, same barriers, same order as `read_page_ids` + `load_tile_from_ids`;
only the copy carries the policy. Moves to common/ if it holds up.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

from mla_var3.kernel.cute_python.common.paged_kv import read_page_ids

EVICT_FIRST = 0x12F0000000000000      # L2 cache-policy word: evict first (CUTLASS CacheHintSm90)


@cute.jit
def load_tile_from_ids_evict_first(tma: cute.CopyAtom, src: cute.Tensor, dst: cute.Tensor, bars, ids: cute.Tensor,
                                   n_pages: cutlass.Int32, stage: cutlass.Int32, n_chunks: cutlass.Constexpr[int],
                                   pages_per_tile: cutlass.Constexpr[int], box_bytes: cutlass.Constexpr[int]):
    """common/paged_kv.load_tile_from_ids with EVICT_FIRST on each box. Called by one whole warp."""
    policy = cutlass.Int64(EVICT_FIRST)
    for c in cutlass.range_constexpr(n_chunks):
        bar = bars + stage * n_chunks + c
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(bar, box_bytes * n_pages)
        for j in cutlass.range_constexpr(pages_per_tile):
            if j < n_pages:
                cute.copy(tma, src[(None, (0, c, ids[j]))],
                          dst[(None, (stage * n_chunks + c) * pages_per_tile + j)], tma_bar_ptr=bar,
                          cache_policy=policy)


@cute.jit
def load_tile_pages_evict_first(tma: cute.CopyAtom, src: cute.Tensor, dst: cute.Tensor, bars,
                                block_table: cute.Tensor, bidx: cutlass.Int32, tile: cutlass.Int32,
                                seqlen: cutlass.Int32, stage: cutlass.Int32, n_chunks: cutlass.Constexpr[int],
                                pages_per_tile: cutlass.Constexpr[int], page_size: cutlass.Constexpr[int],
                                box_bytes: cutlass.Constexpr[int]):
    """common/paged_kv.load_tile_pages (page ids read here) with EVICT_FIRST on each box."""
    ids = cute.make_rmem_tensor((pages_per_tile,), cutlass.Int32)
    n_pages = read_page_ids(block_table, bidx, tile, seqlen, ids, pages_per_tile, page_size)
    load_tile_from_ids_evict_first(tma, src, dst, bars, ids, n_pages, stage, n_chunks, pages_per_tile, box_bytes)
