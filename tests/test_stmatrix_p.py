"""flash_mla_decode_v20 stores P with stmatrix. CPU: the compiled split kernel has the stmatrix
stores and none of v19's per-element P stores (`STS.U16`, `PRMT`), with the same wgmmas."""

import pytest

from compiled_sass import small_decode, split_opcode_counts
from mla_var3.runtime import sass

HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
@pytest.mark.parametrize("page_size", [64, 16])
def test_p_goes_out_by_stmatrix(page_size):
    v19 = split_opcode_counts("flash_mla_decode_v19", small_decode(page_size))
    v20 = split_opcode_counts("flash_mla_decode_v20", small_decode(page_size))
    stsm = sum(n for op, n in v20.items() if op.startswith("STSM"))
    assert stsm == 16, v20                   # 4 per tile store, 2 warpgroup paths x 2 loop copies
    assert v19["STS.U16"] >= 100 and v20["STS.U16"] <= 4, (v19["STS.U16"], v20["STS.U16"])
    hgmma = {op: n for op, n in v19.items() if op.startswith("HGMMA")}
    assert hgmma and hgmma == {op: n for op, n in v20.items() if op.startswith("HGMMA")}
