"""v26/v27: a tile's TMA boxes issued by one or two producer warps per stage.

Warp 8 + s refilled stage s alone in v11-v25: 9 chunks x 64 / page_size boxes (36 at page 16),
each a `cute.copy` that the DSL wraps in an elected-lane issue, one after another, between the
stage's empty wait and the last box leaving. The idle producer warps 10-11 now take the
second half of each stage's chunks: warp 8 + s + 2 h issues chunks HALVES[h] of stage s.
v27 makes the number of parts a compile-time knob (`load_part`): 2 at pages 16/32, 1 at page 64.
v29 (`load_part_pair`): with a row-block pair in a cluster, each CTA issues only the boxes of its
cluster rank, multicast to both, and arms its barriers for all of them.
v44 (`whole`): a tile whose pages all hold keys (every tile but a sequence's last) is issued by an
unpredicated copy of the loop, so a chunk's boxes are one basic block; v36's loop put every box
behind its own `j < n_pages` branch, one serial chain of descriptor load, uniform-register
moves and UTMALDG per box (SASS at page 16).
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

N_CHUNKS = 9
SPLIT_CHUNK = 5                     # chunks 0-4 (warps 8, 9: the first QK^T steps) and 5-8 (warps 10, 11)
HALVES = ((0, SPLIT_CHUNK), (SPLIT_CHUNK, N_CHUNKS))


@cute.jit
def load_chunks_from_ids(tma: cute.CopyAtom, src: cute.Tensor, dst: cute.Tensor, bars, ids: cute.Tensor,
                         n_pages: cutlass.Int32, stage: cutlass.Int32, c_lo: cutlass.Constexpr[int],
                         c_hi: cutlass.Constexpr[int], n_chunks: cutlass.Constexpr[int],
                         pages_per_tile: cutlass.Constexpr[int], box_bytes: cutlass.Constexpr[int],
                         whole: cutlass.Constexpr[bool] = False):
    """common/paged_kv.load_tile_from_ids for chunks [c_lo, c_hi) only: arm each chunk's mbarrier
    for the pages that hold keys and issue one box per such page. Called by one whole warp. v44:
    with `whole`, a tile whose pages all hold keys takes `issue_chunks_all` (no per-box branch)."""
    if cutlass.const_expr(whole and pages_per_tile > 1):
        if n_pages == pages_per_tile:
            issue_chunks_all(tma, src, dst, bars, ids, stage, c_lo, c_hi, n_chunks, pages_per_tile, box_bytes)
        else:
            issue_chunks_some(tma, src, dst, bars, ids, n_pages, stage, c_lo, c_hi, n_chunks, pages_per_tile,
                              box_bytes)
    else:
        issue_chunks_some(tma, src, dst, bars, ids, n_pages, stage, c_lo, c_hi, n_chunks, pages_per_tile,
                          box_bytes)


@cute.jit
def issue_chunks_some(tma: cute.CopyAtom, src: cute.Tensor, dst: cute.Tensor, bars, ids: cute.Tensor,
                      n_pages: cutlass.Int32, stage: cutlass.Int32, c_lo: cutlass.Constexpr[int],
                      c_hi: cutlass.Constexpr[int], n_chunks: cutlass.Constexpr[int],
                      pages_per_tile: cutlass.Constexpr[int], box_bytes: cutlass.Constexpr[int]):
    """v36's loop: each box behind its page's `j < n_pages` branch."""
    for c in cutlass.range_constexpr(c_lo, c_hi):
        bar = bars + stage * n_chunks + c
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(bar, box_bytes * n_pages)
        for j in cutlass.range_constexpr(pages_per_tile):
            if j < n_pages:
                cute.copy(tma, src[(None, (0, c, ids[j]))],
                          dst[(None, (stage * n_chunks + c) * pages_per_tile + j)], tma_bar_ptr=bar)


@cute.jit
def issue_chunks_all(tma: cute.CopyAtom, src: cute.Tensor, dst: cute.Tensor, bars, ids: cute.Tensor,
                     stage: cutlass.Int32, c_lo: cutlass.Constexpr[int], c_hi: cutlass.Constexpr[int],
                     n_chunks: cutlass.Constexpr[int], pages_per_tile: cutlass.Constexpr[int],
                     box_bytes: cutlass.Constexpr[int]):
    """v44: every page of the tile holds keys: each chunk's boxes with no branch between them."""
    for c in cutlass.range_constexpr(c_lo, c_hi):
        bar = bars + stage * n_chunks + c
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(bar, box_bytes * pages_per_tile)
        for j in cutlass.range_constexpr(pages_per_tile):
            cute.copy(tma, src[(None, (0, c, ids[j]))],
                      dst[(None, (stage * n_chunks + c) * pages_per_tile + j)], tma_bar_ptr=bar)


