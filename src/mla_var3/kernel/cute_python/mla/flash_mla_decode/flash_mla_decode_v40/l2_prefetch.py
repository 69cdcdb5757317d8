"""v40: pull a tile's cache pages into L2 ahead of their TMA boxes (`cp.async.bulk.prefetch.L2`).

A page of the paged cache is `page_size` contiguous rows of 576 bf16 (18 KB at page 16, 72 KB at
64), so one bulk prefetch per page fetches it whole, whatever its place in the cache: 4
instructions for a 64-key tile at page 16, against the 36 TMA boxes that later copy it into shared
memory. v36's timeline and ncu source counters at page 16 (devlog v40) show the math warps waiting
for each tile's first chunk, i.e. the two-stage ring exposes the DRAM latency of every refill;
boxes that hit L2 instead shorten that wait without any more shared memory.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.experimental.primitives import cp_async_bulk_prefetch


@cute.jit
def prefetch_pages(kv: cute.Tensor, ids: cute.Tensor, n_pages: cutlass.Int32,
                   pages_per_tile: cutlass.Constexpr[int], page_bytes: cutlass.Constexpr[int]):
    """One elected lane issues an L2 bulk prefetch of each of the tile's first `n_pages` pages
    (`ids`: their page ids, as read from the block table; pages past the sequence are never
    touched: their ids are poison). `kv` is the cache [pages, page_size, 576] bf16 in global
    memory; the offset is 64-bit (a cache may pass 2^31 elements)."""
    page_elems = page_bytes // 2
    with cute.arch.elect_one():
        for j in cutlass.range_constexpr(pages_per_tile):
            if j < n_pages:
                cp_async_bulk_prefetch(kv.iterator + cutlass.Int64(ids[j]) * page_elems, page_bytes)
