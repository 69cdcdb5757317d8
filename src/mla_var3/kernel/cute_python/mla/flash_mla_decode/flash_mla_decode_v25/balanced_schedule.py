"""The schedule kernel of flash_mla_decode_v25: which KV tiles each persistent split CTA runs,
balanced by cost over the whole batch (one CTA of 1024 threads, launched before the split kernel
in the same stream, so a CUDA graph replayed with new lengths gets a new schedule).

Why: v14-v21 gave every split of `chunk` tiles its own CTA. A ragged batch (the bench's varlen
cells, lengths ~ N(seqlen, seqlen / 2)) then has about 1.4 x b splits of uneven size for 132
SMs, and the last wave runs on a few SMs: at seqlen 1024, v21's varlen cells take 1.5x its
fixed-length time for the same number of keys (FlashMLA: 1.2x), and smaller splits only add
per-split overhead (v17's tuning: chunk 8 -> 83 us, 18 -> 69 us at h_q=16).

The model: sequence i costs n_i + seq_cost units (n_i = its 64-key tiles; seq_cost stands for the
per-item overhead of Q load, pipeline fill and epilogue; an empty sequence costs 0). Laid end to
end they span T units; part p (one CTA per row block) takes units [B(p), B(p + 1)) with
B(p) = p * base + min(p, rem), base = T // P, rem = T % P: every part within one unit of T / P.
A part's overhead units of sequence i cover no tile, so only the tiles are split.
Written here:
- prefix[i] = the first unit of sequence i (exclusive scan of the costs), prefix[b] = T;
- part_first[p] = the sequence whose units hold B(p) (b when B(p) = T: nothing left), p = 0..P.
The split and combine kernels derive the rest (a sequence's parts, its split slots) with the
arithmetic below (`part_of`, `first_part_from`), mirrored in Python by `host_schedule`.
Each thread takes up to 4 consecutive sequences (b <= 4096, checked on the host); the scan is
Hillis-Steele over 1024 entries in shared memory (as common/split_order.py's).
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
I32 = cutlass.Int32


@cute.jit
def part_bound(p, base, rem):
    """B(p): the first unit of part p."""
    return p * base + cutlass.min(p, rem)


@cute.jit
def part_of(x, base, rem):
    """The part whose units hold unit x (0 <= x < T)."""
    big = rem * (base + 1)                      # the first `rem` parts hold base + 1 units
    p = x // (base + 1)
    if x >= big:
        p = rem + (x - big) // cutlass.max(base, 1)
    return p


@cute.jit
def first_part_from(x, base, rem):
    """The first part p with B(p) >= x (0 <= x <= T)."""
    big = rem * (base + 1)
    p = (x + base) // (base + 1)
    if x > big:
        p = rem + (x - big + base - 1) // cutlass.max(base, 1)
    return p


class BalancedScheduleKernel:
    """Constexpr config: `seq_cost`, the units a sequence costs beyond its tiles."""

    def __init__(self, seq_cost: int):
        if not isinstance(seq_cost, int) or seq_cost < 0:
            raise ValueError(f"seq_cost: expected an int >= 0 (tiles of overhead per sequence), got {seq_cost!r}")
        self.seq_cost = seq_cost

    @cute.jit
    def __call__(self, seqlens: cute.Tensor, prefix: cute.Tensor, part_first: cute.Tensor, stream):
        @cute.struct
        class Storage:
            scan: cute.struct.MemRange[I32, THREADS]

        self.storage = Storage
        self.balanced_schedule_kernel(seqlens, prefix, part_first).launch(
            grid=(1, 1, 1), block=(THREADS, 1, 1), stream=stream)

    @cute.kernel
    def balanced_schedule_kernel(self, seqlens: cute.Tensor, prefix: cute.Tensor, part_first: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        b = seqlens.shape[0]
        parts = part_first.shape[0] - 1
        st = SmemAllocator().allocate(self.storage)
        scan = st.scan.get_tensor(cute.make_layout(THREADS))

        # ---- this thread's sequences and their costs
        first = tidx * PER_THREAD
        cost = cute.make_rmem_tensor((PER_THREAD,), I32)
        mine = I32(0)
        for k in cutlass.range_constexpr(PER_THREAD):
            cost[k] = 0
            if first + k < b:
                n = (seqlens[first + k] + TILE - 1) // TILE
                if n > 0:
                    cost[k] = n + self.seq_cost
            mine += cost[k]
        scan[tidx] = mine
        cute.arch.sync_threads()

        # ---- inclusive scan of the per-thread costs
        d = 1
        for _ in cutlass.range_constexpr(10):            # 2^10 = THREADS
            f = scan[tidx]
            if tidx >= d:
                f += scan[tidx - d]
            cute.arch.sync_threads()
            scan[tidx] = f
            cute.arch.sync_threads()
            d *= 2
        total = scan[THREADS - 1]
        base = total // parts
        rem = total - base * parts

        # ---- prefix, and the parts whose first unit lies in each of this thread's sequences
        c = scan[tidx] - mine
        for k in cutlass.range_constexpr(PER_THREAD):
            i = first + k
            if i < b:
                prefix[i] = c
                if cost[k] > 0:
                    p = first_part_from(c, base, rem)
                    while p < parts and part_bound(p, base, rem) < c + cost[k]:
                        part_first[p] = i
                        p += 1
                c += cost[k]
        if tidx == 0:
            prefix[b] = total
        # parts that start at T (nothing left for them) and the sentinel part_first[parts]
        for p in cutlass.range(first_part_from(total, base, rem) + tidx, parts + 1, THREADS, unroll=1):
            part_first[p] = b


def fake_arguments(k: BalancedScheduleKernel) -> tuple:
    """Fake tensors in __call__'s order: seqlens [b] i32, prefix [b + 1] i32, part_first [parts + 1] i32."""
    b = cute.sym_int(symbol="b")
    b1 = cute.sym_int(symbol="b_plus_1")
    p1 = cute.sym_int(symbol="parts_plus_1")
    return (make_fake_compact_tensor(I32, (b,), assumed_align=4), make_fake_compact_tensor(I32, (b1,), assumed_align=4),
            make_fake_compact_tensor(I32, (p1,), assumed_align=4), make_fake_stream(use_tvm_ffi_env_stream=True))


