"""gemm_v2: shared-memory tiled CuTe DSL GEMM (block tiles of A and B in smem, an 8x8 register
tile of C per thread, float32 FMA).

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
PAD = 4                        # floats of padding per smem row (kernel.PAD)


@dataclass(frozen=True)
class GemmV2Tiling(Tiling):
    block_m: int = 128          # rows of C per block
    block_n: int = 128          # columns of C per block
    block_k: int = 32           # k per shared-memory tile
    thread_m: int = 8           # rows of C per thread
    thread_n: int = 8           # columns of C per thread

    @property
    def num_threads(self) -> int:
        return (self.block_m // max(self.thread_m, 1)) * (self.block_n // max(self.thread_n, 1))

    def smem_bytes(self) -> int:
        return 4 * self.block_k * (self.block_m + PAD + self.block_n + PAD)

    def validate(self, problem, device) -> list[str]:
        reasons = []
        for name in ("block_m", "block_n", "block_k", "thread_m", "thread_n"):
            if getattr(self, name) < 1:
                reasons.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if reasons:
            return reasons
        if self.block_m % self.thread_m:
            reasons.append(f"thread_m {self.thread_m} does not divide block_m {self.block_m}")
        if self.block_n % self.thread_n:
            reasons.append(f"thread_n {self.thread_n} does not divide block_n {self.block_n}")
        if self.thread_n % VEC:
            reasons.append(f"thread_n must be a multiple of {VEC} (16-byte C stores), got {self.thread_n}")
        if self.block_k % VEC:
            reasons.append(f"block_k must be a multiple of {VEC} (16-byte loads along k), got {self.block_k}")
        t = self.num_threads
        if not 32 <= t <= 1024:
            reasons.append(f"(block_m/thread_m) x (block_n/thread_n) = {t} threads, expected 32..1024")
        elif not reasons:
            for op, rows in (("A", self.block_m), ("B", self.block_n)):
                vecs = rows * self.block_k // VEC
                if vecs % t:
                    reasons.append(f"the {op} tile's {vecs} 16-byte vectors do not divide evenly over {t} threads")
        if self.thread_m * self.thread_n > 128:
            reasons.append(f"thread tile {self.thread_m}x{self.thread_n} = {self.thread_m * self.thread_n} "
                           "float32 accumulators per thread: more than 128 would spill")
        return reasons + smem_reasons(self.smem_bytes(), device)


def index_reasons(problem) -> list[str]:
    big = [f"{name} has {rows * cols} elements" for name, rows, cols in
           (("a", problem.m, problem.k), ("b", problem.n, problem.k), ("c", problem.m, problem.n))
           if rows * cols >= INDEX_LIMIT]
    return [f"{', '.join(big)}: this kernel's index math is 32-bit (< 2^31 elements per operand)"] if big else []


class GemmV2(KernelPlan):
    name = "gemm_v2"
    language = "cute-dsl"
    arch = ("sm_90a",)
    problem_kind = GemmProblem
    Tiling = GemmV2Tiling
    summary = "CuTe DSL GEMM: smem block tiles (128x128x32), 8x8 fp32 register tile per thread, SIMT FMA"

    def supports(self, problem) -> list[str]:
        reasons = super().supports(problem)
        if reasons:
            return reasons
        if problem.dtype not in DTYPES:
            reasons.append(f"dtype must be one of {', '.join(DTYPES)}, got {problem.dtype}")
        return reasons + index_reasons(problem)

    def autotune_configs(self, problem) -> list[GemmV2Tiling]:
        return [GemmV2Tiling(block_m=bm, block_n=bn, block_k=bk)
                for bm, bn, bk in ((128, 128, 32), (128, 128, 16), (64, 128, 32), (128, 64, 32), (64, 64, 32))]

    def example_bad_tilings(self) -> list[GemmV2Tiling]:
        return [GemmV2Tiling(block_k=12), GemmV2Tiling(thread_n=4), GemmV2Tiling(block_m=100),
                GemmV2Tiling(block_m=256, block_n=256, thread_m=4, thread_n=8),
                GemmV2Tiling(thread_m=16, thread_n=16), GemmV2Tiling(block_k=512)]

    def _kernel(self, dtype: str, tiling: GemmV2Tiling, arch: str = "sm_90a") -> RuntimeKernel:
        ensure_dsl_arch(arch)
        from mla_var3.kernel.cute_python.common import gemm_io

        from . import kernel

        t = tiling
        cdt = gemm_io.cute_dtype(dtype)
        stage = CuteKernel(kernel=self.name, tiling_key=t.key(), arch=arch,
                           build=lambda: kernel.GemmV2Kernel(cdt, t.block_m, t.block_n, t.block_k, t.thread_m, t.thread_n),
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


Plan = GemmV2
