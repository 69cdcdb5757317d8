"""cutlass_dense_gemm_v1: CUTLASS's Hopper CuTe DSL example `dense_gemm.py`, called live (a peer).

The code is NVIDIA/cutlass at commit 7107b05,
`examples/python/CuTeDSL/cute/hopper/kernel/dense_gemm/dense_gemm.py`, class
`HopperWgmmaGemmKernel`: not ours and not in this repository. `scripts/fetch_cutlass.sh` exports
it into the git-ignored `third_party/cutlass`; this plan imports the file from there when it
builds (kernel/peer_python/common/cutlass_examples.py), so without it the plan still loads and
`list` shows it unavailable with the fetch command.

What the kernel is: one CTA per output tile (a cluster of up to 4 CTAs with TMA multicast of A
along N and of B along M), TMA loads into a multi-stage smem ring sized to fill 227 KB, wgmma on
one warpgroup (two when the tile is larger than 64 x 128), and a TMA-store epilogue through smem;
the same warps load and compute (no warp specialization), not persistent.

How it is called: the tiling's tile and cluster shapes go to the class's constructor
(`acc_dtype=Float32, tile_shape_mn, cluster_shape_mn`); `cute.compile` takes fake (m, k, 1) /
(n, k, 1) / (m, n, 1) tensors with dynamic m, n, k (the layouts the example's own `run()` builds
with from_dlpack + mark_layout_dynamic) and TVM-FFI's current stream, so one compile per dtype
and tiling serves every shape, without a GPU. The timed call is the compiled function on [m, k,
1] views of our A and B and of the harness's C buffer: no copy, nothing else. What it cannot run
and why: common/cutlass_gemm_plan.py. Devlog: docs/kernels/cutlass_dense_gemm.md.
"""
from __future__ import annotations

from mla_var3.kernel.peer_python.common import cutlass_examples as cx
from mla_var3.kernel.peer_python.common.cutlass_gemm_plan import CutlassExampleGemm


class CutlassDenseGemmV1(CutlassExampleGemm):
    name = "cutlass_dense_gemm_v1"
    example = f"{cx.HOPPER_DENSE_GEMM}/dense_gemm.py"
    kernel_class = "HopperWgmmaGemmKernel"
    summary = "CUTLASS 7107b05 Hopper CuTe DSL example dense_gemm.py (TMA + wgmma, clusters, TMA store), imported live"
    upstream = f"NVIDIA/cutlass@{cx.CUTLASS_COMMIT[:7]}:{example}"


Plan = CutlassDenseGemmV1
