"""ct_gemm_v1: tiled cuTile GEMM, C = A @ B^T (ct.mma, float32 accumulate), the cuTile rung.

Run: python -m mla_var3.kernel ct_gemm_v1 --check (GPU);
     python -m mla_var3.kernel ct_gemm_v1 --m=4096 --n=4096 --k=4096 --dtype=fp16 --compare=torch_gemm_v1 (GPU);
     python -m mla_var3.kernel ct_gemm_v1 --compile-only --arch=sm_90a (CPU).

What it is
- One block per TILE_M x TILE_N tile of C, a 1-D grid of cdiv(m, TILE_M) * cdiv(n, TILE_N)
  blocks. Block ids are mapped to tiles in groups of GROUP_M tile rows (the block walks down a
  group of GROUP_M row tiles before moving one column tile right), so the blocks resident at
  one time share A row tiles and B column tiles through L2.
- The block walks k in TILE_K steps: a [TILE_M, TILE_K] tile of A and a [TILE_N, TILE_K] tile of
  B (both K-major, as stored), acc[TILE_M, TILE_N] (float32) += a @ b^T with ct.mma, then one
  store of acc rounded to C's dtype.
- The tile compiler chooses the rest: on sm_90 the loads become TMA into a shared-memory ring
  and ct.mma becomes HGMMA (the export signatures state the alignment facts it needs: without
  them it falls back to scalar loads, see CUTEDSL-HOPPER.md pitfall 15).

Ragged edges: loads use PaddingMode.ZERO, so rows past m or n and columns past k read as 0
(k is a multiple of 8, not of TILE_K: the last k tile is partly zero, which adds nothing), and
the store is bounded by C's shape, so rows past m and columns past n are dropped.

Prediction at 4096^3 fp16 on the H200: 450-650 TFLOP/s (60-85 % of the 771 measured). The
devkit measured a plain 128x128x64 ct.mma matmul at 610 TFLOP/s at 8192^3 bf16 (0.9x cuBLAS);
4096^3 has 1024 tiles of 128x128 for 132 SMs at occupancy 2 (3.9 waves, the last one 88 %
full) and a shorter k loop per tile, so somewhat less. Tiles of 128x256 collapsed there
(46-77 TFLOP/s), so the search space stays at 128x128 and below.

Constraints: bf16 or fp16 A, B and C of one dtype; m arbitrary, n and k multiples of 8
(16-byte row strides, stated to the compiler); tile sizes powers of two (cuTile tiles);
fewer than 2^31 elements per operand (int32 index math).
"""
from __future__ import annotations

import functools

import cuda.tile as ct

ConstInt = ct.Constant[int]
ALIGN = 8            # n and k are multiples of 8 elements: 16-byte row strides


@ct.kernel(occupancy=ct.ByTarget(sm_90=2, default=None))
def ct_gemm_v1_kernel(A, B, C, TILE_M: ConstInt, TILE_N: ConstInt, TILE_K: ConstInt, GROUP_M: ConstInt):
    """A [m, k], B [n, k], C [m, n]; C = A @ B^T, float32 accumulate."""
    bid = ct.bid(0)
    tiles_m = ct.cdiv(A.shape[0], TILE_M)
    tiles_n = ct.cdiv(B.shape[0], TILE_N)
    # grouped order: GROUP_M row tiles share each B column tile while they are resident
    per_group = GROUP_M * tiles_n
    group = bid // per_group
    first_m = group * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)
    tm = first_m + (bid % per_group) % group_rows
    tn = (bid % per_group) // group_rows

    acc = ct.full((TILE_M, TILE_N), 0.0, dtype=ct.float32)
    for kt in range(ct.cdiv(A.shape[1], TILE_K)):
        a = ct.load(A, index=(tm, kt), shape=(TILE_M, TILE_K), padding_mode=ct.PaddingMode.ZERO)
        b = ct.load(B, index=(tn, kt), shape=(TILE_N, TILE_K), padding_mode=ct.PaddingMode.ZERO)
        acc = ct.mma(a, ct.permute(b, (1, 0)), acc)
    ct.store(C, index=(tm, tn), tile=acc.astype(C.dtype))


@functools.lru_cache(maxsize=None)
def kernel_for(occupancy: int):
    """The kernel with this occupancy hint on sm_90 (its own JIT cache per hint)."""
    return ct_gemm_v1_kernel.replace_hints(occupancy=ct.ByTarget(sm_90=occupancy, default=None))


def grid(m: int, n: int, tile_m: int, tile_n: int) -> tuple[int, int, int]:
    return (-(-m // tile_m) * -(-n // tile_n), 1, 1)


def kernel_args(a, b, c, tile_m: int, tile_n: int, tile_k: int, group_m: int) -> tuple:
    """The arguments ct_gemm_v1_kernel is launched with (contiguous torch tensors on the GPU)."""
    assert a.shape[1] == b.shape[1] and tuple(c.shape) == (a.shape[0], b.shape[0]), (a.shape, b.shape, c.shape)
    assert a.shape[1] % ALIGN == 0 and b.shape[0] % ALIGN == 0, "n and k must be multiples of 8"
    return (a, b, c, tile_m, tile_n, tile_k, group_m)


def _array(dtype, ndim: int = 2):
    """A C-contiguous, non-aliasing array whose row stride is a multiple of 8 elements and whose
    base is 16-byte aligned: what cuTile needs to use TMA (torch allocations are 256-byte aligned)."""
    from cuda.tile.compilation import ArrayConstraint
    return ArrayConstraint(dtype, ndim, index_dtype=ct.int32, stride_lower_bound_incl=0,
                           alias_groups=(), may_alias_internally=False,
                           stride_constant=(None,) * (ndim - 1) + (1,),
                           stride_divisible_by=(ALIGN,) * (ndim - 1) + (1,),
                           base_addr_divisible_by=16)


def export_signatures(dtype: str, tile_m: int, tile_n: int, tile_k: int, group_m: int) -> list:
    """KernelSignature list for cuda.tile.compilation.export_kernel (CPU compile-only, sm_90)."""
    from cuda.tile.compilation import CallingConvention, KernelSignature
    t = {"bf16": ct.bfloat16, "fp16": ct.float16}[dtype]
    params = [_array(t), _array(t), _array(t), tile_m, tile_n, tile_k, group_m]
    return [KernelSignature(params, CallingConvention.cutile_python_v1())]
