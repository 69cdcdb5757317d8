"""CtKernel: a cuTile stage - kernel, grid and arguments, launch, and CPU export for compile checks.

cuTile JIT-compiles on the first launch and caches by itself; ahead of time (no GPU) we export
a cubin with `cuda.tile.compilation.export_kernel`, which maps --arch=sm_90a to gpu_code="sm_90".
"""
from __future__ import annotations

import io
from typing import Any, Callable

from mla_var3.errors import PlanError
from mla_var3.runtime.runtime_kernel import Stage


def gpu_code_for(arch: str) -> str:
    """sm_90a -> sm_90: cuTile names targets without the arch-specific suffix."""
    return arch[:-1] if arch.endswith("a") else arch


class CtKernel(Stage):
    """kernel: the @ct.kernel; grid(inputs, outputs, workspace) -> grid tuple;
    kernel_args(inputs, outputs, workspace) -> its arguments; signatures() -> KernelSignature
    list for export (compile-only)."""

    def __init__(self, *, kernel: Any, grid: Callable[..., tuple], kernel_args: Callable[..., tuple],
                 signatures: Callable[[], list] | None = None, name: str = "main"):
        self.kernel, self.grid, self.kernel_args, self.signatures = kernel, grid, kernel_args, signatures
        self.name = name

    def launch(self, *args) -> None:
        import cuda.tile as ct
        import torch
        ct.launch(torch.cuda.current_stream(), self.grid(*args), self.kernel, self.kernel_args(*args))

    def export(self, arch: str = "sm_90a", output_format: str = "cubin") -> bytes:
        """Compile for `arch` without a GPU; returns the cubin bytes (or, with
        output_format="tileir_bytecode", the Tile IR bytecode tileiras would compile)."""
        if self.signatures is None:
            raise PlanError(f"stage {self.name}: no export signatures given, cannot compile ahead")
        from cuda.tile.compilation import export_kernel
        buf = io.BytesIO()
        export_kernel(self.kernel, self.signatures(), buf, gpu_code=gpu_code_for(arch), output_format=output_format)
        return buf.getvalue()
