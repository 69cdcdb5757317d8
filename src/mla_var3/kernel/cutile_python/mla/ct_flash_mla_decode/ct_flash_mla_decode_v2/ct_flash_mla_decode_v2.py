"""ct_flash_mla_decode_v2: v1 made sanitizer-clean (shifted TMA window for the tail, gathered page ids).

Device code and its notes: kernel.py. Devlog: docs/kernels/ct_flash_mla_decode.md.
"""
from __future__ import annotations

from dataclasses import dataclass

from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import D_QK, PAGE_SIZE, MlaDecodeProblem, page_size_reasons
from mla_var3.runtime.ct_kernel import CtKernel, gpu_code_for
from mla_var3.runtime.kernel_plan import KernelPlan, Tiling, smem_reasons
from mla_var3.runtime.runtime_kernel import RuntimeKernel

INDEX_LIMIT = 2 ** 31          # the kernel's index math is int32
SMEM_BYTES = 223 * 1024        # >= what the exported sm_90 cubin reserves (222800 B); cuTile sizes it


@dataclass(frozen=True)
class CtFlashMlaTiling(Tiling):
    block_m: int = 64           # query rows per block: HGMMA needs M = 64 (M < 64 falls back to mma.sync)
    block_n: int = 64           # keys per KV tile (a divisor of the page)
    kv_latency: int = 8         # DRAM latency hint; >= 8 makes cuTile double-buffer the KV loads

    def validate(self, problem, device) -> list[str]:
        reasons = []
        if self.block_m != 64:
            reasons.append(f"block_m must be 64, got {self.block_m}")
        if self.block_n not in (16, 32, 64) or PAGE_SIZE % self.block_n:
            reasons.append(f"block_n must be 16, 32 or 64 (a divisor of the page), got {self.block_n}")
        if not 1 <= self.kv_latency <= 10:
            reasons.append(f"kv_latency must be 1..10, got {self.kv_latency}")
        return reasons + smem_reasons(SMEM_BYTES, device)


class CtFlashMlaDecodeV2(KernelPlan):
    name = "ct_flash_mla_decode_v2"
    language = "cutile"
    arch = ("sm_90a",)
    problem_kind = MlaDecodeProblem
    Tiling = CtFlashMlaTiling
    summary = "cuTile v1, sanitizer-clean: shifted TMA window for the tail, page ids by ct.gather"

    def supports(self, problem) -> list[str]:
        return super().supports(problem) or page_size_reasons(
            problem, (PAGE_SIZE,), "its kernel walks 64-row pages (PAGE = 64 in kernel.py)")

    def autotune_configs(self, problem) -> list[CtFlashMlaTiling]:
        return [CtFlashMlaTiling(block_n=n, kv_latency=lat) for n in (64, 32) for lat in (8, 4)]

    def example_bad_tilings(self) -> list[CtFlashMlaTiling]:
        return [CtFlashMlaTiling(block_m=128), CtFlashMlaTiling(block_n=48), CtFlashMlaTiling(kv_latency=0)]

    def _kernel(self, tiling: CtFlashMlaTiling, s_q: int, h_q: int) -> CtKernel:
        from . import kernel
        t = tiling

        def grid(inputs, outputs, workspace):
            return kernel.grid(inputs.b, inputs.s_q, inputs.h_q, t.block_m)

        def kernel_args(inputs, outputs, workspace):
            out, lse = outputs
            return kernel.kernel_args(inputs.q, inputs.kv_cache, inputs.block_table, inputs.cache_seqlens,
                                      out, lse, inputs.softmax_scale, t.block_m, t.block_n, t.kv_latency)
        return CtKernel(kernel=kernel.ct_flash_mla_decode_v2_kernel, grid=grid, kernel_args=kernel_args,
                        signatures=lambda: kernel.export_signatures(s_q, h_q, t.block_m, t.block_n, t.kv_latency))

    def plan(self, inputs, tiling) -> RuntimeKernel:
        if inputs.kv_cache.numel() >= INDEX_LIMIT:
            raise PlanError(f"kv_cache: {inputs.kv_cache.shape[0]} pages ({inputs.kv_cache.numel()} elements) "
                            f"exceed this kernel's int32 indexing (< {INDEX_LIMIT // (PAGE_SIZE * D_QK)} pages)")
        return self.runtime(tiling, self._kernel(tiling, inputs.s_q, inputs.h_q))

    def compile_only(self, problem, arch: str, tiling=None) -> dict:
        tiling = tiling or self.default_tiling(problem)
        self.check_tiling(tiling, problem, None)
        cubin = self._kernel(tiling, problem.s_q, problem.h_q).export(arch)
        return {"compiled": True, "gpu_code": gpu_code_for(arch), "cubin_bytes": len(cubin)}


Plan = CtFlashMlaDecodeV2
