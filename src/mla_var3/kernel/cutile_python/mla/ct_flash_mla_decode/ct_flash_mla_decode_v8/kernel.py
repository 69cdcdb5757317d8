"""ct_flash_mla_decode_v8's `schedule="sequence"` kernels: ct_flash_mla_decode_v3's, with v5's lazy
reference max (`lazy_update`, the LAZY constant) as the only change; v4's balanced schedule is
balanced.py, which reuses `_kv_step` from here. The rest of this docstring is v3's.

ct_flash_mla_decode_v3: cuTile MLA decode with split-KV and a combine kernel (FlashMLA's contract).

v2's block (docs/kernels/ct_flash_mla_decode.md) walks only a slice of its sequence's KV tiles,
and a second kernel merges the slices. Two kernels:
- `ct_flash_mla_decode_v8_split_kernel`, grid (row tiles, b, NUM_SPLITS): v2's kernel body (same
  TMA loads, shifted tail window, gathered page ids, HGMMA, online softmax) over the KV tiles
  [s*per, min(n_tiles, (s+1)*per)) of split s, per = cdiv(n_tiles, NUM_SPLITS), n_tiles =
  cdiv(seqlen, BLOCK_N). The split bounds are computed on the device from cache_seqlens (no
  host-side schedule: a CUDA graph replayed with new lengths stays correct). It writes partial
  results to the workspace: PartO [b, NUM_SPLITS, s_q*h_q, 512] float32, already divided by the
  split's own l, and PartLse [b, NUM_SPLITS, s_q*h_q] float32 in the LOG2 domain
  (log2 sum_k 2^(s_k * scale * log2 e), i.e. natural lse / ln 2). A split (or a row of a split)
  with no visible key writes lse = -inf and O = 0.
  With NUM_SPLITS = 1 (a compile-time constant) it is v2: the epilogue writes out / lse itself
  and the plan launches no combine.
- `ct_flash_mla_decode_v8_combine_kernel`, grid (cdiv(s_q*h_q, BLOCK_R), b), BLOCK_R = 8 rows
  by default, occupancy 2 (a memory-bound pass, pipelined TMA loads of the partials): per row,
  M = max_s lse_s, w_s = 2^(lse_s - M), out = sum_s w_s O_s / sum_s w_s (float32, rounded to
  bf16 once), lse = (M + log2 sum_s w_s) * ln 2 (natural log). Rows with no visible key in any
  split (M = -inf) get out 0 and lse +inf.

Run: python -m mla_var3.kernel ct_flash_mla_decode_v8 --check (GPU);
     python -m mla_var3.kernel ct_flash_mla_decode_v8 --compile-only --arch=sm_90a (CPU).

Split kernel (unchanged from v2 except the tile range and the epilogue)
- q is viewed as [b, s_q*h_q, 576]: row r is query token r // h_q, head r % h_q. One block per
  (BLOCK_M=64-row tile of those rows, sequence, split). The row tile is the fastest grid axis,
  then the sequence, then the split: all blocks of split 0 are issued first, and the blocks of
  one sequence's row tiles run side by side, sharing its pages through L2.
- The block walks its split's keys in KV tiles of BLOCK_N (default 64 = one page). Page id by
  ct.gather from block_table (the TMA producer warp's own LDG), then two TMA loads per tile: the
  BLOCK_Nx512 latent part (K_nope and V at once) and the BLOCK_Nx64 rope part.
  S = q_nope . K_nope^T + q_rope . K_rope^T (ct.mma, f32); online softmax in the log2 domain;
  acc[64, 512] += P(bf16) . V. Warp-specialized on sm_90: 2 consumer warpgroups
  (num_worker_warps=8) + a TMA producer; KV_LATENCY >= 8 double-buffers the KV loads.
- Masking only on KV tiles that can hold a masked key (j >= mask_start = (seqlen - s_q + 1) //
  BLOCK_N, the last tile for s_q = 1). The split's range [t0, t1) is cut at
  cut = min(max(t0, mask_start), t1) into an unmasked loop [t0, cut) and a masked loop [cut, t1);
  t0 <= cut <= t1 always (an empty split has t0 = t1), so no loop ever runs backwards. Cache
  rows past seqlen are NaN, so a masked tile is loaded as a window shifted back to end at the
  tile's last valid row (rows before the page: negative TMA coordinates, zero-filled; rows of
  the previous tile for BLOCK_N < 64) and those rows get S = -inf; see v2. Relies on the TMA
  path: `split_kernel_args` asserts a contiguous, 16-byte aligned cache.
  m starts at a finite -1e30, so a row that sees nothing in its split keeps l = 0: O = 0,
  lse = -inf for the combine (+inf / 0 in the direct NUM_SPLITS = 1 epilogue).
- Pages past ceil(seqlen/64) are never touched: every split's tiles lie in [0, n_tiles).
- TMA: the export signatures state the alignment facts cuTile needs (pitfall 15): C-contiguous
  arrays, bf16 / f32 tile strides multiples of 64 elements (576, 512, s_q*h_q*512, ...), bases
  16-byte aligned. ct.launch derives the same facts from the torch tensors at run time.
- Index math is int32: the cache and PartO must each hold < 2^31 elements (the plan refuses
  more).

Exported sm_90 cubins (cuda-tile 1.7.0; cuobjdump -res-usage / -sass), every (s_q, h_q) of the
check grid:
- split kernel, 1 split: v2's cubin (168 registers, no stack/local, 222800 B shared, HGMMA x80,
  UTMALDG x27, UTMASTG x8, no HMMA / LDGSTS / ATOMG / UTMACCTL.IV) plus a few integer ops for
  the split bounds. 2..32 splits: the same, 214608 B shared, UTMASTG x16 (the f32 partial).
  block_n 32 / 16: 202320 / 171600 B shared, otherwise the same.
- combine kernel: 256 threads, 128 registers (occupancy 2), no stack; a TMA pipeline of the
  partials (BLOCK_R 8: 107656 B shared; 4: 79128 B; 16: 42104 B), out by UTMASTG.
"""
from __future__ import annotations