def launch_arguments(cache_seqlens, ws) -> tuple:
    if cache_seqlens.shape[0] > MAX_B:
        raise ValueError(f"cache_seqlens: the schedule kernel takes b <= {MAX_B}, got {cache_seqlens.shape[0]}")
    return cache_seqlens, ws["prefix"], ws["part_first"]


# ---------------------------------------------------------------- the same schedule in Python
def _bounds(total: int, parts: int) -> tuple[int, int]:
    return total // parts, total % parts


def host_schedule(lens: list[int], parts: int, seq_cost: int) -> tuple[list[int], list[int]]:
    """(prefix [b + 1], part_first [parts + 1]) as the kernel writes them."""
    tiles = [-(-s // TILE) for s in lens]
    costs = [n + seq_cost if n > 0 else 0 for n in tiles]
    prefix = [0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    base, rem = _bounds(prefix[-1], parts)
    part_first = []
    for p in range(parts + 1):
        at = p * base + min(p, rem)
        owner = next((i for i, c in enumerate(costs) if c and prefix[i] <= at < prefix[i] + c), len(lens))
        part_first.append(owner)
    return prefix, part_first


def host_items(lens: list[int], parts: int, seq_cost: int) -> list[list[tuple[int, int, int, int, int]]]:
    """Per part, its items (sequence, first tile, end tile, split slot, splits of that sequence), as
    the split kernel walks them: the reference the CPU tests check the schedule against."""
    tiles = [-(-s // TILE) for s in lens]
    prefix, part_first = host_schedule(lens, parts, seq_cost)
    base, rem = _bounds(prefix[-1], parts)

    def part_of(x):
        big = rem * (base + 1)
        return x // (base + 1) if x < big else rem + (x - big) // max(base, 1)

    out = []
    for p in range(parts):
        lo_u, hi_u = p * base + min(p, rem), (p + 1) * base + min(p + 1, rem)
        items = []
        for i in range(part_first[p], min(part_first[p + 1] + 1, len(lens))):
            lo = max(lo_u - prefix[i] - seq_cost, 0)
            hi = min(hi_u - prefix[i] - seq_cost, tiles[i])
            if hi > lo:
                p_first = part_of(prefix[i] + seq_cost)
                p_last = part_of(prefix[i] + seq_cost + tiles[i] - 1)
                items.append((i, lo, hi, i + p, p_last - p_first + 1))
        out.append(items)
    return out
