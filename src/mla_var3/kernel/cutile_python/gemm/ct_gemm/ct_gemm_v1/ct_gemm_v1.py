"""ct_gemm_v1: tiled cuTile GEMM (ct.mma, float32 accumulate, grouped tile order).

Device code and its notes: kernel.py. Devlog: docs/kernels/ct_gemm.md.
"""
from __future__ import annotations

from dataclasses import dataclass

from mla_var3.layers.gemm.matmul import GemmProblem
from mla_var3.runtime.ct_kernel import CtKernel, gpu_code_for
from mla_var3.runtime.kernel_plan import KernelPlan, Tiling, smem_reasons
from mla_var3.runtime.runtime_kernel import RuntimeKernel

DTYPES = ("bf16", "fp16")
INDEX_LIMIT = 2 ** 31          # int32 index math
POW2 = (16, 32, 64, 128, 256)


@dataclass(frozen=True)
class CtGemmTiling(Tiling):
    tile_m: int = 128           # rows of C per block
    tile_n: int = 128           # columns of C per block
    tile_k: int = 64            # k per step
    group_m: int = 8            # row tiles per group of the tile order (L2 reuse)
    occupancy: int = 2          # blocks per SM the compiler plans for (sm_90 hint)

    def smem_bytes(self) -> int:
        """A lower bound of what cuTile reserves: two stages of the A and B tiles (2 bytes each)."""
        return 2 * 2 * self.tile_k * (self.tile_m + self.tile_n)

    def validate(self, problem, device) -> list[str]:
        reasons = []
        for name in ("tile_m", "tile_n", "tile_k"):
            v = getattr(self, name)
            if v not in POW2:
                reasons.append(f"{name} must be one of {', '.join(map(str, POW2))} (a power-of-two cuTile tile), got {v}")
        if self.tile_m * self.tile_n > 128 * 256:
            reasons.append(f"tile {self.tile_m}x{self.tile_n}: the float32 accumulator exceeds 128x256 "
                           "(more than the registers of two warpgroups)")
        if not 1 <= self.group_m <= 64:
            reasons.append(f"group_m must be 1..64, got {self.group_m}")
        if not 1 <= self.occupancy <= 4:
            reasons.append(f"occupancy must be 1..4, got {self.occupancy}")
        if device is not None and not reasons and device.smem_per_block_bytes:
            need = self.smem_bytes() * self.occupancy
            if need > device.smem_per_block_bytes:
                reasons.append(f"occupancy {self.occupancy} x {self.smem_bytes() // 1024} KB of double-buffered "
                               f"tiles exceeds {device.display_name}'s {device.smem_per_block_bytes // 1024} KB of "
                               "shared memory")
        return reasons + smem_reasons(self.smem_bytes(), device)


class CtGemmV1(KernelPlan):
    name = "ct_gemm_v1"
    language = "cutile"
    arch = ("sm_90a",)
    problem_kind = GemmProblem
    Tiling = CtGemmTiling
    summary = "cuTile GEMM: 128x128x64 tiles, ct.mma (HGMMA on sm_90), grouped tile order, occupancy 2"

    def supports(self, problem) -> list[str]:
        reasons = super().supports(problem)
        if reasons:
            return reasons
        if problem.dtype not in DTYPES:
            reasons.append(f"dtype must be one of {', '.join(DTYPES)}, got {problem.dtype}")
        big = [f"{name} has {r * c} elements" for name, r, c in
               (("a", problem.m, problem.k), ("b", problem.n, problem.k), ("c", problem.m, problem.n))
               if r * c >= INDEX_LIMIT]
        if big:
            reasons.append(f"{', '.join(big)}: this kernel's index math is int32 (< 2^31 elements per operand)")
        return reasons

    def autotune_configs(self, problem) -> list[CtGemmTiling]:
        return [CtGemmTiling(tile_m=tm, tile_n=tn, tile_k=tk, occupancy=occ)
                for tm, tn, tk, occ in ((128, 128, 64, 2), (128, 128, 64, 1), (128, 128, 32, 2),
                                        (128, 64, 64, 2), (64, 128, 64, 2), (128, 256, 64, 1))]

    def example_bad_tilings(self) -> list[CtGemmTiling]:
        return [CtGemmTiling(tile_m=96), CtGemmTiling(tile_k=8), CtGemmTiling(tile_m=256, tile_n=256),
                CtGemmTiling(group_m=0), CtGemmTiling(occupancy=8), CtGemmTiling(tile_k=256, occupancy=4)]

    def _kernel(self, tiling: CtGemmTiling, dtype: str) -> CtKernel:
        from . import kernel
        t = tiling

        def grid(inputs, outputs, workspace):
            return kernel.grid(inputs.a.shape[0], inputs.b.shape[0], t.tile_m, t.tile_n)

        def kernel_args(inputs, outputs, workspace):
            return kernel.kernel_args(inputs.a, inputs.b, outputs[0], t.tile_m, t.tile_n, t.tile_k, t.group_m)
        return CtKernel(kernel=kernel.kernel_for(t.occupancy), grid=grid, kernel_args=kernel_args,
                        signatures=lambda: kernel.export_signatures(dtype, t.tile_m, t.tile_n, t.tile_k, t.group_m))

    def plan(self, inputs, tiling) -> RuntimeKernel:
        return self.runtime(tiling, self._kernel(tiling, GemmProblem.from_inputs(inputs).dtype))

    def compile_only(self, problem, arch: str, tiling=None) -> dict:
        tiling = tiling or self.default_tiling(problem)
        self.check_tiling(tiling, problem, None)
        cubin = self._kernel(tiling, problem.dtype).export(arch)
        return {"compiled": True, "gpu_code": gpu_code_for(arch), "cubin_bytes": len(cubin)}


Plan = CtGemmV1
