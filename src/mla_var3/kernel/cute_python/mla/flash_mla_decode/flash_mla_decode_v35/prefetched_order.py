"""The split order kernel of flash_mla_decode_v35: v34's one-warp order (ties in sequence order, as
`host_order`) with every length prefetched into shared memory by 1024 threads first.

Why: v34's warp took b / 32 dependent rounds of length loads, twice (ncu 6.9 us against v14's 5.2 at
b=128): its barriers were gone, but its round trips to memory were serialized. Here the kernel is
one CTA of 1024 threads in three phases and two CTA barriers:
A. every thread loads up to 4 lengths (b <= 4096) and stores their tile counts in shared memory:
   one round trip for all of them;
B. warp 0 runs v34's passes on the counts in shared memory: full splits placed by a shuffle scan
   and written; each partial's rank among its size from a warp match and a histogram; the
   histogram's exclusive scan; the partials written; the number of splits to shared memory;
C. every thread writes -1 into its share of the slots past the last split.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream
from cutlass.memory import SmemAllocator

TILE = 64
THREADS = 1024
PER_THREAD = 4
MAX_B = THREADS * PER_THREAD    # 4096 sequences (as v14's kernel)
SIZES = 1024                    # size keys: partial sizes 1 .. SIZES - 1 (larger ones share the top key)
FULL = 0xFFFFFFFF
I32 = cutlass.Int32


class PrefetchedSplitOrderKernel:
    """Constexpr config: `chunk`, the KV tiles per split (the split kernel's)."""

    def __init__(self, chunk: int):
        if chunk < 1:
            raise ValueError(f"chunk: expected >= 1 KV tiles per split, got {chunk}")
        self.chunk = chunk

    @cute.jit
    def __call__(self, seqlens: cute.Tensor, order: cute.Tensor, stream):
        @cute.struct
        class Storage:
            tiles: cute.struct.MemRange[I32, MAX_B]
            rank: cute.struct.MemRange[I32, MAX_B]
            hist: cute.struct.MemRange[I32, SIZES]
            n_splits: cute.struct.MemRange[I32, 1]

        self.storage = Storage
        self.prefetched_split_order_kernel(seqlens, order).launch(grid=(1, 1, 1), block=(THREADS, 1, 1),
                                                                  stream=stream)

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
    def prefetched_split_order_kernel(self, seqlens: cute.Tensor, order: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        lane = tidx % 32
        b = seqlens.shape[0]
        slots = order.shape[1]
        st = SmemAllocator().allocate(self.storage)
        tiles = st.tiles.get_tensor(cute.make_layout(MAX_B))
        rank = st.rank.get_tensor(cute.make_layout(MAX_B))
        hist = st.hist.get_tensor(cute.make_layout(SIZES))
        n_splits = st.n_splits.get_tensor(cute.make_layout(1))

        # ---- A. every length in one round trip; the histogram cleared
        for k in cutlass.range_constexpr(PER_THREAD):
            i = tidx + k * THREADS
            if i < b:
                tiles[i] = (seqlens[i] + TILE - 1) // TILE
        hist[tidx] = 0
        cute.arch.sync_threads()

        # ---- B. warp 0: v34's passes, on shared memory
        if tidx < 32:
            n_rounds = (b + 31) // 32
            n_full_all = I32(0)
            for it in cutlass.range(n_rounds, unroll=1):
                i = it * 32 + lane
                n = I32(0)
                if i < b:
                    n = tiles[i]
                full = n // self.chunk
                incl = self.warp_inclusive_sum(full, lane)
                first = n_full_all + incl - full
                for s in cutlass.range(full, unroll=1):
                    p = first + s
                    order[p // slots, p % slots] = i * slots + s
                n_full_all += cute.arch.shuffle_sync(incl, 31)
                key = I32(-1)
                if i < b:
                    key = self.size_key(n, n - full * self.chunk)
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
            for it in cutlass.range(n_rounds, unroll=1):
                i = it * 32 + lane
                if i < b:
                    n = tiles[i]
                    full = n // self.chunk
                    key = self.size_key(n, n - full * self.chunk)
                    if key >= 0:
                        p = n_full_all + hist[key] + rank[i]
                        order[p // slots, p % slots] = i * slots + full
            if lane == 0:
                n_splits[0] = n_full_all + n_partial
        cute.arch.sync_threads()

        # ---- C. the slots that hold no split
        for p in cutlass.range(n_splits[0] + tidx, b * slots, THREADS, unroll=1):
            order[p // slots, p % slots] = -1


def fake_arguments(k: PrefetchedSplitOrderKernel) -> tuple:
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
