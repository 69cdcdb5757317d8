"""gemm_v4: Hopper GEMM - TMA loads into a multi-stage shared-memory ring (mbarriers through
cutlass.pipeline.PipelineTmaAsync), wgmma on one or two consumer warpgroups, a producer warp.

Check (GPU):        python -m mla_var3.kernel gemm_v4 --check
Benchmark (GPU):    python -m mla_var3.kernel gemm_v4 --m=4096 --n=4096 --k=4096 --dtype=fp16 --compare=gemm_v3
Compile only (CPU): python -m mla_var3.kernel gemm_v4 --compile-only --arch=sm_90a
The device function is `gemm_v4_kernel`, so profiler rows name the version.

What changed from gemm_v3, and why
- wgmma (warpgroup MMA, sm_90a) replaces mma.sync: one instruction per warpgroup computes a
  64 x block_n x 16 product with both operands read from shared memory through descriptors,
  asynchronously, at the full Hopper tensor rate (mma.sync reaches about half of it). No
  ldmatrix, no operand registers: the registers hold only the float32 accumulator.
- TMA replaces cp.async: one thread issues one bulk tensor copy per operand per k tile (a
  block_m x 64 or block_n x 64 box, 128B-swizzled as wgmma wants it), the hardware computes
  the addresses and zero-fills whatever lies past m, n or k. No predicates, no per-thread
  address math, and the ragged edges are free.
- Warp specialization: warpgroup 0 is the producer (one warp issues the TMA copies; its
  registers are given away with setmaxnreg), warpgroups 1..consumer_wgs do the math. They
  synchronize through a `stages`-deep ring of full/empty mbarrier pairs (PipelineTmaAsync:
  the producer waits for an empty slot, arms the full barrier with the tile's byte count and
  issues the copies; a consumer waits for the full barrier, runs its wgmmas and releases the
  slot), so loads run `stages - 1` tiles ahead of the math with no block-wide barrier.

Warp roles (default tiling 128 x 256 x 64, 4 stages, 2 consumer warpgroups, 384 threads):
- warpgroup 0, warp 0: producer; for each k tile: acquire a slot, TMA A [128 x 64] and
  B [256 x 64] into it (48 KB per stage, 192 KB for 4). Registers cut to 40 per thread.
- warpgroups 1, 2: consumers; warpgroup w computes rows 64 (w-1) .. 64 w - 1 of the block's C
  tile: per k tile, 4 wgmma 64x256x16 (k = 64 in steps of 16), wait for them, release the
  slot. 128 float32 accumulators per thread; registers raised to 232.
- Epilogue (consumers): round the accumulator to the output dtype and store it straight from
  registers to global memory where row < m and col < n (2 adjacent columns per register pair;
  not a TMA store - the next rung).

Ragged edges: TMA zero-fills out-of-bounds rows (m, n) and columns (k) of every box and still
counts the full box toward the mbarrier's byte count, so the tail tiles need no special case.
Stores are predicated per element.

Prediction at 4096^3 fp16 on the H200: 500 to 650 TFLOP/s (65-85 % of the 771 measured,
cuBLAS's own). wgmma at 64x256x16 with both operands in shared memory runs near the dense
peak, and 4 stages of 48 KB hide the DRAM/L2 latency; what is left: each consumer waits for
its wgmmas to finish before releasing a slot (no wgmma overlapped across k tiles), one tile
per block (no persistent scheduling: 16 x 32 = 512 blocks over 132 SMs = 3.9 waves, the last
one 88 % full), no cluster multicast, and a non-coalesced register epilogue that the math
does not overlap.

Constraints: bf16 or fp16; m arbitrary, n and k multiples of 8 (16-byte row strides, TMA);
block_m = 64 x consumer_wgs, block_n a multiple of 16 up to 256, block_k = 64 (one 128-byte
swizzle row), 2..8 stages within shared memory; fewer than 2^31 elements per operand.
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


class GemmV4Kernel:
    """Device code of gemm_v4 (constexpr config; see the module docstring)."""

    def __init__(self, dtype, block_n: int = 256, block_k: int = 64, stages: int = 4, consumer_wgs: int = 2):
        if consumer_wgs not in (1, 2) or block_n % 16 or not 16 <= block_n <= 256 or block_k != 64 \
                or not 2 <= stages <= 8:
            raise ValueError(f"gemm_v4 tiling block_n={block_n}, block_k={block_k}, stages={stages}, "
                             f"consumer_wgs={consumer_wgs} does not fit (see the plan's Tiling.validate)")
        self.dtype = dtype
        self.consumer_wgs = consumer_wgs
        self.block_m, self.block_n, self.block_k = 64 * consumer_wgs, block_n, block_k
        self.stages = stages
        self.num_threads = WG * (1 + consumer_wgs)

    # ---------------------------------------------------------------- host side
    @cute.jit
    def __call__(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, stream):
        m, n = c.shape
        tile = (self.block_m, self.block_n, self.block_k)
        # consumer warpgroup w owns rows 64 w .. 64 w + 63 of the block tile
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, OperandMajorMode.K, OperandMajorMode.K, F32,
            (self.consumer_wgs, 1, 1), (64, self.block_n))
        sA_l = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, tile, self.dtype, self.stages)
        sB_l = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, tile, self.dtype, self.stages)
        a_one = cute.slice_(sA_l, (None, None, 0))
        b_one = cute.slice_(sB_l, (None, None, 0))
        g2s = cpasync.CopyBulkTensorTileG2SOp()
        tma_a, a_tma = cpasync.make_tiled_tma_atom(g2s, a, a_one, (self.block_m, self.block_k))
        tma_b, b_tma = cpasync.make_tiled_tma_atom(g2s, b, b_one, (self.block_n, self.block_k))
        self.stage_bytes = cute.size_in_bytes(self.dtype, a_one) + cute.size_in_bytes(self.dtype, b_one)

        @cute.struct
        class Storage:
            bars: cute.struct.MemRange[cutlass.Int64, 2 * self.stages]      # full + empty per stage
            sA: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sA_l)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sB_l)], 1024]

        self.storage = Storage
        grid = ((m + self.block_m - 1) // self.block_m, (n + self.block_n - 1) // self.block_n, 1)
        self.gemm_v4_kernel(tma_a, a_tma, tma_b, b_tma, c, tiled_mma, sA_l, sB_l).launch(
            grid=grid, block=(self.num_threads, 1, 1), stream=stream,
            min_blocks_per_mp=1)      # emits .minnctapersm, without which ptxas drops setmaxnreg

    # ---------------------------------------------------------------- device side
    @cute.jit
    def load(self, producer, tma_a: cute.CopyAtom, tAgA: cute.Tensor, tAsA: cute.Tensor,
             tma_b: cute.CopyAtom, tBgB: cute.Tensor, tBsB: cute.Tensor, n_k_tiles):
        """Producer warp: every k tile into the next free slot of the ring (whole warp: cute.copy
        elects the issuing lane itself)."""
        for kt in cutlass.range(n_k_tiles, unroll=1):
            h = producer.acquire_and_advance()          # waits for the slot; arms its byte count
            cute.copy(tma_a, tAgA[(None, kt)], tAsA[(None, h.index)], tma_bar_ptr=h.barrier)
            cute.copy(tma_b, tBgB[(None, kt)], tBsB[(None, h.index)], tma_bar_ptr=h.barrier)
        producer.tail()                                  # do not exit while copies are in flight

    @cute.jit
    def mma(self, consumer, tiled_mma: cute.TiledMma, tCrA: cute.Tensor, tCrB: cute.Tensor,
            acc: cute.Tensor, n_k_tiles):
        """Consumer warpgroup: for each k tile, block_k / 16 wgmmas from the slot, then release it."""
        n_kb = cute.size(tCrA, mode=[2])
        # acc starts at zero (filled by the caller) and every wgmma accumulates: no
        # first-iteration special case inside the dynamic loop
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
        for _kt in cutlass.range(n_k_tiles, unroll=1):
            h = consumer.wait_and_advance()
            warpgroup.fence()
            for kb in cutlass.range_constexpr(n_kb):
                cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, h.index)], tCrB[(None, None, kb, h.index)], acc)
            warpgroup.commit_group()
            warpgroup.wait_group(0)                          # this slot's wgmmas have read smem
            h.release()

    @cute.jit
    def epilogue(self, thr_mma, acc: cute.Tensor, c: cute.Tensor, bm, bn):
        """Round once and store where row < m and col < n."""
        m, n = c.shape
        gC = cute.local_tile(c, (self.block_m, self.block_n), (bm, bn))
        cC = cute.local_tile(cute.make_identity_tensor(c.shape), (self.block_m, self.block_n), (bm, bn))
        tCgC = thr_mma.partition_C(gC)
        tCcC = thr_mma.partition_C(cC)
        out = cute.make_rmem_tensor_like(acc, self.dtype)
        out.store(acc.load().to(self.dtype))
        for i in cutlass.range(cute.size(out), unroll_full=True):
            if cute.elem_less(tCcC[i], (m, n)):
                tCgC[i] = out[i]

    @cute.kernel
    def gemm_v4_kernel(self, tma_a: cute.CopyAtom, a_tma: cute.Tensor, tma_b: cute.CopyAtom, b_tma: cute.Tensor,
                       c: cute.Tensor, tiled_mma: cute.TiledMma, sA_l: cute.ComposedLayout, sB_l: cute.ComposedLayout):
        tidx, _, _ = cute.arch.thread_idx()
        bm, bn, _ = cute.arch.block_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg = cute.arch.make_warp_uniform(tidx // WG)

        if warp_idx == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)

        st = SmemAllocator().allocate(self.storage)
        sA = st.sA.get_tensor(sA_l.outer, swizzle=sA_l.inner)      # (block_m, 64, stages)
        sB = st.sB.get_tensor(sB_l.outer, swizzle=sB_l.inner)      # (block_n, 64, stages)

        # every thread calls create(); one arrive per consumer warp releases a slot
        producer, consumer = pipeline.PipelineTmaAsync.create(
            barrier_storage=st.bars.data_ptr(), num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 4 * self.consumer_wgs),
            tx_count=self.stage_bytes, defer_sync=True).make_participants()
        pipeline.pipeline_init_arrive()
        pipeline.pipeline_init_wait()

        # (box, k tiles) views of this block's rows of A and B; out-of-bounds boxes zero-fill
        gA = cute.local_tile(a_tma, (self.block_m, self.block_k), (bm, None))
        gB = cute.local_tile(b_tma, (self.block_n, self.block_k), (bn, None))
        tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2),
                                           cute.group_modes(gA, 0, 2))
        tBsB, tBgB = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2),
                                           cute.group_modes(gB, 0, 2))
        n_k_tiles = cute.size(gA, mode=[2])

        if wg == 0:                                              # ---- producer warpgroup
            cute.arch.setmaxregister_decrease(PRODUCER_REGS)
            if warp_idx == 0:
                self.load(producer, tma_a, tAgA, tAsA, tma_b, tBgB, tBsB, n_k_tiles)
        else:                                                    # ---- consumer warpgroups
            cute.arch.setmaxregister_increase(CONSUMER_REGS)
            thr_mma = tiled_mma.get_slice(tidx - WG)
            tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))    # smem descriptors
            tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
            acc = cute.make_rmem_tensor(thr_mma.partition_shape_C((self.block_m, self.block_n)), F32)
            acc.fill(0.0)
            self.mma(consumer, tiled_mma, tCrA, tCrB, acc, n_k_tiles)
            self.epilogue(thr_mma, acc, c, bm, bn)
