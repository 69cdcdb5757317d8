"""flash_mla_decode_v7: v6 with programmatic dependent launch (CuTe DSL, sm_90a).

Check (GPU):        MLA_VAR3_RUN_QUARANTINED=1 python -m mla_var3.kernel flash_mla_decode_v7 --check
Benchmark (GPU):    ... flash_mla_decode_v7 --b=128 --s_q=1 --h_q=16 --seqlen=1024 --compare=flash_mla_decode_v6
Compile only (CPU): python -m mla_var3.kernel flash_mla_decode_v7 --compile-only --arch=sm_90a
The device functions are `flash_mla_decode_v7_schedule_kernel`, `flash_mla_decode_v7_kernel`
(split) and `flash_mla_decode_v7_combine_kernel`.

What changed from v6 (one mechanism: PDL). A call is three kernels in one stream; each used to
start only after the previous one had completed and its launch had gone through. Now the split
and combine kernels are launched with programmatic stream serialization (`use_pdl=True`): the
schedule kernel executes `griddepcontrol.launch_dependents` first thing, so the split CTAs are
launched at once, initialize their mbarriers and prefetch TMA descriptors, and then block in
`griddepcontrol.wait` until the schedule grid has finished and its writes are visible; the split
kernel triggers its dependents right after its set-up too, so the combine CTAs are launched
early and take SMs as split CTAs exit, waiting in `griddepcontrol.wait` until the whole split
grid is done. Nothing reads a predecessor's output before its wait, and nothing is written
before it either. The schedule kernel is launched without PDL, so a call never overlaps the
previous call's combine.

The rest of this docstring is v6's.

What changed from v5 (one mechanism: a token-balanced persistent split). v2-v5 launched one CTA
per (row block, split, sequence) with a split length from the mean: with ragged lengths a long
sequence's extra split starts a second, mostly empty wave (varlen cells ran at 0.60-0.75x
FlashMLA). Now a schedule kernel lays all sequences' 64-key tiles end to end and `ctas` CTAs per
row block (default: one per SM) each take the same share, +-1 tile (schedule.py has the closed
forms). A CTA walks its share as segments, one per sequence it touches: Q of that sequence, the
seesaw loop over the segment's tiles, then either the final rows (the CTA covered the whole
sequence) or a piece (O / l and the log2 lse) in slot 0 (its first segment) or 1 (its last) of
its own workspace rows, which the combine merges. Barrier phases run on across segments (q_bar by
segment, full[wg] by the tiles the warpgroup scored, empty[*] by pairs: both stages are released
in every pair, tile B or not). A sync after each segment's epilogue keeps the next Q and tiles
from landing on buffers still read.

The rest of this docstring is v5's.

What v5 changed from v4 (pages smaller than the tile). vLLM's default block size is
16, FlashMLA's API asks for 64. The compute still walks 64-key tiles (64x64 QK^T wgmma, the
seesaw, the combine: all v4's); only the loads change. The cache is viewed as (page_size rows,
576 cols, pages) and cut into page_size x 64 TMA boxes, so a tile's chunk c is 64 / page_size
boxes, one per page, each at the page id the block table gives for page (tile * 64/page_size + j)
of the sequence, landing at rows [j * page_size, (j + 1) * page_size) of the chunk. A page_size x
64 K-major SW128 block is whole 8-row swizzle atoms, so the stacked boxes are byte for byte the
64-row chunk that wgmma reads (`sKp` and `sK` are two views of the same smem). Only pages that
hold keys are loaded and counted on the chunk's mbarrier (the last tile of a sequence may have
fewer): block-table entries past a sequence are never read, and the rows not loaded are past
seqlen, zeroed like any tail. The page size is a compile-time constant (part of the compile key).

The rest of this docstring is v4's.

What v4 changed from v3 (the seesaw): each QK^T wgmma used to be 64x32x16 with both operands
from shared memory and the warpgroups met at three CTA barriers per tile. Tiles now go in pairs
(A in stage 0, B in stage 1): warpgroup 0 scores all 64 keys of A while warpgroup 1 scores B;
each warpgroup owns half of O's columns (O_L: WG0, O_R: WG1) and the running max goes from one to
the other through shared memory:

  WG0: S_A = Q K_A^T; m_A = max(m, rowmax S_A); s_A = 2^(m - m_A); P_A = 2^(S_A - m_A)
       publish (m_A, s_A, P_A) -> O_L = O_L s_A + P_A V_A[:, :256]
       wait (m_B, s_B, P_B)    -> O_L = O_L s_B + P_B V_B[:, :256];  m = m_B
  WG1: S_B = Q K_B^T and its row max (while WG0 works on A)
       wait (m_A, s_A, P_A)    -> O_R = O_R s_A + P_A V_A[:, 256:]   (issued, runs during:)
       m_B = max(m_A, rowmax S_B); s_B = 2^(m_A - m_B); P_B = 2^(S_B - m_B); publish
                               -> O_R = O_R s_B + P_B V_B[:, 256:];  m = m_B

P_A / P_B (64x64 bf16) overwrite the rope columns (chunk 8) of their own K tile, dead once that
tile's QK^T is done. Every chunk of a K tile lands on its own mbarrier.

Synchronization (no CTA barrier in the loop)
- full[stage][chunk]: TMA -> the tile's readers (one mbarrier per box; v6: phase = parity of the
  tiles the owning warpgroup scored so far).
- empty[stage]: one arrival per math warp once its wgmma on that stage completed (8 per phase);
  warp 0 (stage 0) and warp 4 (stage 1) wait on it, then load the tile two ahead into the stage.
- Named barriers: 1 (WG0 -> WG1: m_A, s_A, P_A published; WG0 arrives, WG1 syncs), 2 (WG1 -> WG0:
  m_B, s_B, P_B), 3 / 4 (one warpgroup's own threads: its P written before its wgmma reads it).
  Writers fence generic-proxy smem writes for the async proxy before arriving.
- A pair with no tile B (odd segment length) runs the same protocol with S_B = -inf and no wgmma on
  stage 1.

The schedule, the workspace and the combine are v6's own (schedule.py, combine.py); the
correctness rules below are v2's, per sequence.

Correctness rules (see layers/mla/decode.py)
- Only pages 0 .. cdiv(seqlen, page_size) - 1 of a sequence are read: block_table entries past it
  hold 2147480000 and pages past it are NaN.
- The last page's rows past seqlen are NaN (and rows of the last tile whose page was not loaded
  hold whatever the stage had). P = 0 is not enough there (0 * NaN = NaN in P.V), so
  the warpgroup that owns that tile waits for all its boxes, zeroes the tile's rows past seqlen (all 576
  columns) and fences them for the async proxy before any wgmma reads them; the other warpgroup
  reads the tile only after the owner published its P.
- Causal masking (s_q > 1): query token i sees keys 0 .. seqlen - s_q + i. Masked scores are -inf.
  A row that sees no key keeps m = -inf; exp2 then uses 0 as its offset so no -inf - (-inf)
  appears, l stays 0, and the epilogue writes out 0 and lse +inf.
- Softmax in the log2 domain with f32 statistics; P is rounded to bf16 only as the P V operand.
  lse = (m + log2 l) * ln 2 (natural log).
- Rows past s_q*h_q are computed on zero Q rows and never written.

Constraints: bf16 q and cache, page size 16, 32 or 64, head dims 576/512, h_kv = 1, 1 <= h_q <= 128,
1 <= s_q <= 16, num_threads = 256, block_n = 64 (the tile), b <= 4096 (the schedule's scan: checked in
`schedule.launch_arguments` and the plan's `supports`), (total tiles + 1) x ctas < 2^31 (the
schedule's int32 arithmetic: `launch_arguments`); the rest in `__init__` and `launch_arguments`.
"""
from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream
from cutlass.memory import SmemAllocator
from cutlass.tensor_utils import LayoutEnum

