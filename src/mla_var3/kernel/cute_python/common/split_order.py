"""The split order kernel of flash_mla_decode_v14+: which (sequence, split) each split CTA runs, longest
first (shared unchanged by v14-v17; written for v14).

The split kernel's grid has b x slots CTAs per row block; CTA (slot y, sequence z) used to run
split y of sequence z, so the launch order - which the hardware follows closely when it hands
CTAs to free SMs - was sequence by sequence, and a ragged batch ended with a tail of long CTAs
started late (the split schedule's makespan model: 1.59-1.73x the ideal at seqlen >= 4096, where
longest-first gives 1.05-1.16x; tests/test_split_order.py). This kernel (one CTA of 1024 threads,
before the split kernel in the same stream, so a CUDA graph replayed with new lengths gets a new
order) writes order[p] = z * slots + y, the work item the p-th CTA in launch order runs:
- first every full split (chunk tiles: the largest items), sequence by sequence;
- then each sequence's partial last split (1 .. chunk - 1 tiles; an empty sequence's one split,
  which writes its zero output, counts as size 1) in decreasing size (a counting sort on
  min(tiles, 1023): an exclusive scan of a histogram, then a shared-memory atomic cursor
  per size, so the order among equal sizes varies run to run - the outputs do not, each item is
  computed the same way by whichever CTA runs it);
- then -1 for the slots that hold no split (their CTAs return at once).
Each thread takes up to 4 consecutive sequences (b <= 4096, checked on the host); the two scans
are Hillis-Steele over 1024 entries in shared memory, as v6's schedule kernel does.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream
from cutlass.memory import SmemAllocator

TILE = 64
THREADS = 1024
PER_THREAD = 4
MAX_B = THREADS * PER_THREAD
SIZES = THREADS                 # counting-sort keys: partial sizes 1 .. SIZES - 1 (larger ones share the top key)
I32 = cutlass.Int32


class SplitOrderKernel:
    """Constexpr config: `chunk`, the KV tiles per split (the split kernel's)."""

    def __init__(self, chunk: int):
        if chunk < 1:
            raise ValueError(f"chunk: expected >= 1 KV tiles per split, got {chunk}")
        self.chunk = chunk

    @staticmethod
    def order_storage():
        """The shared memory of `write_order`: the two scans and the per-size cursors. (Built from
        an annotations dict: this module's postponed annotations are strings, which cute.struct
        does not evaluate outside a jit function.)"""
        fields = {"full_scan": cute.struct.MemRange[I32, THREADS], "size_scan": cute.struct.MemRange[I32, SIZES],
                  "cursor": cute.struct.MemRange[I32, SIZES]}
        return cute.struct(type("Storage", (), {"__annotations__": fields}))

    @cute.jit
    def __call__(self, seqlens: cute.Tensor, order: cute.Tensor, stream):
        self.storage = self.order_storage()
        self.split_order_kernel(seqlens, order).launch(
            grid=(1, 1, 1), block=(THREADS, 1, 1), stream=stream)

    @cute.kernel
    def split_order_kernel(self, seqlens: cute.Tensor, order: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        self.write_order(seqlens, order, tidx)

    @cute.jit
    def write_order(self, seqlens: cute.Tensor, order: cute.Tensor, tidx: cutlass.Int32):
        """The body of the order kernel (module docstring), into any [b, slots] int32 view `order`
        (v37's work rows reuse it on their first column); needs `self.storage` from `order_storage`."""
        b = seqlens.shape[0]
        slots = order.shape[1]
        st = SmemAllocator().allocate(self.storage)
        full_scan = st.full_scan.get_tensor(cute.make_layout(THREADS))
        size_scan = st.size_scan.get_tensor(cute.make_layout(SIZES))
        cursor = st.cursor.get_tensor(cute.make_layout(SIZES))

        size_scan[tidx] = 0
        cursor[tidx] = 0
        cute.arch.sync_threads()

        # ---- this thread's sequences: full splits, and the size of the partial last split
        first = tidx * PER_THREAD
        n_full = cute.make_rmem_tensor((PER_THREAD,), I32)
        rest = cute.make_rmem_tensor((PER_THREAD,), I32)
        my_full = I32(0)
        for k in cutlass.range_constexpr(PER_THREAD):
            n_full[k] = 0
            rest[k] = 0
            if first + k < b:
                n = (seqlens[first + k] + TILE - 1) // TILE
                n_full[k] = n // self.chunk
                rest[k] = n - n_full[k] * self.chunk
                if n == 0:
                    rest[k] = -1     # an empty sequence still has its one split (it writes the zero output)
                if rest[k] != 0:     # key: larger splits first; an empty split sorts with size 1
                    cute.arch.atomic_add(st.size_scan.data_ptr() + (SIZES - cutlass.min(cutlass.max(rest[k], 1), SIZES - 1)),
                                         I32(1), scope="cta")
            my_full += n_full[k]
        full_scan[tidx] = my_full
        cute.arch.sync_threads()

        # ---- inclusive scans of the full-split counts (by thread) and of the size histogram (by key)
        d = 1
        for _ in cutlass.range_constexpr(10):            # 2^10 = THREADS = SIZES
            f = full_scan[tidx]
            s = size_scan[tidx]
            if tidx >= d:
                f += full_scan[tidx - d]
                s += size_scan[tidx - d]
            cute.arch.sync_threads()
            full_scan[tidx] = f
            size_scan[tidx] = s
            cute.arch.sync_threads()
            d *= 2
        n_full_all = full_scan[THREADS - 1]
        n_partial = size_scan[SIZES - 1]

        # ---- write: full splits, partial splits by decreasing size, then -1 for the idle slots
        pos_full = full_scan[tidx] - my_full
        for k in cutlass.range_constexpr(PER_THREAD):
            i = first + k
            if i < b:
                for s in cutlass.range(0, n_full[k], 1, unroll=1):
                    p = pos_full + s
                    order[p // slots, p % slots] = i * slots + s
                pos_full += n_full[k]
                if rest[k] != 0:
                    key = SIZES - cutlass.min(cutlass.max(rest[k], 1), SIZES - 1)
                    # key >= 1: the splits of larger keys (smaller sizes) start after size_scan[key - 1]
                    p = n_full_all + size_scan[key - 1] + cute.arch.atomic_add(st.cursor.data_ptr() + key, I32(1),
                                                                               scope="cta")
                    order[p // slots, p % slots] = i * slots + n_full[k]
        for p in cutlass.range(n_full_all + n_partial + tidx, b * slots, THREADS, unroll=1):
            order[p // slots, p % slots] = -1


def fake_arguments(k: SplitOrderKernel) -> tuple:
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


def host_order(lens: list[int], chunk: int, slots: int) -> list[int]:
    """The order in plain Python, as the kernel builds it (ties among equal partial sizes in
    sequence order here; the kernel's atomics may order them differently)."""
    n = [-(-s // TILE) for s in lens]
    full = [(i * slots + s) for i, k in enumerate(n) for s in range(k // chunk)]
    partial = sorted(((min(max(k % chunk, 1), SIZES - 1), i) for i, k in enumerate(n) if k % chunk or k == 0),
                     key=lambda x: (-x[0], x[1]))
    out = full + [i * slots + n[i] // chunk for _, i in partial]
    return out + [-1] * (len(lens) * slots - len(out))
