"""GEMM: C = A @ B^T with K-major operands (problem kind `gemm`).

bf16 or fp16 in, float32 accumulate, C in the input dtype: A [m, k], B [n, k] (both K-major,
row-major in torch), C [m, n]. M is arbitrary; N and K must be multiples of 8 so every row
stride is a multiple of 16 bytes (what TMA needs); neither needs to be a multiple of a tile.
Correctness is relative to torch.matmul's own error on the same inputs (cuBLAS with float32
accumulation): a kernel passes when its largest error against the float64 reference is at
most twice torch's plus a small absolute term, which holds at K = 8192 where a fixed tolerance
would not. FLOPs 2mnk; bytes (mk + nk + mn) x element size.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import ClassVar

import torch

from mla_var3.errors import InputError, ProblemError
from mla_var3.layers import compare as cmp
from mla_var3.layers.base import Comparison, Problem

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
ALIGN = 8                     # elements: 16-byte row strides for 2-byte types
MAX_DIM = 1 << 17
TORCH_ERR_FACTOR = 2.0        # a kernel may be this many times less exact than torch.matmul
ABS_SLACK = 1e-3              # plus this fraction of max |reference| (outputs that are all tiny)


@dataclass(frozen=True)
class GemmInputs:
    a: torch.Tensor           # [m, k]
    b: torch.Tensor           # [n, k]


@dataclass(frozen=True)
class GemmProblem(Problem):
    kind: ClassVar[str] = "gemm"
    layer: ClassVar[str] = "gemm"

    m: int = 4096
    n: int = 4096
    k: int = 4096
    dtype: str = "bf16"

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        for name in ("m", "n", "k"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_DIM:
                raise ProblemError(f"{name}: expected an int in 1..{MAX_DIM}, got {v!r}")
        for name in ("n", "k"):
            v = getattr(self, name)
            if v % ALIGN:
                raise ProblemError(f"{name}: expected a multiple of {ALIGN} (16-byte row strides for TMA), got {v}")
        if self.dtype not in DTYPES:
            raise ProblemError(f"dtype: expected one of {', '.join(DTYPES)}, got {self.dtype!r}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def key(self) -> str:
        return f"m={self.m},n={self.n},k={self.k},dtype={self.dtype}"

    def static_key(self) -> str:
        return f"dtype={self.dtype}"            # m, n, k are dynamic in every kernel

    def to_dict(self) -> dict:
        return {"m": self.m, "n": self.n, "k": self.k, "dtype": self.dtype}

    # ---- data -------------------------------------------------------------------------------
    def make_inputs(self, seed: int = 0, device="cpu", dist: str = "default", data_seed: int | None = None):
        if dist not in self.dists:
            raise ProblemError(f"dist: expected one of {self.dists}, got {dist!r}")
        g = torch.Generator(device=torch.device(device)).manual_seed(seed if data_seed is None else data_seed)

        def draw(rows):
            return torch.randn(rows, self.k, generator=g, device=device, dtype=torch.float32).to(self.torch_dtype)
        return GemmInputs(a=draw(self.m), b=draw(self.n))

    @classmethod
    def from_inputs(cls, inputs: GemmInputs) -> "GemmProblem":
        names = {v: k for k, v in DTYPES.items()}
        return cls(m=inputs.a.shape[0], n=inputs.b.shape[0], k=inputs.a.shape[1],
                   dtype=names.get(inputs.a.dtype, str(inputs.a.dtype)))

    @classmethod
    def validate_inputs(cls, inputs, device_type: str | None = None) -> None:
        def need(ok, msg):
            if not ok:
                raise InputError(msg)
        need(isinstance(inputs, GemmInputs), f"inputs: expected GemmInputs, got {type(inputs).__name__}")
        a, b = inputs.a, inputs.b
        for name, t in (("a", a), ("b", b)):
            need(isinstance(t, torch.Tensor), f"{name}: expected a torch.Tensor, got {type(t).__name__}")
            need(t.dim() == 2, f"{name}: expected a 2-D tensor, got shape {list(t.shape)}")
            need(t.dtype in DTYPES.values(), f"{name}: expected dtype torch.bfloat16 or torch.float16, got {t.dtype}")
            need(t.is_contiguous(), f"{name}: expected a contiguous (K-major) tensor")
        need(b.dtype == a.dtype, f"b: expected dtype {a.dtype} (a's), got {b.dtype}")
        need(b.shape[1] == a.shape[1], f"b: expected shape [n, k={a.shape[1]}] (K-major, as a), got {list(b.shape)}")
        need(a.device == b.device, f"inputs: expected a and b on one device, got {a.device} and {b.device}")
        if device_type is not None:
            need(a.device.type == device_type, f"inputs: this kernel needs tensors on {device_type}, got {a.device}")
        cls.from_inputs(inputs)                 # the dimension rules (multiples of 8) as a ProblemError

    def make_outputs(self, inputs: GemmInputs, fill: float = float("nan")) -> tuple[torch.Tensor]:
        return (torch.full((self.m, self.n), fill, dtype=self.torch_dtype, device=inputs.a.device),)

    def reference(self, inputs: GemmInputs) -> tuple[torch.Tensor]:
        """C in float64 (exact enough to measure torch's own error against)."""
        return (inputs.a.double() @ inputs.b.double().T,)

    def compare(self, outputs, reference, dist: str = "default", inputs=None) -> Comparison:
        (c,), (ref,) = outputs, reference
        if tuple(c.shape) != tuple(ref.shape):
            return Comparison(False, f"shape: c {list(c.shape)} vs {list(ref.shape)}")
        bad = cmp.special_positions_match(c.double(), ref)
        if bad:
            return Comparison(False, f"c: {bad}")
        err = float((c.double() - ref).abs().max()) if c.numel() else 0.0
        scale = float(ref.abs().max()) if ref.numel() else 0.0
        errors = {"max_abs": err, "ref_max": scale}
        if inputs is None:
            return Comparison(False, "compare: a GEMM's tolerance needs the inputs (torch.matmul's own error)", errors)
        torch_c = torch.matmul(inputs.a, inputs.b.T)
        errors["torch_max_abs"] = float((torch_c.double() - ref).abs().max()) if c.numel() else 0.0
        tol = TORCH_ERR_FACTOR * errors["torch_max_abs"] + ABS_SLACK * scale
        errors["tol"] = tol
        ok = err <= tol
        why = "" if ok else (f"c max abs error {err:.3g} > {TORCH_ERR_FACTOR:g} x torch.matmul's "
                             f"{errors['torch_max_abs']:.3g} + {ABS_SLACK:g} x max|ref| {scale:.3g}")
        return Comparison(ok, why, errors)

    def flops_bytes(self, inputs: GemmInputs) -> tuple[int, int]:
        size = inputs.a.element_size()
        return 2 * self.m * self.n * self.k, (self.m * self.k + self.n * self.k + self.m * self.n) * size

    def footprint_bytes(self) -> int:
        """A, B and C, their float32 draws, and the float64 reference."""
        elems = self.m * self.k + self.n * self.k
        return elems * (2 + 4) + self.m * self.n * (2 + 8 + 2)

    def small_variant(self) -> "GemmProblem":
        return GemmProblem(m=129, n=264, k=520, dtype=self.dtype)

    # ---- CLI --------------------------------------------------------------------------------
    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("GEMM problem (gemm): C = A @ B^T, K-major operands")
        g.add_argument("--m", type=int, dest="m", help="rows of A and C")
        g.add_argument("--n", type=int, dest="n", help="rows of B, columns of C (a multiple of 8)")
        g.add_argument("--k", type=int, dest="k", help="the reduction length (a multiple of 8)")
        g.add_argument("--dtype", choices=sorted(DTYPES), help="input and output dtype (default bf16)")

    @classmethod
    def from_cli(cls, args: argparse.Namespace) -> list["GemmProblem"] | None:
        given = {k: getattr(args, k, None) for k in ("m", "n", "k", "dtype") if getattr(args, k, None) is not None}
        return [cls(**given)] if given else None


def _check_grid() -> list[GemmProblem]:
    """Square and ragged shapes, neither a multiple of a tile: the issue's list plus small ones."""
    return [GemmProblem(m=128, n=128, k=128), GemmProblem(m=1, n=256, k=512),
            GemmProblem(m=1000, n=3000, k=4000), GemmProblem(m=4096, n=4096, k=8192),
            GemmProblem(m=8192, n=8192, k=8192), GemmProblem(m=1000, n=3000, k=4000, dtype="fp16")]


def _bench_grid() -> list[GemmProblem]:
    return [GemmProblem(m=4096, n=4096, k=4096, dtype="fp16"), GemmProblem(m=8192, n=8192, k=8192),
            GemmProblem(m=1000, n=3000, k=4000)]


def _smoke_grid() -> list[GemmProblem]:
    """What the CPU can check in a second."""
    return [GemmProblem(m=1, n=8, k=16), GemmProblem(m=33, n=72, k=136), GemmProblem(m=17, n=24, k=40, dtype="fp16")]


GemmProblem.grids = {"check": _check_grid, "bench": _bench_grid, "smoke": _smoke_grid,
                     "sanitize": lambda: [GemmProblem(m=129, n=264, k=520)]}
