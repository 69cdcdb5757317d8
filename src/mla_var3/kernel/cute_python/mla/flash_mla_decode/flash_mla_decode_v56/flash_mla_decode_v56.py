"""flash_mla_decode_v56: v55's counter claims taken by row-block pairs, `item_fetch="pair"` (CuTe
DSL, sm_90a).

What changed (one mechanism: who claims a pair's places). v55's columns each took their places from
their own row block's counter, so the two row blocks of a cluster (launched together since v32 so
that the second one's K/V reads hit L2) drifted apart as their claims interleaved differently with
the other columns'. In v56 only a cluster's rank 0 claims, on its row block's counter, and stores
the place into both CTAs' two-entry rings (an st.async into rank 1's entry, which completes rank
1's full barrier by its 4 bytes); every reading warp of both CTAs frees rank 0's entry. The two row
blocks then run the same item at the same time, as v54's dealing had them. Also (hygiene, found by
v55's racecheck): lane 0 reads a ring entry and hands it to its warp by a shuffle before it frees
the entry, where every lane read it. With one row block per cluster "pair" is v55's counter;
`item_fetch="counter"` / `"snake"` build v55's / v54's fetch.

Why: v55's first run (docs/kernels/flash_mla_decode.md, "flash_mla_decode_v55") met its tail
prediction under ncu (least busy SM 95.7% against v54's 91.1% at s_q=2 h_q=128 4096 varlen) and
still lost 1-4% to v54 in time on every cell with two or more row blocks, while it gained 1-2% on
the cells with one row block (h_q=16). There ncu read 8.44e7 L2 sectors against v54's 5.9e7 and
the kernel ran at 1679 MHz against 1711: the siblings' reads no longer met in L2 in time.

v55's docstring:

flash_mla_decode_v55: v54's persistent CTA columns take their next item from a device counter,
`item_fetch` (CuTe DSL, sm_90a).

What changed (one mechanism: how a persistent column gets its next item). v54 dealt v46's split
items to its columns in snake order before the launch; v55's columns take them as they free up:
warp 8 takes the next place of launch order (the longest-first order's, or the grid's) with one
atomic add on a per-row-block counter and passes it to the CTA's other roles through a two-entry
ring in shared memory. The counter goes back to zero in the call that set it (the last claim of the
row block, one past the end per column, stores 0), so a CUDA graph replays with it at zero.
`item_fetch="snake"` builds v54's dealing; everything else is v54's kernel.

v54's docstring:

flash_mla_decode_v54: v46's split kernel run by persistent CTAs that load the next work item's Q
under the current item's epilogue, `persistent_ctas` (CuTe DSL, sm_90a).

What changed (one mechanism: who runs the work items). v46 launches one CTA per (row block, split
slot, sequence); each CTA pays a fixed start (Q and the first tiles land: 1.7 us for Q alone in the
v46 timeline) and end (the epilogue) during which its SM's tensor pipe idles, and the hardware
starts the next CTA only after it exits. v54 launches `persistent_ctas` CTAs per row block (132 / row
blocks on the H200: one wave); CTA column c walks places c, c + ctas, ... of v46's launch order
(the same split items, the same longest-first order kernel, the same partials and combine). Per
item, the producer warp loads Q as soon as every math warp has done the previous item's last QK^T
(a `q_free` mbarrier, one arrival per math warp per item), so it lands under that item's epilogue;
each stage's fills count on across items (the f-th fill waits for the (f - 1)-th release), so the
next item's tiles stream in as the stages free. The epilogue stages O in stage 0 only (bf16 O fits;
f32 partials go in two 32-row halves), and the math warps' last release of stage 0 in an item waits
until O has left it; an item with no key writes its zeros from registers. The four row blocks of
an s_q=2 h_q=128 split walk the same items in step (33 columns x 4), which v47's clusters of four
wanted for the L2 reads without leaving SMs idle. `persistent_ctas=0` runs v46's grid (the same
device code, one item per CTA); multicast pairs (pages 16/32 by default) keep it 0.

Why: in session 25's hot run v46 took 0.938-0.960x FlashMLA's cycles on exactly the cells with
the most CTAs per SM (fixed 1024; s_q=2 h_q=128), and v46's makespan model with persistent CTAs
(the fixed cost once per SM, 2 tile-times per further item) puts them 1.01-1.13x faster
(docs/kernels/flash_mla_decode.md, "Issue 8 after v53"). FlashMLA's persistent CTAs load the next
request's Q during the current one's epilogue.

Device code: kernel.py (split, `work_item`, `release_stage0`, `store_partial_halves`),
common/split_order.py (order), combine.py (combine). Devlog: docs/kernels/flash_mla_decode.md.

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
REFILL_WARPS = (1, 2)                          # producer warps per stage (4 producer warps, 2 stages)
CLUSTER_ROWS = (1, 2)                          # v29: row-block CTAs per cluster sharing each K/V tile
COMBINE_WARPS = (1, 2, 4, 8)                 # warps per query row in the combine kernel (v17)
ITEM_FETCH = ("pair", "counter", "snake")     # v56: a pair's rank 0 claims for both; v55: each CTA claims from
                                              # its row block's counter; v54's dealing
PERSISTENT_ITEM_TILES = 4.0                   # v54: a persistent CTA's cost per further item, in tile times (an
                                              # assumption: Q and the launch gap hidden, stage 0's first tile and
                                              # the epilogue not; to be fitted to v54's timeline)
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
    persistent_ctas: int = 0      # v54: CTAs per row block walking the work items (0: v46's one CTA per item)
    item_fetch: str = "pair"      # how persistent columns get items: v56's "pair" (a cluster's rank 0 claims each
                                  # place for both row blocks; one row block per cluster: the counter), v55's
                                  # "counter" (a device counter per row block, one atomic add per item) or
                                  # "snake" (v54's dealing fixed before the launch)

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
        if not isinstance(self.multicast_kv, bool):
            reasons.append(f"multicast_kv must be True or False (whether a cluster's CTAs share each K/V tile), "
                           f"got {self.multicast_kv!r}")
        if not isinstance(self.persistent_ctas, int) or self.persistent_ctas < 0:
            reasons.append(f"persistent_ctas must be an int >= 0 (CTAs per row block walking the work items; 0: one "
                           f"CTA per item), got {self.persistent_ctas!r}")
        elif self.persistent_ctas and self.multicast_kv is True and self.cluster_rows > 1:
            reasons.append("persistent_ctas > 0 needs multicast_kv=False (v54 refills each CTA's own ring; a "
                           "multicast pair releases its peer's stages too)")
        if self.item_fetch not in ITEM_FETCH:
            reasons.append(f"item_fetch must be one of {', '.join(ITEM_FETCH)} (persistent columns' items claimed by a "
                           f"cluster pair, from a device counter per CTA, or v54's snake dealing), got {self.item_fetch!r}")
        return reasons + smem_reasons(SMEM_BYTES, device)


def row_blocks(problem) -> int:
    """64-row blocks of one sequence's s_q * h_q query rows: the grid's x axis."""
    return -(-problem.s_q * problem.h_q // 64)


def default_cluster_rows(problem) -> int:
    """v32: the row blocks launch in clusters of two wherever they pair up, at every page size
    (v30: pages 16 and 32 only); whether the pair also shares its tiles is `default_multicast_kv`."""
    return 2 if row_blocks(problem) % 2 == 0 else 1


def other_item_fetches(base: FlashMlaSplitTiling) -> list[str]:
    """The `item_fetch` values autotune tries beside the default's. Without pairs (cluster_rows 1)
    "pair" builds "counter"'s kernel (nothing to share), so only one of the two is a candidate."""
    twins = {"pair", "counter"} if base.cluster_rows == 1 else set()
    return [f for f in ITEM_FETCH if f != base.item_fetch and not (f in twins and base.item_fetch in twins)]


