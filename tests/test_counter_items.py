"""flash_mla_decode_v55: v54's persistent CTA columns take their items from a device counter
(`item_fetch="counter"`) instead of a snake dealing fixed before the launch. CPU: the default
(the greedy model), the refusals, the compiled code (v54's wgmma, waits and barriers, one atomic
add per claim, no spills); on the H200: the check and bit for bit equal to v46 with 1 and 3 columns
taking many items (empty sequences, several splits per sequence, pages 16 and 64, one, two and four
row blocks, both orders), the check at the default tiling, planted keys, and a CUDA graph replayed
with new lengths (the counter must be back at zero after every call)."""
import dataclasses

import pytest
from compiled_sass import count, split_opcode_counts
from gpu_helpers import assert_check_passes, check_with_planted_keys, planted_keys_problem, runnable_plan
from version_knob import assert_reference_and_bitwise, graph_replay_build, tiling_without

from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry, sass

V55, V54, V46 = "flash_mla_decode_v55", "flash_mla_decode_v54", "flash_mla_decode_v46"
KNOBS = ("persistent_ctas", "item_fetch")     # v55's fields past v46's (the bit-for-bit base)
HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


@pytest.mark.parametrize("s_q, h_q, page, seqlen, varlen, ctas", [
    (1, 128, 64, 1024, False, 66),
    (2, 128, 64, 4096, True, 33),
    (1, 128, 64, 8192, True, 66),       # v54's snake model kept v46's grid here; the greedy one does not
    (1, 16, 64, 1024, False, 0),        # one item per SM: nothing to hide
    (2, 64, 16, 1024, False, 0)])       # a multicast pair
def test_default_follows_the_greedy_model(s_q, h_q, page, seqlen, varlen, ctas):
    plan = registry.get_plan(V55)
    problem = MlaDecodeProblem(b=128, s_q=s_q, h_q=h_q, seqlen=seqlen, varlen=varlen, page_size=page)
    t = plan.default_tiling(problem)
    assert (t.persistent_ctas, t.item_fetch) == (ctas, "counter")
    configs = plan.autotune_configs(problem)
    assert all(plan.Tiling.validate(c, problem, None) == [] for c in configs)
    if ctas:
        assert {c.item_fetch for c in configs if c.persistent_ctas} == {"counter", "snake"}


def test_persistent_makespan_gives_each_item_to_the_column_that_frees_first():
    """Items 10, 1, 1, 1, 1, 1 (chunk 10) on 2 columns, 6 fixed and 4 per further item: 10 -> A (16),
    then the ones to B (7, 12, 17), A (21), B (22); v54's snake dealing alternates them (A 26)."""
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v54.flash_mla_decode_v54 import (
        persistent_makespan as snake)
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v55.flash_mla_decode_v55 import (
        persistent_makespan as greedy)
    assert greedy([10, 1, 1, 1, 1, 1], 10, 2) == 22
    assert snake([10, 1, 1, 1, 1, 1], 10, 2) == 26


def test_item_fetch_refusal():
    plan = registry.get_plan(V55)
    problem = MlaDecodeProblem(b=4, s_q=1, h_q=128, seqlen=1000)
    with pytest.raises(PlanError, match="item_fetch must be one of counter, snake"):
        plan.check_tiling(dataclasses.replace(plan.default_tiling(problem), item_fetch="steal"), problem, None)


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
def test_the_counter_adds_an_atomic_and_no_barrier_to_v54s_code():
    """At s_q=2 h_q=128 4096 varlen: v54's 104 HGMMA, its `WARPGROUP.DEPBAR` and named barriers
    (the ring is mbarriers), atomics only in v55 (the claim and the counter's reset), no spills."""
    problem = MlaDecodeProblem(b=128, s_q=2, h_q=128, seqlen=4096, varlen=True)
    assert registry.get_plan(V55).default_tiling(problem).persistent_ctas == 33
    v55, v54 = split_opcode_counts(V55, problem), split_opcode_counts(V54, problem)
    assert count(v55, "HGMMA") == count(v54, "HGMMA") == 104
    assert count(v55, "WARPGROUP.DEPBAR") == count(v54, "WARPGROUP.DEPBAR")
    assert count(v55, "BAR.SYNC") == count(v54, "BAR.SYNC")
    assert count(v55, "ATOMG") >= 1 and count(v54, "ATOMG") == 0
    assert count(v55, "STL") == count(v55, "LDL") == 0


