"""flash_mla_decode_v53's own P V from registers (`local_p`): the knob and its refusals (alone, and
with v50's or v52's exchange), the compiled code (v46's kernel when off; when on, each warpgroup's
own P V is a register-A wgmma, the named-barrier syncs of the first loop copy go, the wgmma stay
batched, nothing spills), and on the H200 the kernel against the reference at pages 64 and 16 with
keys that move the max and a last tile whose zeroed rows the owner's register-P wgmma must see."""
import dataclasses
import re

import pytest
from gpu_helpers import check_with_planted_keys, planted_keys_problem

from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry

V53, V46 = "flash_mla_decode_v53", "flash_mla_decode_v46"


def test_local_p_knob_and_refusals(monkeypatch):
    monkeypatch.setenv("MLA_VAR3_RUN_QUARANTINED", "1")
    plan = registry.get_plan(V53)
    p = MlaDecodeProblem(b=8, s_q=1, h_q=64, seqlen=1024)
    t = plan.default_tiling(p)
    assert t.local_p is True and not (t.stats_first or t.half_release or t.qk_ahead)
    configs = plan.autotune_configs(p)
    assert {c.local_p for c in configs} == {True, False}
    for c in configs:
        plan.check_tiling(c, p, None)            # every config of the search space is legal
    with pytest.raises(PlanError, match="local_p must be True or False"):
        plan.check_tiling(plan.Tiling(local_p=1), p, None)
    for bad in (dict(stats_first=True), dict(qk_ahead=True)):
        with pytest.raises(PlanError, match="local_p=True needs stats_first=False and qk_ahead=False"):
            plan.check_tiling(plan.Tiling(**bad), p, None)


def test_local_p_sass(monkeypatch):
    """Off: v46's split kernel, instruction for instruction. On: the same number of HGMMA, 16 of them
    with a register A operand (4 k-steps x the two warpgroups' own P V x two copies of the pair loop),
    two `BAR.SYNC` fewer (each warpgroup's own-P sync in the first copy), no more `WARPGROUP.DEPBAR`,
    no spills."""
    pytest.importorskip("cutlass")
    import compiled_sass as cs
    monkeypatch.setenv("MLA_VAR3_RUN_QUARANTINED", "1")
    p = cs.paired_varlen_decode()
    tiling = registry.get_plan(V53).default_tiling(p)
    on_text = cs.stage_sass(cs.default_kernel(V53, p, tiling), "split")
    on = cs.collections.Counter(cs.opcodes(on_text))
    off = cs.split_opcode_counts(V53, p, tiling=dataclasses.replace(tiling, local_p=False))
    assert off == cs.split_opcode_counts(V46, p)
    assert cs.count(on, "HGMMA") == cs.count(off, "HGMMA")
    register_a = [ln for ln in on_text.splitlines() if re.search(r"HGMMA\.64x256x16\S* R\d+, R\d+, gdesc", ln)]
    assert len(register_a) == 16
    assert cs.count(on, "BAR.SYNC") == cs.count(off, "BAR.SYNC") - 2
    assert cs.count(on, "WARPGROUP.DEPBAR") <= cs.count(off, "WARPGROUP.DEPBAR")
    assert cs.count(on, "STL") == 0


@pytest.mark.gpu
@pytest.mark.parametrize("page_size,chunk", [(64, 4), (64, 3), (16, 5)])
def test_v53_matches_the_reference_with_planted_keys(page_size, chunk, monkeypatch):
    """Lengths 1000 and 700 end in partial tiles (zeroed value rows the owner's register-P wgmma reads
    in the loop's second copy); odd chunks leave pairs without tile B; planted keys move the max."""
    monkeypatch.setenv("MLA_VAR3_RUN_QUARANTINED", "1")
    plan = registry.get_plan(V53)
    if plan.unavailable():
        pytest.skip(plan.unavailable())
    p = planted_keys_problem(page_size)
    tiling = dataclasses.replace(plan.default_tiling(p), chunk=chunk, local_p=True)
    check_with_planted_keys(plan, tiling, page_size=page_size)
