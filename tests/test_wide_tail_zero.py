"""flash_mla_decode_v46's wide_tail_zero: the knob's default and validation; the split kernel's
compiled code (the two element loops that clear a partial last tile's rows, one 2-byte STS each,
become 16 STS.128 sites, one per value chunk per warpgroup; wide_tail_zero=False builds v44's
kernel); the unswizzled view's layout (a row's 128 bytes at slot * 8192 + row * 128, which the
128-byte swizzle leaves in place); on the H200, v46 against the reference and bit for bit against
v36 on batches with partial last tiles of 1..63 rows, and under a CUDA graph replayed with new
lengths."""
import dataclasses

import pytest

from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry
from version_knob import (KNOB_CASES, assert_bool_knob_on_by_default, assert_graph_replay_with_new_lengths,
                          assert_reference_and_bitwise)

V46, V44 = "flash_mla_decode_v46", "flash_mla_decode_v44"

# tails of 1, 2, 63 and 33 rows (and one full tile), at one and two row blocks, with splits
TAIL_CASES = [
    MlaDecodeProblem(b=4, s_q=1, h_q=16, seqlens=(1, 130, 4095, 64 * 5 + 33), page_size=64),
    MlaDecodeProblem(b=3, s_q=2, h_q=64, seqlens=(127, 2, 1000), page_size=64),
]


def _plan(name=V46):
    return registry.get_plan(name)


def test_wide_tail_zero_is_on_by_default_and_a_bool():
    p = MlaDecodeProblem(b=128, s_q=1, h_q=128, seqlen=4096, varlen=True)
    assert_bool_knob_on_by_default(V46, "wide_tail_zero", p)


def test_flat_view_covers_the_swizzled_chunk_rows_exactly():
    """The split kernel's K ring layout (make_smem_layout_b, K-major, 128-byte swizzle, 18 chunk
    slots): for every slot, row and column, the byte the swizzled view addresses lies in the
    128-byte row that tail_rows.flat_chunks gives that (slot, row), so zeroing whole rows through the
    flat view clears exactly the swizzled rows. The swizzle acts on byte addresses (the hardware's
    128-byte TMA swizzle): bits 4-6 ^= bits 7-9."""
    pytest.importorskip("cutlass")
    import cutlass
    import cutlass.cute as cute
    import cutlass.utils.hopper_helpers as sm90_utils
    from cutlass.tensor_utils import LayoutEnum

    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v46 import tail_rows
    got = {}

    @cute.jit
    def probe():
        sk = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (64, 64, 64), cutlass.BFloat16, 18)
        flat = cute.make_layout((18, 64, 64), stride=(64 * 64, 64, 1))      # flat_chunks' layout
        got["swizzle"] = str(sk.inner)
        for s in (0, 8, 9, 17):
            for r in (0, 1, 7, 8, 33, 63):
                for c in (0, 7, 8, 40, 63):
                    got[(s, r, c)] = (cute.crd2idx((r, c, s), sk.outer), cute.crd2idx((s, r, c), flat))
    probe()
    assert got.pop("swizzle") == "S<3,4,3>"
    for (s, r, c), (elem, flat_elem) in got.items():
        byte = 2 * elem
        swizzled = byte ^ (((byte >> 7) & 7) << 4)
        assert swizzled // 128 == (2 * flat_elem) // 128 == (s * 8192 + r * 128) // 128, (s, r, c)
    assert tail_rows.VEC * 2 == 16                       # one 16-byte unit per store


def test_wide_tail_zero_sass():
    pytest.importorskip("cutlass")
    import compiled_sass as cs
    p = cs.small_decode(64, varlen=True)
    plan = _plan()
    on = cs.split_opcode_counts(V46, p)
    off = cs.split_opcode_counts(V46, p, tiling=dataclasses.replace(plan.default_tiling(p), wide_tail_zero=False))
    v44 = cs.split_opcode_counts(V44, p)
    assert off == v44                                               # off: v44's kernel
    assert on["STS.128"] == off["STS.128"] + 16                     # 8 value chunks x the two warpgroups' sites
    assert off["STS.U16"] == 2 and on["STS.U16"] == 0               # the element stores are gone
    assert cs.count(on, "HGMMA") == cs.count(off, "HGMMA") and cs.count(on, "UTMALDG") == cs.count(off, "UTMALDG")


@pytest.mark.gpu
@pytest.mark.parametrize("problem", TAIL_CASES + KNOB_CASES, ids=[p.key() for p in TAIL_CASES + KNOB_CASES])
def test_wide_tail_zero_matches_reference_and_v36_bit_for_bit(problem):
    plan = _plan()
    t = plan.default_tiling(problem)
    assert t.wide_tail_zero
    assert_reference_and_bitwise(V46, problem, t, ("full_tile_issue", "wide_tail_zero"))


@pytest.mark.gpu
def test_wide_tail_zero_cuda_graph_replay_with_new_lengths():
    assert_graph_replay_with_new_lengths(V46)
