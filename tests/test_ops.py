"""mla_var3.ops: FlashMLA's dense-decode API over our kernels (docs/serving.md).

CPU: the op against the float32 reference through the PyTorch baseline, torch.compile
(fullgraph) against eager, both get_mla_metadata styles, one clear error per bad argument, one
build per shape with no length value read. GPU (H200): eager, torch.compile and a CUDA graph
replayed with new lengths against the reference, through the chosen kernel and each language.
"""
import dataclasses
from pathlib import Path

import pytest
import torch

from mla_var3 import ops
from mla_var3.errors import InputError, MlaVar3Error, UsageError
from mla_var3.layers.mla import decode as mla
from mla_var3.ops import dispatch as op_impl
from mla_var3.runtime import registry

SHAPES = [
    mla.MlaDecodeProblem(b=4, s_q=1, h_q=8, seqlens=(0, 1, 64, 130)),
    mla.MlaDecodeProblem(b=3, s_q=2, h_q=16, seqlens=(128, 0, 65)),
    mla.MlaDecodeProblem(b=2, s_q=3, h_q=64, seqlens=(192, 7)),
    mla.MlaDecodeProblem(b=3, s_q=4, h_q=16, seqlens=(2, 256, 64)),
    mla.MlaDecodeProblem(b=2, s_q=1, h_q=64, seqlens=(0, 0)),
    mla.MlaDecodeProblem(b=2, s_q=2, h_q=8, seqlens=(100, 63), softmax_scale=0.07),
    mla.MlaDecodeProblem(b=3, s_q=4, h_q=8, seqlens=(15, 0, 100), page_size=16),
    mla.MlaDecodeProblem(b=2, s_q=1, h_q=16, seqlens=(33, 64), page_size=32),
]


@pytest.fixture(autouse=True)
def _fresh_op():
    ops.set_kernel(None)          # also clears the per-shape cache
    yield
    ops.set_kernel(None)


def _call(x, meta=None, num_splits=None, **kw):
    """flash_mla_with_kvcache as an engine calls it, on MlaDecodeInputs `x`."""
    meta = ops.get_mla_metadata()[0] if meta is None else meta
    kw.setdefault("causal", True)
    kw.setdefault("softmax_scale", x.softmax_scale)
    return ops.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.cache_seqlens, 512, meta, num_splits, **kw)


def _assert_matches(problem, x, outputs):
    out, lse = outputs
    assert out.shape == (x.b, x.s_q, x.h_q, 512) and out.dtype == x.q.dtype
    assert lse.shape == (x.b, x.h_q, x.s_q) and lse.dtype == torch.float32
    cmp = problem.compare((out, lse), problem.reference(x))
    assert cmp.passed, cmp.reason


# ---- CPU ------------------------------------------------------------------------------------

@pytest.mark.parametrize("problem", SHAPES, ids=[p.key() for p in SHAPES])
def test_op_matches_the_reference_on_cpu(problem):
    x = problem.make_inputs(seed=1)
    _assert_matches(problem, x, _call(x))
    assert [r["kernel"] for r in ops.kernels_in_use()] == ["torch_mla_decode_v1"]


def test_default_softmax_scale_is_576_to_the_minus_half():
    problem = mla.MlaDecodeProblem(b=2, s_q=1, h_q=8, seqlens=(70, 3))
    x = problem.make_inputs(seed=0)
    assert x.softmax_scale == 576 ** -0.5
    out, lse = _call(x, softmax_scale=None)
    _assert_matches(problem, x, (out, lse))


def test_causal_is_free_with_one_query_token():
    problem = mla.MlaDecodeProblem(b=2, s_q=1, h_q=8, seqlens=(70, 3))
    x = problem.make_inputs(seed=0)
    a, b = _call(x, causal=False), _call(x, causal=True)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_the_custom_op_is_registered_and_passes_opcheck():
    problem = mla.MlaDecodeProblem(b=2, s_q=2, h_q=8, seqlens=(70, 3))
    x = problem.make_inputs(seed=0)
    args = (x.q, x.kv_cache, x.block_table, x.cache_seqlens, x.softmax_scale)
    _assert_matches(problem, x, torch.ops.mla_var3.mla_decode(*args))
    torch.library.opcheck(torch.ops.mla_var3.mla_decode.default, args)


