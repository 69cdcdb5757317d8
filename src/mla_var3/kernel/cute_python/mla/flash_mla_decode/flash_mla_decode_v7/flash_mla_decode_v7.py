"""flash_mla_decode_v7: v6 with programmatic dependent launch (PDL) between its three kernels -
the split kernel's set-up overlaps the schedule kernel, the combine's launch overlaps the split.

Device code: schedule.py (the work split, on the device), kernel.py (split), combine.py
(combine). Devlog: docs/kernels/flash_mla_decode.md.
"""
from __future__ import annotations

from dataclasses import dataclass

from mla_var3.layers.mla.decode import D_QK, MlaDecodeProblem
from mla_var3.runtime.cute_kernel import CuteKernel, ensure_dsl_arch
from mla_var3.runtime.kernel_plan import KernelPlan, Tiling, smem_reasons
from mla_var3.runtime.runtime_kernel import RuntimeKernel

SMEM_BYTES = (64 * D_QK * 2) * 3 + 3072   # sQ + 2-stage sK ring (P lives in its rope chunks) + stats and barriers
SMS_H200 = 132
TILE = 64                                     # keys per KV tile, whatever the page size
MAX_CTAS = 1024
MAX_B = 4096                                  # the schedule kernel's scan: 1024 threads x 4 sequences


@dataclass(frozen=True)
class FlashMlaPersistentTiling(Tiling):
    ctas: int = 0               # persistent split CTAs per 64-row block; 0: SMs // row blocks
    block_n: int = 64           # keys per tile (64 // page_size pages)
    num_threads: int = 256      # 2 warpgroups: each owns 256 of the 512 value columns

    def validate(self, problem, device) -> list[str]:
        reasons = []
        if not isinstance(self.ctas, int) or not 0 <= self.ctas <= MAX_CTAS:
            reasons.append(f"ctas must be an int in 0..{MAX_CTAS} (persistent CTAs per row block; 0: "
                           f"one per SM), got {self.ctas!r}")
        if self.block_n != TILE:
            reasons.append(f"block_n must be {TILE} (one wgmma N of QK^T), got {self.block_n}")
        if self.num_threads != 256:
            reasons.append(f"num_threads must be 256 (two math warpgroups), got {self.num_threads}")
        return reasons + smem_reasons(SMEM_BYTES, device)


def resolve_ctas(tiling: FlashMlaPersistentTiling, rows: int, sms: int = SMS_H200) -> int:
    """The CTAs per row block a tiling means: its own count, or one wave of one CTA per SM."""
    row_blocks = -(-rows // 64)
    return tiling.ctas or max(1, sms // row_blocks)


class FlashMlaDecodeV7(KernelPlan):
    name = "flash_mla_decode_v7"
    language = "cute-dsl"
    arch = ("sm_90a",)
    problem_kind = MlaDecodeProblem
    Tiling = FlashMlaPersistentTiling
    summary = "CuTe DSL: v6 with programmatic dependent launch between schedule, split and combine"

    def supports(self, problem) -> list[str]:
        reasons = super().supports(problem)
        if problem.b > MAX_B:
            reasons.append(f"b: v6's schedule kernel scans at most {MAX_B} sequences, got {problem.b}")
        return reasons

    def default_tiling(self, problem) -> FlashMlaPersistentTiling:
        return FlashMlaPersistentTiling()

    def autotune_configs(self, problem) -> list[FlashMlaPersistentTiling]:
        one = resolve_ctas(FlashMlaPersistentTiling(), problem.s_q * problem.h_q)
        return [FlashMlaPersistentTiling(ctas=c) for c in sorted({one, 2 * one, max(1, one // 2)})]

    def example_bad_tilings(self) -> list[FlashMlaPersistentTiling]:
        return [FlashMlaPersistentTiling(ctas=-1), FlashMlaPersistentTiling(block_n=128),
                FlashMlaPersistentTiling(num_threads=128)]

    def _kernel(self, s_q: int, h_q: int, page_size: int, tiling: FlashMlaPersistentTiling,
                arch: str = "sm_90a") -> RuntimeKernel:
        """Three stages: "schedule" (the token-balanced split, from the lengths), "split" (final
        rows of sequences one CTA covered, pieces of the others) and "combine"; the workspace is
        sized from shapes only."""
        ensure_dsl_arch(arch)
        import torch

        from . import combine, kernel, schedule
        ctas = resolve_ctas(tiling, s_q * h_q)

        def schedule_args(inputs, outputs, ws):
            return schedule.launch_arguments(inputs.cache_seqlens, ws)

        def split_args(inputs, outputs, ws):
            out, lse = outputs
            return kernel.launch_arguments(inputs.q, inputs.kv_cache, inputs.block_table, inputs.cache_seqlens,
                                           out, lse, ws, inputs.softmax_scale)

        def combine_args(inputs, outputs, ws):
            out, lse = outputs
            return combine.launch_arguments(inputs.cache_seqlens, out, lse, ws)

        common = dict(kernel=self.name, tiling_key=tiling.key(), arch=arch, dtypes=(torch.bfloat16,),
                      static=(s_q, h_q, page_size, ctas))
        plan_stage = CuteKernel(stage="schedule", **common, fake_args=schedule.fake_arguments,
                                launch_args=schedule_args, build=lambda: schedule.FlashMlaScheduleKernel(ctas))
        split = CuteKernel(stage="split", **common, fake_args=kernel.fake_arguments, launch_args=split_args,
                           build=lambda: kernel.FlashMlaDecodeKernel(s_q, h_q, ctas, tiling.block_n,
                                                                     tiling.num_threads, page_size))
        merge = CuteKernel(stage="combine", **common, fake_args=combine.fake_arguments, launch_args=combine_args,
                           build=lambda: combine.FlashMlaCombineKernel(s_q, h_q, ctas))
        return self.runtime(tiling, plan_stage, split, merge,
                            workspace=lambda inputs: kernel.workspace(inputs.q, ctas))

    def plan(self, inputs, tiling) -> RuntimeKernel:
        return self._kernel(inputs.s_q, inputs.h_q, int(inputs.kv_cache.shape[1]), tiling)

    def compile_only(self, problem, arch: str, tiling=None) -> dict:
        tiling = tiling or self.default_tiling(problem)
        self.check_tiling(tiling, problem, None)
        kern = self._kernel(problem.s_q, problem.h_q, problem.page_size, tiling, arch)
        kern.compile()
        return {"compiled": True, "stages": "+".join(s.name for s in kern.stages),
                "ctas": resolve_ctas(tiling, problem.s_q * problem.h_q)}


Plan = FlashMlaDecodeV7
