"""flash_mla_decode_v50's statistics-first exchange (`stats_first`, its pair loop): the knob and its refusal, the
algebra on the CPU (float64, PyTorch: over a stream of tile pairs with the lazy max, v50's order,
in which WG1 rescales its O half once per pair and multiplies P_A re-stored against m_B, gives v46's
O halves and row sums and the exact attention), the compiled code (v46's kernel when off; when on,
the same wgmma, four more named-barrier operations per pair-loop copy, and no serialized wgmma), and
on the H200 the kernel against the reference with keys planted so tile B moves the max (the re-store
path) in both settings."""
import dataclasses
import math

import pytest
import torch
from gpu_helpers import check_with_planted_keys
from lazy_max_model import lazy

from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry

V50, V46 = "flash_mla_decode_v50", "flash_mla_decode_v46"
def _pair(state, s_a, s_b, v_a, v_b, stats_first: bool, warp_rows: int = 2):
    """One tile pair of the seesaw on (m, O_L, O_R, l0, l1); V split into left (WG0) and right (WG1)
    column halves. stats_first=False: v46's order; True: v50's."""
    m, o_l, o_r, l0, l1 = state
    half = v_a.shape[1] // 2
    # WG0, tile A (both orders): lazy max over m, P_A, O_L = O_L s_A + P_A V_A[:, :half]
    m_a, off_a = lazy(m, s_a.max(1).values)
    s_a_corr = torch.exp2(m - off_a)
    p_a = torch.exp2(s_a - off_a[:, None])
    l0 = l0 * s_a_corr + p_a.sum(1)
    o_l = o_l * s_a_corr[:, None] + p_a @ v_a[:, :half]
    # WG1, tile B: its softmax against m_A (both orders)
    m_b, off_b = lazy(m_a, s_b.max(1).values)
    s_b_corr = torch.exp2(m_a - off_b)
    p_b = torch.exp2(s_b - off_b[:, None])
    l1 = l1 * s_a_corr * s_b_corr + p_b.sum(1)
    if stats_first:
        # WG0 re-stores P_A * s_B in the warps (groups of warp_rows rows) where some row has s_B != 1
        need = (s_b_corr != 1.0).view(-1, warp_rows).any(1).repeat_interleave(warp_rows)
        p_a_for_wg1 = torch.where(need[:, None], p_a * s_b_corr[:, None], p_a)
        o_r = o_r * (s_a_corr * s_b_corr)[:, None] + p_a_for_wg1 @ v_a[:, half:] + p_b @ v_b[:, half:]
    else:
        o_r = (o_r * s_a_corr[:, None] + p_a @ v_a[:, half:]) * s_b_corr[:, None] + p_b @ v_b[:, half:]
    # WG0 after tile B's statistics: O_L = O_L s_B + P_B V_B[:, :half]
    l0 = l0 * s_b_corr
    o_l = o_l * s_b_corr[:, None] + p_b @ v_b[:, :half]
    return m_b, o_l, o_r, l0, l1