def test_one_build_per_shape_and_no_length_value_is_read(monkeypatch):
    builds = []
    real_build = op_impl._build

    def counting(q, k_cache, block_table, cache_seqlens, scale):
        def refuse(*a, **k):
            raise AssertionError("the build read a length value on the host")
        with monkeypatch.context() as m:
            m.setattr(torch.Tensor, "tolist", refuse)
            m.setattr(torch.Tensor, "item", refuse)
            m.setattr(torch.Tensor, "__int__", refuse, raising=False)
            rt = real_build(q, k_cache, block_table, cache_seqlens, scale)
        builds.append(tuple(q.shape))
        return rt
    monkeypatch.setattr(op_impl, "_build", counting)
    p1 = mla.MlaDecodeProblem(b=3, s_q=1, h_q=8, seqlens=(64, 64, 64))
    x1 = p1.make_inputs(seed=0)
    _call(x1)
    x1.cache_seqlens.copy_(torch.tensor([5, 0, 64], dtype=torch.int32))     # same shapes, new lengths
    p1b = dataclasses.replace(p1, seqlens=(5, 0, 64))
    _assert_matches(p1b, dataclasses.replace(x1, seqlens=(5, 0, 64)), _call(x1))
    assert builds == [(3, 1, 8, 576)] and len(ops.kernels_in_use()) == 1
    x2 = mla.MlaDecodeProblem(b=2, s_q=1, h_q=8, seqlens=(64, 64)).make_inputs(seed=0)
    _call(x2)
    assert builds == [(3, 1, 8, 576), (2, 1, 8, 576)] and len(ops.kernels_in_use()) == 2


def test_page_16_goes_to_the_best_version_that_supports_it(monkeypatch):
    """The op asks each candidate's supports(), best first: with a GPU's candidate list (CuTe DSL,
    cuTile, then PyTorch) a page-16 cache passes over the versions that declare page 64 only and
    lands on the PyTorch baseline; a page-64 cache would take the first. Shown here on the CPU."""
    gpu_order = [registry.get_plan(n) for n in ("flash_mla_decode_v3", "ct_flash_mla_decode_v3", "torch_mla_decode_v1")]
    monkeypatch.setattr(op_impl, "_candidates", lambda device, page_size=None: list(gpu_order))
    problem = mla.MlaDecodeProblem(b=2, s_q=2, h_q=16, seqlens=(40, 3), page_size=16)
    x = problem.make_inputs(seed=0)
    _assert_matches(problem, x, _call(x))
    assert [r["kernel"] for r in ops.kernels_in_use()] == ["torch_mla_decode_v1"]
    assert ops.kernels_in_use()[0]["k_cache"] == list(x.kv_cache.shape)
    asked = []

    def refuse_on_cpu(*args, **kwargs):       # what a GPU version's build does without a GPU, recorded
        asked.append("flash_mla_decode_v3")
        raise op_impl.PlanError("no GPU here")
    monkeypatch.setattr(gpu_order[0], "build", refuse_on_cpu)
    monkeypatch.setattr(op_impl, "_candidates", lambda device, page_size=None: [gpu_order[0], gpu_order[2]])
    y = mla.MlaDecodeProblem(b=2, s_q=2, h_q=16, seqlens=(40, 3)).make_inputs(seed=0)
    _call(y)                                  # page 64: v3 supports it, so it is built first
    assert asked == ["flash_mla_decode_v3"] and ops.kernels_in_use()[-1]["kernel"] == "torch_mla_decode_v1"


def test_a_page_size_no_version_supports_is_one_line():
    ops.set_kernel("flash_mla_decode_v3")
    x = mla.MlaDecodeProblem(b=2, s_q=1, h_q=8, seqlens=(9, 30), page_size=16).make_inputs(seed=0)
    with pytest.raises(op_impl.PlanError) as e:
        _call(x)
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("mla_decode: no kernel can run b=2, s_q=1, h_q=8, page size 16, 2 pages per "
                                   "sequence on cpu: flash_mla_decode_v3: page size 16: maps one TMA box per "
                                   "64-row page"), str(e.value)


def test_set_kernel_forces_a_version_and_refuses_peers():
    ops.set_kernel("torch_mla_decode")
    x = mla.MlaDecodeProblem(b=1, s_q=1, h_q=8, seqlens=(9,)).make_inputs(seed=0)
    _call(x)
    assert ops.kernels_in_use()[0]["kernel"] == "torch_mla_decode_v1"
    with pytest.raises(UsageError, match="set_kernel: expected a CuTe DSL, cuTile or PyTorch mla_decode version, got flashmla_decode_v1"):
        ops.set_kernel("flashmla_decode")


