"""flash_mla_decode_v42's flat_cache: the knob's default and validation; the split kernel's compiled
code (the K/V boxes are 2-D tensor copies over the cache's rows, Q's stay 3-D; flat_cache=False
builds v36's kernel); on the H200, v42 against the reference and bit for bit against v36 (the same
boxes from a different tensor map), with a multicast pair, and under a CUDA graph replayed with new
lengths."""
import dataclasses

import pytest

from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry
from version_knob import (KNOB_CASES, assert_bool_knob_on_by_default, assert_graph_replay_with_new_lengths,
                          assert_reference_and_bitwise)

V42, V36 = "flash_mla_decode_v42", "flash_mla_decode_v36"


def _plan(name=V42):
    return registry.get_plan(name)


def test_flat_cache_is_on_by_default_and_a_bool():
    p = MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=4096, page_size=16)
    assert_bool_knob_on_by_default(V42, "flat_cache", p)


@pytest.mark.parametrize("page, pages_per_tile", [(16, 4), (64, 1)])
def test_flat_cache_sass(page, pages_per_tile):
    pytest.importorskip("cutlass")
    import compiled_sass as cs
    p = cs.small_decode(page)
    on = cs.split_opcode_counts(V42, p)
    off = cs.split_opcode_counts(V42, p, tiling=dataclasses.replace(_plan().default_tiling(p), flat_cache=False))
    # Q's 9 boxes stay 3-D; the K/V boxes (two copies of a tile: first tiles, refill loop) become 2-D
    assert on["UTMALDG.2D"] == 2 * 9 * pages_per_tile and on["UTMALDG.3D"] == 9
    assert off["UTMALDG.2D"] == 0 and off["UTMALDG.3D"] == 9 + 2 * 9 * pages_per_tile
    assert off == cs.split_opcode_counts(V36, p)                        # off: v36's kernel
    for op in ("HGMMA", "SYNCS", "LDG"):
        assert cs.count(on, op) == cs.count(off, op)


@pytest.mark.gpu
@pytest.mark.parametrize("problem", KNOB_CASES, ids=[p.key() for p in KNOB_CASES])
def test_flat_cache_matches_reference_and_v36_bit_for_bit(problem):
    plan = _plan()
    t = plan.default_tiling(problem)
    assert t.flat_cache
    assert_reference_and_bitwise(V42, problem, t, "flat_cache")


@pytest.mark.gpu
def test_flat_cache_cuda_graph_replay_with_new_lengths():
    assert_graph_replay_with_new_lengths(V42)
