"""flash_mla_decode_v29 shares each K/V tile between the two row-block CTAs of a sequence (a 2-CTA
cluster, TMA multicast). CPU: which shapes pair up and the tiling's one-line errors; the compiled
split kernel multicasts every K/V box (Q stays per CTA), arrives on the peer's empty barriers and
passes the two cluster barriers; with one row block it is v28's kernel. GPU: the check grid and
the fuzz cover the paired shapes (h_q * s_q >= 128)."""
import pytest

from compiled_sass import count, small_decode, split_opcode_counts
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import sass

HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


def _plan_module():
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v29 import flash_mla_decode_v29
    return flash_mla_decode_v29


def test_row_blocks_pair_up_when_their_number_is_even():
    v29 = _plan_module()
    plan = v29.Plan()
    for s_q, h_q, pairs in ((1, 16, 1), (1, 64, 1), (1, 128, 2), (2, 64, 2), (3, 64, 1), (4, 32, 2), (4, 128, 2)):
        problem = MlaDecodeProblem(b=4, s_q=s_q, h_q=h_q, seqlen=1024)
        tiling = plan.default_tiling(problem)
        assert tiling.cluster_rows == pairs, (s_q, h_q)
        assert {t.cluster_rows for t in plan.autotune_configs(problem)} == ({1, 2} if pairs == 2 else {1})
        assert all(not t.validate(problem, None) for t in plan.autotune_configs(problem))


def test_a_pair_that_does_not_fit_is_one_clear_reason():
    v29 = _plan_module()
    odd = MlaDecodeProblem(b=4, s_q=3, h_q=64, seqlen=1024)
    assert v29.FlashMlaSplitTiling(cluster_rows=2).validate(odd, None) == [
        "cluster_rows=2 needs a number of 64-row blocks divisible by it; s_q * h_q = 192 gives 3"]
    assert v29.FlashMlaSplitTiling(cluster_rows=4).validate(odd, None) == [
        "cluster_rows must be one of 1, 2 (row-block CTAs sharing each K/V tile), got 4"]


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
@pytest.mark.parametrize("page_size", [64, 16])
def test_every_kv_box_is_multicast_and_the_peer_is_released(page_size):
    paired = MlaDecodeProblem(b=2, s_q=1, h_q=128, seqlen=1024, page_size=page_size)
    v28 = split_opcode_counts("flash_mla_decode_v28", paired)
    v29 = split_opcode_counts("flash_mla_decode_v29", paired)
    q_boxes = 9                                            # Q: 9 boxes of 64 rows x 64 columns, per CTA
    assert v29["UTMALDG.3D"] == q_boxes
    assert v29["UTMALDG.3D.MULTICAST"] == v28["UTMALDG.3D"] - q_boxes > 0
    assert count(v28, "SYNCS.ARRIVE.TRANS64.RED") == 0 < count(v29, "SYNCS.ARRIVE.TRANS64.RED")   # remote arrives
    assert v29["UCGABAR_ARV"] == v29["UCGABAR_WAIT"] == 2 and v28["UCGABAR_ARV"] == 0
    assert count(v29, "HGMMA") == count(v28, "HGMMA")


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
def test_one_row_block_builds_v28s_kernel():
    v28 = split_opcode_counts("flash_mla_decode_v28", small_decode(64))
    v29 = split_opcode_counts("flash_mla_decode_v29", small_decode(64))
    assert v29 == v28


def test_v30_pairs_only_where_a_tile_is_many_boxes():
    """v30's default: pairs at pages 16 and 32 (v29 measured 1.09-1.13x and 1.01-1.03x v28 there),
    single CTAs at page 64 (v29 took 1.01-1.036x v28's time); the autotune space keeps both."""
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v30 import flash_mla_decode_v30 as v30
    plan = v30.Plan()
    for page, pairs in ((16, 2), (32, 2), (64, 1)):
        problem = MlaDecodeProblem(b=4, s_q=1, h_q=128, seqlen=1024, page_size=page)
        assert plan.default_tiling(problem).cluster_rows == pairs
        assert {t.cluster_rows for t in plan.autotune_configs(problem)} == {1, 2}
    assert plan.default_tiling(MlaDecodeProblem(b=4, s_q=1, h_q=64, seqlen=1024, page_size=16)).cluster_rows == 1


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
@pytest.mark.parametrize("page_size, like", [(64, "flash_mla_decode_v28"), (16, "flash_mla_decode_v29")])
def test_v30_builds_the_kernel_of_the_version_it_follows(page_size, like):
    paired = MlaDecodeProblem(b=2, s_q=1, h_q=128, seqlen=1024, page_size=page_size)
    assert split_opcode_counts("flash_mla_decode_v30", paired) == split_opcode_counts(like, paired)
