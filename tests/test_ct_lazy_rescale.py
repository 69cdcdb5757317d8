"""ct_flash_mla_decode_v5's lazy reference max: the knob and its refusal, both rescale modes compile
for sm_90 with either schedule (CPU), the lazy update's algebra against the eager one (CPU, in
PyTorch: the same O and lse from a lazily moved max), and on the H200 both modes against the
reference, peaked score distributions included."""
import dataclasses
import math

import pytest
from gpu_helpers import assert_check_passes

from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry

V5 = "ct_flash_mla_decode_v5"


def test_rescale_knob_and_refusal():
    plan = registry.get_plan(V5)
    p = MlaDecodeProblem(b=8, s_q=1, h_q=16, seqlen=1024)
    assert plan.default_tiling(p).rescale == "lazy"
    assert {c.rescale for c in plan.autotune_configs(p)} == {"lazy", "eager"}
    with pytest.raises(PlanError, match="rescale must be one of lazy, eager"):
        plan.check_tiling(plan.Tiling(rescale="sometimes"), p, None)


def _online(scores, values, lazy: bool, threshold: float = 8.0):
    """The split kernel's per-tile update in float64 (log2 domain), tile by tile: (O, lse2)."""
    import torch
    rows = scores.shape[0]
    m = torch.full((rows, 1), -1e30, dtype=torch.float64)
    l_ = torch.zeros((rows, 1), dtype=torch.float64)
    acc = torch.zeros((rows, values.shape[1]), dtype=torch.float64)
    for t0 in range(0, scores.shape[1], 64):
        s = scores[:, t0:t0 + 64]
        m_tile = s.max(dim=1, keepdim=True).values
        m_new = torch.where(m_tile > m + threshold, m_tile, m) if lazy else torch.maximum(m, m_tile)
        p = torch.exp2(s - m_new)
        alpha = torch.exp2(m - m_new)
        l_ = l_ * alpha + p.sum(dim=1, keepdim=True)
        acc = acc * alpha + p @ values[t0:t0 + 64]
        m = m_new
        assert float(p.max()) <= 2.0 ** threshold + 1e-9           # lazy: P stays within bf16's comfort
    return acc / l_, m + torch.log2(l_)


@pytest.mark.parametrize("spread", [1.0, 30.0])
def test_lazy_update_gives_the_eager_answer(spread):
    import torch
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(16, 640, generator=g, dtype=torch.float64) * spread
    scores[:, 300:310] += 3 * spread                                   # a late, peaked max
    values = torch.randn(640, 32, generator=g, dtype=torch.float64)
    o_e, lse_e = _online(scores, values, lazy=False)
    o_l, lse_l = _online(scores, values, lazy=True)
    assert torch.allclose(o_e, o_l, rtol=1e-12, atol=1e-12)
    assert torch.allclose(lse_e, lse_l, rtol=1e-12, atol=1e-12)
    ref = torch.softmax(scores * math.log(2.0), dim=1) @ values
    assert torch.allclose(o_l, ref, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("schedule", ["sequence", "balanced"])
@pytest.mark.parametrize("rescale", ["lazy", "eager"])
def test_both_rescales_compile_for_sm90(schedule, rescale):
    pytest.importorskip("cuda.tile")
    plan = registry.get_plan(V5)
    p = MlaDecodeProblem(b=16, s_q=2, h_q=16, seqlen=700, varlen=True)
    t = plan.Tiling(schedule=schedule, rescale=rescale)
    info = plan.compile_only(p, "sm_90a", t)
    assert info["split_cubin_bytes"] > 0


GPU_PROBLEMS = [MlaDecodeProblem(b=7, s_q=1, h_q=16, seqlens=(0, 65, 0, 1, 64, 63, 4097)),
                MlaDecodeProblem(b=9, s_q=2, h_q=64, seqlen=3000, varlen=True),
                MlaDecodeProblem(b=4, s_q=4, h_q=128, seqlens=(3, 64, 129, 2000))]


@pytest.mark.gpu
@pytest.mark.parametrize("schedule", ["sequence", "balanced"])
@pytest.mark.parametrize("problem", GPU_PROBLEMS, ids=[p.key() for p in GPU_PROBLEMS])
def test_lazy_matches_reference(problem, schedule):
    plan = registry.get_plan(V5)
    if plan.unavailable():
        pytest.skip(plan.unavailable())
    t = dataclasses.replace(plan.Tiling(schedule=schedule), num_splits=1 if schedule == "balanced" else 3)
    assert_check_passes(plan, problem, seeds=(0, 1), extra_seeds=(0, 1), tiling=t)
