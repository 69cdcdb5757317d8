"""Companion example, element-wise: out = ALPHA * x + y in bf16 (fp32 math), in CuTe DSL.

A single-file kernel for `scripts/verify_kernel.py` and `scripts/benchmark_kernel.py`: it
exports `get_inputs()`, `kernel_fn(*inputs)` and `reference_fn(*inputs)`. Each thread owns VEC =
8 consecutive elements (16 bytes: one 128-bit load of x, one of y, one store), so the length must
be a multiple of 8; n is dynamic (one compile serves every length). `compile_kernel()` compiles for
CUTE_DSL_ARCH (sm_90a) from fake tensors, without a GPU; `kernel_fn` calls the compiled function
through TVM-FFI on torch tensors and the current stream, allocating its output.
"""
from __future__ import annotations

import functools
import os

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")      # read once, when cutlass.cute is imported

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
import torch  # noqa: E402
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream  # noqa: E402

ALPHA = 2.0
VEC = 8                   # bf16 elements per thread: 16 bytes
THREADS = 256
N = 1 << 26               # 64 Mi elements: 384 MiB moved per call


class AxpyBf16:
    @cute.kernel
    def kernel(self, x: cute.Tensor, y: cute.Tensor, out: cute.Tensor):
        bidx, _, _ = cute.arch.block_idx()
        tidx, _, _ = cute.arch.thread_idx()
        # ((VEC), (n / VEC)): mode 1 enumerates the 16-byte chunks
        cx, cy, co = (cute.zipped_divide(t, (VEC,)) for t in (x, y, out))
        i = bidx * THREADS + tidx
        if i < cute.size(cx, mode=[1]):
            a = cx[(None, i)].load().to(cutlass.Float32)
            b = cy[(None, i)].load().to(cutlass.Float32)
            co[(None, i)].store((a * cutlass.Float32(ALPHA) + b).to(cutlass.BFloat16))

    @cute.jit
    def __call__(self, x: cute.Tensor, y: cute.Tensor, out: cute.Tensor, stream):
        chunks = cute.size(x) // VEC
        self.kernel(x, y, out).launch(grid=(cute.ceil_div(chunks, THREADS), 1, 1), block=(THREADS, 1, 1),
                                      stream=stream)


@functools.lru_cache(maxsize=1)
def compile_kernel():
    """The compiled function (x, y, out) for CUTE_DSL_ARCH; needs no GPU."""
    n = cute.sym_int(divisibility=VEC, symbol="n")
    x, y, out = (make_fake_compact_tensor(cutlass.BFloat16, (n,), assumed_align=16) for _ in range(3))
    return cute.compile(AxpyBf16(), x, y, out, make_fake_stream(use_tvm_ffi_env_stream=True),
                        options="--enable-tvm-ffi")


def get_inputs(device: str = "cuda", n: int = N, seed: int = 0):
    g = torch.Generator(device=device).manual_seed(seed)
    return tuple(torch.randn(n, generator=g, device=device, dtype=torch.float32).to(torch.bfloat16)
                 for _ in range(2))


def kernel_fn(x, y):
    if x.shape != y.shape or x.dim() != 1 or x.numel() % VEC:
        raise ValueError(f"x, y: expected two 1-D bf16 tensors of one length, a multiple of {VEC}; "
                         f"got {list(x.shape)} and {list(y.shape)}")
    out = torch.empty_like(x)
    compile_kernel()(x, y, out)
    return out


def reference_fn(x, y):
    """fp32 math, rounded to bf16 once, as the kernel does."""
    return (ALPHA * x.float() + y.float()).to(torch.bfloat16)
