"""CuteKernel and CtKernel compile tiny kernels for sm_90a with no GPU; the gpu suite runs them."""
import pytest
import torch

from mla_var3.runtime import cute_kernel
from mla_var3.runtime.ct_kernel import CtKernel, gpu_code_for
from mla_var3.runtime.cute_kernel import CuteKernel
from mla_var3.runtime.kernel_plan import Tiling
import tiny_kernels


def _axpy_kernel(alpha=2.0, arch="sm_90a"):
    build, fake_args, launch_args = tiny_kernels.cute_axpy_parts(alpha)
    return CuteKernel(None, Tiling(), name=f"axpy_{alpha}", build=build, fake_args=fake_args,
                      launch_args=launch_args, dtypes=(torch.float32,), static=(alpha,), arch=arch)


def test_cute_kernel_compiles_for_sm90a_and_caches():
    cute_kernel.clear_cache()
    k = _axpy_kernel()
    fn = k.compile()
    assert fn is not None
    n_compiles = len(cute_kernel.COMPILE_LOG)
    assert _axpy_kernel().compile() is fn, "same key must hit the compile cache"
    assert len(cute_kernel.COMPILE_LOG) == n_compiles
    other = _axpy_kernel(alpha=3.0)
    assert other.key != k.key and other.compile() is not fn
    assert k.key.arch == "sm_90a" and k.key.tiling == "default"


def test_cute_kernel_emits_sm90a_ptx():
    k = _axpy_kernel(alpha=5.0)
    k.options = "--enable-tvm-ffi --keep-ptx"
    ptx = k.compile().__ptx__
    assert ptx and ".target sm_90a" in ptx


def test_ct_kernel_exports_sm90_cubin():
    kernel, grid, kargs, sigs = tiny_kernels.ct_add_parts()
    k = CtKernel(None, Tiling(), kernel=kernel, grid=grid, kernel_args=kargs, signatures=sigs)
    cubin = k.export("sm_90a")
    assert cubin[:4] == b"\x7fELF"
    assert gpu_code_for("sm_90a") == "sm_90" and gpu_code_for("sm_80") == "sm_80"


@pytest.mark.gpu
def test_tiny_kernels_run_on_gpu():
    x = torch.randn(1000, device="cuda")
    y = torch.randn(1000, device="cuda")
    expect = 2.0 * x + y
    _axpy_kernel().launch(x, y)
    torch.testing.assert_close(y, expect)
    kernel, grid, kargs, sigs = tiny_kernels.ct_add_parts()
    a, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
    z = torch.full_like(a, float("nan"))
    CtKernel(None, Tiling(), kernel=kernel, grid=grid, kernel_args=kargs).launch(a, b, z)
    torch.cuda.synchronize()
    torch.testing.assert_close(z, a + b)
