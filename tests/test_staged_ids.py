"""flash_mla_decode_v43's staged_ids: the knob's default and validation; the split kernel's compiled
code (the K/V boxes are 2-D tensor copies over the cache's rows, Q's stay 3-D; staged_ids=False
builds v36's kernel); on the H200, v42 against the reference and bit for bit against v36 (the same
boxes from a different tensor map), with a multicast pair, and under a CUDA graph replayed with new
lengths."""
import dataclasses

import pytest

from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry
from version_knob import (KNOB_CASES, assert_bool_knob_on_by_default, assert_graph_replay_with_new_lengths,
                          assert_reference_and_bitwise)

V43, V36 = "flash_mla_decode_v43", "flash_mla_decode_v36"


def _plan(name=V43):
    return registry.get_plan(name)


def test_staged_ids_is_on_by_default_and_a_bool():
    p = MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=4096, page_size=16)
    assert_bool_knob_on_by_default(V43, "staged_ids", p)


@pytest.mark.parametrize("page, pages_per_tile", [(16, 4), (64, 1)])
def test_staged_ids_sass(page, pages_per_tile):
    pytest.importorskip("cutlass")
    import compiled_sass as cs
    p = cs.small_decode(page)
    on = cs.split_opcode_counts(V43, p)
    off = cs.split_opcode_counts(V43, p, tiling=dataclasses.replace(_plan().default_tiling(p), staged_ids=False))
    # one 4-byte cp.async per page of the next tile, after the first tiles and in the refill loop
    assert on["LDGSTS.E"] == 2 * pages_per_tile and cs.count(off, "LDGSTS") == 0
    assert cs.count(on, "LDGDEPBAR") == 2
    assert off == cs.split_opcode_counts(V36, p)                        # off: v36's kernel
    for op in ("HGMMA", "SYNCS", "UTMALDG"):
        assert cs.count(on, op) == cs.count(off, op)


@pytest.mark.gpu
@pytest.mark.parametrize("problem", KNOB_CASES, ids=[p.key() for p in KNOB_CASES])
def test_staged_ids_matches_reference_and_v36_bit_for_bit(problem):
    plan = _plan()
    t = plan.default_tiling(problem)
    assert t.staged_ids
    assert_reference_and_bitwise(V43, problem, t, "staged_ids")


@pytest.mark.gpu
def test_staged_ids_cuda_graph_replay_with_new_lengths():
    assert_graph_replay_with_new_lengths(V43)
