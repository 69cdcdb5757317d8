"""MLA dense decode: DeepSeek-V3 absorbed MLA decode as FlashMLA defines it (`mla_decode`).

Everything a kernel version needs to be checked and measured lives here, once, behind the
problem contract (layers/base.py): the problem, input generation (paged cache of 16, 32 or 64
rows per page with pages in random order, NaN past each sequence's end), the float32 reference,
FlashMLA's tolerances, FLOP/byte counts (FlashMLA's formulas, so numbers compare), the named
`check`, `bench` and `pages` grids and the CLI flags. Versions never redefine any of it.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from mla_var3.errors import InputError, ProblemError, UsageError
from mla_var3.layers import compare as cmp
from mla_var3.layers.base import Comparison, Problem, tensor_bytes

D_QK = 576          # 512 latent + 64 rope
D_V = 512           # values are the first 512 dims of the same cache rows
PAGE_SIZE = 64      # rows per page of the paged cache: the default, and FlashMLA's only one
PAGE_SIZES = (16, 32, 64)   # page sizes a problem may have (MlaDecodeProblem.page_size)
PAGE_ORDERS = ("random", "sequential")   # where a sequence's pages lie in the cache (page_order)
H_KV = 1
INVALID_PAGE = 2147480000   # FlashMLA's poison for block_table entries past a sequence's end
MAX_SEQLEN = 1 << 20
MAX_BATCH = 4096


# FlashMLA's tolerances (tests/kernelkit/compare.py)
OUT_ABS, OUT_REL, OUT_COS = 8e-4, 2.01 / 128, 5e-6
LSE_ABS, LSE_REL = 1e-6, 8.01 / 65536
PEAKED_OUT_REL_NORM = 5e-3
DIMENSION_FLAGS = ("b", "s_q", "h_q", "seqlen", "page_size")


@dataclass(frozen=True)
class MlaDecodeInputs:
    q: torch.Tensor                 # [b, s_q, h_q, 576] bf16
    kv_cache: torch.Tensor          # [num_blocks, page_size (16/32/64), 1, 576] bf16
    block_table: torch.Tensor       # [b, max_blocks] int32
    cache_seqlens: torch.Tensor     # [b] int32
    softmax_scale: float
    seqlens: tuple[int, ...] = field(default=(), compare=False)   # host copy of cache_seqlens

    @property
    def b(self) -> int:
        return self.q.shape[0]

    @property
    def s_q(self) -> int:
        return self.q.shape[1]

    @property
    def h_q(self) -> int:
        return self.q.shape[2]

    @property
    def page_size(self) -> int:
        return self.kv_cache.shape[1]

    def host_seqlens(self) -> tuple[int, ...]:
        return self.seqlens or tuple(self.cache_seqlens.tolist())

    def nbytes(self) -> int:
        return tensor_bytes(self.q, self.kv_cache, self.block_table, self.cache_seqlens)


@dataclass(frozen=True)
class MlaDecodeProblem(Problem):
    """One decode call. `seqlen` is the mean length; `seqlens` (explicit) wins over it;
    `page_size` is the cache's rows per page (16, 32 or 64; FlashMLA's is 64). `page_order`
    places each sequence's pages: "random" (FlashMLA's test; the default) or "sequential" (one
    contiguous run per sequence), to separate DRAM locality from a kernel's per-page work.

    varlen draws lengths as FlashMLA's test does: max(N(seqlen, seqlen/2), s_q) with the seed.
    """
    kind: ClassVar[str] = "mla_decode"
    layer: ClassVar[str] = "mla"
    dists: ClassVar[tuple[str, ...]] = ("default", "peaked")

    b: int = 128
    s_q: int = 1
    h_q: int = 64
    seqlen: int = 4096
    varlen: bool = False
    seqlens: tuple[int, ...] | None = None
    softmax_scale: float | None = None   # None: 576 ** -0.5
    page_size: int = PAGE_SIZE           # rows per page of the paged cache: 16, 32 or 64
    page_order: str = "random"           # "random" or "sequential" (PAGE_ORDERS)

    def __post_init__(self):
        if self.seqlens is not None:
            object.__setattr__(self, "seqlens", tuple(int(s) for s in self.seqlens))
        self.validate()

    def validate(self) -> None:
        def need(ok: bool, msg: str):
            if not ok:
                raise ProblemError(msg)
        for name in DIMENSION_FLAGS:
            v = getattr(self, name)
            need(isinstance(v, int) and not isinstance(v, bool), f"{name}: expected an int, got {v!r}")
        need(1 <= self.b <= MAX_BATCH, f"b: expected 1..{MAX_BATCH}, got {self.b}")
        need(1 <= self.s_q <= 16, f"s_q: expected 1..16 (decode), got {self.s_q}")
        need(1 <= self.h_q <= 128, f"h_q: expected 1..128, got {self.h_q}")
        need(0 <= self.seqlen <= MAX_SEQLEN, f"seqlen: expected 0..{MAX_SEQLEN}, got {self.seqlen}")
        need(self.page_size in PAGE_SIZES,
             f"page_size: expected one of {', '.join(map(str, PAGE_SIZES))} (rows per cache page), got {self.page_size}")
        need(self.page_order in PAGE_ORDERS,
             f"page_order: expected one of {', '.join(PAGE_ORDERS)}, got {self.page_order!r}")
        if self.seqlens is not None:
            need(len(self.seqlens) == self.b,
                 f"seqlens: expected {self.b} lengths (one per sequence, b={self.b}), got {len(self.seqlens)}")
            need(all(0 <= s <= MAX_SEQLEN for s in self.seqlens),
                 f"seqlens: every length must be in 0..{MAX_SEQLEN}, got {list(self.seqlens)[:8]}")
            need(not self.varlen, "seqlens and varlen: give explicit lengths or --varlen, not both")
        if self.softmax_scale is not None:
            need(self.softmax_scale > 0 and math.isfinite(self.softmax_scale),
                 f"softmax_scale: expected a positive finite float, got {self.softmax_scale}")

    @property
    def scale(self) -> float:
        return self.softmax_scale if self.softmax_scale is not None else D_QK ** -0.5

    @property
    def causal(self) -> bool:
        return self.s_q > 1

    def resolve_seqlens(self, seed: int = 0) -> list[int]:
        """The per-sequence lengths this problem runs with (deterministic in the seed)."""
        if self.seqlens is not None:
            return list(self.seqlens)
        if not self.varlen:
            return [self.seqlen] * self.b
        g = torch.Generator().manual_seed(seed)
        drawn = torch.normal(float(self.seqlen), self.seqlen / 2, (self.b,), generator=g)
        return [max(int(x), self.s_q) for x in drawn.tolist()]

    def key(self) -> str:
        if self.seqlens is not None:
            lens = "seqlens=" + ",".join(map(str, self.seqlens)) if len(self.seqlens) <= 8 else \
                f"seqlens=explicit{len(self.seqlens)}(sum={sum(self.seqlens)})"
        else:
            lens = f"seqlen={self.seqlen}" + (",varlen" if self.varlen else "")
        scale = "" if self.softmax_scale is None else f",scale={self.softmax_scale:g}"
        return f"b={self.b},s_q={self.s_q},h_q={self.h_q},{lens}{self._page_label()}{scale}"

    def _size_label(self) -> str:
        """",page_size=N" when not FlashMLA's 64: keys (and tables) of page-64 problems read as
        they did before problems had a page size."""
        return "" if self.page_size == PAGE_SIZE else f",page_size={self.page_size}"

    def _page_label(self) -> str:
        """The size label, and ",page_order=sequential" when not random (likewise)."""
        order = "" if self.page_order == PAGE_ORDERS[0] else f",page_order={self.page_order}"
        return self._size_label() + order

    def static_key(self) -> str:
        # b, lengths and page order are dynamic in every kernel; the page size may be a compile-time constant
        return f"s_q={self.s_q},h_q={self.h_q}{self._size_label()}"

    def to_dict(self) -> dict:
        return {"b": self.b, "s_q": self.s_q, "h_q": self.h_q, "seqlen": self.seqlen,
                "varlen": self.varlen, "seqlens": list(self.seqlens) if self.seqlens else None,
                "softmax_scale": self.softmax_scale, "scale": self.scale, "page_size": self.page_size,
                "page_order": self.page_order}

    @classmethod
    def from_dict(cls, d: dict) -> "MlaDecodeProblem":
        """A record's problem; records written before problems had a page size mean 64."""
        scale = d.get("softmax_scale")
        if scale is not None and abs(scale - D_QK ** -0.5) < 1e-12:   # the default, spelled out
            scale = None
        return cls(b=d["b"], s_q=d["s_q"], h_q=d["h_q"], seqlen=d["seqlen"], varlen=d.get("varlen", False),
                   seqlens=tuple(d["seqlens"]) if d.get("seqlens") else None, softmax_scale=scale,
                   page_size=d.get("page_size", PAGE_SIZE), page_order=d.get("page_order", PAGE_ORDERS[0]))

    @staticmethod
    def schedule_contract(tiling) -> str | None:
        """Where a decode call's schedule work runs (KernelPlan.schedule_contract), from the tiling
        fields this layer's versions share, so no version package changes to declare it:
        FlashMLA's `metadata` (per_step / per_call); a split version's `schedule` (v36+: per_call /
        per_step) when its `order` is longest_first, else none (the grid order has no order
        kernel); an `order` field without `schedule` (v14-v35): per_call when longest_first;
        cuTile's `schedule` "balanced" (a schedule kernel in every call) / "sequence" (none).
        None where the tiling says nothing about it (torch, early versions)."""
        metadata = getattr(tiling, "metadata", None)
        if metadata in ("per_call", "per_step"):
            return metadata
        schedule, order = getattr(tiling, "schedule", None), getattr(tiling, "order", None)
        if schedule in ("per_call", "per_step"):
            return schedule if order in (None, "longest_first") else "none"
        if schedule == "balanced":
            return "per_call"
        if schedule == "sequence":
            return "none"
        if order is not None:
            return "per_call" if order == "longest_first" else "none"
        return None

    # ---- data -------------------------------------------------------------------------------
    def make_inputs(self, seed: int = 0, device="cpu", dist: str = "default",
                    data_seed: int | None = None) -> MlaDecodeInputs:
        if dist not in self.dists:
            raise ProblemError(f"dist: expected one of {self.dists}, got {dist!r}")
        return make_inputs(self, seed=seed, device=device, peaked=dist == "peaked", data_seed=data_seed)

    @classmethod
    def from_inputs(cls, inputs: MlaDecodeInputs) -> "MlaDecodeProblem":
        """The problem these inputs pose; the page size is the cache's dim 1."""
        check_page_size(inputs.kv_cache)
        seqlens = inputs.host_seqlens()
        return cls(b=inputs.b, s_q=inputs.s_q, h_q=inputs.h_q, seqlen=max(seqlens, default=0),
                   seqlens=tuple(seqlens), softmax_scale=inputs.softmax_scale, page_size=inputs.page_size)

    @classmethod
    def validate_inputs(cls, inputs, device_type: str | None = None) -> None:
        validate_inputs(inputs, device_type)

    @classmethod
    def validate_values(cls, inputs) -> None:
        validate_values(inputs)

    def input_bytes(self, inputs: MlaDecodeInputs) -> int:
        return inputs.nbytes()

    def make_outputs(self, inputs: MlaDecodeInputs, fill: float = float("nan")) -> tuple[torch.Tensor, torch.Tensor]:
        """(out [b, s_q, h_q, 512] in q's dtype, lse [b, h_q, s_q] float32), filled with `fill`."""
        return make_outputs(inputs, fill)

    def reference(self, inputs: MlaDecodeInputs) -> tuple[torch.Tensor, torch.Tensor]:
        return reference(inputs)

    def compare(self, outputs, reference, dist: str = "default", inputs=None) -> Comparison:
        (out, lse), (ref_out, ref_lse) = outputs, reference
        return compare(out, lse, ref_out, ref_lse, peaked=dist == "peaked")

    def flops_bytes(self, inputs: MlaDecodeInputs) -> tuple[int, int]:
        return flops_bytes(self, list(inputs.host_seqlens()))

    def small_variant(self) -> "MlaDecodeProblem":
        """Same s_q and h_q; an empty-ish, a mid and a long sequence with partial last pages, so
        split schedules and the combine run."""
        return MlaDecodeProblem(b=3, s_q=self.s_q, h_q=self.h_q, seqlens=(1, 700, 1300),
                                softmax_scale=self.softmax_scale, page_size=self.page_size,
                                page_order=self.page_order)

    def footprint_bytes(self) -> int:
        """q + paged cache (+ its float32 draw, made before the bf16 copy) + block table + out and
        lse, and the float32 reference's out."""
        lens = self.resolve_seqlens(0) if self.varlen else (list(self.seqlens) if self.seqlens else [self.seqlen])
        pages = max(1, -(-max(lens, default=0) // self.page_size))
        rows = self.b * self.s_q * self.h_q
        cache = self.b * pages * self.page_size * D_QK * 2
        return rows * D_QK * 2 + 3 * cache + self.b * pages * 4 + rows * (D_V * 2 + 4) + rows * D_V * 4

    def input_facts(self, inputs: MlaDecodeInputs) -> dict:
        lens = inputs.host_seqlens()
        return {"mean_seqlen": sum(lens) / max(1, len(lens))}

    def peer_records(self, device) -> list[dict]:
        from mla_var3.layers.mla import peers
        rec = peers.peer_record(self, device, lambda lens: flops_bytes(self, lens))
        return [rec] if rec is not None else []

    # ---- CLI --------------------------------------------------------------------------------
    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("MLA decode problem (mla_decode)")
        g.add_argument("--b", type=int, dest="b", help="batch: sequences per call")
        g.add_argument("--s_q", "--s", type=int, dest="s_q", help="query tokens per sequence (1..16)")
        g.add_argument("--h_q", "--h", type=int, dest="h_q", help="query heads (1..128)")
        g.add_argument("--seqlen", "--t", type=int, dest="seqlen", help="KV length (mean with --varlen)")
        g.add_argument("--varlen", action="store_true", help="lengths ~ max(N(seqlen, seqlen/2), s_q)")
        g.add_argument("--seqlens", type=str, help="explicit lengths, comma-separated (sets b)")
        g.add_argument("--page_size", type=int, dest="page_size",
                       help=f"rows per page of the paged cache: {', '.join(map(str, PAGE_SIZES))} (default {PAGE_SIZE})")
        g.add_argument("--page_order", choices=PAGE_ORDERS, dest="page_order",
                       help="where each sequence's pages lie: random (default, FlashMLA's test) or "
                            "sequential (one contiguous run per sequence: DRAM locality of a large page)")

    @classmethod
    def from_cli(cls, args: argparse.Namespace) -> list["MlaDecodeProblem"] | None:
        given = {k: getattr(args, k, None) for k in DIMENSION_FLAGS + ("page_order",)
             if getattr(args, k, None) is not None}
        if getattr(args, "seqlens", None) is not None:
            try:
                lens = tuple(int(x) for x in args.seqlens.split(",") if x.strip())
            except ValueError:
                raise UsageError(f"--seqlens: expected comma-separated ints, got {args.seqlens!r}") from None
            if not lens:
                raise UsageError(f"--seqlens: expected at least one length (comma-separated ints), got {args.seqlens!r}")
            if "seqlen" in given:
                raise UsageError("--seqlens and --seqlen: give explicit lengths or one length, not both")
            if "b" in given and given["b"] != len(lens):
                raise ProblemError(f"--b={given['b']} but --seqlens gives {len(lens)} lengths")
            given["b"] = len(lens)
            given["seqlens"] = lens
            given["seqlen"] = max(lens)
        if getattr(args, "varlen", False):
            given["varlen"] = True
        return [cls(**given)] if given else None


def page_size_reasons(problem: MlaDecodeProblem, supported: tuple[int, ...], why: str) -> list[str]:
    """For a plan's `supports`: [] when the problem's page size is one of `supported`, else one
    reason, "page size 16: <why>; page_size 64 only"."""
    if problem.page_size in supported:
        return []
    return [f"page size {problem.page_size}: {why}; page_size {' or '.join(map(str, supported))} only"]


def make_inputs(problem: MlaDecodeProblem, seed: int = 0, device: str | torch.device = "cpu",
                dtype: torch.dtype = torch.bfloat16, peaked: bool = False,
                data_seed: int | None = None) -> MlaDecodeInputs:
    """Inputs as FlashMLA's test draws them: N(0, 0.1^2) clamped to [-1, 1] ("peaked": N(0, 1)),
    pages in random order ("sequential": each sequence's pages one contiguous run, in order),
    cache rows past each length NaN, block-table entries past it invalid.
    Lengths come from `seed`; values and page order from `data_seed` (default: seed), so
    benchmark sets share lengths (and FLOPs) but not data."""
    seqlens = problem.resolve_seqlens(seed)
    b, s_q, h_q, page = problem.b, problem.s_q, problem.h_q, problem.page_size
    dev = torch.device(device)
    data_seed = seed if data_seed is None else data_seed
    g = torch.Generator(device=dev).manual_seed(data_seed + 1)   # drawn where used: GB-sized caches
    pages_per_seq = [max(1, -(-s // page)) for s in seqlens]
    max_blocks = max(pages_per_seq)
    num_blocks = b * max_blocks
    std = 1.0 if peaked else 0.1

    def draw(shape):
        x = torch.randn(shape, generator=g, device=dev, dtype=torch.float32).mul_(std)
        return (x if peaked else x.clamp_(-1, 1)).to(dtype)

    q = draw((b, s_q, h_q, D_QK))
    kv = draw((num_blocks, page, H_KV, D_QK))
    perm = (torch.randperm(num_blocks, generator=torch.Generator().manual_seed(data_seed + 2))
            if problem.page_order == "random" else torch.arange(num_blocks))
    block_table = perm.to(torch.int32).view(b, max_blocks).clone()
    used = torch.zeros(num_blocks, dtype=torch.bool)
    for i, s in enumerate(seqlens):
        n_pages = -(-s // page)
        used[block_table[i, :n_pages].long()] = True
        block_table[i, n_pages:] = INVALID_PAGE
        if s % page:                        # rows past the end inside the last page
            kv[int(block_table[i, n_pages - 1]), s % page:] = float("nan")
    # pages no sequence uses are NaN too: a kernel that strays there fails loudly
    kv[(~used).to(dev)] = float("nan")
    return MlaDecodeInputs(q=q, kv_cache=kv, block_table=block_table.to(dev),
                           cache_seqlens=torch.tensor(seqlens, dtype=torch.int32, device=dev),
                           softmax_scale=problem.scale, seqlens=tuple(seqlens))


def validate_inputs(inputs: MlaDecodeInputs, device_type: str | None = None) -> None:
    """Check inputs against the contract before any kernel sees them.

    `device_type` ("cuda"/"cpu") is what the kernel needs; None accepts either."""
    def need(ok: bool, msg: str):
        if not ok:
            raise InputError(msg)
    need(isinstance(inputs, MlaDecodeInputs), f"inputs: expected MlaDecodeInputs, got {type(inputs).__name__}")
    q, kv, bt, sl = inputs.q, inputs.kv_cache, inputs.block_table, inputs.cache_seqlens
    for name, t in (("q", q), ("kv_cache", kv), ("block_table", bt), ("cache_seqlens", sl)):
        need(isinstance(t, torch.Tensor), f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    need(q.dtype == torch.bfloat16, f"q: expected dtype torch.bfloat16, got {q.dtype}")
    need(kv.dtype == q.dtype, f"kv_cache: expected dtype {q.dtype} (q's), got {kv.dtype}")
    need(q.dim() == 4 and q.shape[-1] == D_QK,
         f"q: expected shape [b, s_q, h_q, {D_QK}], got {list(q.shape)}")
    b = q.shape[0]
    need(kv.dim() == 4 and tuple(kv.shape[2:]) == (H_KV, D_QK),
         f"kv_cache: expected shape [num_blocks, page_size, {H_KV}, {D_QK}], got {list(kv.shape)}")
    check_page_size(kv)
    need(bt.dtype == torch.int32 and bt.dim() == 2 and bt.shape[0] == b,
         f"block_table: expected int32 [b={b}, max_blocks], got {bt.dtype} {list(bt.shape)}")
    need(sl.dtype == torch.int32 and tuple(sl.shape) == (b,),
         f"cache_seqlens: expected int32 [b={b}], got {sl.dtype} {list(sl.shape)}")
    devs = {t.device for t in (q, kv, bt, sl)}
    need(len(devs) == 1, f"inputs: expected every tensor on one device, got {sorted(map(str, devs))}")
    if device_type is not None:
        need(q.device.type == device_type,
             f"inputs: this kernel needs tensors on {device_type}, got {q.device}")
    for name, t in (("q", q), ("kv_cache", kv), ("block_table", bt), ("cache_seqlens", sl)):
        need(t.is_contiguous(), f"{name}: expected a contiguous tensor")
    if device_type == "cuda":              # GPU kernels read q and the cache through TMA
        check_tma_alignment(("q", q), ("kv_cache", kv))
    scale = inputs.softmax_scale
    need(isinstance(scale, (int, float)) and scale > 0 and math.isfinite(scale),
         f"softmax_scale: expected a positive finite float, got {scale!r}")
    if inputs.seqlens:
        need(len(inputs.seqlens) == b, f"seqlens: expected {b} host lengths, got {len(inputs.seqlens)}")
        need(max(inputs.seqlens) <= bt.shape[1] * kv.shape[1],
             f"block_table: {bt.shape[1]} pages per sequence cannot hold seqlen {max(inputs.seqlens)}")


def check_page_size(kv_cache: torch.Tensor, name: str = "kv_cache") -> None:
    """The cache's rows per page (dim 1) must be one of PAGE_SIZES; `name` is the caller's
    argument name (the serving op says k_cache)."""
    page = kv_cache.shape[1] if kv_cache.dim() >= 2 else None
    if page not in PAGE_SIZES:
        raise InputError(f"{name}: page size {page} (dim 1) is not supported; expected one of "
                         f"{', '.join(map(str, PAGE_SIZES))}, got shape {list(kv_cache.shape)}")


def check_tma_alignment(*named: tuple[str, torch.Tensor]) -> None:
    """TMA needs 16-byte aligned bases: a contiguous view that starts mid-vector is refused.
    `named`: (argument name, tensor) pairs, so each caller's message names its own argument."""
    for name, t in named:
        if t.data_ptr() % 16:
            raise InputError(f"{name}: expected a 16-byte aligned tensor (TMA), its address is "
                             f"{t.data_ptr() % 16} bytes past a 16-byte boundary")


def validate_values(inputs: MlaDecodeInputs) -> None:
    """What a kernel would otherwise read out of bounds or get silently wrong: lengths >= 0 and
    within the block table, the host copy of the lengths equal to cache_seqlens, and every page a
    sequence uses inside the cache. One device sync."""
    bt, sl, page = inputs.block_table, inputs.cache_seqlens, inputs.kv_cache.shape[1]
    lens = sl.tolist()
    if any(s < 0 for s in lens):
        raise InputError(f"cache_seqlens: lengths must be >= 0, got {min(lens)}")
    if inputs.seqlens and tuple(lens) != tuple(inputs.seqlens):
        i = next(i for i, (a, b) in enumerate(zip(inputs.seqlens, lens)) if a != b)
        raise InputError(f"seqlens: the host copy disagrees with cache_seqlens (sequence {i}: "
                         f"{inputs.seqlens[i]} vs {lens[i]})")
    if lens and max(lens) > bt.shape[1] * page:
        raise InputError(f"block_table: {bt.shape[1]} pages per sequence cannot hold seqlen {max(lens)}")
    n_pages = (sl.long() + page - 1) // page
    used = torch.arange(bt.shape[1], device=bt.device)[None, :] < n_pages[:, None]
    pages = bt[used]
    num_blocks = inputs.kv_cache.shape[0]
    if pages.numel() and bool(((pages < 0) | (pages >= num_blocks)).any()):
        bad = pages[(pages < 0) | (pages >= num_blocks)][0].item()
        raise InputError(f"block_table: page {bad} is outside the cache's {num_blocks} pages "
                         f"(entries for the pages a sequence uses must be in 0..{num_blocks - 1})")


def make_outputs(inputs: MlaDecodeInputs, fill: float = float("nan")) -> tuple[torch.Tensor, torch.Tensor]:
    """Output buffers (out in q's dtype, lse float32), poisoned so unwritten elements show."""
    b, s_q, h_q = inputs.b, inputs.s_q, inputs.h_q
    out = torch.full((b, s_q, h_q, D_V), fill, dtype=inputs.q.dtype, device=inputs.q.device)
    lse = torch.full((b, h_q, s_q), fill, dtype=torch.float32, device=inputs.q.device)
    return out, lse


def _gather_keys(inputs: MlaDecodeInputs, i: int, s: int) -> torch.Tensor:
    """Rows 0..s-1 of sequence i, in logical order, float32 [s, 576]."""
    pages = inputs.block_table[i, : -(-s // inputs.page_size)].long()
    return inputs.kv_cache[pages].reshape(-1, D_QK)[:s].float()


def visible_keys(seqlen: int, s_q: int, i: int) -> int:
    """How many keys query token i (0-based) of s_q sees: keys 0 .. seqlen - s_q + i (causal
    only when s_q > 1); clamped to 0..seqlen."""
    if s_q == 1:
        return seqlen
    return max(0, min(seqlen, seqlen - s_q + i + 1))


def reference(inputs: MlaDecodeInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Float32 reference, one sequence at a time. Returns out [b, s_q, h_q, 512] float32 and
    lse [b, h_q, s_q] float32 (natural log); rows with no visible key get out 0, lse +inf."""
    b, s_q, h_q = inputs.b, inputs.s_q, inputs.h_q
    dev = inputs.q.device
    out = torch.zeros(b, s_q, h_q, D_V, dtype=torch.float32, device=dev)
    lse = torch.full((b, h_q, s_q), float("inf"), dtype=torch.float32, device=dev)
    for i, s in enumerate(inputs.host_seqlens()):
        if s == 0:
            continue
        k = _gather_keys(inputs, i, s)                                # [s, 576]
        q = inputs.q[i].float()                                       # [s_q, h_q, 576]
        scores = torch.einsum("thd,kd->thk", q, k) * inputs.softmax_scale
        n_vis = torch.tensor([visible_keys(s, s_q, t) for t in range(s_q)], device=dev)
        mask = torch.arange(s, device=dev)[None, :] >= n_vis[:, None]   # [s_q, s]
        scores = scores.masked_fill(mask[:, None, :], float("-inf"))
        row_lse = torch.logsumexp(scores, dim=-1)                     # [s_q, h_q]
        p = torch.exp(scores - row_lse[..., None])
        p = torch.nan_to_num(p, nan=0.0)                              # rows that see nothing
        out[i] = torch.einsum("thk,kd->thd", p, k[:, :D_V])
        lse[i] = torch.where(torch.isneginf(row_lse), torch.inf, row_lse).T
    return out, lse


def compare(out: torch.Tensor, lse: torch.Tensor, ref_out: torch.Tensor, ref_lse: torch.Tensor,
            peaked: bool = False) -> Comparison:
    """A kernel's (out, lse) against the float32 reference's, with FlashMLA's tolerances: out
    against the reference rounded to out's dtype (element abs OR rel, plus cosine difference;
    on the peaked set the relative norm error), lse element-wise; inf/NaN positions must match."""
    if tuple(out.shape) != tuple(ref_out.shape) or tuple(lse.shape) != tuple(ref_lse.shape):
        return Comparison(False, f"shape: out {list(out.shape)} vs {list(ref_out.shape)}, "
                                 f"lse {list(lse.shape)} vs {list(ref_lse.shape)}")
    ref_out_q = ref_out.to(out.dtype).float()      # the reference rounded as the kernel's output is
    out_f = out.float()
    for name, a, b in (("out", out_f, ref_out_q), ("lse", lse.float(), ref_lse.float())):
        msg = cmp.special_positions_match(a, b)
        if msg:
            return Comparison(False, f"{name}: {msg}")
    errors = {}
    lse_ok, errors["lse_max_abs"], errors["lse_worst_rel"] = cmp.elementwise(lse.float(), ref_lse.float(),
                                                                             LSE_ABS, LSE_REL)
    if peaked:
        errors["out_rel_norm"] = cmp.rel_norm_error(out_f, ref_out)
        out_ok = errors["out_rel_norm"] <= PEAKED_OUT_REL_NORM
        why = f"out relative norm error {errors['out_rel_norm']:.3g} > {PEAKED_OUT_REL_NORM}"
    else:
        elem_ok, errors["out_max_abs"], errors["out_worst_rel"] = cmp.elementwise(out_f, ref_out_q, OUT_ABS, OUT_REL)
        errors["out_cos_diff"] = cmp.cosine_diff(out_f, ref_out_q)
        out_ok = elem_ok and errors["out_cos_diff"] <= OUT_COS
        why = (f"out max abs {errors['out_max_abs']:.3g} / rel {errors['out_worst_rel']:.3g} "
               f"(tol {OUT_ABS} or {OUT_REL:.4g}), cos diff {errors['out_cos_diff']:.3g} (tol {OUT_COS})")
    reasons = [] if out_ok else [why]
    if not lse_ok:
        reasons.append(f"lse max abs {errors['lse_max_abs']:.3g} / rel {errors['lse_worst_rel']:.3g} "
                       f"(tol {LSE_ABS} or {LSE_REL:.3g})")
    return Comparison(not reasons, "; ".join(reasons), errors)


def flops_bytes(problem: MlaDecodeProblem, seqlens: list[int] | None = None) -> tuple[int, int]:
    """FlashMLA's counts (causal masking not subtracted): FLOPs 2*s_q*h_q*sum(s)*(576+512);
    bytes 2*(sum(s)*576 + b*s_q*h_q*(576+512))."""
    total = sum(seqlens if seqlens is not None else problem.resolve_seqlens(0))
    rows = problem.s_q * problem.h_q
    flops = 2 * rows * total * (D_QK + D_V)
    nbytes = 2 * (total * D_QK + problem.b * rows * (D_QK + D_V))
    return flops, nbytes


# ---- named grids ---------------------------------------------------------------------------

def _check_grid() -> list[MlaDecodeProblem]:
    """Correctness. Page size 64: h_q 16/64/128, s_q 1/2, uniform + ragged + explicit odd lengths
    (1, 63, 64, 65, not multiples of 64), b 1..64. Page size 16: s_q 1..4 x h_q 8/16/32/64/128,
    one ragged problem per cell (lengths around page edges, 0, long and varlen), plus one long
    sequence. Page size 32: h_q 16/64/128 x s_q 1/2."""
    grid = []
    for h_q in (16, 64, 128):
        for s_q in (1, 2):
            grid += [
                MlaDecodeProblem(b=1, s_q=s_q, h_q=h_q, seqlen=1),
                MlaDecodeProblem(b=4, s_q=s_q, h_q=h_q, seqlens=(63, 64, 65, 1)),
                MlaDecodeProblem(b=3, s_q=s_q, h_q=h_q, seqlen=200),
                MlaDecodeProblem(b=16, s_q=s_q, h_q=h_q, seqlen=300, varlen=True),
                MlaDecodeProblem(b=64, s_q=s_q, h_q=h_q, seqlen=129, varlen=True),
            ]
    grid.append(MlaDecodeProblem(b=2, s_q=2, h_q=64, seqlens=(2, 1000)))
    page16 = [dict(b=4, seqlens=(15, 16, 17, 1)), dict(b=3, seqlens=(33, 100, 257)),
              dict(b=16, seqlen=300, varlen=True), dict(b=5, seqlens=(0, 2, 48, 999, 1025))]
    cells = [(s_q, h_q) for s_q in (1, 2, 3, 4) for h_q in (8, 16, 32, 64, 128)]
    grid += [MlaDecodeProblem(s_q=s_q, h_q=h_q, page_size=16, **page16[i % len(page16)])
             for i, (s_q, h_q) in enumerate(cells)]
    grid.append(MlaDecodeProblem(b=2, s_q=2, h_q=64, seqlens=(2, 5000), page_size=16))
    page32 = [dict(b=4, seqlens=(31, 32, 33, 1)), dict(b=32, seqlen=500, varlen=True)]
    cells = [(s_q, h_q) for h_q in (16, 64, 128) for s_q in (1, 2)]
    grid += [MlaDecodeProblem(s_q=s_q, h_q=h_q, page_size=32, **page32[i % len(page32)])
             for i, (s_q, h_q) in enumerate(cells)]
    return grid


def _bench_grid() -> list[MlaDecodeProblem]:
    """FlashMLA's table: b=128, s_q 1/2, h_q 16/64/128, seqlen 1024/4096/8192, fixed + varlen."""
    return [MlaDecodeProblem(b=128, s_q=s_q, h_q=h_q, seqlen=s, varlen=v)
            for v in (False, True) for s_q in (1, 2) for h_q in (16, 64, 128)
            for s in (1024, 4096, 8192)]


def _pages_grid() -> list[MlaDecodeProblem]:
    """What the page size costs: page 16/32/64 x h_q 16/64/128 x s_q 1/2, b=128, seqlen 4096."""
    return [MlaDecodeProblem(b=128, s_q=s_q, h_q=h_q, seqlen=4096, page_size=page)
            for s_q in (1, 2) for h_q in (16, 64, 128) for page in PAGE_SIZES]


def _smoke_grid() -> list[MlaDecodeProblem]:
    """Tiny problems the CPU can run in seconds (README's main job, CPU tests)."""
    return [MlaDecodeProblem(b=2, s_q=1, h_q=16, seqlens=(65, 130)),
            MlaDecodeProblem(b=2, s_q=2, h_q=16, seqlens=(1, 63))]


def _sanitize_grid() -> list[MlaDecodeProblem]:
    """compute-sanitizer's problem: small (it runs ~100x slower), causal, a ragged last page."""
    return [MlaDecodeProblem(b=2, s_q=2, h_q=16, seqlens=(65, 130))]


def _serving_grid() -> list[MlaDecodeProblem]:
    """The serving issue's speed targets (layers/mla/targets.py reads them from the records):
    page 16 vs page 64 and h_q 8/16/32 vs h_q 64, at b=128, seqlen 4096, s_q 1 and 4."""
    return [MlaDecodeProblem(b=128, s_q=s_q, h_q=h_q, seqlen=4096, page_size=page)
            for s_q in (1, 4) for h_q in (8, 16, 32, 64, 128) for page in (64, 16)]


def _small_batch_grid() -> list[MlaDecodeProblem]:
    """The MLA issue's small batches with long context: b 1/4/16, s_q=1, h_q 16/128, seqlen 32768
    (few sequences, so the split count and the combine decide the time)."""
    return [MlaDecodeProblem(b=b, s_q=1, h_q=h_q, seqlen=32768) for b in (1, 4, 16) for h_q in (16, 128)]


MlaDecodeProblem.grids = {"check": _check_grid, "bench": _bench_grid, "pages": _pages_grid, "serving": _serving_grid,
                          "small_batch": _small_batch_grid, "smoke": _smoke_grid, "sanitize": _sanitize_grid}


def grid(name: str) -> list[MlaDecodeProblem]:
    return MlaDecodeProblem.grid(name)
