"""The `mla_var3::mla_decode` custom op: tensor checks, kernel choice, cached runtime kernels.

One call is one MLA dense decode (the `mla_decode` problem kind, layers/mla/decode.py): q
[b, s_q, h_q, 576] bf16, a paged latent cache [num_blocks, page_size, 1, 576] (page size 16, 32 or
64, read from the cache's shape), block table and device
lengths in, (out [b, s_q, h_q, 512] in q's dtype, lse [b, h_q, s_q] float32) out; causal when
s_q > 1. The op never reads length values on the host: what it decides per call it decides from
shapes, dtypes and the device, so a call can be captured in a CUDA graph and replayed with new
`cache_seqlens` (the kernels compute their split schedule on the device).

Per (device, shapes, dtypes) the op builds one runtime kernel - the first registered version, in
`LANGUAGE_ORDER`, then in the measured order of `conf/ops/mla_decode_order.json` (fastest first,
with the versions measured fastest at this page size ahead; versions it does not list follow,
newest first), that runs on this device's arch and supports
the problem (page size included) - and keeps it. Tiling heuristics that look at lengths get a shape-only stand-in
(`_stand_in_length`).
"""
import json
import math
import os
import threading
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import torch

from mla_var3.errors import InputError, PlanError, UsageError
from mla_var3.layers.mla.decode import (D_QK, D_V, H_KV, MAX_BATCH, MAX_SEQLEN, PAGE_SIZES, MlaDecodeInputs,
                                        MlaDecodeProblem, check_page_size, check_tma_alignment)
from mla_var3.runtime import devices, registry

OP_NAME = "mla_var3::mla_decode"
LANGUAGE_ORDER = ("cute-dsl", "cutile", "torch")     # preference: CuTe DSL, then cuTile, then PyTorch
MAX_S_Q, MAX_H_Q = 16, 128
KERNEL_ENV = "MLA_VAR3_OPS_KERNEL"                   # force one version (name or design), e.g. for A/B


# ---- checks (host only: shapes, dtypes, devices; never values) --------------------------------

def check_tensors(q, k_cache, block_table, cache_seqlens) -> None:
    """The op's tensor contract; each violation is one InputError line naming the tensor."""
    for name, t in (("q", q), ("k_cache", k_cache), ("block_table", block_table), ("cache_seqlens", cache_seqlens)):
        if not isinstance(t, torch.Tensor):
            raise InputError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if q.dtype != torch.bfloat16:
        later = " (float16 is not supported yet)" if q.dtype == torch.float16 else ""
        raise InputError(f"q: expected dtype torch.bfloat16{later}, got {q.dtype}")
    if q.dim() != 4 or q.shape[3] != D_QK:
        raise InputError(f"q: expected shape [b, s_q, h_q, {D_QK}], got {list(q.shape)}")
    b, s_q, h_q = q.shape[0], q.shape[1], q.shape[2]
    if not 1 <= b <= MAX_BATCH:
        raise InputError(f"q: expected 1..{MAX_BATCH} sequences (dim 0), got {b}")
    if not 1 <= s_q <= MAX_S_Q:
        raise InputError(f"q: expected 1..{MAX_S_Q} query tokens per sequence (dim 1, s_q), got {s_q}")
    if not 1 <= h_q <= MAX_H_Q:
        raise InputError(f"q: expected 1..{MAX_H_Q} query heads (dim 2, h_q), got {h_q}")
    if k_cache.dtype != q.dtype:
        fp8 = " (FP8 KV caches are not supported yet)" if k_cache.element_size() == 1 else ""
        raise InputError(f"k_cache: expected dtype {q.dtype} (q's){fp8}, got {k_cache.dtype}")
    pages = ", ".join(map(str, PAGE_SIZES))
    if k_cache.dim() != 4:
        raise InputError(f"k_cache: expected shape [num_blocks, page_size, {H_KV}, {D_QK}] (page size {pages}), "
                         f"got {list(k_cache.shape)}")
    check_page_size(k_cache, "k_cache")
    if k_cache.shape[2] != H_KV or k_cache.shape[3] != D_QK or k_cache.shape[0] < 1:
        raise InputError(f"k_cache: expected shape [num_blocks, page_size, {H_KV}, {D_QK}] (one latent KV head, "
                         f"{D_QK} columns), got {list(k_cache.shape)}")
    if block_table.dtype != torch.int32 or block_table.dim() != 2 or block_table.shape[0] != b:
        raise InputError(f"block_table: expected int32 [b={b}, max_blocks], got {block_table.dtype} "
                         f"{list(block_table.shape)}")
    if block_table.shape[1] < 1:
        raise InputError(f"block_table: expected at least one page per sequence, got {list(block_table.shape)}")
    if cache_seqlens.dtype != torch.int32 or tuple(cache_seqlens.shape) != (b,):
        raise InputError(f"cache_seqlens: expected int32 [b={b}], got {cache_seqlens.dtype} "
                         f"{list(cache_seqlens.shape)}")
    dev = q.device
    if k_cache.device != dev or block_table.device != dev or cache_seqlens.device != dev:
        names = {str(t.device) for t in (q, k_cache, block_table, cache_seqlens)}
        raise InputError(f"inputs: expected q, k_cache, block_table and cache_seqlens on one device, got "
                         f"{sorted(names)}")
    for name, t in (("q", q), ("k_cache", k_cache), ("block_table", block_table), ("cache_seqlens", cache_seqlens)):
        if not t.is_contiguous():
            raise InputError(f"{name}: expected a contiguous tensor, got strides {list(t.stride())}")


