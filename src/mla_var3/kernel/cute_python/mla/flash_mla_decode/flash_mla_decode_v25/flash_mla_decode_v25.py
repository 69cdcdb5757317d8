"""flash_mla_decode_v25: v22 (v21's seesaw kernel on persistent split CTAs, each running an equal
share of the batch's KV tiles, several sequences in turn, from a balanced schedule computed on the
device from the lengths) with item boundaries that overlap: the epilogue stores O straight from
registers, so the next item's tiles stream into the K ring meanwhile, and the next item's Q is
loaded as soon as the last QK^T of the item before is done.

Device code: balanced_schedule.py (schedule), kernel.py (split; its softmax steps in
lazy_rescale.py and unmasked_scores.py), combine.py (combine). Devlog: docs/kernels/flash_mla_decode.md.
"""
from __future__ import annotations

from dataclasses import dataclass

from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime.cute_kernel import CuteKernel, ensure_dsl_arch
from mla_var3.runtime.kernel_plan import KernelPlan, Tiling, smem_reasons
from mla_var3.runtime.runtime_kernel import RuntimeKernel

SMEM_BYTES = (64 * 576 * 2) * 3 + 3072       # sQ + 2-stage sK ring (P lives in its rope chunks) + stats and barriers
SMS_H200 = 132
TILE = 64                                     # keys per KV tile, whatever the page size
MAX_PARTS = 4096
MAX_SEQ_COST = 64
COMBINE_WARPS = (1, 2, 4, 8)                 # warps per query row in the combine kernel (v17)


@dataclass(frozen=True)
class FlashMlaBalancedTiling(Tiling):
    parts: int = SMS_H200       # persistent CTAs per row block: the batch's cost units cut into this many parts
    seq_cost: int = 2           # units a sequence costs beyond its tiles (its per-item overhead, in tiles)
    block_n: int = 64           # keys per tile (64 // page_size pages)
    num_threads: int = 384      # 2 math warpgroups (each owns 256 of the 512 value columns) + the producer
    combine_warps: int = 1      # warps per query row in the combine kernel, sharing the row's splits (v17)

    def validate(self, problem, device) -> list[str]:
        reasons = []
        if not isinstance(self.parts, int) or not 1 <= self.parts <= MAX_PARTS:
            reasons.append(f"parts must be an int in 1..{MAX_PARTS} (persistent CTAs per row block), got {self.parts!r}")
        if not isinstance(self.seq_cost, int) or not 0 <= self.seq_cost <= MAX_SEQ_COST:
            reasons.append(f"seq_cost must be an int in 0..{MAX_SEQ_COST} (tiles of overhead per sequence), "
                           f"got {self.seq_cost!r}")
        if self.block_n != TILE:
            reasons.append(f"block_n must be {TILE} (one wgmma N of QK^T), got {self.block_n}")
        if self.num_threads != 384:
            reasons.append(f"num_threads must be 384 (two math warpgroups and a producer), got {self.num_threads}")
        if self.combine_warps not in COMBINE_WARPS:
            reasons.append(f"combine_warps must be one of {', '.join(map(str, COMBINE_WARPS))} (warps per query row "
                           f"in the combine), got {self.combine_warps!r}")
        return reasons + smem_reasons(SMEM_BYTES, device)


