"""FlashMLA's dense-decode Python API (deepseek-ai/FlashMLA 9241ae3, `flash_mla_interface.py`),
served by `mla_var3::mla_decode`.

Two call styles, as engines use them:

    sched_meta, _ = get_mla_metadata()                          # FlashMLA's current API
    out, lse = flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, 512, sched_meta, causal=True)

    tile_md, num_splits = get_mla_metadata(cache_seqlens, s_q * h_q // h_k, h_k)   # the older API
    out, lse = flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, 512, tile_md, num_splits, causal=True)

Our kernels compute their split schedule on the device inside the call, so the metadata carries
nothing they need; it records the shapes it was made for, and metadata from a call with other
shapes is a clear error. The metadata object holds ints only and the API reads shapes only, so
`torch.compile(fullgraph=True)` traces `flash_mla_with_kvcache` down to the custom op.
"""
import operator

import torch

from mla_var3.errors import InputError, UsageError
from mla_var3.layers.mla.decode import D_QK, D_V
from mla_var3.ops.dispatch import MAX_H_Q, MAX_S_Q, check_scale, check_tensors

TILE_SCHEDULER_METADATA_SIZE = 8      # FlashMLA's ints per row of tile_scheduler_metadata
BLOCK_M = 64                          # FlashMLA's q rows per block, in its num_sm_parts formula
CPU_SMS = 132                         # what metadata made on a CPU assumes (an H100/H200 SXM)
MAX_Q_TOKENS = MAX_S_Q * MAX_H_Q

# FlashMLA arguments for sparse attention, FP8 caches and attention sinks: not supported yet.
_SPARSE_ARGS = ("indices", "attn_sink", "extra_k_cache", "extra_indices_in_kvcache", "topk_length",
                "extra_topk_length")
_OLD_STYLE_ARGS = ("cache_seqlens", "num_q_tokens_per_head_k", "num_heads_k", "num_heads_q", "is_fp8_kvcache",
                   "topk")


class MlaSchedMeta:
    """What `get_mla_metadata()` returns (FlashMLA's `FlashMLASchedMeta`): empty until the first
    `flash_mla_with_kvcache` call, which records its shapes; later calls must have the same ones.
    Unlike FlashMLA's, it may be reused when the values of `cache_seqlens` change."""

    def __init__(self):
        self.have_initialized = False
        self.b = self.s_q = self.h_q = self.page_block_size = self.h_k = 0
        self.causal = False

    def describe(self) -> str:
        if not self.have_initialized:
            return "MlaSchedMeta(not used yet)"
        return (f"b={self.b}, s_q={self.s_q}, h_q={self.h_q}, page_block_size={self.page_block_size}, "
                f"h_k={self.h_k}, causal={self.causal}")

    __repr__ = describe


@torch.compiler.assume_constant_result
def _sm_count(device_type: str, index: int) -> int:
    if device_type != "cuda":
        return CPU_SMS
    return torch.cuda.get_device_properties(index).multi_processor_count