def check_scale(softmax_scale) -> float:
    ok = isinstance(softmax_scale, (int, float)) and not isinstance(softmax_scale, bool)
    if not ok or not (softmax_scale > 0 and math.isfinite(softmax_scale)):
        raise UsageError(f"softmax_scale: expected a positive finite float, got {softmax_scale!r}")
    return float(softmax_scale)


# ---- kernel choice and the per-shape cache ----------------------------------------------------

@dataclass(frozen=True)
class _Runtime:
    """One shape's built runtime kernel."""
    kernel: str                      # the version, e.g. flash_mla_decode_v3
    kern: object                     # RuntimeKernel
    gpu: bool                        # a GPU kernel (TMA alignment checked per call)
    host_seqlens: tuple              # what launches carry as the host lengths (see _build)

    def launch(self, q, k_cache, block_table, cache_seqlens, scale: float):
        """Outputs and workspace come from torch's caching allocator on every call, as FlashMLA's
        own split buffers do: stream-ordered, from the graph's pool while a CUDA graph captures,
        and no memory held per shape (engines see hundreds of batch sizes). Both are sized from
        shapes only."""
        if self.gpu:       # TMA: checked per call, the runtime kernel is cached per shape
            check_tma_alignment(("q", q), ("k_cache", k_cache))
        inputs = MlaDecodeInputs(q, k_cache, block_table, cache_seqlens, scale, self.host_seqlens)
        b, s_q, h_q = q.shape[0], q.shape[1], q.shape[2]
        out = torch.empty((b, s_q, h_q, D_V), dtype=q.dtype, device=q.device)
        lse = torch.empty((b, h_q, s_q), dtype=torch.float32, device=q.device)
        got = self.kern.launch(inputs, (out, lse), self.kern.prepare(inputs))
        return (out, lse) if got is None else tuple(got)


_RUNTIMES: dict[tuple, _Runtime] = {}
_LOCK = threading.Lock()
_FORCED = [os.environ.get(KERNEL_ENV) or None]