@cute.jit
def load_half(tma: cute.CopyAtom, src: cute.Tensor, dst: cute.Tensor, bars, ids: cute.Tensor,
              n_pages: cutlass.Int32, stage: cutlass.Int32, half: cutlass.Int32, n_chunks: cutlass.Constexpr[int],
              pages_per_tile: cutlass.Constexpr[int], box_bytes: cutlass.Constexpr[int],
              whole: cutlass.Constexpr[bool] = False):
    """This warp's half (warp-uniform `half`, 0 or 1) of a tile's chunks."""
    if half == 0:
        load_chunks_from_ids(tma, src, dst, bars, ids, n_pages, stage, HALVES[0][0], HALVES[0][1],
                             n_chunks, pages_per_tile, box_bytes, whole)
    else:
        load_chunks_from_ids(tma, src, dst, bars, ids, n_pages, stage, HALVES[1][0], HALVES[1][1],
                             n_chunks, pages_per_tile, box_bytes, whole)


@cute.jit
def load_part(tma: cute.CopyAtom, src: cute.Tensor, dst: cute.Tensor, bars, ids: cute.Tensor,
              n_pages: cutlass.Int32, stage: cutlass.Int32, part: cutlass.Int32, parts: cutlass.Constexpr[int],
              n_chunks: cutlass.Constexpr[int], pages_per_tile: cutlass.Constexpr[int],
              box_bytes: cutlass.Constexpr[int], whole: cutlass.Constexpr[bool] = False):
    """v27: part `part` (warp-uniform) of a tile's chunks when they are split `parts` ways: all of
    them with one part (v23's refill), HALVES[part] with two (v26's). v44: `whole`."""
    if cutlass.const_expr(parts == 1):
        load_chunks_from_ids(tma, src, dst, bars, ids, n_pages, stage, 0, n_chunks, n_chunks, pages_per_tile,
                             box_bytes, whole)
    else:
        load_half(tma, src, dst, bars, ids, n_pages, stage, part, n_chunks, pages_per_tile, box_bytes, whole)


PAIR_MASK = 0b11                    # v29: both CTAs of a row-block pair (cluster ranks 0 and 1)


@cute.jit
def load_chunks_pair(tma: cute.CopyAtom, src: cute.Tensor, dst: cute.Tensor, bars, ids: cute.Tensor,
                     n_pages: cutlass.Int32, stage: cutlass.Int32, rank: cutlass.Int32, c_lo: cutlass.Constexpr[int],
                     c_hi: cutlass.Constexpr[int], n_chunks: cutlass.Constexpr[int],
                     pages_per_tile: cutlass.Constexpr[int], box_bytes: cutlass.Constexpr[int]):
    """v29: chunks [c_lo, c_hi) of a tile for a row-block pair. Each chunk's mbarrier is armed for
    all of its pages' bytes (this CTA receives every box of the chunk, half of them from the peer),
    and this CTA issues box (c, j) only where (c * pages_per_tile + j) % 2 is its cluster rank,
    with the multicast mask of both CTAs. Called by one whole warp."""
    for c in cutlass.range_constexpr(c_lo, c_hi):
        bar = bars + stage * n_chunks + c
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(bar, box_bytes * n_pages)
        for j in cutlass.range_constexpr(pages_per_tile):
            if j < n_pages:
                if rank == (c * pages_per_tile + j) % 2:
                    cute.copy(tma, src[(None, (0, c, ids[j]))],
                              dst[(None, (stage * n_chunks + c) * pages_per_tile + j)], tma_bar_ptr=bar,
                              mcast_mask=cutlass.Int16(PAIR_MASK))


@cute.jit
def load_part_pair(tma: cute.CopyAtom, src: cute.Tensor, dst: cute.Tensor, bars, ids: cute.Tensor,
                   n_pages: cutlass.Int32, stage: cutlass.Int32, part: cutlass.Int32, parts: cutlass.Constexpr[int],
                   rank: cutlass.Int32, n_chunks: cutlass.Constexpr[int], pages_per_tile: cutlass.Constexpr[int],
                   box_bytes: cutlass.Constexpr[int]):
    """v29: `load_part` for a row-block pair (the same chunk ranges per part, `load_chunks_pair`)."""
    if cutlass.const_expr(parts == 1):
        load_chunks_pair(tma, src, dst, bars, ids, n_pages, stage, rank, 0, n_chunks, n_chunks, pages_per_tile,
                         box_bytes)
    else:
        if part == 0:
            load_chunks_pair(tma, src, dst, bars, ids, n_pages, stage, rank, HALVES[0][0], HALVES[0][1],
                             n_chunks, pages_per_tile, box_bytes)
        else:
            load_chunks_pair(tma, src, dst, bars, ids, n_pages, stage, rank, HALVES[1][0], HALVES[1][1],
                             n_chunks, pages_per_tile, box_bytes)
