"""gemm_v4: Hopper GEMM - TMA into a multi-stage smem ring (PipelineTmaAsync mbarriers), wgmma on
one or two consumer warpgroups, a producer warp (warp specialization).

Device code and its design notes: kernel.py. Devlog: docs/kernels/gemm.md.
"""
from __future__ import annotations

from dataclasses import dataclass

from mla_var3.layers.gemm.matmul import GemmProblem
from mla_var3.runtime.cute_kernel import CuteKernel, ensure_dsl_arch
from mla_var3.runtime.kernel_plan import KernelPlan, Tiling, smem_reasons
from mla_var3.runtime.runtime_kernel import RuntimeKernel

DTYPES = ("bf16", "fp16")
INDEX_LIMIT = 2 ** 31          # 32-bit index math (dynamic extents are 32-bit sym ints)


@dataclass(frozen=True)
class GemmV4Tiling(Tiling):
    block_n: int = 256          # columns of C per block (the wgmma N: a multiple of 16, <= 256)
    block_k: int = 64           # k per stage: 64 16-bit elements = one 128-byte swizzle row
    stages: int = 4             # depth of the TMA -> wgmma ring
    consumer_wgs: int = 2       # math warpgroups; block_m = 64 x consumer_wgs

    @property
    def block_m(self) -> int:
        return 64 * self.consumer_wgs

    def smem_bytes(self) -> int:
        return 2 * self.stages * self.block_k * (self.block_m + self.block_n) + 1024   # + mbarriers, alignment

    def validate(self, problem, device) -> list[str]:
        reasons = []
        if self.consumer_wgs not in (1, 2):
            reasons.append(f"consumer_wgs must be 1 or 2 (block_m 64 or 128), got {self.consumer_wgs}")
        if self.block_n % 16 or not 16 <= self.block_n <= 256:
            reasons.append(f"block_n must be a multiple of 16 in 16..256 (the wgmma N), got {self.block_n}")
        if self.block_k != 64:
            reasons.append(f"block_k must be 64 (one 128-byte swizzled row of 16-bit elements), got {self.block_k}")
        if not 2 <= self.stages <= 8:
            reasons.append(f"stages must be 2..8, got {self.stages}")
        return reasons + smem_reasons(self.smem_bytes(), device)


def index_reasons(problem) -> list[str]:
    big = [f"{name} has {rows * cols} elements" for name, rows, cols in
           (("a", problem.m, problem.k), ("b", problem.n, problem.k), ("c", problem.m, problem.n))
           if rows * cols >= INDEX_LIMIT]
    return [f"{', '.join(big)}: this kernel's index math is 32-bit (< 2^31 elements per operand)"] if big else []


class GemmV4(KernelPlan):
    name = "gemm_v4"
    language = "cute-dsl"
    arch = ("sm_90a",)
    problem_kind = GemmProblem
    Tiling = GemmV4Tiling
    summary = "CuTe DSL GEMM: TMA 4-stage ring + wgmma 64x256x16, 1 producer + 2 consumer warpgroups, 128x256x64"

    def supports(self, problem) -> list[str]:
        reasons = super().supports(problem)
        if reasons:
            return reasons
        if problem.dtype not in DTYPES:
            reasons.append(f"dtype must be one of {', '.join(DTYPES)}, got {problem.dtype}")
        return reasons + index_reasons(problem)

    def autotune_configs(self, problem) -> list[GemmV4Tiling]:
        return [GemmV4Tiling(block_n=bn, stages=st, consumer_wgs=wgs)
                for bn, st, wgs in ((256, 4, 2), (128, 6, 2), (256, 3, 2), (128, 4, 2), (256, 5, 1), (128, 8, 1))]

    def example_bad_tilings(self) -> list[GemmV4Tiling]:
        return [GemmV4Tiling(block_n=264), GemmV4Tiling(block_n=72), GemmV4Tiling(block_k=32),
                GemmV4Tiling(stages=1), GemmV4Tiling(consumer_wgs=3), GemmV4Tiling(stages=8)]

    def _kernel(self, dtype: str, tiling: GemmV4Tiling, arch: str = "sm_90a") -> RuntimeKernel:
        ensure_dsl_arch(arch)
        from mla_var3.kernel.cute_python.common import gemm_io

        from . import kernel

        t = tiling
        cdt = gemm_io.cute_dtype(dtype)
        stage = CuteKernel(kernel=self.name, tiling_key=t.key(), arch=arch,
                           build=lambda: kernel.GemmV4Kernel(cdt, t.block_n, t.block_k, t.stages, t.consumer_wgs),
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


Plan = GemmV4