def set_kernel(name: str | None) -> None:
    """Force one kernel version (or a design: its newest) for every later call, as the
    MLA_VAR3_OPS_KERNEL environment variable does at import; None: choose by preference again.
    Clears the cache of built kernels."""
    if name is not None:
        entry = registry.resolve(name)
        if entry.language not in LANGUAGE_ORDER or entry.load().problem_kind is not MlaDecodeProblem:
            raise UsageError(f"set_kernel: expected a CuTe DSL, cuTile or PyTorch mla_decode version, got "
                             f"{entry.name} ({entry.language})")
        name = entry.name
    _FORCED[0] = name
    clear_cache()


def clear_cache() -> None:
    """Forget every built runtime kernel (the next call of each shape rebuilds it)."""
    with _LOCK:
        _RUNTIMES.clear()


def kernels_in_use() -> list[dict]:
    """What the op built so far: one row per (device, shapes) with the kernel version chosen."""
    return [{"device": str(k[0]), "q": list(k[2]), "k_cache": list(k[3]), "block_table": list(k[4]),
             "kernel": r.kernel} for k, r in list(_RUNTIMES.items())]


def _arch(device: torch.device) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return devices.arch_from_capability(major, minor)


@lru_cache(maxsize=1)
def _order_file() -> dict:
    return json.loads(resources.files("mla_var3.conf").joinpath("ops", "mla_decode_order.json").read_text())


def measured_order(page_size: int | None = None) -> dict[str, list[str]]:
    """language -> version names, fastest measured first (conf/ops/mla_decode_order.json). With a
    page size, the versions its `by_page_size` entry lists go first (measured fastest at that
    page size, e.g. a split TMA issue that pays only where a tile is many small boxes)."""
    conf = _order_file()
    first = conf.get("by_page_size", {}).get(str(page_size), {}) if page_size is not None else {}
    return {lang: list(first.get(lang, [])) + [n for n in names if n not in first.get(lang, [])]
            for lang, names in conf["order"].items()}


def preference(language: str, name: str, page_size: int | None = None) -> tuple[int, int]:
    """Sort key within a language: listed versions by their measured rank, then the rest."""
    order = measured_order(page_size).get(language, [])
    return (0, order.index(name)) if name in order else (1, 0)


def _candidates(device: torch.device, page_size: int | None = None) -> list:
    """Plans to try, best first: CuTe DSL, cuTile, PyTorch; within each, the measured order at
    this page size (`preference`), then newest first; only those that run on this device (a CPU:
    PyTorch only)."""
    if _FORCED[0]:
        plan = registry.get_plan(_FORCED[0])
        if plan.language not in LANGUAGE_ORDER or plan.problem_kind is not MlaDecodeProblem:
            raise UsageError(f"{KERNEL_ENV}: expected a CuTe DSL, cuTile or PyTorch mla_decode version, got "
                             f"{plan.name} ({plan.language})")
        return [plan]
    langs = LANGUAGE_ORDER if device.type == "cuda" else ("torch",)
    entries = [e for e in registry.all_entries() if e.language in langs]
    entries.sort(key=lambda e: (langs.index(e.language), *preference(e.language, e.name, page_size), -e.version))
    plans = [p for p in (e.load() for e in entries) if p.problem_kind is MlaDecodeProblem]
    if device.type == "cuda":
        arch = _arch(device)
        plans = [p for p in plans if devices.arch_supported(p.arch, arch) and not p.unavailable()]
    return plans


def _stand_in_length(block_table, page_size: int) -> int:
    """The length every sequence gets in the problem the tiling is chosen for: the block table's
    capacity rounded down to a power of two pages (engines that size the table by the batch's
    longest sequence then reach a new tiling - for CuTe DSL a compile - only when it doubles)."""
    pages = 1 << (block_table.shape[1].bit_length() - 1)
    return min(pages * page_size, MAX_SEQLEN)


