"""flash_mla_decode_v18's K/V loads carry an L2 cache-policy operand (EVICT_FIRST) and Q's do not.
CPU: the policy word is CUTLASS's, and the compiled split kernel's TMA loads say so in the SASS
(`desc[UR..]` names the policy register; v17's loads have `desc[URZ]`, no policy)."""
import re

import pytest

from compiled_sass import stage_sass
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import kernel_plan, registry, sass

HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


def test_the_policy_word_is_cutlass_evict_first():
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v18 import evict_first_loads
    assert evict_first_loads.EVICT_FIRST == 0x12F0000000000000      # cute/arch/copy_sm90_desc.hpp


def _tma_loads(version, page_size, monkeypatch) -> list[str]:
    monkeypatch.setenv(kernel_plan.QUARANTINE_ENV, "1")
    plan = registry.get_plan(version)
    problem = MlaDecodeProblem(b=2, s_q=1, h_q=64, seqlen=1024, page_size=page_size)
    text = stage_sass(plan.plan(problem.make_inputs(seed=0, device="cpu"), plan.default_tiling(problem)), "split")
    return re.findall(r"UTMALDG[^;\n]*", text)


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
@pytest.mark.parametrize("page_size", [64, 16])
def test_kv_boxes_carry_a_policy_and_q_boxes_do_not(page_size, monkeypatch):
    v18 = _tma_loads("flash_mla_decode_v18", page_size, monkeypatch)
    v17 = _tma_loads("flash_mla_decode_v17", page_size, monkeypatch)
    with_policy = [ld for ld in v18 if not ld.rstrip().endswith("desc[URZ]")]
    assert len(v18) == len(v17), (v18, v17)                     # the same boxes
    assert all(ld.rstrip().endswith("desc[URZ]") for ld in v17), v17
    assert len(v18) - len(with_policy) == 9, v18                # Q: its 9 boxes, normal priority
    assert with_policy and all(re.search(r"desc\[UR\d+\]", ld) for ld in with_policy), v18
