"""ct_flash_mla_decode_v2: cuTile MLA decode (DeepSeek-V3 absorbed MLA, FlashMLA's contract).

v1 with its two compute-sanitizer findings removed (docs/kernels/ct_flash_mla_decode.md):
- the tail tile no longer reads the cache through `KV.slice` (a tensor map built on the device,
  whose atomics memcheck flagged): it loads a window shifted back to end at the last valid row,
  an ordinary TMA load whose out-of-page rows TMA zero-fills;
- the page id is read with `ct.gather` (the TMA producer warp loads it into a register) instead
  of a 0-d `ct.load` (all 256 consumer threads cp.async'ed it into one shared-memory slot, a
  write-write race for racecheck).
The exported sm_90 cubin is otherwise v1's: 168 registers, no spills, 218 KB of shared memory,
HGMMA 64x32x16 and 64x256x16, 27 UTMALDG.3D; no ATOMG / UTMACCTL.IV (no device tensor map), no
LDGSTS (no page id through shared memory).

Run: python -m mla_var3.kernel ct_flash_mla_decode_v2 --check (GPU);
     python -m mla_var3.kernel ct_flash_mla_decode_v2 --compile-only --arch=sm_90a (CPU).

Tiling
- q is viewed as [b, s_q*h_q, 576]: row r is query token r // h_q, head r % h_q. One block per
  (BLOCK_M=64-row tile of those rows, sequence): grid (cdiv(s_q*h_q, BLOCK_M), b, 1). The row
  tile is the fastest grid axis, so the blocks of one sequence (h_q*s_q > 64) run side by side
  and share its pages through L2. No split over the sequence (no combine kernel).
- The block walks its sequence's keys in KV tiles of BLOCK_N (default 64 = one page). The page
  id is read from block_table with ct.gather and used as a tile index into the cache viewed as
  [num_blocks, 64, 576]; two TMA loads per tile: the BLOCK_Nx512 latent part (K_nope and V at
  once, the values being the same rows) and the BLOCK_Nx64 rope part.
  S = q_nope . K_nope^T + q_rope . K_rope^T (ct.mma, f32 acc); online softmax in the log2 domain
  (exp2, softmax_scale * log2(e) passed in); acc[64, 512] += P(bf16) . V (ct.mma, f32).
  Compiled for sm_90 this is warp-specialized: 2 consumer warpgroups (num_worker_warps=8; each
  holds half of acc) + a TMA producer; HGMMA 64x32x16 (QK^T) and 64x256x16 (P.V), no spills.
  The main loop's KV loads carry latency hint KV_LATENCY (default 8): at >= 8 cuTile
  double-buffers them (218 KB of shared memory: q 72 KB + 2 x 72 KB), at 4 it keeps one buffer.
- Epilogue: out = acc / l (0 where no key was visible), lse = (m + log2 l) * ln 2 (+inf where no
  key was visible); out stored as a [1, BLOCK_M, 512] tile (rows past s_q*h_q fall outside the
  array and the bounded store drops them); lse scattered to [b, h_q, s_q] with a row mask.

Constraints
- bf16 q / cache, page size 64, head dims 576 / 512, h_kv = 1 (asserted in `kernel_args`).
- Pages past ceil(seqlen/64) are never touched: the loops run exactly cdiv(seqlen, BLOCK_N) KV
  tiles, all inside the first ceil(seqlen/64) pages, so the poisoned block_table entries
  (2147480000) are never read.
- Masking only on KV tiles that can hold a masked key (j >= mask_start = (seqlen - s_q + 1) //
  BLOCK_N, the last tile for s_q = 1; peeled into a second loop). Cache rows past seqlen are NaN
  (0 * NaN would be NaN in P.V), so these tiles are loaded as a window that ends at the tile's
  last valid row: tile row t holds cache row sub*BLOCK_N - shift + t, shift = BLOCK_N - (valid
  rows of the tile). Rows t < shift are before the page (a negative TMA coordinate: TMA fills
  them with zeros) or, for BLOCK_N < 64, valid rows of the previous KV tile; S is set to -inf
  there and where key >= the row's visible count seqlen - s_q + 1 + token.
  This relies on the TMA path (signed box coordinates, out-of-bounds elements zero-filled): the
  non-TMA lowering of the same load treats a negative tile origin as wholly out of bounds (it
  would load zeros and the check would fail, not NaN). `kernel_args` asserts the facts that
  give TMA (contiguous cache, 16-byte aligned base).
  m starts at a finite -1e30, so a row that sees nothing never computes -inf - (-inf): its l
  stays 0, giving out 0 and lse +inf (also seqlen 0: no page at all).
- TMA: the export signatures state the alignment facts cuTile needs for it (pitfall 15): every
  array is C-contiguous (last stride constant 1), the bf16 arrays' other strides are multiples of
  64 elements (576 = 9 * 64, 512) and their bases 16-byte aligned (torch allocations are 256-byte
  aligned and the views start at offset 0). Without them cuTile emits scalar LDG. At run time
  ct.launch derives these facts from the torch tensors itself.
- Index math is int32: the cache must hold < 2^31 elements (about 58k pages).
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
NEG_BIG = -1.0e30    # finite "minus infinity" for the running max (see Constraints)
BLOCK_N_DEFAULT = 64     # keys per KV tile = one page
KV_LATENCY_DEFAULT = 8   # >= 8: cuTile double-buffers the KV loads


def _kv_step(KV, BlockTable, bi, j, q_nope, q_rope, m_i, l_i, acc, scale_log2, seqlen, n_vis,
             key_in_tile, BLOCK_M, BLOCK_N, KV_LATENCY, MASKED):
    """KV tile j (keys j*BLOCK_N ..) of sequence bi: S, online softmax update, P.V. Inlined into
    the kernel; MASKED is a Python constant, so the unmasked copy carries no masking code."""
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
    m_new = ct.maximum(m_i, ct.max(s, axis=-1, keepdims=True) * scale_log2)
    p = ct.exp2(s * scale_log2 - m_new, flush_to_zero=True)             # masked: exp2(-inf) = 0
    alpha = ct.exp2(m_i - m_new, flush_to_zero=True)
    l_new = l_i * alpha + ct.sum(p, axis=-1, keepdims=True)
    acc = ct.mma(p.astype(ct.bfloat16), kv, acc * alpha)
    return m_new, l_new, acc


@ct.kernel(occupancy=1, num_worker_warps=8)
def ct_flash_mla_decode_v2_kernel(Q, KV, BlockTable, Seqlens, Out, Lse, scale_log2: float,
                      S_Q: ConstInt, H_Q: ConstInt, BLOCK_M: ConstInt, BLOCK_N: ConstInt,
                      KV_LATENCY: ConstInt):
    """Q [b, s_q*h_q, 576] bf16; KV [num_blocks, 64, 576] bf16; BlockTable [b, max_blocks] i32;
    Seqlens [b] i32; Out [b, s_q*h_q, 512] bf16; Lse [b, h_q, s_q] f32;
    scale_log2 = softmax_scale * log2(e). BLOCK_N keys per KV tile (divides 64)."""
    rt = ct.bid(0)                 # row tile of the s_q*h_q query rows
    bi = ct.bid(1)                 # sequence
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

    n_tiles = ct.cdiv(seqlen, BLOCK_N)
    # KV tiles below mask_start hold only keys every row sees: no masking there.
    mask_start = max(seqlen - S_Q + 1, 0) // BLOCK_N

    m_i = ct.full((BLOCK_M, 1), NEG_BIG, dtype=ct.float32)
    l_i = ct.full((BLOCK_M, 1), 0.0, dtype=ct.float32)
    acc = ct.full((BLOCK_M, D_V), 0.0, dtype=ct.float32)

    # Tiles below mask_start: no masking (the masking code costs registers, so it is peeled).
    for j in range(mask_start):
        m_i, l_i, acc = _kv_step(KV, BlockTable, bi, j, q_nope, q_rope, m_i, l_i, acc, scale_log2,
                                 seqlen, n_vis, key_in_tile, BLOCK_M, BLOCK_N, KV_LATENCY, False)
    # The last tile (s_q = 1) or last few tiles (causal): masked.
    for j in range(mask_start, n_tiles):
        m_i, l_i, acc = _kv_step(KV, BlockTable, bi, j, q_nope, q_rope, m_i, l_i, acc, scale_log2,
                                 seqlen, n_vis, key_in_tile, BLOCK_M, BLOCK_N, KV_LATENCY, True)

    # A row that saw a key has l >= 1 (its max contributes exp2(0)); l == 0 means none.
    seen = l_i > 0.0
    l_safe = ct.where(seen, l_i, ct.full((BLOCK_M, 1), 1.0, dtype=ct.float32))
    o = acc / l_safe                                 # acc is exactly 0 on rows that saw nothing
    ct.store(Out, index=(bi, rt, 0), tile=o.astype(Out.dtype).reshape((1, BLOCK_M, D_V)))

    lse = ct.where(seen, (m_i + ct.log2(l_safe)) * LN2,
                   ct.full((BLOCK_M, 1), math.inf, dtype=ct.float32)).reshape((BLOCK_M,))
    ct.scatter(Lse, (bi, rows % H_Q, rows // H_Q), lse, mask=rows < S_Q * H_Q)


def _check_tiling(block_m: int, block_n: int, kv_latency: int) -> None:
    # BLOCK_M = 64: one HGMMA row block per warpgroup pair (M < 64 falls back to mma.sync,
    # pitfall 15; M = 128 doubles the f32 accumulator and spills).
    if block_m != 64:
        raise ValueError(f"block_m: expected 64, got {block_m}")
    if block_n not in (16, 32, 64):
        raise ValueError(f"block_n: expected 16, 32 or 64 (a divisor of the page), got {block_n}")
    if not 1 <= kv_latency <= 10:
        raise ValueError(f"kv_latency: expected 1..10 (a DRAM latency hint), got {kv_latency}")


def grid(b: int, s_q: int, h_q: int, block_m: int) -> tuple[int, int, int]:
    return ((s_q * h_q + block_m - 1) // block_m, b, 1)


def kernel_args(q, kv_cache, block_table, cache_seqlens, out, lse, softmax_scale: float,
                block_m: int = 64, block_n: int = BLOCK_N_DEFAULT, kv_latency: int = KV_LATENCY_DEFAULT) -> tuple:
    """The views and constants ct_flash_mla_decode_v2_kernel is launched with. Contiguous tensors on the GPU."""
    b, s_q, h_q, d = q.shape
    assert d == D_QK and tuple(kv_cache.shape[1:]) == (PAGE, 1, D_QK), (q.shape, kv_cache.shape)
    # The masked tail tile is a TMA load with a negative row coordinate (see Constraints): keep
    # the facts that make cuTile choose TMA for the cache.
    assert kv_cache.is_contiguous() and kv_cache.data_ptr() % 16 == 0, \
        "kv_cache must be contiguous and 16-byte aligned"
    assert tuple(out.shape) == (b, s_q, h_q, D_V) and tuple(lse.shape) == (b, h_q, s_q)
    _check_tiling(block_m, block_n, kv_latency)
    q3 = q.view(b, s_q * h_q, D_QK)
    kv3 = kv_cache.view(kv_cache.shape[0], PAGE, D_QK)
    out3 = out.view(b, s_q * h_q, D_V)
    return (q3, kv3, block_table, cache_seqlens, out3, lse,
            float(softmax_scale) * LOG2E, s_q, h_q, block_m, block_n, kv_latency)


def _array(dtype, ndim, stride_div: int = 1, base_div: int = 1):
    """A C-contiguous, non-aliasing array; stride_div (elements) holds on all but the last axis."""
    from cuda.tile.compilation import ArrayConstraint
    return ArrayConstraint(dtype, ndim, index_dtype=ct.int32, stride_lower_bound_incl=0,
                           alias_groups=(), may_alias_internally=False,
                           stride_constant=(None,) * (ndim - 1) + (1,),
                           stride_divisible_by=(stride_div,) * (ndim - 1) + (1,),
                           base_addr_divisible_by=base_div)


def export_signatures(s_q: int, h_q: int, block_m: int = 64, block_n: int = BLOCK_N_DEFAULT,
                      kv_latency: int = KV_LATENCY_DEFAULT) -> list:
    """KernelSignature list for cuda.tile.compilation.export_kernel (CPU compile-only, sm_90).

    Alignment facts (pitfall 15; without them no TMA): q [b, s_q*h_q, 576] strides
    (s_q*h_q*576, 576, 1), cache [nb, 64, 576] strides (36864, 576, 1), out [b, s_q*h_q, 512]
    strides (s_q*h_q*512, 512, 1): all multiples of 64 elements; bases 16-byte aligned.
    block_table / cache_seqlens / lse are read or written element-wise: no facts needed."""
    from cuda.tile.compilation import CallingConvention, KernelSignature, ScalarConstraint
    _check_tiling(block_m, block_n, kv_latency)
    params = [
        _array(ct.bfloat16, 3, 64, 16),       # Q
        _array(ct.bfloat16, 3, 64, 16),       # KV
        _array(ct.int32, 2),                  # BlockTable: max_blocks arbitrary
        _array(ct.int32, 1),                  # Seqlens
        _array(ct.bfloat16, 3, 64, 16),       # Out
        _array(ct.float32, 3),                # Lse: [b, h_q, s_q], s_q may be 1
        ScalarConstraint(ct.float32),         # scale_log2
        s_q, h_q, block_m, block_n, kv_latency,   # constants
    ]
    return [KernelSignature(params, CallingConvention.cutile_python_v1())]
