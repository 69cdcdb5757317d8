"""gemm_v5: gemm_v4 made persistent - one CTA per SM walks the output tiles in a grouped raster
order - with the epilogue through shared memory and a TMA store.

Check (GPU):        MLA_VAR3_RUN_QUARANTINED=1 python -m mla_var3.kernel gemm_v5 --check
Benchmark (GPU):    MLA_VAR3_RUN_QUARANTINED=1 python -m mla_var3.kernel gemm_v5 --m=4096 --n=4096 --k=4096 --dtype=fp16 --compare=gemm_v4
Compile only (CPU): python -m mla_var3.kernel gemm_v5 --compile-only --arch=sm_90a
The device function is `gemm_v5_kernel`, so profiler rows name the version.

What changed from gemm_v4, and why
- Persistent tile scheduler: the grid is `ctas` CTAs (default 132, the H200's SMs; fewer when
  there are fewer output tiles), and CTA b computes tiles b, b + ctas, b + 2 ctas, ... The
  mbarrier ring is not reset between tiles: the producer warp runs on into the next tile's k
  tiles while the consumers are still in the previous tile's epilogue, so the loads of tile
  i + 1 overlap the epilogue of tile i (gemm_v4 paid the ring's fill latency and the epilogue
  once per tile, and its last wave was partial: 512 tiles of 128 x 256 at 4096^2 are 3.9
  waves of 132).
- Grouped raster order (`tile_coord`): consecutive tile ids walk down a group of `group_m`
  tile rows before moving one tile column to the right, so the 132 tiles in flight at any time
  share a few row blocks of A and column blocks of B in L2 instead of streaming a whole row of
  C's tiles (which re-reads all of B for every tile row).
- Epilogue through shared memory: the consumers round the accumulator and write it, one
  block_m x epi_n subtile at a time, into a small swizzled shared buffer with `stmatrix`
  (StMatrix8x8x16bOp: 16-byte rows, no bank conflicts), fence the async proxy, meet at a named
  barrier (consumer warps only), and one warp issues a TMA store of the subtile (UTMASTG),
  which clips at m and n by itself - no per-element predicates, full 128-byte lines written.
  `epi_bufs` buffers rotate; the storing warp waits (cp.async.bulk.wait_group.read) until the
  oldest store has read its buffer before the consumers overwrite it, so the stores of one
  subtile overlap the conversion and stmatrix of the next, and the last ones overlap the next
  tile's mainloop.

Warp roles (default tiling 128 x 256 x 64, 4 stages, 2 consumer warpgroups, 384 threads) are
gemm_v4's: warpgroup 0 warp 0 is the TMA producer (40 registers), warpgroups 1 and 2 the
wgmma consumers (232 registers) and now also the epilogue; warp 4 (the first consumer warp)
issues the TMA stores. The mainloop is unchanged (each consumer still waits for its wgmmas
before releasing a slot).

Shared memory (default): ring 4 x 48 KB + epilogue 2 x (128 x 32 x 2 B = 8 KB) + mbarriers
= 209 KB of 227 KB.

Correct on the H200 (2026-12-01; --check 12/12 and the many-tiles-per-CTA test); docs/kernels/gemm.md has the
prediction and the measured table.

Constraints: bf16 or fp16; m arbitrary, n and k multiples of 8 (16-byte row strides, TMA);
block_m = 64 x consumer_wgs, block_n a multiple of 16 up to 256, block_k = 64, 2..8 stages;
epi_n in 16, 32, 64 dividing block_n, with (block_n / epi_n) a multiple of epi_bufs (static
buffer indices); fewer than 2^31 elements per operand.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup
from cutlass.memory import SmemAllocator
from cutlass.tensor_utils import LayoutEnum

F32 = cutlass.Float32
WG = 128                       # threads per warpgroup
PRODUCER_REGS = 40             # setmaxnreg for the producer warpgroup
CONSUMER_REGS = 232            # ... and for each consumer warpgroup (40 + 2 x 232 <= 512 per SM lane)
EPI_BARRIER = 1                # named barrier of the consumer warps (0 is __syncthreads)
STORE_WARP = 4                 # the first consumer warp issues the TMA stores


class GemmV5Kernel:
    """Device code of gemm_v5 (constexpr config; see the module docstring)."""

    def __init__(self, dtype, block_n: int = 256, block_k: int = 64, stages: int = 4, consumer_wgs: int = 2,
                 epi_n: int = 32, epi_bufs: int = 2, group_m: int = 8, ctas: int = 132):
        if consumer_wgs not in (1, 2) or block_n % 16 or not 16 <= block_n <= 256 or block_k != 64 \
                or not 2 <= stages <= 8 or epi_n not in (16, 32, 64) or block_n % epi_n \
                or epi_bufs < 1 or (block_n // epi_n) % epi_bufs or group_m < 1 or ctas < 1:
            raise ValueError(f"gemm_v5 tiling block_n={block_n}, block_k={block_k}, stages={stages}, "
                             f"consumer_wgs={consumer_wgs}, epi_n={epi_n}, epi_bufs={epi_bufs}, "
                             f"group_m={group_m}, ctas={ctas} does not fit (see the plan's Tiling.validate)")
        self.dtype = dtype
        self.consumer_wgs = consumer_wgs
        self.block_m, self.block_n, self.block_k = 64 * consumer_wgs, block_n, block_k
        self.stages = stages
        self.epi_n, self.epi_bufs = epi_n, epi_bufs
        self.group_m, self.ctas = group_m, ctas
        self.num_threads = WG * (1 + consumer_wgs)

    # ---------------------------------------------------------------- host side
    @cute.jit
    def __call__(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, stream):
        m, n = c.shape
        tile = (self.block_m, self.block_n, self.block_k)
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, OperandMajorMode.K, OperandMajorMode.K, F32,
            (self.consumer_wgs, 1, 1), (64, self.block_n))
        sA_l = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, tile, self.dtype, self.stages)
        sB_l = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, tile, self.dtype, self.stages)
        # epilogue buffers: epi_bufs subtiles of block_m x epi_n, row-major (n-major) and swizzled
        epi_tile = (self.block_m, self.epi_n)
        sC_l = sm90_utils.make_smem_layout_epi(self.dtype, LayoutEnum.ROW_MAJOR, epi_tile, self.epi_bufs)
        a_one = cute.slice_(sA_l, (None, None, 0))
        b_one = cute.slice_(sB_l, (None, None, 0))
        g2s = cpasync.CopyBulkTensorTileG2SOp()
        tma_a, a_tma = cpasync.make_tiled_tma_atom(g2s, a, a_one, (self.block_m, self.block_k))
        tma_b, b_tma = cpasync.make_tiled_tma_atom(g2s, b, b_one, (self.block_n, self.block_k))
        tma_c, c_tma = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), c,
                                                   cute.slice_(sC_l, (None, None, 0)), epi_tile)
        self.stage_bytes = cute.size_in_bytes(self.dtype, a_one) + cute.size_in_bytes(self.dtype, b_one)

        @cute.struct
        class Storage:
            bars: cute.struct.MemRange[cutlass.Int64, 2 * self.stages]      # full + empty per stage
            sA: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sA_l)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sB_l)], 1024]
            sC: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sC_l)], 1024]

        self.storage = Storage
        tiles_m = (m + self.block_m - 1) // self.block_m
        tiles_n = (n + self.block_n - 1) // self.block_n
        grid = (cutlass.min(tiles_m * tiles_n, self.ctas), 1, 1)         # persistent: at most one CTA per SM
        self.gemm_v5_kernel(tma_a, a_tma, tma_b, b_tma, tma_c, c_tma, tiled_mma, sA_l, sB_l, sC_l,
                            tiles_m, tiles_n).launch(
            grid=grid, block=(self.num_threads, 1, 1), stream=stream,
            min_blocks_per_mp=1)      # emits .minnctapersm, without which ptxas drops setmaxnreg

    # ---------------------------------------------------------------- device side
    @cute.jit
    def tile_coord(self, t, tiles_m, tiles_n):
        """Linear tile id -> (tile row, tile column), grouped along M: ids walk down `group_m` tile
        rows (fewer in the last group), then one tile column right; the next group starts when
        all tile columns of this one are done."""
        per_group = self.group_m * tiles_n
        g = t // per_group
        first = g * self.group_m
        rows = cutlass.min(tiles_m - first, self.group_m)
        local = t - g * per_group
        return first + local % rows, local // rows

    @cute.jit
    def load(self, producer, tma_a: cute.CopyAtom, tAgA: cute.Tensor, tAsA: cute.Tensor,
             tma_b: cute.CopyAtom, tBgB: cute.Tensor, tBsB: cute.Tensor, n_k_tiles, tiles_m, tiles_n):
        """Producer warp: every k tile of every tile of this CTA into the next free slot of the
        ring, which runs on across tiles (whole warp: cute.copy elects the issuing lane)."""
        bid, _, _ = cute.arch.block_idx()
        ctas, _, _ = cute.arch.grid_dim()
        for t in cutlass.range(bid, tiles_m * tiles_n, ctas, unroll=1):
            tm, tn = self.tile_coord(t, tiles_m, tiles_n)
            for kt in cutlass.range(n_k_tiles, unroll=1):
                h = producer.acquire_and_advance()          # waits for the slot; arms its byte count
                cute.copy(tma_a, tAgA[(None, tm, kt)], tAsA[(None, h.index)], tma_bar_ptr=h.barrier)
                cute.copy(tma_b, tBgB[(None, tn, kt)], tBsB[(None, h.index)], tma_bar_ptr=h.barrier)
        producer.tail()                                      # do not exit while copies are in flight

    @cute.jit
    def mma(self, consumer, tiled_mma: cute.TiledMma, tCrA: cute.Tensor, tCrB: cute.Tensor,
            acc: cute.Tensor, n_k_tiles):
        """Consumer warpgroup, one output tile: for each k tile, block_k / 16 wgmmas from the slot,
        then release it (gemm_v4's mainloop). Returns the advanced consumer state: the caller must
        assign it (`consumer = self.mma(consumer, ...)`), or the DSL does not carry it across the
        persistent tile loop and every tile after the first restarts at slot 0, phase 0."""
        n_kb = cute.size(tCrA, mode=[2])
        for _kt in cutlass.range(n_k_tiles, unroll=1):
            h = consumer.wait_and_advance()
            warpgroup.fence()
            for kb in cutlass.range_constexpr(n_kb):
                cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, h.index)], tCrB[(None, None, kb, h.index)], acc)
            warpgroup.commit_group()
            warpgroup.wait_group(0)                          # this slot's wgmmas have read smem
            h.release()
        return consumer

    @cute.jit
    def epilogue(self, r2s: cute.TiledCopy, tRS_acc: cute.Tensor, tRS_sC: cute.Tensor, rD: cute.Tensor,
                 rD_out: cute.Tensor, tma_c: cute.CopyAtom, bSG_sC: cute.Tensor, bSG_gC: cute.Tensor,
                 tm, tn, warp_idx):
        """One output tile, block_n / epi_n subtiles of block_m x epi_n: registers -> (rounded,
        stmatrix) shared buffer j % epi_bufs -> fence, consumer barrier -> TMA store by one warp.
        Before the barrier that ends a subtile, the storing warp waits until at most epi_bufs - 1
        of its stores still read shared memory, so the buffer written next is free."""
        n_sub = self.block_n // self.epi_n
        per_sub = cute.size(rD)
        n_consumer_threads = WG * self.consumer_wgs
        for j in cutlass.range_constexpr(n_sub):
            buf = j % self.epi_bufs
            for v in cutlass.range_constexpr(per_sub):
                rD[v] = tRS_acc[j * per_sub + v]
            rD_out.store(rD.load().to(self.dtype))
            cute.copy(r2s, rD_out, tRS_sC[(None, None, None, buf)])
            cute.arch.fence_proxy("async.shared", space="cta")     # generic writes -> async-proxy reads
            cute.arch.barrier(barrier_id=EPI_BARRIER, number_of_threads=n_consumer_threads)
            if warp_idx == STORE_WARP:
                cute.copy(tma_c, bSG_sC[(None, buf)], bSG_gC[(None, tm, tn * n_sub + j)])
                cute.arch.cp_async_bulk_commit_group()
                cute.arch.cp_async_bulk_wait_group(self.epi_bufs - 1, read=True)
            cute.arch.barrier(barrier_id=EPI_BARRIER, number_of_threads=n_consumer_threads)

    @cute.kernel
    def gemm_v5_kernel(self, tma_a: cute.CopyAtom, a_tma: cute.Tensor, tma_b: cute.CopyAtom, b_tma: cute.Tensor,
                       tma_c: cute.CopyAtom, c_tma: cute.Tensor, tiled_mma: cute.TiledMma,
                       sA_l: cute.ComposedLayout, sB_l: cute.ComposedLayout, sC_l: cute.ComposedLayout,
                       tiles_m: cutlass.Int32, tiles_n: cutlass.Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        ctas, _, _ = cute.arch.grid_dim()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg = cute.arch.make_warp_uniform(tidx // WG)

        if warp_idx == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
            cpasync.prefetch_descriptor(tma_c)

        st = SmemAllocator().allocate(self.storage)
        sA = st.sA.get_tensor(sA_l.outer, swizzle=sA_l.inner)      # (block_m, 64, stages)
        sB = st.sB.get_tensor(sB_l.outer, swizzle=sB_l.inner)      # (block_n, 64, stages)
        sC = st.sC.get_tensor(sC_l.outer, swizzle=sC_l.inner)      # (block_m, epi_n, epi_bufs)

        producer, consumer = pipeline.PipelineTmaAsync.create(
            barrier_storage=st.bars.data_ptr(), num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 4 * self.consumer_wgs),
            tx_count=self.stage_bytes, defer_sync=True).make_participants()
        pipeline.pipeline_init_arrive()
        pipeline.pipeline_init_wait()

        # (box, tile rows or columns, k tiles) views of A and B; out-of-bounds boxes zero-fill
        gA = cute.local_tile(a_tma, (self.block_m, self.block_k), (None, None))
        gB = cute.local_tile(b_tma, (self.block_n, self.block_k), (None, None))
        tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2),
                                           cute.group_modes(gA, 0, 2))
        tBsB, tBgB = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2),
                                           cute.group_modes(gB, 0, 2))
        n_k_tiles = cute.size(gA, mode=[3])

        if wg == 0:                                              # ---- producer warpgroup
            cute.arch.setmaxregister_decrease(PRODUCER_REGS)
            if warp_idx == 0:
                self.load(producer, tma_a, tAgA, tAsA, tma_b, tBgB, tBsB, n_k_tiles, tiles_m, tiles_n)
        else:                                                    # ---- consumer warpgroups
            cute.arch.setmaxregister_increase(CONSUMER_REGS)
            ctid = tidx - WG
            thr_mma = tiled_mma.get_slice(ctid)
            tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))    # smem descriptors
            tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
            acc = cute.make_rmem_tensor(thr_mma.partition_shape_C((self.block_m, self.block_n)), F32)

            # epilogue: accumulator -> stmatrix into sC; sC subtiles -> TMA store into C
            stmatrix = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), self.dtype)
            r2s = cute.make_tiled_copy_S(
                sm90_utils.get_smem_store_op(LayoutEnum.ROW_MAJOR, self.dtype, F32),
                cute.make_tiled_copy_C_atom(stmatrix, tiled_mma))
            thr_r2s = r2s.get_slice(ctid)
            tRS_sC = thr_r2s.partition_D(sC)                             # (R2S, M, N, epi_bufs)
            tRS_acc = r2s.retile(acc)
            rD_shape = cute.shape(thr_r2s.partition_S(sC))[:3]           # one subtile's registers
            rD = cute.make_rmem_tensor(rD_shape, F32)
            rD_out = cute.make_rmem_tensor(rD_shape, self.dtype)
            gC = cute.local_tile(c_tma, (self.block_m, self.epi_n), (None, None))   # (BM, EPI_N, TM, TN*n_sub)
            bSG_sC, bSG_gC = cpasync.tma_partition(tma_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2),
                                                   cute.group_modes(gC, 0, 2))

            # acc is zeroed per tile and every wgmma accumulates; set once, outside the staged loops
            # (a TiledMma field set inside a dynamic loop would escape it)
            tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
            for t in cutlass.range(bid, tiles_m * tiles_n, ctas, unroll=1):
                tm, tn = self.tile_coord(t, tiles_m, tiles_n)
                acc.fill(0.0)
                consumer = self.mma(consumer, tiled_mma, tCrA, tCrB, acc, n_k_tiles)
                self.epilogue(r2s, tRS_acc, tRS_sC, rD, rD_out, tma_c, bSG_sC, bSG_gC, tm, tn, warp_idx)
            if warp_idx == STORE_WARP:
                cute.arch.cp_async_bulk_wait_group(0, read=True)       # sC stays valid until read
