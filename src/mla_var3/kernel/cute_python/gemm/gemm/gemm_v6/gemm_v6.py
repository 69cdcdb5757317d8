"""gemm_v6: gemm_v5 (persistent, grouped raster, stmatrix + TMA-store epilogue) with one wgmma
batch kept in flight in the consumer mainloop (wait_group(1), then release the previous k tile's
slot; drain at the end of each output tile).

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
SMS_H200 = 132


@dataclass(frozen=True)
class GemmV6Tiling(Tiling):
    block_n: int = 256          # columns of C per tile (the wgmma N: a multiple of 16, <= 256)
    block_k: int = 64           # k per stage: 64 16-bit elements = one 128-byte swizzle row
    stages: int = 4             # depth of the TMA -> wgmma ring
    consumer_wgs: int = 2       # math warpgroups; block_m = 64 x consumer_wgs
    epi_n: int = 32             # columns per epilogue subtile (block_m x epi_n through smem, one TMA store)
    epi_bufs: int = 2           # epilogue subtile buffers in rotation
    group_m: int = 8            # raster: tile rows per group (L2 reuse of B across them)
    ctas: int = SMS_H200        # persistent CTAs (one per SM of the H200)

    @property
    def block_m(self) -> int:
        return 64 * self.consumer_wgs

    def smem_bytes(self) -> int:
        ring = 2 * self.stages * self.block_k * (self.block_m + self.block_n)
        return ring + 2 * self.epi_bufs * self.block_m * self.epi_n + 1024   # + mbarriers, alignment

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
        if self.epi_n not in (16, 32, 64) or self.block_n % self.epi_n:
            reasons.append(f"epi_n must be 16, 32 or 64 and divide block_n {self.block_n}, got {self.epi_n}")
        elif self.epi_bufs < 1 or (self.block_n // self.epi_n) % self.epi_bufs:
            reasons.append(f"epi_bufs {self.epi_bufs} must divide the {self.block_n // self.epi_n} epilogue "
                           f"subtiles of a tile (static buffer indices)")
        if self.group_m < 1:
            reasons.append(f"group_m must be >= 1, got {self.group_m}")
        if self.ctas < 1 or (device is not None and self.ctas > device.sms):
            limit = f"1..{device.sms} (the SMs of the {device.display_name})" if device is not None else ">= 1"
            reasons.append(f"ctas must be {limit}: one persistent CTA per SM, got {self.ctas}")
        return reasons + smem_reasons(self.smem_bytes(), device)


def index_reasons(problem) -> list[str]:
    big = [f"{name} has {rows * cols} elements" for name, rows, cols in
           (("a", problem.m, problem.k), ("b", problem.n, problem.k), ("c", problem.m, problem.n))
           if rows * cols >= INDEX_LIMIT]
    return [f"{', '.join(big)}: this kernel's index math is 32-bit (< 2^31 elements per operand)"] if big else []


class GemmV6(KernelPlan):
    name = "gemm_v6"
    language = "cute-dsl"
    arch = ("sm_90a",)
    problem_kind = GemmProblem
    Tiling = GemmV6Tiling
    summary = ("CuTe DSL GEMM: gemm_v5 + one wgmma batch in flight (wait_group(1), release the "
               "previous slot)")

    def supports(self, problem) -> list[str]:
        reasons = super().supports(problem)
        if reasons:
            return reasons
        if problem.dtype not in DTYPES:
            reasons.append(f"dtype must be one of {', '.join(DTYPES)}, got {problem.dtype}")
        return reasons + index_reasons(problem)

    def autotune_configs(self, problem) -> list[GemmV6Tiling]:
        return [GemmV6Tiling(block_n=bn, stages=st, consumer_wgs=wgs, epi_n=en, epi_bufs=eb, group_m=g)
                for bn, st, wgs, en, eb, g in ((256, 4, 2, 32, 2, 8), (256, 4, 2, 32, 4, 8), (256, 4, 2, 64, 2, 8),
                                               (256, 4, 2, 32, 2, 16), (256, 3, 2, 64, 4, 8),
                                               (128, 6, 2, 32, 2, 8), (128, 4, 2, 64, 2, 8),
                                               (256, 5, 1, 32, 2, 8))]

    def example_bad_tilings(self) -> list[GemmV6Tiling]:
        return [GemmV6Tiling(block_n=264), GemmV6Tiling(block_k=32), GemmV6Tiling(stages=1),
                GemmV6Tiling(consumer_wgs=3), GemmV6Tiling(epi_n=48), GemmV6Tiling(epi_bufs=3),
                GemmV6Tiling(ctas=0), GemmV6Tiling(ctas=264), GemmV6Tiling(stages=5)]

    def _kernel(self, dtype: str, tiling: GemmV6Tiling, arch: str = "sm_90a") -> RuntimeKernel:
        ensure_dsl_arch(arch)
        from mla_var3.kernel.cute_python.common import gemm_io

        from . import kernel

        t = tiling
        cdt = gemm_io.cute_dtype(dtype)
        stage = CuteKernel(kernel=self.name, tiling_key=t.key(), arch=arch,
                           build=lambda: kernel.GemmV6Kernel(cdt, t.block_n, t.block_k, t.stages, t.consumer_wgs,
                                                             t.epi_n, t.epi_bufs, t.group_m, t.ctas),
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


Plan = GemmV6
