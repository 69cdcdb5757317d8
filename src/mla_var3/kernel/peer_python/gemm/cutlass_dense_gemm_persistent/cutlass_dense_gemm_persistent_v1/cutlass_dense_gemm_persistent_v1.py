"""cutlass_dense_gemm_persistent_v1: CUTLASS's Hopper CuTe DSL example `dense_gemm_persistent.py`,
called live (a peer).

The code is NVIDIA/cutlass at commit 7107b05,
`examples/python/CuTeDSL/cute/hopper/kernel/dense_gemm/dense_gemm_persistent.py`, class
`HopperWgmmaGemmPersistentKernel`: not ours and not in this repository. `scripts/fetch_cutlass.sh`
exports it into the git-ignored `third_party/cutlass`; this plan imports the file from there when
it builds (kernel/peer_python/common/cutlass_examples.py), so without it the plan still loads and
`list` shows it unavailable with the fetch command.

What the kernel is: persistent CTAs (a static tile scheduler walks the output tiles, grid =
`max_active_clusters` clusters), a producer warp group whose one warp issues the TMA loads (40
registers) and one or two math warp groups (232 registers) that run wgmma and a TMA-store
epilogue through its own smem stages (warp specialization), clusters of up to 4 CTAs with TMA
multicast, an optional swizzle of the tile order for L2 reuse.

How it is called: as cutlass_dense_gemm_v1 (fake (m, k, 1) tensors, TVM-FFI, views of our
tensors and of the harness's C buffer, no copy), plus the constructor's `swizzle_size` and
`raster_along_m` (the tiling) and the compile-time `max_active_clusters`: on a GPU what the
example's `run()` asks the driver (`cutlass.utils.HardwareInfo().get_max_active_clusters(cluster
size)`), for --compile-only the arch's SM count divided by the cluster size (132 SMs on the
H100/H200 SXM). It is part of the compile key. Devlog: docs/kernels/cutlass_dense_gemm_persistent.md.
"""
from __future__ import annotations

from dataclasses import dataclass

from mla_var3.kernel.peer_python.common import cutlass_examples as cx
from mla_var3.kernel.peer_python.common.cutlass_gemm_plan import CutlassExampleGemm, ExampleGemmTiling

SM90_SMS = 132          # H100 / H200 SXM: the compile-only stand-in for the driver's answer


@dataclass(frozen=True)
class PersistentExampleTiling(ExampleGemmTiling):
    swizzle_size: int = 1           # tile-order swizzle, in clusters (1: none)
    raster_along_m: bool = True     # the order clusters walk the tiles (used when swizzle_size > 1)

    def validate(self, problem, device) -> list[str]:
        reasons = super().validate(problem, device)
        if not isinstance(self.swizzle_size, int) or self.swizzle_size < 1:
            reasons.append(f"swizzle_size must be an int >= 1 (the tile scheduler's), got {self.swizzle_size!r}")
        return reasons


def max_active_clusters(cluster_size: int, arch: str) -> int:
    """What the example's run() passes: the driver's answer on a GPU, else SMs / cluster size."""
    from mla_var3.runtime import devices
    if devices.cuda_available():
        import cutlass.utils
        return int(cutlass.utils.HardwareInfo().get_max_active_clusters(cluster_size))
    return SM90_SMS // cluster_size


class CutlassDenseGemmPersistentV1(CutlassExampleGemm):
    name = "cutlass_dense_gemm_persistent_v1"
    example = f"{cx.HOPPER_DENSE_GEMM}/dense_gemm_persistent.py"
    kernel_class = "HopperWgmmaGemmPersistentKernel"
    Tiling = PersistentExampleTiling
    summary = ("CUTLASS 7107b05 Hopper CuTe DSL example dense_gemm_persistent.py (persistent, warp-specialized "
               "TMA + wgmma, TMA store), imported live")
    upstream = f"NVIDIA/cutlass@{cx.CUTLASS_COMMIT[:7]}:{example}"

    def make_kernel(self, cls, acc_dtype, tiling):
        return cls(acc_dtype, (tiling.tile_m, tiling.tile_n), (tiling.cluster_m, tiling.cluster_n),
                   tiling.swizzle_size, tiling.raster_along_m)

    def constexpr_args(self, tiling, arch: str) -> tuple:
        return (max_active_clusters(tiling.cluster_m * tiling.cluster_n, arch),)

    def example_bad_tilings(self) -> list:
        return super().example_bad_tilings() + [self.Tiling(swizzle_size=0)]


Plan = CutlassDenseGemmPersistentV1
