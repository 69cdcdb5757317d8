"""In-kernel timeline recording (device side), shared by CuTe DSL versions; host side and the
buffer's format: runtime/timeline.py.

A kernel takes an optional int64 tensor `tl [ctas, rows, slots]` (a trailing kernel parameter
that defaults to None) and makes a `Recorder` at its top:

    rec = timeline.Recorder.make(tl, SCHEMA, warp_idx)     # tl None: an inert recorder
    timeline.start(rec)
    ...
    timeline.mark(rec, "qk_start", p)                       # one line per phase boundary
    ...
    timeline.end(rec)

With `tl` None (the plain build) every call is a Python no-op at trace time, so the plain
build's IR - and its SASS - is what it was without the instrumentation; the kernel's mangled
name is unchanged too, since the parameter is not passed. With a tensor, the first warp of each
warpgroup (row = warp_idx // 4) records: every lane reads `clock64` (one SM counter, the same
value across the warp), lane 0 stores it to `tl[cta, row, slot]` when `cta < tl.shape[0]`.
`%globaltimer` is read only at the row's start and end (the header), to place CTAs.

`GlobaltimerProbe` is a one-thread kernel that reads (%globaltimer, clock64) back to back, from
which the host measures the global timer's resolution and the SM clock.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

from mla_var3.runtime.timeline import HEADER, Schema

I64 = cutlass.Int64
WARPS_PER_ROW = 4          # one recording warp per warpgroup


@cute.jit
def _store(tl: cute.Tensor, cta: cutlass.Int32, warp_idx: cutlass.Int32, slot: cutlass.Int32, value: cutlass.Int64):
    if warp_idx % WARPS_PER_ROW == 0:
        if cta < tl.shape[0]:
            if cute.arch.lane_idx() == 0:
                tl[cta, warp_idx // WARPS_PER_ROW, slot] = value


@cute.jit
def stamp(tl: cute.Tensor, cta: cutlass.Int32, warp_idx: cutlass.Int32, slot: cutlass.Constexpr[int]):
    """clock64 into `slot` of this warp's row (the first warp of each warpgroup; lane 0 stores)."""
    t = cute.arch.clock64()
    _store(tl, cta, warp_idx, slot, t)


@cute.jit
def stamp_iter(tl: cute.Tensor, cta: cutlass.Int32, warp_idx: cutlass.Int32, it: cutlass.Int32,
               base: cutlass.Constexpr[int], per_iter: cutlass.Constexpr[int], k: cutlass.Constexpr[int],
               max_iters: cutlass.Constexpr[int]):
    """clock64 into event k of iteration `it` (iterations past `max_iters` are not recorded)."""
    t = cute.arch.clock64()
    if it < max_iters:
        _store(tl, cta, warp_idx, base + it * per_iter + k, t)


@cute.jit
def stamp_header(tl: cute.Tensor, cta: cutlass.Int32, warp_idx: cutlass.Int32, end: cutlass.Constexpr[bool]):
    """The row's header: (globaltimer, clock64) at its start (with the SM id) or at its end."""
    gt = cute.arch.globaltimer()
    t = cute.arch.clock64()
    if cutlass.const_expr(end):
        _store(tl, cta, warp_idx, HEADER.index("gt_end"), gt)
        _store(tl, cta, warp_idx, HEADER.index("clk_end"), t)
    else:
        _store(tl, cta, warp_idx, HEADER.index("smid"), I64(cute.arch.smid()))
        _store(tl, cta, warp_idx, HEADER.index("gt_start"), gt)
        _store(tl, cta, warp_idx, HEADER.index("clk_start"), t)


class Recorder:
    """What the stamps need (the buffer, schema, linear CTA id, warp index), or an inert one.

    Used through the module functions `start(rec)`, `mark(rec, event, it)`, `end(rec)`: the DSL's
    region analysis treats a method call on a local object as a write that must be carried
    through dynamic `if`/`for` regions, which a plain Python object cannot be; a call of a
    module function with the object as an argument is only a read."""

    def __init__(self, tl, schema: Schema, cta, warp_idx):
        self.tl, self.schema, self.cta, self.warp_idx = tl, schema, cta, warp_idx

    @classmethod
    def make(cls, tl, schema: Schema, warp_idx) -> "Recorder":
        """A recorder for this CTA (linear id over the grid, x fastest), or an inert one if `tl` is None."""
        if tl is None:
            return cls(None, schema, None, None)
        bx, by, bz = cute.arch.block_idx()
        gx, gy, _ = cute.arch.grid_dim()
        return cls(tl, schema, (bz * gy + by) * gx + bx, warp_idx)

    @property
    def on(self) -> bool:
        return self.tl is not None


def start(rec: Recorder) -> None:
    """The row's start header (SM id, globaltimer, clock64); call once, early."""
    if rec.on:
        stamp_header(rec.tl, rec.cta, rec.warp_idx, False)


def end(rec: Recorder) -> None:
    """The row's end header (globaltimer, clock64); call once, last."""
    if rec.on:
        stamp_header(rec.tl, rec.cta, rec.warp_idx, True)


def mark(rec: Recorder, event: str, it=None) -> None:
    """clock64 for `event` of the schema (of iteration `it` if it is a per-iteration event)."""
    if not rec.on:
        return
    s = rec.schema
    if event in s.per_iter:
        stamp_iter(rec.tl, rec.cta, rec.warp_idx, it, s.iter_base, len(s.per_iter), s.per_iter.index(event),
                   s.max_iters)
    else:
        stamp(rec.tl, rec.cta, rec.warp_idx, s.slot(event))


# ---- the globaltimer probe ----------------------------------------------------------------------

class GlobaltimerProbe:
    """One thread reads (%globaltimer, clock64) `n` times back to back into gt[i], clk[i]."""

    @cute.jit
    def __call__(self, gt: cute.Tensor, clk: cute.Tensor, stream):
        self.globaltimer_probe_kernel(gt, clk).launch(grid=(1, 1, 1), block=(32, 1, 1), stream=stream)

    @cute.kernel
    def globaltimer_probe_kernel(self, gt: cute.Tensor, clk: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        if tidx == 0:
            for i in cutlass.range(gt.shape[0], unroll=1):
                g = cute.arch.globaltimer()
                c = cute.arch.clock64()
                gt[i] = g
                clk[i] = c


def probe_fake_arguments(_obj) -> tuple:
    from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream
    n = cute.sym_int(symbol="n")
    return (make_fake_compact_tensor(I64, (n,), assumed_align=8), make_fake_compact_tensor(I64, (n,), assumed_align=8),
            make_fake_stream(use_tvm_ffi_env_stream=True))
