"""flash_mla_decode_v44's full_tile_issue: the knob's default and validation; the split kernel's
compiled code (at page 16 a second, unpredicated copy of the refill for tiles whose pages all hold
keys, so more UTMALDG sites; page 64, one page per tile, compiles to v36's kernel;
full_tile_issue=False builds v36's kernel); on the H200, v44 against the reference and bit for bit
against v36 (the same boxes), with a multicast pair, and under a CUDA graph replayed with new
lengths."""
import dataclasses

import pytest

from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry
from version_knob import (KNOB_CASES, assert_bool_knob_on_by_default, assert_graph_replay_with_new_lengths,
                          assert_reference_and_bitwise)

V44, V36 = "flash_mla_decode_v44", "flash_mla_decode_v36"


def _plan(name=V44):
    return registry.get_plan(name)


def test_full_tile_issue_is_on_by_default_and_a_bool():
    p = MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=4096, page_size=16)
    assert_bool_knob_on_by_default(V44, "full_tile_issue", p)


def test_full_tile_issue_sass():
    pytest.importorskip("cutlass")
    import compiled_sass as cs
    p16, p64 = cs.small_decode(16), cs.small_decode(64)
    on = cs.split_opcode_counts(V44, p16)
    off = cs.split_opcode_counts(V44, p16, tiling=dataclasses.replace(_plan().default_tiling(p16), full_tile_issue=False))
    assert off == cs.split_opcode_counts(V36, p16)                      # off: v36's kernel
    assert cs.count(on, "UTMALDG") > cs.count(off, "UTMALDG")           # the unpredicated copy of the refill
    assert cs.count(on, "HGMMA") == cs.count(off, "HGMMA")
    assert cs.split_opcode_counts(V44, p64) == cs.split_opcode_counts(V36, p64)    # one page per tile: v36


@pytest.mark.gpu
@pytest.mark.parametrize("problem", KNOB_CASES, ids=[p.key() for p in KNOB_CASES])
def test_full_tile_issue_matches_reference_and_v36_bit_for_bit(problem):
    plan = _plan()
    t = plan.default_tiling(problem)
    assert t.full_tile_issue
    assert_reference_and_bitwise(V44, problem, t, "full_tile_issue")


@pytest.mark.gpu
def test_full_tile_issue_cuda_graph_replay_with_new_lengths():
    assert_graph_replay_with_new_lengths(V44)
