"""ct_flash_mla_decode_v8's balanced schedule: ct_flash_mla_decode_v4's, plus the LAZY constant that
selects kernel.lazy_update. Every block takes an equal share of the batch's KV tiles, across
sequence boundaries, and a combine kernel merges the pieces.

Why: v3 splits each sequence into NUM_SPLITS equal parts, so on a ragged batch a block's work
follows its sequence's length (1 to 22 tiles at b=128 seqlen=4096 varlen, 8 splits), the longest
sequences' last splits run in the tail, and more splits cost more than they balance (a block's
fixed cost, the Q tile and the pipeline fill, measured 347 -> 414 -> 627 us for 8 -> 16 -> 32
splits). Here the grid is (row tiles, PARTS) and part p walks the tiles [g(p), g(p + 1)) of the
batch's tiles laid end to end in sequence order, g(p) = p * T // PARTS (T = sum of cdiv(seqlen,
BLOCK_N)): at most b + PARTS - 1 pieces in all, each part within one tile of T / PARTS.

- `ct_flash_mla_decode_v8_schedule_kernel`, grid (PARTS,): from one [B_POW2] load of the lengths,
  T, part p's tile range [g0, g1) and the sequences [first, last) it overlaps (PartMeta), and every
  sequence's first tile in the batch (TileStart). A kernel of its own: the two kernels below read
  these as scalars (`ct.gather`), because a pipelined loop whose bounds come from a tile reduction
  does not compile (split kernel) or hangs on the H200 (combine): docs/knowledge/languages/cutile/
  anti-patterns/loop-bounds-from-a-tile-reduction.md.
- `ct_flash_mla_decode_v8_balanced_kernel`, grid (row tiles, PARTS): for each sequence s in
  [first, last), v3's tile loop over its piece [t0, t1) (v3's `_kv_step`, unmasked then masked),
  then the piece's O / l (float32) and log2-domain lse into slot p + s of the workspace. Slots
  are unique: along the walk each new piece advances p, s or both. Every (p, s) in [first, last)
  writes its slot, also an empty piece (a sequence without keys between two others, or a part
  with no tiles when T < PARTS): lse -inf and O 0.
- `ct_flash_mla_decode_v8_balanced_combine_kernel`, grid (cdiv(s_q*h_q, BLOCK_R), b, 512 / BLOCK_D)
  (v6: the output columns in blocks of BLOCK_D, so a small batch still fills the GPU; v7: SLOTS
  slots merged per loop iteration, so a sequence over many parts is a short chain; v8: in two
  passes with elementwise accumulators, reduced over the slots once after each loop): sequence
  s's tiles [start, end) lie in parts p_first = ceil((start + 1) * PARTS / T) - 1 through
  p_last = ceil(end * PARTS / T) - 1 (the last part whose first tile is <= start, resp. end - 1),
  each of which wrote slot p + s; an online log2-domain merge of those slots gives out and the
  natural-log lse. A sequence with no keys reads nothing: out 0, lse +inf (v3's convention).

Everything is computed on the device from cache_seqlens inside the call (no host schedule): a CUDA
graph replayed with new lengths stays correct. The workspace is [b + PARTS, s_q*h_q, 512] f32 and
[b + PARTS, s_q*h_q] f32, sized by the shape only. `ct_flash_mla_decode_v8.host_pieces` mirrors the schedule in Python.
"""
from __future__ import annotations

import math

import cuda.tile as ct

from .kernel import D_QK, D_ROPE, D_V, LN2, LOG2E, NEG_BIG, PAGE, _array, _kv_step, pow2_at_least

ConstInt = ct.Constant[int]


def _tile_ends(Seqlens, BLOCK_N, B_POW2):
    """Every sequence's KV tile count and the running end of the batch's tiles (inclusive scan),
    from one [B_POW2] load of the lengths (zero past b)."""
    lens = ct.load(Seqlens, index=(0,), shape=(B_POW2,), padding_mode=ct.PaddingMode.ZERO)
    tiles = (lens + (BLOCK_N - 1)) // BLOCK_N
    return tiles, ct.cumsum(tiles, axis=0)


