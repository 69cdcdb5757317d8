"""flash_mla_decode_v24 releases each KV stage in two halves. CPU: the compiled split kernel has
two more mbarriers (a second empty barrier per stage), one more producer wait per refill path and
more arrivals than v23's, with the same wgmmas and TMA loads (the refill is split, not repeated)."""

import pytest

from compiled_sass import count, small_decode, split_opcode_counts
from mla_var3.runtime import sass

HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
@pytest.mark.parametrize("page_size", [64, 16])
def test_each_stage_is_refilled_in_two_halves(page_size):
    v23 = split_opcode_counts("flash_mla_decode_v23", small_decode(page_size))
    v24 = split_opcode_counts("flash_mla_decode_v24", small_decode(page_size))
    assert count(v24, "SYNCS.EXCH") == count(v23, "SYNCS.EXCH") + 2           # two more mbarrier inits
    assert count(v24, "SYNCS.PHASECHK.TRANS64.TRYWAIT") == count(v23, "SYNCS.PHASECHK.TRANS64.TRYWAIT") + 2
    assert count(v24, "SYNCS.ARRIVE") > count(v23, "SYNCS.ARRIVE")
    for prefix in ("HGMMA", "UTMALDG"):
        assert count(v24, prefix) == count(v23, prefix) > 0, prefix


def test_the_left_half_is_the_value_columns_only_warpgroup_0_reads():
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v24 import half_release, kernel
    assert half_release.LEFT_CHUNKS * kernel.BOX == kernel.D_V // kernel.NUM_WG       # columns 0..255
    assert kernel.P_CHUNK >= half_release.LEFT_CHUNKS                                 # P stays in the right half