from mla_var3.kernel.cute_python.common.online_softmax import exp_against_new_max, scale_mask_rowmax, scale_rows
from mla_var3.kernel.cute_python.common.paged_kv import expect_tile, load_tile_pages, zero_tail_rows_named
from mla_var3.kernel.cute_python.common.reduce import quad_allreduce_sum
from mla_var3.kernel.cute_python.common.sm90 import acc_rows_cols

D_QK = 576          # 512 latent + 64 rope
D_V = 512           # values: the first 512 columns of the same cache rows
TILE = 64           # keys per KV tile (one wgmma N of QK^T); a tile spans 64 / page_size pages
PAGE_SIZES = (16, 32, 64)
BLOCK_M = 64        # query rows per CTA (one wgmma M)
BOX = 64            # TMA box / smem chunk width: 64 bf16 = 128 B = one SW128 row
N_CHUNKS = D_QK // BOX          # 9 chunks of 64 columns per 576-wide row
V_CHUNKS = D_V // BOX           # the first 8 of them are V
P_CHUNK = N_CHUNKS - 1          # chunk 8 (rope): dead after QK^T, then holds the tile's P
STAGES = 2
NUM_WG = 2
BAR_A, BAR_B, BAR_OWN = 1, 2, 3     # named barriers: A published, B published, 3 + wg: own warpgroup
LOG2_E = math.log2(math.e)
LN_2 = math.log(2.0)
BF16, F32, I32 = cutlass.BFloat16, cutlass.Float32, cutlass.Int32


PIECES = 2    # partial outputs a persistent CTA may leave: its first and its last segment


