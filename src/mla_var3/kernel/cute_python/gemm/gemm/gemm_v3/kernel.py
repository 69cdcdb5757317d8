"""gemm_v3: tensor cores through warp-level MMA (mma.sync m16n8k16, sm80-style), ldmatrix from a
swizzled shared-memory ring filled by cp.async.

Check (GPU):        python -m mla_var3.kernel gemm_v3 --check
Benchmark (GPU):    python -m mla_var3.kernel gemm_v3 --m=4096 --n=4096 --k=4096 --dtype=fp16 --compare=gemm_v2
Compile only (CPU): python -m mla_var3.kernel gemm_v3 --compile-only --arch=sm_90a
The device function is `gemm_v3_kernel`, so profiler rows name the version.

What changed from gemm_v2, and why
- The math moves from float32 FMA (one multiply-add per thread per instruction) to the tensor
  cores: `MmaF16BF16Op` (mma.sync.m16n8k16, 16-bit inputs, float32 accumulate), 4096 FMAs per
  warp instruction. The float32 FMA ceiling of v2 (~60 TFLOP/s) no longer applies.
- Operands stay 16-bit in shared memory (the MMA reads them as they are) in K-major tiles whose
  8-row x block_k atoms are XOR-swizzled in 16-byte units (the pointer swizzle acts on byte
  addresses: Swizzle<3,4,3> for 128-byte rows, <2,4,3> for 64-byte rows), so both the 16-byte
  cp.async stores and the ldmatrix reads (8 rows x 16 bytes per matrix) hit 8 different bank
  groups: no bank conflicts, no padding.
- Registers are filled with `ldmatrix.x4` (one instruction loads four 8x8 matrices in the exact
  fragment layout mma.sync wants), instead of scalar shared loads.
- Global -> shared uses cp.async (16 bytes per thread per instruction, bypassing registers) into
  a ring of `stages` buffers: while the warps compute on tile t, tiles t+1 .. t+stages-1 are in
  flight. One commit group per tile; `cp.async.wait_group(stages - 2)` + a block barrier
  before a tile is read.

Fix before measuring (misaligned address on every shape): the first version attached the
element-unit Swizzle<3,3,3> (<2,3,3> for block_k 32) to the shared-memory pointer, where CuTe
DSL applies it to byte addresses: it XORed byte bits 3-5 with bits 6-8, i.e. it swizzled 8-byte
units, and every 16-byte vector in columns 32..63 of a 64-wide row (odd rows for 32-wide) landed
at 8 mod 16 - the cp.async destinations of threads with tid % 8 >= 4 in the first prologue
copy, and the ldmatrix rows of k16 steps 2 and 3. Every CTA of every shape faulted with `CUDA
error: misaligned address` (the H200 run after the m = 1 fix). The tell in the compiled code:
the ring's zero fill came out as 8-byte `st.shared.v2` and the swizzle mask as 56 (bits 3-5);
now `st.shared.v4` and 112 (bits 4-6), checked by a CPU test. The fixed build passes --check 12/12 on the H200 (2026-12-01).

Tiling (defaults): block 128 x 128 x 64, 4 warps (128 threads) as 2 x 2, each warp a 64 x 64
tile of C = 4 x 8 mma.sync per k16 step; 128 float32 accumulators per thread; 3 stages
(96 KB of shared memory).

Ragged edges
- m and n: the copy of a 16-byte vector whose row is >= m (or >= n) is predicated off; the
  whole ring is zero-filled once at the start, so those rows stay zero in every stage.
  Predicated off means cp.async with src-size 0 (zero fill): the instruction is still issued
  with a source address, and that address must be a 16-byte aligned, valid one. Each
  vector's source is therefore formed from clamped coordinates (min(row, m - 1),
  max(col, 0)), never from the rows past m (fix before the first measurement: the first GPU
  run faulted with `misaligned address` at m=1, n=256, k=512, where rows 1..127 of a 1-row A
  were addressed through A's row stride - a stride that a size-1 dimension does not pin down,
  that TVM-FFI does not check for size-1 dimensions, and that is all out of bounds anyway).
- k: the k tiles are shifted so that the one partial tile is the first (tile 0 covers columns
  k - block_k * n_tiles .. , negative columns predicated off and left zero in stage 0); later
  reuses of stage 0 are full tiles. k is a multiple of 8, so a 16-byte vector is all in or all
  out, and the shifted tile starts stay 16-byte aligned.
- C: each thread stores its accumulator elements (rounded once) where row < m and col < n.
  The stores go straight from the MMA fragment (2 adjacent columns per register pair), not
  through shared memory: not coalesced, but a small part of the time at k = 4096.

Prediction at 4096^3 fp16 on the H200: 250 to 400 TFLOP/s. mma.sync on Hopper runs at about
half of the wgmma rate (the dense fp16 peak, 989 TFLOP/s, is only reachable with wgmma), so
~500 TFLOP/s is the ceiling of this instruction; one 128x128 block per 4 warps, with
ldmatrix, address math and the barrier per k tile competing for issue slots on the same warps
(no warp specialization, no register double-buffering of the fragments) costs a further
25-50 %.

Constraints: bf16 or fp16; m arbitrary, n and k multiples of 8; block_m, block_n multiples of
the warp tile (warps_m * 16, warps_n * 16); block_k 32 or 64; 2..5 stages within shared memory;
fewer than 2^31 elements per operand (32-bit index math).
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.memory import SmemAllocator

F32 = cutlass.Float32
VEC = 8              # elements per 16-byte cp.async


class GemmV3Kernel:
    """Device code of gemm_v3 (constexpr config; see the module docstring)."""

    def __init__(self, dtype, block_m: int = 128, block_n: int = 128, block_k: int = 64,
                 warps_m: int = 2, warps_n: int = 2, stages: int = 3):
        self.dtype = dtype
        self.block_m, self.block_n, self.block_k = block_m, block_n, block_k
        self.warps_m, self.warps_n, self.stages = warps_m, warps_n, stages
        self.num_threads = 32 * warps_m * warps_n
        if (block_k not in (32, 64) or block_m % (16 * warps_m) or block_n % (16 * warps_n)
                or not 2 <= stages <= 5 or (block_m * block_k // VEC) % self.num_threads
                or (block_n * block_k // VEC) % self.num_threads):
            raise ValueError(f"gemm_v3 tiling {block_m}x{block_n}x{block_k}, warps {warps_m}x{warps_n}, "
                             f"stages {stages} does not fit (see the plan's Tiling.validate)")

    # ---------------------------------------------------------------- host side
    def _smem_layout(self, rows: int):
        """K-major (rows, block_k, stages), built from 8 x block_k swizzled atoms.

        The swizzle is handed to `get_tensor(outer, swizzle=inner)`, which attaches it to the
        shared-memory pointer: it then acts on BYTE addresses, not element offsets (as the
        CUTLASS DSL Ampere example notes, the base bits of a pointer swizzle are in bytes). So
        the unit is 16 bytes (base 4) and the 8 16-byte chunks of a 128-byte row (or 4 of a
        64-byte row) are XORed with the row index within the 8-row atom (shift 3):
        Swizzle<3,4,3> / <2,4,3>. The element-unit spelling Swizzle<3,3,3> / <2,3,3> on the
        pointer swizzles 8-byte units and puts half of all 16-byte cp.async destinations and
        ldmatrix row addresses at 8 mod 16 (the `misaligned address` of the first GPU runs)."""
        bits = 3 if self.block_k == 64 else 2              # 128-byte or 64-byte rows
        atom = cute.make_composed_layout(cute.make_swizzle(bits, 4, 3), 0,
                                         cute.make_layout((8, self.block_k), stride=(self.block_k, 1)))
        return cute.tile_to_shape(atom, (rows, self.block_k, self.stages), (0, 1, 2))

    def _g2s_copy(self):
        """cp.async of 16-byte vectors along k: threads laid out row-major over (rows, k chunks)."""
        chunks = self.block_k // VEC
        atom = cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL),
                                   self.dtype, num_bits_per_copy=128)
        thr = cute.make_layout((self.num_threads // chunks, chunks), stride=(chunks, 1))
        return cute.make_tiled_copy_tv(atom, thr, cute.make_layout((1, VEC)))

    @cute.jit
    def __call__(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, stream):
        m, n = c.shape
        sA_l = self._smem_layout(self.block_m)
        sB_l = self._smem_layout(self.block_n)
        op = cute.nvgpu.warp.MmaF16BF16Op(self.dtype, F32, (16, 8, 16))
        # warps tile (warps_m, warps_n); the N permutation doubles each warp's n per atom to 16 so
        # one ldmatrix.x4 feeds two n8 atoms of B
        tiled_mma = cute.make_tiled_mma(op, cute.make_layout((self.warps_m, self.warps_n, 1)),
                                        permutation_mnk=(self.warps_m * 16, self.warps_n * 16, 16))

        @cute.struct
        class Storage:
            sA: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sA_l)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sB_l)], 1024]

        self.storage = Storage
        grid = ((m + self.block_m - 1) // self.block_m, (n + self.block_n - 1) // self.block_n, 1)
        self.gemm_v3_kernel(a, b, c, sA_l, sB_l, self._g2s_copy(), self._g2s_copy(), tiled_mma).launch(
            grid=grid, block=(self.num_threads, 1, 1), stream=stream)

    # ---------------------------------------------------------------- device side
    @cute.jit
    def load_vectors(self, copy: cute.TiledCopy, g: cute.Tensor, vec_layout: cute.Layout, tc: cute.Tensor,
                     ts: cute.Tensor, rows):
        """cp.async of this thread's 16-byte vectors of one k tile: `tc` their (row, col) identity
        coordinates in the operand `g` (col may be negative in the shifted first tile), `ts` their
        shared-memory destinations. A vector with row >= rows or col < 0 is issued with src-size
        0 (zero fill) but from a clamped coordinate (min(row, rows - 1), max(col, 0)): its source
        address is then always an element of `g`, 16-byte aligned, whatever the rows past `rows`
        or the row stride of a 1-row operand (a size-1 dimension's stride is not bound by the
        layout, and DLPack exporters may report it as 1) would give."""
        for i in cutlass.range_constexpr(cute.size(ts, mode=[1])):
            for j in cutlass.range_constexpr(cute.size(ts, mode=[2])):
                crd = tc[(0, 0), i, j]
                p = cute.make_rmem_tensor(cute.make_layout((1, 1)), cutlass.Boolean)
                p[0, 0] = cute.elem_less((crd[0], cutlass.Int32(-1)), (rows, crd[1]))
                row = cutlass.min(crd[0], rows - 1)
                col = cute.assume(cutlass.max(crd[1], cutlass.Int32(0)), divby=VEC)   # k tile starts: multiples of 8
                src = cute.make_tensor(g.iterator + cute.crd2idx((row, col), g.layout), vec_layout)
                cute.copy(copy, src, ts[None, i, j], pred=p)

    @cute.kernel
    def gemm_v3_kernel(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor,
                       sA_l: cute.ComposedLayout, sB_l: cute.ComposedLayout,
                       copy_a: cute.TiledCopy, copy_b: cute.TiledCopy, tiled_mma: cute.TiledMma):
        tidx, _, _ = cute.arch.thread_idx()
        bm, bn, _ = cute.arch.block_idx()
        m, k = a.shape
        n = b.shape[0]

        # ---- this block's tiles; k tiles shifted so the partial one is tile 0
        gA = cute.local_tile(a, (self.block_m, self.block_k), (bm, None))      # (BM, BK, kt)
        gB = cute.local_tile(b, (self.block_n, self.block_k), (bn, None))
        cA = cute.local_tile(cute.make_identity_tensor(a.shape), (self.block_m, self.block_k), (bm, None))
        cB = cute.local_tile(cute.make_identity_tensor(b.shape), (self.block_n, self.block_k), (bn, None))
        n_k_tiles = cute.size(gA, mode=[2])
        residue = k - self.block_k * n_k_tiles                                   # in (-block_k, 0]
        cA = cute.domain_offset((0, residue, 0), cA)
        cB = cute.domain_offset((0, residue, 0), cB)

        st = SmemAllocator().allocate(self.storage)
        sA = st.sA.get_tensor(sA_l.outer, swizzle=sA_l.inner)                    # (BM, BK, stages)
        sB = st.sB.get_tensor(sB_l.outer, swizzle=sB_l.inner)

        thr_a = copy_a.get_slice(tidx)
        thr_b = copy_b.get_slice(tidx)
        tAsA, tAcA = thr_a.partition_D(sA), thr_a.partition_S(cA)
        tBsB, tBcB = thr_b.partition_D(sB), thr_b.partition_S(cB)
        # one 16-byte vector in global memory (the source of one cp.async); its address is
        # formed per vector from clamped coordinates (load_vectors), not from a tile partition
        vec_a = thr_a.partition_S(gA)[None, 0, 0, 0].layout
        vec_b = thr_b.partition_S(gB)[None, 0, 0, 0].layout

        # rows past m / n are never copied: zero the whole ring once so they read as 0
        tAsA.fill(0)
        tBsB.fill(0)
        cute.arch.sync_threads()

        # ---- prologue: tiles 0 .. stages-2 in flight (one commit group each, maybe empty)
        for s in cutlass.range_constexpr(self.stages - 1):
            if s < n_k_tiles:
                self.load_vectors(copy_a, a, vec_a, tAcA[None, None, None, s], tAsA[None, None, None, s], m)
                self.load_vectors(copy_b, b, vec_b, tBcB[None, None, None, s], tBsB[None, None, None, s], n)
            cute.arch.cp_async_commit_group()

        # ---- fragments: ldmatrix.x4 from the swizzled tiles into the mma.sync layout
        thr_mma = tiled_mma.get_slice(tidx)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA)[None, None, None, 0])
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB)[None, None, None, 0])
        acc = cute.make_rmem_tensor(thr_mma.partition_shape_C((self.block_m, self.block_n)), F32)
        acc.fill(0.0)
        ldsm = cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), self.dtype)
        s2r_a = cute.make_tiled_copy_A(ldsm, tiled_mma)
        s2r_b = cute.make_tiled_copy_B(ldsm, tiled_mma)
        thr_s2r_a = s2r_a.get_slice(tidx)
        thr_s2r_b = s2r_b.get_slice(tidx)
        tXsA = thr_s2r_a.partition_S(sA)
        tXrA = thr_s2r_a.retile(tCrA)
        tXsB = thr_s2r_b.partition_S(sB)
        tXrB = thr_s2r_b.retile(tCrB)
        n_kb = cute.size(tCrA, mode=[2])                  # k16 steps per tile

        # ---- main loop
        for kt in cutlass.range(n_k_tiles, unroll=1):
            cute.arch.cp_async_wait_group(self.stages - 2)   # tile kt has landed (this thread's part)
            cute.arch.sync_threads()                          # ... everyone's; and tile kt-1 is consumed
            nxt = kt + self.stages - 1
            if nxt < n_k_tiles:                               # refill the stage tile kt-1 used
                ws = nxt % self.stages
                self.load_vectors(copy_a, a, vec_a, tAcA[None, None, None, nxt], tAsA[None, None, None, ws], m)
                self.load_vectors(copy_b, b, vec_b, tBcB[None, None, None, nxt], tBsB[None, None, None, ws], n)
            cute.arch.cp_async_commit_group()
            rs = kt % self.stages
            for kb in cutlass.range_constexpr(n_kb):
                cute.copy(s2r_a, tXsA[None, None, kb, rs], tXrA[None, None, kb])
                cute.copy(s2r_b, tXsB[None, None, kb, rs], tXrB[None, None, kb])
                cute.gemm(tiled_mma, acc, tCrA[None, None, kb], tCrB[None, None, kb], acc)
        cute.arch.cp_async_wait_group(0)

        # ---- epilogue: round once, store where row < m and col < n
        gC = cute.local_tile(c, (self.block_m, self.block_n), (bm, bn))
        cC = cute.local_tile(cute.make_identity_tensor(c.shape), (self.block_m, self.block_n), (bm, bn))
        tCgC = thr_mma.partition_C(gC)
        tCcC = thr_mma.partition_C(cC)
        out = cute.make_rmem_tensor_like(acc, self.dtype)
        out.store(acc.load().to(self.dtype))
        for i in cutlass.range(cute.size(out), unroll_full=True):
            if cute.elem_less(tCcC[i], (m, n)):
                tCgC[i] = out[i]
