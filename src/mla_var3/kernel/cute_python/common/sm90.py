"""Hopper (sm_90a) wgmma fragment helpers shared by CuTe DSL versions.

A wgmma accumulator fragment (M=64 per warpgroup, f32) has the per-thread layout
((2, 2, N/8), MMA_M, MMA_N): mode 0 is (2 adjacent columns, 2 rows 8 apart, N/8 column groups).
Each thread therefore owns 2 rows per MMA_M tile, and the 4 lanes of a quad share a row
(see reduce.py). The helpers below re-view those registers without moving them.
"""
from __future__ import annotations

import cutlass.cute as cute


def acc_rows_cols_layout(layout: cute.Layout) -> cute.Layout:
    """((2, 2, V), M, N) -> ((2, M), (2, V, N)): mode 0 indexes this thread's rows, mode 1 its
    columns, so a row-wise softmax is two nested constexpr loops. Works for register, gmem and
    coordinate (identity) partitions alike, because only shape and stride are re-grouped."""
    shp, std = layout.shape, layout.stride
    return cute.make_layout(
        ((shp[0][1], shp[1]), (shp[0][0], shp[0][2], shp[2])),
        stride=((std[0][1], std[1]), (std[0][0], std[0][2], std[2])))


def acc_rows_cols(t: cute.Tensor) -> cute.Tensor:
    """Tensor view of `acc_rows_cols_layout` over the same storage."""
    return cute.make_tensor(t.iterator, acc_rows_cols_layout(t.layout))


def acc_to_a_operand_layout(layout: cute.Layout) -> cute.Layout:
    """Layout of a 16-bit register A operand (K-major, k-blocks of 16) holding the values of an
    f32 accumulator with `layout` ((2, 2, V), 1, 1), in place: ((2, 2, 2), 1, V/2).

    Why this is exact: an A-operand value (i, j, k) of k-block kb sits at row +8j, column
    i + 8k + 16kb of the tile, and the accumulator value (i, j, 2kb + k) sits at the same row and
    column. So the k-block index just strides over pairs of accumulator column groups."""
    shp, std = layout.shape, layout.stride
    v = shp[0][2]
    assert v % 2 == 0, f"accumulator N/8 = {v} must be even to feed k-blocks of 16"
    return cute.make_layout(
        ((shp[0][0], shp[0][1], 2), shp[1], v // 2),
        stride=((std[0][0], std[0][1], std[0][2]), std[1], 2 * std[0][2]))
