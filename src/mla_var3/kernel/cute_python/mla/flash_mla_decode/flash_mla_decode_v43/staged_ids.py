"""v43: a refill's page ids staged in shared memory by cp.async, read after the stage-free wait.

v10-v42 read the next refill's page ids into registers right after issuing a tile's boxes, and
the compiler converts them to uniform registers (`R2UR`, the TMA coordinates need them) at once,
so the producer warp stalls on those global loads before it returns to its stage-free wait (ncu
source counters at page 16: 1.7% of all samples on that `R2UR`, 2.4x page 64's share; at page 16
a 32-byte sector of the block table holds two tiles' ids, so every other refill misses L2). Here
lanes 0..n-1 copy the ids with 4-byte `cp.async` into the warp's slot and nothing waits for them
until the next refill, after its stage-free wait (`cp.async.wait_group 0`, a warp barrier, then
shared-memory loads).
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

from mla_var3.kernel.cute_python.common.paged_kv import tile_pages


@cute.jit
def stage_page_ids(block_table: cute.Tensor, bidx: cutlass.Int32, tile: cutlass.Int32, seqlen: cutlass.Int32,
                   slot: cute.Tensor, pages_per_tile: cutlass.Constexpr[int],
                   page_size: cutlass.Constexpr[int]) -> cutlass.Int32:
    """Start copying tile `tile`'s page ids into `slot` (this warp's pages_per_tile int32 in shared
    memory; lane j copies id j) and return how many of its pages hold keys (computed, not loaded).
    Called by one whole warp; no lane waits here."""
    n_pages = tile_pages(tile, seqlen, pages_per_tile, page_size)
    lane = cute.arch.lane_idx()
    atom = cute.make_copy_atom(cpasync.CopyG2SOp(), cutlass.Int32, num_bits_per_copy=32)
    row = block_table[bidx, None]
    first = tile * pages_per_tile
    for j in cutlass.range_constexpr(pages_per_tile):
        if lane == j and j < n_pages:
            src = cute.make_tensor(row.iterator + (first + j), cute.make_layout(1))
            dst = cute.make_tensor(slot.iterator + j, cute.make_layout(1))
            cute.copy(atom, src, dst)
    cute.arch.cp_async_commit_group()
    return n_pages


@cute.jit
def staged_page_ids(slot: cute.Tensor, ids: cute.Tensor, n_pages: cutlass.Int32,
                    pages_per_tile: cutlass.Constexpr[int]):
    """The ids `stage_page_ids` copied into `slot`, into the register tensor `ids` of every lane
    (each lane's own copies complete, then a warp barrier orders them for the other lanes)."""
    cute.arch.cp_async_wait_group(0)
    cute.arch.sync_warp()
    for j in cutlass.range_constexpr(pages_per_tile):
        ids[j] = 0
        if j < n_pages:
            ids[j] = slot[j]
