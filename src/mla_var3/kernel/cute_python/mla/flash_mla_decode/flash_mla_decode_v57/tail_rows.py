"""v46: a partial last tile's value rows past the sequence zeroed 16 bytes per store (`wide_tail_zero`).

Why the rows are zeroed at all (v13): the cache past a sequence's length holds anything, NaN
included, and P V multiplies those rows by P = 0: 0 * NaN = NaN. So the last tile's value columns
in rows tail..63 must be zero in shared memory before any P V reads them.

v13-v44 wrote those zeros one bf16 element at a time through the swizzled view
(common/paged_kv.py's `zero_tail_value_rows`): per element a div/mod by 512, the swizzled address
and a 2-byte store, up to (64 - tail) * 512 / 128 = 252 iterations per thread. v44's timeline on
b=128 s_q=1 h_q=128 seqlen 4096 varlen put a sequence's last tile at 9 us in the publish step that
waits for those stores (a one-tile CTA: 15.5 us in all) against about 1.8 us per tile elsewhere.

Each 64-column chunk of a tile lies in shared memory as 64 rows of 128 bytes: the 128-byte swizzle
permutes the 16-byte units inside a row and never moves a row. Rows tail..63 of a chunk are then
one contiguous byte range whatever the swizzle, and an unswizzled view of the same bytes can zero
them in whole 16-byte units: (64 - tail) * 8 units per chunk, at most 4 per thread per chunk.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

VEC = 8             # bf16 per 16-byte store


def flat_chunks(ptr, slots: int, rows: int, box: int) -> cute.Tensor:
    """The K ring's bytes as (slot, row, col) bf16 with no swizzle: slot = stage * 9 + chunk, a
    row's 128 bytes at slot * rows * box + row * box. Columns inside a row are permuted by the
    swizzle, so this view is right only for whole rows (which is all `zero_rows_from` writes)."""
    return cute.make_tensor(ptr, cute.make_layout((slots, rows, box), stride=(rows * box, box, 1)))


@cute.jit
def zero_rows_from(sK_flat: cute.Tensor, tail: cutlass.Int32, stage: cutlass.Int32, tid: cutlass.Int32,
                   num_threads: cutlass.Constexpr[int], rows: cutlass.Constexpr[int],
                   box: cutlass.Constexpr[int], v_chunks: cutlass.Constexpr[int],
                   chunks_per_stage: cutlass.Constexpr[int]):
    """Zero rows tail..rows-1 of the value chunks 0..v_chunks-1 of `stage`, one 16-byte store per
    (row, 16-byte unit), the units spread over `num_threads` threads; then fence the writes for the
    async proxy (wgmma reads them). No barrier: as v13's, the next publish barrier orders them
    before any P V."""
    units = box // VEC                                  # 16-byte units per row (8)
    zero = cute.make_rmem_tensor((VEC,), sK_flat.element_type)
    zero.fill(0.0)
    n = (rows - tail) * units
    for c in cutlass.range_constexpr(v_chunks):
        for i in cutlass.range(tid, n, num_threads, unroll=1):
            r = tail + i // units
            u = i % units
            cute.autovec_copy(zero, cute.local_tile(sK_flat[stage * chunks_per_stage + c, r, None], (VEC,), (u,)))
    cute.arch.fence_proxy("async.shared", space="cta")
