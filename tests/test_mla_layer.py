"""The MLA layer: reference against a naive per-token loop, inputs, formulas, grids, validation,
page sizes (16, 32, 64) and what each plan declares about them."""
import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from mla_var3.errors import PlanError
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
                page = int(inputs.block_table[i, j // inputs.kv_cache.shape[1]])
                rows.append(inputs.kv_cache[page, j % inputs.kv_cache.shape[1], 0].double())
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
    mla.MlaDecodeProblem(b=4, s_q=1, h_q=3, seqlens=(1, 15, 16, 17), page_size=16),
    mla.MlaDecodeProblem(b=3, s_q=4, h_q=2, seqlens=(0, 3, 100), page_size=16),
    mla.MlaDecodeProblem(b=3, s_q=2, h_q=2, seqlens=(31, 32, 97), page_size=32),
], ids=lambda p: p.key())
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
    page64 = [p for p in check if p.page_size == 64]
    assert {p.h_q for p in page64} == {16, 64, 128} and {p.s_q for p in page64} == {1, 2}
    lens = {s for p in page64 for s in p.resolve_seqlens(0)}
    assert {1, 63, 64, 65} <= lens and any(s % 64 for s in lens)
    assert any(p.varlen for p in page64) and max(p.b for p in page64) == 64 and min(p.b for p in page64) == 1
    page16 = [p for p in check if p.page_size == 16]
    assert {(s_q, h_q) for s_q in (1, 2, 3, 4) for h_q in (8, 16, 32, 64, 128)} <= {(p.s_q, p.h_q) for p in page16}
    lens16 = {s for p in page16 for s in p.resolve_seqlens(0)}
    assert {0, 1, 15, 16, 17} <= lens16 and any(p.varlen for p in page16) and max(lens16) > 4096
    page32 = [p for p in check if p.page_size == 32]
    assert {p.h_q for p in page32} == {16, 64, 128} and {31, 32, 33} <= {s for p in page32 for s in p.resolve_seqlens(0)}
    assert len(check) == len(page64) + len(page16) + len(page32) <= 60, "the check grid stays a couple of minutes"
    assert len({p.key() for p in check}) == len(check)
    bench = mla.grid("bench")
    assert len(bench) == 36 and {p.b for p in bench} == {128} and {p.page_size for p in bench} == {64}
    assert {p.seqlen for p in bench} == {1024, 4096, 8192}
    pages = mla.grid("pages")
    assert len(pages) == 18 and {p.page_size for p in pages} == {16, 32, 64}
    assert {(p.b, p.seqlen, p.varlen) for p in pages} == {(128, 4096, False)}
    assert {p.h_q for p in pages} == {16, 64, 128} and {p.s_q for p in pages} == {1, 2}
    small = mla.grid("small_batch")                    # the MLA issue's small batches with long context
    assert {(p.b, p.h_q) for p in small} == {(b, h) for b in (1, 4, 16) for h in (16, 128)}
    assert {(p.s_q, p.seqlen, p.varlen, p.page_size) for p in small} == {(1, 32768, False, 64)}
    with pytest.raises(mla.ProblemError, match="grid"):
        mla.grid("nope")


@pytest.mark.parametrize("kwargs, match", [
    (dict(b=0), "b: expected"), (dict(s_q=0), "s_q"), (dict(h_q=129), "h_q"), (dict(seqlen=-1), "seqlen"),
    (dict(b=2, seqlens=(1, 2, 3)), "seqlens: expected 2"), (dict(b=1, seqlens=(-4,)), "seqlens"),
    (dict(b=1, seqlens=(4,), varlen=True), "not both"), (dict(softmax_scale=-1.0), "softmax_scale"),
    (dict(b=1.5), "b: expected an int"),
    (dict(page_size=128), r"^page_size: expected one of 16, 32, 64 \(rows per cache page\), got 128$"),
    (dict(page_size=16.0), "page_size: expected an int"),
])
def test_bad_problems_name_the_argument(kwargs, match):
    with pytest.raises(mla.ProblemError, match=match):
        mla.MlaDecodeProblem(**kwargs)


def _inputs():
    return mla.make_inputs(mla.MlaDecodeProblem(b=2, s_q=2, h_q=4, seqlen=70), seed=0)


