"""Two toy problem kinds and their plans, defined entirely outside the package.

They prove the problem contract: a new kind (vector add, column sum) and plans for it run
through the same check and bench code as MLA with no change in mla_var3/runtime/. The column
sum's CuTe DSL plan is a two-stage call (split into a workspace, then combine), the shape of a
split-KV decode.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from mla_var3.errors import InputError, ProblemError
from mla_var3.layers import compare as cmp
from mla_var3.layers.base import Comparison, Problem
from mla_var3.runtime.kernel_plan import KernelPlan, Tiling
from mla_var3.runtime.torch_kernel import TorchKernel


def _need(ok: bool, exc, msg: str) -> None:
    if not ok:
        raise exc(msg)


# ---- vector add: z = x + y ----------------------------------------------------------------------
@dataclass(frozen=True)
class VecInputs:
    x: torch.Tensor
    y: torch.Tensor


@dataclass(frozen=True)
class VectorAddProblem(Problem):
    kind: ClassVar[str] = "toy_vector_add"
    layer: ClassVar[str] = "toy"
    n: int = 1000

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        _need(isinstance(self.n, int) and self.n >= 1, ProblemError, f"n: expected an int >= 1, got {self.n!r}")

    def make_inputs(self, seed=0, device="cpu", dist="default", data_seed=None):
        g = torch.Generator().manual_seed(seed if data_seed is None else data_seed)
        return VecInputs(*(torch.randn(self.n, generator=g).to(device) for _ in range(2)))

    @classmethod
    def from_inputs(cls, inputs):
        return cls(n=inputs.x.shape[0])

    @classmethod
    def validate_inputs(cls, inputs, device_type=None):
        _need(inputs.x.shape == inputs.y.shape, InputError, f"y: expected shape {list(inputs.x.shape)}")

    def make_outputs(self, inputs, fill=float("nan")):
        return (torch.full_like(inputs.x, fill),)

    def reference(self, inputs):
        return (inputs.x.double() + inputs.y.double(),)

    def compare(self, outputs, reference, dist="default", inputs=None):
        ok, max_abs, _ = cmp.elementwise(outputs[0], reference[0], 1e-6, 1e-6)
        bad = cmp.special_positions_match(outputs[0].double(), reference[0])
        return Comparison(ok and not bad, bad or ("" if ok else f"max abs {max_abs:.3g}"), {"max_abs": max_abs})

    def flops_bytes(self, inputs):
        return self.n, 12 * self.n


VectorAddProblem.grids = {"check": lambda: [VectorAddProblem(n=1), VectorAddProblem(n=1000)]}


class TorchVectorAdd(KernelPlan):
    name = "toy_vector_add_v1"
    language = "torch"
    arch = ("any",)
    problem_kind = VectorAddProblem

    def plan(self, inputs, tiling):
        return self.runtime(tiling, TorchKernel(lambda x, outs, ws: torch.add(x.x, x.y, out=outs[0])))


class SkipsOddVectorAdd(TorchVectorAdd):
    """An older version that cannot run odd lengths: grids skip those with its reason."""
    name = "toy_vector_add_v2"

    def supports(self, problem):
        return super().supports(problem) or (["n must be even"] if problem.n % 2 else [])


class WritesNothing(TorchVectorAdd):
    """A broken version: the check must fail it (outputs stay NaN)."""
    name = "toy_vector_add_v3"

    def plan(self, inputs, tiling):
        return self.runtime(tiling, TorchKernel(lambda x, outs, ws: None))


# ---- column sum: y[j] = sum_i x[i, j], split + combine ---------------------------------------------
@dataclass(frozen=True)
class MatInputs:
    x: torch.Tensor


@dataclass(frozen=True)
class ColumnSumProblem(Problem):
    kind: ClassVar[str] = "toy_column_sum"
    layer: ClassVar[str] = "toy"
    m: int = 1000
    n: int = 300

    def make_inputs(self, seed=0, device="cpu", dist="default", data_seed=None):
        g = torch.Generator().manual_seed(seed if data_seed is None else data_seed)
        return MatInputs(torch.randn(self.m, self.n, generator=g).to(device))

    @classmethod
    def from_inputs(cls, inputs):
        return cls(*inputs.x.shape)

    @classmethod
    def validate_inputs(cls, inputs, device_type=None):
        _need(inputs.x.dtype == torch.float32 and inputs.x.dim() == 2, InputError, "x: expected float32 [m, n]")
        if device_type:
            _need(inputs.x.device.type == device_type, InputError, f"x: expected a tensor on {device_type}")

    def make_outputs(self, inputs, fill=float("nan")):
        return (torch.full((self.n,), fill, device=inputs.x.device),)

    def reference(self, inputs):
        return (inputs.x.double().sum(0),)

    def compare(self, outputs, reference, dist="default", inputs=None):
        ok, max_abs, _ = cmp.elementwise(outputs[0], reference[0], 1e-3, 1e-5)
        return Comparison(ok, "" if ok else f"max abs {max_abs:.3g}", {"max_abs": max_abs})

    def flops_bytes(self, inputs):
        return self.m * self.n, 4 * (self.m * self.n + self.n)


ColumnSumProblem.grids = {"check": lambda: [ColumnSumProblem(m=1, n=1), ColumnSumProblem(m=1000, n=300),
                                            ColumnSumProblem(m=7, n=129)]}


@dataclass(frozen=True)
class SplitTiling(Tiling):
    splits: int = 4

    def validate(self, problem, device):
        return [] if 1 <= self.splits <= 64 else [f"splits must be 1..64, got {self.splits}"]


class CuteColumnSum(KernelPlan):
    """Two CuTe DSL stages (split -> workspace partials -> combine)."""
    name = "toy_column_sum_v1"
    language = "cute-dsl"
    arch = ("sm_90a",)
    problem_kind = ColumnSumProblem
    Tiling = SplitTiling

    def stages(self, tiling, arch="sm_90a"):
        import tiny_kernels

        from mla_var3.runtime.cute_kernel import CuteKernel
        parts = tiny_kernels.cute_column_sum_stages(tiling.splits)
        return [CuteKernel(kernel=self.name, stage=stage, build=build, fake_args=fake, launch_args=args,
                           dtypes=(torch.float32,), static=(), tiling_key=tiling.key(), arch=arch)
                for stage, (build, fake, args) in parts.items()]

    def plan(self, inputs, tiling):
        def workspace(x):
            return {"partial": torch.empty(tiling.splits, x.x.shape[1], device=x.x.device)}
        return self.runtime(tiling, *self.stages(tiling), workspace=workspace)

    def compile_only(self, problem, arch, tiling=None):
        stages = self.stages(tiling or self.default_tiling(problem), arch)
        for s in stages:
            s.compile()
        return {"compiled": True, "stages": [s.name for s in stages]}
