"""CtKernel: a cuTile kernel, its grid and arguments, launch, and CPU export for compile checks.

cuTile JIT-compiles on the first launch and caches by itself; ahead of time (no GPU) we export
a cubin with `cuda.tile.compilation.export_kernel`, which maps --arch=sm_90a to gpu_code="sm_90".
"""
from __future__ import annotations

import io
from typing import Any, Callable

from mla_var3.runtime.kernel_plan import RuntimeKernel


def gpu_code_for(arch: str) -> str:
    """sm_90a -> sm_90: cuTile names targets without the arch-specific suffix."""
    return arch[:-1] if arch.endswith("a") else arch


class CtKernel(RuntimeKernel):
    """kernel: the @ct.kernel; grid(*args) -> grid tuple; kernel_args(*args) -> its arguments;
    signatures() -> KernelSignature list for export (compile-only)."""

    def __init__(self, plan, tiling, *, kernel: Any, grid: Callable[..., tuple], kernel_args: Callable[..., tuple],
                 signatures: Callable[[], list] | None = None):
        super().__init__(plan, tiling)
        self.kernel, self.grid, self.kernel_args, self.signatures = kernel, grid, kernel_args, signatures

    def launch(self, *args) -> None:
        import cuda.tile as ct
        import torch
        ct.launch(torch.cuda.current_stream(), self.grid(*args), self.kernel, self.kernel_args(*args))

    def export(self, arch: str = "sm_90a") -> bytes:
        """Compile for `arch` without a GPU; returns the cubin bytes."""
        if self.signatures is None:
            raise RuntimeError(f"{self.plan.name if self.plan else 'kernel'}: no export signatures given")
        from cuda.tile.compilation import export_kernel
        buf = io.BytesIO()
        export_kernel(self.kernel, self.signatures(), buf, gpu_code=gpu_code_for(arch), output_format="cubin")
        return buf.getvalue()
