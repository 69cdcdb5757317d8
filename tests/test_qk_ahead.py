"""flash_mla_decode_v52's next QK^T issued behind the last P V of a pair (`qk_ahead`): the knob and its
refusal, the compiled code (v51's kernel when off; when on, the wgmma still batched: a
`WARPGROUP.DEPBAR` per wgmma group, not per HGMMA, and no spills), and on the H200 the kernel
against the reference at pages 64 and 16 with splits whose last pair has no tile B (WG1 then issues
the one-wgmma stand-in) and keys that move the max."""
import dataclasses

import pytest
from gpu_helpers import check_with_planted_keys, planted_keys_problem

from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry

V52, V51 = "flash_mla_decode_v52", "flash_mla_decode_v51"


def test_qk_ahead_knob_and_refusal(monkeypatch):
    monkeypatch.setenv("MLA_VAR3_RUN_QUARANTINED", "1")
    plan = registry.get_plan(V52)
    p = MlaDecodeProblem(b=8, s_q=1, h_q=64, seqlen=1024)
    assert plan.default_tiling(p).qk_ahead is True
    assert {c.qk_ahead for c in plan.autotune_configs(p)} == {True, False}
    with pytest.raises(PlanError, match="qk_ahead must be True or False"):
        plan.check_tiling(plan.Tiling(qk_ahead=1), p, None)


@pytest.mark.parametrize("stats_first", [True, False])
def test_qk_ahead_sass_keeps_wgmma_batched(stats_first, monkeypatch):
    """Off: v51's kernel. On: QK^T's wgmma are issued from each warpgroup's end of the pair (and once
    before the loop), so there are more of them in the code, but ptxas keeps them batched: far fewer
    `WARPGROUP.DEPBAR` than HGMMA / 4 (a serialized build has one per HGMMA: 225 of 225 in the first
    build, whose tile-less path had no wgmma in flight), and nothing spilled."""
    pytest.importorskip("cutlass")
    import compiled_sass as cs
    monkeypatch.setenv("MLA_VAR3_RUN_QUARANTINED", "1")
    p = cs.paired_varlen_decode()
    base = dataclasses.replace(registry.get_plan(V52).default_tiling(p), stats_first=stats_first)
    on = cs.split_opcode_counts(V52, p, tiling=base)
    off = cs.split_opcode_counts(V52, p, tiling=dataclasses.replace(base, qk_ahead=False))
    v51 = cs.split_opcode_counts(V51, p, tiling=dataclasses.replace(base, qk_ahead=True))
    assert off == v51
    assert cs.count(on, "HGMMA.64x256x16") == cs.count(off, "HGMMA.64x256x16")
    assert cs.count(on, "HGMMA.64x64x16") > cs.count(off, "HGMMA.64x64x16")
    assert cs.count(on, "WARPGROUP.DEPBAR") <= cs.count(off, "WARPGROUP.DEPBAR") + 4
    assert cs.count(on, "WARPGROUP.DEPBAR") < cs.count(on, "HGMMA") // 8
    assert cs.count(on, "STL") == 0


@pytest.mark.gpu
@pytest.mark.parametrize("page_size,chunk", [(64, 4), (64, 3), (16, 5)])
def test_v52_matches_the_reference_with_planted_keys(page_size, chunk, monkeypatch):
    """Chunks of 4 (every pair full), 3 and 5 (each split ends in a pair without tile B, so WG1's last
    issue is the stand-in wgmma and its next pair sets S to -inf), keys that move the max."""
    monkeypatch.setenv("MLA_VAR3_RUN_QUARANTINED", "1")
    plan = registry.get_plan(V52)
    if plan.unavailable():
        pytest.skip(plan.unavailable())
    p = planted_keys_problem(page_size)
    tiling = dataclasses.replace(plan.default_tiling(p), chunk=chunk, qk_ahead=True)
    check_with_planted_keys(plan, tiling, page_size=page_size)
