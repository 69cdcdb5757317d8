"""flash_mla_decode_v1: first CuTe DSL MLA decode (TMA paged K tiles, wgmma, online softmax).

Device code and its design notes: kernel.py. Devlog: docs/kernels/flash_mla_decode.md.
"""
from __future__ import annotations

from dataclasses import dataclass

from mla_var3.layers.mla.decode import D_QK, PAGE_SIZE, MlaDecodeProblem, page_size_reasons
from mla_var3.runtime.cute_kernel import CuteKernel, ensure_dsl_arch
from mla_var3.runtime.kernel_plan import KernelPlan, Tiling, smem_reasons
from mla_var3.runtime.runtime_kernel import RuntimeKernel

SMEM_BYTES = (64 * D_QK * 2) * 3 + 1024      # sQ + 2-stage sK ring (bf16 64x576 each) + barriers


@dataclass(frozen=True)
class FlashMlaTiling(Tiling):
    block_n: int = 64           # keys per tile: one page
    num_threads: int = 256      # 2 warpgroups: each owns 256 of the 512 value columns

    def validate(self, problem, device) -> list[str]:
        reasons = []
        if self.block_n != PAGE_SIZE:
            reasons.append(f"block_n must equal the page size {PAGE_SIZE}, got {self.block_n}")
        if self.num_threads != 256:
            reasons.append(f"num_threads must be 256 (two math warpgroups), got {self.num_threads}")
        return reasons + smem_reasons(SMEM_BYTES, device)


class FlashMlaDecodeV1(KernelPlan):
    name = "flash_mla_decode_v1"
    language = "cute-dsl"
    arch = ("sm_90a",)
    problem_kind = MlaDecodeProblem
    Tiling = FlashMlaTiling
    summary = "CuTe DSL: CTA per (seq, 64 rows), TMA 2-stage K ring, wgmma QK^T and PV, no split-KV"

    def supports(self, problem) -> list[str]:
        return super().supports(problem) or page_size_reasons(
            problem, (PAGE_SIZE,), "loads each page as one 64-row TMA box (block_n = page = 64)")

    def _kernel(self, s_q: int, h_q: int, tiling: FlashMlaTiling, arch: str = "sm_90a") -> RuntimeKernel:
        """One stage: the whole decode in one launch (no split-KV, no workspace)."""
        ensure_dsl_arch(arch)
        import torch

        from . import kernel

        def launch_args(inputs, outputs, workspace):
            out, lse = outputs
            return kernel.launch_arguments(inputs.q, inputs.kv_cache, inputs.block_table, inputs.cache_seqlens,
                                           out, lse, inputs.softmax_scale)
        stage = CuteKernel(kernel=self.name, tiling_key=tiling.key(), arch=arch,
                           build=lambda: kernel.FlashMlaDecodeKernel(s_q, h_q, tiling.block_n, tiling.num_threads),
                           fake_args=kernel.fake_arguments, launch_args=launch_args,
                           dtypes=(torch.bfloat16,), static=(s_q, h_q))
        return self.runtime(tiling, stage)

    def example_bad_tilings(self) -> list[FlashMlaTiling]:
        return [FlashMlaTiling(block_n=128), FlashMlaTiling(num_threads=128)]

    def plan(self, inputs, tiling) -> RuntimeKernel:
        return self._kernel(inputs.s_q, inputs.h_q, tiling)

    def compile_only(self, problem, arch: str, tiling=None) -> dict:
        tiling = tiling or self.default_tiling(problem)
        self.check_tiling(tiling, problem, None)
        self._kernel(problem.s_q, problem.h_q, tiling, arch).compile()
        return {"compiled": True}


Plan = FlashMlaDecodeV1
