"""Combine kernel of flash_mla_decode_v7: merges the pieces of each sequence that several
persistent CTAs shared (see schedule.py for the token-balanced split).

One warp per query row (8 rows per 256-thread CTA), grid (cdiv(s_q*h_q, 8), b). For sequence i
with n_i = cdiv(len_i, 64) tiles the warp finds, from cum (the schedule kernel's scan), the CTAs
that own its first and last global tile: c_first = ((cum[i] + 1) ctas - 1) // T and c_last =
(cum[i+1] ctas - 1) // T. One CTA: the split kernel wrote the final row itself; nothing to do.
Several: CTA c_first holds the sequence's head as its last piece (slot 1, or slot 0 when its range
also starts in sequence i: first_seq[c_first] == i), every later CTA up to c_last its first piece
(slot 0); CTAs with an empty range (T < ctas) are skipped. The merge is v2's: m = max of the
pieces' log2-domain lse (all -inf: out 0, lse +inf), out = sum 2^(lse_s - m) O_s / sum 2^(lse_s -
m), lse = (m + log2 sum) * ln 2, in float32, out rounded to bf16 once. A sequence of length 0 has
no tile in any CTA: the combine writes its rows (out 0, lse +inf).
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
    """Constexpr config: the problem's s_q, h_q and the persistent CTAs per row block (`ctas`)."""

    def __init__(self, s_q: int, h_q: int, ctas: int):
        self.s_q, self.h_q, self.ctas = s_q, h_q, ctas
        self.rows = s_q * h_q

    @cute.jit
    def __call__(self, seqlens: cute.Tensor, cum: cute.Tensor, first_seq: cute.Tensor, o_part: cute.Tensor,
                 lse_part: cute.Tensor, out: cute.Tensor, lse: cute.Tensor, stream):
        self.flash_mla_decode_v7_combine_kernel(seqlens, cum, first_seq, o_part, lse_part, out, lse).launch(
            grid=(cute.ceil_div(self.rows, ROWS_PER_CTA), seqlens.shape[0], 1), block=(THREADS, 1, 1),
            stream=stream, use_pdl=True)

    @cute.kernel
    def flash_mla_decode_v7_combine_kernel(self, seqlens: cute.Tensor, cum: cute.Tensor, first_seq: cute.Tensor,
                                           o_part: cute.Tensor, lse_part: cute.Tensor, out: cute.Tensor,
                                           lse: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        blk, bidx, _ = cute.arch.block_idx()
        lane = tidx % 32
        row = blk * ROWS_PER_CTA + tidx // 32
        cute.arch.griddepcontrol_wait()          # PDL: launched early; the split kernel's pieces land first
        big_t = cum[seqlens.shape[0]]
        c0 = cum[bidx]
        c1 = cum[bidx + 1]
        if row < self.rows:
            if c1 == c0:
                # no tile: no CTA saw this sequence (length 0)
                for k in cutlass.range_constexpr(COLS_PER_LANE // 2):
                    col = 64 * k + 2 * lane
                    out[bidx, row, col] = BF16(0.0)
                    out[bidx, row, col + 1] = BF16(0.0)
                if lane == 0:
                    lse[bidx, row % self.h_q, row // self.h_q] = F32(F32.inf)
            else:
                c_first = ((c0 + 1) * self.ctas - 1) // big_t
                c_last = (c1 * self.ctas - 1) // big_t
                if c_last > c_first:
                    m = F32(-F32.inf)
                    for c in cutlass.range(c_first, c_last + 1, unroll=1):
                        if (c * big_t) // self.ctas < ((c + 1) * big_t) // self.ctas:   # a non-empty range
                            slot = I32(0)
                            if c == c_first:
                                if first_seq[c] != bidx:
                                    slot = I32(1)
                            m = cute.arch.fmax(m, lse_part[c, slot, row])
                    acc = cute.make_rmem_tensor((COLS_PER_LANE,), F32)
                    acc.fill(0.0)
                    total = F32(0.0)
                    if m != -F32.inf:
                        for c in cutlass.range(c_first, c_last + 1, unroll=1):
                            if (c * big_t) // self.ctas < ((c + 1) * big_t) // self.ctas:
                                slot = I32(0)
                                if c == c_first:
                                    if first_seq[c] != bidx:
                                        slot = I32(1)
                                w = cute.math.exp2(lse_part[c, slot, row] - m, fastmath=True)
                                total += w
                                for k in cutlass.range_constexpr(COLS_PER_LANE // 2):
                                    col = 64 * k + 2 * lane
                                    acc[2 * k] += w * o_part[c, slot, row, col]
                                    acc[2 * k + 1] += w * o_part[c, slot, row, col + 1]
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
    """Fake tensors in __call__'s order: seqlens [b], cum [b + 1], first_seq [ctas] (i32),
    o_part [ctas, 2, rows, 512] f32, lse_part [ctas, 2, rows] f32, out [b, rows, 512] bf16,
    lse [b, h_q, s_q] f32, env stream."""
    b = cute.sym_int(symbol="b")
    b1 = cute.sym_int(symbol="b_plus_1")
    rm3, rm4 = (2, 1, 0), (3, 2, 1, 0)
    seqlens = make_fake_compact_tensor(I32, (b,), assumed_align=4)
    cum = make_fake_compact_tensor(I32, (b1,), assumed_align=4)
    first_seq = make_fake_compact_tensor(I32, (k.ctas,), assumed_align=4)
    o_part = make_fake_compact_tensor(F32, (k.ctas, 2, k.rows, D_V), stride_order=rm4, assumed_align=16)
    lse_part = make_fake_compact_tensor(F32, (k.ctas, 2, k.rows), stride_order=rm3, assumed_align=4)
    out = make_fake_compact_tensor(BF16, (b, k.rows, D_V), stride_order=rm3, assumed_align=16)
    lse = make_fake_compact_tensor(F32, (b, k.h_q, k.s_q), stride_order=rm3, assumed_align=4)
    return seqlens, cum, first_seq, o_part, lse_part, out, lse, make_fake_stream(use_tvm_ffi_env_stream=True)


def launch_arguments(cache_seqlens, out, lse, ws) -> tuple:
    b, s_q, h_q, _ = out.shape
    return (cache_seqlens, ws["cum"], ws["first_seq"], ws["o_part"], ws["lse_part"], out.view(b, s_q * h_q, D_V),
            lse)
