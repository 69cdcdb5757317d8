"""flash_mla_decode_v26 issues each tile's boxes from two producer warps per stage; v27 only at pages
16 and 32. CPU: the two halves cover the 9 chunks once, in QK^T's order, the first half starting
at chunk 0; the compiled split kernels keep v23's wgmmas, TMA loads and mbarrier operations (the
same boxes, armed once per chunk, only issued from more warps); v27 picks its warps by page size."""

import pytest

from compiled_sass import count, small_decode, split_opcode_counts
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import sass

HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


def test_the_halves_cover_every_chunk_once_in_order():
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v26 import kernel, split_refill
    chunks = [c for lo, hi in split_refill.HALVES for c in range(lo, hi)]
    assert chunks == list(range(kernel.N_CHUNKS)) and split_refill.N_CHUNKS == kernel.N_CHUNKS
    assert all(hi > lo for lo, hi in split_refill.HALVES)
    assert kernel.PRODUCER_WARP == 8 and kernel.STAGES * len(split_refill.HALVES) == 4   # warps 8-11


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
@pytest.mark.parametrize("page_size", [64, 16])
def test_the_same_boxes_and_barriers_as_v23(page_size):
    v23 = split_opcode_counts("flash_mla_decode_v23", small_decode(page_size))
    v26 = split_opcode_counts("flash_mla_decode_v26", small_decode(page_size))
    for prefix in ("HGMMA", "UTMALDG", "SYNCS.EXCH", "SYNCS.ARRIVE", "SYNCS.PHASECHK", "ELECT"):
        assert count(v26, prefix) == \
            count(v23, prefix) > 0, prefix


def test_v27_chooses_the_issuing_warps_by_page_size():
    """v27's default: two issuing warps per stage where a tile is many boxes (pages 16 and 32),
    one at page 64 (v26's split measured 0.96-1.02x v23 there); the autotune space has both."""
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v27 import flash_mla_decode_v27 as v27
    plan = v27.Plan()
    for page, warps in ((16, 2), (32, 2), (64, 1)):
        problem = MlaDecodeProblem(b=4, s_q=1, h_q=64, seqlen=1024, page_size=page)
        assert plan.default_tiling(problem).refill_warps == warps
        assert {t.refill_warps for t in plan.autotune_configs(problem)} == {1, 2}
    assert v27.FlashMlaSplitTiling(refill_warps=3).validate(MlaDecodeProblem(b=1, s_q=1, h_q=16, seqlen=64), None)


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
@pytest.mark.parametrize("page_size, like", [(64, "flash_mla_decode_v23"), (16, "flash_mla_decode_v26")])
def test_v27_compiles_the_boxes_and_barriers_of_the_version_it_follows(page_size, like):
    v27 = split_opcode_counts("flash_mla_decode_v27", small_decode(page_size))
    ref = split_opcode_counts(like, small_decode(page_size))
    for prefix in ("HGMMA", "UTMALDG", "SYNCS", "ELECT", "BAR"):
        assert count(v27, prefix) == \
            count(ref, prefix) > 0, prefix
