"""The plan both imported CUTLASS Hopper GEMM examples share (peers of the `gemm` problem kind).

What the examples can run, read from their code at CUTLASS 7107b05 (the class docstrings,
`_setup_attributes`, `is_valid_dtypes`, `is_valid_tensor_alignment`, `run()`):
- A and B 16-bit of one type, fp32 accumulation, C 16-bit; A K- or M-major, B K- or N-major, C N-
  or M-major: our K-major A and B and row-major C are one of its layouts.
- `is_valid_dtypes` lists Float16 (and fp8 / int8), not BFloat16; `__call__` only asks for one
  16-bit type for A and B, and both examples compile for BFloat16 (tests/test_cutlass_examples.py).
  bf16 runs through the check like fp16: the H200 check decides (docs/kernels/cutlass_dense_gemm.md).
- the contiguous dimension of every tensor a multiple of 16 bytes: k (A, B) and n (C) multiples of
  8, which our problem kind guarantees; m is free (TMA zero-fills loads past m, clips stores).
- CTA tile M 64 or 128, N 64, 128 or 256 (K is 64: 4 wgmma k-steps); cluster M and N powers of
  2 with at most 4 CTAs. The stage count fills the SM90 shared memory (227 KB) whatever the tile.
"""
from __future__ import annotations

from dataclasses import dataclass

from mla_var3.kernel.peer_python.common import cutlass_examples as cx
from mla_var3.layers.gemm.matmul import GemmProblem
from mla_var3.runtime.cute_kernel import CuteKernel
from mla_var3.runtime.kernel_plan import KernelPlan, Tiling, smem_reasons
from mla_var3.runtime.runtime_kernel import RuntimeKernel

DTYPES = ("bf16", "fp16")
TILE_M, TILE_N = (64, 128), (64, 128, 256)
CLUSTER_DIMS = (1, 2, 4)
MAX_CLUSTER = 4
SM90_SMEM = 227 * 1024         # utils.get_smem_capacity_in_bytes("sm_90"): what the examples fill
EXAMPLE_TILES = ((128, 256), (128, 128), (128, 64), (64, 64))       # their --tile_shape_mn choices
EXAMPLE_CLUSTERS = ((1, 1), (2, 1), (1, 2), (2, 2))                  # their --cluster_shape_mn choices


@dataclass(frozen=True)
class ExampleGemmTiling(Tiling):
    """The examples' `tile_shape_mn` and `cluster_shape_mn` (their constructor arguments)."""
    tile_m: int = 128
    tile_n: int = 256
    cluster_m: int = 1
    cluster_n: int = 1

    def validate(self, problem, device) -> list[str]:
        reasons = []
        if self.tile_m not in TILE_M:
            reasons.append(f"tile_m must be one of {TILE_M} (the example's CTA tile M), got {self.tile_m}")
        if self.tile_n not in TILE_N:
            reasons.append(f"tile_n must be one of {TILE_N} (the example's CTA tile N), got {self.tile_n}")
        if self.cluster_m not in CLUSTER_DIMS or self.cluster_n not in CLUSTER_DIMS \
                or self.cluster_m * self.cluster_n > MAX_CLUSTER:
            reasons.append(f"cluster {self.cluster_m}x{self.cluster_n}: M and N must be powers of 2 with at most "
                           f"{MAX_CLUSTER} CTAs per cluster (the example's constraint)")
        return reasons + smem_reasons(SM90_SMEM, device)


class CutlassExampleGemm(KernelPlan):
    """A CUTLASS Hopper GEMM example's kernel class, imported from third_party/cutlass and called
    with our tensors. Subclasses name the file and class and how to construct and call it."""

    language = "peer"
    arch = ("sm_90a",)
    problem_kind = GemmProblem
    Tiling = ExampleGemmTiling
    example: str = ""              # path in the CUTLASS tree
    kernel_class: str = ""         # the class in it

    def unavailable(self) -> str | None:
        return super().unavailable() or cx.example_file(self.example)[1]

    def supports(self, problem) -> list[str]:
        reasons = super().supports(problem)
        if reasons:
            return reasons
        if problem.dtype not in DTYPES:
            reasons.append(f"dtype must be one of {', '.join(DTYPES)} (16-bit A and B of one type), got {problem.dtype}")
        if problem.k % cx.ALIGN or problem.n % cx.ALIGN:
            reasons.append(f"k={problem.k}, n={problem.n}: the example needs the contiguous dimension of A, B and C "
                           f"a multiple of 16 bytes ({cx.ALIGN} elements; is_valid_tensor_alignment)")
        return reasons

    def autotune_configs(self, problem) -> list:
        return [self.Tiling(tile_m=tm, tile_n=tn, cluster_m=cm, cluster_n=cn)
                for tm, tn in EXAMPLE_TILES for cm, cn in EXAMPLE_CLUSTERS]

    def example_bad_tilings(self) -> list:
        return [self.Tiling(tile_m=256), self.Tiling(tile_n=96), self.Tiling(cluster_m=3),
                self.Tiling(cluster_m=4, cluster_n=2)]

    # ---- subclasses --------------------------------------------------------------------------
    def make_kernel(self, cls, acc_dtype, tiling):
        """The example's kernel object for this tiling."""
        return cls(acc_dtype, (tiling.tile_m, tiling.tile_n), (tiling.cluster_m, tiling.cluster_n))

    def constexpr_args(self, tiling, arch: str) -> tuple:
        """Compile-time arguments of its __call__ between C and the stream (none here)."""
        return ()

    # ---- building ----------------------------------------------------------------------------
    def _kernel(self, dtype: str, tiling, arch: str = "sm_90a") -> RuntimeKernel:
        mod = cx.load_example(self.example, arch)          # sets CUTE_DSL_ARCH before cutlass.cute
        import cutlass

        from mla_var3.kernel.cute_python.common import gemm_io
        cls = getattr(mod, self.kernel_class)
        cdt = gemm_io.cute_dtype(dtype)
        static = self.constexpr_args(tiling, arch)
        stage = CuteKernel(kernel=self.name, tiling_key=tiling.key(), arch=arch,
                           build=lambda: self.make_kernel(cls, cutlass.Float32, tiling),
                           fake_args=lambda k: (*cx.fake_mnl_arguments(cdt), *static, cx.fake_stream()),
                           launch_args=lambda inputs, outputs, ws: cx.mnl_launch_arguments(inputs.a, inputs.b, outputs[0]),
                           dtypes=(dtype,), static=static)
        return self.runtime(tiling, stage)

    def plan(self, inputs, tiling) -> RuntimeKernel:
        return self._kernel(GemmProblem.from_inputs(inputs).dtype, tiling)

    def compile_only(self, problem, arch: str, tiling=None) -> dict:
        from mla_var3.errors import PlanError
        if self.unavailable():
            raise PlanError(f"{self.name} is unavailable: {self.unavailable()}")
        tiling = tiling or self.default_tiling(problem)
        self.check_tiling(tiling, problem, None)
        self._kernel(problem.dtype, tiling, arch).compile()
        return {"compiled": True}
