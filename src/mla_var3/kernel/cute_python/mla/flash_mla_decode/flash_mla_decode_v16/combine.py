"""Combine kernel of flash_mla_decode_v16: merges the splits of each sequence that has several.

One warp per query row (8 rows per 256-thread CTA), grid (cdiv(s_q*h_q, 8), b). For a sequence
with n_splits > 1 (recomputed from its length exactly as the split kernel does), the warp reads
the splits' log2-domain lse, takes their max m (all -inf: the row saw no key -> out 0, lse +inf),
and each lane merges 16 of the 512 columns: out = sum_s 2^(lse_s - m) O_s / sum_s 2^(lse_s - m),
lse = (m + log2 sum) * ln 2. Sequences with one split were written by the split kernel: the
combine does nothing for them. Everything in float32; out is rounded to bf16 once.
"""
from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

D_V = 512
PAGE = 64
ROWS_PER_CTA = 8                 # one warp per row
THREADS = 32 * ROWS_PER_CTA
COLS_PER_LANE = D_V // 32        # 16: 8 pairs of adjacent columns, pair k at 64 k + 2 lane
LN_2 = math.log(2.0)
BF16, F32, I32 = cutlass.BFloat16, cutlass.Float32, cutlass.Int32


class FlashMlaCombineKernel:
    """Constexpr config: the problem's s_q, h_q and the split size in KV tiles (`chunk`)."""

    def __init__(self, s_q: int, h_q: int, chunk: int):
        self.s_q, self.h_q, self.chunk = s_q, h_q, chunk
        self.rows = s_q * h_q

    @cute.jit
    def __call__(self, seqlens: cute.Tensor, o_part: cute.Tensor, lse_part: cute.Tensor,
                 out: cute.Tensor, lse: cute.Tensor, stream):
        self.flash_mla_decode_v16_combine_kernel(seqlens, o_part, lse_part, out, lse).launch(
            grid=(cute.ceil_div(self.rows, ROWS_PER_CTA), seqlens.shape[0], 1), block=(THREADS, 1, 1),
            stream=stream)

    @cute.kernel
    def flash_mla_decode_v16_combine_kernel(self, seqlens: cute.Tensor, o_part: cute.Tensor,
                                           lse_part: cute.Tensor, out: cute.Tensor, lse: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        blk, bidx, _ = cute.arch.block_idx()
        lane = tidx % 32
        row = blk * ROWS_PER_CTA + tidx // 32
        seqlen = seqlens[bidx]
        n_tiles = (seqlen + PAGE - 1) // PAGE
        n_splits = cutlass.max((n_tiles + self.chunk - 1) // self.chunk, 1)
        if n_splits > 1:
            if row < self.rows:
                m = F32(-F32.inf)
                for s in cutlass.range(n_splits, unroll=1):
                    m = cute.arch.fmax(m, lse_part[bidx, s, row])
                acc = cute.make_rmem_tensor((COLS_PER_LANE,), F32)
                acc.fill(0.0)
                total = F32(0.0)
                if m != -F32.inf:
                    for s in cutlass.range(n_splits, unroll=1):
                        w = cute.math.exp2(lse_part[bidx, s, row] - m, fastmath=True)
                        total += w
                        for k in cutlass.range_constexpr(COLS_PER_LANE // 2):
                            col = 64 * k + 2 * lane
                            acc[2 * k] += w * o_part[bidx, s, row, col]
                            acc[2 * k + 1] += w * o_part[bidx, s, row, col + 1]
                inv = F32(1.0) / total if total > F32(0.0) else F32(0.0)
                for k in cutlass.range_constexpr(COLS_PER_LANE // 2):
                    col = 64 * k + 2 * lane
                    out[bidx, row, col] = (acc[2 * k] * inv).to(BF16)
                    out[bidx, row, col + 1] = (acc[2 * k + 1] * inv).to(BF16)
                if lane == 0:
                    lse_v = F32(F32.inf)
                    if total > F32(0.0):
                        lse_v = (m + cute.math.log2(total)) * LN_2
                    lse[bidx, row % self.h_q, row // self.h_q] = lse_v


def fake_arguments(k: FlashMlaCombineKernel) -> tuple:
    """Fake tensors in __call__'s order: seqlens [b], o_part [b, slots, rows, 512] f32,
    lse_part [b, slots, rows] f32, out [b, rows, 512] bf16, lse [b, h_q, s_q] f32, env stream."""
    b = cute.sym_int(symbol="b")
    slots = cute.sym_int(symbol="split_slots")
    rm3, rm4 = (2, 1, 0), (3, 2, 1, 0)
    seqlens = make_fake_compact_tensor(I32, (b,), assumed_align=4)
    o_part = make_fake_compact_tensor(F32, (b, slots, k.rows, D_V), stride_order=rm4, assumed_align=16)
    lse_part = make_fake_compact_tensor(F32, (b, slots, k.rows), stride_order=rm3, assumed_align=4)
    out = make_fake_compact_tensor(BF16, (b, k.rows, D_V), stride_order=rm3, assumed_align=16)
    lse = make_fake_compact_tensor(F32, (b, k.h_q, k.s_q), stride_order=rm3, assumed_align=4)
    return seqlens, o_part, lse_part, out, lse, make_fake_stream(use_tvm_ffi_env_stream=True)


def launch_arguments(cache_seqlens, out, lse, ws) -> tuple:
    b, s_q, h_q, _ = out.shape
    return cache_seqlens, ws["o_part"], ws["lse_part"], out.view(b, s_q * h_q, D_V), lse
