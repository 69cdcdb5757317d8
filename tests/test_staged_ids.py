"""flash_mla_decode_v43's staged_ids: the knob's default and validation; the split kernel's compiled
code (the K/V boxes are 2-D tensor copies over the cache's rows, Q's stay 3-D; staged_ids=False
builds v36's kernel); on the H200, v42 against the reference and bit for bit against v36 (the same
boxes from a different tensor map), with a multicast pair, and under a CUDA graph replayed with new
lengths."""
import dataclasses

import pytest

from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry

V43, V36 = "flash_mla_decode_v43", "flash_mla_decode_v36"


def _plan(name=V43):
    return registry.get_plan(name)


def test_staged_ids_is_on_by_default_and_a_bool():
    plan = _plan()
    p = MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=4096, page_size=16)
    t = plan.default_tiling(p)
    assert t.staged_ids is True
    with pytest.raises(PlanError, match=r"staged_ids must be True or False .* got 1"):
        plan.check_tiling(dataclasses.replace(t, staged_ids=1), p, None)
    assert {c.staged_ids for c in plan.autotune_configs(p)} == {True, False}


@pytest.mark.parametrize("page, pages_per_tile", [(16, 4), (64, 1)])
def test_staged_ids_sass(page, pages_per_tile):
    pytest.importorskip("cutlass")
    import compiled_sass as cs
    p = cs.small_decode(page)
    on = cs.split_opcode_counts(V43, p)
    off = cs.split_opcode_counts(V43, p, tiling=dataclasses.replace(_plan().default_tiling(p), staged_ids=False))
    # one 4-byte cp.async per page of the next tile, after the first tiles and in the refill loop
    assert on["LDGSTS.E"] == 2 * pages_per_tile and cs.count(off, "LDGSTS") == 0
    assert cs.count(on, "LDGDEPBAR") == 2
    assert off == cs.split_opcode_counts(V36, p)                        # off: v36's kernel
    for op in ("HGMMA", "SYNCS", "UTMALDG"):
        assert cs.count(on, op) == cs.count(off, op)


GPU_CASES = [
    MlaDecodeProblem(b=5, s_q=1, h_q=16, seqlens=(0, 17, 1000, 4097, 64), page_size=16),
    MlaDecodeProblem(b=9, s_q=4, h_q=16, seqlen=2000, varlen=True, page_size=32),
    MlaDecodeProblem(b=3, s_q=1, h_q=128, seqlens=(1, 130, 2049), page_size=16),     # a multicast pair
    MlaDecodeProblem(b=4, s_q=2, h_q=64, seqlens=(64, 65, 3000, 5), page_size=64),
]


def _gpu_plans():
    plan, base = _plan(), _plan(V36)
    if plan.unavailable():
        pytest.skip(plan.unavailable())
    return plan, base


@pytest.mark.gpu
@pytest.mark.parametrize("problem", GPU_CASES, ids=[p.key() for p in GPU_CASES])
def test_staged_ids_matches_reference_and_v36_bit_for_bit(problem):
    import torch

    from mla_var3.runtime import check
    plan, base = _gpu_plans()
    t = plan.default_tiling(problem)
    assert t.staged_ids
    results = check.check_plan(plan, [problem], seeds=(0, 1), extra_seeds=(0,), device="cuda")
    failed = [f"seed={r.seed} {r.dist}: {r.reason}" for r in results if not r.passed]
    assert results and not failed, "\n".join(failed)
    inputs = problem.make_inputs(seed=3, device="cuda")
    base_tiling = base.Tiling(**{k: v for k, v in t.to_dict().items() if k != "staged_ids"})
    outs = []
    for pl, tiling in ((plan, t), (base, base_tiling)):
        kern = pl.build(inputs, tiling)
        kern.compile()
        out = problem.make_outputs(inputs)
        kern.launch(inputs, out, kern.prepare(inputs))
        outs.append(out)
    torch.cuda.synchronize()
    for a, b in zip(*outs):
        assert torch.equal(a, b)


@pytest.mark.gpu
def test_staged_ids_cuda_graph_replay_with_new_lengths():
    from graph_replay import replay_with_new_lengths
    plan, _ = _gpu_plans()
    problem = MlaDecodeProblem(b=3, s_q=2, h_q=16, seqlens=(900, 900, 900), page_size=16)
    inputs = problem.make_inputs(seed=0, device="cuda")
    kern = plan.build(inputs, dataclasses.replace(plan.default_tiling(problem), order="longest_first", chunk=4))
    kern.compile()
    outputs, replayed = replay_with_new_lengths(problem, kern, inputs, (37, 0, 900))
    cmp = problem.compare(outputs, problem.reference(replayed))
    assert cmp.passed, cmp.reason
