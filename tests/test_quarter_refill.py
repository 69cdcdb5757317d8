"""flash_mla_decode_v39's refill_warps=4: where it is the default and where it is refused; the split
kernel's compiled code (page 16: one loop of quarter refills instead of v36's two per-stage paths;
page 64: v36's kernel, unchanged); on the H200, v39 against the reference and bit for bit against
v36 (the same loads and math, issued by other warps), and under a CUDA graph replayed with new
lengths."""
import dataclasses

import pytest

from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry
from version_knob import assert_graph_replay_with_new_lengths, assert_reference_and_bitwise

V39, V36 = "flash_mla_decode_v39", "flash_mla_decode_v36"


def _plan(name=V39):
    return registry.get_plan(name)


@pytest.mark.parametrize("s_q,h_q,page,want", [
    (1, 16, 16, 4), (4, 16, 32, 4), (1, 64, 16, 4),      # one 64-row block: the CTA loads alone
    (1, 128, 16, 2), (4, 32, 32, 2),                     # a multicast pair: v36's two warps per stage
    (1, 16, 64, 1), (1, 128, 64, 1),                     # page 64: one warp per stage
])
def test_default_refill_warps(s_q, h_q, page, want):
    t = _plan().default_tiling(MlaDecodeProblem(b=128, s_q=s_q, h_q=h_q, seqlen=4096, page_size=page))
    assert t.refill_warps == want


def test_four_warps_are_refused_for_a_multicast_pair():
    plan = _plan()
    p = MlaDecodeProblem(b=4, s_q=1, h_q=128, seqlen=1024, page_size=16)
    bad = dataclasses.replace(plan.default_tiling(p), refill_warps=4)
    with pytest.raises(PlanError, match="refill_warps=4 .* not with cluster_rows=2 and multicast_kv=True"):
        plan.check_tiling(bad, p, None)
    plan.check_tiling(dataclasses.replace(bad, multicast_kv=False), p, None)      # co-scheduled: fine
    assert all(not (c.refill_warps == 4 and c.cluster_rows > 1 and c.multicast_kv)
               for c in plan.autotune_configs(p))


def test_quarter_refill_sass():
    pytest.importorskip("cutlass")
    import compiled_sass as cs
    p16, p64 = cs.small_decode(16), cs.small_decode(64)       # h_q=64 s_q=1: one row block
    v39, v36 = cs.split_opcode_counts(V39, p16), cs.split_opcode_counts(V36, p16)
    # Q's 9 boxes + one refill loop whose four quarter branches hold a tile's 36 boxes, against
    # v36's 9 + two copies (first tiles, refill loop) of both halves
    assert cs.count(v39, "UTMALDG") == 9 + 36 and cs.count(v36, "UTMALDG") == 9 + 2 * 36
    assert cs.count(v39, "HGMMA") == cs.count(v36, "HGMMA")
    assert cs.split_opcode_counts(V39, p64) == cs.split_opcode_counts(V36, p64)    # page 64: v36's kernel


GPU_CASES = [
    MlaDecodeProblem(b=5, s_q=1, h_q=16, seqlens=(0, 17, 1000, 4097, 64), page_size=16),
    MlaDecodeProblem(b=9, s_q=4, h_q=16, seqlen=2000, varlen=True, page_size=32),
    MlaDecodeProblem(b=3, s_q=1, h_q=64, seqlens=(1, 130, 2049), page_size=16),
]


@pytest.mark.gpu
@pytest.mark.parametrize("problem", GPU_CASES, ids=[p.key() for p in GPU_CASES])
def test_quarter_refill_matches_reference_and_v36_bit_for_bit(problem):
    t = _plan().default_tiling(problem)
    assert t.refill_warps == 4
    assert_reference_and_bitwise(V39, problem, t, base_fields={"refill_warps": 2})


@pytest.mark.gpu
def test_quarter_refill_cuda_graph_replay_with_new_lengths():
    assert_graph_replay_with_new_lengths(V39)
