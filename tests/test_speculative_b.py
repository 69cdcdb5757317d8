"""flash_mla_decode_v49's speculative softmax of tile B (speculative_b.py): the knob and its refusal,
the algebra on the CPU (float64, PyTorch: WG1's P_B, l, m and published correction equal v46's
order's over a stream of tile pairs, first pair, moving and masked rows included), and the
compile for sm_90a. The kernel itself is checked against the reference on the H200 by the
generic GPU tests (run with MLA_VAR3_RUN_QUARANTINED=1: v49 passed them and the check grid, and
stays quarantined because it measured slower than v46)."""
import math

import pytest
import torch
from compiled_sass import paired_varlen_decode
from gpu_helpers import check_with_planted_keys
from lazy_max_model import THR, lazy

from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry

V49 = "flash_mla_decode_v49"
def _v46_b(s, m_a, row_sum):
    """v46's WG1 after the wait: exp_against_lazy_max of S_B against m_A."""
    m_ref, off = lazy(m_a, s.max(dim=1).values)
    corr = torch.exp2(m_a - off)
    p = torch.exp2(s - off[:, None])
    return p, row_sum * corr + p.sum(1), m_ref, corr


def _v49_b(s, m_prev, m_a, row_sum):
    """v49's WG1: exp_speculative against m_prev before the wait, settle_speculative after it."""
    tile_max = s.max(dim=1).values
    _, spec_off = lazy(m_prev, tile_max)
    p = torch.exp2(s - spec_off[:, None])
    psum = p.sum(1)
    m_ref, off = lazy(m_a, tile_max)
    corr = torch.exp2(m_a - off)
    fix = torch.where((spec_off != off) & (psum > 0), torch.exp2(spec_off - off), torch.ones_like(off))
    assert torch.all(fix <= 2.0 ** THR)                # the lazy rule bounds the factor
    return p * fix[:, None], row_sum * corr + psum * fix, m_ref, corr


def test_speculative_b_matches_v46_order_over_a_stream_of_pairs():
    g = torch.Generator().manual_seed(0)
    rows, keys = 6, 64
    m = torch.full((rows,), -math.inf, dtype=torch.float64)          # both warpgroups' reference max
    l46 = torch.zeros(rows, dtype=torch.float64)
    l49 = torch.zeros(rows, dtype=torch.float64)
    moved = 0
    for pair in range(12):
        s_a = torch.randn(rows, keys, generator=g, dtype=torch.float64) * 3
        s_b = torch.randn(rows, keys, generator=g, dtype=torch.float64) * 3
        s_a[pair % rows] += 12.0 * (pair % 3)          # rows whose max jumps past the threshold
        s_b[(pair + 1) % rows] += 15.0 * (pair % 2)
        s_b[rows - 1] = -math.inf                      # a row every key of tile B masks
        if pair == 0:
            s_a[0] = -math.inf                         # a row tile A masks entirely on the first pair
        # WG0: tile A against m (both orders alike)
        m_a, off_a = lazy(m, s_a.max(dim=1).values)
        moved += int((m_a != m).sum())
        p46, l46_new, m46, c46 = _v46_b(s_b, m_a, l46)
        p49, l49_new, m49, c49 = _v49_b(s_b, m, m_a, l49)
        assert torch.equal(m46, m49) and torch.allclose(c46, c49, rtol=0, atol=0)
        assert torch.allclose(p46, p49, rtol=1e-12, atol=0)
        assert torch.allclose(l46_new, l49_new, rtol=1e-12, atol=0)
        assert float(p49.max()) <= 2.0 ** THR + 1e-9
        l46, l49, m = l46_new, l49_new, m46
    assert moved > 0                                   # the settling factor was exercised


def test_speculative_knob_and_refusal():
    plan = registry.get_plan(V49)
    p = MlaDecodeProblem(b=8, s_q=1, h_q=64, seqlen=1024)
    assert plan.default_tiling(p).speculative_b is True
    assert {c.speculative_b for c in plan.autotune_configs(p)} == {True, False}
    with pytest.raises(PlanError, match="speculative_b must be True or False"):
        plan.check_tiling(plan.Tiling(speculative_b=1), p, None)


@pytest.mark.parametrize("spec", [True, False])
def test_both_orders_compile_for_sm90a(spec, monkeypatch):
    pytest.importorskip("cutlass")
    monkeypatch.setenv("MLA_VAR3_RUN_QUARANTINED", "1")
    plan = registry.get_plan(V49)
    p = paired_varlen_decode()
    info = plan.compile_only(p, "sm_90a", plan.Tiling(speculative_b=spec))
    assert info["compiled"]


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [True, False])
def test_v49_matches_the_reference_when_the_max_jumps_mid_sequence(spec, monkeypatch):
    """Keys planted in later tiles (an A tile and a B tile of a split, and the last one) that score
    about 30 against one head's query: the reference max jumps past the lazy threshold mid-split on
    either warpgroup's tile, so the settling factor is not 1 there."""
    monkeypatch.setenv("MLA_VAR3_RUN_QUARANTINED", "1")
    plan = registry.get_plan(V49)
    if plan.unavailable():
        pytest.skip(plan.unavailable())
    check_with_planted_keys(plan, plan.Tiling(speculative_b=spec, chunk=4))
