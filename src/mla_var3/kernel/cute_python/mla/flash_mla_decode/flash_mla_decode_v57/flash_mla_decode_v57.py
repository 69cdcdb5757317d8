"""flash_mla_decode_v57: v46 with the row-max step on raw scores, as a tree, and the softmax scale in
the exponent's FFMA, `rowmax` (CuTe DSL, sm_90a).

What changed (one mechanism: the step between a warpgroup's QK^T and its exponentials). v46
multiplies each score by the scale (32 FMUL per thread per tile), folds them into each row's max
one after another (two chains of 16 dependent FMNMX), shuffles across the quad, and later computes
exp2(s - m) (FADD, MUFU). v57 takes the max of the raw scores pairwise (4 dependent FMNMX per row),
multiplies only the quad-reduced max by the scale, and computes exp2(s * c - m) (one FFMA per score,
short_rowmax.py, lazy_rescale.exp_against_lazy_max with `raw`). The scale is positive and rounding
monotonic, so the max is the same number; P differs from v46's by the rounding of one FFMA against
FMUL + FADD. `rowmax="fold"` keeps v46's chain order on raw scores (the scale move alone);
`rowmax="chain"` builds v46's kernel. Built on v46, the version in service (v47-v56 are quarantined).

Why: in v46's timelines the row-max span of warpgroup 0, which lies on the pair's critical chain
(QK^T of A -> row max -> exponentials -> barrier A -> WG1 -> barrier B), takes 3.2x warpgroup 1's
for the same SASS (468 / 144 cycles at s_q=1 h_q=128 4096 varlen, v46; 498 / 149 at s_q=2 h_q=128,
v54), and ncu's source counters put 5265 warp samples (3 launches; 3.5% of the split kernel's) on
those 72 instructions, a quarter of them dispatch stalls (docs/kernels/flash_mla_decode.md, "Issue 8
after v56"). Fewer and shorter-chained instructions there shorten the chain every pair waits on.

Device code: kernel.py (split: `rowmax_step`, `exp_step`), short_rowmax.py, lazy_rescale.py,
split_refill.py, tail_rows.py, common/split_order.py (order), combine.py (combine).
Devlog: docs/kernels/flash_mla_decode.md.

v46's docstring:

flash_mla_decode_v46: v44 with a partial last tile's rows past the sequence zeroed 16 bytes per
store, `wide_tail_zero` (CuTe DSL, sm_90a).

What changed (one mechanism: how the value rows past a sequence's length are cleared). Every
sequence whose length is not a multiple of 64 ends in a partial tile whose rows tail..63 must be
zero before P V reads them (the cache holds anything there, NaN included, and 0 * NaN = NaN).
v13-v44 clear them one bf16 per store through the swizzled view, up to 252 loop iterations per
thread; v46 writes whole 16-byte units through an unswizzled view of the same bytes (a row stays
in place under the 128-byte swizzle), at most 32 stores per thread (tail_rows.py).
`wide_tail_zero=False` builds v44's kernel.

Why: v44's timeline (every CTA recorded) on b=128 s_q=1 h_q=128 seqlen 4096 varlen put a one-tile
CTA at 15.5 us, 9 us of it in the publish step that waits for these stores, against about 1.8 us
per tile elsewhere; the varlen cells' CTA times fit 1.8 us per tile plus 8-10 us per CTA, the
fixed-length cells' (every tile full) no fixed cost. The varlen cells are issue 8's remaining gap
to FlashMLA; fixed lengths that are multiples of 64 never clear anything.

Device code: kernel.py (split), tail_rows.py (the clearing), split_refill.py (the refill),
common/split_order.py (order), combine.py (combine). Devlog: docs/kernels/flash_mla_decode.md.

v44's docstring:

flash_mla_decode_v44: v36 with full tiles' boxes issued without a branch per box,
`full_tile_issue` (CuTe DSL, sm_90a).

What changed (one mechanism: the shape of the refill's issue code). v36 issues each box of a tile
behind its page's `j < n_pages` test, and the compiled code at page 16 is one basic block per box:
reload the TMA descriptor's address (LDC), move the coordinates into uniform registers (R2UR), then
the UTMALDG, 36 such serial chains per tile. v44 tests once per refill whether every page of the
tile holds keys (all tiles but a sequence's last) and then issues each chunk's boxes with no branch
between them (split_refill.py, `issue_chunks_all`), the shape v41's 16-row boxes at page 64 compile
to (four chains interleaved, four UTMALDG back to back). A partial tile keeps v36's loop.
`full_tile_issue=False` builds v36's kernel; at page 64 (one page per tile) both are the same.

Why: v39-v43 removed every other candidate for page 16's extra 8-10% on the one-row-block serving
cells (docs/kernels/flash_mla_decode.md). What stays specific to page 16 is its sensitivity to the
issuing warps (one warp per stage: +17-20%; v41's page 64 in the same 16-row boxes: +2%), and the
one difference in the refill's compiled code between the two is this per-box branch.

Device code: kernel.py (split), split_refill.py (the refill), common/split_order.py (order),
combine.py (combine). Devlog: docs/kernels/flash_mla_decode.md.

v36's docstring:

flash_mla_decode_v36: v32 with a `schedule` knob: the longest-first order made in every call
("per_call", the default: v14-v32's contract) or once per decode step for all the calls on the same
lengths ("per_step", as FlashMLA's `get_mla_metadata`), outside the per-layer call.

What changed (one mechanism: where the order kernel runs). A ragged call of v32 runs order, split
and combine. The order depends only on the lengths and the split length, which a decode step's 61
layers share; v34 and v35 found the order kernel's 5-7 us (ncu) to be its fixed cost, which no
rewrite removes (docs/knowledge/anti-patterns/rewriting-a-launch-bound-kernel.md). With "per_step"
the order stage runs when the workspace is prepared for a set of lengths (`RuntimeKernel.prepare`,
where the harness's FlashMLA peer makes its per-step metadata too: `prepare_stages`), and each
call runs split and combine on it. Its contract is FlashMLA's: the prepared order is valid only for the lengths it was
made from, so a CUDA graph replayed with new lengths needs "per_call" (or a new prepare in the
step's graph). The split, combine and order kernels are v32's.

Device code: kernel.py (split), common/split_order.py (order), combine.py (combine).
Devlog: docs/kernels/flash_mla_decode.md.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace

from mla_var3.layers.mla.decode import D_QK, MlaDecodeProblem
from mla_var3.runtime.cute_kernel import CuteKernel, ensure_dsl_arch
from mla_var3.runtime.kernel_plan import KernelPlan, Tiling, smem_reasons
from mla_var3.runtime.runtime_kernel import RuntimeKernel

SMEM_BYTES = (64 * D_QK * 2) * 3 + 3072   # sQ + 2-stage sK ring (P lives in its rope chunks) + stats and barriers
SMS_H200 = 132
TILE = 64                                     # keys per KV tile, whatever the page size
MAX_CHUNK = 1 << 14                           # tiles per split; 2^14 tiles = 1M keys, the longest sequence
ORDERS = ("grid", "longest_first")
SCHEDULES = ("per_call", "per_step")         # v36: the order made in every call, or once per set of lengths
ROWMAX_MODES = ("tree", "fold", "chain")  # v57: the row-max step (short_rowmax.py); "chain" is v46's
REFILL_WARPS = (1, 2)                          # producer warps per stage (4 producer warps, 2 stages)
CLUSTER_ROWS = (1, 2)                          # v29: row-block CTAs per cluster sharing each K/V tile
COMBINE_WARPS = (1, 2, 4, 8)                 # warps per query row in the combine kernel (v17)
CTA_OVERHEAD_TILES = 6.0                      # a split CTA's fixed cost under full load, in tile times (v23:
                                              # fits v21's split-length sweep, records/2026-12-02-h200-
                                              # flash_mla_decode_v21-chunk-sweep-varlen1024.jsonl.gz)


@dataclass(frozen=True)
class FlashMlaSplitTiling(Tiling):
    chunk: int = 64             # KV tiles (pages) per split: a sequence of n tiles gets cdiv(n, chunk) splits
    block_n: int = 64           # keys per tile (64 // page_size pages)
    num_threads: int = 384      # 2 math warpgroups (each owns 256 of the 512 value columns) + the producer
    order: str = "grid"         # which split each CTA runs: "grid" (CTA (y, z) = split y of sequence z) or
                                # "longest_first" (an order kernel sorts the splits by size, largest first)
    combine_warps: int = 1      # warps per query row in the combine kernel, sharing the row's splits (v17)
    refill_warps: int = 1       # v27: producer warps issuing each stage's boxes (1: v23's, 2: v26's split issue)
    cluster_rows: int = 1       # v29: row-block CTAs per cluster (1: v28's single CTAs)
    multicast_kv: bool = True   # v32: a cluster's CTAs share each K/V tile by TMA multicast (v29's pair), or
                                # (False) each loads its own and the cluster only launches them together
    schedule: str = "per_call"  # v36: with order=longest_first, the order kernel in every call ("per_call") or
                                # once when the workspace is prepared for a set of lengths ("per_step")
    full_tile_issue: bool = True  # v44: full tiles' boxes with no branch per box (False: v36's loop)
    wide_tail_zero: bool = True   # v46: a partial last tile's rows past seqlen zeroed 16 bytes per store
                                  # (False: v13-v44's one bf16 per store)
    rowmax: str = "tree"          # v57: the row max on raw scores as a tree ("tree"), in v46's chain order
                                  # ("fold"), or v46's scaled chain ("chain"); short_rowmax.py

    def validate(self, problem, device) -> list[str]:
        reasons = []
        if not isinstance(self.chunk, int) or not 1 <= self.chunk <= MAX_CHUNK:
            reasons.append(f"chunk must be an int in 1..{MAX_CHUNK} (KV tiles per split), got {self.chunk!r}")
        if self.block_n != TILE:
            reasons.append(f"block_n must be {TILE} (one wgmma N of QK^T), got {self.block_n}")
        if self.num_threads != 384:
            reasons.append(f"num_threads must be 384 (two math warpgroups and a producer), got {self.num_threads}")
        if self.order not in ORDERS:
            reasons.append(f"order must be one of {', '.join(ORDERS)}, got {self.order!r}")
        if self.combine_warps not in COMBINE_WARPS:
            reasons.append(f"combine_warps must be one of {', '.join(map(str, COMBINE_WARPS))} (warps per query row "
                           f"in the combine), got {self.combine_warps!r}")
        if self.refill_warps not in REFILL_WARPS:
            reasons.append(f"refill_warps must be one of {', '.join(map(str, REFILL_WARPS))} (producer warps per KV "
                           f"stage), got {self.refill_warps!r}")
        if self.cluster_rows not in CLUSTER_ROWS:
            reasons.append(f"cluster_rows must be one of {', '.join(map(str, CLUSTER_ROWS))} (row-block CTAs "
                           f"per cluster), got {self.cluster_rows!r}")
        elif problem is not None and row_blocks(problem) % self.cluster_rows:
            reasons.append(f"cluster_rows={self.cluster_rows} needs a number of 64-row blocks divisible by it; "
                           f"s_q * h_q = {problem.s_q * problem.h_q} gives {row_blocks(problem)}")
        if self.schedule not in SCHEDULES:
            reasons.append(f"schedule must be one of {', '.join(SCHEDULES)} (the order made in every call, or once "
                           f"per set of lengths), got {self.schedule!r}")
        if not isinstance(self.full_tile_issue, bool):
            reasons.append(f"full_tile_issue must be True or False (full tiles' boxes issued with no branch per box), "
                           f"got {self.full_tile_issue!r}")
        if not isinstance(self.wide_tail_zero, bool):
            reasons.append(f"wide_tail_zero must be True or False (a partial last tile's rows past the length zeroed "
                           f"16 bytes per store, or one element per store), got {self.wide_tail_zero!r}")
        if self.rowmax not in ROWMAX_MODES:
            reasons.append(f"rowmax must be one of {', '.join(ROWMAX_MODES)} (the row max of raw scores as a tree, "
                           f"in v46's chain order, or v46's scaled chain), got {self.rowmax!r}")
        if not isinstance(self.multicast_kv, bool):
            reasons.append(f"multicast_kv must be True or False (whether a cluster's CTAs share each K/V tile), "
                           f"got {self.multicast_kv!r}")
        return reasons + smem_reasons(SMEM_BYTES, device)


def row_blocks(problem) -> int:
    """64-row blocks of one sequence's s_q * h_q query rows: the grid's x axis."""
    return -(-problem.s_q * problem.h_q // 64)


def default_cluster_rows(problem) -> int:
    """v32: the row blocks launch in clusters of two wherever they pair up, at every page size
    (v30: pages 16 and 32 only); whether the pair also shares its tiles is `default_multicast_kv`."""
    return 2 if row_blocks(problem) % 2 == 0 else 1


def default_multicast_kv(page_size: int) -> bool:
    """v30's choice, now per cluster: share the tiles by multicast where a tile is many page boxes
    (pages 16 and 32: v29 measured 1.09-1.13x and 1.01-1.03x v28 there); at page 64, where v29's
    lockstep cost 1-3.6% (records/2026-12-02-h200-flash_mla_decode_v29-v28-paired-cells.jsonl.gz),
    each CTA loads its own and the cluster only co-schedules the two."""
    return page_size < TILE


def default_chunk(b: int, rows: int, mean_tiles: float, sms: int = SMS_H200) -> int:
    """Splits per sequence so that b x row blocks x splits CTAs about fill the SMs once (at least
    one split); chunk = the mean length over that, so longer sequences get more splits."""
    row_blocks = -(-rows // 64)
    per_seq = max(1, round(sms / (b * row_blocks)))
    chunk = max(1, min(MAX_CHUNK, math.ceil(max(mean_tiles, 1) / per_seq)))
    return chunk + chunk % 2 if chunk > 1 else chunk     # even: tiles go to the warpgroups in pairs


def makespan(tiles: list[int], chunk: int, row_blocks: int, sms: int = SMS_H200,
             overhead: float = CTA_OVERHEAD_TILES) -> float:
    """Longest-first list schedule of the split CTAs (each split of each sequence, once per row
    block; an empty sequence still has its one split) on `sms` SMs, each CTA costing `overhead`
    plus its tiles: the finish time in tile times (calibrated in tests/test_model_chunk.py)."""
    works = sorted((min(chunk, n - k) for n in tiles for k in range(0, max(n, 1), chunk)), reverse=True)
    free = [0.0] * sms
    for w in works:
        for _ in range(row_blocks):
            heapq.heappush(free, heapq.heappop(free) + overhead + w)
    return max(free)


def model_chunk(tiles: list[int], rows: int, sms: int = SMS_H200) -> int:
    """v23: the split length of a ragged batch that the makespan model finishes first, among the
    even lengths from half to twice v21's mean-based choice (ties: the longer, fewer partials; at
    most ~32 candidates, so a long batch costs the host milliseconds, not seconds)."""
    base = default_chunk(len(tiles), rows, sum(tiles) / max(1, len(tiles)), sms)
    row_blocks = -(-rows // 64)
    lo = max(2, base // 2 // 2 * 2)
    step = max(2, base // 32 // 2 * 2)
    cands = range(lo, min(MAX_CHUNK, 2 * base) + 1, step)
    return min(cands, key=lambda c: (makespan(tiles, c, row_blocks, sms), -c))


def default_refill_warps(page_size: int) -> int:
    """v27: producer warps per stage. v26's two measured 1.10-1.24x v23 at page 16 (36 boxes per
    tile) and 0.96-1.02x at page 64 (9 boxes; the extra polling warps cost the compute-bound
    cells issue slots), records/2026-12-02-h200-flash_mla_decode_v26-v23-serving.jsonl.gz and
    ...-v26-v25-grid-interleaved.jsonl.gz. Page 32 (18 boxes) was not measured: it goes with 16."""
    return 1 if page_size >= TILE else 2


def default_combine_warps(max_splits: int) -> int:
    """Warps per query row in the combine: each warp keeps 2 splits' loads in flight, so a row of
    n splits takes about n / (2 x warps) rounds of DRAM latency; one warp up to 4 splits (the b=128
    grids: 1-2), up to 8 warps from 17 splits on (b=1 at seqlen 32768: 128)."""
    for warps, upto in ((1, 4), (2, 8), (4, 16)):
        if max_splits <= upto:
            return warps
    return 8


class FlashMlaDecodeV57(KernelPlan):
    name = "flash_mla_decode_v57"
    language = "cute-dsl"
    arch = ("sm_90a",)
    problem_kind = MlaDecodeProblem
    Tiling = FlashMlaSplitTiling
    quarantine = ("0.6-0.8% faster than v46 by median, inside one run's spread: v46 / v57 0.982-1.020 (tree) and "
                  "1.000-1.016 (fold) on the 18 compute-bound bench cells (H200, session 29; --check 174/174 and its "
                  "GPU tests pass); the shortened row-max step's wait moved to the quad shuffles")
    summary = "CuTe DSL: v46 with the row max on raw scores as a tree and the scale in the exponent (rowmax)"

    def supports(self, problem) -> list[str]:
        return super().supports(problem)        # page sizes 16, 32 and 64: all the problem allows

    def default_tiling(self, problem) -> FlashMlaSplitTiling:
        """Longest first when the sequences' tile counts differ (a ragged batch: the order kernel's
        few microseconds buy a balanced finish); the grid order when they are all equal (every
        split the same size: nothing to sort). v23: a ragged batch's split length is the one the
        makespan model finishes first (`model_chunk`); equal lengths keep v21's. v27: two
        producer warps per stage issue the boxes where a tile is many small boxes (page size 16
        or 32), one where it is 9 (page 64: `default_refill_warps`)."""
        lens = problem.resolve_seqlens(0)
        tiles = [-(-s // TILE) for s in lens]
        mean_tiles = sum(tiles) / max(1, len(lens))
        ragged = len(set(tiles)) > 1          # (b <= 4096 = what the order kernel sorts: the problem's own limit)
        rows = problem.s_q * problem.h_q
        chunk = model_chunk(tiles, rows) if ragged else default_chunk(problem.b, rows, mean_tiles)
        max_splits = max(1, -(-max(tiles, default=0) // chunk))
        return FlashMlaSplitTiling(chunk=chunk, order="longest_first" if ragged else "grid",
                                   combine_warps=default_combine_warps(max_splits),
                                   refill_warps=default_refill_warps(problem.page_size),
                                   cluster_rows=default_cluster_rows(problem),
                                   multicast_kv=default_multicast_kv(problem.page_size))

    def autotune_configs(self, problem) -> list[FlashMlaSplitTiling]:
        """Around the default: other split lengths (each with its combine width), the other
        order, other combine widths, the other refill-warp count, and (v29) the other cluster
        size where the row blocks pair up, and (v32) the other sharing mode of a pair."""
        base = self.default_tiling(problem)
        chunks = sorted({base.chunk, max(1, base.chunk // 2), max(1, base.chunk // 4), 2 * base.chunk, 8, 16, 32, 64, 128})
        other = "grid" if base.order == "longest_first" else "longest_first"
        lens = problem.resolve_seqlens(0)
        most = max([-(-s // TILE) for s in lens], default=0)
        pairs = [c for c in CLUSTER_ROWS if c != base.cluster_rows and row_blocks(problem) % c == 0]
        return ([replace(base, chunk=c, combine_warps=default_combine_warps(max(1, -(-most // c)))) for c in chunks]
                + [replace(base, order=other)]
                + [replace(base, combine_warps=w) for w in COMBINE_WARPS if w != base.combine_warps]
                + [replace(base, refill_warps=r) for r in REFILL_WARPS if r != base.refill_warps]
                + [replace(base, cluster_rows=c) for c in pairs]
                + ([replace(base, multicast_kv=not base.multicast_kv)] if base.cluster_rows > 1 else [])
                + [replace(base, full_tile_issue=not base.full_tile_issue)]
                + [replace(base, wide_tail_zero=not base.wide_tail_zero)]
                + [replace(base, rowmax=m) for m in ROWMAX_MODES if m != base.rowmax])

    def example_bad_tilings(self) -> list[FlashMlaSplitTiling]:
        return [FlashMlaSplitTiling(chunk=0), FlashMlaSplitTiling(block_n=128), FlashMlaSplitTiling(num_threads=256),
                FlashMlaSplitTiling(order="random"), FlashMlaSplitTiling(combine_warps=3),
                FlashMlaSplitTiling(refill_warps=4), FlashMlaSplitTiling(cluster_rows=4),
                FlashMlaSplitTiling(multicast_kv=1), FlashMlaSplitTiling(schedule="once"),
                FlashMlaSplitTiling(full_tile_issue=1), FlashMlaSplitTiling(wide_tail_zero=1),
                FlashMlaSplitTiling(rowmax="max3")]

    def _kernel(self, s_q: int, h_q: int, page_size: int, tiling: FlashMlaSplitTiling,
                arch: str = "sm_90a", timeline_ctas: int = 0, split_slots: int | None = None) -> RuntimeKernel:
        """Stages: with order=longest_first "order" (which split each CTA runs, from the lengths;
        v36: with schedule="per_step" it runs when the workspace is prepared instead, not in the call),
        then "split" (partials into the workspace, or out directly for one-split sequences) and
        "combine", left out when `split_slots` is 1 (v28: every sequence is one split, so the
        split kernel wrote everything; None: not known, keep it); the workspace is sized from
        shapes only. `timeline_ctas` > 0:
        the instrumented split kernel (its own compile-cache entry) recording that many CTAs
        into the workspace's "timeline" buffer."""
        ensure_dsl_arch(arch)
        import torch

        from mla_var3.kernel.cute_python.common import split_order as order

        from . import combine, kernel
        longest_first = tiling.order == "longest_first"

        def split_args(inputs, outputs, ws):
            out, lse = outputs
            args = kernel.launch_arguments(inputs.q, inputs.kv_cache, inputs.block_table, inputs.cache_seqlens,
                                           out, lse, ws, inputs.softmax_scale)
            return args + ((ws["timeline"],) if timeline_ctas else ())

        def combine_args(inputs, outputs, ws):
            out, lse = outputs
            return combine.launch_arguments(inputs.cache_seqlens, out, lse, ws)

        common = dict(kernel=self.name, tiling_key=tiling.key(), arch=arch, dtypes=(torch.bfloat16,),
                      static=(s_q, h_q, page_size))
        split = CuteKernel(stage="split", **common, fake_args=kernel.fake_arguments, launch_args=split_args,
                           variant="timeline" if timeline_ctas else "",
                           build=lambda: kernel.FlashMlaDecodeKernel(s_q, h_q, tiling.chunk, tiling.block_n,
                                                                     tiling.num_threads, page_size,
                                                                     timeline=timeline_ctas > 0,
                                                                     longest_first=longest_first,
                                                                     refill_warps=tiling.refill_warps,
                                                                     cluster_rows=tiling.cluster_rows,
                                                                     multicast_kv=tiling.multicast_kv,
                                                                     full_tile_issue=tiling.full_tile_issue,
                                                                     wide_tail_zero=tiling.wide_tail_zero,
                                                                     rowmax=tiling.rowmax))
        merge = CuteKernel(stage="combine", **common, fake_args=combine.fake_arguments, launch_args=combine_args,
                           build=lambda: combine.FlashMlaCombineKernel(s_q, h_q, tiling.chunk, tiling.combine_warps))

        def workspace(inputs):
            ws = kernel.workspace(inputs.q, inputs.kv_cache, inputs.block_table, tiling.chunk)
            if timeline_ctas:
                ws.update(kernel.timeline_workspace(inputs.q, inputs.kv_cache, inputs.block_table, tiling.chunk,
                                                    timeline_ctas)[0])
            return ws
        tail = (split,) if split_slots == 1 else (split, merge)
        if not longest_first:
            return self.runtime(tiling, *tail, workspace=workspace)
        sort = CuteKernel(stage="order", **common, fake_args=order.fake_arguments,
                          launch_args=lambda inputs, outputs, ws: order.launch_arguments(inputs.cache_seqlens, ws),
                          build=lambda: order.SplitOrderKernel(tiling.chunk))
        if tiling.schedule == "per_step":        # v36: the order for these lengths, made when prepared
            return self.runtime(tiling, *tail, workspace=workspace, prepare_stages=(sort,))
        return self.runtime(tiling, sort, *tail, workspace=workspace)

    def plan(self, inputs, tiling) -> RuntimeKernel:
        from .kernel import n_split_slots
        page_size = int(inputs.kv_cache.shape[1])
        slots = n_split_slots(int(inputs.block_table.shape[1]), tiling.chunk, page_size)
        return self._kernel(inputs.s_q, inputs.h_q, page_size, tiling, split_slots=slots)

    # ---- --prof_type=timeline: the instrumented split kernel (see kernel.py, timeline_events.py)
    def timeline_schema(self):
        from .timeline_events import SCHEMA
        return SCHEMA

    def timeline_kernel(self, inputs, tiling, max_ctas: int, arch: str = "sm_90a"):
        """(runtime kernel whose workspace holds the "timeline" buffer, grid of the split kernel)."""
        self.check_tiling(tiling, self.problem_kind.from_inputs(inputs), None)
        kern = self._kernel(inputs.s_q, inputs.h_q, int(inputs.kv_cache.shape[1]), tiling, arch,
                            timeline_ctas=max_ctas)
        kern.problem = self.problem_kind.from_inputs(inputs)
        from . import kernel
        return kern, kernel.timeline_workspace(inputs.q, inputs.kv_cache, inputs.block_table, tiling.chunk, 1)[1]

    def compile_timeline(self, problem, arch: str, tiling=None):
        """Compile the instrumented build only (no GPU): the CompileKey of its split stage."""
        tiling = tiling or self.default_tiling(problem)
        kern = self._kernel(problem.s_q, problem.h_q, problem.page_size, tiling, arch, timeline_ctas=1)
        kern.compile()
        return kern

    def compile_only(self, problem, arch: str, tiling=None) -> dict:
        tiling = tiling or self.default_tiling(problem)
        self.check_tiling(tiling, problem, None)
        kern = self._kernel(problem.s_q, problem.h_q, problem.page_size, tiling, arch)
        kern.compile()
        return {"compiled": True, "stages": "+".join(s.name for s in kern.stages), "chunk": tiling.chunk}


Plan = FlashMlaDecodeV57
