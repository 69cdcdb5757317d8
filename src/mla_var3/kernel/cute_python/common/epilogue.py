"""Writing an output tile out of shared memory, shared by CuTe DSL versions.

A wgmma accumulator fragment stored straight to global memory touches 8 rows x 16 bytes per warp
instruction; staged through shared memory (padded rows, conflict-free fragment stores) the tile
can leave in 16-byte row chunks, 512 contiguous bytes per warp instruction
(docs/knowledge/languages/cute-dsl/optimizations/coalesced-epilogue-through-smem.md).
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute


@cute.jit
def store_rows_from_smem(sO: cute.Tensor, gO: cute.Tensor, tidx: cutlass.Int32, valid_rows: cutlass.Int32,
                         vec: cutlass.Constexpr[int], rows: cutlass.Constexpr[int], cols: cutlass.Constexpr[int],
                         num_threads: cutlass.Constexpr[int]):
    """Copy the (rows, cols) tile sO (smem) to gO (global) in `vec`-element (16-byte) row chunks,
    rows < valid_rows only: chunk c of the tile is thread c % num_threads's, row c // (cols / vec),
    so each warp moves 32 consecutive chunks of one row (one 16-byte load and store each)."""
    per_row = cols // vec
    for i in cutlass.range_constexpr(rows * per_row // num_threads):
        c = tidx + i * num_threads
        row = c // per_row
        if row < valid_rows:
            chunk = c % per_row
            cute.autovec_copy(cute.local_tile(sO[row, None], (vec,), (chunk,)),
                              cute.local_tile(gO[row, None], (vec,), (chunk,)))
