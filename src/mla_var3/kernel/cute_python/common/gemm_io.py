"""Host glue every CuTe DSL GEMM version shares: dtypes, fake arguments for compile-only, and
the torch views a compiled GEMM is called with.

The problem kind is layers/gemm/matmul.py: C[m, n] = A[m, k] @ B[n, k]^T, A and B K-major
(row-major in torch), C row-major, all in one 16-bit dtype. m, n and k are dynamic (one compile
per dtype and tiling serves every shape); n and k carry divisibility 8, which the problem kind
guarantees (16-byte row strides) and `launch_arguments` re-checks, since the TVM-FFI call does not.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

from mla_var3.errors import InputError

ALIGN = 8                      # elements: n and k are multiples of 8 (16-byte rows)
CUTE_DTYPES = {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16}


def cute_dtype(name: str):
    """"bf16" / "fp16" (GemmProblem.dtype) -> the CuTe DSL numeric type."""
    if name not in CUTE_DTYPES:
        raise ValueError(f"dtype: expected one of {', '.join(CUTE_DTYPES)}, got {name!r}")
    return CUTE_DTYPES[name]


def fake_arguments(dtype) -> tuple:
    """A [m, k], B [n, k], C [m, n] (row-major, 16-byte aligned) and an env stream, in the
    order every GEMM kernel's __call__ takes them; for cute.compile(..., options="--enable-tvm-ffi")."""
    m = cute.sym_int(symbol="m")
    n = cute.sym_int(divisibility=ALIGN, symbol="n")
    k = cute.sym_int(divisibility=ALIGN, symbol="k")
    a = make_fake_compact_tensor(dtype, (m, k), stride_order=(1, 0), assumed_align=16)
    b = make_fake_compact_tensor(dtype, (n, k), stride_order=(1, 0), assumed_align=16)
    c = make_fake_compact_tensor(dtype, (m, n), stride_order=(1, 0), assumed_align=16)
    return a, b, c, make_fake_stream(use_tvm_ffi_env_stream=True)


def launch_arguments(a, b, c) -> tuple:
    """The torch tensors the compiled function is called with (same order, no stream). The
    compiled code assumes what the fake arguments promised (16-byte aligned bases, n and k
    multiples of 8) and the TVM-FFI call checks none of it: refuse here, in one line."""
    for name, t in (("a", a), ("b", b), ("c", c)):
        if not t.is_contiguous() or t.data_ptr() % 16:
            raise InputError(f"{name}: expected a contiguous tensor whose data starts 16-byte aligned "
                             f"(storage offset {t.storage_offset()} elements)")
    if a.shape[1] % ALIGN or b.shape[0] % ALIGN:
        raise InputError(f"n and k: expected multiples of {ALIGN}, got n={b.shape[0]}, k={a.shape[1]}")
    return a, b, c
