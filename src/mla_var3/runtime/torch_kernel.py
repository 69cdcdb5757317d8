"""TorchKernel: a PyTorch stage, so baselines run through the same interface as DSL kernels."""
from __future__ import annotations

from typing import Callable

from mla_var3.runtime.runtime_kernel import Stage


class TorchKernel(Stage):
    """Wraps `fn(inputs, outputs, workspace)`, which writes the outputs in place and returns None,
    or returns a tuple (or list) of outputs it allocated itself (runtime_kernel's "Outputs").
    Any other return value is ignored (`torch.add(..., out=o)` returns `o`)."""

    def __init__(self, fn: Callable, *, name: str = "main"):
        self.fn, self.name = fn, name

    def launch(self, inputs, outputs, workspace) -> tuple | None:
        result = self.fn(inputs, outputs, workspace)
        return tuple(result) if isinstance(result, (tuple, list)) else None
