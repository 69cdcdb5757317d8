"""Combine kernel of flash_mla_decode_v57 (v17's, unchanged since): merges the splits of each sequence that has several,
with `warps` warps per query row sharing the splits (v17; v2-v16: one warp per row).

Why: v16's combine gave each query row one warp that walked the splits one after another, one
dependent round of loads per split. With 128 splits (b=1, seqlen 32768: chunk 4) and 16 rows, that
is 16 warps in 2 CTAs doing 128 serial rounds, tens of microseconds of DRAM latency while the
split kernel took a few. Here `warps` warps (1, 2, 4 or 8; 8 // warps rows per 256-thread CTA,
grid (cdiv(s_q*h_q, 8 // warps), b)) share a row's splits: warp p takes splits p, p + warps, ...,
two per round, so a row has 2 x warps rounds of loads in flight instead of one.
1. max m of the splits' log2-domain lse: lanes stride over the row's splits, a warp max, then
   the max over the row's warps through shared memory (all -inf: the row saw no key -> out 0,
   lse +inf);
2. each warp sums w_s O_s and w_s over its splits, w_s = 2^(lse_s - m), each lane 16 of the 512
   columns (pairs at 64 k + 2 lane), in split order;
3. the row's warps add their partial sums through shared memory in warp order (deterministic),
   and the row's first warp writes out = sum / total (bf16, rounded once) and
   lse = (m + log2 total) * ln 2.
A sequence with one split was written by the split kernel: the combine does nothing for it
(the test is CTA-uniform: one sequence per CTA, so every barrier is met by the whole CTA).
"""
from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream
from cutlass.memory import SmemAllocator

D_V = 512
PAGE = 64
WARPS_PER_CTA = 8
THREADS = 32 * WARPS_PER_CTA
COLS_PER_LANE = D_V // 32        # 16: 8 pairs of adjacent columns, pair k at 64 k + 2 lane
LN_2 = math.log(2.0)
BF16, F32, I32 = cutlass.BFloat16, cutlass.Float32, cutlass.Int32


class FlashMlaCombineKernel:
    """Constexpr config: the problem's s_q, h_q, the split size in KV tiles (`chunk`) and the
    warps per query row (`warps`)."""

    def __init__(self, s_q: int, h_q: int, chunk: int, warps: int = 1):
        if not isinstance(warps, int) or warps < 1 or WARPS_PER_CTA % warps:
            raise ValueError(f"warps: expected 1, 2, 4 or 8 warps per query row (a divisor of {WARPS_PER_CTA}), got {warps}")
        self.s_q, self.h_q, self.chunk, self.warps = s_q, h_q, chunk, warps
        self.rows = s_q * h_q
        self.rows_per_cta = WARPS_PER_CTA // warps

    @cute.jit
    def __call__(self, seqlens: cute.Tensor, o_part: cute.Tensor, lse_part: cute.Tensor,
                 out: cute.Tensor, lse: cute.Tensor, stream):
        @cute.struct
        class Storage:
            part_max: cute.struct.MemRange[F32, WARPS_PER_CTA]
            part_total: cute.struct.MemRange[F32, WARPS_PER_CTA]
            part_acc: cute.struct.MemRange[F32, WARPS_PER_CTA * D_V]

        self.storage = Storage
        self.flash_mla_decode_v57_combine_kernel(seqlens, o_part, lse_part, out, lse).launch(
            grid=(cute.ceil_div(self.rows, self.rows_per_cta), seqlens.shape[0], 1), block=(THREADS, 1, 1),
            stream=stream)

    @cute.kernel
    def flash_mla_decode_v57_combine_kernel(self, seqlens: cute.Tensor, o_part: cute.Tensor,
                                           lse_part: cute.Tensor, out: cute.Tensor, lse: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        blk, bidx, _ = cute.arch.block_idx()
        lane = tidx % 32
        warp = tidx // 32
        part = warp % self.warps                      # which of the row's warps
        slot = warp // self.warps                     # which of the CTA's rows
        row = blk * self.rows_per_cta + slot
        live = row < self.rows                        # warp-uniform; padded rows still meet the barriers
        seqlen = seqlens[bidx]
        n_tiles = (seqlen + PAGE - 1) // PAGE
        n_splits = cutlass.max((n_tiles + self.chunk - 1) // self.chunk, 1)
        st = SmemAllocator().allocate(self.storage)
        part_max = st.part_max.get_tensor(cute.make_layout(WARPS_PER_CTA))
        part_total = st.part_total.get_tensor(cute.make_layout(WARPS_PER_CTA))
        part_acc = st.part_acc.get_tensor(cute.make_layout((D_V, WARPS_PER_CTA)))
        if n_splits > 1:                              # CTA-uniform

            # ---- 1. m = max over the row's splits of lse
            m = F32(-F32.inf)
            if live:
                for s in cutlass.range(part * 32 + lane, n_splits, self.warps * 32, unroll=1):
                    m = cute.arch.fmax(m, lse_part[bidx, s, row])
            m = cute.arch.warp_reduction_max(m)
            if cutlass.const_expr(self.warps > 1):
                if lane == 0:
                    part_max[warp] = m
                cute.arch.sync_threads()
                m = part_max[slot * self.warps]
                for p in cutlass.range_constexpr(1, self.warps):
                    m = cute.arch.fmax(m, part_max[slot * self.warps + p])

            # ---- 2. this warp's splits: sum of w_s O_s and of w_s
            acc = cute.make_rmem_tensor((COLS_PER_LANE,), F32)
            acc.fill(0.0)
            total = F32(0.0)
            if live:
                if m != -F32.inf:
                    for s in cutlass.range(part, n_splits, self.warps, unroll=2):
                        w = cute.math.exp2(lse_part[bidx, s, row] - m, fastmath=True)
                        total += w
                        for k in cutlass.range_constexpr(COLS_PER_LANE // 2):
                            ca = 64 * k + 2 * lane
                            acc[2 * k] += w * o_part[bidx, s, row, ca]
                            acc[2 * k + 1] += w * o_part[bidx, s, row, ca + 1]

            # ---- 3. the row's warps add up in warp order; its first warp writes
            if cutlass.const_expr(self.warps > 1):
                for k in cutlass.range_constexpr(COLS_PER_LANE // 2):
                    cs = 64 * k + 2 * lane
                    part_acc[cs, warp] = acc[2 * k]
                    part_acc[cs + 1, warp] = acc[2 * k + 1]
                if lane == 0:
                    part_total[warp] = total
                cute.arch.sync_threads()
                if part == 0:
                    total = part_total[warp]
                    for p in cutlass.range_constexpr(1, self.warps):
                        total += part_total[warp + p]
                    for k in cutlass.range_constexpr(COLS_PER_LANE // 2):
                        cr = 64 * k + 2 * lane
                        for p in cutlass.range_constexpr(1, self.warps):
                            acc[2 * k] += part_acc[cr, warp + p]
                            acc[2 * k + 1] += part_acc[cr + 1, warp + p]
            if live:
                if part == 0:
                    inv = F32(1.0) / total if total > F32(0.0) else F32(0.0)
                    for k in cutlass.range_constexpr(COLS_PER_LANE // 2):
                        co = 64 * k + 2 * lane
                        out[bidx, row, co] = (acc[2 * k] * inv).to(BF16)
                        out[bidx, row, co + 1] = (acc[2 * k + 1] * inv).to(BF16)
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