import math

import cuda.tile as ct

ConstInt = ct.Constant[int]

PAGE = 64            # keys per page of the paged cache
D_QK = 576           # 512 latent + 64 rope
D_V = 512
D_ROPE = D_QK - D_V  # 64: the rope part is tile index D_V // D_ROPE = 8 in 64-column tiles
LOG2E = 1.0 / math.log(2.0)
LN2 = math.log(2.0)
NEG_BIG = -1.0e30    # finite "minus infinity" for the running max (see the module notes)
BLOCK_N_DEFAULT = 64     # keys per KV tile = one page
KV_LATENCY_DEFAULT = 8   # >= 8: cuTile double-buffers the KV loads
COMBINE_ROWS_DEFAULT = 8     # query rows per combine block
COMBINE_COLS = (64, 128, 256, 512)   # v6: output columns per combine block (a divisor of D_V)
COMBINE_SLOTS = (1, 2, 4, 8, 16)     # v7: partial slots (splits) merged per combine iteration
MAX_SPLITS = 32
LAZY_LOG2 = 8.0     # v5: the reference max moves when a tile's max beats it by more than 2^8


def _kv_step(KV, BlockTable, bi, j, q_nope, q_rope, m_i, l_i, acc, scale_log2, seqlen, n_vis,
             key_in_tile, BLOCK_M, BLOCK_N, KV_LATENCY, MASKED, LAZY):
    """KV tile j (keys j*BLOCK_N ..) of sequence bi: S, online softmax update, P.V. Inlined into
    the kernel; MASKED is a Python constant, so the unmasked copy carries no masking code.
    v5: with LAZY (a compile-time constant) the reference max moves only where a tile's max beats
    it by more than LAZY_LOG2, and the block multiplies acc by the correction only when some row's
    did (`lazy_update`)."""
    tiles_per_page = PAGE // BLOCK_N
    pj = j // tiles_per_page                       # page of the sequence
    # The page id through ct.gather: the TMA producer warp loads it itself (LDG into a register,
    # then a uniform register for the TMA coordinates). A 0-d ct.load instead went through
    # shared memory: all 256 consumer threads cp.async'ed the same word into one slot, which
    # compute-sanitizer's racecheck reports as a write-write race (v1).
    page = ct.gather(BlockTable, (bi, pj))
    sub = j % tiles_per_page                       # KV tile within the page
    if MASKED:
        # Cache rows past seqlen are NaN and 0 * NaN = NaN in P.V, so they must never be loaded.
        # Shift the window back so it ends at the last valid row: tile row t holds cache row
        # sub*BLOCK_N - shift + t of the page. Rows t < shift are either before the page
        # (negative coordinates: TMA zero-fills them) or valid rows of the previous KV tile
        # (BLOCK_N < 64); both are masked out of S below. The view steps one row at a time
        # (traversal_steps), so it is an ordinary TMA load through the host-built tensor map:
        # no device-side tensor map (v1's KV.slice built one, memcheck flagged its atomics), no
        # ct.where on the loaded tile (that turns the whole kernel into mma.sync + LDG + spills).
        # No latency hint here: with one, cuTile stops double-buffering the main loop's loads.
        shift = BLOCK_N - min(seqlen - j * BLOCK_N, BLOCK_N)        # 0 .. BLOCK_N - 1
        row0 = sub * BLOCK_N - shift
        kv_rows = KV.tiled_view((1, BLOCK_N, D_V), padding_mode=ct.PaddingMode.ZERO,
                                traversal_steps=(1, 1, D_V))
        kr_rows = KV.tiled_view((1, BLOCK_N, D_ROPE), padding_mode=ct.PaddingMode.ZERO,
                                traversal_steps=(1, 1, D_ROPE))
        kv = kv_rows.load((page, row0, 0)).reshape((BLOCK_N, D_V))
        kr = kr_rows.load((page, row0, D_V // D_ROPE)).reshape((BLOCK_N, D_ROPE))
    else:
        # One [BLOCK_N, 512] load serves as K_nope (QK^T) and as V (P.V): the values are the same
        # rows. KV_LATENCY >= 8 makes cuTile double-buffer these loads (shared memory 223 KB at
        # BLOCK_N = 64 instead of 158 KB).
        kv = ct.load(KV, index=(page, sub, 0), shape=(1, BLOCK_N, D_V), latency=KV_LATENCY,
                     padding_mode=ct.PaddingMode.ZERO).reshape((BLOCK_N, D_V))
        kr = ct.load(KV, index=(page, sub, D_V // D_ROPE), shape=(1, BLOCK_N, D_ROPE),
                     latency=KV_LATENCY, padding_mode=ct.PaddingMode.ZERO).reshape((BLOCK_N, D_ROPE))

    s = ct.mma(q_nope, ct.permute(kv, (1, 0)), ct.full((BLOCK_M, BLOCK_N), 0.0, dtype=ct.float32))
    s = ct.mma(q_rope, ct.permute(kr, (1, 0)), s)
    if MASKED:
        # Tile row t is key j*BLOCK_N - shift + t; rows t < shift are not keys of this tile
        # (zero rows or keys already counted), and causal rows see fewer keys still.
        key = (j * BLOCK_N - shift + key_in_tile).reshape((1, BLOCK_N))
        own = (key_in_tile >= shift).reshape((1, BLOCK_N))
        visible = own & (key < n_vis)                                   # [BLOCK_M, BLOCK_N]
        s = ct.where(visible, s, ct.full((BLOCK_M, BLOCK_N), -math.inf, dtype=ct.float32))

    # Online softmax in the log2 domain (scale > 0, so max(s) * scale = max(s * scale)).
    if LAZY:
        m_new, l_new, acc = lazy_update(s, kv, m_i, l_i, acc, scale_log2, BLOCK_M)
    else:
        m_new = ct.maximum(m_i, ct.max(s, axis=-1, keepdims=True) * scale_log2)
        p = ct.exp2(s * scale_log2 - m_new, flush_to_zero=True)         # masked: exp2(-inf) = 0
        alpha = ct.exp2(m_i - m_new, flush_to_zero=True)
        l_new = l_i * alpha + ct.sum(p, axis=-1, keepdims=True)
        acc = ct.mma(p.astype(ct.bfloat16), kv, acc * alpha)
    return m_new, l_new, acc


def lazy_update(s, kv, m_i, l_i, acc, scale_log2, BLOCK_M):
    """v5: the online-softmax step with a lazy reference max (flash_mla_decode_v19's idea, in
    cuTile). A row's reference m moves to the tile's max only when that beats it by more than
    LAZY_LOG2 (a factor 256), so P = 2^(s - m) <= 256 (exact in bf16's range; l and acc in f32)
    and lse = m + log2 l stays exact. The 64 x 512 acc is multiplied by the correction only when
    some row of the block moved (one block-wide branch); after a sequence's first tiles that is
    rare, so the multiply (128 FMULs per consumer thread per tile) mostly goes."""
    m_tile = ct.max(s, axis=-1, keepdims=True) * scale_log2
    grow = m_tile > m_i + LAZY_LOG2
    m_new = ct.where(grow, m_tile, m_i)
    p = ct.exp2(s * scale_log2 - m_new, flush_to_zero=True)             # masked: exp2(-inf) = 0
    alpha = ct.exp2(m_i - m_new, flush_to_zero=True)                    # 1 where the row did not move
    l_new = l_i * alpha + ct.sum(p, axis=-1, keepdims=True)
    moved = ct.sum(ct.where(grow, ct.full((BLOCK_M, 1), 1, dtype=ct.int32), ct.full((BLOCK_M, 1), 0, dtype=ct.int32)))
    if moved > 0:
        acc = acc * alpha
    acc = ct.mma(p.astype(ct.bfloat16), kv, acc)
    return m_new, l_new, acc



@ct.kernel(occupancy=1, num_worker_warps=8)
def ct_flash_mla_decode_v8_split_kernel(Q, KV, BlockTable, Seqlens, Out, Lse, PartO, PartLse,
                                        scale_log2: float, S_Q: ConstInt, H_Q: ConstInt,
                                        BLOCK_M: ConstInt, BLOCK_N: ConstInt, KV_LATENCY: ConstInt,
                                        NUM_SPLITS: ConstInt, LAZY: ConstInt):
    """Q [b, s_q*h_q, 576] bf16; KV [num_blocks, 64, 576] bf16; BlockTable [b, max_blocks] i32;
    Seqlens [b] i32; Out [b, s_q*h_q, 512] bf16 and Lse [b, h_q, s_q] f32 (written only when
    NUM_SPLITS = 1); PartO [b, NUM_SPLITS, s_q*h_q, 512] f32 and PartLse [b, NUM_SPLITS, s_q*h_q]
    f32, log2 domain (written when NUM_SPLITS > 1); scale_log2 = softmax_scale * log2(e)."""
    rt = ct.bid(0)                 # row tile of the s_q*h_q query rows
    bi = ct.bid(1)                 # sequence
    sp = ct.bid(2)                 # split of the sequence's KV tiles
    seqlen = ct.load(Seqlens, index=(bi,), shape=())

    # Q tile once: latent part [BLOCK_M, 512] and rope part [BLOCK_M, 64]; rows past s_q*h_q
    # are zero (they compute harmless finite garbage and are never stored).
    q_nope = ct.load(Q, index=(bi, rt, 0), shape=(1, BLOCK_M, D_V),
                     padding_mode=ct.PaddingMode.ZERO).reshape((BLOCK_M, D_V))
    q_rope = ct.load(Q, index=(bi, rt, D_V // D_ROPE), shape=(1, BLOCK_M, D_ROPE),
                     padding_mode=ct.PaddingMode.ZERO).reshape((BLOCK_M, D_ROPE))

    # How many keys each row sees: keys 0 .. seqlen - s_q + token (inclusive).
    rows = rt * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32)            # [BLOCK_M]
    n_vis = (seqlen - S_Q + 1 + rows // H_Q).reshape((BLOCK_M, 1))      # [BLOCK_M, 1]
    key_in_tile = ct.arange(BLOCK_N, dtype=ct.int32)                    # [BLOCK_N]

    # This split's KV tiles [t0, t1), from the length on the device (no host schedule).
    n_tiles = ct.cdiv(seqlen, BLOCK_N)
    per = ct.cdiv(n_tiles, NUM_SPLITS)
    t0 = min(sp * per, n_tiles)
    t1 = min(t0 + per, n_tiles)
    # KV tiles below mask_start hold only keys every row sees: no masking there.
    mask_start = max(seqlen - S_Q + 1, 0) // BLOCK_N
    cut = min(max(t0, mask_start), t1)                                  # t0 <= cut <= t1

    m_i = ct.full((BLOCK_M, 1), NEG_BIG, dtype=ct.float32)
    l_i = ct.full((BLOCK_M, 1), 0.0, dtype=ct.float32)
    acc = ct.full((BLOCK_M, D_V), 0.0, dtype=ct.float32)

    # Tiles below mask_start: no masking (the masking code costs registers, so it is peeled).
    for j in range(t0, cut):
        m_i, l_i, acc = _kv_step(KV, BlockTable, bi, j, q_nope, q_rope, m_i, l_i, acc, scale_log2,
                                 seqlen, n_vis, key_in_tile, BLOCK_M, BLOCK_N, KV_LATENCY, False, LAZY)
    # The last tile (s_q = 1) or last few tiles (causal), where they fall in this split: masked.
    for j in range(cut, t1):
        m_i, l_i, acc = _kv_step(KV, BlockTable, bi, j, q_nope, q_rope, m_i, l_i, acc, scale_log2,
                                 seqlen, n_vis, key_in_tile, BLOCK_M, BLOCK_N, KV_LATENCY, True, LAZY)

    # A row that saw a key has l >= 1 (its max contributes exp2(0)); l == 0 means none.
    seen = l_i > 0.0
    l_safe = ct.where(seen, l_i, ct.full((BLOCK_M, 1), 1.0, dtype=ct.float32))
    o = acc / l_safe                                 # acc is exactly 0 on rows that saw nothing
    if NUM_SPLITS == 1:
        # Direct epilogue (v2's): out and the natural-log lse, +inf where no key was visible.
        ct.store(Out, index=(bi, rt, 0), tile=o.astype(Out.dtype).reshape((1, BLOCK_M, D_V)))
        lse = ct.where(seen, (m_i + ct.log2(l_safe)) * LN2,
                       ct.full((BLOCK_M, 1), math.inf, dtype=ct.float32)).reshape((BLOCK_M,))
        ct.scatter(Lse, (bi, rows % H_Q, rows // H_Q), lse, mask=rows < S_Q * H_Q)
    else:
        # Partials for the combine: O / l in float32 and the log2-domain lse, -inf (and O = 0)
        # where the split holds no key this row sees. Rows past s_q*h_q fall outside the arrays
        # and the bounded stores drop them.
        ct.store(PartO, index=(bi, sp, rt, 0), tile=o.reshape((1, 1, BLOCK_M, D_V)))
        lse2 = ct.where(seen, m_i + ct.log2(l_safe),
                        ct.full((BLOCK_M, 1), -math.inf, dtype=ct.float32))
        ct.store(PartLse, index=(bi, sp, rt), tile=lse2.reshape((1, 1, BLOCK_M)))


@ct.kernel(occupancy=2)
def ct_flash_mla_decode_v8_combine_kernel(PartO, PartLse, Out, Lse, S_Q: ConstInt, H_Q: ConstInt,
                                          SPLITS_POW2: ConstInt, BLOCK_R: ConstInt, BLOCK_D: ConstInt,
                                          SLOTS: ConstInt):
    """PartO [b, splits, s_q*h_q, 512] f32, PartLse [b, splits, s_q*h_q] f32 (log2 domain)
    -> Out [b, s_q*h_q, 512] bf16, Lse [b, h_q, s_q] f32 (natural log). One block per
    (BLOCK_R rows, sequence, BLOCK_D output columns); SPLITS_POW2 = splits rounded up to a power
    of two (a tile shape). v6: the column blocks of one row block each redo the (cheap) lse
    merge; only column block 0 writes Lse.

    The split loop's bound is PartO's extent, not a constant: with a constant bound cuTile
    unrolls it and issues every split's load at once (255 registers, up to 230 KB of shared
    memory, spills at 8+ splits); with a run-time bound it is a warp-specialized TMA pipeline
    (sm_90: 256 threads, 128 registers at occupancy 2, no spills, ~6 stages of BLOCK_R x 512)."""
    rt = ct.bid(0)
    bi = ct.bid(1)
    cb = ct.bid(2)                 # v6: block of BLOCK_D output columns
    # Every split's lse of these rows at once; splits past the real count (and rows past
    # s_q*h_q) are padded with -inf, i.e. weight 0.
    lse_all = ct.load(PartLse, index=(bi, 0, rt), shape=(1, SPLITS_POW2, BLOCK_R),
                      padding_mode=ct.PaddingMode.NEG_INF).reshape((SPLITS_POW2, BLOCK_R))
    m = ct.max(lse_all, axis=0, keepdims=True).reshape((BLOCK_R, 1))    # [BLOCK_R, 1]
    seen = m > -math.inf                      # some split saw a key of this row
    m_safe = ct.where(seen, m, ct.full((BLOCK_R, 1), 0.0, dtype=ct.float32))

    acc = ct.full((BLOCK_R, BLOCK_D), 0.0, dtype=ct.float32)
    w_sum = ct.full((BLOCK_R, 1), 0.0, dtype=ct.float32)
    if SLOTS == 1:
        # One split per iteration: v6's loop as it was (the batched loop below at one slot
        # compiles, at 512 columns, to 15.6 KB of stack per thread).
        for s in range(PartO.shape[1]):
            lse_s = ct.load(PartLse, index=(bi, s, rt), shape=(1, 1, BLOCK_R),
                            padding_mode=ct.PaddingMode.NEG_INF).reshape((BLOCK_R, 1))
            w = ct.exp2(lse_s - m_safe)           # 0 for a split that saw nothing (lse = -inf)
            o = ct.load(PartO, index=(bi, s, rt, cb), shape=(1, 1, BLOCK_R, BLOCK_D),
                        padding_mode=ct.PaddingMode.ZERO).reshape((BLOCK_R, BLOCK_D))
            acc = acc + w * o
            w_sum = w_sum + w
    else:
        # v7: SLOTS splits per iteration; splits past the count are TMA-padded (lse -inf, O 0).
        # v8: elementwise [SLOTS, BLOCK_R, BLOCK_D] / [SLOTS, BLOCK_R] sums in the loop, reduced over
        # the splits once after it (no cross-warp reduction, no BAR.SYNC, inside the loop).
        acc3 = ct.full((SLOTS, BLOCK_R, BLOCK_D), 0.0, dtype=ct.float32)
        w3 = ct.full((SLOTS, BLOCK_R), 0.0, dtype=ct.float32)
        for c in range(ct.cdiv(PartO.shape[1], SLOTS)):
            lse_c = ct.load(PartLse, index=(bi, c, rt), shape=(1, SLOTS, BLOCK_R),
                            padding_mode=ct.PaddingMode.NEG_INF).reshape((SLOTS, BLOCK_R))
            w = ct.exp2(lse_c - m_safe.reshape((1, BLOCK_R)))   # 0 for a split that saw nothing
            o = ct.load(PartO, index=(bi, c, rt, cb), shape=(1, SLOTS, BLOCK_R, BLOCK_D),
                        padding_mode=ct.PaddingMode.ZERO).reshape((SLOTS, BLOCK_R, BLOCK_D))
            acc3 = acc3 + w.reshape((SLOTS, BLOCK_R, 1)) * o
            w3 = w3 + w
        acc = acc + ct.sum(acc3, axis=0)
        w_sum = w_sum + ct.sum(w3, axis=0).reshape((BLOCK_R, 1))
    # w_sum >= 1 where seen (the max split contributes 2^0); rows that saw nothing: 0 / +inf.
    l_safe = ct.where(seen, w_sum, ct.full((BLOCK_R, 1), 1.0, dtype=ct.float32))
    out = acc / l_safe
    ct.store(Out, index=(bi, rt, cb), tile=out.astype(Out.dtype).reshape((1, BLOCK_R, BLOCK_D)))
    lse = ct.where(seen, (m_safe + ct.log2(l_safe)) * LN2,
                   ct.full((BLOCK_R, 1), math.inf, dtype=ct.float32)).reshape((BLOCK_R,))
    rows = rt * BLOCK_R + ct.arange(BLOCK_R, dtype=ct.int32)
    # Column block 0 writes Lse: cb * S_Q * H_Q pushes every row of the others past the limit.
    ct.scatter(Lse, (bi, rows % H_Q, rows // H_Q), lse, mask=rows + cb * (S_Q * H_Q) < S_Q * H_Q)


def pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def check_tiling(block_m: int, block_n: int, kv_latency: int, num_splits: int, combine_rows: int,
                 combine_cols: int = D_V, combine_slots: int = 1) -> None:
    # BLOCK_M = 64: one HGMMA row block per warpgroup pair (M < 64 falls back to mma.sync,
    # pitfall 15; M = 128 doubles the f32 accumulator and spills).
    if block_m != 64:
        raise ValueError(f"block_m: expected 64, got {block_m}")
    if block_n not in (16, 32, 64):
        raise ValueError(f"block_n: expected 16, 32 or 64 (a divisor of the page), got {block_n}")
    if not 1 <= kv_latency <= 10:
        raise ValueError(f"kv_latency: expected 1..10 (a DRAM latency hint), got {kv_latency}")
    if not 1 <= num_splits <= MAX_SPLITS:
        raise ValueError(f"num_splits: expected 1..{MAX_SPLITS}, got {num_splits}")
    if combine_rows not in (4, 8, 16):
        raise ValueError(f"combine_rows: expected 4, 8 or 16, got {combine_rows}")
    if combine_cols not in COMBINE_COLS:
        raise ValueError(f"combine_cols: expected one of {COMBINE_COLS}, got {combine_cols}")
    if combine_slots not in COMBINE_SLOTS:
        raise ValueError(f"combine_slots: expected one of {COMBINE_SLOTS}, got {combine_slots}")


def split_grid(b: int, s_q: int, h_q: int, block_m: int, num_splits: int) -> tuple[int, int, int]:
    return ((s_q * h_q + block_m - 1) // block_m, b, num_splits)


def combine_grid(b: int, s_q: int, h_q: int, combine_rows: int, combine_cols: int = D_V) -> tuple[int, int, int]:
    return ((s_q * h_q + combine_rows - 1) // combine_rows, b, D_V // combine_cols)


def workspace(b: int, s_q: int, h_q: int, num_splits: int, device) -> dict:
    """The partials, sized by the shape and num_splits only (never by lengths). Not initialized:
    the split kernel writes every (sequence, split, row). NUM_SPLITS = 1 writes out / lse
    directly; its partial arguments are 1-row placeholders that the kernel never touches."""
    import torch
    rows = s_q * h_q if num_splits > 1 else 1
    n = num_splits if num_splits > 1 else 1
    bb = b if num_splits > 1 else 1
    return {"part_o": torch.empty((bb, n, rows, D_V), dtype=torch.float32, device=device),
            "part_lse": torch.empty((bb, n, rows), dtype=torch.float32, device=device)}


def split_kernel_args(q, kv_cache, block_table, cache_seqlens, out, lse, part_o, part_lse,
                      softmax_scale: float, block_m: int = 64, block_n: int = BLOCK_N_DEFAULT,
                      kv_latency: int = KV_LATENCY_DEFAULT, num_splits: int = 1, lazy: bool = False) -> tuple:
    """The views and constants the split kernel is launched with. Contiguous tensors on the GPU."""
    b, s_q, h_q, d = q.shape
    assert d == D_QK and tuple(kv_cache.shape[1:]) == (PAGE, 1, D_QK), (q.shape, kv_cache.shape)
    # The masked tail tile is a TMA load with a negative row coordinate (see the module notes):
    # keep the facts that make cuTile choose TMA for the cache.
    assert kv_cache.is_contiguous() and kv_cache.data_ptr() % 16 == 0, \
        "kv_cache must be contiguous and 16-byte aligned"
    assert tuple(out.shape) == (b, s_q, h_q, D_V) and tuple(lse.shape) == (b, h_q, s_q)
    if num_splits > 1:
        assert tuple(part_o.shape) == (b, num_splits, s_q * h_q, D_V), part_o.shape
        assert tuple(part_lse.shape) == (b, num_splits, s_q * h_q), part_lse.shape
    check_tiling(block_m, block_n, kv_latency, num_splits, COMBINE_ROWS_DEFAULT)
    q3 = q.view(b, s_q * h_q, D_QK)
    kv3 = kv_cache.view(kv_cache.shape[0], PAGE, D_QK)
    out3 = out.view(b, s_q * h_q, D_V)
    return (q3, kv3, block_table, cache_seqlens, out3, lse, part_o, part_lse,
            float(softmax_scale) * LOG2E, s_q, h_q, block_m, block_n, kv_latency, num_splits, int(lazy))


def combine_kernel_args(part_o, part_lse, out, lse, num_splits: int,
                        combine_rows: int = COMBINE_ROWS_DEFAULT, combine_cols: int = D_V,
                        combine_slots: int = 1) -> tuple:
    """The views and constants the combine kernel is launched with."""
    b, s_q, h_q, _ = out.shape
    assert tuple(part_o.shape) == (b, num_splits, s_q * h_q, D_V), part_o.shape
    assert tuple(part_lse.shape) == (b, num_splits, s_q * h_q) and tuple(lse.shape) == (b, h_q, s_q)
    check_tiling(64, BLOCK_N_DEFAULT, KV_LATENCY_DEFAULT, num_splits, combine_rows, combine_cols, combine_slots)
    out3 = out.view(b, s_q * h_q, D_V)
    return (part_o, part_lse, out3, lse, s_q, h_q, pow2_at_least(num_splits), combine_rows, combine_cols,
            combine_slots)


def _array(dtype, ndim, stride_div: int = 1, base_div: int = 1):
    """A C-contiguous, non-aliasing array; stride_div (elements) holds on all but the last axis."""
    from cuda.tile.compilation import ArrayConstraint
    return ArrayConstraint(dtype, ndim, index_dtype=ct.int32, stride_lower_bound_incl=0,
                           alias_groups=(), may_alias_internally=False,
                           stride_constant=(None,) * (ndim - 1) + (1,),
                           stride_divisible_by=(stride_div,) * (ndim - 1) + (1,),
                           base_addr_divisible_by=base_div)


def split_export_signatures(s_q: int, h_q: int, block_m: int = 64, block_n: int = BLOCK_N_DEFAULT,
                            kv_latency: int = KV_LATENCY_DEFAULT, num_splits: int = 1, lazy: bool = False) -> list:
    """KernelSignature list of the split kernel for cuda.tile.compilation.export_kernel (CPU).

    Alignment facts (pitfall 15; without them no TMA): q [b, s_q*h_q, 576], cache [nb, 64, 576],
    out [b, s_q*h_q, 512] and PartO [b, splits, s_q*h_q, 512] have every stride but the last a
    multiple of 64 elements and 16-byte aligned bases (torch allocations are 256-byte aligned).
    block_table / cache_seqlens / lse / PartLse are read or written element-wise: no facts."""
    from cuda.tile.compilation import CallingConvention, KernelSignature, ScalarConstraint
    check_tiling(block_m, block_n, kv_latency, num_splits, COMBINE_ROWS_DEFAULT)
    params = [
        _array(ct.bfloat16, 3, 64, 16),       # Q
        _array(ct.bfloat16, 3, 64, 16),       # KV
        _array(ct.int32, 2),                  # BlockTable: max_blocks arbitrary
        _array(ct.int32, 1),                  # Seqlens
        _array(ct.bfloat16, 3, 64, 16),       # Out
        _array(ct.float32, 3),                # Lse: [b, h_q, s_q], s_q may be 1
        _array(ct.float32, 4, 64, 16),        # PartO
        _array(ct.float32, 3),                # PartLse: s_q*h_q arbitrary
        ScalarConstraint(ct.float32),         # scale_log2
        s_q, h_q, block_m, block_n, kv_latency, num_splits, int(lazy),   # constants
    ]
    return [KernelSignature(params, CallingConvention.cutile_python_v1())]


def combine_export_signatures(s_q: int, h_q: int, num_splits: int,
                              combine_rows: int = COMBINE_ROWS_DEFAULT, combine_cols: int = D_V,
                              combine_slots: int = 1) -> list:
    """KernelSignature list of the combine kernel (same alignment facts as the split kernel's)."""
    from cuda.tile.compilation import CallingConvention, KernelSignature
    check_tiling(64, BLOCK_N_DEFAULT, KV_LATENCY_DEFAULT, num_splits, combine_rows, combine_cols, combine_slots)
    params = [
        _array(ct.float32, 4, 64, 16),        # PartO
        _array(ct.float32, 3),                # PartLse
        _array(ct.bfloat16, 3, 64, 16),       # Out
        _array(ct.float32, 3),                # Lse
        s_q, h_q, pow2_at_least(num_splits), combine_rows, combine_cols, combine_slots,   # constants
    ]
    return [KernelSignature(params, CallingConvention.cutile_python_v1())]
