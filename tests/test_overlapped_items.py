"""flash_mla_decode_v25 overlaps the item boundaries of v22's persistent CTAs. CPU: its epilogue
stores O straight from the accumulators (no shared-memory staging, so the K ring never waits for
it), one math-warp arrival per item replaces v22's two (epi_done and warp 9's q_bar), and the
loop's wgmmas and TMA loads are v22's; its schedule and combine are v22's code."""
import re
from pathlib import Path

import pytest

from compiled_sass import count, small_decode, split_opcode_counts
from mla_var3.runtime import sass

HAVE_SASS_TOOLS = bool(sass.find_disassemblers())
RAGGED = small_decode(varlen=True)
DESIGN = Path(__file__).resolve().parents[1] / "src/mla_var3/kernel/cute_python/mla/flash_mla_decode"


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
def test_the_epilogue_leaves_shared_memory_and_the_loop_is_v22s():
    v22 = split_opcode_counts("flash_mla_decode_v22", RAGGED)
    v25 = split_opcode_counts("flash_mla_decode_v25", RAGGED)
    # v22 staged O in the K ring (STS.64 of f32 pairs, LDS.128 row chunks back, STG.E.128 out)
    assert count(v22, "LDS.128") > 0 and count(v22, "STG.E.128") > 0
    assert count(v25, "LDS.128") == 0 and count(v25, "STG.E.128") == 0 and count(v25, "STS.64") == 0
    assert count(v25, "STG.E.64") == 64                 # f32 partials: 128 floats per thread, in pairs
    assert count(v25, "SYNCS.ARRIVE") == count(v22, "SYNCS.ARRIVE") - 1
    assert count(v25, "BAR.SYNC") < count(v22, "BAR.SYNC")     # the staging barrier is gone
    for prefix in ("HGMMA", "UTMALDG", "STSM"):
        assert count(v25, prefix) == count(v22, prefix) > 0, prefix


@pytest.mark.parametrize("module", ["balanced_schedule.py", "combine.py", "lazy_rescale.py", "unmasked_scores.py"])
def test_schedule_and_combine_are_v22s_code(module):
    """v22's schedule and combine tests (tests/test_balanced_schedule.py) cover v25 as well: the
    files differ only in the version's name."""
    def body(version):
        text = (DESIGN / version / module).read_text()
        return re.sub(r"flash_mla_decode_v\d+", "flash_mla_decode_vN", text)
    assert body("flash_mla_decode_v25") == body("flash_mla_decode_v22")
