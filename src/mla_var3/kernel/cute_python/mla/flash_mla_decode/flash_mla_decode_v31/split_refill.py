"""v26/v27: a tile's TMA boxes issued by one or two producer warps per stage.

Warp 8 + s refilled stage s alone in v11-v25: 9 chunks x 64 / page_size boxes (36 at page 16),
each a `cute.copy` that the DSL wraps in an elected-lane issue, one after another, between the
stage's empty wait and the last box leaving. The idle producer warps 10-11 now take the
second half of each stage's chunks: warp 8 + s + 2 h issues chunks HALVES[h] of stage s.
v27 makes the number of parts a compile-time knob (`load_part`): 2 at pages 16/32, 1 at page 64.
v29: with a row-block pair in a cluster, each CTA issues only the boxes of its cluster rank,
multicast to both, and arms its barriers for all of them (v29/v30 had it in `load_chunks_pair` /
`load_part_pair`, twins of the functions below; v31 folds it in as the compile-time `pair` flag).
v31 (`load_chunks_cp_async`): part 1's last `async_chunks` chunks are copied by the warp's 32
lanes with 16-byte cp.async instead of TMA boxes; each lane's cp.async.mbarrier.arrive.noinc
completes the chunk's barrier (initialized with 32 arrivals) when its copies have landed.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

N_CHUNKS = 9
BOX = 64                            # columns per chunk (one 128-byte swizzle row)
SPLIT_CHUNK = 5                     # chunks 0-4 (warps 8, 9: the first QK^T steps) and 5-8 (warps 10, 11)
HALVES = ((0, SPLIT_CHUNK), (SPLIT_CHUNK, N_CHUNKS))
PAIR_MASK = 0b11                    # v29: both CTAs of a row-block pair (cluster ranks 0 and 1)


@cute.jit
def load_chunks_from_ids(tma: cute.CopyAtom, src: cute.Tensor, dst: cute.Tensor, bars, ids: cute.Tensor,
                         n_pages: cutlass.Int32, stage: cutlass.Int32, c_lo: cutlass.Constexpr[int],
                         c_hi: cutlass.Constexpr[int], n_chunks: cutlass.Constexpr[int],
                         pages_per_tile: cutlass.Constexpr[int], box_bytes: cutlass.Constexpr[int],
                         rank: cutlass.Int32, pair: cutlass.Constexpr[bool]):
    """common/paged_kv.load_tile_from_ids for chunks [c_lo, c_hi) only: arm each chunk's mbarrier
    for the pages that hold keys and issue one box per such page. With `pair` (v29) the barrier is
    still armed for all of the chunk's bytes (the peer's boxes land here too), but this CTA issues
    box (c, j) only where (c * pages_per_tile + j) % 2 is its cluster `rank`, multicast to both
    CTAs. Called by one whole warp."""
    for c in cutlass.range_constexpr(c_lo, c_hi):
        bar = bars + stage * n_chunks + c
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(bar, box_bytes * n_pages)
        for j in cutlass.range_constexpr(pages_per_tile):
            if j < n_pages:
                if cutlass.const_expr(pair):
                    if rank == (c * pages_per_tile + j) % 2:
                        cute.copy(tma, src[(None, (0, c, ids[j]))],
                                  dst[(None, (stage * n_chunks + c) * pages_per_tile + j)], tma_bar_ptr=bar,
                                  mcast_mask=cutlass.Int16(PAIR_MASK))
                else:
                    cute.copy(tma, src[(None, (0, c, ids[j]))],
                              dst[(None, (stage * n_chunks + c) * pages_per_tile + j)], tma_bar_ptr=bar)


@cute.jit
def load_chunks_cp_async(g2s: cute.TiledCopy, kv: cute.Tensor, dst: cute.Tensor, bars, ids: cute.Tensor,
                         n_pages: cutlass.Int32, stage: cutlass.Int32, c_lo: cutlass.Constexpr[int],
                         c_hi: cutlass.Constexpr[int], n_chunks: cutlass.Constexpr[int],
                         pages_per_tile: cutlass.Constexpr[int], page_size: cutlass.Constexpr[int]):
    """v31: chunks [c_lo, c_hi) of a tile by cp.async, one whole warp: each page's page_size x 64
    block of chunk c goes from the cache page `kv[ids[j]]` into the same swizzled page-box slot the
    TMA would fill (`dst`: sKp, (page_size, 64, (stage * 9 + c) * pages_per_tile + j)); then every
    lane arrives on the chunk's barrier once its own copies so far have landed (noinc: the barrier
    counts the 32 lanes). Pages past `n_pages` (past the sequence) are not copied, as with TMA."""
    thr = g2s.get_slice(cute.arch.lane_idx())
    for c in cutlass.range_constexpr(c_lo, c_hi):
        for j in cutlass.range_constexpr(pages_per_tile):
            if j < n_pages:
                src = cute.local_tile(kv[ids[j], None, None], (page_size, BOX), (0, c))
                cute.copy(g2s, thr.partition_S(src),
                          thr.partition_D(dst[None, None, (stage * n_chunks + c) * pages_per_tile + j]))
        cute.arch.cp_async_mbarrier_arrive_noinc(bars + stage * n_chunks + c)


@cute.jit
def load_part(tma: cute.CopyAtom, src: cute.Tensor, dst: cute.Tensor, bars, ids: cute.Tensor,
              n_pages: cutlass.Int32, stage: cutlass.Int32, part: cutlass.Int32, parts: cutlass.Constexpr[int],
              n_chunks: cutlass.Constexpr[int], pages_per_tile: cutlass.Constexpr[int],
              box_bytes: cutlass.Constexpr[int], g2s: cute.TiledCopy, kv: cute.Tensor, sdst: cute.Tensor,
              async_chunks: cutlass.Constexpr[int], page_size: cutlass.Constexpr[int], rank: cutlass.Int32,
              pair: cutlass.Constexpr[bool]):
    """v27: part `part` (warp-uniform) of a tile's chunks when they are split `parts` ways: all of
    them with one part (v23's refill), HALVES[part] with two (v26's); v29: a pair's share of each
    (`pair`). v31: with two parts, part 1's last `async_chunks` chunks go by cp.async
    (`load_chunks_cp_async`, into `sdst` from `kv`; never with a pair, whose boxes are multicast)."""
    if cutlass.const_expr(parts == 1):
        load_chunks_from_ids(tma, src, dst, bars, ids, n_pages, stage, 0, n_chunks, n_chunks, pages_per_tile,
                             box_bytes, rank, pair)
    else:
        if part == 0:
            load_chunks_from_ids(tma, src, dst, bars, ids, n_pages, stage, HALVES[0][0], HALVES[0][1],
                                 n_chunks, pages_per_tile, box_bytes, rank, pair)
        else:
            load_chunks_from_ids(tma, src, dst, bars, ids, n_pages, stage, HALVES[1][0], n_chunks - async_chunks,
                                 n_chunks, pages_per_tile, box_bytes, rank, pair)
            if cutlass.const_expr(async_chunks > 0):
                load_chunks_cp_async(g2s, kv, sdst, bars, ids, n_pages, stage, n_chunks - async_chunks, n_chunks,
                                     n_chunks, pages_per_tile, page_size)
