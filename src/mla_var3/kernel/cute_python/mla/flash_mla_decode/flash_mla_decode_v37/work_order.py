"""The work-descriptor kernel of flash_mla_decode_v37: v14's longest-first split order
(common/split_order.py, unchanged as phase 1), then each CTA's whole prologue input in one 64-byte row.

v32's split CTA started with a chain of dependent global loads: its order entry, then its
sequence's length (to know its tile range and whether it runs at all), then the page ids of its
first two tiles, and only then the Q and K/V TMA loads. Under a full memory system each link costs
a loaded round trip (v32's timeline: 1.7 us from the CTA's start until its first tiles are issued,
2.4 us until Q lands). This kernel writes, for the p-th CTA in launch order, the row
work[p] = (item, seqlen, the page ids of the item's first tile, those of its second tile, 0 ...):
WORK_INTS int32, so the split CTA issues all its loads of the row at once and its Q and first tiles
after one round trip.
- phase 1 (v14's): the order, as items z * slots + y (-1 for an idle slot), into work[p, 0];
- phase 2, after a CTA barrier (global writes of a block are visible to the block after it): each
  thread takes slots p = tid, tid + 1024, ...: reads the item back, its sequence's length and the
  page ids of its first two tiles (only pages that hold keys: the block table holds poison past a
  sequence), and writes them beside it. An idle slot gets length 0.
One CTA of 1024 threads; b <= 4096 (checked on the host).
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

from mla_var3.kernel.cute_python.common.paged_kv import tile_pages
from mla_var3.kernel.cute_python.common.split_order import MAX_B, THREADS, TILE, SplitOrderKernel, host_order

I32 = cutlass.Int32
WORK_INTS = 16                  # int32 per work row (64 bytes): item, seqlen, 4 + 4 page ids, padding
TILE_IDS = 4                    # page ids per tile in a row (64 // 16: the smallest page)
USED_INTS = 2 + 2 * TILE_IDS    # what the kernel writes of a row; the rest is padding it never touches
__all__ = ["WorkOrderKernel", "host_order", "host_work_row"]


class WorkOrderKernel(SplitOrderKernel):
    """Constexpr config: `chunk`, the KV tiles per split (the split kernel's), and the cache's page size.
    Phase 1 is common/split_order.py's `write_order` on the rows' first column."""

    def __init__(self, chunk: int, page_size: int):
        super().__init__(chunk)
        if page_size not in (16, 32, 64):
            raise ValueError(f"page_size: expected 16, 32 or 64, got {page_size}")
        self.page_size = page_size
        self.pages_per_tile = TILE // page_size

    @cute.jit
    def __call__(self, seqlens: cute.Tensor, block_table: cute.Tensor, work: cute.Tensor, stream):
        self.storage = self.order_storage()
        self.work_order_kernel(seqlens, block_table, work).launch(
            grid=(1, 1, 1), block=(THREADS, 1, 1), stream=stream)

    @cute.kernel
    def work_order_kernel(self, seqlens: cute.Tensor, block_table: cute.Tensor, work: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        b = seqlens.shape[0]
        slots = work.shape[1]
        self.write_order(seqlens, work[None, None, 0], tidx)     # phase 1: the items
        cute.arch.sync_threads()

        # ---- phase 2: each slot's length and first two tiles' page ids beside its item
        for p in cutlass.range(tidx, b * slots, THREADS, unroll=1):
            item = work[p // slots, p % slots, 0]
            seqlen = I32(0)
            ids = cute.make_rmem_tensor((2 * TILE_IDS,), I32)
            for j in cutlass.range_constexpr(2 * TILE_IDS):
                ids[j] = 0
            if item >= 0:
                i = item // slots
                seqlen = seqlens[i]
                n_tiles = (seqlen + TILE - 1) // TILE
                t_begin = (item % slots) * self.chunk
                t_end = cutlass.min(n_tiles, t_begin + self.chunk)
                for f in cutlass.range_constexpr(2):
                    t = t_begin + f
                    if t < t_end:
                        n_pages = tile_pages(t, seqlen, self.pages_per_tile, self.page_size)
                        for j in cutlass.range_constexpr(self.pages_per_tile):
                            if j < n_pages:
                                ids[f * TILE_IDS + j] = block_table[i, t * self.pages_per_tile + j]
            work[p // slots, p % slots, 1] = seqlen
            for j in cutlass.range_constexpr(2 * TILE_IDS):
                work[p // slots, p % slots, 2 + j] = ids[j]


def fake_arguments(k: WorkOrderKernel) -> tuple:
    """Fake tensors in __call__'s order: seqlens [b] i32, block_table [b, max_blocks] i32,
    work [b, slots, WORK_INTS] i32."""
    b = cute.sym_int(symbol="b")
    max_blocks = cute.sym_int(symbol="max_blocks")
    slots = cute.sym_int(symbol="split_slots")
    seqlens = make_fake_compact_tensor(I32, (b,), assumed_align=4)
    block_table = make_fake_compact_tensor(I32, (b, max_blocks), stride_order=(1, 0), assumed_align=4)
    work = make_fake_compact_tensor(I32, (b, slots, WORK_INTS), stride_order=(2, 1, 0), assumed_align=16)
    return seqlens, block_table, work, make_fake_stream(use_tvm_ffi_env_stream=True)


def launch_arguments(cache_seqlens, block_table, ws) -> tuple:
    if cache_seqlens.shape[0] > MAX_B:
        raise ValueError(f"cache_seqlens: the work-order kernel takes b <= {MAX_B}, got {cache_seqlens.shape[0]}")
    return cache_seqlens, block_table, ws["work"]


def host_work_row(item: int, lens: list[int], block_table: list[list[int]], chunk: int, slots: int,
                  page_size: int) -> list[int]:
    """The first USED_INTS ints of the work row the kernel writes for `item`, in plain Python
    (the row's padding is never written)."""
    row = [item] + [0] * (USED_INTS - 1)
    if item < 0:
        return row
    i, s = divmod(item, slots)
    seqlen = lens[i]
    row[1] = seqlen
    n_tiles, per_tile = -(-seqlen // TILE), TILE // page_size
    t_begin = s * chunk
    for f in range(2):
        t = t_begin + f
        if t < min(n_tiles, t_begin + chunk):
            n_pages = min(per_tile, -(-(seqlen - t * TILE) // page_size))
            for j in range(n_pages):
                row[2 + f * TILE_IDS + j] = block_table[i][t * per_tile + j]
    return row
