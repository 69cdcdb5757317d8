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
        def __call__(self, x: cute.Tensor, y: cute.Tensor, stream, probe: cute.Tensor = None):
            # `probe` (never passed): a trailing default like the MLA kernels' `timeline=None`
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


def cute_column_sum_stages(splits: int = 4):
    """Two CuTe DSL stages that sum the rows of x [m, n] float32 the way split-KV decode works:
    "split" writes one partial column sum per row range into a workspace [splits, n], "combine"
    adds the partials into y [n]. Returns {stage: (build, fake_args, launch_args)}."""
    class SplitColumnSum:
        @cute.kernel
        def split_column_sum_kernel(self, x: cute.Tensor, partial: cute.Tensor):
            bidx, split, _ = cute.arch.block_idx()
            tidx, _, _ = cute.arch.thread_idx()
            j = bidx * THREADS + tidx
            m = x.shape[0]
            per = (m + splits - 1) // splits
            lo = split * per
            hi = cutlass.min(m, lo + per)
            if j < x.shape[1]:
                acc = cutlass.Float32(0.0)
                for i in cutlass.range(lo, hi, 1, unroll=1):
                    acc += x[i, j]
                partial[split, j] = acc

        @cute.jit
        def __call__(self, x: cute.Tensor, partial: cute.Tensor, stream):
            self.split_column_sum_kernel(x, partial).launch(
                grid=(cute.ceil_div(x.shape[1], THREADS), splits, 1), block=(THREADS, 1, 1), stream=stream)

    class CombineColumnSum:
        @cute.kernel
        def combine_column_sum_kernel(self, partial: cute.Tensor, y: cute.Tensor):
            bidx, _, _ = cute.arch.block_idx()
            tidx, _, _ = cute.arch.thread_idx()
            j = bidx * THREADS + tidx
            if j < y.shape[0]:
                acc = cutlass.Float32(0.0)
                for s in cutlass.range_constexpr(splits):
                    acc += partial[s, j]
                y[j] = acc

        @cute.jit
        def __call__(self, partial: cute.Tensor, y: cute.Tensor, stream):
            self.combine_column_sum_kernel(partial, y).launch(
                grid=(cute.ceil_div(y.shape[0], THREADS), 1, 1), block=(THREADS, 1, 1), stream=stream)

    def fake_split(obj):
        m, n = cute.sym_int(symbol="m"), cute.sym_int(symbol="n")
        x = make_fake_compact_tensor(cutlass.Float32, (m, n), stride_order=(1, 0), assumed_align=4)
        partial = make_fake_compact_tensor(cutlass.Float32, (splits, n), stride_order=(1, 0), assumed_align=4)
        return x, partial, make_fake_stream(use_tvm_ffi_env_stream=True)

    def fake_combine(obj):
        n = cute.sym_int(symbol="n")
        partial = make_fake_compact_tensor(cutlass.Float32, (splits, n), stride_order=(1, 0), assumed_align=4)
        y = make_fake_compact_tensor(cutlass.Float32, (n,), assumed_align=4)
        return partial, y, make_fake_stream(use_tvm_ffi_env_stream=True)

    return {
        "split": (SplitColumnSum, fake_split, lambda inputs, outputs, ws: (inputs.x, ws["partial"])),
        "combine": (CombineColumnSum, fake_combine, lambda inputs, outputs, ws: (ws["partial"], outputs[0])),
    }
