"""The problem contract: everything runtime/, the CLI, sweeps, reports and tests may ask of a
problem kind.

A problem kind (MLA dense decode, later sparse decode or GEMM) is one frozen dataclass that
subclasses `Problem`. The harness never looks inside inputs or outputs: it asks the problem for
them, for the float32 reference, for the comparison with the kind's own tolerances and for the
FLOPs and bytes, so a new kind needs no change in runtime/. `runtime/` imports nothing from
this package; a `KernelPlan` names the kind it solves (`problem_kind`).
"""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from mla_var3.errors import ProblemError


@dataclass
class Comparison:
    """A kernel's outputs against the reference: verdict, why not, and the measured errors."""
    passed: bool
    reason: str = ""
    errors: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def tensor_bytes(*tensors) -> int:
    """Bytes of every torch tensor given (other objects count 0)."""
    return sum(t.numel() * t.element_size() for t in tensors if hasattr(t, "element_size"))


class Problem:
    """Base of every problem kind: a frozen dataclass of the dimensions of one call.

    Class attributes a kind sets:
      kind   the registry name ("mla_decode"), stored in every record
      layer  the layer it belongs to ("mla"); kernels live under kernel/<lang>_python/<layer>/
      dists  input distributions the check runs: the first is the default ("default"), the
             others are extra sets (MLA: "peaked", where bf16 rounding of P shows)
    """

    kind: ClassVar[str]
    layer: ClassVar[str]
    dists: ClassVar[tuple[str, ...]] = ("default",)

    # ---- identity ---------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ProblemError naming the first out-of-range or inconsistent dimension."""

    def key(self) -> str:
        """A stable, readable label (records, caches, tables)."""
        return ",".join(f"{k}={v}" for k, v in self.to_dict().items())

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Problem":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def static_key(self) -> str:
        """The dimensions a compiled kernel depends on, as a label (one compile check per value)."""
        return self.key()

    # ---- data -------------------------------------------------------------------------------
    def make_inputs(self, seed: int = 0, device="cpu", dist: str = "default", data_seed: int | None = None):
        """Inputs for `seed` drawn from `dist`; `data_seed` (default: seed) draws the values only,
        so benchmark sets share the problem's shape and cost but not their data."""
        raise NotImplementedError

    @classmethod
    def from_inputs(cls, inputs) -> "Problem":
        """The problem a set of inputs poses (what a plan validates its tiling against)."""
        raise NotImplementedError

    @classmethod
    def validate_inputs(cls, inputs, device_type: str | None = None) -> None:
        """Raise InputError naming the tensor that breaks the contract; `device_type` ("cuda",
        "cpu") is where the kernel needs them, None accepts either."""

    @classmethod
    def validate_values(cls, inputs) -> None:
        """Checks that read values on the device (one sync): lengths and indices in range, host
        copies agreeing with device tensors. Plans run them when they build (outside any timed
        region); `KernelPlan.build(..., check_values=False)` skips them."""

    def input_bytes(self, inputs) -> int:
        """Bytes of every tensor of `inputs` (the L2 rotation counts them)."""
        return tensor_bytes(*(getattr(inputs, f.name) for f in dataclasses.fields(inputs)))

    def make_outputs(self, inputs, fill: float = float("nan")) -> tuple:
        """Output buffers, filled with `fill` (NaN: an element the kernel never writes shows)."""
        raise NotImplementedError

    def reference(self, inputs) -> tuple:
        """The float32 reference outputs, in the order of make_outputs."""
        raise NotImplementedError

    def compare(self, outputs: tuple, reference: tuple, dist: str = "default", inputs=None) -> Comparison:
        """Outputs against the reference with this kind's tolerances (which may depend on dist, and
        on the inputs: e.g. a GEMM's tolerance is relative to torch.matmul's own error on them)."""
        raise NotImplementedError

    def flops_bytes(self, inputs) -> tuple[int, int]:
        """Algorithmic FLOPs and bytes of one call on these inputs (the roofline uses them)."""
        raise NotImplementedError

    def small_variant(self) -> "Problem":
        """A small problem with the same static_key (autotune checks each config on it before
        timing); the problem itself by default."""
        return self

    def footprint_bytes(self) -> int | None:
        """Peak bytes one call's inputs and outputs take while they are made (None: unknown); the
        harness refuses a problem that cannot fit before allocating anything."""
        return None

    def input_facts(self, inputs) -> dict:
        """Extra facts a benchmark record keeps about the inputs it ran (e.g. mean length)."""
        return {}

    def peer_records(self, device) -> list[dict]:
        """Record-shaped rows of outside implementations measured on `device` (kind "peer")."""
        return []

    # ---- named grids and CLI ----------------------------------------------------------------
    grids: ClassVar[dict[str, Any]] = {}      # name -> zero-argument function returning problems

    @classmethod
    def grid(cls, name: str) -> list["Problem"]:
        if name not in cls.grids:
            raise ProblemError(f"grid: unknown grid {name!r} for {cls.kind}; expected one of {sorted(cls.grids)}")
        return list(cls.grids[name]())

    @classmethod
    def default_problem(cls) -> "Problem":
        """What a benchmark runs when no dimension flag is given."""
        return cls()

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """Add the flags of this kind's dimensions (`--b`, `--h_q`, ...)."""

    @classmethod
    def from_cli(cls, args: argparse.Namespace) -> list["Problem"] | None:
        """The problems the flags describe, or None when no dimension flag was given."""
        return None
