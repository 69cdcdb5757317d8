"""flash_mla_decode_v24 releases each KV stage in two halves. CPU: the compiled split kernel has
two more mbarriers (a second empty barrier per stage), one more producer wait per refill path and
more arrivals than v23's, with the same wgmmas and TMA loads (the refill is split, not repeated)."""
import collections

import pytest

from compiled_sass import opcodes, stage_sass
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import kernel_plan, registry, sass

HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


def _split_opcodes(version, page_size, monkeypatch) -> collections.Counter:
    monkeypatch.setenv(kernel_plan.QUARANTINE_ENV, "1")
    plan = registry.get_plan(version)
    problem = MlaDecodeProblem(b=2, s_q=1, h_q=64, seqlen=1024, page_size=page_size)
    return collections.Counter(opcodes(stage_sass(plan.plan(problem.make_inputs(seed=0, device="cpu"),
                                                            plan.default_tiling(problem)), "split")))


def _count(ops, prefix):
    return sum(n for op, n in ops.items() if op.startswith(prefix))


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
@pytest.mark.parametrize("page_size", [64, 16])
def test_each_stage_is_refilled_in_two_halves(page_size, monkeypatch):
    v23 = _split_opcodes("flash_mla_decode_v23", page_size, monkeypatch)
    v24 = _split_opcodes("flash_mla_decode_v24", page_size, monkeypatch)
    assert _count(v24, "SYNCS.EXCH") == _count(v23, "SYNCS.EXCH") + 2           # two more mbarrier inits
    assert _count(v24, "SYNCS.PHASECHK.TRANS64.TRYWAIT") == _count(v23, "SYNCS.PHASECHK.TRANS64.TRYWAIT") + 2
    assert _count(v24, "SYNCS.ARRIVE") > _count(v23, "SYNCS.ARRIVE")
    for prefix in ("HGMMA", "UTMALDG"):
        assert _count(v24, prefix) == _count(v23, prefix) > 0, prefix


def test_the_left_half_is_the_value_columns_only_warpgroup_0_reads():
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v24 import half_release, kernel
    assert half_release.LEFT_CHUNKS * kernel.BOX == kernel.D_V // kernel.NUM_WG       # columns 0..255
    assert kernel.P_CHUNK >= half_release.LEFT_CHUNKS                                 # P stays in the right half
