"""Tiny element-wise kernels, one per language, that exercise CuteKernel and CtKernel.

Compiled for sm_90a on the CPU by the CPU suite; launched on the GPU by the gpu suite.
"""
import os

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")   # read once, when cutlass.cute is imported

import cuda.tile as ct  # noqa: E402
import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cuda.tile.compilation import ArrayConstraint, CallingConvention, KernelSignature  # noqa: E402
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream  # noqa: E402

ConstInt = ct.Constant[int]   # module level: cuTile resolves annotations in the module's globals

THREADS = 128


def cute_axpy_parts(alpha: float = 2.0):
    """(build, fake_args, launch_args) of y = alpha * x + y, float32, any length."""
    class Axpy:
        def __init__(self, alpha: float):
            self.alpha = alpha

        @cute.kernel
        def kernel(self, x: cute.Tensor, y: cute.Tensor):
            bidx, _, _ = cute.arch.block_idx()
            tidx, _, _ = cute.arch.thread_idx()
            i = bidx * THREADS + tidx
            if i < x.shape[0]:
                y[i] = cutlass.Float32(self.alpha) * x[i] + y[i]

        @cute.jit
        def __call__(self, x: cute.Tensor, y: cute.Tensor, stream):
            self.kernel(x, y).launch(grid=(cute.ceil_div(x.shape[0], THREADS), 1, 1),
                                     block=(THREADS, 1, 1), stream=stream)

    def fake_args(obj):
        n = cute.sym_int64(symbol="N")
        x, y = (make_fake_compact_tensor(cutlass.Float32, (n,), assumed_align=4) for _ in range(2))
        return x, y, make_fake_stream(use_tvm_ffi_env_stream=True)

    return (lambda: Axpy(alpha)), fake_args, (lambda x, y: (x, y))


def ct_add_parts(tile: int = 256):
    """(kernel, grid, kernel_args, signatures) of z = x + y, float32, length a multiple of `tile`."""
    @ct.kernel
    def vec_add(x, y, z, TILE: ConstInt):
        i = ct.bid(0)
        a = ct.load(x, index=(i,), shape=(TILE,))
        b = ct.load(y, index=(i,), shape=(TILE,))
        ct.store(z, index=(i,), tile=a + b)

    def grid(x, y, z):
        return (x.shape[0] // tile, 1, 1)

    def kernel_args(x, y, z):
        return (x, y, z, tile)

    def signatures():
        arr = ArrayConstraint(ct.float32, 1, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=(),
                              may_alias_internally=False, stride_constant=(1,), base_addr_divisible_by=16)
        return [KernelSignature([arr, arr, arr, tile], CallingConvention.cutile_python_v1())]

    return vec_add, grid, kernel_args, signatures