class FlashMlaDecodeKernel:
    """Split kernel of flash_mla_decode_v7 (constexpr config; see the module docstring)."""

    def __init__(self, s_q: int, h_q: int, ctas: int, block_n: int = 64, num_threads: int = 256,
                 page_size: int = 64):
        if not 1 <= h_q <= 128:
            raise ValueError(f"h_q: expected 1..128, got {h_q}")
        if not 1 <= s_q <= 16:
            raise ValueError(f"s_q: expected 1..16, got {s_q}")
        if block_n != TILE:
            raise ValueError(f"block_n: v6 walks 64-key tiles, so it must be {TILE}, got {block_n}")
        if page_size not in PAGE_SIZES:
            raise ValueError(f"page_size: expected one of {PAGE_SIZES}, got {page_size}")
        if num_threads != 128 * NUM_WG:
            raise ValueError(f"num_threads: v4 runs {NUM_WG} warpgroups ({128 * NUM_WG} threads): the "
                             f"64x512 f32 output accumulator needs them; got {num_threads}")
        if ctas < 1:
            raise ValueError(f"ctas: expected >= 1 persistent CTAs per row block, got {ctas}")
        self.s_q, self.h_q, self.ctas = s_q, h_q, ctas
        self.rows = s_q * h_q                        # query rows per sequence
        self.block_n = block_n
        self.num_threads = num_threads
        self.n_row_blocks = -(-self.rows // BLOCK_M)
        self.page_size = page_size
        self.pages_per_tile = TILE // page_size

    # ---------------------------------------------------------------- host side
    @cute.jit
    def __call__(self, q: cute.Tensor, kv: cute.Tensor, block_table: cute.Tensor,
                 seqlens: cute.Tensor, cum: cute.Tensor, first_seq: cute.Tensor, out: cute.Tensor,
                 lse: cute.Tensor, o_part: cute.Tensor, lse_part: cute.Tensor, softmax_scale: cutlass.Float32,
                 stream):
        # q (b, rows, 576) -> (rows, 576, b) and kv (pages, 64, 576) -> (64, 576, pages): the
        # TMA tiler is 2-D (64, 64), so batch / page become plain coordinates of the rest mode.
        q_t = cute.make_tensor(q.iterator, cute.select(q.layout, mode=[1, 2, 0]))
        kv_t = cute.make_tensor(kv.iterator, cute.select(kv.layout, mode=[1, 2, 0]))

        # one warpgroup scores a whole 64-key tile
        mma_qk = sm90_utils.make_trivial_tiled_mma(
            BF16, BF16, OperandMajorMode.K, OperandMajorMode.K, F32, (1, 1, 1), (BLOCK_M, TILE))
        # two atoms along N: warpgroup w computes output columns [256 w, 256 w + 256); P from smem
        mma_pv = sm90_utils.make_trivial_tiled_mma(
            BF16, BF16, OperandMajorMode.K, OperandMajorMode.MN, F32, (1, NUM_WG, 1),
            (BLOCK_M, D_V // NUM_WG))

        sQ_l = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (BLOCK_M, TILE, BOX), BF16, N_CHUNKS)
        # K tiles: (64 keys, 64 cols, stage * 9 + chunk), K-major SW128. A 64x64 K-major SW128
        # chunk is also a valid K-major A operand (64 rows x 64 k), so chunk 8 of a stage doubles
        # as that tile's P (see P_CHUNK).
        sK_l = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (BLOCK_M, TILE, BOX), BF16,
                                             STAGES * N_CHUNKS)
        # V view of the same bytes: (512 cols, 64 keys, stage), MN-major SW128 (see v1).
        sV_one = sm90_utils.make_smem_layout_b(LayoutEnum.COL_MAJOR, (BLOCK_M, D_V, TILE), BF16, 1)
        v_blk = cute.slice_(sV_one.outer, (None, None, 0))
        sV_outer = cute.make_layout((*v_blk.shape, STAGES),
                                    stride=(*v_blk.stride, N_CHUNKS * cute.cosize(v_blk) // V_CHUNKS))

        # The same bytes cut into page boxes: (page_size rows, 64 cols, (stage * 9 + chunk) *
        # pages_per_tile + page). A page_size x 64 K-major SW128 block is whole 8-row swizzle
        # atoms, so stacking pages_per_tile of them is exactly the 64-row chunk above.
        sKp_l = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (BLOCK_M, self.page_size, BOX), BF16,
                                              STAGES * N_CHUNKS * self.pages_per_tile)

        one_q = cute.slice_(sQ_l, (None, None, 0))
        one_box = cute.slice_(sKp_l, (None, None, 0))
        g2s = cpasync.CopyBulkTensorTileG2SOp()
        tma_q, q_tma = cpasync.make_tiled_tma_atom(g2s, q_t, one_q, (BLOCK_M, BOX))
        tma_k, kv_tma = cpasync.make_tiled_tma_atom(g2s, kv_t, one_box, (self.page_size, BOX))
        self.box_bytes = cute.size_in_bytes(BF16, one_box)                # one page_size x 64 box
        self.q_bytes = cute.size_in_bytes(BF16, one_q) * N_CHUNKS

        @cute.struct
        class Storage:
            q_bar: cute.struct.MemRange[cutlass.Int64, 1]
            full: cute.struct.MemRange[cutlass.Int64, STAGES * N_CHUNKS]   # one per K box
            empty: cute.struct.MemRange[cutlass.Int64, STAGES]
            x_max: cute.struct.MemRange[F32, NUM_WG * BLOCK_M]     # m after tile A (0) / B (1)
            x_scale: cute.struct.MemRange[F32, NUM_WG * BLOCK_M]   # s_A (0) / s_B (1)
            s_sum: cute.struct.MemRange[F32, NUM_WG * BLOCK_M]     # each warpgroup's row sum (epilogue)
            sQ: cute.struct.Align[cute.struct.MemRange[BF16, cute.cosize(sQ_l)], 1024]
            sK: cute.struct.Align[cute.struct.MemRange[BF16, cute.cosize(sK_l)], 1024]

        self.storage = Storage
        self.flash_mla_decode_v7_kernel(
            tma_q, q_tma, tma_k, kv_tma, block_table, seqlens, cum, first_seq, out, lse, o_part, lse_part,
            softmax_scale * LOG2_E, mma_qk, mma_pv, sQ_l, sK_l, sV_outer, sKp_l).launch(
            grid=(self.n_row_blocks, self.ctas, 1), block=(self.num_threads, 1, 1), stream=stream,
            use_pdl=True)     # may start while the schedule kernel runs: see griddepcontrol below

    # ---------------------------------------------------------------- device side
    @cute.kernel
    def flash_mla_decode_v7_kernel(self, tma_q: cute.CopyAtom, q_tma: cute.Tensor, tma_k: cute.CopyAtom,
                                   kv_tma: cute.Tensor, block_table: cute.Tensor, seqlens: cute.Tensor,
                                   cum: cute.Tensor, first_seq: cute.Tensor,
                                   out: cute.Tensor, lse: cute.Tensor, o_part: cute.Tensor,
                                   lse_part: cute.Tensor, scale_log2: cutlass.Float32,
                                   mma_qk: cute.TiledMma, mma_pv: cute.TiledMma,
                                   sQ_l: cute.ComposedLayout, sK_l: cute.ComposedLayout, sV_outer: cute.Layout,
                                   sKp_l: cute.ComposedLayout):
        tidx, _, _ = cute.arch.thread_idx()
        rb, g, _ = cute.arch.block_idx()             # row block, persistent CTA
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg = cute.arch.make_warp_uniform(tidx // 128)
        ltid = tidx % 128                            # thread within its warpgroup

        st = SmemAllocator().allocate(self.storage)
        sQ = st.sQ.get_tensor(sQ_l.outer, swizzle=sQ_l.inner)
        sK = st.sK.get_tensor(sK_l.outer, swizzle=sK_l.inner)
        sV = st.sK.get_tensor(sV_outer, swizzle=sK_l.inner)       # same bytes as sK
        sKp = st.sK.get_tensor(sKp_l.outer, swizzle=sKp_l.inner)  # same bytes, in page boxes
        x_max = st.x_max.get_tensor(cute.make_layout((BLOCK_M, NUM_WG), stride=(1, BLOCK_M)))
        x_scale = st.x_scale.get_tensor(cute.make_layout((BLOCK_M, NUM_WG), stride=(1, BLOCK_M)))
        s_sum = st.s_sum.get_tensor(cute.make_layout((BLOCK_M, NUM_WG), stride=(1, BLOCK_M)))
        q_bar = st.q_bar.data_ptr()
        full = st.full.data_ptr()
        empty = st.empty.data_ptr()

        if warp_idx == 0:
            cpasync.prefetch_descriptor(tma_q)
            cpasync.prefetch_descriptor(tma_k)
            with cute.arch.elect_one():
                cute.arch.mbarrier_init(q_bar, 1)
                for i in cutlass.range_constexpr(STAGES * N_CHUNKS):
                    cute.arch.mbarrier_init(full + i, 1)
                for s in cutlass.range_constexpr(STAGES):
                    cute.arch.mbarrier_init(empty + s, 4 * NUM_WG)      # one arrival per math warp
        cute.arch.mbarrier_init_fence()
        cute.arch.sync_threads()
        # PDL: let the combine kernel be scheduled now (its CTAs take SMs as ours exit and wait in
        # griddepcontrol.wait for this grid to finish), and wait here, after the set-up above, for
        # the schedule kernel's cum / first_seq
        cute.arch.griddepcontrol_launch_dependents()
        cute.arch.griddepcontrol_wait()

        # ---- this CTA's share of all sequences' tiles laid end to end (schedule.py)
        b = seqlens.shape[0]
        big_t = cum[b]
        x_begin = (g * big_t) // self.ctas
        x_end = ((g + 1) * big_t) // self.ctas
        tQsQ, tQgQ = cpasync.tma_partition(tma_q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2),
                                           cute.zipped_divide(q_tma, (BLOCK_M, BOX)))
        tKsK, tKgK = cpasync.tma_partition(tma_k, 0, cute.make_layout(1), cute.group_modes(sKp, 0, 2),
                                           cute.zipped_divide(kv_tma, (self.page_size, BOX)))

        # ---- per-thread fragments: warpgroup wg scores the tiles of stage wg
        thr_qk = mma_qk.get_slice(ltid)
        tSrQ = mma_qk.make_fragment_A(thr_qk.partition_A(sQ))
        tSrK = mma_qk.make_fragment_B(thr_qk.partition_B(sK))
        acc_s = cute.make_rmem_tensor(thr_qk.partition_shape_C((BLOCK_M, TILE)), F32)
        s_rc = acc_rows_cols(acc_s)
        c_rc = acc_rows_cols(thr_qk.partition_C(cute.make_identity_tensor((BLOCK_M, TILE))))
        own_p = wg * N_CHUNKS + P_CHUNK                 # where this warpgroup writes its tile's P
        tPsP = thr_qk.partition_C(sK[None, None, own_p])
        r_p = cute.make_rmem_tensor(acc_s.layout, BF16)

        thr_pv = mma_pv.get_slice(tidx)
        tOrP = mma_pv.make_fragment_A(thr_pv.partition_A(sK))     # P of stage s: slot s * 9 + 8
        tOrV = mma_pv.make_fragment_B(thr_pv.partition_B(sV))
        acc_o = cute.make_rmem_tensor(thr_pv.partition_shape_C((BLOCK_M, D_V)), F32)
        o_rc = acc_rows_cols(acc_o)
        tOcO = acc_rows_cols(thr_pv.partition_C(cute.make_identity_tensor((BLOCK_M, D_V))))

        n_rows = cute.size(s_rc, mode=[0])            # rows this thread owns (2)
        n_ocols = cute.size(o_rc, mode=[1])           # O columns per row (64)
        row_max = cute.make_rmem_tensor((n_rows,), F32)
        row_sum = cute.make_rmem_tensor((n_rows,), F32)
        row_lim = cute.make_rmem_tensor((n_rows,), I32)
        tile_max = cute.make_rmem_tensor((n_rows,), F32)
        scale = cute.make_rmem_tensor((n_rows,), F32)
        mma_qk.set(warpgroup.Field.ACCUMULATE, True)
        mma_pv.set(warpgroup.Field.ACCUMULATE, True)

        # ---- one segment per sequence the range touches: [x, min(its end, x_end)) of its tiles.
        # Barrier phases run on across segments: q_bar by segment, full[wg] by the tiles this
        # warpgroup scored, empty[*] by pairs (both are released in every pair).
        seq = first_seq[g]
        x = x_begin
        seg = I32(0)
        own_uses = I32(0)
        pairs = I32(0)
        while x < x_end:
            seq_base = cum[seq]
            n_tiles = cum[seq + 1] - seq_base
            if n_tiles > 0:
                seqlen = seqlens[seq]
                t_begin = x - seq_base
                t_end = cutlass.min(n_tiles, x_end - seq_base)
                # ---- Q of this sequence and the segment's first two tiles (A -> stage 0, B -> 1)
                if warp_idx == 0:
                    expect_tile(q_bar, self.q_bytes)
                    for c in cutlass.range_constexpr(N_CHUNKS):
                        cute.copy(tma_q, tQgQ[(None, (rb, c, seq))], tQsQ[(None, c)], tma_bar_ptr=q_bar)
                    for s in cutlass.range_constexpr(STAGES):
                        if t_begin + s < t_end:
                            load_tile_pages(tma_k, tKgK, tKsK, full, block_table, seq, t_begin + s, seqlen, s,
                                            N_CHUNKS, self.pages_per_tile, self.page_size, self.box_bytes)
                acc_o.fill(0.0)
                row_max.fill(-F32.inf)
                row_sum.fill(0.0)
                for r in cutlass.range_constexpr(n_rows):
                    grow = rb * BLOCK_M + c_rc[r, 0][0]
                    # keys 0 .. seqlen - s_q + token are visible (s_q = 1: all of them); rows past
                    # s_q*h_q get seqlen, harmless since they are never written.
                    row_lim[r] = cutlass.min(seqlen - (self.s_q - 1) + grow // self.h_q, seqlen)
                cute.arch.mbarrier_wait(q_bar, seg % 2)
                tail = seqlen - (n_tiles - 1) * TILE          # valid rows of the last tile (1..64)
                n_pairs = (t_end - t_begin + 1) // 2

                for p in cutlass.range(0, n_pairs, unroll=1):
                    e_phase = (pairs + p) % 2                  # empty barriers: every pair completes both
                    f_phase = own_uses % 2                     # this warpgroup's stage: tiles it scored
                    t_own = t_begin + 2 * p + wg              # WG0: tile A, WG1: tile B
                    has_b = t_begin + 2 * p + 1 < t_end
                    mine = t_own < t_end                       # false only for WG1 with no tile B

                    # ---- S = Q K^T over this warpgroup's whole tile, box by box as they land
                    if mine:
                        if t_own == n_tiles - 1:
                            if tail < TILE:
                                for c in cutlass.range_constexpr(N_CHUNKS):
                                    cute.arch.mbarrier_wait(full + wg * N_CHUNKS + c, f_phase)
                                zero_tail_rows_named(sK, tail, wg, ltid, 128, TILE, D_QK, BOX, BAR_OWN + wg)
                        acc_s.fill(0.0)
                        warpgroup.fence()
                        for c in cutlass.range_constexpr(N_CHUNKS):
                            cute.arch.mbarrier_wait(full + wg * N_CHUNKS + c, f_phase)
                            for kb in cutlass.range_constexpr(BOX // 16):
                                cute.gemm(mma_qk, acc_s, tSrQ[(None, None, kb, c)],
                                          tSrK[(None, None, kb, wg * N_CHUNKS + c)], acc_s)
                        warpgroup.commit_group()
                        warpgroup.wait_group(0)
                        scale_mask_rowmax(s_rc, c_rc, row_lim, t_own * TILE, scale_log2, tile_max)
                        own_uses += 1
                    else:
                        acc_s.fill(-F32.inf)
                        tile_max.fill(-F32.inf)

                    if wg == 0:
                        # ---- tile A: new max, P_A, publish, O_L = O_L s_A + P_A V_A[:, :256]
                        exp_against_new_max(s_rc, row_max, row_sum, tile_max, scale)
                        r_p.store(acc_s.load().to(BF16))
                        for i in cutlass.range_constexpr(cute.size(r_p)):
                            tPsP[i] = r_p[i]
                        for r in cutlass.range_constexpr(n_rows):
                            if ltid % 4 == 0:
                                x_max[c_rc[r, 0][0], 0] = row_max[r]
                                x_scale[c_rc[r, 0][0], 0] = scale[r]
                        cute.arch.fence_proxy("async.shared", space="cta")
                        cute.arch.barrier_arrive(barrier_id=BAR_A, number_of_threads=256)
                        cute.arch.barrier(barrier_id=BAR_OWN, number_of_threads=128)
                        scale_rows(o_rc, scale)
                        warpgroup.fence()
                        for kb in cutlass.range_constexpr(TILE // 16):
                            cute.gemm(mma_pv, acc_o, tOrP[(None, None, kb, P_CHUNK)], tOrV[(None, None, kb, 0)], acc_o)
                        warpgroup.commit_group()

                        # ---- tile B's statistics from WG1: O_L = O_L s_B + P_B V_B[:, :256]
                        cute.arch.barrier(barrier_id=BAR_B, number_of_threads=256)
                        for r in cutlass.range_constexpr(n_rows):
                            scale[r] = x_scale[c_rc[r, 0][0], 1]
                            row_max[r] = x_max[c_rc[r, 0][0], 1]
                            row_sum[r] = row_sum[r] * scale[r]
                        warpgroup.wait_group(0)
                        with cute.arch.elect_one():
                            cute.arch.mbarrier_arrive(empty)                 # this warp is done with stage 0
                        scale_rows(o_rc, scale)
                        if has_b:
                            warpgroup.fence()
                            for kb in cutlass.range_constexpr(TILE // 16):
                                cute.gemm(mma_pv, acc_o, tOrP[(None, None, kb, N_CHUNKS + P_CHUNK)],
                                          tOrV[(None, None, kb, 1)], acc_o)
                            warpgroup.commit_group()
                        # refill stage 0 with the tile two ahead once both warpgroups are done with it
                        if warp_idx == 0:
                            if t_own + STAGES < t_end:
                                cute.arch.mbarrier_wait(empty, e_phase)
                                load_tile_pages(tma_k, tKgK, tKsK, full, block_table, seq, t_own + STAGES, seqlen,
                                                0, N_CHUNKS, self.pages_per_tile, self.page_size, self.box_bytes)
                        warpgroup.wait_group(0)
                        with cute.arch.elect_one():
                            cute.arch.mbarrier_arrive(empty + 1)        # every pair, tile B or not
                    else:
                        # ---- tile A's statistics from WG0: O_R = O_R s_A + P_A V_A[:, 256:] (async)
                        cute.arch.barrier(barrier_id=BAR_A, number_of_threads=256)
                        for r in cutlass.range_constexpr(n_rows):
                            scale[r] = x_scale[c_rc[r, 0][0], 0]
                            row_max[r] = x_max[c_rc[r, 0][0], 0]
                            row_sum[r] = row_sum[r] * scale[r]
                        scale_rows(o_rc, scale)
                        warpgroup.fence()
                        for kb in cutlass.range_constexpr(TILE // 16):
                            cute.gemm(mma_pv, acc_o, tOrP[(None, None, kb, P_CHUNK)], tOrV[(None, None, kb, 0)], acc_o)
                        warpgroup.commit_group()

                        # ---- meanwhile tile B: new max over m_A, P_B, publish
                        exp_against_new_max(s_rc, row_max, row_sum, tile_max, scale)
                        if mine:
                            r_p.store(acc_s.load().to(BF16))
                            for i in cutlass.range_constexpr(cute.size(r_p)):
                                tPsP[i] = r_p[i]
                        for r in cutlass.range_constexpr(n_rows):
                            if ltid % 4 == 0:
                                x_max[c_rc[r, 0][0], 1] = row_max[r]
                                x_scale[c_rc[r, 0][0], 1] = scale[r]
                        cute.arch.fence_proxy("async.shared", space="cta")
                        cute.arch.barrier_arrive(barrier_id=BAR_B, number_of_threads=256)
                        cute.arch.barrier(barrier_id=BAR_OWN + 1, number_of_threads=128)

                        # ---- O_R = O_R s_B + P_B V_B[:, 256:]
                        warpgroup.wait_group(0)
                        with cute.arch.elect_one():
                            cute.arch.mbarrier_arrive(empty)                 # this warp is done with stage 0
                        scale_rows(o_rc, scale)
                        if mine:
                            warpgroup.fence()
                            for kb in cutlass.range_constexpr(TILE // 16):
                                cute.gemm(mma_pv, acc_o, tOrP[(None, None, kb, N_CHUNKS + P_CHUNK)],
                                          tOrV[(None, None, kb, 1)], acc_o)
                            warpgroup.commit_group()
                            warpgroup.wait_group(0)
                        with cute.arch.elect_one():
                            cute.arch.mbarrier_arrive(empty + 1)        # every pair, tile B or not
                        if mine:
                            # refill stage 1 with the tile two ahead once both warpgroups are done with it
                            if warp_idx == 4:
                                if t_own + STAGES < t_end:
                                    cute.arch.mbarrier_wait(empty + 1, e_phase)
                                    load_tile_pages(tma_k, tKgK, tKsK, full, block_table, seq, t_own + STAGES,
                                                    seqlen, 1, N_CHUNKS, self.pages_per_tile, self.page_size,
                                                    self.box_bytes)

                pairs += n_pairs

                # ---- epilogue: O / l per row; one split -> out (bf16) and lse (natural log, +inf if
                # no key); several -> O / l (f32) and the log2-domain lse (-inf if no key) per split
                for r in cutlass.range_constexpr(n_rows):
                    l_wg = quad_allreduce_sum(row_sum[r])          # this warpgroup's keys
                    if ltid % 4 == 0:
                        s_sum[c_rc[r, 0][0], wg] = l_wg
                cute.arch.sync_threads()
                for r in cutlass.range_constexpr(n_rows):
                    l_tot = s_sum[c_rc[r, 0][0], 0] + s_sum[c_rc[r, 0][0], 1]
                    inv = F32(1.0) / l_tot if l_tot > F32(0.0) else F32(0.0)
                    for j in cutlass.range_constexpr(n_ocols):
                        o_rc[r, j] = o_rc[r, j] * inv
                    row_sum[r] = l_tot
                if t_begin == 0 and t_end == n_tiles:       # the whole sequence: final output
                    gO = cute.local_tile(out[seq, None, None], (BLOCK_M, D_V), (rb, 0))
                    tOgO = acc_rows_cols(thr_pv.partition_C(gO))
                    r_o = cute.make_rmem_tensor(acc_o.layout, BF16)
                    r_o_rc = acc_rows_cols(r_o)
                    r_o.store(acc_o.load().to(BF16))
                    for r in cutlass.range_constexpr(n_rows):
                        grow = rb * BLOCK_M + tOcO[r, 0][0]
                        if grow < self.rows:
                            for j in cutlass.range_constexpr(n_ocols):
                                tOgO[r, j] = r_o_rc[r, j]
                            if wg == 0:
                                if tidx % 4 == 0:
                                    lse_v = F32(F32.inf)
                                    if row_sum[r] > F32(0.0):
                                        lse_v = (row_max[r] + cute.math.log2(row_sum[r])) * LN_2
                                    lse[seq, grow % self.h_q, grow // self.h_q] = lse_v
                else:
                    slot = I32(0) if seg == 0 else I32(1)     # first or last piece of this CTA
                    gP = cute.local_tile(o_part[g, slot, None, None], (BLOCK_M, D_V), (rb, 0))
                    tPgP = acc_rows_cols(thr_pv.partition_C(gP))
                    for r in cutlass.range_constexpr(n_rows):
                        grow = rb * BLOCK_M + tOcO[r, 0][0]
                        if grow < self.rows:
                            for j in cutlass.range_constexpr(n_ocols):
                                tPgP[r, j] = o_rc[r, j]
                            if wg == 0:
                                if tidx % 4 == 0:
                                    lse_v = F32(-F32.inf)
                                    if row_sum[r] > F32(0.0):
                                        lse_v = row_max[r] + cute.math.log2(row_sum[r])
                                    lse_part[g, slot, grow] = lse_v
                # every thread is done with sQ, sK and s_sum before the next segment loads them
                cute.arch.sync_threads()
                seg += 1
            x = seq_base + cutlass.min(n_tiles, x_end - seq_base)
            seq += 1


# -------------------------------------------------------------------- compile / call glue
def fake_arguments(k: FlashMlaDecodeKernel) -> tuple:
    """Fake tensors in __call__'s order (views: q [b, s_q*h_q, 576], kv [pages, page_size, 576],
    cum [b + 1] and first_seq [ctas] i32 (the schedule), out [b, s_q*h_q, 512], o_part [ctas, 2,
    s_q*h_q, 512] f32, lse_part [ctas, 2, s_q*h_q] f32), then the scale and an env stream."""
    b = cute.sym_int(symbol="b")
    num_blocks = cute.sym_int(symbol="num_blocks")
    max_blocks = cute.sym_int(symbol="max_blocks")
    b1 = cute.sym_int(symbol="b_plus_1")
    rm3, rm4 = (2, 1, 0), (3, 2, 1, 0)                 # row-major: last mode fastest
    q = make_fake_compact_tensor(BF16, (b, k.rows, D_QK), stride_order=rm3, assumed_align=16)
    kv = make_fake_compact_tensor(BF16, (num_blocks, k.page_size, D_QK), stride_order=rm3, assumed_align=16)
    block_table = make_fake_compact_tensor(I32, (b, max_blocks), stride_order=(1, 0), assumed_align=4)
    seqlens = make_fake_compact_tensor(I32, (b,), assumed_align=4)
    cum = make_fake_compact_tensor(I32, (b1,), assumed_align=4)
    first_seq = make_fake_compact_tensor(I32, (k.ctas,), assumed_align=4)
    out = make_fake_compact_tensor(BF16, (b, k.rows, D_V), stride_order=rm3, assumed_align=16)
    lse = make_fake_compact_tensor(F32, (b, k.h_q, k.s_q), stride_order=rm3, assumed_align=4)
    o_part = make_fake_compact_tensor(F32, (k.ctas, PIECES, k.rows, D_V), stride_order=rm4, assumed_align=16)
    lse_part = make_fake_compact_tensor(F32, (k.ctas, PIECES, k.rows), stride_order=rm3, assumed_align=4)
    return (q, kv, block_table, seqlens, cum, first_seq, out, lse, o_part, lse_part, F32(D_QK ** -0.5),
            make_fake_stream(use_tvm_ffi_env_stream=True))


def kv_page_size(kv_cache) -> int:
    """The cache's page size (dim 1), checked against what v6 supports."""
    if kv_cache.dim() != 4 or kv_cache.shape[1] not in PAGE_SIZES or tuple(kv_cache.shape[2:]) != (1, D_QK):
        raise ValueError(f"kv_cache: expected [num_blocks, page_size in {PAGE_SIZES}, 1, {D_QK}], "
                         f"got {list(kv_cache.shape)}")
    return int(kv_cache.shape[1])


def workspace(q, ctas: int) -> dict:
    """The schedule and the pieces for this shape (never sized from length values): cum [b + 1],
    first_seq [ctas] (written by the schedule kernel each call), and each persistent CTA's two
    partial outputs."""
    import torch
    b, s_q, h_q, _ = q.shape
    dev = q.device
    return {"cum": torch.empty(b + 1, dtype=torch.int32, device=dev),
            "first_seq": torch.empty(ctas, dtype=torch.int32, device=dev),
            "o_part": torch.empty(ctas, PIECES, s_q * h_q, D_V, dtype=torch.float32, device=dev),
            "lse_part": torch.empty(ctas, PIECES, s_q * h_q, dtype=torch.float32, device=dev)}


def launch_arguments(q, kv_cache, block_table, cache_seqlens, out, lse, ws, softmax_scale) -> tuple:
    """The torch views the compiled split kernel is called with (same order, no stream)."""
    b, s_q, h_q, d = q.shape
    if d != D_QK:
        raise ValueError(f"q: expected [b, s_q, h_q, {D_QK}], got {list(q.shape)}")
    page_size = kv_page_size(kv_cache)
    ctas = ws["first_seq"].shape[0]
    max_tiles = -(-block_table.shape[1] * page_size // TILE)
    if (b * max_tiles + 1) * ctas >= 2 ** 31:          # from shapes only: no device sync
        raise ValueError(f"block_table: {b} x {max_tiles} tiles x {ctas} CTAs overflow the schedule's int32 "
                         f"arithmetic ((tiles + 1) x ctas must stay below 2^31); use fewer CTAs")
    for name, t in (("q", q), ("kv_cache", kv_cache), ("out", out), ("o_part", ws["o_part"])):
        if not t.is_contiguous() or t.data_ptr() % 16:
            raise ValueError(f"{name}: expected a contiguous, 16-byte aligned tensor (TMA)")
    return (q.view(b, s_q * h_q, D_QK), kv_cache.view(kv_cache.shape[0], page_size, D_QK),
            block_table, cache_seqlens, ws["cum"], ws["first_seq"], out.view(b, s_q * h_q, D_V), lse,
            ws["o_part"], ws["lse_part"], float(softmax_scale))
