"""Companion example, row reduction: RMSNorm in bf16, in CuTe DSL.

out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + EPS) * w, fp32 math, bf16 in and out. A single-file
kernel for `scripts/verify_kernel.py` and `scripts/benchmark_kernel.py` (it exports
`get_inputs()`, `kernel_fn(*inputs)` and `reference_fn(*inputs)`). One block of 256 threads per
row: each thread walks the row in 16-byte chunks (8 bf16), sums squares in fp32, the 8 warps
reduce with butterfly shuffles and one float each in shared memory, then every thread scales its
chunks (the second read of the row is an L2 hit for rows of a few KB). The hidden size must be a
multiple of 8; rows and hidden size are dynamic. `compile_kernel()` compiles without a GPU.
"""
from __future__ import annotations

import functools
import os

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")      # read once, when cutlass.cute is imported

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
import torch  # noqa: E402
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream  # noqa: E402
from cutlass.memory import SmemAllocator  # noqa: E402

EPS = 1e-6
VEC = 8                   # bf16 elements per chunk: 16 bytes
THREADS = 256
WARPS = THREADS // 32
ROWS, HIDDEN = 16384, 4096     # 128 MiB in, 128 MiB out


class RmsNormBf16:
    @cute.kernel
    def kernel(self, x: cute.Tensor, w: cute.Tensor, out: cute.Tensor):
        row, _, _ = cute.arch.block_idx()
        tidx, _, _ = cute.arch.thread_idx()
        lane, warp = tidx % 32, tidx // 32

        @cute.struct
        class Storage:
            partial: cute.struct.MemRange[cutlass.Float32, WARPS]
        st = SmemAllocator().allocate(Storage)
        partial = st.partial.get_tensor(cute.make_layout(WARPS))

        cx = cute.zipped_divide(x[(row, None)], (VEC,))       # ((VEC), (hidden / VEC))
        co = cute.zipped_divide(out[(row, None)], (VEC,))
        cw = cute.zipped_divide(w, (VEC,))
        chunks = cute.size(cx, mode=[1])

        ss = cutlass.Float32(0.0)
        for c in cutlass.range(tidx, chunks, THREADS, unroll=1):
            v = cx[(None, c)].load().to(cutlass.Float32)
            ss += (v * v).reduce(cute.ReductionOp.ADD, cutlass.Float32(0.0), reduction_profile=0)
        ss = cute.arch.warp_reduction_sum(ss, threads_in_group=32)
        if lane == 0:
            partial[warp] = ss
        cute.arch.sync_threads()
        total = cutlass.Float32(0.0)
        for i in cutlass.range_constexpr(WARPS):
            total += partial[i]
        hidden = cute.size(x, mode=[1])
        rstd = cute.math.rsqrt(total / cutlass.Float32(hidden) + cutlass.Float32(EPS))

        for c in cutlass.range(tidx, chunks, THREADS, unroll=1):
            v = cx[(None, c)].load().to(cutlass.Float32)
            g = cw[(None, c)].load().to(cutlass.Float32)
            co[(None, c)].store((v * rstd * g).to(cutlass.BFloat16))

    @cute.jit
    def __call__(self, x: cute.Tensor, w: cute.Tensor, out: cute.Tensor, stream):
        self.kernel(x, w, out).launch(grid=(cute.size(x, mode=[0]), 1, 1), block=(THREADS, 1, 1),
                                      stream=stream)


@functools.lru_cache(maxsize=1)
def compile_kernel():
    """The compiled function (x, w, out) for CUTE_DSL_ARCH; needs no GPU."""
    m = cute.sym_int(symbol="m")
    h = cute.sym_int(divisibility=VEC, symbol="h")
    x = make_fake_compact_tensor(cutlass.BFloat16, (m, h), stride_order=(1, 0), assumed_align=16)
    w = make_fake_compact_tensor(cutlass.BFloat16, (h,), assumed_align=16)
    out = make_fake_compact_tensor(cutlass.BFloat16, (m, h), stride_order=(1, 0), assumed_align=16)
    return cute.compile(RmsNormBf16(), x, w, out, make_fake_stream(use_tvm_ffi_env_stream=True),
                        options="--enable-tvm-ffi")


def get_inputs(device: str = "cuda", rows: int = ROWS, hidden: int = HIDDEN, seed: int = 0):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(rows, hidden, generator=g, device=device, dtype=torch.float32)
    w = 1.0 + 0.1 * torch.randn(hidden, generator=g, device=device, dtype=torch.float32)
    return x.to(torch.bfloat16), w.to(torch.bfloat16)


def kernel_fn(x, w):
    if x.dim() != 2 or w.shape != (x.shape[1],) or x.shape[1] % VEC or not x.is_contiguous():
        raise ValueError(f"x [rows, hidden] contiguous and w [hidden], hidden a multiple of {VEC}; "
                         f"got {list(x.shape)} and {list(w.shape)}")
    out = torch.empty_like(x)
    compile_kernel()(x, w, out)
    return out


def reference_fn(x, w):
    """fp32 math, rounded to bf16 once."""
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + EPS)
    return (xf * rstd * w.float()).to(torch.bfloat16)
