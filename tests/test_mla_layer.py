"""The MLA layer: reference against a naive per-token loop, inputs, formulas, grids, validation."""
import math

import pytest
import torch

from mla_var3.layers.mla import decode as mla


def naive_reference(inputs):
    """One (sequence, query token, head) at a time, straight from the definition, float64."""
    b, s_q, h_q = inputs.b, inputs.s_q, inputs.h_q
    out = torch.zeros(b, s_q, h_q, mla.D_V, dtype=torch.float64)
    lse = torch.full((b, h_q, s_q), math.inf, dtype=torch.float64)
    for i, s in enumerate(inputs.cache_seqlens.tolist()):
        for t in range(s_q):
            n_vis = s if s_q == 1 else max(0, s - s_q + t + 1)
            rows = []
            for j in range(n_vis):
                page = int(inputs.block_table[i, j // mla.PAGE_SIZE])
                rows.append(inputs.kv_cache[page, j % mla.PAGE_SIZE, 0].double())
            if not rows:
                continue
            k = torch.stack(rows)
            for h in range(h_q):
                scores = (k @ inputs.q[i, t, h].double()) * inputs.softmax_scale
                m = scores.max()
                p = torch.exp(scores - m)
                out[i, t, h] = (p[:, None] * k[:, : mla.D_V]).sum(0) / p.sum()
                lse[i, h, t] = m + torch.log(p.sum())
    return out, lse


@pytest.mark.parametrize("problem", [
    mla.MlaDecodeProblem(b=3, s_q=1, h_q=3, seqlens=(1, 64, 70)),
    mla.MlaDecodeProblem(b=3, s_q=2, h_q=2, seqlens=(1, 2, 65)),
    mla.MlaDecodeProblem(b=2, s_q=3, h_q=2, seqlens=(0, 130)),
])
def test_reference_matches_naive_loop(problem):
    assert_reference_matches_naive(mla.make_inputs(problem, seed=3))


def assert_reference_matches_naive(inputs):
    """The float32 reference against the float64 per-token loop: inf positions, out and lse."""
    out, lse = mla.reference(inputs)
    n_out, n_lse = naive_reference(inputs)
    assert torch.equal(torch.isinf(lse), torch.isinf(n_lse))
    torch.testing.assert_close(out.double(), n_out, atol=1e-5, rtol=1e-5)
    fin = torch.isfinite(n_lse)
    torch.testing.assert_close(lse.double()[fin], n_lse[fin], atol=1e-5, rtol=1e-5)


def test_rows_with_no_visible_key_get_zero_and_inf():
    inputs = mla.make_inputs(mla.MlaDecodeProblem(b=1, s_q=2, h_q=4, seqlens=(1,)), seed=0)
    out, lse = mla.reference(inputs)
    assert torch.all(out[0, 0] == 0) and torch.all(torch.isposinf(lse[0, :, 0]))
    assert torch.isfinite(lse[0, :, 1]).all()


def test_inputs_follow_the_contract():
    p = mla.MlaDecodeProblem(b=4, s_q=2, h_q=16, seqlens=(63, 64, 65, 1))
    x = mla.make_inputs(p, seed=0)
    assert x.q.shape == (4, 2, 16, 576) and x.q.dtype == torch.bfloat16
    assert x.kv_cache.shape[1:] == (64, 1, 576)
    assert x.block_table.dtype == torch.int32 and x.cache_seqlens.tolist() == [63, 64, 65, 1]
    assert x.block_table[0, 1] == mla.INVALID_PAGE and x.block_table[2, 1] != mla.INVALID_PAGE
    last = int(x.block_table[0, 0])
    assert torch.isnan(x.kv_cache[last, 63]).all() and not torch.isnan(x.kv_cache[last, :63]).any()
    valid = x.block_table[x.block_table != mla.INVALID_PAGE].tolist()
    assert len(set(valid)) == len(valid) and 0 <= min(valid) and max(valid) < x.kv_cache.shape[0], \
        "every page a sequence uses must be its own, inside the cache"
    pages = mla.make_inputs(mla.MlaDecodeProblem(b=8, seqlen=640), seed=0).block_table.flatten().tolist()
    assert pages != sorted(pages), "pages must be in random order"
    assert q_within_clamp(x)
    mla.validate_inputs(x)


def q_within_clamp(x):
    return float(x.q.float().abs().max()) <= 1.0


def test_data_seed_changes_values_not_lengths():
    p = mla.MlaDecodeProblem(b=8, seqlen=300, varlen=True)
    a, b = mla.make_inputs(p, seed=5), mla.make_inputs(p, seed=5, data_seed=99)
    assert a.seqlens == b.seqlens and not torch.equal(a.q, b.q)


def test_varlen_draws_like_flashmla():
    p = mla.MlaDecodeProblem(b=256, s_q=2, seqlen=1000, varlen=True)
    lens = p.resolve_seqlens(0)
    assert lens == p.resolve_seqlens(0) and lens != p.resolve_seqlens(1)
    assert min(lens) >= 2 and len(set(lens)) > 100
    assert 850 < sum(lens) / len(lens) < 1150


def test_flops_bytes_match_flashmla_formulas():
    p = mla.MlaDecodeProblem(b=128, s_q=1, h_q=64, seqlen=4096)
    flops, nbytes = mla.flops_bytes(p)
    assert flops == 2 * 64 * 128 * 4096 * (576 + 512)
    assert nbytes == 2 * (128 * 4096 * 576 + 128 * 64 * (576 + 512))
    # FlashMLA's peer table: fixed, s_q=1, h_q=64, 4096 -> 164.5 us at 444 TFLOP/s, 3781 GB/s
    assert abs(flops / 164.5e-6 / 1e12 - 444) < 1.5 and abs(nbytes / 164.5e-6 / 1e9 - 3781) < 10


def test_grids_cover_what_the_design_asks():
    check = mla.grid("check")
    assert {p.h_q for p in check} == {16, 64, 128} and {p.s_q for p in check} == {1, 2}
    lens = {s for p in check for s in p.resolve_seqlens(0)}
    assert {1, 63, 64, 65} <= lens and any(s % 64 for s in lens)
    assert any(p.varlen for p in check) and max(p.b for p in check) == 64 and min(p.b for p in check) == 1
    bench = mla.grid("bench")
    assert len(bench) == 36 and {p.b for p in bench} == {128}
    assert {p.seqlen for p in bench} == {1024, 4096, 8192}
    with pytest.raises(mla.ProblemError, match="grid"):
        mla.grid("nope")


@pytest.mark.parametrize("kwargs, match", [
    (dict(b=0), "b: expected"), (dict(s_q=0), "s_q"), (dict(h_q=129), "h_q"), (dict(seqlen=-1), "seqlen"),
    (dict(b=2, seqlens=(1, 2, 3)), "seqlens: expected 2"), (dict(b=1, seqlens=(-4,)), "seqlens"),
    (dict(b=1, seqlens=(4,), varlen=True), "not both"), (dict(softmax_scale=-1.0), "softmax_scale"),
    (dict(b=1.5), "b: expected an int"),
])
def test_bad_problems_name_the_argument(kwargs, match):
    with pytest.raises(mla.ProblemError, match=match):
        mla.MlaDecodeProblem(**kwargs)


def _inputs():
    return mla.make_inputs(mla.MlaDecodeProblem(b=2, s_q=2, h_q=4, seqlen=70), seed=0)


@pytest.mark.parametrize("mutate, match", [
    (lambda x: dict(q=x.q.float()), "q: expected dtype torch.bfloat16"),
    (lambda x: dict(q=x.q[..., :512].contiguous()), r"q: expected shape \[b, s_q, h_q, 576\]"),
    (lambda x: dict(kv_cache=x.kv_cache.view(-1, 32, 1, 576)), "kv_cache: expected shape"),
    (lambda x: dict(kv_cache=x.kv_cache.half()), "kv_cache: expected dtype"),
    (lambda x: dict(block_table=x.block_table.long()), "block_table: expected int32"),
    (lambda x: dict(cache_seqlens=x.cache_seqlens[:1]), "cache_seqlens: expected int32"),
    (lambda x: dict(q=x.q.transpose(1, 2)), "q: expected a contiguous"),
    (lambda x: dict(softmax_scale=float("nan")), "softmax_scale"),
])
def test_bad_inputs_name_the_tensor(mutate, match):
    from dataclasses import replace
    x = _inputs()
    with pytest.raises(mla.InputError, match=match):
        mla.validate_inputs(replace(x, **mutate(x)))


def test_misaligned_inputs_are_refused_for_gpu_kernels():
    """TMA needs 16-byte aligned bases (validate_inputs runs this for device_type="cuda"); a
    contiguous view that starts 2 bytes in is refused."""
    x = _inputs()
    flat = torch.empty(x.q.numel() + 1, dtype=x.q.dtype)
    q = flat[1:].view(x.q.shape)
    assert q.is_contiguous() and q.data_ptr() % 16 == 2
    with pytest.raises(mla.InputError, match="q: expected a 16-byte aligned tensor .TMA., its address is 2 bytes"):
        mla.check_tma_alignment(("q", q), ("kv_cache", x.kv_cache))
    mla.check_tma_alignment(("q", x.q), ("kv_cache", x.kv_cache))


def test_inputs_on_the_wrong_device_are_refused():
    with pytest.raises(mla.InputError, match="needs tensors on cuda"):
        mla.validate_inputs(_inputs(), "cuda")


@pytest.mark.parametrize("change, match", [
    (lambda x: dict(seqlens=(65, 11)), r"seqlens: the host copy disagrees with cache_seqlens \(sequence 1: 11 vs 10\)"),
    (lambda x: dict(cache_seqlens=torch.tensor([300, 10], dtype=torch.int32), seqlens=()),
     "block_table: 2 pages per sequence cannot hold seqlen 300"),
    (lambda x: dict(block_table=torch.tensor([[0, 99], [1, 5]], dtype=torch.int32)),
     "block_table: page 99 is outside the cache's 4 pages"),
    (lambda x: dict(cache_seqlens=torch.tensor([-1, 10], dtype=torch.int32), seqlens=()),
     "cache_seqlens: lengths must be >= 0"),
    (lambda x: dict(q=x.q.float().numpy()), "q: expected a torch.Tensor, got ndarray"),
])
def test_plans_refuse_values_a_kernel_would_get_wrong(change, match):
    """Python API: what would read out of bounds or silently give wrong output is refused at build."""
    from dataclasses import replace

    from mla_var3.runtime import registry
    x = mla.MlaDecodeProblem(b=2, s_q=1, h_q=4, seqlens=(65, 10)).make_inputs()
    plan = registry.get_plan("torch_mla_decode_v1")
    with pytest.raises(mla.InputError, match=match):
        plan.build(replace(x, **change(x)))
    plan.build(replace(x, seqlens=(65, 11)), check_values=False)     # the opt-out skips the sync


def test_footprint_counts_the_cache_and_its_float32_draw():
    p = mla.MlaDecodeProblem(b=2, s_q=1, h_q=16, seqlens=(64, 129))
    cache = 2 * 3 * 64 * 576 * 2
    assert p.footprint_bytes() >= 3 * cache
    assert mla.MlaDecodeProblem(b=4096, seqlen=1 << 20).footprint_bytes() > 10e12
