"""flash_mla_decode_v45's pair_full_tile_issue: the knob's default and validation; the split
kernel's compiled code (with a multicast row-block pair at page 16, two more unpredicated copies of
the pair's refill, one per cluster rank, so more UTMALDG sites; pair_full_tile_issue=False and the
one-row-block shapes build v44's kernel); on the H200, v45 against the reference and bit for bit
against v36 (the same boxes), and a multicast pair under a CUDA graph replayed with new lengths."""
import dataclasses

import pytest

from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry
from version_knob import (KNOB_CASES, assert_bool_knob_on_by_default, assert_graph_replay_with_new_lengths,
                          assert_reference_and_bitwise)

V45, V44 = "flash_mla_decode_v45", "flash_mla_decode_v44"
PAIR_16 = MlaDecodeProblem(b=2, s_q=1, h_q=128, seqlen=1024, page_size=16)     # two row blocks: a multicast pair


def _plan(name=V45):
    return registry.get_plan(name)


def test_pair_full_tile_issue_is_on_by_default_and_a_bool():
    t = assert_bool_knob_on_by_default(V45, "pair_full_tile_issue", PAIR_16)
    assert t.cluster_rows == 2 and t.multicast_kv is True
    plan = _plan()
    one_block = MlaDecodeProblem(b=2, s_q=1, h_q=16, seqlen=1024, page_size=16)
    assert {c.pair_full_tile_issue for c in plan.autotune_configs(one_block)} == {True}    # no pair: no trial


def test_pair_full_tile_issue_sass():
    pytest.importorskip("cutlass")
    import compiled_sass as cs
    on = cs.split_opcode_counts(V45, PAIR_16)
    off = cs.split_opcode_counts(V45, PAIR_16, tiling=dataclasses.replace(_plan().default_tiling(PAIR_16),
                                                                         pair_full_tile_issue=False))
    assert off == cs.split_opcode_counts(V44, PAIR_16)                  # off: v44's kernel
    assert cs.count(on, "UTMALDG") > cs.count(off, "UTMALDG")           # the unpredicated copies, one per rank
    assert cs.count(on, "HGMMA") == cs.count(off, "HGMMA")
    one_block = cs.small_decode(16)                                     # one row block: no pair, v44's kernel
    assert cs.split_opcode_counts(V45, one_block) == cs.split_opcode_counts(V44, one_block)


@pytest.mark.gpu
@pytest.mark.parametrize("problem", KNOB_CASES, ids=[p.key() for p in KNOB_CASES])
def test_pair_full_tile_issue_matches_reference_and_v36_bit_for_bit(problem):
    plan = _plan()
    t = plan.default_tiling(problem)
    assert t.pair_full_tile_issue
    assert_reference_and_bitwise(V45, problem, t, ("full_tile_issue", "pair_full_tile_issue"))


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [16, 32])
def test_pair_full_tile_issue_cuda_graph_replay_with_new_lengths(page_size):
    assert_graph_replay_with_new_lengths(V45, page_size=page_size, h_q=64)