def default_persistent_ctas(problem, tiles: list[int], chunk: int, sms: int = SMS_H200) -> int:
    """v54: one wave of CTAs (132 / row blocks on the H200) where the makespan model finishes them
    first: each column pays the CTA's fixed cost once and PERSISTENT_ITEM_TILES per further item,
    its items dealt in snake order (`persistent_makespan`), against v46's one CTA per item handed out
    longest first by the hardware (`makespan`). Static dealing loses to the hardware's greedy hand-out
    on long ragged batches, and one item per SM gains nothing, so those keep v46's grid (0), as do
    multicast pairs (pages 16/32), whose refill releases the peer's stages too."""
    if default_cluster_rows(problem) > 1 and default_multicast_kv(problem.page_size):
        return 0
    rb = row_blocks(problem)
    cols = max(1, sms // rb)
    gain = persistent_makespan(tiles, chunk, cols) < makespan(tiles, chunk, rb, sms)
    return cols if gain else 0


def persistent_makespan(tiles: list[int], chunk: int, cols: int, overhead: float = CTA_OVERHEAD_TILES,
                        per_item: float = PERSISTENT_ITEM_TILES) -> float:
    """v55: the finish time (tile times) of `cols` persistent CTA columns taking the split items of
    v46's longest-first order from a counter (each item to the column that frees first; v54 dealt
    them in snake order), each column paying `overhead` once and `per_item` for every further item."""
    works = sorted((min(chunk, n - k) for n in tiles for k in range(0, max(n, 1), chunk)), reverse=True)
    load = [overhead - per_item] * cols
    heapq.heapify(load)
    for w in works:
        heapq.heappush(load, heapq.heappop(load) + per_item + w)
    return max(load)


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


class FlashMlaDecodeV56(KernelPlan):
    name = "flash_mla_decode_v56"
    language = "cute-dsl"
    arch = ("sm_90a",)
    problem_kind = MlaDecodeProblem
    Tiling = FlashMlaSplitTiling
    quarantine = ("its 15 GPU tests, check 172/174 (2 not run) and compute-sanitizer pass, but it measured "
                  "0.978-1.010x v46 (median 0.988): pair claims win back v55's loss, not more than v46's grid")
    summary = "CuTe DSL: v55's counter claims taken by row-block pairs (a cluster's rank 0 claims for both)"

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
                                   multicast_kv=default_multicast_kv(problem.page_size),
                                   persistent_ctas=default_persistent_ctas(problem, tiles, chunk))

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
                + ([replace(base, multicast_kv=not base.multicast_kv,      # v54: a multicast pair is not persistent
                            persistent_ctas=base.persistent_ctas if base.multicast_kv else 0)]
                   if base.cluster_rows > 1 else [])
                + [replace(base, full_tile_issue=not base.full_tile_issue)]
                + [replace(base, wide_tail_zero=not base.wide_tail_zero)]
                + ([replace(base, item_fetch=f) for f in other_item_fetches(base)] if base.persistent_ctas else [])
                + [replace(base, persistent_ctas=0 if base.persistent_ctas else SMS_H200 // row_blocks(problem),
                           multicast_kv=False if not base.persistent_ctas else base.multicast_kv)])

    def example_bad_tilings(self) -> list[FlashMlaSplitTiling]:
        return [FlashMlaSplitTiling(chunk=0), FlashMlaSplitTiling(block_n=128), FlashMlaSplitTiling(num_threads=256),
                FlashMlaSplitTiling(order="random"), FlashMlaSplitTiling(combine_warps=3),
                FlashMlaSplitTiling(refill_warps=4), FlashMlaSplitTiling(cluster_rows=4),
                FlashMlaSplitTiling(multicast_kv=1), FlashMlaSplitTiling(schedule="once"),
                FlashMlaSplitTiling(full_tile_issue=1), FlashMlaSplitTiling(wide_tail_zero=1),
                FlashMlaSplitTiling(item_fetch="steal")]

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
                                                                     persistent_ctas=tiling.persistent_ctas,
                                                                     item_fetch=tiling.item_fetch))
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


Plan = FlashMlaDecodeV56
