"""Each K/V stage released in two halves, in two versions.

flash_mla_decode_v24 (on v23): the compiled split kernel has two more mbarriers (a second empty
barrier per stage), one more producer wait per refill path and more arrivals than v23's, with the
same wgmmas and TMA loads (the refill is split, not repeated).

flash_mla_decode_v51 (`half_release`, on v50): the knob and its refusal, the chunk ranges (half 0 is
exactly WG0's value columns), the compiled code (v50's kernel when off; when on, the same wgmma and
wgmma waits, four more empty-barrier arrivals per CTA-local copy of the pair loop and two more
barriers initialized), and on the H200 the kernel against the reference at page 64 (one refill
warp: both halves from one warp) and page 16 (two refill warps, multicast pairs)."""
import dataclasses

import pytest
from compiled_sass import count, small_decode, split_opcode_counts
from gpu_helpers import check_with_planted_keys, planted_keys_problem

from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry, sass

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


V51, V50 = "flash_mla_decode_v51", "flash_mla_decode_v50"


def test_half_release_knob_and_refusal(monkeypatch):
    monkeypatch.setenv("MLA_VAR3_RUN_QUARANTINED", "1")
    plan = registry.get_plan(V51)
    p = MlaDecodeProblem(b=8, s_q=1, h_q=64, seqlen=1024)
    assert plan.default_tiling(p).half_release is True
    assert {c.half_release for c in plan.autotune_configs(p)} == {True, False}
    with pytest.raises(PlanError, match="half_release must be True or False"):
        plan.check_tiling(plan.Tiling(half_release=1), p, None)


def test_half_zero_is_wg0_value_columns():
    """P V splits the 512 value columns between the two math warpgroups (WG0: 0-255 = chunks 0-3), P
    lives in chunk 8: half 0 must be WG0's value chunks and nothing else, half 1 the rest."""
    pytest.importorskip("cutlass")
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v51 import kernel, split_refill
    assert split_refill.HALF_RELEASE_SPLIT == kernel.V_CHUNKS // kernel.NUM_WG == 4
    assert kernel.P_CHUNK >= split_refill.HALF_RELEASE_SPLIT
    assert split_refill.N_CHUNKS == kernel.N_CHUNKS


@pytest.mark.parametrize("page_size", [64, 16])
def test_half_release_sass(page_size, monkeypatch):
    """Off: v50's kernel, instruction for instruction. On: the same wgmma and the same number of
    `WARPGROUP.DEPBAR` (WG0's P_A V_A wait moves, none is added); WG0 arrives on two empty barriers
    where it arrived on one (+4: two stages x two copies of the pair loop; +4 remote arrivals when a
    pair multicasts, page 16); two more barriers initialized."""
    pytest.importorskip("cutlass")
    import compiled_sass as cs
    monkeypatch.setenv("MLA_VAR3_RUN_QUARANTINED", "1")
    p = cs.paired_varlen_decode(page_size)
    tiling = registry.get_plan(V51).default_tiling(p)
    on = cs.split_opcode_counts(V51, p)
    off = cs.split_opcode_counts(V51, p, tiling=dataclasses.replace(tiling, half_release=False))
    assert off == cs.split_opcode_counts(V50, p)
    for op in ("HGMMA.64x256x16", "HGMMA.64x64x16", "HGMMA.64x8x16", "WARPGROUP.DEPBAR", "BAR.ARV", "BAR.SYNC"):
        assert cs.count(on, op) == cs.count(off, op), op
    assert cs.count(on, "SYNCS.ARRIVE.TRANS64.A1T0") == cs.count(off, "SYNCS.ARRIVE.TRANS64.A1T0") + 4
    remote = 4 if tiling.multicast_kv else 0
    assert cs.count(on, "SYNCS.ARRIVE.TRANS64.RED") == cs.count(off, "SYNCS.ARRIVE.TRANS64.RED") + remote
    assert cs.count(on, "SYNCS.EXCH.64") == cs.count(off, "SYNCS.EXCH.64") + 2


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [64, 16])
def test_v51_matches_the_reference_with_planted_keys(page_size, monkeypatch):
    """Chunk 4 (two pairs per split, so every stage is refilled once half by half) with keys that
    move the max on A and B tiles; page 64 refills both halves from one warp, page 16 from two warps
    of a multicast pair (each arrival also reaches the peer CTA's barriers)."""
    monkeypatch.setenv("MLA_VAR3_RUN_QUARANTINED", "1")
    plan = registry.get_plan(V51)
    if plan.unavailable():
        pytest.skip(plan.unavailable())
    p = planted_keys_problem(page_size)
    tiling = dataclasses.replace(plan.default_tiling(p), chunk=4, half_release=True)
    check_with_planted_keys(plan, tiling, page_size=page_size)
