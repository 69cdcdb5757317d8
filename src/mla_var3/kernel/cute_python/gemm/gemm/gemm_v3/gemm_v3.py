"""gemm_v3: tensor cores via warp-level MMA (mma.sync m16n8k16), ldmatrix, swizzled smem, cp.async ring.

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
VEC = 8                        # elements per 16-byte vector (kernel.VEC)


@dataclass(frozen=True)
class GemmV3Tiling(Tiling):
    block_m: int = 128          # rows of C per block
    block_n: int = 128          # columns of C per block
    block_k: int = 64           # k per shared-memory stage (32 or 64: one swizzle atom row)
    warps_m: int = 2            # warps along m (each owns block_m / warps_m rows)
    warps_n: int = 2            # warps along n
    stages: int = 3             # cp.async ring depth

    @property
    def num_threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    def smem_bytes(self) -> int:
        return 2 * self.stages * self.block_k * (self.block_m + self.block_n)

    def validate(self, problem, device) -> list[str]:
        reasons = []
        if self.block_k not in (32, 64):
            reasons.append(f"block_k must be 32 or 64 (one 64- or 128-byte swizzled row), got {self.block_k}")
        if self.warps_m < 1 or self.warps_n < 1 or self.warps_m * self.warps_n > 8:
            reasons.append(f"warps {self.warps_m}x{self.warps_n}: expected 1..8 warps in all")
            return reasons
        for name, size, warps in (("block_m", self.block_m, self.warps_m), ("block_n", self.block_n, self.warps_n)):
            if size < 1 or size % (16 * warps):
                reasons.append(f"{name} {size} is not a multiple of 16 x {warps} warps (the m16 / 2 x n8 MMA tiles)")
        if not 2 <= self.stages <= 5:
            reasons.append(f"stages must be 2..5, got {self.stages}")
        if not reasons:
            for op, rows in (("A", self.block_m), ("B", self.block_n)):
                vecs = rows * self.block_k // VEC
                if vecs % self.num_threads:
                    reasons.append(f"the {op} tile's {vecs} 16-byte vectors do not divide evenly over "
                                   f"{self.num_threads} threads")
            acc = self.block_m * self.block_n // self.num_threads
            if acc > 128:
                reasons.append(f"{acc} float32 accumulators per thread (block {self.block_m}x{self.block_n} over "
                               f"{self.num_threads} threads): more than 128 would spill")
        return reasons + smem_reasons(self.smem_bytes(), device)


def index_reasons(problem) -> list[str]:
    big = [f"{name} has {rows * cols} elements" for name, rows, cols in
           (("a", problem.m, problem.k), ("b", problem.n, problem.k), ("c", problem.m, problem.n))
           if rows * cols >= INDEX_LIMIT]
    return [f"{', '.join(big)}: this kernel's index math is 32-bit (< 2^31 elements per operand)"] if big else []


class GemmV3(KernelPlan):
    name = "gemm_v3"
    language = "cute-dsl"
    arch = ("sm_90a",)
    problem_kind = GemmProblem
    Tiling = GemmV3Tiling
    summary = "CuTe DSL GEMM: mma.sync m16n8k16 (4 warps, 128x128x64), ldmatrix, swizzled smem, 3-stage cp.async"

    def supports(self, problem) -> list[str]:
        reasons = super().supports(problem)
        if reasons:
            return reasons
        if problem.dtype not in DTYPES:
            reasons.append(f"dtype must be one of {', '.join(DTYPES)}, got {problem.dtype}")
        return reasons + index_reasons(problem)

    def autotune_configs(self, problem) -> list[GemmV3Tiling]:
        return [GemmV3Tiling(block_m=bm, block_n=bn, block_k=bk, warps_m=wm, warps_n=wn, stages=st)
                for bm, bn, bk, wm, wn, st in ((128, 128, 64, 2, 2, 3), (128, 128, 32, 2, 2, 4),
                                               (128, 128, 64, 2, 2, 4), (128, 256, 64, 2, 4, 3),
                                               (256, 128, 64, 4, 2, 3), (64, 128, 64, 2, 2, 4))]

    def example_bad_tilings(self) -> list[GemmV3Tiling]:
        return [GemmV3Tiling(block_k=48), GemmV3Tiling(block_m=96, warps_m=4), GemmV3Tiling(stages=1),
                GemmV3Tiling(warps_m=4, warps_n=4), GemmV3Tiling(block_m=256, block_n=256),
                GemmV3Tiling(block_m=256, block_n=256, warps_m=4, warps_n=2, stages=5)]

    def _kernel(self, dtype: str, tiling: GemmV3Tiling, arch: str = "sm_90a") -> RuntimeKernel:
        ensure_dsl_arch(arch)
        from mla_var3.kernel.cute_python.common import gemm_io

        from . import kernel

        t = tiling
        cdt = gemm_io.cute_dtype(dtype)
        stage = CuteKernel(kernel=self.name, tiling_key=t.key(), arch=arch,
                           build=lambda: kernel.GemmV3Kernel(cdt, t.block_m, t.block_n, t.block_k, t.warps_m, t.warps_n, t.stages),
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


Plan = GemmV3
