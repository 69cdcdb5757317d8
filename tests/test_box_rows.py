"""flash_mla_decode_v41's box_rows (a diagnostic): which values a tiling may take; the split
kernel's compiled code (page 64 in 16-row boxes issues page 16's 81 UTMALDG, in 32-row boxes 45;
box_rows=0 is v36's kernel); on the H200, v41 in smaller boxes against the reference and bit for
bit against v36 (the same bytes land in the same shared memory), and under a CUDA graph replayed
with new lengths."""
import dataclasses

import pytest

from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry
from version_knob import assert_graph_replay_with_new_lengths, assert_reference_and_bitwise

V41, V36 = "flash_mla_decode_v41", "flash_mla_decode_v36"


def _plan(name=V41):
    return registry.get_plan(name)


def test_box_rows_default_and_refusals():
    plan = _plan()
    p64 = MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=4096)
    t = plan.default_tiling(p64)
    assert t.box_rows == 0 and all(c.box_rows == 0 for c in plan.autotune_configs(p64))
    for rows in (16, 32, 64):
        plan.check_tiling(dataclasses.replace(t, box_rows=rows), p64, None)
    with pytest.raises(PlanError, match=r"box_rows must be one of 0, 16, 32, 64 .* got 8"):
        plan.check_tiling(dataclasses.replace(t, box_rows=8), p64, None)
    p16 = MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=4096, page_size=16)
    with pytest.raises(PlanError, match=r"box_rows=32 must divide the page size 16"):
        plan.check_tiling(dataclasses.replace(plan.default_tiling(p16), box_rows=32), p16, None)
    pair = MlaDecodeProblem(b=4, s_q=1, h_q=128, seqlen=1024, page_size=32)
    tp = plan.default_tiling(pair)
    assert tp.cluster_rows == 2 and tp.multicast_kv
    with pytest.raises(PlanError, match=r"box_rows=16 \(smaller than a page\) needs CTAs that load their own tiles"):
        plan.check_tiling(dataclasses.replace(tp, box_rows=16), pair, None)
    plan.check_tiling(dataclasses.replace(tp, box_rows=32), pair, None)           # a whole page: v36's boxes


def test_box_rows_sass():
    pytest.importorskip("cutlass")
    import compiled_sass as cs
    p64, p16 = cs.small_decode(64), cs.small_decode(16)
    base = _plan().default_tiling(p64)
    counts = {rows: cs.split_opcode_counts(V41, p64, tiling=dataclasses.replace(base, box_rows=rows, refill_warps=2))
              for rows in (16, 32)}
    v36_p16 = cs.split_opcode_counts(V36, p16)
    assert cs.count(counts[16], "UTMALDG") == cs.count(v36_p16, "UTMALDG") == 9 + 2 * 36     # Q + two copies of a tile
    assert cs.count(counts[32], "UTMALDG") == 9 + 2 * 18
    assert cs.count(counts[16], "HGMMA") == cs.count(v36_p16, "HGMMA")
    assert cs.split_opcode_counts(V41, p64) == cs.split_opcode_counts(V36, p64)            # box_rows=0: v36's kernel


GPU_CASES = [
    (MlaDecodeProblem(b=5, s_q=1, h_q=16, seqlens=(0, 17, 1000, 4097, 64)), 16),
    (MlaDecodeProblem(b=9, s_q=4, h_q=16, seqlen=2000, varlen=True), 32),
    (MlaDecodeProblem(b=3, s_q=1, h_q=64, seqlens=(1, 130, 2049), page_size=32), 16),
]


@pytest.mark.gpu
@pytest.mark.parametrize("problem, rows", GPU_CASES, ids=[f"{p.key()}-box{r}" for p, r in GPU_CASES])
def test_smaller_boxes_match_reference_and_v36_bit_for_bit(problem, rows):
    t = dataclasses.replace(_plan().default_tiling(problem), box_rows=rows, refill_warps=2)
    assert_reference_and_bitwise(V41, problem, t, "box_rows")


@pytest.mark.gpu
def test_smaller_boxes_cuda_graph_replay_with_new_lengths():
    assert_graph_replay_with_new_lengths(V41, page_size=64, box_rows=16)
