"""gemm_v6: gemm_v5 (persistent CTAs over a grouped raster, stmatrix + TMA-store epilogue) with
the consumer mainloop keeping one wgmma batch in flight.

Check (GPU):        MLA_VAR3_RUN_QUARANTINED=1 python -m mla_var3.kernel gemm_v6 --check
Benchmark (GPU):    MLA_VAR3_RUN_QUARANTINED=1 python -m mla_var3.kernel gemm_v6 --m=4096 --n=4096 --k=4096 --dtype=fp16 --compare=gemm_v5,gemm_v4
Compile only (CPU): python -m mla_var3.kernel gemm_v6 --compile-only --arch=sm_90a
The device function is `gemm_v6_kernel`, so profiler rows name the version.

What changed from gemm_v5, and why (one mechanism, `GemmV6Kernel.mma`)
- gemm_v4 and gemm_v5 issue a k tile's block_k / 16 wgmmas, commit them and wait for them
  (wgmma.wait_group 0) before releasing the slot and waiting for the next k tile: the tensor
  cores drain at every k tile, and the next batch is issued only after the warpgroup has seen
  the previous one finish and gone through the release and the next full-barrier wait.
- gemm_v6 issues k tile i's batch, then waits with wgmma.wait_group(1): only k tile i - 1's
  batch must be complete (it has read its slot), i's keeps running while the warpgroup releases
  slot i - 1 to the producer and waits for k tile i + 1's data. The wgmmas of consecutive k
  tiles accumulate into the same registers; the hardware orders them, so no batch boundary
  is exposed. (CUTLASS's Hopper mainloops do the same with k_pipe_mmas = 1.)
- Bookkeeping, per output tile: k tile 0 is issued with nothing to release; k tiles
  1 .. n_k_tiles - 1 each release the slot before theirs; after the loop wait_group(0) drains
  the last batch (every wgmma of the tile has completed before the epilogue reads the
  accumulator) and releases the last slot. So each consumer warp releases exactly the
  n_k_tiles slots it waited for, matching the producer's n_k_tiles acquires per tile, and at
  the next tile the release position equals the read position again (the releaser is a clone
  of the read state taken at the tile's start). The release now trails by one slot, so when a
  consumer waits for k tile i + 1 the producer can have loaded at most stages - 2 k tiles
  beyond it (gemm_v5: stages - 1); stages >= 2 still cannot deadlock (the wait for k tile i
  needs the release of k tile i - stages <= i - 2, done at k tile i - 1).
- The ring position (slot index, phase) of the consumers is now an explicit carried value of
  the persistent tile loop (`consumer = self.mma(consumer, ...)`): the DSL carries a variable
  across a dynamic loop only when the body assigns it or calls a method on it (gemm_v5 as first
  written passed it to self.mma without assigning it; fixed there the same way before it ran).

Everything else is gemm_v5's: warp roles (warpgroup 0 warp 0 the TMA producer at 40 registers,
warpgroups 1..consumer_wgs the wgmma consumers and epilogue at 232, warp 4 issues the TMA
stores), the grouped raster of output tiles over `ctas` persistent CTAs, the ring that runs on
across tiles, and the epilogue (stmatrix into epi_bufs swizzled buffers, a TMA store per
subtile). Shared memory (default): ring 4 x 48 KB + epilogue 2 x 8 KB + mbarriers = 209 KB.

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


class GemmV6Kernel:
    """Device code of gemm_v6 (constexpr config; see the module docstring)."""

    def __init__(self, dtype, block_n: int = 256, block_k: int = 64, stages: int = 4, consumer_wgs: int = 2,
                 epi_n: int = 32, epi_bufs: int = 2, group_m: int = 8, ctas: int = 132):
        if consumer_wgs not in (1, 2) or block_n % 16 or not 16 <= block_n <= 256 or block_k != 64 \
                or not 2 <= stages <= 8 or epi_n not in (16, 32, 64) or block_n % epi_n \
                or epi_bufs < 1 or (block_n // epi_n) % epi_bufs or group_m < 1 or ctas < 1:
            raise ValueError(f"gemm_v6 tiling block_n={block_n}, block_k={block_k}, stages={stages}, "
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
        self.gemm_v6_kernel(tma_a, a_tma, tma_b, b_tma, tma_c, c_tma, tiled_mma, sA_l, sB_l, sC_l,
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
        """Consumer warpgroup, one output tile, one wgmma batch in flight: k tile i's block_k / 16
        wgmmas are issued, then wait_group(1) waits for k tile i - 1's batch (the one before the
        newest) and its slot is released; after the last k tile, wait_group(0) and release the
        last slot. On return every wgmma of the tile has completed (acc may be read) and every
        slot this tile waited for has been released exactly once (n_k_tiles waits, n_k_tiles
        releases per consumer warp = the producer's n_k_tiles acquires), so the read and release
        positions in the ring are equal again at the next tile. Needs n_k_tiles >= 1 (k >= 8)."""
        n_kb = cute.size(tCrA, mode=[2])
        # the release position trails the read position by the one batch in flight; at a tile's
        # start all earlier slots are released, so the two positions (index, phase) coincide
        releaser = consumer.clone()
        # k tile 0: issue, keep in flight (nothing older to release)
        h = consumer.wait_and_advance()
        warpgroup.fence()
        for kb in cutlass.range_constexpr(n_kb):
            cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, h.index)], tCrB[(None, None, kb, h.index)], acc)
        warpgroup.commit_group()
        for _kt in cutlass.range(1, n_k_tiles, unroll=1):
            h = consumer.wait_and_advance()
            warpgroup.fence()
            for kb in cutlass.range_constexpr(n_kb):
                cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, h.index)], tCrB[(None, None, kb, h.index)], acc)
            warpgroup.commit_group()
            warpgroup.wait_group(1)                          # k tile i - 1's wgmmas are done with their slot
            releaser.release()
            releaser.advance()
        warpgroup.wait_group(0)                              # drain: the last batch (acc complete)
        releaser.release()
        releaser.advance()
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
    def gemm_v6_kernel(self, tma_a: cute.CopyAtom, a_tma: cute.Tensor, tma_b: cute.CopyAtom, b_tma: cute.Tensor,
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
                # the assignment makes `consumer` a carried value of this loop: the DSL carries a
                # variable across a dynamic loop only if the body assigns it or calls a method on
                # it; passed into self.mma alone it restarted at slot 0, phase 0 every tile
                consumer = self.mma(consumer, tiled_mma, tCrA, tCrB, acc, n_k_tiles)
                self.epilogue(r2s, tRS_acc, tRS_sC, rD, rD_out, tma_c, bSG_sC, bSG_gC, tm, tn, warp_idx)
            if warp_idx == STORE_WARP:
                cute.arch.cp_async_bulk_wait_group(0, read=True)       # sC stays valid until read
