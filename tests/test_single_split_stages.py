"""flash_mla_decode_v28 leaves the combine out when the workspace has one split slot per sequence.
CPU: the stages each shape gets, and the arithmetic that makes it safe (one slot: no length that
fits the block table can need two splits). GPU: one-slot calls match the reference, also in a
CUDA graph replayed with new lengths."""
import dataclasses
import math

import pytest

from graph_replay import replay_with_new_lengths
from mla_var3.layers.mla import decode as mla
from mla_var3.runtime import registry

V28 = "flash_mla_decode_v28"


def _kernel_module():
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v28 import kernel
    return kernel


def _stages(problem, tiling=None):
    plan = registry.get_plan(V28)
    inputs = problem.make_inputs(seed=0, device="cpu")
    return [s.name for s in plan.plan(inputs, tiling or plan.default_tiling(problem)).stages]


def test_one_slot_shapes_launch_only_the_split_kernel():
    assert _stages(mla.MlaDecodeProblem(b=128, s_q=1, h_q=128, seqlen=4096)) == ["split"]
    assert _stages(mla.MlaDecodeProblem(b=128, s_q=4, h_q=32, seqlen=4096, page_size=16)) == ["split"]
    # several slots keep the combine: a small batch split many ways, a ragged batch (its order kernel too)
    assert _stages(mla.MlaDecodeProblem(b=4, s_q=1, h_q=16, seqlen=32768)) == ["split", "combine"]
    assert _stages(mla.MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=1024, varlen=True)) == ["order", "split", "combine"]
    # the same shape with a chunk too short for the widest sequence gets its combine back
    plan = registry.get_plan(V28)
    short = dataclasses.replace(plan.default_tiling(mla.MlaDecodeProblem(b=128, s_q=1, h_q=128, seqlen=4096)), chunk=32)
    assert _stages(mla.MlaDecodeProblem(b=128, s_q=1, h_q=128, seqlen=4096), short) == ["split", "combine"]


@pytest.mark.parametrize("page_size", mla.PAGE_SIZES)
def test_one_slot_means_no_length_the_block_table_holds_needs_two_splits(page_size):
    """The split kernel's split count for a length is cdiv(cdiv(len, 64), chunk); with one slot,
    every length up to the block table's capacity (width x page size) gives 1."""
    k = _kernel_module()
    for width in range(1, 70):
        for chunk in (1, 2, 3, 8, 16, 17, 64):
            if k.n_split_slots(width, chunk, page_size) != 1:
                continue
            tiles = math.ceil(width * page_size / k.TILE)        # the longest length the table holds
            assert math.ceil(tiles / chunk) <= 1, (width, chunk)


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", mla.PAGE_SIZES)
def test_one_slot_call_replayed_with_new_lengths_matches_the_reference(page_size):
    """A one-slot call (chunk covers the widest sequence) captured in a CUDA graph, the lengths
    changed in place, replayed: out and lse come from the split kernel alone and follow the new
    lengths, empty sequence included."""
    import torch
    plan = registry.get_plan(V28)
    problem = mla.MlaDecodeProblem(b=3, s_q=2, h_q=64, seqlens=(900, 900, 900), page_size=page_size)
    inputs = problem.make_inputs(seed=0, device="cuda")
    kern = plan.build(inputs, dataclasses.replace(plan.default_tiling(problem), chunk=16))
    assert [s.name for s in kern.stages] == ["split"]
    kern.compile()
    outputs, ws = problem.make_outputs(inputs), kern.prepare(inputs)
    kern.launch(inputs, outputs, ws)                     # eager first
    torch.cuda.synchronize()
    cmp = problem.compare(outputs, problem.reference(inputs))
    assert cmp.passed, cmp.reason
    outputs, replayed = replay_with_new_lengths(problem, kern, inputs, (0, 900, 513))
    cmp = problem.compare(outputs, problem.reference(replayed))
    assert cmp.passed, cmp.reason
