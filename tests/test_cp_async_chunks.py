"""flash_mla_decode_v31 copies a tile's last column chunks with cp.async from the producer warps
where a CTA issues its page boxes alone (pages 16/32, one row block or unpaired). CPU: where the
default turns it on, the tiling's one-line errors; the compiled split kernel moves exactly those
boxes from the TMA engine to 16-byte cp.async with one noinc arrival per lane and chunk, and is
v30's kernel wherever it is off. GPU: the check grid, the sanitizers and the fuzz cover it."""
import pytest

from compiled_sass import count, small_decode, split_opcode_counts
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import sass

HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


def _plan_module():
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v31 import flash_mla_decode_v31
    return flash_mla_decode_v31


@pytest.mark.parametrize("s_q, h_q, page_size, async_chunks", [
    (1, 16, 16, 4), (4, 16, 16, 4), (1, 64, 32, 4),          # one row block at pages 16/32: cp.async
    (1, 128, 16, 0), (4, 32, 16, 0),                         # a row-block pair: v30's multicast
    (1, 16, 64, 0), (1, 128, 64, 0),                         # page 64: 9 boxes per tile, nothing to move
    (3, 64, 16, 4),                                          # three row blocks do not pair: cp.async
])
def test_cp_async_only_where_a_cta_issues_many_boxes_alone(s_q, h_q, page_size, async_chunks):
    v31 = _plan_module()
    plan = v31.Plan()
    problem = MlaDecodeProblem(b=4, s_q=s_q, h_q=h_q, seqlen=1024, page_size=page_size)
    tiling = plan.default_tiling(problem)
    assert tiling.async_chunks == async_chunks
    configs = plan.autotune_configs(problem)
    assert all(not t.validate(problem, None) for t in configs)
    if async_chunks:
        assert {t.async_chunks for t in configs} == set(v31.ASYNC_CHUNKS)
    else:
        assert {t.async_chunks for t in configs} == {0}


def test_bad_async_chunks_are_one_clear_reason():
    v31 = _plan_module()
    problem = MlaDecodeProblem(b=4, s_q=1, h_q=16, seqlen=1024, page_size=16)
    assert v31.FlashMlaSplitTiling(refill_warps=2, async_chunks=5).validate(problem, None) == [
        "async_chunks must be one of 0, 1, 2, 3, 4 (column chunks per tile copied by cp.async), got 5"]
    assert v31.FlashMlaSplitTiling(refill_warps=1, async_chunks=2).validate(problem, None) == [
        "async_chunks=2 needs refill_warps=2 (part 1's warps copy them) and cluster_rows=1 (a pair's boxes "
        "are multicast), got refill_warps=1, cluster_rows=1"]


def test_the_kernel_refuses_cp_async_without_part_one():
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v31 import kernel
    with pytest.raises(ValueError, match="async_chunks: expected 0..4"):
        kernel.FlashMlaDecodeKernel(1, 16, 64, page_size=16, refill_warps=1, async_chunks=2)


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
@pytest.mark.parametrize("page_size", [16, 32])
def test_the_last_chunks_leave_the_tma_engine(page_size):
    """Per call site (the first tile and the refill loop): part 1's 4 chunks x pages_per_tile boxes
    become cp.async, each box page_size x 64 bf16 = page_size * 8 16-byte vectors over 32 lanes."""
    problem = small_decode(page_size)                        # b=2 s_q=1 h_q=64: one row block
    v30 = split_opcode_counts("flash_mla_decode_v30", problem)
    v31 = split_opcode_counts("flash_mla_decode_v31", problem)
    sites, chunks, pages = 2, 4, 64 // page_size
    assert v30["UTMALDG.3D"] - v31["UTMALDG.3D"] == sites * chunks * pages
    assert count(v30, "LDGSTS") == 0
    assert v31["LDGSTS.E.BYPASS.128"] == sites * chunks * pages * page_size * 8 // 32
    assert v31["ARRIVES.LDGSTSBAR.64.ARVCNT"] == sites * chunks      # one noinc arrival per lane and chunk
    assert count(v31, "HGMMA") == count(v30, "HGMMA")


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
@pytest.mark.parametrize("page_size, h_q", [(64, 64), (16, 128)])
def test_without_cp_async_it_is_v30s_kernel(page_size, h_q):
    problem = MlaDecodeProblem(b=2, s_q=1, h_q=h_q, seqlen=1024, page_size=page_size)
    v30 = split_opcode_counts("flash_mla_decode_v30", problem)
    v31 = split_opcode_counts("flash_mla_decode_v31", problem)
    assert count(v31, "LDGSTS") == 0
    assert {op: n for op, n in v31.items() if op.startswith(("UTMALDG", "HGMMA", "SYNCS", "UCGABAR"))} == \
        {op: n for op, n in v30.items() if op.startswith(("UTMALDG", "HGMMA", "SYNCS", "UCGABAR"))}
