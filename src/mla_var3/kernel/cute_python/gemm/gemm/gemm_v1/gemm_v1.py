"""gemm_v1: naive CuTe DSL GEMM (one thread per output element, float32 accumulate).

Device code and its design notes: kernel.py. Devlog: docs/kernels/gemm.md.
"""
from __future__ import annotations

from dataclasses import dataclass

from mla_var3.layers.gemm.matmul import GemmProblem
from mla_var3.runtime.cute_kernel import CuteKernel, ensure_dsl_arch
from mla_var3.runtime.kernel_plan import KernelPlan, Tiling
from mla_var3.runtime.runtime_kernel import RuntimeKernel

DTYPES = ("bf16", "fp16")
INDEX_LIMIT = 2 ** 31          # 32-bit index math (dynamic extents are 32-bit sym ints)


@dataclass(frozen=True)
class GemmV1Tiling(Tiling):
    block_m: int = 8            # rows of C per block (threads along m)
    block_n: int = 32           # columns of C per block (threads along n: one warp wide)

    def validate(self, problem, device) -> list[str]:
        reasons = []
        if self.block_n < 32 or self.block_n % 32:
            reasons.append(f"block_n must be a positive multiple of 32 (whole warps along n), got {self.block_n}")
        if self.block_m < 1:
            reasons.append(f"block_m must be >= 1, got {self.block_m}")
        if self.block_m * self.block_n > 1024:
            reasons.append(f"block_m * block_n = {self.block_m * self.block_n} threads exceeds 1024 per block")
        return reasons


def index_reasons(problem) -> list[str]:
    big = [f"{name} has {rows * cols} elements" for name, rows, cols in
           (("a", problem.m, problem.k), ("b", problem.n, problem.k), ("c", problem.m, problem.n))
           if rows * cols >= INDEX_LIMIT]
    return [f"{', '.join(big)}: this kernel's index math is 32-bit (< 2^31 elements per operand)"] if big else []


class GemmV1(KernelPlan):
    name = "gemm_v1"
    language = "cute-dsl"
    arch = ("sm_90a",)
    problem_kind = GemmProblem
    Tiling = GemmV1Tiling
    summary = "CuTe DSL GEMM: naive, one thread per C element, fp32 loop over k from global memory"

    def supports(self, problem) -> list[str]:
        reasons = super().supports(problem)
        if reasons:
            return reasons
        if problem.dtype not in DTYPES:
            reasons.append(f"dtype must be one of {', '.join(DTYPES)}, got {problem.dtype}")
        return reasons + index_reasons(problem)

    def autotune_configs(self, problem) -> list[GemmV1Tiling]:
        return [GemmV1Tiling(block_m=bm, block_n=bn) for bm, bn in ((8, 32), (4, 64), (16, 32), (8, 64))]

    def example_bad_tilings(self) -> list[GemmV1Tiling]:
        return [GemmV1Tiling(block_n=48), GemmV1Tiling(block_m=64, block_n=32), GemmV1Tiling(block_m=0)]

    def _kernel(self, dtype: str, tiling: GemmV1Tiling, arch: str = "sm_90a") -> RuntimeKernel:
        ensure_dsl_arch(arch)
        from mla_var3.kernel.cute_python.common import gemm_io

        from . import kernel

        cdt = gemm_io.cute_dtype(dtype)
        stage = CuteKernel(kernel=self.name, tiling_key=tiling.key(), arch=arch,
                           build=lambda: kernel.GemmV1Kernel(cdt, tiling.block_m, tiling.block_n),
                           fake_args=lambda k: gemm_io.fake_arguments(cdt),
                           launch_args=lambda inputs, outputs, ws: gemm_io.launch_arguments(inputs.a, inputs.b, outputs[0]),
                           dtypes=(dtype,), static=())
        return self.runtime(tiling, stage)

    def plan(self, inputs, tiling) -> RuntimeKernel:
        return self._kernel(GemmProblem.from_inputs(inputs).dtype, tiling)

    def compile_only(self, problem, arch: str, tiling=None) -> dict:
        tiling = tiling or self.default_tiling(problem)
        self.check_tiling(tiling, problem, None)
        self._kernel(problem.dtype, tiling, arch).compile()
        return {"compiled": True}


Plan = GemmV1
