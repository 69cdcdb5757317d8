"""v33: the last split CTA of a (sequence, row block) merges that row block's split partials itself,
so a call needs no combine kernel (and pays neither its launch nor its own DRAM round trips).

Protocol, per split CTA whose sequence has several splits (the 256 math threads):
1. write this split's f32 partial O / l and its log2-domain lse to the workspace (v9's staged
   epilogue, unchanged), then each thread fences at GPU scope (release) and the math threads meet;
2. one thread adds 1 to the row block's arrival counter (`counters[sequence, row block]`, an
   acq_rel atomic at GPU scope) and broadcasts the old value through shared memory;
3. the CTA that saw n_splits - 1 is the last: every split's partial is written and visible to it
   (each writer's release fence precedes its arrival; the last fences again after the atomic,
   acquire). It computes each row's weights w_s = 2^(lse_s - m) / sum_s' 2^(lse_s' - m) into shared
   memory (the K ring is dead), then sums w_s O_s in 16-byte column chunks, rows in warp-contiguous
   512-byte runs, and writes out (bf16) and lse (natural log; +inf where the row saw no key), then
   puts the counter back to 0 for the next call (nothing else touches it in this call).
The sum runs over the splits in split order whichever CTA comes last, so reruns are bit-identical.
The counters start at zero (the workspace allocates them zeroed once per shape) and every call
leaves them at zero, so a CUDA graph replays without a reset.
"""
from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute

D_V = 512
VEC = 4                      # f32 per 16-byte chunk
CHUNKS_PER_ROW = D_V // VEC  # 128
LN_2 = math.log(2.0)
BF16, F32, I32 = cutlass.BFloat16, cutlass.Float32, cutlass.Int32


@cute.jit
def arrive_last(counter: cute.Tensor, flag: cute.Tensor, n_splits: cutlass.Int32, tidx: cutlass.Int32,
                bar_id: cutlass.Constexpr[int], n_threads: cutlass.Constexpr[int]) -> cutlass.Boolean:
    """Steps 1-2 (after this thread's partial stores): True in every thread of the last CTA to arrive.
    `counter`: this row block's one-element counter view; `flag`: one int32 of shared memory."""
    cute.arch.fence_acq_rel_gpu()                      # this thread's partial stores, before the arrival
    cute.arch.barrier(barrier_id=bar_id, number_of_threads=n_threads)
    if tidx == 0:
        flag[0] = cute.arch.atomic_add(counter.iterator.llvm_ptr, I32(1), sem="acq_rel", scope="gpu")
    cute.arch.barrier(barrier_id=bar_id, number_of_threads=n_threads)
    last = flag[0] == n_splits - 1
    if last:
        cute.arch.fence_acq_rel_gpu()                  # acquire: the other splits' partials, after the arrival
    return last


@cute.jit
def merge_row_block(o_part: cute.Tensor, lse_part: cute.Tensor, out: cute.Tensor, lse: cute.Tensor,
                    counter: cute.Tensor, s_w: cute.Tensor, bidx: cutlass.Int32, row0: cutlass.Int32,
                    n_rows: cutlass.Int32, n_splits: cutlass.Int32, tidx: cutlass.Int32, h_q: cutlass.Constexpr[int],
                    block_m: cutlass.Constexpr[int], bar_id: cutlass.Constexpr[int],
                    n_threads: cutlass.Constexpr[int]):
    """Step 3 in the last CTA: rows row0 .. row0 + n_rows - 1 of sequence bidx. `s_w`: shared
    memory (block_m, >= n_splits) f32 for the weights, column-major by split."""
    # ---- weights per row (threads 0 .. n_rows - 1, one row each) and the row's lse
    if tidx < n_rows:
        grow = row0 + tidx
        m = F32(-F32.inf)
        for s in cutlass.range(n_splits, unroll=1):
            m = cute.arch.fmax(m, lse_part[bidx, s, grow])
        total = F32(0.0)
        if m != -F32.inf:
            for s in cutlass.range(n_splits, unroll=1):
                w = cute.math.exp2(lse_part[bidx, s, grow] - m, fastmath=True)
                s_w[tidx, s] = w
                total += w
        inv = F32(1.0) / total if total > F32(0.0) else F32(0.0)
        for s in cutlass.range(n_splits, unroll=1):
            s_w[tidx, s] = s_w[tidx, s] * inv if total > F32(0.0) else F32(0.0)
        lse_v = F32(F32.inf)
        if total > F32(0.0):
            lse_v = (m + cute.math.log2(total)) * LN_2
        lse[bidx, grow % h_q, grow // h_q] = lse_v
    cute.arch.barrier(barrier_id=bar_id, number_of_threads=n_threads)

    # ---- out = sum_s w_s O_s: chunk c = tidx + i * n_threads is row c // 128, columns 4 (c % 128) ..
    per_thread = block_m * CHUNKS_PER_ROW // n_threads
    acc = cute.make_rmem_tensor((per_thread, VEC), F32)
    acc.fill(0.0)
    part = cute.make_rmem_tensor((VEC,), F32)
    for s in cutlass.range(n_splits, unroll=1):
        for i in cutlass.range_constexpr(per_thread):
            c = tidx + i * n_threads
            r = c // CHUNKS_PER_ROW
            if r < n_rows:
                w = s_w[r, s]
                cute.autovec_copy(cute.local_tile(o_part[bidx, s, row0 + r, None], (VEC,), (c % CHUNKS_PER_ROW,)),
                                  part)
                for v in cutlass.range_constexpr(VEC):
                    acc[i, v] += w * part[v]
    o_bf = cute.make_rmem_tensor((VEC,), BF16)
    for i in cutlass.range_constexpr(per_thread):
        c = tidx + i * n_threads
        r = c // CHUNKS_PER_ROW
        if r < n_rows:
            for v in cutlass.range_constexpr(VEC):
                o_bf[v] = acc[i, v].to(BF16)
            cute.autovec_copy(o_bf, cute.local_tile(out[bidx, row0 + r, None], (VEC,), (c % CHUNKS_PER_ROW,)))
    if tidx == 0:
        counter[0] = I32(0)                            # ready for the next call