def default_parts(b: int, rows: int, uniform: bool, sms: int = SMS_H200) -> int:
    """One CTA per SM over the row blocks (sms // row blocks parts). Equal lengths: a part count
    that cuts at sequence boundaries, so no sequence is split for nothing (b >= that: the largest
    divisor of b within it, each part whole sequences; b smaller: a multiple of b, each sequence
    in equal parts)."""
    per_rb = max(1, sms // -(-rows // 64))
    if not uniform or b == 0:
        return per_rb
    if b >= per_rb:
        return max(d for d in range(1, per_rb + 1) if b % d == 0)
    return b * (per_rb // b)


def max_splits(lens: list[int], parts: int, seq_cost: int) -> int:
    """The most parts one sequence's tiles span under the balanced schedule."""
    tiles = [-(-s // TILE) for s in lens]
    total = sum(n + seq_cost for n in tiles if n)
    if not total:
        return 1
    return max(1, max((-(-n * parts // total) + 1 for n in tiles if n), default=1))


def default_combine_warps(splits: int) -> int:
    """Warps per query row in the combine: each warp keeps 2 splits' loads in flight, so a row of
    n splits takes about n / (2 x warps) rounds of DRAM latency (v17's rule)."""
    for warps, upto in ((1, 4), (2, 8), (4, 16)):
        if splits <= upto:
            return warps
    return 8


class FlashMlaDecodeV25(KernelPlan):
    name = "flash_mla_decode_v25"
    language = "cute-dsl"
    arch = ("sm_90a",)
    problem_kind = MlaDecodeProblem
    Tiling = FlashMlaBalancedTiling
    summary = "CuTe DSL: v22's persistent balanced schedule with overlapped item boundaries"

    def supports(self, problem) -> list[str]:
        return super().supports(problem)        # page sizes 16, 32 and 64, b <= 4096: all the problem allows

    def default_tiling(self, problem) -> FlashMlaBalancedTiling:
        """One persistent CTA per SM (per row block); with equal lengths a part count that cuts at
        sequence boundaries (default_parts) and no per-sequence cost (every sequence costs the
        same, so it would only move the cuts off the tile counts)."""
        lens = problem.resolve_seqlens(0)
        tiles = [-(-s // TILE) for s in lens]
        uniform = len(set(tiles)) <= 1
        parts = default_parts(problem.b, problem.s_q * problem.h_q, uniform=uniform)
        cost = 0 if uniform else FlashMlaBalancedTiling.seq_cost
        return FlashMlaBalancedTiling(parts=parts, seq_cost=cost,
                                      combine_warps=default_combine_warps(max_splits(lens, parts, cost)))

    def autotune_configs(self, problem) -> list[FlashMlaBalancedTiling]:
        """The per-sequence cost of the balance, the part count (one per SM, or the equal-length
        cut), and the combine's warps."""
        base = self.default_tiling(problem)
        lens = problem.resolve_seqlens(0)
        per_rb = default_parts(problem.b, problem.s_q * problem.h_q, uniform=False)
        configs = []
        for parts in sorted({base.parts, per_rb}):
            for cost in (0, 1, 2, 4, 8):
                configs.append(FlashMlaBalancedTiling(parts=parts, seq_cost=cost, combine_warps=default_combine_warps(
                    max_splits(lens, parts, cost))))
        configs += [FlashMlaBalancedTiling(parts=base.parts, seq_cost=base.seq_cost, combine_warps=w)
                    for w in COMBINE_WARPS if w != base.combine_warps]
        return configs

    def example_bad_tilings(self) -> list[FlashMlaBalancedTiling]:
        return [FlashMlaBalancedTiling(parts=0), FlashMlaBalancedTiling(seq_cost=-1), FlashMlaBalancedTiling(block_n=128),
                FlashMlaBalancedTiling(num_threads=256), FlashMlaBalancedTiling(combine_warps=3)]

    def _kernel(self, s_q: int, h_q: int, page_size: int, tiling: FlashMlaBalancedTiling,
                arch: str = "sm_90a") -> RuntimeKernel:
        """Stages: "schedule" (prefix and part_first from the lengths), "split" (one persistent CTA
        per row block and part: partials into the workspace, or out directly for a sequence
        wholly inside one part) and "combine"; the workspace is sized from shapes and `parts` only."""
        ensure_dsl_arch(arch)
        import torch

        from . import balanced_schedule as sched
        from . import combine, kernel

        def split_args(inputs, outputs, ws):
            out, lse = outputs
            return kernel.launch_arguments(inputs.q, inputs.kv_cache, inputs.block_table, inputs.cache_seqlens,
                                           out, lse, ws, inputs.softmax_scale)

        def combine_args(inputs, outputs, ws):
            out, lse = outputs
            return combine.launch_arguments(inputs.cache_seqlens, out, lse, ws)

        # each stage's compile key names only the fields its code depends on: `parts` is a grid and
        # workspace size, not code, so one build serves every part count
        common = dict(kernel=self.name, arch=arch, dtypes=(torch.bfloat16,), static=(s_q, h_q, page_size))
        code = f"seq_cost={tiling.seq_cost}"
        schedule = CuteKernel(stage="schedule", **common, tiling_key=code, fake_args=sched.fake_arguments,
                              launch_args=lambda inputs, outputs, ws: sched.launch_arguments(inputs.cache_seqlens, ws),
                              build=lambda: sched.BalancedScheduleKernel(tiling.seq_cost))
        split = CuteKernel(stage="split", **common, fake_args=kernel.fake_arguments, launch_args=split_args,
                           tiling_key=f"{code},block_n={tiling.block_n},num_threads={tiling.num_threads}",
                           build=lambda: kernel.FlashMlaDecodeKernel(s_q, h_q, tiling.seq_cost, tiling.block_n,
                                                                     tiling.num_threads, page_size))
        merge = CuteKernel(stage="combine", **common, fake_args=combine.fake_arguments, launch_args=combine_args,
                           tiling_key=f"{code},combine_warps={tiling.combine_warps}",
                           build=lambda: combine.FlashMlaCombineKernel(s_q, h_q, tiling.seq_cost, tiling.combine_warps))

        def workspace(inputs):
            return kernel.workspace(inputs.q, inputs.kv_cache, tiling.parts)
        return self.runtime(tiling, schedule, split, merge, workspace=workspace)

    def plan(self, inputs, tiling) -> RuntimeKernel:
        return self._kernel(inputs.s_q, inputs.h_q, int(inputs.kv_cache.shape[1]), tiling)

    def compile_only(self, problem, arch: str, tiling=None) -> dict:
        tiling = tiling or self.default_tiling(problem)
        self.check_tiling(tiling, problem, None)
        kern = self._kernel(problem.s_q, problem.h_q, problem.page_size, tiling, arch)
        kern.compile()
        return {"compiled": True, "stages": "+".join(s.name for s in kern.stages), "parts": tiling.parts}


Plan = FlashMlaDecodeV25
