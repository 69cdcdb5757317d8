"""Shared checks for a version that is v36 plus one or more boolean tiling knobs (v39-v48): the knob
on by default, refused when not a bool and tried both ways by autotune (CPU); on the GPU the version
against the reference, bit for bit against v36 with the knob's field dropped, and under a CUDA graph
replayed with new lengths. Each test module keeps its own cases and its compiled-code checks."""
from __future__ import annotations

import dataclasses

import pytest
from gpu_helpers import assert_check_passes

from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry

BASE = "flash_mla_decode_v36"

# a ragged page-16 batch with an empty and a one-key sequence, a varlen page-32 batch at s_q=4,
# a multicast pair (h_q=128 at page 16) and a page-64 co-scheduled pair with short tails
KNOB_CASES = [
    MlaDecodeProblem(b=5, s_q=1, h_q=16, seqlens=(0, 17, 1000, 4097, 64), page_size=16),
    MlaDecodeProblem(b=9, s_q=4, h_q=16, seqlen=2000, varlen=True, page_size=32),
    MlaDecodeProblem(b=3, s_q=1, h_q=128, seqlens=(1, 130, 2049), page_size=16),
    MlaDecodeProblem(b=4, s_q=2, h_q=64, seqlens=(64, 65, 3000, 5), page_size=64),
]


def assert_bool_knob_on_by_default(name: str, knob: str, problem):
    """`name`'s default tiling for `problem` has `knob` = True, a tiling with `knob` = 1 is refused
    with the knob's one-line reason, and the autotune space tries it both ways. -> the default tiling."""
    plan = registry.get_plan(name)
    t = plan.default_tiling(problem)
    assert getattr(t, knob) is True
    with pytest.raises(PlanError, match=rf"{knob} must be True or False .* got 1"):
        plan.check_tiling(dataclasses.replace(t, **{knob: 1}), problem, None)
    assert {getattr(c, knob) for c in plan.autotune_configs(problem)} == {True, False}
    return t


def gpu_plans(name: str, base: str = BASE):
    """(the version's plan, `base`'s: v36's by default), or a skip with the reason the version
    cannot run here."""
    plan, base = registry.get_plan(name), registry.get_plan(base)
    if plan.unavailable():
        pytest.skip(plan.unavailable())
    return plan, base


def tiling_without(base_plan, tiling, knob: str | tuple | None = None, base_fields=None):
    """`base_plan`'s Tiling with `tiling`'s fields but the field `knob` (or the fields), and
    `base_fields` over them: the build a version is compared with bit for bit."""
    drop = (knob,) if isinstance(knob, str) else tuple(knob or ())
    return base_plan.Tiling(**{**{k: v for k, v in tiling.to_dict().items() if k not in drop}, **(base_fields or {})})


def assert_reference_and_bitwise(name: str, problem, tiling, knob: str | tuple | None = None, base_fields=None,
                                 base: str = BASE):
    """`name` at `tiling` passes the check on `problem` (seeds 0 and 1, and the peaked draw), and
    its outputs equal `base`'s (v36's by default) at the same tiling without the field `knob` (or
    the fields, for a version two knobs past its base) and with `base_fields` over it, bit for bit."""
    import torch

    plan, base = gpu_plans(name, base)
    assert_check_passes(plan, problem, seeds=(0, 1), extra_seeds=(0,), tiling=tiling)
    inputs = problem.make_inputs(seed=3, device="cuda")
    base_tiling = tiling_without(base, tiling, knob, base_fields)
    outs = []
    for pl, t in ((plan, tiling), (base, base_tiling)):
        kern = pl.build(inputs, t)
        kern.compile()
        out = problem.make_outputs(inputs)
        kern.launch(inputs, out, kern.prepare(inputs))
        outs.append(out)
    torch.cuda.synchronize()
    for a, b in zip(*outs):
        assert torch.equal(a, b)


def graph_replay_build(name: str, page_size: int = 16, h_q: int = 16, **fields):
    """(problem, tiling) the graph-replay check builds `name` at (for the AOT cache too)."""
    problem = MlaDecodeProblem(b=3, s_q=2, h_q=h_q, seqlens=(900, 900, 900), page_size=page_size)
    plan = registry.get_plan(name)
    return problem, dataclasses.replace(plan.default_tiling(problem), order="longest_first", chunk=4, **fields)


def assert_graph_replay_with_new_lengths(name: str, page_size: int = 16, h_q: int = 16, **fields):
    """`name` (longest-first order, split length 4, `fields` over its default tiling) captured in a
    CUDA graph at lengths (900, 900, 900) and replayed at (37, 0, 900) matches the reference
    (s_q=2; h_q=64 makes two row blocks, a multicast pair at pages 16 and 32)."""
    from graph_replay import replay_with_new_lengths
    plan, _ = gpu_plans(name)
    problem, tiling = graph_replay_build(name, page_size, h_q, **fields)
    inputs = problem.make_inputs(seed=0, device="cuda")
    kern = plan.build(inputs, tiling)
    kern.compile()
    outputs, replayed = replay_with_new_lengths(problem, kern, inputs, (37, 0, 900))
    cmp = problem.compare(outputs, problem.reference(replayed))
    assert cmp.passed, cmp.reason
