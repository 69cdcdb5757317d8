"""gemm_v1: naive CuTe DSL GEMM, one thread per output element (the first rung of the ladder).

Check (GPU):        python -m mla_var3.kernel gemm_v1 --check
Benchmark (GPU):    python -m mla_var3.kernel gemm_v1 --m=4096 --n=4096 --k=4096 --dtype=fp16
Compile only (CPU): python -m mla_var3.kernel gemm_v1 --compile-only --arch=sm_90a
The device function is `gemm_v1_kernel`, so profiler rows name the version.

What it is
- C[m, n] = A[m, k] @ B[n, k]^T with A, B K-major. A block of block_m x block_n threads
  computes a block_m x block_n tile of C; thread (tx, ty) owns C[row, col] with col = the block's
  first column + tx (threads of a warp walk along n, so the C stores coalesce) and row = the
  block's first row + ty. It loops over k, reading A[row, k] and B[col, k] straight from global
  memory (through L1/L2) and accumulating in float32, then rounds once to the output dtype.
- Ragged edges: a thread whose row >= m or col >= n does nothing (no load, no store).

Why (the baseline of the ladder)
- Nothing is reused on chip except by the caches: every FMA needs two 2-byte loads, and the B
  loads of a warp hit 32 different rows (stride k), so each is its own 32-byte sector.

Prediction at 4096^3 fp16 on the H200: 2 to 8 TFLOP/s (< 1 % of the 771 measured). Each FMA
costs two scalar loads; lanes of a warp share A[row, k] (one broadcast) but touch 32 rows of
B, i.e. 32 sectors per warp per k. L1 catches the reuse across the k loop (a sector holds 16
consecutive k), so the kernel is bound by L1/LSU throughput (~ 64 to 128 B/clk/SM of
requests), not by DRAM; at ~1 FMA per 4-8 B of L1 traffic that is ~10^13 to 2x10^13 FMA/s
at best, i.e. a few TFLOP/s once the scalar load instructions (3 per FMA: 2 loads + FMA, plus
index math) are counted against the 4 warp schedulers.

Constraints: bf16 or fp16; m arbitrary, n and k multiples of 8 (the problem kind's rule; v1
itself needs none); block_m * block_n <= 1024 threads, block_n a multiple of 32 (whole warps
along n); fewer than 2^31 elements per operand (32-bit index math).
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

F32 = cutlass.Float32


class GemmV1Kernel:
    """Device code of gemm_v1 (constexpr config; see the module docstring)."""

    def __init__(self, dtype, block_m: int = 8, block_n: int = 32):
        if block_n % 32 or block_m * block_n > 1024 or block_m < 1:
            raise ValueError(f"block: expected block_n a multiple of 32 and block_m * block_n <= 1024, "
                             f"got {block_m} x {block_n}")
        self.dtype, self.block_m, self.block_n = dtype, block_m, block_n

    # ---------------------------------------------------------------- host side
    @cute.jit
    def __call__(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, stream):
        m, n = c.shape
        grid = ((n + self.block_n - 1) // self.block_n, (m + self.block_m - 1) // self.block_m, 1)
        self.gemm_v1_kernel(a, b, c).launch(grid=grid, block=(self.block_n, self.block_m, 1), stream=stream)

    # ---------------------------------------------------------------- device side
    @cute.kernel
    def gemm_v1_kernel(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor):
        tx, ty, _ = cute.arch.thread_idx()
        bx, by, _ = cute.arch.block_idx()
        m, k = a.shape
        n = b.shape[0]
        row = by * self.block_m + ty
        col = bx * self.block_n + tx
        if row < m:
            if col < n:
                acc = F32(0.0)
                for kk in cutlass.range(k, unroll=4):
                    acc += F32(a[row, kk]) * F32(b[col, kk])
                c[row, col] = acc.to(self.dtype)