def test_stats_first_order_gives_v46s_o_and_the_exact_attention():
    g = torch.Generator().manual_seed(0)
    rows, keys, d = 8, 16, 6
    state = {f: (torch.full((rows,), -math.inf, dtype=torch.float64), torch.zeros(rows, d // 2, dtype=torch.float64),
                 torch.zeros(rows, d // 2, dtype=torch.float64), torch.zeros(rows, dtype=torch.float64),
                 torch.zeros(rows, dtype=torch.float64)) for f in (False, True)}
    all_s, all_v, restored = [], [], 0
    for pair in range(10):
        s_a = torch.randn(rows, keys, generator=g, dtype=torch.float64) * 3
        s_b = torch.randn(rows, keys, generator=g, dtype=torch.float64) * 3
        s_b[(pair + 1) % rows] += 15.0 * (pair % 2)          # tile B moves a row's lazy max: the re-store
        s_a[pair % rows] += 12.0 * (pair % 3)                 # ... and tile A another's
        s_b[rows - 1] = -math.inf                             # a row every key of tile B masks
        if pair == 0:
            s_a[0] = -math.inf                                # a row tile A masks on the first pair
        v_a = torch.randn(keys, d, generator=g, dtype=torch.float64)
        v_b = torch.randn(keys, d, generator=g, dtype=torch.float64)
        m_a, _ = lazy(state[True][0], s_a.max(1).values)
        restored += int((lazy(m_a, s_b.max(1).values)[0] != m_a).sum())
        for f in (False, True):
            state[f] = _pair(state[f], s_a, s_b, v_a, v_b, f)
        all_s += [s_a, s_b]
        all_v += [v_a, v_b]
    assert restored > 0                                       # the re-store path was taken
    (m46, ol46, or46, a46, b46), (m50, ol50, or50, a50, b50) = state[False], state[True]
    assert torch.equal(m46, m50)
    for x, y in ((ol46, ol50), (or46, or50), (a46 + b46, a50 + b50)):
        assert torch.allclose(x, y, rtol=1e-12, atol=1e-12)
    s, v = torch.cat(all_s, 1), torch.cat(all_v, 0)
    exact = torch.softmax(s * math.log(2.0), dim=1) @ v      # the scores are in log2 units
    got = torch.cat([ol50, or50], 1) / (a50 + b50)[:, None]
    assert torch.allclose(got, exact, rtol=1e-10, atol=1e-12)


def test_stats_first_knob_and_refusal():
    plan = registry.get_plan(V50)
    p = MlaDecodeProblem(b=8, s_q=1, h_q=64, seqlen=1024)
    assert plan.default_tiling(p).stats_first is True
    assert {c.stats_first for c in plan.autotune_configs(p)} == {True, False}
    with pytest.raises(PlanError, match="stats_first must be True or False"):
        plan.check_tiling(plan.Tiling(stats_first=1), p, None)


def test_stats_first_sass(monkeypatch):
    """Off: v46's kernel, instruction for instruction. On: the same wgmma; per copy of the pair loop
    (two) each warpgroup adds one barrier arrive and one sync (P_A, P_B); ptxas keeps the wgmma
    batched (a `WARPGROUP.DEPBAR` per wgmma group, not per instruction: 104 of 104 when it
    serializes); WG1's empty second group without a tile B is one no-op HGMMA.64x8 per copy."""
    pytest.importorskip("cutlass")
    import compiled_sass as cs
    monkeypatch.setenv("MLA_VAR3_RUN_QUARANTINED", "1")
    p = cs.paired_varlen_decode()
    tiling = registry.get_plan(V50).default_tiling(p)
    on = cs.split_opcode_counts(V50, p)
    off = cs.split_opcode_counts(V50, p, tiling=dataclasses.replace(tiling, stats_first=False))
    v46 = cs.split_opcode_counts(V46, p)
    assert off == v46
    for mma in ("HGMMA.64x256x16", "HGMMA.64x64x16"):
        assert cs.count(on, mma) == cs.count(off, mma)
    assert cs.count(on, "HGMMA.64x8x16") == 2
    assert cs.count(on, "BAR.ARV") == cs.count(off, "BAR.ARV") + 4
    assert cs.count(on, "BAR.SYNC") == cs.count(off, "BAR.SYNC") + 4
    assert cs.count(on, "WARPGROUP.DEPBAR") <= cs.count(off, "WARPGROUP.DEPBAR") + 2
    assert cs.count(on, "WARPGROUP.DEPBAR") < cs.count(on, "HGMMA") // 4


@pytest.mark.gpu
@pytest.mark.parametrize("stats_first", [True, False])
def test_v50_matches_the_reference_when_tile_b_moves_the_max(stats_first, monkeypatch):
    """Keys planted in later tiles (A and B tiles of a split, and the last key) that score about 30
    against one head's query: the reference max jumps past the lazy threshold mid-split, on B tiles
    too, where WG0 must re-store P_A against the new max before WG1 reads it."""
    monkeypatch.setenv("MLA_VAR3_RUN_QUARANTINED", "1")
    plan = registry.get_plan(V50)
    if plan.unavailable():
        pytest.skip(plan.unavailable())
    check_with_planted_keys(plan, plan.Tiling(stats_first=stats_first, chunk=4))
