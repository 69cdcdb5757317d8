"""torch_gemm_v1: torch.matmul (cuBLAS on a GPU) - the baseline every GEMM version is compared with."""
from __future__ import annotations

import torch

from mla_var3.layers.gemm.matmul import GemmProblem
from mla_var3.runtime.kernel_plan import KernelPlan
from mla_var3.runtime.runtime_kernel import RuntimeKernel
from mla_var3.runtime.torch_kernel import TorchKernel


def matmul(inputs, outputs, workspace) -> None:
    """C = A @ B^T into the given buffer (no extra copy)."""
    torch.matmul(inputs.a, inputs.b.T, out=outputs[0])


class TorchGemmV1(KernelPlan):
    name = "torch_gemm_v1"
    language = "torch"
    arch = ("any",)
    problem_kind = GemmProblem
    summary = "PyTorch: torch.matmul (cuBLAS on a GPU), float32 accumulation"

    def plan(self, inputs, tiling) -> RuntimeKernel:
        return self.runtime(tiling, TorchKernel(matmul))


Plan = TorchGemmV1
