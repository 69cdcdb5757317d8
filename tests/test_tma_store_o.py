"""flash_mla_decode_v48's tma_store_o: the knob's default and validation; the fragment fact its
chunk copy rests on (a warpgroup's N = 256 P V accumulator is four N = 64 score accumulators side by
side, thread for thread); the split kernel's compiled code (eight UTMASTG, the bf16 staging's
stores and copies gone, tma_store_o=False builds v46's kernel); on the H200, v48 against the
reference and bit for bit against v36, including rows past s_q * h_q that the store must clip, and
under a CUDA graph replayed with new lengths."""
import dataclasses

import pytest

from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry
from version_knob import (KNOB_CASES, assert_bool_knob_on_by_default, assert_graph_replay_with_new_lengths,
                          assert_reference_and_bitwise)

V48, V46 = "flash_mla_decode_v48", "flash_mla_decode_v46"

# one split per sequence (the TMA path) at 16, 64 and 96 rows (a partial second row block), with
# partial last tiles, and a split sequence (the f32 path beside it)
STORE_CASES = [
    MlaDecodeProblem(b=3, s_q=1, h_q=16, seqlens=(1, 700, 64), page_size=64),
    MlaDecodeProblem(b=2, s_q=1, h_q=64, seqlens=(333, 5), page_size=16),
    MlaDecodeProblem(b=3, s_q=3, h_q=32, seqlens=(90, 3000, 17), page_size=64),
    MlaDecodeProblem(b=2, s_q=2, h_q=128, seqlens=(9000, 130), page_size=64),
]


def _plan():
    return registry.get_plan(V48)


def test_tma_store_o_is_on_by_default_and_a_bool():
    p = MlaDecodeProblem(b=128, s_q=1, h_q=128, seqlen=4096, varlen=True)
    assert_bool_knob_on_by_default(V48, "tma_store_o", p)


def test_o_chunks_are_score_accumulators_thread_for_thread():
    """For every math thread, element (r, 16 j + k) of its P V accumulator (rows x cols view) sits at
    the row of element (r, k) of its score accumulator and at column 256 wg + 64 j + that column:
    o_store.o_chunk_to_scores copies chunk j with no shuffle."""
    pytest.importorskip("cutlass")
    import cutlass
    import cutlass.cute as cute
    import cutlass.utils.hopper_helpers as sm90_utils
    from cutlass.cute.nvgpu import OperandMajorMode

    from mla_var3.kernel.cute_python.common.sm90 import acc_rows_cols
    bf16, f32 = cutlass.BFloat16, cutlass.Float32
    pairs = []

    @cute.jit
    def probe():
        mma_qk = sm90_utils.make_trivial_tiled_mma(bf16, bf16, OperandMajorMode.K, OperandMajorMode.K, f32,
                                                   (1, 1, 1), (64, 64))
        mma_pv = sm90_utils.make_trivial_tiled_mma(bf16, bf16, OperandMajorMode.K, OperandMajorMode.MN, f32,
                                                   (1, 2, 1), (64, 256))
        for t in cutlass.range_constexpr(0, 256, 3):
            o = acc_rows_cols(mma_pv.get_slice(t).partition_C(cute.make_identity_tensor((64, 512))))
            s = acc_rows_cols(mma_qk.get_slice(t % 128).partition_C(cute.make_identity_tensor((64, 64))))
            n = cute.size(s, mode=[1])
            for j in cutlass.range_constexpr(4):
                for r in cutlass.range_constexpr(cute.size(s, mode=[0])):
                    for k in cutlass.range_constexpr(n):
                        # no `if` here: inside @cute.jit it would become a device branch
                        pairs.append(((t, j, r, k), tuple(o[r, j * n + k]),
                                      (s[r, k][0], 256 * (t // 128) + 64 * j + s[r, k][1])))
    probe()
    assert len(pairs) == 86 * 4 * 2 * 16
    assert [where for where, got, want in pairs if got != want] == []


def test_tma_store_o_sass():
    pytest.importorskip("cutlass")
    import compiled_sass as cs
    p = cs.small_decode(64, varlen=True)
    on = cs.split_opcode_counts(V48, p)
    off = cs.split_opcode_counts(V48, p, tiling=dataclasses.replace(_plan().default_tiling(p), tma_store_o=False))
    assert off == cs.split_opcode_counts(V46, p)                   # off: v46's kernel
    assert on["UTMASTG.3D"] == 8 and cs.count(off, "UTMASTG") == 0  # eight 64 x 64 boxes
    assert on["STSM.16.M88.4"] == off["STSM.16.M88.4"] + 16         # four chunks x 4 stmatrix per thread
    assert on["LDS.128"] == off["LDS.128"] - 16 and on["STG.E.128"] == off["STG.E.128"] - 16
    assert cs.count(on, "HGMMA") == cs.count(off, "HGMMA")


@pytest.mark.gpu
@pytest.mark.parametrize("problem", STORE_CASES + KNOB_CASES, ids=[p.key() for p in STORE_CASES + KNOB_CASES])
def test_tma_store_o_matches_reference_and_v36_bit_for_bit(problem):
    t = _plan().default_tiling(problem)
    assert t.tma_store_o
    assert_reference_and_bitwise(V48, problem, t, ("full_tile_issue", "wide_tail_zero", "tma_store_o"))


@pytest.mark.gpu
def test_tma_store_o_cuda_graph_replay_with_new_lengths():
    assert_graph_replay_with_new_lengths(V48)