BITWISE_CASES = [
    (MlaDecodeProblem(b=5, s_q=1, h_q=16, seqlens=(0, 17, 1000, 4097, 64), page_size=64), dict(chunk=3)),
    (MlaDecodeProblem(b=5, s_q=1, h_q=16, seqlens=(0, 17, 1000, 4097, 64), page_size=16), dict(chunk=2)),
    (MlaDecodeProblem(b=4, s_q=2, h_q=64, seqlens=(64, 65, 3000, 5), page_size=64), dict(chunk=2)),
    (MlaDecodeProblem(b=3, s_q=2, h_q=128, seqlens=(1, 700, 2049), page_size=64), dict(chunk=3)),
    (MlaDecodeProblem(b=6, s_q=1, h_q=128, seqlen=777, page_size=64), dict(chunk=4, order="grid")),
]
BITWISE_CTAS = (1, 3)
CHECK_PROBLEMS = [MlaDecodeProblem(b=16, s_q=2, h_q=128, seqlen=900, varlen=True),
                  MlaDecodeProblem(b=40, s_q=1, h_q=128, seqlen=600, varlen=True)]
GRAPH_FIELDS = dict(page_size=64, h_q=64, persistent_ctas=3, item_fetch="counter", multicast_kv=False)


def bitwise_tiling(problem, fields, ctas):
    plan = registry.get_plan(V55)
    return dataclasses.replace(plan.default_tiling(problem), persistent_ctas=ctas, multicast_kv=False,
                               item_fetch="counter", **fields)


def planted_tiling(page_size):
    plan = registry.get_plan(V55)
    return dataclasses.replace(plan.default_tiling(planted_keys_problem(page_size)), chunk=4, persistent_ctas=2,
                               multicast_kv=False, item_fetch="counter")


def aot_builds():
    """Every build of this file's GPU tests, for scripts/aot_test_builds.py."""
    for problem, fields in BITWISE_CASES:
        for ctas in BITWISE_CTAS:
            tiling = bitwise_tiling(problem, fields, ctas)
            yield V55, problem, tiling
            yield V46, problem, tiling_without(registry.get_plan(V46), tiling, KNOBS)
    for problem in CHECK_PROBLEMS:
        yield V55, problem, None
    for page_size in (64, 16):
        yield V55, planted_keys_problem(page_size), planted_tiling(page_size)
    yield V55, *graph_replay_build(V55, **GRAPH_FIELDS)


@pytest.mark.gpu
@pytest.mark.parametrize("problem, fields", BITWISE_CASES, ids=[p.key() for p, _ in BITWISE_CASES])
@pytest.mark.parametrize("ctas", BITWISE_CTAS)
def test_columns_taking_items_from_the_counter_equal_v46_bit_for_bit(problem, fields, ctas):
    """The check (seeds 0 and 1, the peaked draw: several calls on one workspace, so the counter
    must return to zero after each), then v46 at the same tiling bit for bit."""
    assert_reference_and_bitwise(V55, problem, bitwise_tiling(problem, fields, ctas), KNOBS, base=V46)


@pytest.mark.gpu
@pytest.mark.parametrize("problem", CHECK_PROBLEMS, ids=lambda p: p.key())
def test_default_tiling_passes_the_check(problem):
    plan = runnable_plan(V55)
    assert_check_passes(plan, problem, seeds=(0, 1), extra_seeds=(0,))


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [64, 16])
def test_planted_keys_with_items_from_the_counter(page_size):
    check_with_planted_keys(runnable_plan(V55), planted_tiling(page_size), page_size=page_size)


@pytest.mark.gpu
def test_cuda_graph_replay_with_new_lengths():
    from version_knob import assert_graph_replay_with_new_lengths
    assert_graph_replay_with_new_lengths(V55, **GRAPH_FIELDS)