def _build(q, k_cache, block_table, cache_seqlens, scale: float) -> _Runtime:
    """Choose and build the runtime kernel for these shapes without reading a length value.

    `KernelPlan.build` derives the problem (for `supports` and the default tiling) from the
    inputs' host lengths; the op hands it a shape-only stand-in (`_stand_in_length`) so nothing
    syncs, and skips the value checks (`check_values=False`). Every tiling is correct for every
    length the block table holds (workspaces are sized by shape); the kernels read the real
    lengths from `cache_seqlens` on the device."""
    b, s_q, h_q, page = q.shape[0], q.shape[1], q.shape[2], k_cache.shape[1]
    stand_in = (_stand_in_length(block_table, page),) * b
    plan_inputs = MlaDecodeInputs(q, k_cache, block_table, cache_seqlens, scale, stand_in)
    problem = MlaDecodeProblem(b=b, s_q=s_q, h_q=h_q, seqlen=stand_in[0], seqlens=stand_in, page_size=page)
    gpu_device = q.device.type == "cuda"
    skipped = []
    for plan in _candidates(q.device, page):
        reasons = plan.supports(problem)
        if reasons:
            skipped.append(f"{plan.name}: {'; '.join(reasons)}")
            continue
        try:
            kern = plan.build(plan_inputs, check_values=False)
            kern.compile()
        except (PlanError, ImportError) as e:       # this version cannot run it here: try the next
            skipped.append(f"{plan.name}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
            continue
        gpu_kernel = plan.language != "torch"
        # The PyTorch baseline pads to the longest host length: on a GPU it gets the block
        # table's capacity (shape-only: no sync, graph-safe); on the CPU it reads the real
        # lengths (no sync to avoid there).
        host = (block_table.shape[1] * page,) * b if gpu_device and not gpu_kernel else ()
        return _Runtime(plan.name, kern, gpu_kernel, host)
    raise PlanError(f"mla_decode: no kernel can run b={b}, s_q={s_q}, h_q={h_q}, page size {page}, "
                    f"{block_table.shape[1]} pages per sequence on {q.device}: "
                    + ("; ".join(skipped) or "no candidate version"))


def runtime_for(q, k_cache, block_table, cache_seqlens, scale: float) -> _Runtime:
    key = (q.device, q.dtype, tuple(q.shape), tuple(k_cache.shape), tuple(block_table.shape), _FORCED[0])
    rt = _RUNTIMES.get(key)
    if rt is None:
        with _LOCK:
            rt = _RUNTIMES.get(key)
            if rt is None:
                rt = _RUNTIMES[key] = _build(q, k_cache, block_table, cache_seqlens, scale)
    return rt


# ---- the custom op ----------------------------------------------------------------------------

@torch.library.custom_op(OP_NAME, mutates_args=(),
                         schema="(Tensor q, Tensor k_cache, Tensor block_table, Tensor cache_seqlens, "
                                "float softmax_scale) -> (Tensor, Tensor)")
def mla_decode(q, k_cache, block_table, cache_seqlens, softmax_scale):
    """MLA dense decode (causal when s_q > 1): (out [b, s_q, h_q, 512], lse [b, h_q, s_q] float32)."""
    check_tensors(q, k_cache, block_table, cache_seqlens)
    scale = check_scale(softmax_scale)
    if q.is_cuda and q.device.index != torch.cuda.current_device():
        with torch.cuda.device(q.device):        # build and launch on q's device, on its current stream
            return _run(q, k_cache, block_table, cache_seqlens, scale)
    return _run(q, k_cache, block_table, cache_seqlens, scale)


def _run(q, k_cache, block_table, cache_seqlens, scale: float):
    return runtime_for(q, k_cache, block_table, cache_seqlens, scale).launch(q, k_cache, block_table,
                                                                             cache_seqlens, scale)


@mla_decode.register_fake
def _mla_decode_fake(q, k_cache, block_table, cache_seqlens, softmax_scale):
    check_tensors(q, k_cache, block_table, cache_seqlens)
    check_scale(softmax_scale)
    b, s_q, h_q = q.shape[0], q.shape[1], q.shape[2]
    return q.new_empty((b, s_q, h_q, D_V)), q.new_empty((b, h_q, s_q), dtype=torch.float32)