@pytest.mark.parametrize("mutate, match", [
    (lambda x: dict(q=x.q.float()), "q: expected dtype torch.bfloat16"),
    (lambda x: dict(q=x.q[..., :512].contiguous()), r"q: expected shape \[b, s_q, h_q, 576\]"),
    (lambda x: dict(kv_cache=x.kv_cache[..., :512].contiguous()),
     r"kv_cache: expected shape \[num_blocks, page_size, 1, 576\], got \[4, 64, 1, 512\]"),
    (lambda x: dict(kv_cache=x.kv_cache.view(-1, 128, 1, 576)),
     r"^kv_cache: page size 128 \(dim 1\) is not supported; expected one of 16, 32, 64, got shape \[2, 128, 1, 576\]$"),
    (lambda x: dict(kv_cache=x.kv_cache.view(-1, 32, 1, 576)),     # page 32 is fine; 2 of its pages hold 64 rows
     "block_table: 2 pages per sequence cannot hold seqlen 70"),
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


# ---- page sizes ------------------------------------------------------------------------------

@pytest.mark.parametrize("page", [16, 32])
def test_inputs_of_smaller_pages_follow_the_contract(page):
    """Cache [num_blocks, page, 1, 576], block table sized by the page, NaN past each length in
    its last page and in every page no sequence uses, invalid entries past the end."""
    p = mla.MlaDecodeProblem(b=4, s_q=2, h_q=4, seqlens=(page - 1, page, page + 1, 1), page_size=page)
    x = mla.make_inputs(p, seed=0)
    assert x.kv_cache.shape == (4 * 2, page, 1, 576) and x.page_size == page
    assert x.block_table.shape == (4, 2)
    assert x.block_table[0, 1] == mla.INVALID_PAGE and x.block_table[1, 1] == mla.INVALID_PAGE
    assert x.block_table[2, 1] != mla.INVALID_PAGE
    last = int(x.block_table[0, 0])
    assert torch.isnan(x.kv_cache[last, page - 1]).all() and not torch.isnan(x.kv_cache[last, :page - 1]).any()
    full = int(x.block_table[1, 0])
    assert not torch.isnan(x.kv_cache[full]).any()
    used = set(x.block_table[x.block_table != mla.INVALID_PAGE].tolist())
    unused = [i for i in range(x.kv_cache.shape[0]) if i not in used]
    assert unused and all(torch.isnan(x.kv_cache[i]).all() for i in unused)
    mla.validate_inputs(x)
    mla.validate_values(x)
    assert mla.MlaDecodeProblem.from_inputs(x).page_size == page


def test_from_inputs_refuses_a_page_size_no_problem_has():
    x = mla.make_inputs(mla.MlaDecodeProblem(b=1, s_q=1, h_q=2, seqlens=(100,)), seed=0)
    from dataclasses import replace
    with pytest.raises(mla.InputError, match=r"kv_cache: page size 128 \(dim 1\) is not supported"):
        mla.MlaDecodeProblem.from_inputs(replace(x, kv_cache=x.kv_cache.view(-1, 128, 1, 576)))


def test_page_size_in_key_dict_and_cli():
    p16 = mla.MlaDecodeProblem(b=2, s_q=1, h_q=16, seqlens=(5, 40), page_size=16)
    assert p16.key() == "b=2,s_q=1,h_q=16,seqlens=5,40,page_size=16"
    assert p16.static_key() == "s_q=1,h_q=16,page_size=16"
    assert mla.MlaDecodeProblem.from_dict(p16.to_dict()) == p16 and p16.to_dict()["page_size"] == 16
    p64 = mla.MlaDecodeProblem(b=2, s_q=1, h_q=16, seqlen=40)
    assert p64.key() == "b=2,s_q=1,h_q=16,seqlen=40" and "page" not in p64.static_key()
    old = {k: v for k, v in p64.to_dict().items() if k != "page_size"}     # a record from before page sizes
    assert mla.MlaDecodeProblem.from_dict(old) == p64
    assert p16.small_variant().page_size == 16
    assert mla.MlaDecodeProblem(b=2, seqlen=100, page_size=16).footprint_bytes() < \
        mla.MlaDecodeProblem(b=2, seqlen=100).footprint_bytes()           # 7 pages of 16 rows, not 2 of 64


def test_sequential_page_order_lays_each_sequence_out_contiguously():
    """--page_order sequential: the same lengths and values' contract, each sequence's pages one
    run in order (DRAM locality of a large page); it shows in the key and the record, not in the
    static key (no kernel compiles for it)."""
    p = mla.MlaDecodeProblem(b=3, s_q=1, h_q=4, seqlens=(40, 1, 33), page_size=16, page_order="sequential")
    x = mla.make_inputs(p, seed=0)
    assert x.block_table.tolist() == [[0, 1, 2], [3, mla.INVALID_PAGE, mla.INVALID_PAGE], [6, 7, 8]]
    assert torch.isnan(x.kv_cache[2, 8:]).all() and not torch.isnan(x.kv_cache[2, :8]).any()
    assert torch.isnan(x.kv_cache[4]).all(), "pages no sequence uses stay NaN"
    mla.validate_inputs(x)
    mla.validate_values(x)
    assert p.key() == "b=3,s_q=1,h_q=4,seqlens=40,1,33,page_size=16,page_order=sequential"
    assert p.static_key() == "s_q=1,h_q=4,page_size=16"
    assert mla.MlaDecodeProblem.from_dict(p.to_dict()) == p
    assert p.small_variant().page_order == "sequential"
    assert torch.isfinite(mla.reference(x)[0]).all()
    with pytest.raises(mla.ProblemError, match=r"^page_order: expected one of random, sequential, got 'zigzag'$"):
        mla.MlaDecodeProblem(b=1, seqlen=4, page_order="zigzag")


RECORDS = sorted((Path(__file__).resolve().parents[1] / "records").glob("*.jsonl"))


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.name)
def test_committed_records_load_as_page_64_with_their_keys(path):
    """Records written before problems had a page size (no `page_size` in the dict) load as page
    size 64, and newer ones carry it; either way each problem dict loads with exactly the key it
    was stored under, and a check record's problems are still problems of the check grid (so
    tables and devlogs read as before)."""
    check_keys = {p.key() for p in mla.grid("check")}
    seen = other_kinds = 0
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("problem_kind", "mla_decode") != "mla_decode":
            other_kinds += 1
            continue
        prob = rec.get("problem")
        if isinstance(prob, dict) and "grid" not in prob:
            p = mla.MlaDecodeProblem.from_dict(prob)
            assert p.page_size == prob.get("page_size", 64) and p.key() == rec["problem_key"], rec["problem_key"]
            seen += 1
        elif isinstance(prob, dict) and prob.get("grid") == "check":
            keys = {c["problem_key"] for c in rec.get("cases", [])}
            assert keys <= check_keys, sorted(keys - check_keys)[:3]
            seen += 1
    assert seen or other_kinds or "profile" in path.name or "ncu" in path.name


def _mla_plans():
    from mla_var3.runtime import registry
    return [e.load() for e in registry.all_entries() if e.load().problem_kind is mla.MlaDecodeProblem]


@pytest.mark.parametrize("page", [16, 32])
def test_plans_declare_the_page_sizes_they_support(page):
    """The PyTorch baseline and flash_mla_decode_v5+ run pages of 16 and 32; every other version says
    why not (the check grid, the fuzz and the serving op skip it with that reason)."""
    problem = mla.MlaDecodeProblem(b=2, s_q=2, h_q=16, seqlens=(5, 300), page_size=page)
    plans = _mla_plans()
    assert {p.name for p in plans} >= {"torch_mla_decode_v1", "flash_mla_decode_v3", "ct_flash_mla_decode_v3",
                                       "flashmla_decode_v1"}
    for plan in plans:
        reasons = plan.supports(problem)
        if plan.name == "torch_mla_decode_v1" or (plan.design == "flash_mla_decode" and plan.version >= 5):
            assert reasons == []
            continue
        assert len(reasons) == 1 and reasons[0].startswith(f"page size {page}: "), (plan.name, reasons)
        assert reasons[0].endswith("page_size 64 only")
        assert plan.supports(dataclasses.replace(problem, page_size=64)) == [], plan.name
    v3 = next(p for p in plans if p.name == "flash_mla_decode_v3")
    with pytest.raises(PlanError, match=f"flash_mla_decode_v3 does not support {problem.key()}: page size {page}: "
                                        "maps one TMA box per 64-row page"):
        v3.require_supported(problem)


def test_the_pytorch_baseline_runs_every_page_size_on_the_cpu():
    from mla_var3.runtime import check, registry
    plan = registry.get_plan("torch_mla_decode_v1")
    problems = [mla.MlaDecodeProblem(b=3, s_q=s_q, h_q=8, seqlens=(0, 17, 200), page_size=page)
                for page in (16, 32, 64) for s_q in (1, 4)]
    results = check.check_plan(plan, problems, seeds=(0,), extra_seeds=(), device="cpu")
    assert [r.status for r in results] == ["pass"] * len(problems), [r.reason for r in results]