META = 4                       # PartMeta per part: first sequence, end sequence, first tile, end tile


@ct.kernel
def ct_flash_mla_decode_v8_schedule_kernel(Seqlens, PartMeta, TileStart, BLOCK_N: ConstInt, B_POW2: ConstInt,
                                           PARTS: ConstInt):
    """Seqlens [b] i32 -> PartMeta [PARTS * 4] i32 (per part: the sequences [first, last) it
    overlaps and its tiles [g0, g1) of the batch) and TileStart [b] i32 (each sequence's first tile
    in the batch). Grid (PARTS,). A kernel of its own because the warp-specialized split kernel
    does not compile (tileiras 13.4 fails) when its loop bounds come from tile reductions; scalars
    it reads itself are fine there."""
    part = ct.bid(0)
    tiles, ends = _tile_ends(Seqlens, BLOCK_N, B_POW2)
    total = ct.sum(tiles)
    g0 = part * total // PARTS
    g1 = (part + 1) * total // PARTS
    one = ct.full((B_POW2,), 1, dtype=ct.int32)
    zero = ct.full((B_POW2,), 0, dtype=ct.int32)
    first = ct.sum(ct.where(ends <= g0, one, zero))          # sequences that end at or before g0
    last = ct.sum(ct.where(ends - tiles < g1, one, zero))    # sequences that start before g1
    ct.store(PartMeta, index=(part * META,), tile=first)
    ct.store(PartMeta, index=(part * META + 1,), tile=last)
    ct.store(PartMeta, index=(part * META + 2,), tile=g0)
    ct.store(PartMeta, index=(part * META + 3,), tile=g1)
    if part == 0:
        ct.store(TileStart, index=(0,), tile=ends - tiles)


