"""The split order kernel of flash_mla_decode_v34: v14's longest-first order (common/split_order.py)
computed by one warp, without a block barrier.

Why: v14's order kernel runs 1024 threads through two Hillis-Steele scans of 1024 entries, 20 CTA
barriers in all; ncu on b=128 s_q=1 h_q=16 seqlen 1024 varlen (2026-12-02) puts it at 5.1 us with
42% of its stalls at those barriers, before a split kernel of 56 us. The order itself is small
work (b <= 4096 lengths, a histogram of partial sizes). Here one warp does it with shuffles, a
warp match and a shared-memory histogram; it writes the same order (common/split_order.py's
`host_order`, ties among equal partial sizes in sequence order, which this kernel keeps exactly:
tests/test_warp_order.py compares them on the GPU):
1. the sequences in chunks of 32 (lane l: sequence 32 k + l): tiles n, full splits n // chunk and the
   partial's size n % chunk (an empty sequence: size 1); an inclusive warp scan of the full-split
   counts places each sequence's full splits, sequence by sequence, and the lane writes them; the
   lanes whose partial has the same size key find each other (`match.any`), so a partial's rank
   among its size is the count of earlier chunks' (the histogram so far) plus its lower lanes';
2. an exclusive scan of the histogram over the size keys (lane l: keys 32 l .. 32 l + 31), so a
   key's entry becomes where its partials start;
3. the chunks again: each partial's place = all full splits + its key's start + its rank;
4. -1 for the slots that hold no split.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream
from cutlass.memory import SmemAllocator

TILE = 64
MAX_B = 4096                    # sequences (the rank array in shared memory, as v14's kernel)
SIZES = 1024                    # size keys: partial sizes 1 .. SIZES - 1 (larger ones share the top key)
FULL = 0xFFFFFFFF
I32 = cutlass.Int32


class LeanSplitOrderKernel:
    """Constexpr config: `chunk`, the KV tiles per split (the split kernel's)."""

    def __init__(self, chunk: int):
        if chunk < 1:
            raise ValueError(f"chunk: expected >= 1 KV tiles per split, got {chunk}")
        self.chunk = chunk

    @cute.jit
    def __call__(self, seqlens: cute.Tensor, order: cute.Tensor, stream):
        @cute.struct
        class Storage:
            hist: cute.struct.MemRange[I32, SIZES]
            rank: cute.struct.MemRange[I32, MAX_B]

        self.storage = Storage
        self.lean_split_order_kernel(seqlens, order).launch(grid=(1, 1, 1), block=(32, 1, 1), stream=stream)

    @cute.jit
    def warp_inclusive_sum(self, v: cutlass.Int32, lane: cutlass.Int32) -> cutlass.Int32:
        for d in cutlass.range_constexpr(5):
            up = cute.arch.shuffle_sync_up(v, 1 << d)
            if lane >= (1 << d):
                v += up
        return v

    @cute.jit
    def size_key(self, n: cutlass.Int32, rest: cutlass.Int32) -> cutlass.Int32:
        """SIZES - size (1 .. SIZES - 1: larger partials first) of a sequence's partial split; -1: none."""
        key = I32(-1)
        if rest != 0 or n == 0:
            key = SIZES - cutlass.min(cutlass.max(rest, 1), SIZES - 1)
        return key

    @cute.kernel
    def lean_split_order_kernel(self, seqlens: cute.Tensor, order: cute.Tensor):
        lane, _, _ = cute.arch.thread_idx()
        b = seqlens.shape[0]
        slots = order.shape[1]
        st = SmemAllocator().allocate(self.storage)
        hist = st.hist.get_tensor(cute.make_layout(SIZES))
        rank = st.rank.get_tensor(cute.make_layout(MAX_B))
        for k in cutlass.range_constexpr(SIZES // 32):
            hist[lane + 32 * k] = 0
        cute.arch.sync_warp()
        n_rounds = (b + 31) // 32

        # ---- 1. full splits in place; each partial's rank among its size
        n_full_all = I32(0)
        for it in cutlass.range(n_rounds, unroll=1):
            i = it * 32 + lane
            n = I32(0)
            if i < b:
                n = (seqlens[i] + TILE - 1) // TILE
            full = n // self.chunk
            rest = n - full * self.chunk
            incl = self.warp_inclusive_sum(full, lane)
            first = n_full_all + incl - full
            for s in cutlass.range(full, unroll=1):
                p = first + s
                order[p // slots, p % slots] = i * slots + s
            n_full_all += cute.arch.shuffle_sync(incl, 31)
            key = I32(-1)
            if i < b:
                key = self.size_key(n, rest)
            same = cute.arch.match_sync(FULL, key)
            below = cute.arch.popc(same & cute.arch.lanemask_lt())
            seen = I32(0)
            if key >= 0:
                seen = hist[key]
            cute.arch.sync_warp()
            if key >= 0:
                rank[i] = seen + I32(below)
                if below == 0:
                    hist[key] = seen + I32(cute.arch.popc(same))
            cute.arch.sync_warp()

        # ---- 2. exclusive scan of the histogram: where each size's partials start
        owned = I32(0)
        for k in cutlass.range_constexpr(32):
            owned += hist[lane * 32 + k]
        incl = self.warp_inclusive_sum(owned, lane)
        n_partial = cute.arch.shuffle_sync(incl, 31)
        run = incl - owned
        cute.arch.sync_warp()
        for k in cutlass.range_constexpr(32):
            c = hist[lane * 32 + k]
            hist[lane * 32 + k] = run
            run += c
        cute.arch.sync_warp()

        # ---- 3. the partial splits, largest first (ties in sequence order)
        for it in cutlass.range(n_rounds, unroll=1):
            i = it * 32 + lane
            if i < b:
                n = (seqlens[i] + TILE - 1) // TILE
                full = n // self.chunk
                key = self.size_key(n, n - full * self.chunk)
                if key >= 0:
                    p = n_full_all + hist[key] + rank[i]
                    order[p // slots, p % slots] = i * slots + full

        # ---- 4. the slots that hold no split
        for p in cutlass.range(n_full_all + n_partial + lane, b * slots, 32, unroll=1):
            order[p // slots, p % slots] = -1


def fake_arguments(k: LeanSplitOrderKernel) -> tuple:
    """Fake tensors in __call__'s order: seqlens [b] i32, order [b, slots] i32."""
    b = cute.sym_int(symbol="b")
    slots = cute.sym_int(symbol="split_slots")
    seqlens = make_fake_compact_tensor(I32, (b,), assumed_align=4)
    order = make_fake_compact_tensor(I32, (b, slots), stride_order=(1, 0), assumed_align=4)
    return seqlens, order, make_fake_stream(use_tvm_ffi_env_stream=True)


def launch_arguments(cache_seqlens, ws) -> tuple:
    if cache_seqlens.shape[0] > MAX_B:
        raise ValueError(f"cache_seqlens: the order kernel takes b <= {MAX_B}, got {cache_seqlens.shape[0]}")
    return cache_seqlens, ws["order"]
