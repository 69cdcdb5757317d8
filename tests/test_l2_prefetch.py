"""flash_mla_decode_v40's l2_prefetch: the knob's default and validation; the split kernel's
compiled code (one `UBLKPF.L2` per page of a stage's next tile, where the producer reads its ids:
after the first tiles and in the refill loop; l2_prefetch=False builds v36's kernel); on the H200,
v40 against the reference and bit for bit against v36 (a prefetch moves bytes into L2, not into any
result), with a multicast pair, and under a CUDA graph replayed with new lengths."""
import dataclasses

import pytest

from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry
from version_knob import (KNOB_CASES, assert_bool_knob_on_by_default, assert_graph_replay_with_new_lengths,
                          assert_reference_and_bitwise)

V40, V36 = "flash_mla_decode_v40", "flash_mla_decode_v36"


def _plan(name=V40):
    return registry.get_plan(name)


def test_prefetch_is_on_by_default_and_a_bool():
    p = MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=4096, page_size=16)
    assert_bool_knob_on_by_default(V40, "l2_prefetch", p)


@pytest.mark.parametrize("page, pages_per_tile", [(16, 4), (64, 1)])
def test_prefetch_sass(page, pages_per_tile):
    pytest.importorskip("cutlass")
    import compiled_sass as cs
    p = cs.small_decode(page)
    on = cs.split_opcode_counts(V40, p)
    off = cs.split_opcode_counts(V40, p, tiling=dataclasses.replace(_plan().default_tiling(p), l2_prefetch=False))
    # a stage's next tile is prefetched after the first tiles and in the refill loop: one page each
    assert cs.count(on, "UBLKPF") == 2 * pages_per_tile
    assert cs.count(off, "UBLKPF") == 0
    assert off == cs.split_opcode_counts(V36, p)                        # off: v36's kernel
    for op in ("UTMALDG", "HGMMA", "SYNCS"):
        assert cs.count(on, op) == cs.count(off, op)


@pytest.mark.gpu
@pytest.mark.parametrize("problem", KNOB_CASES, ids=[p.key() for p in KNOB_CASES])
def test_l2_prefetch_matches_reference_and_v36_bit_for_bit(problem):
    plan = _plan()
    t = plan.default_tiling(problem)
    assert t.l2_prefetch
    assert_reference_and_bitwise(V40, problem, t, "l2_prefetch")


@pytest.mark.gpu
def test_l2_prefetch_cuda_graph_replay_with_new_lengths():
    assert_graph_replay_with_new_lengths(V40)
