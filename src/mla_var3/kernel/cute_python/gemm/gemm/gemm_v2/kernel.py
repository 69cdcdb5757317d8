"""gemm_v2: shared-memory tiled CuTe DSL GEMM with a register tile per thread (SIMT float32 FMA).

Check (GPU):        python -m mla_var3.kernel gemm_v2 --check
Benchmark (GPU):    python -m mla_var3.kernel gemm_v2 --m=4096 --n=4096 --k=4096 --dtype=fp16 --compare=gemm_v1
Compile only (CPU): python -m mla_var3.kernel gemm_v2 --compile-only --arch=sm_90a
The device function is `gemm_v2_kernel`, so profiler rows name the version.

What changed from gemm_v1, and why
- v1 re-reads every A and B element from L1/L2 once per output it feeds (2 loads per FMA). v2
  stages a block_m x block_k tile of A and a block_n x block_k tile of B in shared memory once
  per k step, and each thread computes a thread_m x thread_n (8 x 8) register tile of C: per k
  it reads thread_m values of A and thread_n of B from shared memory and does
  thread_m * thread_n FMAs, 64 FMAs per 16 shared loads instead of 1 FMA per 2 global loads.
- Loads from global are 16-byte vectors (8 elements along k, the contiguous axis of A and B);
  the values are converted to float32 once, on the way into shared memory, which holds the
  tiles k-outer (sA[k][m], sB[k][n], m/n contiguous, padded by 4 floats), so the inner loop
  reads each thread's 8 consecutive m (or n) values as two 16-byte vectors with no conversion.

Tiling (defaults): block 128 x 128 x 32, 256 threads as a 16 x 16 grid, thread (tx, ty) owns
rows ty*8 .. ty*8+7 and columns tx*8 .. tx*8+7 of the block's C tile. One buffer: load,
sync, compute, sync (no overlap of the next tile's loads with this tile's math yet).

Ragged edges: a 16-byte vector of A (row r, k chunk kc) is loaded only when r < m and
kc*8 < k, otherwise zeros are stored; k is a multiple of 8, so a chunk is either entirely in
bounds or entirely out. Same for B with n. C is stored as 8-element vectors per row, skipped
for rows >= m and column chunks >= n (n is a multiple of 8 and the thread's 8 columns start
at a multiple of 8, so a chunk is all in or all out).

Prediction at 4096^3 fp16 on the H200: 15 to 35 TFLOP/s. No tensor cores: the ceiling is
the float32 FMA rate, 132 SMs x 128 FMA/clk x 2 x ~1.8 GHz ~ 60 TFLOP/s. The 8x8 register
tile keeps the FMA:shared-load ratio at 4:1 per instruction (64 FMA per 4 LDS.128 + index
math), but a single buffer stalls every block at each barrier while its next tile loads, and
256 threads with ~128 registers allow 2 blocks per SM to hide that; expect 25-55 % of the FMA
peak.

Constraints: bf16 or fp16; m arbitrary, n and k multiples of 8; thread_m divides block_m,
thread_n divides block_n, thread_n and block_k are multiples of 8, 32..1024 threads, each
operand tile's 16-byte vectors spread evenly over the threads, at most 128 accumulators per
thread (the plan's Tiling.validate says which one fails); fewer than 2^31 elements per operand
(32-bit index math).
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.memory import SmemAllocator

F32 = cutlass.Float32
VEC = 8              # elements per 16-byte global load / store
PAD = 4              # floats of padding per smem row (bank spread for the transposed stores)


class GemmV2Kernel:
    """Device code of gemm_v2 (constexpr config; see the module docstring)."""

    def __init__(self, dtype, block_m: int = 128, block_n: int = 128, block_k: int = 32,
                 thread_m: int = 8, thread_n: int = 8):
        self.dtype = dtype
        self.block_m, self.block_n, self.block_k = block_m, block_n, block_k
        self.thread_m, self.thread_n = thread_m, thread_n
        self.threads_n = block_n // thread_n
        self.threads_m = block_m // thread_m
        self.num_threads = self.threads_m * self.threads_n
        if (block_m % thread_m or block_n % thread_n or thread_n % VEC or block_k % VEC
                or (block_m * block_k // VEC) % self.num_threads or (block_n * block_k // VEC) % self.num_threads
                or not 32 <= self.num_threads <= 1024):
            raise ValueError(f"gemm_v2 tiling {block_m}x{block_n}x{block_k} / {thread_m}x{thread_n} does not fit "
                             "(see the plan's Tiling.validate)")
        self.chunks_k = block_k // VEC                     # 16-byte chunks per tile row
        self.a_loads = block_m * self.chunks_k // self.num_threads
        self.b_loads = block_n * self.chunks_k // self.num_threads

    # ---------------------------------------------------------------- host side
    @cute.jit
    def __call__(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, stream):
        m, n = c.shape
        # k-outer float32 tiles: element (m, k) at k * (block_m + PAD) + m
        sA_l = cute.make_layout((self.block_m, self.block_k), stride=(1, self.block_m + PAD))
        sB_l = cute.make_layout((self.block_n, self.block_k), stride=(1, self.block_n + PAD))

        @cute.struct
        class Storage:
            sA: cute.struct.Align[cute.struct.MemRange[F32, cute.cosize(sA_l)], 16]
            sB: cute.struct.Align[cute.struct.MemRange[F32, cute.cosize(sB_l)], 16]

        self.storage = Storage
        grid = ((n + self.block_n - 1) // self.block_n, (m + self.block_m - 1) // self.block_m, 1)
        self.gemm_v2_kernel(a, b, c, sA_l, sB_l).launch(grid=grid, block=(self.num_threads, 1, 1), stream=stream)

    # ---------------------------------------------------------------- device side
    @cute.jit
    def load_tile(self, g: cute.Tensor, s: cute.Tensor, row0, rows, k0, k, n_loads: cutlass.Constexpr, tidx):
        """One block_rows x block_k tile of a K-major operand (rows row0.., columns k0..) into the
        k-outer float32 smem tile `s`: 16-byte vector loads, zeros outside rows x k."""
        frag = cute.make_rmem_tensor((1, VEC), self.dtype)
        for i in cutlass.range_constexpr(n_loads):
            idx = tidx + i * self.num_threads
            r = idx // self.chunks_k
            kc = idx % self.chunks_k
            grow = row0 + r
            gk = k0 + kc * VEC
            frag.fill(0.0)
            if grow < rows:
                if gk < k:
                    cute.autovec_copy(cute.local_tile(g, (1, VEC), (grow, gk // VEC)), frag)
            for e in cutlass.range_constexpr(VEC):
                s[r, kc * VEC + e] = F32(frag[0, e])

    @cute.kernel
    def gemm_v2_kernel(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor,
                       sA_l: cute.Layout, sB_l: cute.Layout):
        tidx, _, _ = cute.arch.thread_idx()
        bx, by, _ = cute.arch.block_idx()
        m, k = a.shape
        n = b.shape[0]
        tx = tidx % self.threads_n
        ty = tidx // self.threads_n
        m0 = by * self.block_m
        n0 = bx * self.block_n

        st = SmemAllocator().allocate(self.storage)
        sA = st.sA.get_tensor(sA_l)
        sB = st.sB.get_tensor(sB_l)

        acc = cute.make_rmem_tensor((self.thread_m, self.thread_n), F32)
        acc.fill(0.0)
        ra = cute.make_rmem_tensor((self.thread_m, 1), F32)
        rb = cute.make_rmem_tensor((self.thread_n, 1), F32)

        n_k_tiles = (k + self.block_k - 1) // self.block_k
        for kt in cutlass.range(n_k_tiles, unroll=1):
            k0 = kt * self.block_k
            self.load_tile(a, sA, m0, m, k0, k, self.a_loads, tidx)
            self.load_tile(b, sB, n0, n, k0, k, self.b_loads, tidx)
            cute.arch.sync_threads()
            for kk in cutlass.range_constexpr(self.block_k):
                cute.autovec_copy(cute.local_tile(sA, (self.thread_m, 1), (ty, kk)), ra)
                cute.autovec_copy(cute.local_tile(sB, (self.thread_n, 1), (tx, kk)), rb)
                for i in cutlass.range_constexpr(self.thread_m):
                    for j in cutlass.range_constexpr(self.thread_n):
                        acc[i, j] = acc[i, j] + ra[i, 0] * rb[j, 0]
            cute.arch.sync_threads()

        # ---- epilogue: round once, 8-column vector stores, rows >= m / columns >= n skipped
        out = cute.make_rmem_tensor((1, self.thread_n), self.dtype)
        for i in cutlass.range_constexpr(self.thread_m):
            grow = m0 + ty * self.thread_m + i
            if grow < m:
                for jc in cutlass.range_constexpr(self.thread_n // VEC):
                    gcol = n0 + tx * self.thread_n + jc * VEC
                    if gcol < n:
                        for e in cutlass.range_constexpr(VEC):
                            out[0, jc * VEC + e] = acc[i, jc * VEC + e].to(self.dtype)
                        cute.autovec_copy(cute.local_tile(out, (1, VEC), (0, jc)),
                                          cute.local_tile(c, (1, VEC), (grow, gcol // VEC)))
