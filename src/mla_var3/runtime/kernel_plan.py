"""KernelPlan: the contract every kernel version implements, and the Tiling base.

A plan is cheap to construct and imports no DSL: the device code (CuTe DSL, cuTile) is imported
only when `plan()` builds a runtime kernel, so `list`, tests and the CLI stay fast everywhere.
"""
from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, ClassVar

from mla_var3.layers import mla

if TYPE_CHECKING:
    from mla_var3.runtime.devices import DeviceSpec


class PlanError(ValueError):
    """A plan cannot run what it was given (inputs, tiling, device); the message says why."""


@dataclasses.dataclass(frozen=True)
class Tiling:
    """Base of every version's frozen tiling dataclass.

    `validate` returns the reasons this tiling cannot run `problem` on `device` (empty: it can);
    autotune prunes with it before anything compiles. `key()` is the compile-cache key.
    """

    def validate(self, problem, device: "DeviceSpec | None") -> list[str]:
        return []

    def key(self) -> str:
        parts = [f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self)]
        return ",".join(parts) or "default"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def problem_of(inputs) -> "mla.MlaDecodeProblem":
    """The problem a set of inputs poses (explicit lengths)."""
    seqlens = inputs.seqlens or tuple(inputs.cache_seqlens.tolist())
    return mla.MlaDecodeProblem(b=inputs.b, s_q=inputs.s_q, h_q=inputs.h_q, seqlen=max(seqlens, default=0),
                                seqlens=tuple(seqlens), softmax_scale=inputs.softmax_scale)


class RuntimeKernel:
    """What every runtime kernel offers: run(inputs) -> (out, lse); describe(); autotune()."""

    def __init__(self, plan: "KernelPlan", tiling: Tiling):
        self.plan = plan
        self.tiling = tiling

    def compile(self):
        """Compile ahead of the first run (no-op where there is nothing to compile)."""
        return None

    def launch(self, inputs, out, lse) -> None:
        raise NotImplementedError

    def run(self, inputs, out=None, lse=None):
        if out is None or lse is None:
            out, lse = mla.make_outputs(inputs, fill=float("nan"))
        self.launch(inputs, out, lse)
        return out, lse

    def autotune(self, problem, **kw):
        from mla_var3.runtime.autotune import autotune
        return autotune(self.plan, problem, **kw)

    def describe(self) -> dict:
        return {**self.plan.describe(), "tiling": self.tiling.key(), "runtime": type(self).__name__}


def smem_reasons(nbytes: int, device: "DeviceSpec | None") -> list[str]:
    """The reason a block needing `nbytes` of shared memory cannot run on `device` (or none)."""
    if device is None or not device.smem_per_block_bytes or nbytes <= device.smem_per_block_bytes:
        return []
    return [f"needs {nbytes // 1024} KB of shared memory per block, {device.display_name} allows "
            f"{device.smem_per_block_bytes // 1024} KB"]


_VERSION_RE = re.compile(r"^(?P<design>[a-z][a-z0-9_]*)_v(?P<n>[0-9]+)$")


def split_version(name: str) -> tuple[str, int]:
    """`flash_mla_decode_v3` -> (`flash_mla_decode`, 3)."""
    m = _VERSION_RE.match(name)
    if not m:
        raise PlanError(f"kernel name: expected <design>_v<N>, got {name!r}")
    return m["design"], int(m["n"])


class KernelPlan:
    """One subclass per kernel version. See DESIGN.md "The contract"."""

    name: ClassVar[str]                     # "flash_mla_decode_v3"
    layer: ClassVar[str] = "mla"
    language: ClassVar[str]                 # "cute-dsl" | "cutile" | "torch"
    arch: ClassVar[tuple[str, ...]]         # ("sm_90a",); ("any",) runs anywhere torch does
    Problem: ClassVar[type] = mla.MlaDecodeProblem
    Tiling: ClassVar[type] = Tiling
    summary: ClassVar[str] = ""             # one line for `list`

    # ---- identity --------------------------------------------------------------------------
    @property
    def design(self) -> str:
        return split_version(self.name)[0]

    @property
    def version(self) -> int:
        return split_version(self.name)[1]

    # ---- the layer's pieces (versions never redefine them) ----------------------------------
    def prepare_inputs(self, problem, seed: int = 0, device="cuda", peaked: bool = False, data_seed=None):
        return mla.make_inputs(problem, seed=seed, device=device, peaked=peaked, data_seed=data_seed)

    def reference_fn(self, inputs):
        return mla.reference(inputs)

    def algorithmic_flops_bytes(self, problem, seqlens=None) -> tuple[int, int]:
        return mla.flops_bytes(problem, seqlens)

    # ---- tilings ---------------------------------------------------------------------------
    def default_tiling(self, problem):
        """The heuristic choice when nothing is tuned."""
        return self.Tiling()

    def autotune_configs(self, problem) -> list:
        """The search space; autotune prunes it with Tiling.validate."""
        return [self.default_tiling(problem)]

    def check_tiling(self, tiling, problem, device) -> None:
        """Raise PlanError with every reason the tiling does not fit."""
        if not isinstance(tiling, self.Tiling):
            raise PlanError(f"tiling: {self.name} expects a {self.Tiling.__name__}, got {type(tiling).__name__}")
        reasons = tiling.validate(problem, device)
        if reasons:
            raise PlanError(f"tiling {tiling.key()} does not fit {self.name} on {problem.key()}: "
                            + "; ".join(reasons))

    # ---- building --------------------------------------------------------------------------
    def device_type(self) -> str:
        """Where this plan's tensors must live: GPU kernels need "cuda"; torch runs anywhere."""
        return "cuda" if self.language != "torch" else ""

    def build(self, inputs, tiling=None):
        """Gate, validate, then plan: the arch gate and every input/tiling check run before
        anything compiles, each failing with a one-line error."""
        from mla_var3.runtime import devices
        device = None
        if self.device_type() == "cuda" or inputs.q.is_cuda:
            device = devices.current_device()
            devices.require_arch(self.name, self.arch, device)
        mla.validate_inputs(inputs, self.device_type() or None)
        problem = problem_of(inputs)
        if tiling is None:
            tiling = self.default_tiling(problem)
        self.check_tiling(tiling, problem, device)
        return self.plan(inputs, tiling)

    def plan(self, inputs, tiling):
        """Return a runtime kernel (CuteKernel | CtKernel | TorchKernel) for validated inputs."""
        raise NotImplementedError

    def compile_only(self, problem, arch: str, tiling=None) -> dict:
        """Compile for `arch` without a GPU; returns facts about the artifact. Torch: nothing."""
        return {"compiled": False, "reason": "PyTorch kernels have nothing to compile ahead"}

    def describe(self) -> dict:
        return {"name": self.name, "design": self.design, "version": self.version,
                "layer": self.layer, "language": self.language, "arch": list(self.arch),
                "summary": self.summary}