def _compiled_call_new_api(q, k_cache, block_table, cache_seqlens, meta, scale):
    return ops.flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, 512, meta,
                                      softmax_scale=scale, causal=True)


def _compiled_call_old_api(q, k_cache, block_table, cache_seqlens, tile_md, num_splits, scale):
    return ops.flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, 512, tile_md, num_splits,
                                      softmax_scale=scale, causal=True)


def _check_compiled(problem, device):
    """torch.compile(fullgraph=True) of a function calling the op, both APIs: eager's answer
    bit for bit on the CPU, the reference's within tolerance everywhere."""
    torch._dynamo.reset()
    x = problem.make_inputs(seed=2, device=device)
    eager = _call(x)
    _assert_matches(problem, x, eager)

    def same_as_eager(got):
        _assert_matches(problem, x, got)
        if device == "cpu":
            assert torch.equal(got[0], eager[0]) and torch.equal(got[1], eager[1])
    new_api = torch.compile(_compiled_call_new_api, fullgraph=True)
    meta, _ = ops.get_mla_metadata()
    args = (x.q, x.kv_cache, x.block_table, x.cache_seqlens)
    for _ in range(2):                               # first call records the shapes, the second checks them
        same_as_eager(new_api(*args, meta, x.softmax_scale))
    assert meta.have_initialized and (meta.b, meta.s_q, meta.h_q) == (x.b, x.s_q, x.h_q)
    old_api = torch.compile(_compiled_call_old_api, fullgraph=True)
    tile_md, num_splits = ops.get_mla_metadata(x.cache_seqlens, x.s_q * x.h_q, 1)
    same_as_eager(old_api(*args, tile_md, num_splits, x.softmax_scale))


def test_torch_compile_fullgraph_matches_eager_on_cpu():
    _check_compiled(mla.MlaDecodeProblem(b=3, s_q=2, h_q=16, seqlens=(128, 0, 65)), "cpu")


def test_torch_compile_surfaces_metadata_of_other_shapes():
    torch._dynamo.reset()
    x = mla.MlaDecodeProblem(b=2, s_q=1, h_q=8, seqlens=(3, 4)).make_inputs(seed=0)
    meta, _ = ops.get_mla_metadata()
    _call(x, meta)                                   # recorded for b=2
    y = mla.MlaDecodeProblem(b=3, s_q=1, h_q=8, seqlens=(3, 4, 5)).make_inputs(seed=0)
    f = torch.compile(_compiled_call_new_api, fullgraph=True)
    with pytest.raises(Exception, match="tile_scheduler_metadata: made for a call with b=2"):
        f(y.q, y.kv_cache, y.block_table, y.cache_seqlens, meta, y.softmax_scale)


def test_old_style_get_mla_metadata():
    problem = mla.MlaDecodeProblem(b=3, s_q=2, h_q=64, seqlens=(64, 1, 300))
    x = problem.make_inputs(seed=0)
    tile_md, num_splits = ops.get_mla_metadata(x.cache_seqlens, x.s_q * x.h_q, 1)
    assert tile_md.dtype == num_splits.dtype == torch.int32
    assert tuple(tile_md.shape) == (132 // 2, 8) and tuple(num_splits.shape) == (4,)   # 128 rows: 2 blocks of 64
    _assert_matches(problem, x, _call(x, tile_md, num_splits))
    _assert_matches(problem, x, _call(x, tile_md))          # the current API's num_splits=None
    kw_md, kw_ns = ops.get_mla_metadata(cache_seqlens=x.cache_seqlens, num_q_tokens_per_head_k=128,
                                        num_heads_k=1, num_heads_q=64)
    assert kw_md.shape == tile_md.shape and kw_ns.shape == num_splits.shape
    first_release = ops.get_mla_metadata(x.cache_seqlens, num_heads_per_head_k=128, num_heads_k=1)
    assert first_release[0].shape == tile_md.shape
    small = ops.get_mla_metadata(x.cache_seqlens, 8, 1)[0]
    assert tuple(small.shape) == (132, 8)
    meta, none = ops.get_mla_metadata()
    assert isinstance(meta, ops.MlaSchedMeta) and none is None and not meta.have_initialized


def test_the_serving_doc_example_runs():
    text = (Path(__file__).resolve().parents[1] / "docs" / "serving.md").read_text()
    example = text.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(example, "docs/serving.md", "exec"), {})


