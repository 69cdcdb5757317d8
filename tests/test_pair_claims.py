"""flash_mla_decode_v56: v55's counter claims taken by row-block pairs (`item_fetch="pair"`: a
cluster's rank 0 claims each place and stores it into both CTAs' rings). CPU: the default, the
refusals, the compiled code (v55's wgmma, waits and barriers, the claim's atomic, the store into
the peer's ring and the remote arrivals, no spills); on the H200: the check and bit for bit equal to
v46 with 1 and 3 columns taking many items (empty sequences, several splits per sequence, pages 16
and 64, one row block (v55's counter), two and four (pairs), both orders), the check at the
default tiling, planted keys, and a CUDA graph replayed with new lengths (the counter must be back
at zero after every call)."""
import dataclasses

import pytest
from compiled_sass import count, split_opcode_counts
from gpu_helpers import assert_check_passes, check_with_planted_keys, planted_keys_problem, runnable_plan
from version_knob import assert_reference_and_bitwise, graph_replay_build, tiling_without

from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry, sass

V56, V55, V46 = "flash_mla_decode_v56", "flash_mla_decode_v55", "flash_mla_decode_v46"
KNOBS = ("persistent_ctas", "item_fetch")     # v56's fields past v46's (the bit-for-bit base)
HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


@pytest.mark.parametrize("s_q, h_q, page, seqlen, varlen, ctas, pairs", [
    (1, 128, 64, 1024, False, 66, True),
    (2, 128, 64, 4096, True, 33, True),
    (1, 128, 64, 8192, True, 66, True),
    (1, 16, 64, 4096, True, 132, False),     # one row block: "pair" is v55's counter
    (1, 16, 64, 1024, False, 0, False),      # one item per SM: nothing to hide
    (2, 64, 16, 1024, False, 0, True)])      # a multicast pair
def test_default_claims_in_pairs(s_q, h_q, page, seqlen, varlen, ctas, pairs):
    plan = registry.get_plan(V56)
    problem = MlaDecodeProblem(b=128, s_q=s_q, h_q=h_q, seqlen=seqlen, varlen=varlen, page_size=page)
    t = plan.default_tiling(problem)
    assert (t.persistent_ctas, t.item_fetch, t.cluster_rows == 2) == (ctas, "pair", pairs)
    configs = plan.autotune_configs(problem)
    assert all(plan.Tiling.validate(c, problem, None) == [] for c in configs)
    if ctas:   # one row block per cluster: "pair" builds "counter"'s kernel, so autotune tries it once
        fetches = [c.item_fetch for c in configs if c.persistent_ctas and c.chunk == t.chunk
                   and dataclasses.replace(c, item_fetch=t.item_fetch) == t]
        assert sorted(fetches) == sorted(["pair", "counter", "snake"] if pairs else ["pair", "snake"])


def test_item_fetch_refusal():
    plan = registry.get_plan(V56)
    problem = MlaDecodeProblem(b=4, s_q=1, h_q=128, seqlen=1000)
    with pytest.raises(PlanError, match="item_fetch must be one of pair, counter, snake"):
        plan.check_tiling(dataclasses.replace(plan.default_tiling(problem), item_fetch="steal"), problem, None)


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
def test_pair_claims_add_a_peer_store_and_no_barrier_to_v55s_code():
    """At s_q=2 h_q=128 4096 varlen (clusters of two row blocks): v55's 104 HGMMA, its
    `WARPGROUP.DEPBAR` and named barriers (the claims use mbarriers; one more `BAR.SYNC 0`, with the
    cluster barrier before the exit), the claim's atomic, the store into rank 1's ring (`STAS`, the
    st.async, absent from v55), one GPU-scope fence (`MEMBAR.ALL.GPU`: the exit's cluster arrive; none
    per item) and no spills."""
    problem = MlaDecodeProblem(b=128, s_q=2, h_q=128, seqlen=4096, varlen=True)
    t = registry.get_plan(V56).default_tiling(problem)
    assert (t.persistent_ctas, t.cluster_rows, t.item_fetch) == (33, 2, "pair")
    v56, v55 = split_opcode_counts(V56, problem), split_opcode_counts(V55, problem)
    assert count(v56, "HGMMA") == count(v55, "HGMMA") == 104
    assert count(v56, "WARPGROUP.DEPBAR") == count(v55, "WARPGROUP.DEPBAR")
    assert count(v56, "BAR.SYNC") == count(v55, "BAR.SYNC") + 1
    assert count(v56, "ATOMG") >= 1
    assert count(v56, "STAS") >= 1 and count(v55, "STAS") == 0
    assert count(v56, "MEMBAR.ALL.GPU") == 1
    assert count(v56, "STL") == count(v56, "LDL") == 0


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
GRAPH_FIELDS = dict(page_size=64, h_q=64, persistent_ctas=3, item_fetch="pair", multicast_kv=False, cluster_rows=2)


def bitwise_tiling(problem, fields, ctas):
    plan = registry.get_plan(V56)
    return dataclasses.replace(plan.default_tiling(problem), persistent_ctas=ctas, multicast_kv=False,
                               item_fetch="pair", **fields)


def planted_tiling(page_size):
    plan = registry.get_plan(V56)
    return dataclasses.replace(plan.default_tiling(planted_keys_problem(page_size)), chunk=4, persistent_ctas=2,
                               multicast_kv=False, item_fetch="pair")


def aot_builds():
    """Every build of this file's GPU tests, for scripts/aot_test_builds.py."""
    for problem, fields in BITWISE_CASES:
        for ctas in BITWISE_CTAS:
            tiling = bitwise_tiling(problem, fields, ctas)
            yield V56, problem, tiling
            yield V46, problem, tiling_without(registry.get_plan(V46), tiling, KNOBS)
    for problem in CHECK_PROBLEMS:
        yield V56, problem, None
    for page_size in (64, 16):
        yield V56, planted_keys_problem(page_size), planted_tiling(page_size)
    yield V56, *graph_replay_build(V56, **GRAPH_FIELDS)


@pytest.mark.gpu
@pytest.mark.parametrize("problem, fields", BITWISE_CASES, ids=[p.key() for p, _ in BITWISE_CASES])
@pytest.mark.parametrize("ctas", BITWISE_CTAS)
def test_columns_claiming_in_pairs_equal_v46_bit_for_bit(problem, fields, ctas):
    """The check (seeds 0 and 1, the peaked draw: several calls on one workspace, so the counter
    must return to zero after each), then v46 at the same tiling bit for bit."""
    assert_reference_and_bitwise(V56, problem, bitwise_tiling(problem, fields, ctas), KNOBS, base=V46)


@pytest.mark.gpu
@pytest.mark.parametrize("problem", CHECK_PROBLEMS, ids=lambda p: p.key())
def test_default_tiling_passes_the_check(problem):
    plan = runnable_plan(V56)
    assert_check_passes(plan, problem, seeds=(0, 1), extra_seeds=(0,))


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [64, 16])
def test_planted_keys_with_pair_claims(page_size):
    check_with_planted_keys(runnable_plan(V56), planted_tiling(page_size), page_size=page_size)


@pytest.mark.gpu
def test_cuda_graph_replay_with_new_lengths():
    from version_knob import assert_graph_replay_with_new_lengths
    assert_graph_replay_with_new_lengths(V56, **GRAPH_FIELDS)
