"""torch_mla_decode_v1: the PyTorch baseline (batched bf16 bmm, float32 softmax); every page size
(16, 32, 64): it gathers whole pages of whatever size the cache has."""
from __future__ import annotations

from dataclasses import dataclass

from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime.kernel_plan import KernelPlan, Tiling
from mla_var3.runtime.runtime_kernel import RuntimeKernel
from mla_var3.runtime.torch_kernel import TorchKernel

from . import kernel


@dataclass(frozen=True)
class TorchMlaTiling(Tiling):
    batch_chunk: int = 32          # sequences per padded bmm; bounds the [chunk, rows, L] scores

    def validate(self, problem, device) -> list[str]:
        reasons = []
        if not isinstance(self.batch_chunk, int) or self.batch_chunk < 1:
            reasons.append(f"batch_chunk must be a positive int, got {self.batch_chunk!r}")
        return reasons


class TorchMlaDecodeV1(KernelPlan):
    name = "torch_mla_decode_v1"
    language = "torch"
    arch = ("any",)
    problem_kind = MlaDecodeProblem
    Tiling = TorchMlaTiling
    summary = "PyTorch: gather pages, bf16 bmm -> fp32 scores, fp32 softmax, bf16 P·V"

    def default_tiling(self, problem) -> TorchMlaTiling:
        return TorchMlaTiling(batch_chunk=min(problem.b, 32))

    def autotune_configs(self, problem) -> list[TorchMlaTiling]:
        return [TorchMlaTiling(batch_chunk=c) for c in (8, 32, 128) if c <= max(problem.b, 8)]

    def example_bad_tilings(self) -> list[TorchMlaTiling]:
        return [TorchMlaTiling(batch_chunk=0)]

    def plan(self, inputs, tiling) -> RuntimeKernel:
        def launch(inputs, outputs, workspace):
            kernel.mla_decode(inputs, *outputs, tiling)
        return self.runtime(tiling, TorchKernel(launch))


Plan = TorchMlaDecodeV1