# ---- one clear error per bad argument --------------------------------------------------------

def _base():
    return mla.MlaDecodeProblem(b=2, s_q=2, h_q=8, seqlens=(70, 3)).make_inputs(seed=0)


def _kw(x, **over):
    kw = dict(q=x.q, k_cache=x.kv_cache, block_table=x.block_table, cache_seqlens=x.cache_seqlens, head_dim_v=512,
              tile_scheduler_metadata=ops.get_mla_metadata()[0], causal=True)
    kw.update(over)
    return kw


def _used_meta(x, **shape):
    """An MlaSchedMeta already used by a call of other shapes."""
    other = mla.MlaDecodeProblem(**{"b": x.b, "s_q": x.s_q, "h_q": x.h_q, **shape})
    y = dataclasses.replace(other, seqlens=(5,) * other.b).make_inputs(seed=0)
    meta, _ = ops.get_mla_metadata()
    _call(y, meta)
    return meta


def _page_cache(x, page):
    return torch.zeros(4, page, 1, 576, dtype=torch.bfloat16)


BAD_CALLS = {
    "q float32": (lambda x: _kw(x, q=x.q.float()), InputError, "q: expected dtype torch.bfloat16, got torch.float32"),
    "q float16": (lambda x: _kw(x, q=x.q.half(), k_cache=x.kv_cache.half()), InputError,
                  "q: expected dtype torch.bfloat16 (float16 is not supported yet)"),
    "k_cache dtype": (lambda x: _kw(x, k_cache=x.kv_cache.half()), InputError,
                      "k_cache: expected dtype torch.bfloat16 (q's), got torch.float16"),
    "k_cache fp8": (lambda x: _kw(x, k_cache=x.kv_cache.to(torch.float8_e4m3fn)), InputError,
                    "k_cache: expected dtype torch.bfloat16 (q's) (FP8 KV caches are not supported yet)"),
    "q not a tensor": (lambda x: _kw(x, q=x.q.float().numpy()), InputError, "q: expected a torch.Tensor, got ndarray"),
    "q head dim": (lambda x: _kw(x, q=x.q[..., :512].contiguous()), InputError,
                   "q: expected shape [b, s_q, h_q, 576], got [2, 2, 8, 512]"),
    "q 3-d": (lambda x: _kw(x, q=x.q[:, 0]), InputError, "q: expected shape [b, s_q, h_q, 576]"),
    "s_q 17": (lambda x: _kw(x, q=torch.zeros(2, 17, 8, 576, dtype=torch.bfloat16)), InputError,
               "q: expected 1..16 query tokens per sequence (dim 1, s_q), got 17"),
    "h_q 129": (lambda x: _kw(x, q=torch.zeros(2, 1, 129, 576, dtype=torch.bfloat16)), InputError,
                "q: expected 1..128 query heads (dim 2, h_q), got 129"),
    "page 128": (lambda x: _kw(x, k_cache=_page_cache(x, 128)), InputError,
                 "k_cache: page size 128 (dim 1) is not supported; expected one of 16, 32, 64, got shape [4, 128, 1, 576]"),
    "page 8": (lambda x: _kw(x, k_cache=_page_cache(x, 8)), InputError, "k_cache: page size 8 (dim 1) is not supported"),
    "k_cache 3-d": (lambda x: _kw(x, k_cache=x.kv_cache[:, :, 0]), InputError,
                    "k_cache: expected shape [num_blocks, page_size, 1, 576] (page size 16, 32, 64), got [4, 64, 576]"),
    "two kv heads": (lambda x: _kw(x, k_cache=torch.zeros(4, 64, 2, 576, dtype=torch.bfloat16)), InputError,
                     "k_cache: expected shape [num_blocks, page_size, 1, 576] (one latent KV head, 576 columns), "
                     "got [4, 64, 2, 576]"),
    "block_table int64": (lambda x: _kw(x, block_table=x.block_table.long()), InputError,
                          "block_table: expected int32 [b=2, max_blocks], got torch.int64 [2, 2]"),
    "block_table rows": (lambda x: _kw(x, block_table=x.block_table[:1]), InputError,
                         "block_table: expected int32 [b=2, max_blocks]"),
    "cache_seqlens length": (lambda x: _kw(x, cache_seqlens=x.cache_seqlens[:1]), InputError,
                             "cache_seqlens: expected int32 [b=2], got torch.int32 [1]"),
    "q not contiguous": (lambda x: _kw(x, q=x.q.transpose(1, 2)), InputError, "q: expected a contiguous tensor"),
    "head_dim_v": (lambda x: _kw(x, head_dim_v=576), UsageError,
                   "head_dim_v: expected 512 (the latent part of the 576 cache columns), got 576"),
    "causal False, s_q 2": (lambda x: _kw(x, causal=False), UsageError,
                            "causal=False with s_q=2: FlashMLA would let every query token see every key"),
    "softmax_scale nan": (lambda x: _kw(x, softmax_scale=float("nan")), UsageError,
                          "softmax_scale: expected a positive finite float, got nan"),
    "softmax_scale tensor": (lambda x: _kw(x, softmax_scale=torch.tensor(0.1)), UsageError,
                             "softmax_scale: expected a positive finite float"),
    "is_fp8_kvcache": (lambda x: _kw(x, is_fp8_kvcache=True), UsageError,
                       "is_fp8_kvcache: FP8 KV caches are not supported yet"),
    "indices": (lambda x: _kw(x, indices=torch.zeros(2, 2, 64, dtype=torch.int32), block_table=None), UsageError,
                "indices: sparse attention is not supported yet by mla_var3.ops (dense decode only); pass None"),
    "attn_sink": (lambda x: _kw(x, attn_sink=torch.zeros(8)), UsageError,
                  "attn_sink: attention sinks are not supported yet"),
    "extra_k_cache": (lambda x: _kw(x, extra_k_cache=x.kv_cache), UsageError,
                      "extra_k_cache: sparse attention is not supported yet"),
    "extra_indices_in_kvcache": (lambda x: _kw(x, extra_indices_in_kvcache=x.block_table), UsageError,
                                 "extra_indices_in_kvcache: sparse attention is not supported yet"),
    "topk_length": (lambda x: _kw(x, topk_length=x.cache_seqlens), UsageError,
                    "topk_length: sparse attention is not supported yet"),
    "extra_topk_length": (lambda x: _kw(x, extra_topk_length=x.cache_seqlens), UsageError,
                          "extra_topk_length: sparse attention is not supported yet"),
    "block_table None": (lambda x: _kw(x, block_table=None), UsageError, "block_table: required for dense decode"),
    "metadata of another b": (lambda x: _kw(x, tile_scheduler_metadata=_used_meta(x, b=3)), UsageError,
                              "tile_scheduler_metadata: made for a call with b=3, s_q=2, h_q=8, page_block_size=64, "
                              "h_k=1, causal=True; this call has b=2"),
    "metadata of another h_q": (lambda x: _kw(x, tile_scheduler_metadata=_used_meta(x, h_q=16)), UsageError,
                                "tile_scheduler_metadata: made for a call with b=2, s_q=2, h_q=16"),
    "metadata of another page size": (lambda x: _kw(x, tile_scheduler_metadata=_used_meta(x, page_size=16)), UsageError,
                                      "tile_scheduler_metadata: made for a call with b=2, s_q=2, h_q=8, "
                                      "page_block_size=16, h_k=1, causal=True; this call has b=2, s_q=2, h_q=8, "
                                      "page_block_size=64"),
    "metadata not ours": (lambda x: _kw(x, tile_scheduler_metadata=object()), UsageError,
                          "tile_scheduler_metadata: expected what mla_var3.ops.get_mla_metadata returns"),
    "num_splits with the new API": (lambda x: _kw(x, num_splits=torch.zeros(3, dtype=torch.int32)), UsageError,
                                    "num_splits: expected None with the MlaSchedMeta of get_mla_metadata()"),
    "old metadata of another b": (
        lambda x: _kw(x, **dict(zip(("tile_scheduler_metadata", "num_splits"),
                                    ops.get_mla_metadata(torch.zeros(3, dtype=torch.int32), 16, 1)))),
        UsageError, "num_splits: [4] was made for b=3; this call has b=2 (expected [3])"),
    "old metadata of another s_q*h_q": (
        lambda x: _kw(x, tile_scheduler_metadata=ops.get_mla_metadata(x.cache_seqlens, 128, 1)[0]), UsageError,
        "tile_scheduler_metadata: [66, 8] was made for other shapes; this call (s_q=2, h_q=8) needs "
        "get_mla_metadata(cache_seqlens, 16, 1), which makes [132, 8]"),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_arguments_are_one_line_errors(case):
    make, cls, message = BAD_CALLS[case]
    x = _base()
    with pytest.raises(cls) as e:
        ops.flash_mla_with_kvcache(**make(x))
    assert isinstance(e.value, MlaVar3Error) and "\n" not in str(e.value)
    assert str(e.value).startswith(message), str(e.value)


BAD_METADATA_CALLS = {
    "num_heads_k": ((torch.zeros(2, dtype=torch.int32), 8, 2), {}, UsageError,
                    "num_heads_k: expected 1 (MLA has one latent KV head), got 2"),
    "fp8": ((torch.zeros(2, dtype=torch.int32), 8, 1), {"is_fp8_kvcache": True}, UsageError,
            "is_fp8_kvcache: FP8 KV caches are not supported yet"),
    "topk": ((torch.zeros(2, dtype=torch.int32), 8, 1), {"num_heads_q": 8, "topk": 2048}, UsageError,
             "topk: sparse attention is not supported yet"),
    "seqlens int64": ((torch.zeros(2, dtype=torch.int64), 8, 1), {}, InputError,
                      "cache_seqlens: expected int32 [b], got torch.int64 [2]"),
    "tokens per head": ((torch.zeros(2, dtype=torch.int32), 0, 1), {}, UsageError,
                        "num_q_tokens_per_head_k: expected s_q * h_q // h_k in 1..2048, got 0"),
    "missing": ((torch.zeros(2, dtype=torch.int32),), {}, UsageError,
                "get_mla_metadata: give no argument, or cache_seqlens, num_q_tokens_per_head_k and num_heads_k"),
    "unknown": ((), {"seqlens": 3}, UsageError, "get_mla_metadata: unexpected argument 'seqlens'"),
}


@pytest.mark.parametrize("case", list(BAD_METADATA_CALLS))
def test_bad_get_mla_metadata_arguments_are_one_line_errors(case):
    args, kwargs, cls, message = BAD_METADATA_CALLS[case]
    with pytest.raises(cls) as e:
        ops.get_mla_metadata(*args, **kwargs)
    assert "\n" not in str(e.value) and str(e.value).startswith(message), str(e.value)


# ---- GPU (H200) -----------------------------------------------------------------------------

GPU_SHAPES = [
    mla.MlaDecodeProblem(b=4, s_q=1, h_q=8, seqlens=(0, 1, 64, 700)),
    mla.MlaDecodeProblem(b=3, s_q=2, h_q=16, seqlens=(63, 128, 1000)),
    mla.MlaDecodeProblem(b=2, s_q=4, h_q=64, seqlens=(5, 2000)),
    mla.MlaDecodeProblem(b=3, s_q=1, h_q=128, seqlens=(4096, 1, 640)),
    mla.MlaDecodeProblem(b=2, s_q=3, h_q=8, seqlens=(1300, 0), softmax_scale=0.05),
    mla.MlaDecodeProblem(b=3, s_q=4, h_q=32, seqlens=(15, 1000, 1), page_size=16),
    mla.MlaDecodeProblem(b=2, s_q=2, h_q=128, seqlens=(33, 3000), page_size=32),
]
GPU_IDS = [p.key() for p in GPU_SHAPES]
PAGE_16 = GPU_SHAPES[5]


def _newest(language):
    names = [e.name for e in registry.newest_entries()
             if e.language == language and e.load().problem_kind is mla.MlaDecodeProblem]
    return max(names, key=lambda n: registry.resolve(n).version) if names else None


def _usable(plan) -> bool:
    from mla_var3.runtime import devices
    return not plan.unavailable() and devices.arch_supported(plan.arch, devices.current_device().arch)


def _usable_or_skip(name, problem=None):
    from mla_var3.runtime import devices
    if name is None:
        pytest.skip("no such version")
    plan = registry.get_plan(name)
    if plan.unavailable():
        pytest.skip(f"{name}: {plan.unavailable()}")
    if not devices.arch_supported(plan.arch, devices.current_device().arch):
        pytest.skip(f"{name} needs {plan.arch}")
    if problem is not None and plan.supports(problem):
        pytest.skip(f"{name}: " + "; ".join(plan.supports(problem)))


def _preferred(problem) -> str:
    """What the op should choose: the first usable CuTe DSL version of the measured order
    (conf/ops/mla_decode_order.json) whose supports() accepts the problem (e.g. a page size),
    else the first usable version of another language, newest first."""
    for name in op_impl.measured_order(problem.page_size)["cute-dsl"]:
        plan = registry.get_plan(name)
        if _usable(plan) and not plan.supports(problem):
            return name
    entries = [e for e in registry.all_entries() if e.language in op_impl.LANGUAGE_ORDER[1:]]
    entries.sort(key=lambda e: (op_impl.LANGUAGE_ORDER.index(e.language), -e.version))
    for plan in (e.load() for e in entries):
        if plan.problem_kind is mla.MlaDecodeProblem and _usable(plan) and not plan.supports(problem):
            return plan.name
    raise AssertionError(f"no usable version supports {problem.key()}")


def _graph_replays_with_new_lengths(problem):
    """Capture one call (after a warm-up, as engines do), then replay with shorter lengths written
    into the same cache_seqlens: each replay must follow the new lengths."""
    x = problem.make_inputs(seed=3, device="cuda")
    meta, _ = ops.get_mla_metadata()
    _call(x, meta)                                   # warm-up: builds, compiles, allocates the workspace
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = _call(x, meta)
    for step, shrink in enumerate((lambda s: s // 2, lambda s: max(s - 64, 0), lambda s: 1 if s else 0)):
        lens = tuple(shrink(s) for s in problem.seqlens)
        x.cache_seqlens.copy_(torch.tensor(lens, dtype=torch.int32))
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        new = dataclasses.replace(problem, seqlens=lens)
        cmp = new.compare((out, lse), new.reference(dataclasses.replace(x, seqlens=lens)))
        assert cmp.passed, f"replay {step} with lengths {lens}: {cmp.reason}"


@pytest.mark.gpu
@pytest.mark.parametrize("problem", GPU_SHAPES, ids=GPU_IDS)
def test_gpu_eager_matches_the_reference_through_the_preferred_kernel(problem):
    """The first usable CuTe DSL version of the measured order (conf/ops/mla_decode_order.json)
    that takes the problem, whichever that is today."""
    x = problem.make_inputs(seed=1, device="cuda")
    _assert_matches(problem, x, _call(x))
    used = ops.kernels_in_use()[0]["kernel"]
    assert used == _preferred(problem), f"expected {_preferred(problem)}, the op chose {used}"


@pytest.mark.gpu
@pytest.mark.parametrize("problem", GPU_SHAPES[:3] + [PAGE_16], ids=GPU_IDS[:3] + [PAGE_16.key()])
def test_gpu_torch_compile_fullgraph_matches_eager_and_the_reference(problem):
    _check_compiled(problem, "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("problem", GPU_SHAPES, ids=GPU_IDS)
def test_gpu_cuda_graph_replays_with_new_lengths(problem):
    _graph_replays_with_new_lengths(problem)


@pytest.mark.gpu
@pytest.mark.parametrize("language", ["cute-dsl", "cutile", "torch"])
@pytest.mark.parametrize("problem", [GPU_SHAPES[0], GPU_SHAPES[2], PAGE_16], ids=[GPU_IDS[0], GPU_IDS[2], PAGE_16.key()])
def test_gpu_each_language_through_the_op(language, problem):
    """Forced to each language's newest version: eager and graph replay against the reference
    (the PyTorch fallback pads to the block table, so it too replays without a host sync); a
    version that declares the problem unsupported (a page size) is skipped with its reason."""
    name = _newest(language)
    _usable_or_skip(name, problem)
    ops.set_kernel(name)
    x = problem.make_inputs(seed=4, device="cuda")
    _assert_matches(problem, x, _call(x))
    assert ops.kernels_in_use()[0]["kernel"] == name
    _graph_replays_with_new_lengths(problem)


@pytest.mark.gpu
def test_gpu_old_style_metadata_in_a_cuda_graph():
    problem = mla.MlaDecodeProblem(b=3, s_q=2, h_q=16, seqlens=(500, 64, 1))
    x = problem.make_inputs(seed=0, device="cuda")
    tile_md, num_splits = ops.get_mla_metadata(x.cache_seqlens, x.s_q * x.h_q, 1)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert tuple(tile_md.shape) == (sms, 8) and tuple(num_splits.shape) == (4,) and tile_md.is_cuda
    _call(x, tile_md, num_splits)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = _call(x, tile_md, num_splits)
    lens = (250, 0, 1)
    x.cache_seqlens.copy_(torch.tensor(lens, dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    new = dataclasses.replace(problem, seqlens=lens)
    cmp = new.compare((out, lse), new.reference(dataclasses.replace(x, seqlens=lens)))
    assert cmp.passed, cmp.reason


@pytest.mark.gpu
def test_gpu_misaligned_q_is_refused():
    x = mla.MlaDecodeProblem(b=1, s_q=1, h_q=8, seqlens=(64,)).make_inputs(seed=0, device="cuda")
    _call(x)                                          # a GPU kernel is built for this shape
    if ops.kernels_in_use()[0]["kernel"].startswith("torch_"):
        pytest.skip("the PyTorch fallback does not need aligned tensors")
    flat = torch.empty(x.q.numel() + 1, dtype=x.q.dtype, device="cuda")
    q = flat[1:].view(x.q.shape)
    q.copy_(x.q)
    with pytest.raises(InputError, match="q: expected a 16-byte aligned tensor"):
        _call(dataclasses.replace(x, q=q))


def test_measured_order_names_registered_mla_versions_and_leads_the_candidates(monkeypatch):
    """conf/ops/mla_decode_order.json lists real mla_decode versions of its language, each once;
    the op tries them in that order (v4 before the newer but slower v7 and v8), then unlisted
    versions newest first."""
    order = op_impl.measured_order()
    for language, names in order.items():
        assert len(set(names)) == len(names), names
        for name in names:
            entry = registry.resolve(name)
            assert entry.name == name and entry.language == language
            assert entry.load().problem_kind is mla.MlaDecodeProblem
    cute = order["cute-dsl"]
    assert cute.index("flash_mla_decode_v4") < cute.index("flash_mla_decode_v7")
    assert cute.index("flash_mla_decode_v4") < cute.index("flash_mla_decode_v8")
    assert op_impl.preference("cute-dsl", "flash_mla_decode_v4") < op_impl.preference("cute-dsl", "flash_mla_decode_v7")
    assert op_impl.preference("cute-dsl", "flash_mla_decode_v99") > op_impl.preference("cute-dsl", cute[-1])
    assert op_impl.preference("cutile", "ct_flash_mla_decode_v99") == (1, 0)    # unlisted: newest first
    ct = order["cutile"]
    assert ct.index("ct_flash_mla_decode_v4") < ct.index("ct_flash_mla_decode_v5")   # v5 measured slower
    assert ct[:4] == ["ct_flash_mla_decode_v8", "ct_flash_mla_decode_v7", "ct_flash_mla_decode_v6", "ct_flash_mla_decode_v4"]
    # the candidate list on a GPU device, without asking torch about a GPU
    monkeypatch.setattr(op_impl, "_arch", lambda device: "sm_90a")
    names = [p.name for p in op_impl._candidates(torch.device("cuda"))]
    assert names[:len(cute)] == cute
    assert names.index("ct_flash_mla_decode_v3") < names.index("ct_flash_mla_decode_v1") < names.index("torch_mla_decode_v1")


def test_a_page_size_entry_puts_its_versions_first_at_that_page_size_only(monkeypatch):
    """`by_page_size` names registered versions of the order's languages; at that page size they
    lead the candidates (then the rest of the order, unchanged, each once); at other page sizes
    the order is the plain one."""
    monkeypatch.setattr(op_impl, "_arch", lambda device: "sm_90a")
    plain = op_impl.measured_order()
    by_page = op_impl._order_file().get("by_page_size", {})
    assert by_page, "conf/ops/mla_decode_order.json has no by_page_size entry"
    for page, langs in by_page.items():
        assert int(page) in mla.PAGE_SIZES
        for language, first in langs.items():
            assert all(registry.resolve(n).name == n and registry.resolve(n).language == language for n in first)
            order = op_impl.measured_order(int(page))[language]
            assert order[:len(first)] == first and sorted(order) == sorted(set(plain[language]) | set(first))
            names = [p.name for p in op_impl._candidates(torch.device("cuda"), int(page))]
            assert names[:len(first)] == first
    for page in mla.PAGE_SIZES:
        if str(page) not in by_page:
            assert op_impl.measured_order(page) == plain
