"""flash_mla_decode_v54: v46's split items run by persistent CTAs (`persistent_ctas`) that load the
next item's Q under the current item's epilogue. CPU: the default per shape and page size (one wave
of CTAs; 0 where the row blocks multicast), the refusals, the compiled code (v46's wgmma and waits,
no spills); on the H200: the check and bit for bit equal to v46 with few CTAs walking many items
(empty sequences, several splits per sequence, pages 16 and 64, one, two and four row blocks), the
check with the default tiling, planted keys that move the max, and a CUDA graph replayed with new
lengths."""
import dataclasses

import pytest
from compiled_sass import count, split_opcode_counts
from gpu_helpers import assert_check_passes, check_with_planted_keys, planted_keys_problem, runnable_plan
from version_knob import assert_reference_and_bitwise, graph_replay_build, tiling_without

from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry, sass

V54, V46 = "flash_mla_decode_v54", "flash_mla_decode_v46"
HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


@pytest.mark.parametrize("s_q, h_q, page, seqlen, varlen, ctas", [
    (1, 128, 64, 1024, False, 66),      # two row blocks, ~2 items per column: the model gains
    (2, 128, 64, 4096, False, 33),      # four row blocks side by side in 33 columns
    (1, 16, 64, 1024, False, 0),        # one item per SM: nothing to hide, v46's grid
    (1, 16, 64, 4096, True, 132),
    (1, 128, 64, 8192, True, 0),        # long ragged batch: the hardware's greedy hand-out wins
    (2, 64, 16, 1024, False, 0)])       # a multicast pair
def test_default_where_the_makespan_model_gains(s_q, h_q, page, seqlen, varlen, ctas):
    plan = registry.get_plan(V54)
    problem = MlaDecodeProblem(b=128, s_q=s_q, h_q=h_q, seqlen=seqlen, varlen=varlen, page_size=page)
    t = plan.default_tiling(problem)
    assert t.persistent_ctas == ctas
    configs = plan.autotune_configs(problem)
    assert all(plan.Tiling.validate(c, problem, None) == [] for c in configs)
    assert {bool(c.persistent_ctas) for c in configs} == {True, False}


def test_persistent_makespan_deals_in_snake_order():
    """Items 10, 8, 6, 4, 2 (chunk 10) on 2 columns: round 0 gives 10 / 8, round 1 (back) 4 / 6,
    round 2 gives 2 to column 0; each column pays the fixed 6 once and 4 per further item."""
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v54.flash_mla_decode_v54 import (
        persistent_makespan)
    assert persistent_makespan([10, 8, 6, 4, 2], 10, 2) == max(6 + 10 + 4 + 4 + 4 + 2, 6 + 8 + 4 + 6)


def test_persistent_ctas_refusals():
    plan = registry.get_plan(V54)
    problem = MlaDecodeProblem(b=4, s_q=2, h_q=64, seqlen=1000, page_size=16)
    t = plan.default_tiling(problem)                    # a multicast pair: v46's grid
    with pytest.raises(PlanError, match="persistent_ctas > 0 needs multicast_kv=False"):
        plan.check_tiling(dataclasses.replace(t, persistent_ctas=66), problem, None)
    for bad in (-1, "66", 1.5):
        with pytest.raises(PlanError, match="persistent_ctas must be an int >= 0"):
            plan.check_tiling(dataclasses.replace(t, persistent_ctas=bad), problem, None)


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
@pytest.mark.parametrize("problem", [MlaDecodeProblem(b=128, s_q=2, h_q=128, seqlen=4096, varlen=True),
                                     MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=4096, varlen=True)],
                         ids=lambda p: p.key())
def test_the_item_loop_keeps_v46s_wgmma_and_waits(problem):
    """The same 104 HGMMA and batched `WARPGROUP.DEPBAR` as v46 (no wgmma serialized by the new
    loop), the Q box and one tile's boxes issued from one place (v46 issues the first tiles apart:
    27), nothing spilled; four named-barrier syncs more than v46 in the code (stage 0's deferred
    release, the f32 partial staged in two halves, the end of a keyless item's epilogue), not five
    (the second half's reads end at the release's barrier)."""
    t = registry.get_plan(V54).default_tiling(problem)
    assert t.persistent_ctas > 0
    v54, v46 = split_opcode_counts(V54, problem), split_opcode_counts(V46, problem)
    assert count(v54, "HGMMA") == count(v46, "HGMMA") == 104
    assert count(v54, "WARPGROUP.DEPBAR") == count(v46, "WARPGROUP.DEPBAR")
    assert (count(v54, "UTMALDG"), count(v46, "UTMALDG")) == (18, 27)
    assert count(v54, "BAR.SYNC") == count(v46, "BAR.SYNC") + 4
    assert count(v54, "STL") == count(v54, "LDL") == 0