@ct.kernel(occupancy=1, num_worker_warps=8)
def ct_flash_mla_decode_v8_balanced_kernel(Q, KV, BlockTable, Seqlens, PartMeta, TileStart, PartO, PartLse,
                                           scale_log2: float, S_Q: ConstInt, H_Q: ConstInt, BLOCK_M: ConstInt,
                                           BLOCK_N: ConstInt, KV_LATENCY: ConstInt, LAZY: ConstInt):
    """Q [b, s_q*h_q, 576] bf16; KV [num_blocks, 64, 576] bf16; BlockTable [b, max_blocks] i32;
    Seqlens [b] i32; PartMeta [PARTS * 4] and TileStart [b] i32 (the schedule kernel's);
    PartO [b + PARTS, s_q*h_q, 512] f32; PartLse [b + PARTS, s_q*h_q] f32 (log2 domain);
    scale_log2 = softmax_scale * log2(e)."""
    rt = ct.bid(0)                 # row tile of the s_q*h_q query rows
    part = ct.bid(1)               # this block's share of the batch's tiles
    first = ct.gather(PartMeta, (part * META,))
    last = ct.gather(PartMeta, (part * META + 1,))
    g0 = ct.gather(PartMeta, (part * META + 2,))
    g1 = ct.gather(PartMeta, (part * META + 3,))

    rows = rt * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32)            # [BLOCK_M]
    key_in_tile = ct.arange(BLOCK_N, dtype=ct.int32)                    # [BLOCK_N]
    for s in range(first, last):
        seqlen = ct.gather(Seqlens, (s,))
        n_tiles = ct.cdiv(seqlen, BLOCK_N)
        start = ct.gather(TileStart, (s,))                # s's first tile in the batch
        t0 = min(max(g0 - start, 0), n_tiles)
        t1 = max(min(g1 - start, n_tiles), t0)
        mask_start = max(seqlen - S_Q + 1, 0) // BLOCK_N
        cut = min(max(t0, mask_start), t1)                              # t0 <= cut <= t1

        q_nope = ct.load(Q, index=(s, rt, 0), shape=(1, BLOCK_M, D_V),
                         padding_mode=ct.PaddingMode.ZERO).reshape((BLOCK_M, D_V))
        q_rope = ct.load(Q, index=(s, rt, D_V // D_ROPE), shape=(1, BLOCK_M, D_ROPE),
                         padding_mode=ct.PaddingMode.ZERO).reshape((BLOCK_M, D_ROPE))
        n_vis = (seqlen - S_Q + 1 + rows // H_Q).reshape((BLOCK_M, 1))
        m_i = ct.full((BLOCK_M, 1), NEG_BIG, dtype=ct.float32)
        l_i = ct.full((BLOCK_M, 1), 0.0, dtype=ct.float32)
        acc = ct.full((BLOCK_M, D_V), 0.0, dtype=ct.float32)
        for j in range(t0, cut):
            m_i, l_i, acc = _kv_step(KV, BlockTable, s, j, q_nope, q_rope, m_i, l_i, acc, scale_log2,
                                     seqlen, n_vis, key_in_tile, BLOCK_M, BLOCK_N, KV_LATENCY, False, LAZY)
        for j in range(cut, t1):
            m_i, l_i, acc = _kv_step(KV, BlockTable, s, j, q_nope, q_rope, m_i, l_i, acc, scale_log2,
                                     seqlen, n_vis, key_in_tile, BLOCK_M, BLOCK_N, KV_LATENCY, True, LAZY)

        seen = l_i > 0.0
        l_safe = ct.where(seen, l_i, ct.full((BLOCK_M, 1), 1.0, dtype=ct.float32))
        o = acc / l_safe
        slot = part + s
        ct.store(PartO, index=(slot, rt, 0), tile=o.reshape((1, BLOCK_M, D_V)))
        lse2 = ct.where(seen, m_i + ct.log2(l_safe), ct.full((BLOCK_M, 1), -math.inf, dtype=ct.float32))
        ct.store(PartLse, index=(slot, rt), tile=lse2.reshape((1, BLOCK_M)))


@ct.kernel(occupancy=2)
def ct_flash_mla_decode_v8_balanced_combine_kernel(PartO, PartLse, Seqlens, PartMeta, TileStart, Out, Lse,
                                                   S_Q: ConstInt, H_Q: ConstInt, BLOCK_R: ConstInt,
                                                   BLOCK_N: ConstInt, PARTS: ConstInt, BLOCK_D: ConstInt,
                                                   SLOTS: ConstInt):
    """PartO [b + PARTS, s_q*h_q, 512] f32, PartLse [b + PARTS, s_q*h_q] f32 (log2 domain),
    Seqlens [b] i32, PartMeta / TileStart (the schedule kernel's) -> Out [b, s_q*h_q, 512] bf16,
    Lse [b, h_q, s_q] f32 (natural log). The loop bounds come from scalars every warp reads itself
    (ct.gather): computed from a tile reduction, the pipelined loop's producer warp did not see
    them and the kernel hung on the H200.

    v7: SLOTS consecutive slots per iteration (one [SLOTS, BLOCK_R, BLOCK_D] load through a view that
    steps one slot at a time), so a sequence spread over many parts takes cdiv(slots, SLOTS)
    dependent iterations instead of one per slot. Slots of the batch that are not this sequence's
    get lse -inf (weight 0); their O is finite (the workspace starts zeroed, every write is
    finite), so 0 * O stays 0. Slots past the workspace's end are TMA-padded (-inf, 0)."""
    rt = ct.bid(0)
    bi = ct.bid(1)
    cb = ct.bid(2)                 # v6: block of BLOCK_D output columns
    total = max(ct.gather(PartMeta, ((PARTS - 1) * META + 3,)), 1)     # the last part's end: T
    seqlen = ct.gather(Seqlens, (bi,))
    n_tiles = ct.cdiv(seqlen, BLOCK_N)
    start = ct.gather(TileStart, (bi,))
    end = start + n_tiles
    p_first = ((start + 1) * PARTS + total - 1) // total - 1
    p_last = (end * PARTS + total - 1) // total - 1
    p_end = p_first + min(n_tiles, 1) * (p_last + 1 - p_first)         # no keys: no slots

    m = ct.full((BLOCK_R, 1), -math.inf, dtype=ct.float32)
    w_sum = ct.full((BLOCK_R, 1), 0.0, dtype=ct.float32)
    acc = ct.full((BLOCK_R, BLOCK_D), 0.0, dtype=ct.float32)
    if SLOTS == 1:
        # One slot per iteration: v6's loop as it was. The view below at one slot compiles, at
        # 512 columns, to 15.8 KB of stack per thread (128 registers at occupancy 2).
        for p in range(p_first, p_end):
            lse_p = ct.load(PartLse, index=(p + bi, rt), shape=(1, BLOCK_R),
                            padding_mode=ct.PaddingMode.NEG_INF).reshape((BLOCK_R, 1))
            o = ct.load(PartO, index=(p + bi, rt, cb), shape=(1, BLOCK_R, BLOCK_D),
                        padding_mode=ct.PaddingMode.ZERO).reshape((BLOCK_R, BLOCK_D))
            m_new = ct.maximum(m, lse_p)
            m_ref = ct.where(m_new > -math.inf, m_new, ct.full((BLOCK_R, 1), 0.0, dtype=ct.float32))
            alpha = ct.exp2(m - m_ref)            # 0 while nothing was seen (m = -inf)
            w = ct.exp2(lse_p - m_ref)            # 0 for a piece that saw nothing of the row
            acc = acc * alpha + w * o
            w_sum = w_sum * alpha + w
            m = m_new
    else:
        # v8: two passes with no reduction across the slot axis inside a loop (v7's per-iteration
        # max and sum over the slots put shared-memory reductions and 36 BAR.SYNCs in its loop):
        # first every slot's lse into an elementwise [SLOTS, BLOCK_R] max, then the weighted sum of
        # O into an elementwise [SLOTS, BLOCK_R, BLOCK_D] accumulator; each reduced once, after.
        lse_view = PartLse.tiled_view((SLOTS, BLOCK_R), padding_mode=ct.PaddingMode.NEG_INF,
                                      traversal_steps=(1, BLOCK_R))
        o_view = PartO.tiled_view((SLOTS, BLOCK_R, BLOCK_D), padding_mode=ct.PaddingMode.ZERO,
                                  traversal_steps=(1, BLOCK_R, BLOCK_D))
        n_slots = p_end - p_first
        n_chunks = ct.cdiv(n_slots, SLOTS)
        slot_k = ct.arange(SLOTS, dtype=ct.int32)
        no_pen = ct.full((SLOTS,), 0.0, dtype=ct.float32)
        out_pen = ct.full((SLOTS,), -math.inf, dtype=ct.float32)
        m3 = ct.full((SLOTS, BLOCK_R), -math.inf, dtype=ct.float32)
        for c in range(n_chunks):
            # Slots past this sequence's last: lse -inf (added, so a [SLOTS, 1] column broadcasts).
            pen = ct.where(c * SLOTS + slot_k < n_slots, no_pen, out_pen).reshape((SLOTS, 1))
            m3 = ct.maximum(m3, lse_view.load((p_first + bi + c * SLOTS, rt)).reshape((SLOTS, BLOCK_R)) + pen)
        m = ct.max(m3, axis=0).reshape((BLOCK_R, 1))
        m_ref = ct.where(m > -math.inf, m, ct.full((BLOCK_R, 1), 0.0, dtype=ct.float32)).reshape((1, BLOCK_R))
        acc3 = ct.full((SLOTS, BLOCK_R, BLOCK_D), 0.0, dtype=ct.float32)
        w3 = ct.full((SLOTS, BLOCK_R), 0.0, dtype=ct.float32)
        for c in range(n_chunks):
            s0 = p_first + bi + c * SLOTS                 # this iteration's first slot
            pen = ct.where(c * SLOTS + slot_k < n_slots, no_pen, out_pen).reshape((SLOTS, 1))
            w = ct.exp2(lse_view.load((s0, rt)).reshape((SLOTS, BLOCK_R)) + pen - m_ref)   # 0 off-sequence
            o = o_view.load((s0, rt, cb)).reshape((SLOTS, BLOCK_R, BLOCK_D))
            acc3 = acc3 + w.reshape((SLOTS, BLOCK_R, 1)) * o
            w3 = w3 + w
        acc = ct.sum(acc3, axis=0)
        w_sum = ct.sum(w3, axis=0).reshape((BLOCK_R, 1))
    seen = m > -math.inf
    m_safe = ct.where(seen, m, ct.full((BLOCK_R, 1), 0.0, dtype=ct.float32))
    l_safe = ct.where(seen, w_sum, ct.full((BLOCK_R, 1), 1.0, dtype=ct.float32))
    out = acc / l_safe
    ct.store(Out, index=(bi, rt, cb), tile=out.astype(Out.dtype).reshape((1, BLOCK_R, BLOCK_D)))
    lse = ct.where(seen, (m_safe + ct.log2(l_safe)) * LN2,
                   ct.full((BLOCK_R, 1), math.inf, dtype=ct.float32)).reshape((BLOCK_R,))
    rows = rt * BLOCK_R + ct.arange(BLOCK_R, dtype=ct.int32)
    # Column block 0 writes Lse: cb * S_Q * H_Q pushes every row of the others past the limit.
    ct.scatter(Lse, (bi, rows % H_Q, rows // H_Q), lse, mask=rows + cb * (S_Q * H_Q) < S_Q * H_Q)


# ---- host side -------------------------------------------------------------------------------

def balanced_grid(s_q: int, h_q: int, block_m: int, parts: int) -> tuple[int, int, int]:
    return ((s_q * h_q + block_m - 1) // block_m, parts, 1)


def balanced_combine_grid(b: int, s_q: int, h_q: int, combine_rows: int, combine_cols: int = D_V) -> tuple[int, int, int]:
    return ((s_q * h_q + combine_rows - 1) // combine_rows, b, D_V // combine_cols)


def schedule_grid(parts: int) -> tuple[int, int, int]:
    return (parts, 1, 1)


def balanced_workspace(b: int, s_q: int, h_q: int, parts: int, device) -> dict:
    """The schedule (PartMeta, TileStart) and the pieces' partials, one slot per part + sequence
    in [0, b + parts - 1): sized by the shape only. The schedule kernel writes both schedule arrays
    each call. v7: the partials start zeroed (once, at allocation): the combine loads SLOTS slots at
    a time, some of them never written, and weighs them 0, which needs a finite O there."""
    import torch
    slots, rows = b + parts, s_q * h_q
    return {"part_meta": torch.empty((parts * META,), dtype=torch.int32, device=device),
            "tile_start": torch.empty((b,), dtype=torch.int32, device=device),
            "part_o": torch.zeros((slots, rows, D_V), dtype=torch.float32, device=device),
            "part_lse": torch.zeros((slots, rows), dtype=torch.float32, device=device)}


def schedule_args(cache_seqlens, part_meta, tile_start, block_n: int, parts: int) -> tuple:
    assert tuple(part_meta.shape) == (parts * META,), part_meta.shape
    return (cache_seqlens, part_meta, tile_start, block_n, pow2_at_least(cache_seqlens.shape[0]), parts)


def balanced_kernel_args(q, kv_cache, block_table, cache_seqlens, part_meta, tile_start, part_o, part_lse,
                         softmax_scale: float, block_m: int, block_n: int, kv_latency: int, parts: int,
                         lazy: bool = False) -> tuple:
    b, s_q, h_q, d = q.shape
    assert d == D_QK and tuple(kv_cache.shape[1:]) == (PAGE, 1, D_QK), (q.shape, kv_cache.shape)
    assert kv_cache.is_contiguous() and kv_cache.data_ptr() % 16 == 0, \
        "kv_cache must be contiguous and 16-byte aligned"
    assert tuple(part_o.shape) == (b + parts, s_q * h_q, D_V), part_o.shape
    return (q.view(b, s_q * h_q, D_QK), kv_cache.view(kv_cache.shape[0], PAGE, D_QK), block_table, cache_seqlens,
            part_meta, tile_start, part_o, part_lse, float(softmax_scale) * LOG2E, s_q, h_q, block_m, block_n,
            kv_latency, int(lazy))


def balanced_combine_args(part_o, part_lse, cache_seqlens, part_meta, tile_start, out, lse, combine_rows: int,
                          block_n: int, parts: int, combine_cols: int = D_V, combine_slots: int = 1) -> tuple:
    b, s_q, h_q, _ = out.shape
    assert tuple(part_o.shape) == (b + parts, s_q * h_q, D_V), part_o.shape
    assert D_V % combine_cols == 0 and combine_slots in (1, 2, 4, 8, 16), (combine_cols, combine_slots)
    return (part_o, part_lse, cache_seqlens, part_meta, tile_start, out.view(b, s_q * h_q, D_V), lse, s_q, h_q,
            combine_rows, block_n, parts, combine_cols, combine_slots)


def schedule_export_signatures(b: int, block_n: int, parts: int) -> list:
    from cuda.tile.compilation import CallingConvention, KernelSignature
    params = [_array(ct.int32, 1), _array(ct.int32, 1), _array(ct.int32, 1), block_n, pow2_at_least(b), parts]
    return [KernelSignature(params, CallingConvention.cutile_python_v1())]


def balanced_export_signatures(s_q: int, h_q: int, block_m: int, block_n: int, kv_latency: int,
                               lazy: bool = False) -> list:
    """KernelSignature of the balanced split kernel (the alignment facts of v3's split kernel)."""
    from cuda.tile.compilation import CallingConvention, KernelSignature, ScalarConstraint
    params = [
        _array(ct.bfloat16, 3, 64, 16),       # Q
        _array(ct.bfloat16, 3, 64, 16),       # KV
        _array(ct.int32, 2),                  # BlockTable
        _array(ct.int32, 1),                  # Seqlens
        _array(ct.int32, 1),                  # PartMeta
        _array(ct.int32, 1),                  # TileStart
        _array(ct.float32, 3, 64, 16),        # PartO [slots, rows, 512]
        _array(ct.float32, 2),                # PartLse [slots, rows]
        ScalarConstraint(ct.float32),         # scale_log2
        s_q, h_q, block_m, block_n, kv_latency, int(lazy),
    ]
    return [KernelSignature(params, CallingConvention.cutile_python_v1())]


def balanced_combine_export_signatures(s_q: int, h_q: int, combine_rows: int, block_n: int, parts: int,
                                       combine_cols: int = D_V, combine_slots: int = 1) -> list:
    from cuda.tile.compilation import CallingConvention, KernelSignature
    params = [
        _array(ct.float32, 3, 64, 16),        # PartO
        _array(ct.float32, 2),                # PartLse
        _array(ct.int32, 1),                  # Seqlens
        _array(ct.int32, 1),                  # PartMeta
        _array(ct.int32, 1),                  # TileStart
        _array(ct.bfloat16, 3, 64, 16),       # Out
        _array(ct.float32, 3),                # Lse
        s_q, h_q, combine_rows, block_n, parts, combine_cols, combine_slots,
    ]
    return [KernelSignature(params, CallingConvention.cutile_python_v1())]
