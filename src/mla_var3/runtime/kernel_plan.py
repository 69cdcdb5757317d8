"""KernelPlan: the contract every kernel version implements, and the Tiling base.

A plan is cheap to construct and imports no DSL: the device code (CuTe DSL, cuTile) is imported
only when `plan()` builds a runtime kernel, so `list`, tests and the CLI stay fast everywhere.
A plan names the problem kind it solves (`problem_kind`, a class of layers/); this module never
imports a layer - it asks the problem for everything (inputs, validation, outputs).
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import TYPE_CHECKING, ClassVar

from mla_var3.errors import PlanError

if TYPE_CHECKING:
    from mla_var3.runtime.devices import DeviceSpec
    from mla_var3.runtime.runtime_kernel import RuntimeKernel


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


QUARANTINE_ENV = "MLA_VAR3_RUN_QUARANTINED"


class KernelPlan:
    """One subclass per kernel version (the project's docs/design.md, "Plans and runtimes")."""

    name: ClassVar[str]                     # "flash_mla_decode_v3"
    language: ClassVar[str]                 # "cute-dsl" | "cutile" | "torch" | "peer"
    arch: ClassVar[tuple[str, ...]]         # ("sm_90a",); ("any",) runs anywhere torch does
    problem_kind: ClassVar[type]            # the Problem class it solves (layers/)
    Tiling: ClassVar[type] = Tiling
    summary: ClassVar[str] = ""             # one line for `list`
    upstream: ClassVar[str] = ""            # peers: the outside code and pinned commit they call
    quarantine: ClassVar[str] = ""          # why this version must not run by default (a fault seen on
    #                                         the GPU, or never run there yet); see unavailable()

    # ---- identity --------------------------------------------------------------------------
    @property
    def design(self) -> str:
        return split_version(self.name)[0]

    @property
    def version(self) -> int:
        return split_version(self.name)[1]

    @property
    def layer(self) -> str:
        return self.problem_kind.layer

    # ---- what it can run --------------------------------------------------------------------
    def unavailable(self) -> str | None:
        """Why this version cannot run in this checkout at all (None: it can). A peer whose
        extension is not built says so with the build command; `list` shows it, `build` refuses
        with it, `--compare=all` and the GPU tests skip the version with it. A quarantined
        version (`quarantine` set) is unavailable unless MLA_VAR3_RUN_QUARANTINED=1, so nothing
        (the serving op's dispatch included) picks a kernel known to fault or never checked."""
        if self.quarantine and os.environ.get(QUARANTINE_ENV) != "1":
            return f"quarantined: {self.quarantine} (set {QUARANTINE_ENV}=1 to run it anyway)"
        return None

    def supports(self, problem) -> list[str]:
        """Reasons this version cannot run `problem` at all, whatever the tiling (empty: it can).
        Grids and tests skip such problems and show the reason."""
        if not isinstance(problem, self.problem_kind):
            return [f"{self.name} solves {self.problem_kind.kind}, not {getattr(problem, 'kind', type(problem).__name__)}"]
        return []

    def require_supported(self, problem) -> None:
        """Raise PlanError with every reason `supports` gives (callers that must refuse before
        allocating anything call it too)."""
        reasons = self.supports(problem)
        if reasons:
            raise PlanError(f"{self.name} does not support {problem.key()}: " + "; ".join(reasons))

    def schedule_contract(self, tiling, problem) -> str | None:
        """Where this call's schedule work (what depends on the input values, e.g. a split order
        from the lengths) runs, so tables compare like with like: "per_call" (in every timed call:
        a CUDA graph replayed with new values stays correct), "per_step" (made once per set of
        values in `prepare`, outside the call, as a serving engine makes FlashMLA's metadata once
        per decode step for all its layers), "none" (the call has no such work), or None (not
        declared). Records carry it; the report flags a problem whose rows mix per_call and
        per_step, since there one side is charged for work the other skips. By default the
        problem kind answers from the tiling's fields (its `schedule_contract(tiling)`, if it has
        one: the conventions its versions share); a plan may override."""
        rule = getattr(self.problem_kind, "schedule_contract", None)
        return rule(tiling) if rule is not None and tiling is not None else None

    # ---- tilings ---------------------------------------------------------------------------
    def default_tiling(self, problem):
        """The heuristic choice when nothing is tuned."""
        return self.Tiling()

    def autotune_configs(self, problem) -> list:
        """The search space; autotune prunes it with Tiling.validate."""
        return [self.default_tiling(problem)]

    def tune_configs(self, problem, knobs=None) -> list:
        """The search space an autotune of `problem` times: every config of `autotune_configs`,
        or with `knobs` (Tiling field names) the default plus only the configs that move one of
        those fields (others may move with it, e.g. a combine width tied to a split length).
        A campaign on a few cells then compiles a few configs, not the whole space."""
        configs = self.autotune_configs(problem)
        if not knobs:
            return configs
        self.require_tiling_fields(knobs)
        base = self.default_tiling(problem)
        return [c for c in configs if c == base or any(getattr(c, k) != getattr(base, k) for k in knobs)]

    def require_tiling_fields(self, names) -> None:
        """Raise PlanError naming any of `names` that is not a field of this plan's Tiling."""
        import dataclasses
        fields = [f.name for f in dataclasses.fields(self.Tiling)] if dataclasses.is_dataclass(self.Tiling) else []
        unknown = [k for k in names if k not in fields]
        if unknown:
            raise PlanError(f"--tune-knobs: {', '.join(map(repr, unknown))} not a field of {self.name}'s "
                            f"{self.Tiling.__name__} (fields: {', '.join(fields) or 'none'})")

    def example_bad_tilings(self) -> list:
        """Tilings this version must refuse (tests check each is refused before compiling)."""
        return []

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

    def build(self, inputs, tiling=None, *, check_values: bool = True) -> "RuntimeKernel":
        """Gate, validate, then plan: availability, the arch gate and every input/problem/tiling
        check run before anything compiles, each failing with a one-line error.
        `check_values=False` skips the checks that read device values (one sync per build)."""
        from mla_var3.runtime import devices
        missing = self.unavailable()
        if missing:
            raise PlanError(f"{self.name} is unavailable: {missing}")
        kind = self.problem_kind
        device = None
        if self.device_type() == "cuda" or devices.inputs_on_cuda(inputs):
            device = devices.current_device()
            devices.require_arch(self.name, self.arch, device)
        kind.validate_inputs(inputs, self.device_type() or None)
        if check_values:
            kind.validate_values(inputs)
        problem = kind.from_inputs(inputs)
        self.require_supported(problem)
        if tiling is None:
            tiling = self.default_tiling(problem)
        self.check_tiling(tiling, problem, device)
        kern = self.plan(inputs, tiling)
        kern.problem = problem
        return kern

    def plan(self, inputs, tiling) -> "RuntimeKernel":
        """Return the runtime kernel (its stages and workspace) for validated inputs."""
        raise NotImplementedError

    def runtime(self, tiling, *stages, workspace=None, prepare_stages=()) -> "RuntimeKernel":
        """Shorthand for plans: RuntimeKernel(self, tiling, [stages...], workspace=..., prepare_stages=...)."""
        from mla_var3.runtime.runtime_kernel import RuntimeKernel
        return RuntimeKernel(self, tiling, list(stages), workspace=workspace, prepare_stages=list(prepare_stages))

    def compile_only(self, problem, arch: str, tiling=None) -> dict:
        """Compile every stage for `arch` without a GPU; returns facts about the artifacts.
        Plans with nothing to compile ahead (PyTorch) say so."""
        return {"compiled": False, "reason": "PyTorch kernels have nothing to compile ahead"}

    def describe(self) -> dict:
        return {"name": self.name, "design": self.design, "version": self.version,
                "layer": self.layer, "problem_kind": self.problem_kind.kind, "language": self.language,
                "arch": list(self.arch), "summary": self.summary,
                **({"upstream": self.upstream} if self.upstream else {})}
