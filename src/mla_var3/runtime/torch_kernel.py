"""TorchKernel: PyTorch baselines through the same interface as the DSL kernels."""
from __future__ import annotations

from mla_var3.runtime.kernel_plan import RuntimeKernel


class TorchKernel(RuntimeKernel):
    """Wraps `fn(inputs, out, lse, tiling)`, which writes out and lse in place."""

    def __init__(self, plan, tiling, fn):
        super().__init__(plan, tiling)
        self.fn = fn

    def launch(self, inputs, out, lse) -> None:
        self.fn(inputs, out, lse, self.tiling)
