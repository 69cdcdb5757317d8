"""RuntimeKernel: what a plan returns - a sequence of stages (launches) plus a workspace.

One call of a kernel version may need several launches: a split-KV decode computes a schedule,
runs the split kernel into partial results and combines them. Each launch is a `Stage`
(CuteKernel, CtKernel, TorchKernel); the runtime kernel runs them in order on the current
stream. Buffers the stages share (partials, schedule) form the `Workspace`: `prepare(inputs)`
allocates it once per shape, outside any timed region, sized for the worst case of that shape.
Anything that depends on the *values* of the inputs (lengths) must be computed on the device by
a stage into those fixed buffers, so a CUDA graph replayed with new values stays correct.
A plan may instead declare `prepare_stages`: launched by `prepare` into the fresh workspace, once
per prepared set of inputs, outside the call - what FlashMLA's per-step metadata is (made once
for a decode step's lengths, reused by every layer's call). Their results hold only for the
values they were prepared with; a graph replayed with new values must re-run `prepare` in it.

Outputs: a stage writes the harness's output buffers in place and returns None - except a stage
that calls an outside library whose API allocates its outputs itself (a peer, FlashMLA): its
`launch` returns the tuple it got, `RuntimeKernel.launch` returns the last such result, and
`run` (what the check compares) returns it instead of the poisoned buffers. Nothing is copied
into the buffers, so the timed call is exactly the library's call.
"""
from __future__ import annotations

from typing import Callable

from mla_var3.errors import PlanError


class Workspace(dict):
    """Named device buffers one call needs besides its inputs and outputs."""

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.values() if hasattr(t, "element_size"))


class Stage:
    """One launch of a call. Subclasses: CuteKernel, CtKernel, TorchKernel."""

    name: str = "main"

    def compile(self):
        """Compile ahead of the first launch (no-op where there is nothing to compile)."""
        return None

    def launch(self, inputs, outputs: tuple, workspace: Workspace) -> tuple | None:
        """Run on the current stream. Write `outputs` in place and return None, or return the
        outputs this stage allocated itself (same order and shapes as `outputs`)."""
        raise NotImplementedError

    def describe(self) -> dict:
        return {"stage": self.name, "type": type(self).__name__}


class RuntimeKernel:
    """A plan's runnable call: `stages` in order, `workspace(inputs) -> dict` of buffers.

    prepare(inputs)                       -> Workspace (once per shape, outside the timed region)
    launch(inputs, outputs, workspace)    every stage, on the current stream (what the bench times);
                                          returns the last outputs a stage allocated itself, or None
    run(inputs)                           convenience: NaN-poisoned outputs, prepare, launch; returns
                                          the outputs a stage returned, else the (written) buffers
    """

    def __init__(self, plan, tiling, stages: list[Stage], *, workspace: Callable | None = None, problem=None,
                 prepare_stages: list[Stage] = ()):
        if not stages:
            raise PlanError(f"{getattr(plan, 'name', 'kernel')}: a runtime kernel needs at least one stage")
        names = [s.name for s in [*prepare_stages, *stages]]
        if len(set(names)) != len(names):
            raise PlanError(f"stages: names must be unique within a call, got {names}")
        self.plan, self.tiling, self.stages = plan, tiling, list(stages)
        self.prepare_stages = list(prepare_stages)      # run by prepare(), not by launch()
        self.workspace_fn = workspace
        self.problem = problem            # the problem it was built for (set by KernelPlan.build)

    def compile(self) -> None:
        for stage in [*self.prepare_stages, *self.stages]:
            stage.compile()

    def prepare(self, inputs) -> Workspace:
        ws = Workspace(self.workspace_fn(inputs) if self.workspace_fn is not None else {})
        for stage in self.prepare_stages:        # once per prepared inputs, outside the call
            stage.launch(inputs, None, ws)
        return ws

    def launch(self, inputs, outputs: tuple, workspace: Workspace) -> tuple | None:
        result = None
        for stage in self.stages:
            got = stage.launch(inputs, outputs, workspace)
            if got is not None:
                result = got
        return result

    def run(self, inputs, outputs: tuple | None = None, workspace: Workspace | None = None) -> tuple:
        if outputs is None:
            problem = self.problem or self.plan.problem_kind.from_inputs(inputs)
            outputs = problem.make_outputs(inputs, fill=float("nan"))
        result = self.launch(inputs, outputs, self.prepare(inputs) if workspace is None else workspace)
        if result is None:
            return outputs
        result = tuple(result)
        if len(result) != len(outputs):
            raise PlanError(f"{self.plan.name}: a stage returned {len(result)} outputs, the problem has {len(outputs)}")
        return result

    def describe(self) -> dict:
        prepared = {"prepare_stages": [s.describe() for s in self.prepare_stages]} if self.prepare_stages else {}
        return {**self.plan.describe(), "tiling": self.tiling.key(), "stages": [s.describe() for s in self.stages],
                **prepared}
