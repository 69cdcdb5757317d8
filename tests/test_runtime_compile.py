"""Stages compile for sm_90a with no GPU (CuteKernel, CtKernel, a two-stage CuTe DSL call);
the gpu suite runs them."""
import pytest
import torch

import tiny_kernels
import toy_layer
from mla_var3.runtime import cute_kernel
from mla_var3.runtime.ct_kernel import CtKernel, gpu_code_for
from mla_var3.runtime.cute_kernel import CuteKernel


def _axpy_stage(alpha=2.0, arch="sm_90a", options=cute_kernel.DEFAULT_OPTIONS, stage="main"):
    build, fake_args, launch_args = tiny_kernels.cute_axpy_parts(alpha)
    return CuteKernel(kernel=f"axpy_{alpha}", stage=stage, build=build, fake_args=fake_args,
                      launch_args=launch_args, dtypes=(torch.float32,), static=(alpha,), arch=arch, options=options)


def test_cute_kernel_compiles_for_sm90a_and_caches_by_stage_and_options():
    cute_kernel.clear_cache()
    k = _axpy_stage()
    fn = k.compile()
    assert fn is not None
    n_compiles = len(cute_kernel.COMPILE_LOG)
    assert _axpy_stage().compile() is fn, "same key must hit the compile cache"
    assert len(cute_kernel.COMPILE_LOG) == n_compiles
    other = _axpy_stage(alpha=3.0)
    assert other.key != k.key and other.compile() is not fn
    assert k.key.arch == "sm_90a" and k.key.tiling == "default" and k.key.stage == "main"
    assert _axpy_stage(stage="combine").key != k.key, "the stage is part of the key"
    assert _axpy_stage(options="--enable-tvm-ffi --opt-level 2").key != k.key, "so are the options"


def test_cute_kernel_emits_sm90a_ptx_into_the_dump_dir(tmp_path):
    k = _axpy_stage(alpha=5.0, options=f"--enable-tvm-ffi --keep-ptx --dump-dir={tmp_path}")
    ptx = k.compile().__ptx__
    assert ptx and ".target sm_90a" in ptx
    assert list(tmp_path.glob("*.ptx")), "the kept PTX goes to the dump dir, not the working directory"


def test_ct_kernel_exports_sm90_cubin():
    kernel, grid, kargs, sigs = tiny_kernels.ct_add_parts()
    k = CtKernel(kernel=kernel, grid=grid, kernel_args=kargs, signatures=sigs)
    cubin = k.export("sm_90a")
    assert cubin[:4] == b"\x7fELF"
    assert gpu_code_for("sm_90a") == "sm_90" and gpu_code_for("sm_80") == "sm_80"


def test_two_stage_cute_pair_compiles_each_stage():
    cute_kernel.clear_cache()
    plan = toy_layer.CuteColumnSum()
    info = plan.compile_only(toy_layer.ColumnSumProblem(), "sm_90a")
    assert info == {"compiled": True, "stages": ["split", "combine"]}
    keys = [key for key, _ in cute_kernel.COMPILE_LOG if key.kernel == "toy_column_sum_v1"]
    assert [k.stage for k in keys][-2:] == ["split", "combine"]


@pytest.mark.gpu
def test_tiny_kernels_run_on_gpu():
    x = torch.randn(1000, device="cuda")
    y = torch.randn(1000, device="cuda")
    expect = 2.0 * x + y
    _axpy_stage().launch(x, y)
    torch.testing.assert_close(y, expect)
    kernel, grid, kargs, sigs = tiny_kernels.ct_add_parts()
    a, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
    z = torch.full_like(a, float("nan"))
    CtKernel(kernel=kernel, grid=grid, kernel_args=kargs).launch(a, b, z)
    torch.cuda.synchronize()
    torch.testing.assert_close(z, a + b)


@pytest.mark.gpu
def test_two_stage_cute_pair_runs_through_check_and_bench():
    from mla_var3 import jobs
    from mla_var3.runtime import devices
    plan, kind = toy_layer.CuteColumnSum(), toy_layer.ColumnSumProblem
    rec, results = jobs.check_record(plan, kind.grid("check"), device="cuda", grid="check")
    assert rec["passed"] and [r.status for r in results] == ["pass"] * 6, [r.reason for r in results]
    problem = kind(m=4096, n=4096)
    bench = jobs.bench_record(plan, problem, devices.current_device(), rep_ms=10)
    assert bench["stages"] == ["split", "combine"] and bench["workspace_bytes"] == 4 * 4096 * 4
    assert bench["time_us"]["median"] > 0 and bench["problem_kind"] == "toy_column_sum"
