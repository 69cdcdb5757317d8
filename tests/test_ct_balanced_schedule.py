"""ct_flash_mla_decode_v4's balanced schedule: the host mirror covers every KV tile once, gives each
piece its own workspace slot and the combine exactly the slots that hold its sequence; the plan's
schedule choice, parts and refusals; the three kernels compile for sm_90a (CPU); on the H200 the
balanced kernels against the reference (ragged, empty and one-part batches, more parts than tiles)
and under a CUDA graph replayed with new lengths."""
import dataclasses
import random

import pytest
from gpu_helpers import assert_check_passes

from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry

V4 = "ct_flash_mla_decode_v4"


def _balanced():
    pytest.importorskip("cuda.tile")
    from mla_var3.kernel.cutile_python.mla.ct_flash_mla_decode.ct_flash_mla_decode_v4 import balanced
    return balanced


def _mirror():
    """The plan module, which holds the schedule's host mirror (no cuda.tile needed)."""
    from mla_var3.kernel.cutile_python.mla.ct_flash_mla_decode.ct_flash_mla_decode_v4 import ct_flash_mla_decode_v4
    return ct_flash_mla_decode_v4


def _tiles(lens):
    return [-(-s // 64) for s in lens]


CASES = [
    ([4096] * 128, 132),
    ([1024] * 128, 132),
    ([5000, 70, 129, 64 * 68, 0, 9000, 64 * 68 * 2 + 1, 640], 132),
    ([0, 0, 0], 132),
    ([1], 132),
    ([0, 65, 0, 1, 64, 63, 4097], 5),
    ([64] * 300, 7),
    ([32768], 3),
]


@pytest.mark.parametrize("lens,parts", CASES + [([random.Random(i).randint(0, 20000) for _ in range(
    random.Random(i).randint(1, 200))], random.Random(i + 99).randint(1, 300)) for i in range(20)])
def test_host_schedule_covers_each_tile_once_in_unique_slots(lens, parts):
    b = _mirror()
    pieces = b.host_pieces(lens, parts)
    slots = [p[4] for p in pieces]
    assert len(set(slots)) == len(slots) and all(0 <= s < len(lens) + parts for s in slots)
    owner = {}
    for part, seq, t0, t1, _ in pieces:
        for t in range(t0, t1):
            assert (seq, t) not in owner
            owner[(seq, t)] = part
    tiles = _tiles(lens)
    assert len(owner) == sum(tiles)
    # each part's share is within one tile of T / parts
    per_part = [sum(t1 - t0 for p, _, t0, t1, _ in pieces if p == k) for k in range(parts)]
    assert max(per_part) - min(per_part) <= 1
    # the combine merges exactly the parts that wrote a slot of the sequence, and every one was written
    written = {(p, s) for p, s, *_ in pieces}
    for s, rng in enumerate(b.host_combine_parts(lens, parts)):
        assert all((p, s) in written for p in rng)
        assert {owner[(s, t)] for t in range(tiles[s])} <= set(rng)
        assert (len(rng) == 0) == (tiles[s] == 0)


def test_default_schedule_follows_the_lengths():
    plan = registry.get_plan(V4)
    ragged = plan.default_tiling(MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=4096, varlen=True))
    fixed = plan.default_tiling(MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=4096))
    assert ragged.schedule == "balanced" and ragged.num_splits == 1
    assert fixed.schedule == "sequence" and fixed.num_splits == 1


def test_parts_default_to_one_block_per_sm_per_row_tile():
    mod = pytest.importorskip(
        "mla_var3.kernel.cutile_python.mla.ct_flash_mla_decode.ct_flash_mla_decode_v4.ct_flash_mla_decode_v4")
    T = registry.get_plan(V4).Tiling
    assert mod.resolve_parts(T(schedule="balanced"), 16) == 132
    assert mod.resolve_parts(T(schedule="balanced"), 256) == 33           # 4 row tiles
    assert mod.resolve_parts(T(schedule="balanced", parts=7), 256) == 7


def test_autotune_offers_both_schedules():
    plan = registry.get_plan(V4)
    configs = plan.autotune_configs(MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=4096, varlen=True))
    assert {c.schedule for c in configs} == {"sequence", "balanced"}
    assert {c.parts for c in configs if c.schedule == "balanced"} >= {0, 66, 264}


def test_balanced_refusals_name_the_argument():
    plan = registry.get_plan(V4)
    T = plan.Tiling
    p = MlaDecodeProblem(b=8, s_q=1, h_q=16, seqlen=1024)
    with pytest.raises(PlanError, match="num_splits applies to schedule='sequence'"):
        plan.check_tiling(T(schedule="balanced", num_splits=4), p, None)
    with pytest.raises(PlanError, match="schedule must be one of"):
        plan.check_tiling(T(schedule="persistent"), p, None)
    with pytest.raises(PlanError, match="parts must be"):
        plan.check_tiling(T(schedule="balanced", parts=5000), p, None)


@pytest.mark.parametrize("problem", [MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=4096, varlen=True),
                                     MlaDecodeProblem(b=5, s_q=2, h_q=128, seqlen=3000, varlen=True)],
                         ids=lambda p: p.key())
def test_balanced_kernels_compile_for_sm90a(problem):
    _balanced()
    plan = registry.get_plan(V4)
    t = dataclasses.replace(plan.default_tiling(problem), schedule="balanced", num_splits=1)
    info = plan.compile_only(problem, "sm_90a", t)
    assert info["schedule"] == "balanced"
    assert min(info["schedule_cubin_bytes"], info["split_cubin_bytes"], info["combine_cubin_bytes"]) > 0


GPU_PROBLEMS = [
    (MlaDecodeProblem(b=7, s_q=1, h_q=16, seqlens=(0, 65, 0, 1, 64, 63, 4097)), 5),
    (MlaDecodeProblem(b=9, s_q=2, h_q=64, seqlen=3000, varlen=True), 0),
    (MlaDecodeProblem(b=3, s_q=4, h_q=16, seqlens=(1, 2, 130)), 200),       # more parts than tiles
    (MlaDecodeProblem(b=40, s_q=1, h_q=128, seqlen=700, varlen=True), 3),   # many sequences per part
    (MlaDecodeProblem(b=2, s_q=1, h_q=16, seqlens=(0, 0)), 0),              # nothing to attend to
]


@pytest.mark.gpu
@pytest.mark.parametrize("problem,parts", GPU_PROBLEMS, ids=[f"{p.key()}-parts{k}" for p, k in GPU_PROBLEMS])
def test_balanced_matches_reference(problem, parts):
    plan = registry.get_plan(V4)
    if plan.unavailable():
        pytest.skip(plan.unavailable())
    t = plan.Tiling(schedule="balanced", parts=parts)
    assert_check_passes(plan, problem, seeds=(0, 1), extra_seeds=(0,), tiling=t)


@pytest.mark.gpu
def test_balanced_cuda_graph_replay_with_new_lengths():
    from graph_replay import replay_with_new_lengths
    plan = registry.get_plan(V4)
    if plan.unavailable():
        pytest.skip(plan.unavailable())
    problem = MlaDecodeProblem(b=3, s_q=2, h_q=64, seqlens=(900, 900, 900))
    inputs = problem.make_inputs(seed=0, device="cuda")
    kern = plan.build(inputs, plan.Tiling(schedule="balanced", parts=4))
    kern.compile()
    outputs, replayed = replay_with_new_lengths(problem, kern, inputs, (37, 0, 900))
    cmp = problem.compare(outputs, problem.reference(replayed))
    assert cmp.passed, cmp.reason
