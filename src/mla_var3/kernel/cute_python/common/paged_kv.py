"""Loading a paged latent cache tile by tile with TMA, shared by CuTe DSL versions.

The cache [pages, 64, 576] is viewed as (64 rows, 576 cols, pages) and cut into 64x64 boxes,
so a page id from the block table is just the TMA coordinate of the rest mode; one tile is
`n_chunks` boxes landing on one mbarrier. Rows past a sequence's end inside its last page are
NaN in the cache: `zero_tail_rows` clears them in shared memory before any wgmma reads them,
since P = 0 is not enough there (0 * NaN = NaN in P V).
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute


@cute.jit
def expect_tile(bar, tile_bytes: cutlass.Constexpr[int]):
    """Arm `bar` for one tile of `tile_bytes` (one elected lane of the calling warp)."""
    with cute.arch.elect_one():
        cute.arch.mbarrier_arrive_and_expect_tx(bar, tile_bytes)


@cute.jit
def load_tile(tma: cute.CopyAtom, src: cute.Tensor, dst: cute.Tensor, bar, coord,
              first_slot: cutlass.Int32, n_chunks: cutlass.Constexpr[int]):
    """Issue the `n_chunks` boxes of one tile: box c of `src` at `(0, c, coord)` into smem slot
    `first_slot + c`, all on `bar`. Called by one whole warp (cute.copy elects its own lane)."""
    for c in cutlass.range_constexpr(n_chunks):
        cute.copy(tma, src[(None, (0, c, coord))], dst[(None, first_slot + c)], tma_bar_ptr=bar)


@cute.jit
def zero_tail_rows(sK: cute.Tensor, tail: cutlass.Int32, stage: cutlass.Int32, tidx: cutlass.Int32,
                   num_threads: cutlass.Constexpr[int], rows: cutlass.Constexpr[int],
                   d: cutlass.Constexpr[int], box: cutlass.Constexpr[int]):
    """Zero rows tail..rows-1 (all d columns) of the K tile in `stage` of sK (chunk (stage, c) at
    index stage * d/box + c), then make the writes visible to the async proxy (wgmma) and
    synchronize the CTA. Every thread of the CTA calls it."""
    _zero_rows_and_fence(sK, tail, stage, tidx, num_threads, rows, d, box)
    cute.arch.sync_threads()


@cute.jit
def _zero_rows_and_fence(sK: cute.Tensor, tail: cutlass.Int32, stage: cutlass.Int32, tid: cutlass.Int32,
                         num_threads: cutlass.Constexpr[int], rows: cutlass.Constexpr[int],
                         d: cutlass.Constexpr[int], box: cutlass.Constexpr[int]):
    """The zeroing both zero_tail_rows* share: `num_threads` callers clear rows tail..rows-1 of
    the tile in `stage` in all d columns, then fence the generic-proxy writes for the async proxy
    (no barrier): `zero_tail_value_rows` over the whole row."""
    zero_tail_value_rows(sK, tail, stage, tid, num_threads, rows, d, box, d // box)


@cute.jit
def load_tile_chunked(tma: cute.CopyAtom, src: cute.Tensor, dst: cute.Tensor, bars, coord,
                      first_slot: cutlass.Int32, n_chunks: cutlass.Constexpr[int],
                      chunk_bytes: cutlass.Constexpr[int]):
    """Like `load_tile`, but box c lands on its own mbarrier `bars + first_slot + c`, so a consumer
    can start on chunk 0 while the rest is in flight. Arms each barrier for `chunk_bytes` (one
    elected lane) and issues the box; called by one whole warp."""
    for c in cutlass.range_constexpr(n_chunks):
        expect_tile(bars + first_slot + c, chunk_bytes)
        cute.copy(tma, src[(None, (0, c, coord))], dst[(None, first_slot + c)], tma_bar_ptr=bars + first_slot + c)


@cute.jit
def zero_tail_rows_named(sK: cute.Tensor, tail: cutlass.Int32, stage: cutlass.Int32, tid: cutlass.Int32,
                         num_threads: cutlass.Constexpr[int], rows: cutlass.Constexpr[int],
                         d: cutlass.Constexpr[int], box: cutlass.Constexpr[int],
                         barrier_id: cutlass.Constexpr[int]):
    """`zero_tail_rows` for a tile only some threads own (e.g. one warpgroup): the `num_threads`
    callers (tid 0..num_threads-1) zero the rows, fence for the async proxy and meet on the named
    barrier `barrier_id` instead of the CTA barrier."""
    _zero_rows_and_fence(sK, tail, stage, tid, num_threads, rows, d, box)
    cute.arch.barrier(barrier_id=barrier_id, number_of_threads=num_threads)


@cute.jit
def zero_tail_value_rows(sK: cute.Tensor, tail: cutlass.Int32, stage: cutlass.Int32, tid: cutlass.Int32,
                         num_threads: cutlass.Constexpr[int], rows: cutlass.Constexpr[int],
                         d_v: cutlass.Constexpr[int], box: cutlass.Constexpr[int],
                         chunks_per_stage: cutlass.Constexpr[int]):
    """Zero rows tail..rows-1 of the K tile in `stage` in its first d_v columns (a stage holds
    chunks_per_stage chunks of `box` columns), then fence the writes for the async proxy. No
    barrier. flash_mla_decode_v12 on zero only the value columns (the rope columns are read by
    QK^T alone, done by then) and let the next publish barrier order them before any P V."""
    n_zero = (rows - tail) * d_v
    for i in cutlass.range(tid, n_zero, num_threads, unroll=1):
        r = tail + i // d_v
        col = i % d_v
        sK[(r, col % box, stage * chunks_per_stage + col // box)] = sK.element_type(0.0)
    cute.arch.fence_proxy("async.shared", space="cta")


@cute.jit
def tile_pages(tile: cutlass.Int32, seqlen: cutlass.Int32, pages_per_tile: cutlass.Constexpr[int],
               page_size: cutlass.Constexpr[int]) -> cutlass.Int32:
    """How many of tile `tile`'s pages hold keys (the rest lie past the sequence)."""
    return cutlass.min(pages_per_tile, (seqlen - tile * (pages_per_tile * page_size) + page_size - 1) // page_size)


@cute.jit
def read_page_ids(block_table: cute.Tensor, bidx: cutlass.Int32, tile: cutlass.Int32, seqlen: cutlass.Int32,
                  ids: cute.Tensor, pages_per_tile: cutlass.Constexpr[int],
                  page_size: cutlass.Constexpr[int]) -> cutlass.Int32:
    """The page ids of tile `tile` of sequence `bidx` into the register tensor `ids`, and how many
    of its pages hold keys (the rest are not read: past the sequence the block table holds a
    poison value). Split from `load_tile_pages` so a producer can issue these dependent global
    loads early, e.g. before it waits for the stage the tile goes to."""
    first_page = tile * pages_per_tile
    n_pages = tile_pages(tile, seqlen, pages_per_tile, page_size)
    for j in cutlass.range_constexpr(pages_per_tile):
        ids[j] = 0
        if j < n_pages:
            ids[j] = block_table[bidx, first_page + j]
    return n_pages


@cute.jit
def load_tile_from_ids(tma: cute.CopyAtom, src: cute.Tensor, dst: cute.Tensor, bars, ids: cute.Tensor,
                       n_pages: cutlass.Int32, stage: cutlass.Int32, n_chunks: cutlass.Constexpr[int],
                       pages_per_tile: cutlass.Constexpr[int], box_bytes: cutlass.Constexpr[int]):
    """`load_tile_pages` with the page ids already read (`read_page_ids`): chunk by chunk, arm the
    chunk's mbarrier for the pages that hold keys and issue one box per such page. Called by one
    whole warp."""
    for c in cutlass.range_constexpr(n_chunks):
        bar = bars + stage * n_chunks + c
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(bar, box_bytes * n_pages)
        for j in cutlass.range_constexpr(pages_per_tile):
            if j < n_pages:
                cute.copy(tma, src[(None, (0, c, ids[j]))],
                          dst[(None, (stage * n_chunks + c) * pages_per_tile + j)], tma_bar_ptr=bar)


@cute.jit
def load_tile_pages(tma: cute.CopyAtom, src: cute.Tensor, dst: cute.Tensor, bars, block_table: cute.Tensor,
                    bidx: cutlass.Int32, tile: cutlass.Int32, seqlen: cutlass.Int32, stage: cutlass.Int32,
                    n_chunks: cutlass.Constexpr[int], pages_per_tile: cutlass.Constexpr[int],
                    page_size: cutlass.Constexpr[int], box_bytes: cutlass.Constexpr[int]):
    """`load_tile_chunked` for caches whose pages are smaller than the 64-key tile: tile `tile` of
    sequence `bidx` is pages_per_tile pages, each its own TMA box (page_size rows x 64 cols) at the
    page id from the block table. Only pages that hold keys (< seqlen) are loaded and counted on
    the chunk's mbarrier, so a block-table entry past the sequence is never read; the tile's rows
    that were not loaded are past seqlen and get zeroed like a tail (zero_tail_rows*).
    `src` is the cache partitioned in (page_size, 64) boxes, `dst` the smem ring in page boxes
    indexed ((stage * n_chunks + chunk) * pages_per_tile + page). Called by one whole warp."""
    ids = cute.make_rmem_tensor((pages_per_tile,), cutlass.Int32)      # page ids, read once per tile
    n_pages = read_page_ids(block_table, bidx, tile, seqlen, ids, pages_per_tile, page_size)
    load_tile_from_ids(tma, src, dst, bars, ids, n_pages, stage, n_chunks, pages_per_tile, box_bytes)