# few CTAs walking many items: empty and one-key sequences, several splits per sequence (chunk 2
# or 3), a tail tile, and the item order of the longest-first kernel and of the grid
BITWISE_CASES = [
    (MlaDecodeProblem(b=5, s_q=1, h_q=16, seqlens=(0, 17, 1000, 4097, 64), page_size=64), dict(chunk=3)),
    (MlaDecodeProblem(b=5, s_q=1, h_q=16, seqlens=(0, 17, 1000, 4097, 64), page_size=16), dict(chunk=2)),
    (MlaDecodeProblem(b=4, s_q=2, h_q=64, seqlens=(64, 65, 3000, 5), page_size=64), dict(chunk=2)),
    (MlaDecodeProblem(b=3, s_q=2, h_q=128, seqlens=(1, 700, 2049), page_size=64), dict(chunk=3)),
    (MlaDecodeProblem(b=6, s_q=1, h_q=128, seqlen=777, page_size=64), dict(chunk=4, order="grid")),
]


BITWISE_CTAS = (1, 3)
CHECK_PROBLEMS = [MlaDecodeProblem(b=16, s_q=2, h_q=128, seqlen=900, varlen=True),
                  MlaDecodeProblem(b=40, s_q=1, h_q=16, seqlen=600, varlen=True)]
GRAPH_FIELDS = dict(page_size=64, h_q=64, persistent_ctas=3)


def bitwise_tilings(problem, fields, ctas):
    """(v54's tiling, v46's same tiling without persistent_ctas) of one bit-for-bit case."""
    plan, base = registry.get_plan(V54), registry.get_plan(V46)
    tiling = dataclasses.replace(plan.default_tiling(problem), persistent_ctas=ctas, multicast_kv=False, **fields)
    return tiling, tiling_without(base, tiling, "persistent_ctas")


def planted_tiling(page_size):
    plan = registry.get_plan(V54)
    return dataclasses.replace(plan.default_tiling(planted_keys_problem(page_size)), chunk=4, persistent_ctas=2,
                               multicast_kv=False)


def aot_builds():
    """(version, problem, tiling or None for the default) of every build this file's GPU tests
    make, for scripts/aot_test_builds.py: compiled here into the AOT cache, the device only runs."""
    for problem, fields in BITWISE_CASES:
        for ctas in BITWISE_CTAS:
            tiling, base_tiling = bitwise_tilings(problem, fields, ctas)
            yield V54, problem, tiling
            yield V46, problem, base_tiling
    for problem in CHECK_PROBLEMS:
        yield V54, problem, None
    for page_size in (64, 16):
        yield V54, planted_keys_problem(page_size), planted_tiling(page_size)
    yield V54, *graph_replay_build(V54, **GRAPH_FIELDS)


@pytest.mark.gpu
@pytest.mark.parametrize("problem, fields", BITWISE_CASES, ids=[p.key() for p, _ in BITWISE_CASES])
@pytest.mark.parametrize("ctas", BITWISE_CTAS)
def test_few_ctas_walking_many_items_equal_v46_bit_for_bit(problem, fields, ctas):
    """The check (seeds 0 and 1, the peaked draw), then v46 at the same tiling bit for bit (the
    base tiling the helper derives is bitwise_tilings' second, the build aot_builds lists)."""
    tiling, _ = bitwise_tilings(problem, fields, ctas)
    assert_reference_and_bitwise(V54, problem, tiling, "persistent_ctas", base=V46)


@pytest.mark.gpu
@pytest.mark.parametrize("problem", CHECK_PROBLEMS, ids=lambda p: p.key())
def test_default_tiling_passes_the_check(problem):
    plan = runnable_plan(V54)
    assert_check_passes(plan, problem, seeds=(0, 1), extra_seeds=(0,))


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [64, 16])
def test_planted_keys_with_items_walked_in_turn(page_size):
    check_with_planted_keys(runnable_plan(V54), planted_tiling(page_size), page_size=page_size)


@pytest.mark.gpu
def test_cuda_graph_replay_with_new_lengths():
    from version_knob import assert_graph_replay_with_new_lengths
    assert_graph_replay_with_new_lengths(V54, **GRAPH_FIELDS)