def _num_sm_parts(q_tokens_per_head_k: int, h_k: int, sms: int) -> int:
    """FlashMLA's rows of tile_scheduler_metadata for dense bf16 decode on SM90."""
    return max(sms // h_k // -(-q_tokens_per_head_k // BLOCK_M), 1)


def _device_index(t: torch.Tensor) -> int:
    if t.device.type != "cuda":
        return -1
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


def get_mla_metadata(*args, **kwargs):
    """FlashMLA's `get_mla_metadata`.

    No arguments (FlashMLA's current API): returns `(MlaSchedMeta(), None)`.
    `(cache_seqlens, num_q_tokens_per_head_k, num_heads_k[, num_heads_q, is_fp8_kvcache, topk])`
    (FlashMLA's older API): returns FlashMLA's tensors `(tile_scheduler_metadata int32
    [num_sm_parts, 8], num_splits int32 [b + 1])` on cache_seqlens' device, zero-filled (our
    kernels schedule on the device); their shapes record b and s_q * h_q / h_k as FlashMLA's do.
    Nothing reads the lengths' values."""
    if not args and not kwargs:
        return MlaSchedMeta(), None
    if "num_heads_per_head_k" in kwargs:         # FlashMLA's first release named it so
        kwargs["num_q_tokens_per_head_k"] = kwargs.pop("num_heads_per_head_k")
    if len(args) > len(_OLD_STYLE_ARGS):
        raise UsageError(f"get_mla_metadata: expected at most {len(_OLD_STYLE_ARGS)} arguments "
                         f"({', '.join(_OLD_STYLE_ARGS)}), got {len(args)}")
    given = dict(zip(_OLD_STYLE_ARGS, args))
    for k, v in kwargs.items():
        if k not in _OLD_STYLE_ARGS:
            raise UsageError(f"get_mla_metadata: unexpected argument {k!r} (expected {', '.join(_OLD_STYLE_ARGS)})")
        if k in given:
            raise UsageError(f"get_mla_metadata: {k} given twice")
        given[k] = v
    missing = [k for k in _OLD_STYLE_ARGS[:3] if k not in given]
    if missing:
        raise UsageError(f"get_mla_metadata: give no argument, or cache_seqlens, num_q_tokens_per_head_k and "
                         f"num_heads_k; missing {', '.join(missing)}")
    if given.get("is_fp8_kvcache", False):
        raise UsageError("is_fp8_kvcache: FP8 KV caches are not supported yet by mla_var3.ops (bf16 dense decode only)")
    if given.get("topk") is not None:
        raise UsageError("topk: sparse attention is not supported yet by mla_var3.ops (dense decode only)")
    seqlens = given["cache_seqlens"]
    if not isinstance(seqlens, torch.Tensor) or seqlens.dtype != torch.int32 or seqlens.dim() != 1:
        got = f"{seqlens.dtype} {list(seqlens.shape)}" if isinstance(seqlens, torch.Tensor) else type(seqlens).__name__
        raise InputError(f"cache_seqlens: expected int32 [b], got {got}")
    h_k, n = given["num_heads_k"], given["num_q_tokens_per_head_k"]
    if h_k != 1:
        raise UsageError(f"num_heads_k: expected 1 (MLA has one latent KV head), got {h_k!r}")
    try:
        ok = not isinstance(n, bool) and 1 <= operator.index(n) <= MAX_Q_TOKENS
    except TypeError:
        ok = False
    if not ok:
        raise UsageError(f"num_q_tokens_per_head_k: expected s_q * h_q // h_k in 1..{MAX_Q_TOKENS}, got {n!r}")
    n = operator.index(n)
    rows = _num_sm_parts(n, h_k, _sm_count(seqlens.device.type, _device_index(seqlens)))
    return (torch.zeros((rows, TILE_SCHEDULER_METADATA_SIZE), dtype=torch.int32, device=seqlens.device),
            torch.zeros((seqlens.shape[0] + 1,), dtype=torch.int32, device=seqlens.device))


def _check_metadata(meta, num_splits, q, k_cache, causal: bool) -> None:
    b, s_q, h_q = q.shape[0], q.shape[1], q.shape[2]
    page, h_k = k_cache.shape[1], k_cache.shape[2]
    if isinstance(meta, MlaSchedMeta):
        if num_splits is not None:
            raise UsageError(f"num_splits: expected None with the MlaSchedMeta of get_mla_metadata() (FlashMLA's "
                             f"current API), got {type(num_splits).__name__}")
        if not meta.have_initialized:            # the first call records its shapes, as FlashMLA's does
            meta.have_initialized = True
            meta.b, meta.s_q, meta.h_q, meta.page_block_size, meta.h_k = b, s_q, h_q, page, h_k
            meta.causal = bool(causal)
        elif (meta.b != b or meta.s_q != s_q or meta.h_q != h_q or meta.page_block_size != page
              or meta.h_k != h_k or meta.causal != bool(causal)):
            raise UsageError(f"tile_scheduler_metadata: made for a call with {meta.describe()}; this call has "
                             f"b={b}, s_q={s_q}, h_q={h_q}, page_block_size={page}, h_k={h_k}, causal={bool(causal)} "
                             f"(one get_mla_metadata() per shape)")
        return
    if not isinstance(meta, torch.Tensor):
        raise UsageError(f"tile_scheduler_metadata: expected what mla_var3.ops.get_mla_metadata returns "
                         f"(an MlaSchedMeta, or the older API's int32 tensor), got {type(meta).__name__}")
    if meta.dtype != torch.int32 or meta.dim() != 2 or meta.shape[1] != TILE_SCHEDULER_METADATA_SIZE:
        raise UsageError(f"tile_scheduler_metadata: expected int32 [num_sm_parts, {TILE_SCHEDULER_METADATA_SIZE}] "
                         f"from get_mla_metadata(cache_seqlens, ...), got {meta.dtype} {list(meta.shape)}")
    rows = _num_sm_parts(s_q * h_q // h_k, h_k, _sm_count(q.device.type, _device_index(q)))
    if meta.shape[0] != rows:
        raise UsageError(f"tile_scheduler_metadata: {list(meta.shape)} was made for other shapes; this call "
                         f"(s_q={s_q}, h_q={h_q}) needs get_mla_metadata(cache_seqlens, {s_q * h_q // h_k}, {h_k}), "
                         f"which makes [{rows}, {TILE_SCHEDULER_METADATA_SIZE}]")
    if num_splits is None:
        return
    if not isinstance(num_splits, torch.Tensor) or num_splits.dtype != torch.int32 or num_splits.dim() != 1:
        got = (f"{num_splits.dtype} {list(num_splits.shape)}" if isinstance(num_splits, torch.Tensor)
               else type(num_splits).__name__)
        raise UsageError(f"num_splits: expected the int32 [b + 1] tensor of get_mla_metadata(cache_seqlens, ...), "
                         f"got {got}")
    if num_splits.shape[0] != b + 1:
        raise UsageError(f"num_splits: [{num_splits.shape[0]}] was made for b={num_splits.shape[0] - 1}; this call "
                         f"has b={b} (expected [{b + 1}])")


def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata,
                           num_splits=None, softmax_scale=None, causal=False, is_fp8_kvcache=False, indices=None,
                           attn_sink=None, extra_k_cache=None, extra_indices_in_kvcache=None, topk_length=None,
                           extra_topk_length=None):
    """FlashMLA's `flash_mla_with_kvcache`, dense bf16 decode with a page size of 16, 32 or 64
    (FlashMLA's own: 64 only).

    q [b, s_q, h_q, 576] bf16; k_cache [num_blocks, page_size, 1, 576] bf16; block_table [b, max_blocks]
    int32; cache_seqlens [b] int32 (device values, never read on the host); head_dim_v 512;
    tile_scheduler_metadata (and num_splits with the older API) from `get_mla_metadata`;
    softmax_scale default 576 ** -0.5. causal=True masks token i of s_q to keys 0..seqlen-s_q+i;
    with s_q == 1 causal changes nothing. Returns (out [b, s_q, h_q, 512] in q's dtype, lse
    [b, h_q, s_q] float32; rows that see no key get out 0 and lse +inf). The kernel is the best
    registered version that supports the page size (docs/serving.md says which run which).

    Refused with one line each: sparse attention, FP8 caches and attention sinks (not supported
    yet), page sizes other than 16, 32 and 64, causal=False with s_q > 1 (FlashMLA then
    lets every token see every key; our kernels compute the causal decode only), and metadata made
    for other shapes."""
    if is_fp8_kvcache:
        raise UsageError("is_fp8_kvcache: FP8 KV caches are not supported yet by mla_var3.ops (bf16 dense decode only)")
    extras = {"indices": indices, "attn_sink": attn_sink, "extra_k_cache": extra_k_cache,
              "extra_indices_in_kvcache": extra_indices_in_kvcache, "topk_length": topk_length,
              "extra_topk_length": extra_topk_length}
    for name in _SPARSE_ARGS:
        if extras[name] is not None:
            what = "attention sinks are" if name == "attn_sink" else "sparse attention is"
            raise UsageError(f"{name}: {what} not supported yet by mla_var3.ops (dense decode only); pass None")
    if block_table is None or cache_seqlens is None:
        missing = "block_table" if block_table is None else "cache_seqlens"
        raise UsageError(f"{missing}: required for dense decode, got None")
    check_tensors(q, k_cache, block_table, cache_seqlens)
    if head_dim_v != D_V:
        raise UsageError(f"head_dim_v: expected {D_V} (the latent part of the {D_QK} cache columns), got {head_dim_v!r}")
    s_q = q.shape[1]
    if s_q > 1 and not causal:
        raise UsageError(f"causal=False with s_q={s_q}: FlashMLA would let every query token see every key; "
                         f"mla_var3.ops computes causal multi-token decode only (pass causal=True)")
    _check_metadata(tile_scheduler_metadata, num_splits, q, k_cache, causal)
    scale = D_QK ** -0.5 if softmax_scale is None else check_scale(softmax_scale)
    return torch.ops.mla_var3.mla_decode(q, k_cache, block_table, cache_seqlens, scale)
