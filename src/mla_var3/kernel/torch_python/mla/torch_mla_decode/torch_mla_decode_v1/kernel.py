"""Batched bf16 MLA decode in PyTorch: gather pages, one bmm for scores, one for P·V.

What FlashMLA computes, written the way a PyTorch user would: scores in float32 from bf16
operands (`bmm(..., out_dtype=float32)` on CUDA), softmax in float32, P rounded to bf16 for
the P·V product (as the tensor-core kernels do), float32 accumulation. Sequences are padded to
the longest in a chunk of `batch_chunk` sequences; masked keys get P = 0 and their V rows are
zeroed, since cache rows past a sequence's end are NaN.
"""
from __future__ import annotations

import torch

from mla_var3.layers.mla.decode import D_QK, D_V


def _bmm_f32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """bf16 x bf16 -> float32 (tensor cores, fp32 accumulate and output) where torch has it."""
    if a.is_cuda:
        return torch.bmm(a, b, out_dtype=torch.float32)
    return torch.bmm(a.float(), b.float())


def decode_chunk(q, kv_pages, block_table, seqlens, max_seqlen: int, scale: float, out, lse) -> None:
    """q [n, s_q, h_q, 576]; kv_pages [num_blocks, page_size, 576] (any page size); block_table
    [n, pages]; seqlens [n] int32 (max_seqlen: their host max, so nothing syncs and the call can
    be captured in a CUDA graph); writes out, lse."""
    n, s_q, h_q, _ = q.shape
    rows = s_q * h_q
    num_blocks, page_size = kv_pages.shape[0], kv_pages.shape[1]
    pages = max(1, -(-max_seqlen // page_size))
    length = pages * page_size
    table = block_table[:, :pages].clamp(0, num_blocks - 1).long()     # invalid entries: masked below
    keys = kv_pages[table].reshape(n, length, D_QK)                     # [n, L, 576] bf16
    pos = torch.arange(length, device=q.device)
    token = torch.arange(s_q, device=q.device).repeat_interleave(h_q)  # row r -> query token r // h_q
    seq = seqlens.long()[:, None]
    limit = (seq - s_q + token[None, :] + 1).clamp(min=0) if s_q > 1 else seq.expand(n, rows)
    limit = torch.minimum(limit, seq)                                   # keys visible per row
    visible = pos[None, None, :] < limit[:, :, None]                    # [n, rows, L]

    scores = _bmm_f32(q.reshape(n, rows, D_QK), keys.transpose(1, 2)) * scale
    scores = scores.masked_fill(~visible, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isneginf(row_max), torch.zeros_like(row_max), row_max)
    p = torch.exp(scores - row_max)                                     # masked -> exactly 0
    row_sum = p.sum(dim=-1, keepdim=True)
    in_seq = (pos[None, :] < seq)[:, :, None]                           # V rows past the end are NaN
    values = keys[:, :, :D_V].masked_fill(~in_seq, 0)
    o = _bmm_f32(p.to(q.dtype), values)                                 # [n, rows, 512]
    empty = row_sum == 0
    o = torch.where(empty, torch.zeros_like(o), o / torch.where(empty, torch.ones_like(row_sum), row_sum))
    row_lse = torch.where(empty, torch.full_like(row_sum, float("inf")), torch.log(row_sum) + row_max)
    out.copy_(o.view(n, s_q, h_q, D_V).to(out.dtype))
    lse.copy_(row_lse.view(n, s_q, h_q).transpose(1, 2))


def mla_decode(inputs, out, lse, tiling) -> None:
    """The whole batch, `tiling.batch_chunk` sequences at a time (bounds the padded buffers)."""
    kv_pages = inputs.kv_cache.view(-1, inputs.kv_cache.shape[1], D_QK)      # [num_blocks, page_size, 576]
    host_lens = inputs.seqlens or tuple(inputs.cache_seqlens.tolist())
    step = tiling.batch_chunk
    for start in range(0, inputs.b, step):
        sl = slice(start, start + step)
        decode_chunk(inputs.q[sl], kv_pages, inputs.block_table[sl], inputs.cache_seqlens[sl],
                     max(host_lens[sl]), inputs.softmax_scale, out[sl], lse[sl])
