"""flash_mla_decode_v57: v46's split kernel with `rowmax` (short_rowmax.py): the row max of a tile's raw
scores as a tree, the softmax scale in the exponent's FFMA (`rowmax_step`, `exp_step`); "chain" builds
v46's. The combine and the order kernel are v46's.

Check (GPU):        MLA_VAR3_RUN_QUARANTINED=1 python -m mla_var3.kernel flash_mla_decode_v57 --check
Compile only (CPU): python -m mla_var3.kernel flash_mla_decode_v57 --compile-only --arch=sm_90a

v46's notes:

flash_mla_decode_v46: v44's split kernel with `wide_tail_zero` (tail_rows.py): a sequence's partial
last tile has its value rows past the length cleared 16 bytes per store through an unswizzled
view, where v13-v44 stored one bf16 at a time through the swizzled one (`zero_tail`).

Check (GPU):        python -m mla_var3.kernel flash_mla_decode_v46 --check
Benchmark (GPU):    ... flash_mla_decode_v46 --grid=bench --where varlen --compare=flash_mla_decode_v44,flashmla_decode
Compile only (CPU): python -m mla_var3.kernel flash_mla_decode_v46 --compile-only --arch=sm_90a

v44's notes:

flash_mla_decode_v44: v36's split kernel with `full_tile_issue` (split_refill.py): a tile whose
pages all hold keys is issued with no branch between its boxes (the plan's docstring says why).
v36 changed where the order kernel runs (`schedule`); its split kernel is v32's.

Check (GPU):        python -m mla_var3.kernel flash_mla_decode_v44 --check
Benchmark (GPU):    ... flash_mla_decode_v44 --grid=serving --compare=flash_mla_decode_v36
Compile only (CPU): python -m mla_var3.kernel flash_mla_decode_v44 --compile-only --arch=sm_90a
The device functions are `split_order_kernel` (common/split_order.py), `flash_mla_decode_v57_kernel`
(split) and `flash_mla_decode_v57_combine_kernel`.

v32's change from v30 (one mechanism: co-scheduled siblings, `multicast_kv`). With `cluster_rows`
= 2 and `multicast_kv` = False the grid launches in clusters of two along the row blocks, as v29's
pairs do, but the kernel body is v28's: each CTA arms its own barriers and issues every box of
its tiles with the plain TMA op, its math warps release only its own stages, and no cluster
barrier or remote arrival exists. The cluster only makes the two row-block CTAs of a split start
together on one GPC and walk the same tiles at the same pace, as FlashMLA's m-block CTAs do (it
launches them adjacent and persistent), so their reads of a tile reach L2 close together instead
of one CTA re-reading, a launch wave later, what its sibling fetched (v30 at page 64: 1.9 L2
reads per K/V sector against FlashMLA's 1.0). `multicast_kv` = True is v29/v30's pair.

v29's change from v28 (one mechanism: a row-block pair shares every K/V tile). With
`cluster_rows` = 2 the grid (row block, split, sequence) launches in clusters of two along the row
blocks, so the two CTAs of a cluster run the same split of the same sequence (the longest-first
order maps y and z, which they share). The K/V loads use the multicast TMA op: of a tile's page
boxes (chunk c, page j), the CTA of cluster rank (c * pages_per_tile + j) % 2 issues box (c, j)
with the mask of both CTAs, so each CTA issues half of the boxes (page 64: 5 or 4 of 9; page 16:
18 of 36) and each tile crosses L2 -> SM once for both. Every CTA still arms its own chunk barriers
for all of the chunk's bytes: the peer's boxes complete bytes on them too (the transaction count
may run ahead of the arming within a phase). A stage may be refilled only when the math warps of
both CTAs are done with it, since a refill writes into both: each math warp arrives on its own
and on the peer's empty barrier (16 arrivals per phase). The barriers are initialized before a
cluster barrier (no multicast may reach an uninitialized peer barrier), and every thread passes a
second cluster barrier at the end (no CTA exits while the peer may still arrive on its barriers).
Q, P, the softmax and the epilogue stay per CTA. `cluster_rows` = 1 builds v28's kernel.

v27's change from v26 (one mechanism: the split issue only where a tile is many boxes). v26's
two issuing warps per stage measured 1.10-1.24x v23 at page 16 but 0.96-1.02x at page 64, where
the two extra warps polling the stage-empty barriers cost the compute-bound cells 2-4% and saved
nothing (9 boxes per tile). v27 takes the number of parts, `refill_warps`, from the tiling
(`FlashMlaSplitTiling.refill_warps`, 1 or 2, a compile-time constant of the split kernel): the
default is 2 at page sizes 16 and 32 and 1 at 64 (`default_refill_warps`). With 1, warps 8 and 9
issue all of their stage's chunks, as in v23 (warp 9 now also issues stage 1's first tile), and
warps 10-11 only give their registers away. With 2, v27 is v26.

The rest of v26's docstring:

What changed from v23 (one mechanism: the refill's boxes leave from two warps). v11 gave each
stage its own producer warp and measured 7-32% at page 16 over v9, where one warp issued both
stages' boxes: the issue itself, not only the wait, is on the refill's path. Still, warp 8 + s
issues all of stage s's boxes one after another, 9 x 64 / page_size of them per tile (36 at page
16, each an elected-lane `cute.copy` with its coordinates), and page 16 runs 1.22-1.31x page 64's
time (v21, serving grid). Warps 10-11 only gave their registers away. v26 has warp 8 + s + 2 h
issue half h of stage s's chunks (h = 0: chunks 0-4, h = 1: chunks 5-8; split_refill.py) for the
first tile and every refill; both wait on the stage's empty barrier and read the tile's page ids.
Each chunk's mbarrier is still armed once, by the warp that issues its boxes. Nothing else changes.

The rest of this docstring is v21's.

What changed from v20 (one mechanism: the mask leaves the steady-state loop). Every tile's scores
went through `scale_mask_rowmax`: per thread 32 compares of a key index with the row's limit and
32 selects of -inf, half of the scale-and-max step, although only a sequence's last tile or two
can hold a key some row may not see (the causal limit seqlen - s_q + 1 + token, and the rows past
seqlen of a partial last tile). v21 moves the split point of v16's two loop copies: the first copy
runs the leading pairs whose two tiles lie wholly below seqlen - s_q + 1 (the smallest row limit) and
scales without the mask (`unmasked_scores.scale_rowmax`); the second copy runs the rest with the
mask and the tail branch. For every split but a sequence's last, and for a last split whose
boundary falls in its last pair, the copies split as in v16-v20 (all pairs but the last, then the
last). Nothing else changes.

The rest of this docstring is v20's.

What changed from v19 (one mechanism: how P reaches shared memory). The owner of a tile turns its
32 scores per thread into bf16 P and stores them into the tile's rope chunk, where both
warpgroups' P V read them. v4-v19 stored P one element at a time through the accumulator's own
partition of that chunk: 32 `STS.U16` per thread per tile (122 in the split kernel's SASS, plus 77
`PRMT` to pick the halves), on the chain from the softmax to the publish that releases the other
warpgroup; ncu counted 27-35 thousand shared-store bank conflicts per launch for v17 against
FlashMLA's 0.7-8 thousand (which of v17's stores conflict was not located). v20 stores P with stmatrix (`store_p`: a tiled copy from the QK^T
accumulator's layout, `StMatrix8x8x16bOp` x4, whole 16-byte rows of 8x8 matrices): 4 `STSM` per
thread per tile. Compiled (sm_90a, CPU, b=128 s_q=1 h_q=64 seqlen=4096): 5888 SASS instructions
against v19's 6584, `STS.U16` 122 -> 2, `PRMT` 77 -> 0, 16 `STSM.16.M88.4`. Nothing else changes.

The rest of this docstring is v19's.

What changed from v17 (one mechanism: fewer O rescales). Each math thread holds 128 floats of O
and v4-v17 multiplied all of them by the softmax correction twice per pair of tiles, 256 FMULs per
thread per pair, whether the running max moved or not. ncu (b=128 s_q=1 h_q=64 seqlen=8192,
2026-12-01) has v17 issuing in 31.8% of cycles against FlashMLA's 21.1% for the same tensor work,
and the bench's replays show v17 slowing by up to 15% when the H200 nears its 700 W limit and
lowers the SM clock (1950 -> 1440 MHz) while FlashMLA does not: SM-side instruction time, not
DRAM, decides our fixed-length cells under sustained load. v19 keeps the reference max until a
tile's max beats it by more than 8 in log2 units, a factor of 256 (`lazy_rescale.py`), so the
correction is exactly 1 almost always,
and a warp skips the multiply when all its rows have correction 1 (a warp vote). Nothing else
changes; the text below is v16's (v17 changed only the combine).

What changed in v16 from v14 (one mechanism: the tail branch leaves the steady-state loop). v12-v14 zero
a partial last tile's value columns after its QK^T and publish them with P (racecheck clean), but
the branch that does it, inside the pair loop, cost 5-10% on fixed-length cells that never take
it (v13 0.89-0.97x v11; v14 the same), and moving it within the loop body did not help: ptxas
scheduled the QK^T wgmma descriptors' uniform registers differently (376 R2UR against v11's 300,
6 6 2 2 between the four wgmmas of a box where v11 has 2 2 2 2). v15 went back to v11's tail
path and kept the speed (0.97-1.00x v11) but also racecheck's 13 errors, with the barrier counts
balanced. v16 keeps v14's tail path and runs the pair loop as two copies (a `range_constexpr(2)`
around it): pairs 0 .. n_pairs - 2 without any tail code, then the last pair with the branch. The
loop every tile but the last two goes through has no branch; its SASS has v11's R2UR pattern
(2 2 2 2 per box). The split kernel grows from 4680 to ~6500 SASS instructions (the body twice).

The rest of this docstring is v14's (and v13's, v12's, v11's, ...).

What changed from v13 (one mechanism: which split each CTA runs). Until v13, CTA (row block x,
slot y, sequence z) ran split y of sequence z, so CTAs were launched sequence by sequence and a
ragged batch (the bench grid's varlen cells: lengths ~ N(seqlen, seqlen / 2)) finished with long
CTAs started late while most SMs idled: v11 took 1.47-1.49x its fixed-length time on the same
total of keys (interleaved bench, 2026-12-01), and FlashMLA's varlen cells run at 1.08-1.17x its fixed
ones. With `order=longest_first` (the default when the tile counts differ) an order kernel
(common/split_order.py), launched before the split kernel in the same stream, writes order[z, y] = the work
item (sequence * slots + split) of the CTA at that place in launch order: every full split first,
then the partial last splits by decreasing size, then -1 (no work). The split kernel reads its
item from there instead of taking its block index at face value; everything else is v13's. The
combine kernel indexes partials by (sequence, split), not by CTA, so it is unchanged. Fixed-length
problems keep the grid order (all splits the same size: nothing to gain, and no order kernel to
pay for).

The rest of this docstring is v13's (and v12's, v11's, ...).

What changed from v12 (one mechanism: where the tail branch sits). v12 zeroes a partial last tile's
value rows after its QK^T and publishes them with P, which made racecheck clean, but it put the
branch (`if t_own == n_tiles - 1 and tail < TILE`) between the row max and the softmax of every
tile: measured 2-10% slower than v11 on fixed-length cells that never take it (interleaved bench,
2026-12-01), while its SASS lost only the tail path's own waits. The row max -> new max -> exp2 ->
P chain is the critical path from QK^T to the publish that releases the other warpgroup; a branch in
its middle splits it into basic blocks the scheduler does not overlap. v13 zeroes at the latest
legal point instead: after this warpgroup's P and statistics stores, just before its
`fence.proxy.async` and the arrive/sync that publish them (both P V of the tile still wait behind
that publish), where nothing follows the branch but the fence and the barrier.

The rest of this docstring is v12's (and v11's, v10's, v9's, v8's, v5's, v4's).

What changed from v11 (one mechanism: the tail tile's zeroing rides on the P barrier). The last
tile of a sequence may hold fewer than 64 keys; its rows past seqlen hold whatever the smem held
(a stale tile, or never-written smem, which may be NaN) and must be zero before P V, because 0 x NaN
is NaN. v4-v11 waited for all of the tile's boxes, zeroed those rows in all 576 columns, fenced
and met the owning warpgroup's 128 threads at a named barrier (`zero_tail_rows_named`), and only
then started QK^T. But QK^T does not need the zeros: its scores for keys past seqlen are replaced
by -inf with a select (`scale_mask_rowmax`), whatever they were. Only the 512 value columns, read
by both warpgroups' P V, need them. v12 zeroes those columns after the tile's QK^T has completed
and before the owner's existing publish (`fence.proxy.async`, then the arrive on barrier A or B
and the sync on its own barrier), which both P V of that tile already wait behind. So the tail
tile's QK^T starts box by box like every other tile, 64 columns fewer are cleared, and the tail
CTAs no longer execute a named barrier the other warpgroup does not: compute-sanitizer's racecheck
reported WG0-write -> WG1-read hazards on the statistics exchange only in CTAs that zero a tail
(v4-v11), and this is the one difference in their barrier sequence.

The rest of this docstring is v11's (and v10's, v9's, v8's, v5's, v4's).

What changed from v10 (one mechanism: a producer warp per stage). v8-v10 issue every refill from
one warp, stage 0's tile then stage 1's: the warp waits for stage 0 to be freed, issues its 9 x
64/page_size boxes, and only then turns to stage 1, which by then is usually free already. So
stage 1's first box leaves one whole stage-0 issue late: v9's timeline (b=128 s_q=1 h_q=64
seqlen=4096) has "TMA issue (stage 0)" at 626 cycles at page 64 and 2130 at page 16, "wait stage 1
free" at 448 / 137 cycles (the stage was waiting for the producer, not the other way round), and
WG1, which reads stage 1, waiting 2260 / 3641 cycles for K box 0 of each tile against WG0's 1138 /
1233. v11 gives stage 1 its own warp (warp 9 of the producer warpgroup, which only gave its
registers away before): warp 8 keeps Q, the first two tiles and stage 0's refills, warp 9 waits
on stage 1's empty barrier and refills it, each with its own page-id prefetch. The TMA engine is
shared, so the boxes of the two stages may still serialize there; what goes is the instruction
queue on one warp. The timeline records warp 8 only (one recording warp per warpgroup), so the
producer row shows stage 0's refills; stage 1's show up in WG1's K box waits.

The rest of this docstring is v10's (and v9's, v8's, v5's, v4's).

What changed from v9 (one mechanism: the next refill's page ids read before the wait). v9's
producer warp, for every tile after the first two, waited for the stage to be freed, then read
the tile's page ids from the block table (one dependent global load per page: 1 at page 64, 4 at
page 16), and only then armed the mbarriers and issued the boxes. So each refill's critical path,
from "both warpgroups released the stage" to "K box 0 lands", carried a global-load round trip
before the first TMA instruction. v9's timeline (b=128 s_q=1 h_q=64 seqlen=4096) put "TMA issue"
at 626 / 541 cycles per stage at page 64 and 2130 / 1556 at page 16, and the math warpgroups'
wait for K box 0 at 1138 / 2260 cycles (WG0 / WG1, page 64) and 1233 / 3641 (page 16). v10 reads
tile t + 1's ids right after issuing tile t (`read_page_ids`, then `load_tile_from_ids` from the
registers after the wait), so the loads are in flight during the wait, which is thousands of
cycles long at stage 0 (4556-5700). Nothing else changes.

The rest of this docstring is v9's (and v8's, v5's, v4's).

What changed from v8 (one mechanism: a coalesced epilogue). v4's timeline spent 10762 cycles per
CTA (4.5% of a b=64 h_q=128 seqlen=4096 CTA, ~15% of a seqlen-1024 one) in the epilogue, and the
SASS says why: every thread stored its wgmma accumulator fragment directly, 64 `STG.E` of 4 bytes
(bf16 output) or 64 `STG.E.64` (f32 partials) each, a warp instruction touching 8 rows x 16 bytes -
half-filled 32-byte sectors, 16384 store instructions per CTA through the LSU. v9 writes the
normalized O into the dead K ring (rows padded to 1040 / 2080 bytes so the fragment stores are
bank-conflict free), meets at named barrier 5, and copies it out in 16-byte row chunks
(`store_rows_from_smem`): a warp instruction stores 512 contiguous bytes, 16 `STG.E.128` per
thread instead of 64. The lse stores and everything else are v8's.

The rest of this docstring is v8's (and v5's, v4's).

What changed from v5 (one mechanism: warp specialization of the loads). In v4/v5 math warp 0
(stage 0) and math warp 4 (stage 1) issued the refill of their stage themselves, between their
P V and the next tile's QK^T: waiting on the stage's empty barrier, reading the block table and
issuing 9 x (64 / page_size) TMA boxes (36 at page 16) on the critical path of their warpgroup.
v4's timeline put that at ~430 cycles per pair at page 64 (wait + issue, 7-9% of the CTA's time),
and v5 at page 16 ran 1.33-1.46x slower than at page 64. v8 adds a third warpgroup (threads
256..383) whose first warp (warp 8) issues Q, the first two tiles and then, for every later tile
t of the split, waits for its stage's empty barrier (both math warpgroups done with tile t - 2)
and loads it; the other producer warps only give their registers away. setmaxnreg moves the
register budget to the math warpgroups (producer 40, math 232: 40 x 128 + 232 x 256 <= 64K),
launched with .minnctapersm 1 so ptxas keeps the setmaxnreg. The math warpgroups keep v5's
code except that they no longer refill, and the epilogue's CTA barrier becomes a named barrier
of the 256 math threads (the producer may still be waiting on nothing, or done). Everything else
- tiles, the seesaw, per-box mbarriers, the split schedule, workspace and combine - is v5's.

Timeline (--prof_type=timeline): `__call__` takes an optional int64 buffer after the stream; with
it (FlashMlaDecodeKernel(timeline=True), its own compile-cache entry) warps 0, 4 and 8 stamp
clock64 at the phase boundaries named in timeline_events.py (`tln.mark(rec, ...)` lines below),
the producer's refill waits and issues included. Without it every mark is a trace-time no-op.

The rest of this docstring is v5's (and v4's).

What v5 changed from v4 (one mechanism: pages smaller than the tile). vLLM's default block size is
16, FlashMLA's API asks for 64. The compute still walks 64-key tiles (64x64 QK^T wgmma, the
seesaw, the combine: all v4's); only the loads change. The cache is viewed as (page_size rows,
576 cols, pages) and cut into page_size x 64 TMA boxes, so a tile's chunk c is 64 / page_size
boxes, one per page, each at the page id the block table gives for page (tile * 64/page_size + j)
of the sequence, landing at rows [j * page_size, (j + 1) * page_size) of the chunk. A page_size x
64 K-major SW128 block is whole 8-row swizzle atoms, so the stacked boxes are byte for byte the
64-row chunk that wgmma reads (`sKp` and `sK` are two views of the same smem). Only pages that
hold keys are loaded and counted on the chunk's mbarrier (the last tile of a sequence may have
fewer): block-table entries past a sequence are never read, and the rows not loaded are past
seqlen, zeroed like any tail. The page size is a compile-time constant (part of the compile key).


What v4 changed from v3 (the seesaw): each QK^T wgmma used to be 64x32x16 with both operands
from shared memory and the warpgroups met at three CTA barriers per tile. Tiles now go in pairs
(A in stage 0, B in stage 1): warpgroup 0 scores all 64 keys of A while warpgroup 1 scores B;
each warpgroup owns half of O's columns (O_L: WG0, O_R: WG1) and the running max goes from one to
the other through shared memory:

  WG0: S_A = Q K_A^T; m_A = max(m, rowmax S_A); s_A = 2^(m - m_A); P_A = 2^(S_A - m_A)
       publish (m_A, s_A, P_A) -> O_L = O_L s_A + P_A V_A[:, :256]
       wait (m_B, s_B, P_B)    -> O_L = O_L s_B + P_B V_B[:, :256];  m = m_B
  WG1: S_B = Q K_B^T and its row max (while WG0 works on A)
       wait (m_A, s_A, P_A)    -> O_R = O_R s_A + P_A V_A[:, 256:]   (issued, runs during:)
       m_B = max(m_A, rowmax S_B); s_B = 2^(m_A - m_B); P_B = 2^(S_B - m_B); publish
                               -> O_R = O_R s_B + P_B V_B[:, 256:];  m = m_B

P_A / P_B (64x64 bf16) overwrite the rope columns (chunk 8) of their own K tile, dead once that
tile's QK^T is done. Every chunk of a K tile lands on its own mbarrier.

Synchronization (no CTA barrier in the loop)
- full[stage][chunk]: TMA -> the tile's readers (one mbarrier per box, phase = pair parity).
- empty[stage]: one arrival per math warp once its wgmma on that stage completed (8 per phase);
  v8: the producer warp (warp 8) waits on it, then loads the tile two ahead into the stage.
- Named barriers: 1 (WG0 -> WG1: m_A, s_A, P_A published; WG0 arrives, WG1 syncs), 2 (WG1 -> WG0:
  m_B, s_B, P_B), 3 / 4 (one warpgroup's own threads: its P written before its wgmma reads it).
  Writers fence generic-proxy smem writes for the async proxy before arriving.
- A pair with no tile B (odd split length) runs the same protocol with S_B = -inf and no wgmma on
  stage 1.

Tiling, the split schedule, the workspace and the combine kernel are v3's (v2's), as are the
correctness rules below.

Correctness rules (see layers/mla/decode.py)
- Only pages 0 .. cdiv(seqlen, page_size) - 1 of a sequence are read: block_table entries past it
  hold 2147480000 and pages past it are NaN.
- The last page's rows past seqlen are NaN (and rows of the last tile whose page was not loaded
  hold whatever the stage had). P = 0 is not enough there (0 * NaN = NaN in P.V), so
  the warpgroup that owns that tile, once its QK^T is complete (the scores past seqlen are
  replaced by -inf with a select, whatever the keys held), zeroes the tile's rows past seqlen in
  the 512 value columns; the fence.proxy.async and the barriers that publish its P (arrive on A or
  B, sync on its own) order the zeros before either warpgroup's P V of that tile (v12; v13 zeroes
  right before that fence, after the P stores).
- Causal masking (s_q > 1): query token i sees keys 0 .. seqlen - s_q + i. Masked scores are -inf.
  A row that sees no key keeps m = -inf; exp2 then uses 0 as its offset so no -inf - (-inf)
  appears, l stays 0, and the epilogue writes out 0 and lse +inf.
- Softmax in the log2 domain with f32 statistics; P is rounded to bf16 only as the P V operand.
  lse = (m + log2 l) * ln 2 (natural log).
- Rows past s_q*h_q are computed on zero Q rows and never written.

Constraints: bf16 q and cache, page size 16, 32 or 64, head dims 576/512, h_kv = 1, 1 <= h_q <= 128,
1 <= s_q <= 16, num_threads = 384 (two math warpgroups + the producer), block_n = 64 (the tile),
chunk >= 1 tiles. Checked in
`__init__` and `launch_arguments`.
"""
from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream
from cutlass.memory import SmemAllocator
from cutlass.tensor_utils import LayoutEnum

from mla_var3.kernel.cute_python.common import timeline as tln
from mla_var3.kernel.cute_python.common.epilogue import store_rows_from_smem
from mla_var3.kernel.cute_python.common.online_softmax import scale_mask_rowmax
from mla_var3.kernel.cute_python.common.paged_kv import (expect_tile, read_page_ids,
                                                         zero_tail_value_rows)
from mla_var3.kernel.cute_python.common.reduce import quad_allreduce_sum
from mla_var3.kernel.cute_python.common.sm90 import acc_rows_cols

from .lazy_rescale import exp_against_lazy_max, scale_rows_unless_one
from .short_rowmax import ROWMAX_MODES, raw_mask_rowmax, raw_rowmax
from .split_refill import load_part, load_part_pair
from .tail_rows import flat_chunks, zero_rows_from
from .unmasked_scores import scale_rowmax
from .timeline_events import SCHEMA as TIMELINE

D_QK = 576          # 512 latent + 64 rope
D_V = 512           # values: the first 512 columns of the same cache rows
TILE = 64           # keys per KV tile (one wgmma N of QK^T); a tile spans 64 / page_size pages
PAGE_SIZES = (16, 32, 64)
BLOCK_M = 64        # query rows per CTA (one wgmma M)
BOX = 64            # TMA box / smem chunk width: 64 bf16 = 128 B = one SW128 row
N_CHUNKS = D_QK // BOX          # 9 chunks of 64 columns per 576-wide row
V_CHUNKS = D_V // BOX           # the first 8 of them are V
P_CHUNK = N_CHUNKS - 1          # chunk 8 (rope): dead after QK^T, then holds the tile's P
STAGES = 2
NUM_WG = 2                          # math warpgroups (threads 0..255); the producer is warpgroup 2
PRODUCER_WG = NUM_WG
PRODUCER_WARP = 4 * PRODUCER_WG     # warp 8 issues every TMA load
MATH_THREADS = 128 * NUM_WG
PRODUCER_REGS = 40                  # setmaxnreg: producer warpgroup
MATH_REGS = 232                     # ... and each math warpgroup (40 x 128 + 232 x 256 <= 65536)
BAR_A, BAR_B, BAR_OWN = 1, 2, 3     # named barriers: A published, B published, 3 + wg: own warpgroup
BAR_MATH = BAR_OWN + NUM_WG         # 5: the 256 math threads (the epilogue's row-sum exchange)
VEC_BF16, VEC_F32 = 8, 4            # elements per 16-byte chunk of an output row
O_ROW_BF16 = D_V + VEC_BF16         # padded smem row (1040 B): a warp's fragment stores hit 32 banks
O_ROW_F32 = D_V + 2 * VEC_F32       # padded smem row (2080 B): conflict-free per half-warp (8-byte stores)
assert BLOCK_M * O_ROW_F32 * 4 <= STAGES * N_CHUNKS * TILE * BOX * 2, "the f32 O tile must fit in the K ring"
LOG2_E = math.log2(math.e)
LN_2 = math.log(2.0)
BF16, F32, I32 = cutlass.BFloat16, cutlass.Float32, cutlass.Int32


@cute.jit
def store_p(r2s: cute.TiledCopy, tRS_acc: cute.Tensor, r_p32: cute.Tensor, r_p: cute.Tensor, tRS_sP: cute.Tensor):
    """This warpgroup's P (the tile's exp2 scores, f32 in the QK^T accumulator) -> bf16 -> its smem
    chunk with stmatrix (v20; v4-v19 stored it one bf16 element at a time: 32 STS.U16 per thread)."""
    for v in cutlass.range_constexpr(cute.size(r_p32)):
        r_p32[v] = tRS_acc[v]
    r_p.store(r_p32.load().to(BF16))
    cute.copy(r2s, r_p, tRS_sP)


def n_split_slots(max_pages: int, chunk: int, page_size: int) -> int:
    """Split slots per sequence: the grid's split axis and the workspace's, from shapes only
    (max_pages: the block table's width; a tile is 64 // page_size pages)."""
    max_tiles = -(-max_pages // (TILE // page_size))
    return max(1, -(-max_tiles // chunk))


class FlashMlaDecodeKernel:
    """Split kernel of flash_mla_decode_v13 (constexpr config; see the module docstring)."""

    def __init__(self, s_q: int, h_q: int, chunk: int, block_n: int = 64, num_threads: int = 384,
                 page_size: int = 64, timeline: bool = False, longest_first: bool = False, refill_warps: int = 1,
                 cluster_rows: int = 1, multicast_kv: bool = True, full_tile_issue: bool = False,
                 wide_tail_zero: bool = False, rowmax: str = "chain"):
        if not 1 <= h_q <= 128:
            raise ValueError(f"h_q: expected 1..128, got {h_q}")
        if not 1 <= s_q <= 16:
            raise ValueError(f"s_q: expected 1..16, got {s_q}")
        if block_n != TILE:
            raise ValueError(f"block_n: v9 walks 64-key tiles, so it must be {TILE}, got {block_n}")
        if page_size not in PAGE_SIZES:
            raise ValueError(f"page_size: expected one of {PAGE_SIZES}, got {page_size}")
        if num_threads != MATH_THREADS + 128:
            raise ValueError(f"num_threads: v9 runs {NUM_WG} math warpgroups (the 64x512 f32 output "
                             f"accumulator needs them) and a producer warpgroup: {MATH_THREADS + 128}; "
                             f"got {num_threads}")
        if chunk < 1:
            raise ValueError(f"chunk: expected >= 1 KV tiles per split, got {chunk}")
        if refill_warps not in (1, 2):
            raise ValueError(f"refill_warps: expected 1 or 2 producer warps per KV stage, got {refill_warps}")
        self.refill_warps = refill_warps             # v27: warps 8 + s + 2 h, h < refill_warps, load stage s
        n_row_blocks = -(-(s_q * h_q) // BLOCK_M)
        if cluster_rows not in (1, 2) or n_row_blocks % cluster_rows:
            raise ValueError(f"cluster_rows: expected 1, or 2 with an even number of 64-row blocks "
                             f"({n_row_blocks} here), got {cluster_rows}")
        self.cluster_rows = cluster_rows             # v29: row-block CTAs per cluster (v32: launched together)
        # v32: the cluster's CTAs share each K/V tile by multicast (v29) or each loads its own (co-scheduled
        # siblings, no remote operation at all)
        self.multicast = cluster_rows > 1 and bool(multicast_kv)
        self.s_q, self.h_q, self.chunk = s_q, h_q, chunk
        self.rows = s_q * h_q                        # query rows per sequence
        self.block_n = block_n
        self.num_threads = num_threads
        self.n_row_blocks = -(-self.rows // BLOCK_M)
        self.page_size = page_size
        self.pages_per_tile = TILE // page_size
        self.timeline = timeline                     # instrumented build: __call__ takes the timeline buffer
        self.longest_first = longest_first           # v14: CTA (y, z) runs work item order[z, y] (common/split_order.py)
        self.whole = bool(full_tile_issue)           # v44: full tiles' boxes issued with no per-box branch
        self.wide_zero = bool(wide_tail_zero)        # v46: the last tile's rows past seqlen zeroed 16 B per store
        if rowmax not in ROWMAX_MODES:
            raise ValueError(f"rowmax: expected one of {ROWMAX_MODES}, got {rowmax!r}")
        self.rowmax = rowmax                         # v57: the row-max step (short_rowmax.py); "chain": v46's

    # ---------------------------------------------------------------- host side
    @cute.jit
    def __call__(self, q: cute.Tensor, kv: cute.Tensor, block_table: cute.Tensor,
                 seqlens: cute.Tensor, out: cute.Tensor, lse: cute.Tensor, o_part: cute.Tensor,
                 lse_part: cute.Tensor, order: cute.Tensor, softmax_scale: cutlass.Float32, stream,
                 timeline: cute.Tensor = None):
        # order: [b, slots] int32 from the order kernel (read only with longest_first)
        # timeline: the instrumented build's int64 buffer [ctas, 3, TIMELINE.n_slots] (see
        # common/timeline.py); None in the plain build, whose kernel then never sees the parameter
        assert (timeline is not None) == self.timeline, "the timeline buffer goes with timeline=True only"
        # q (b, rows, 576) -> (rows, 576, b) and kv (pages, 64, 576) -> (64, 576, pages): the
        # TMA tiler is 2-D (64, 64), so batch / page become plain coordinates of the rest mode.
        q_t = cute.make_tensor(q.iterator, cute.select(q.layout, mode=[1, 2, 0]))
        kv_t = cute.make_tensor(kv.iterator, cute.select(kv.layout, mode=[1, 2, 0]))

        # one warpgroup scores a whole 64-key tile
        mma_qk = sm90_utils.make_trivial_tiled_mma(
            BF16, BF16, OperandMajorMode.K, OperandMajorMode.K, F32, (1, 1, 1), (BLOCK_M, TILE))
        # two atoms along N: warpgroup w computes output columns [256 w, 256 w + 256); P from smem
        mma_pv = sm90_utils.make_trivial_tiled_mma(
            BF16, BF16, OperandMajorMode.K, OperandMajorMode.MN, F32, (1, NUM_WG, 1),
            (BLOCK_M, D_V // NUM_WG))

        sQ_l = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (BLOCK_M, TILE, BOX), BF16, N_CHUNKS)
        # K tiles: (64 keys, 64 cols, stage * 9 + chunk), K-major SW128. A 64x64 K-major SW128
        # chunk is also a valid K-major A operand (64 rows x 64 k), so chunk 8 of a stage doubles
        # as that tile's P (see P_CHUNK).
        sK_l = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (BLOCK_M, TILE, BOX), BF16,
                                             STAGES * N_CHUNKS)
        # V view of the same bytes: (512 cols, 64 keys, stage), MN-major SW128 (see v1).
        sV_one = sm90_utils.make_smem_layout_b(LayoutEnum.COL_MAJOR, (BLOCK_M, D_V, TILE), BF16, 1)
        v_blk = cute.slice_(sV_one.outer, (None, None, 0))
        sV_outer = cute.make_layout((*v_blk.shape, STAGES),
                                    stride=(*v_blk.stride, N_CHUNKS * cute.cosize(v_blk) // V_CHUNKS))

        # The same bytes cut into page boxes: (page_size rows, 64 cols, (stage * 9 + chunk) *
        # pages_per_tile + page). A page_size x 64 K-major SW128 block is whole 8-row swizzle
        # atoms, so stacking pages_per_tile of them is exactly the 64-row chunk above.
        sKp_l = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (BLOCK_M, self.page_size, BOX), BF16,
                                              STAGES * N_CHUNKS * self.pages_per_tile)

        one_q = cute.slice_(sQ_l, (None, None, 0))
        one_box = cute.slice_(sKp_l, (None, None, 0))
        g2s = cpasync.CopyBulkTensorTileG2SOp()
        tma_q, q_tma = cpasync.make_tiled_tma_atom(g2s, q_t, one_q, (BLOCK_M, BOX))
        # v29: with a row-block pair the K/V boxes are multicast, whole (num_multicast=1: each box is
        # issued by one CTA for both, not cut into a slice per CTA)
        g2s_kv = cpasync.CopyBulkTensorTileG2SMulticastOp() if cutlass.const_expr(self.multicast) else g2s
        tma_k, kv_tma = cpasync.make_tiled_tma_atom(g2s_kv, kv_t, one_box, (self.page_size, BOX))
        self.box_bytes = cute.size_in_bytes(BF16, one_box)                # one page_size x 64 box
        self.q_bytes = cute.size_in_bytes(BF16, one_q) * N_CHUNKS

        @cute.struct
        class Storage:
            q_bar: cute.struct.MemRange[cutlass.Int64, 1]
            full: cute.struct.MemRange[cutlass.Int64, STAGES * N_CHUNKS]   # one per K box
            empty: cute.struct.MemRange[cutlass.Int64, STAGES]
            x_max: cute.struct.MemRange[F32, NUM_WG * BLOCK_M]     # m after tile A (0) / B (1)
            x_scale: cute.struct.MemRange[F32, NUM_WG * BLOCK_M]   # s_A (0) / s_B (1)
            s_sum: cute.struct.MemRange[F32, NUM_WG * BLOCK_M]     # each warpgroup's row sum (epilogue)
            sQ: cute.struct.Align[cute.struct.MemRange[BF16, cute.cosize(sQ_l)], 1024]
            sK: cute.struct.Align[cute.struct.MemRange[BF16, cute.cosize(sK_l)], 1024]

        self.storage = Storage
        n_slots = cute.ceil_div(cute.ceil_div(block_table.shape[1], self.pages_per_tile), self.chunk)
        self.flash_mla_decode_v57_kernel(
            tma_q, q_tma, tma_k, kv_tma, block_table, seqlens, out, lse, o_part, lse_part, order,
            softmax_scale * LOG2_E, mma_qk, mma_pv, sQ_l, sK_l, sV_outer, sKp_l,
            *(() if timeline is None else (timeline,))).launch(
            grid=(self.n_row_blocks, n_slots, q.shape[0]), block=(self.num_threads, 1, 1),
            cluster=(self.cluster_rows, 1, 1), stream=stream,
            min_blocks_per_mp=1)      # emits .minnctapersm, without which ptxas drops setmaxnreg

    # ---------------------------------------------------------------- device side
    @cute.kernel
    def flash_mla_decode_v57_kernel(self, tma_q: cute.CopyAtom, q_tma: cute.Tensor, tma_k: cute.CopyAtom,
                                   kv_tma: cute.Tensor, block_table: cute.Tensor, seqlens: cute.Tensor,
                                   out: cute.Tensor, lse: cute.Tensor, o_part: cute.Tensor,
                                   lse_part: cute.Tensor, order: cute.Tensor, scale_log2: cutlass.Float32,
                                   mma_qk: cute.TiledMma, mma_pv: cute.TiledMma,
                                   sQ_l: cute.ComposedLayout, sK_l: cute.ComposedLayout, sV_outer: cute.Layout,
                                   sKp_l: cute.ComposedLayout, tl: cute.Tensor = None):
        tidx, _, _ = cute.arch.thread_idx()
        rb, split, bidx = cute.arch.block_idx()      # row block, split, sequence
        if cutlass.const_expr(self.longest_first):
            # v14: the CTA's place in launch order picks the work item, longest first (common/split_order.py);
            # -1: no split left for this CTA (split past any sequence's count: it does nothing)
            item = order[bidx, split]
            n_slots = order.shape[1]
            bidx = cutlass.max(item, 0) // n_slots
            split = cutlass.max(item, 0) % n_slots + (1 - cutlass.min(item + 1, 1)) * n_slots   # -1 -> n_slots
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg = cute.arch.make_warp_uniform(tidx // 128)
        ltid = tidx % 128                            # thread within its warpgroup

        st = SmemAllocator().allocate(self.storage)
        sQ = st.sQ.get_tensor(sQ_l.outer, swizzle=sQ_l.inner)
        sK = st.sK.get_tensor(sK_l.outer, swizzle=sK_l.inner)
        sV = st.sK.get_tensor(sV_outer, swizzle=sK_l.inner)       # same bytes as sK
        sKp = st.sK.get_tensor(sKp_l.outer, swizzle=sKp_l.inner)  # same bytes, in page boxes
        x_max = st.x_max.get_tensor(cute.make_layout((BLOCK_M, NUM_WG), stride=(1, BLOCK_M)))
        x_scale = st.x_scale.get_tensor(cute.make_layout((BLOCK_M, NUM_WG), stride=(1, BLOCK_M)))
        s_sum = st.s_sum.get_tensor(cute.make_layout((BLOCK_M, NUM_WG), stride=(1, BLOCK_M)))
        q_bar = st.q_bar.data_ptr()
        full = st.full.data_ptr()
        empty = st.empty.data_ptr()

        if warp_idx == 0:
            cpasync.prefetch_descriptor(tma_q)
            cpasync.prefetch_descriptor(tma_k)
            with cute.arch.elect_one():
                cute.arch.mbarrier_init(q_bar, 1)
                for i in cutlass.range_constexpr(STAGES * N_CHUNKS):
                    cute.arch.mbarrier_init(full + i, 1)
                for s in cutlass.range_constexpr(STAGES):
                    # one arrival per math warp (v29: of both CTAs of the pair)
                    cute.arch.mbarrier_init(empty + s, 4 * NUM_WG * (2 if self.multicast else 1))
        cute.arch.mbarrier_init_fence()
        peer = cutlass.Int32(0)
        rank = cutlass.Int32(0)
        if cutlass.const_expr(self.multicast):
            rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
            peer = 1 - rank
            cute.arch.cluster_arrive_relaxed()       # v29: the peer's barriers exist before any multicast
            cute.arch.cluster_wait()
        else:
            cute.arch.sync_threads()
        rec = tln.Recorder.make(tl, TIMELINE, warp_idx)   # tl None: every tln call below emits nothing
        tln.start(rec)

        # ---- the split schedule, from the length on the device
        seqlen = seqlens[bidx]
        n_tiles = (seqlen + TILE - 1) // TILE
        n_splits = cutlass.max((n_tiles + self.chunk - 1) // self.chunk, 1)
        t_begin = split * self.chunk
        t_end = cutlass.min(n_tiles, t_begin + self.chunk)
        if split < n_splits:                          # CTA-uniform: idle split slots do nothing
            tQsQ, tQgQ = cpasync.tma_partition(tma_q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2),
                                               cute.zipped_divide(q_tma, (BLOCK_M, BOX)))
            tKsK, tKgK = cpasync.tma_partition(tma_k, 0, cute.make_layout(1), cute.group_modes(sKp, 0, 2),
                                               cute.zipped_divide(kv_tma, (self.page_size, BOX)))

            if wg == PRODUCER_WG:
                # ---- the producer warpgroup: warp 8 issues Q; v11: warp 8 + s loads the tiles of
                # stage s; v26: warp 8 + s + 2 h issues part h of each of them (split_refill.py);
                # v27: only as many parts as `refill_warps` (2 at pages 16/32, 1 at page 64, where
                # v26's extra warps cost more than they saved); warps with no part give their
                # registers away and exit
                cute.arch.setmaxregister_decrease(PRODUCER_REGS)
                stage = (warp_idx - PRODUCER_WARP) % STAGES
                part = (warp_idx - PRODUCER_WARP) // STAGES
                ids = cute.make_rmem_tensor((self.pages_per_tile,), cutlass.Int32)
                if warp_idx == PRODUCER_WARP:
                    expect_tile(q_bar, self.q_bytes)
                    for c in cutlass.range_constexpr(N_CHUNKS):
                        cute.copy(tma_q, tQgQ[(None, (rb, c, bidx))], tQsQ[(None, c)], tma_bar_ptr=q_bar)
                if part < self.refill_warps:
                    if t_begin + stage < t_end:
                        # the split's first two tiles (A -> stage 0, B -> stage 1), each warp its part
                        n_first = read_page_ids(block_table, bidx, t_begin + stage, seqlen, ids,
                                                self.pages_per_tile, self.page_size)
                        self.load(tma_k, tKgK, tKsK, full, ids, n_first, stage, part, rank)
                    tln.mark(rec, "kv_issued")
                    # then refill stage s: tile t (t - t_begin = 2 p + s) as soon as both math
                    # warpgroups are done with tile t - 2 (pair p - 1 of that stage: empty phase
                    # (p - 1) % 2), from page ids read one refill earlier (v10)
                    n_pages = cutlass.Int32(0)
                    if t_begin + STAGES + stage < t_end:
                        n_pages = read_page_ids(block_table, bidx, t_begin + STAGES + stage, seqlen, ids,
                                                self.pages_per_tile, self.page_size)
                    for t in cutlass.range(t_begin + STAGES + stage, t_end, STAGES, unroll=1):
                        pair = (t - t_begin) // STAGES
                        tln.mark(rec, "a_wait_start", pair)     # recorded by warp 8 only (stage 0)
                        cute.arch.mbarrier_wait(empty + stage, (pair - 1) % 2)
                        tln.mark(rec, "a_wait_end", pair)
                        self.load(tma_k, tKgK, tKsK, full, ids, n_pages, stage, part, rank)
                        tln.mark(rec, "a_issued", pair)
                        if t + STAGES < t_end:                 # this warp's next refill: its ids now
                            n_pages = read_page_ids(block_table, bidx, t + STAGES, seqlen, ids,
                                                    self.pages_per_tile, self.page_size)
            else:
                cute.arch.setmaxregister_increase(MATH_REGS)

                # ---- per-thread fragments: warpgroup wg scores the tiles of stage wg
                thr_qk = mma_qk.get_slice(ltid)
                tSrQ = mma_qk.make_fragment_A(thr_qk.partition_A(sQ))
                tSrK = mma_qk.make_fragment_B(thr_qk.partition_B(sK))
                acc_s = cute.make_rmem_tensor(thr_qk.partition_shape_C((BLOCK_M, TILE)), F32)
                s_rc = acc_rows_cols(acc_s)
                c_rc = acc_rows_cols(thr_qk.partition_C(cute.make_identity_tensor((BLOCK_M, TILE))))
                own_p = wg * N_CHUNKS + P_CHUNK                 # where this warpgroup writes its tile's P
                # v20: P goes to shared memory with stmatrix (8x8 bf16 matrices, 16-byte rows) instead
                # of one 2-byte store per element
                r2s_p = cute.make_tiled_copy_S(
                    sm90_utils.get_smem_store_op(LayoutEnum.ROW_MAJOR, BF16, F32),
                    cute.make_tiled_copy_C_atom(
                        cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), BF16), mma_qk))
                thr_r2s_p = r2s_p.get_slice(ltid)
                tRS_sP = thr_r2s_p.partition_D(sK[None, None, own_p])
                tRS_acc = r2s_p.retile(acc_s)
                r_p32 = cute.make_rmem_tensor(cute.shape(thr_r2s_p.partition_S(sK[None, None, own_p])), F32)
                r_p = cute.make_rmem_tensor(r_p32.layout, BF16)

                sK_flat = flat_chunks(st.sK.data_ptr(), STAGES * N_CHUNKS, TILE, BOX)   # v46: whole rows only
                thr_pv = mma_pv.get_slice(tidx)
                tOrP = mma_pv.make_fragment_A(thr_pv.partition_A(sK))     # P of stage s: slot s * 9 + 8
                tOrV = mma_pv.make_fragment_B(thr_pv.partition_B(sV))
                acc_o = cute.make_rmem_tensor(thr_pv.partition_shape_C((BLOCK_M, D_V)), F32)
                acc_o.fill(0.0)
                o_rc = acc_rows_cols(acc_o)

                n_rows = cute.size(s_rc, mode=[0])            # rows this thread owns (2)
                n_ocols = cute.size(o_rc, mode=[1])           # O columns per row (64)
                row_max = cute.make_rmem_tensor((n_rows,), F32)
                row_sum = cute.make_rmem_tensor((n_rows,), F32)
                row_lim = cute.make_rmem_tensor((n_rows,), I32)
                tile_max = cute.make_rmem_tensor((n_rows,), F32)
                scale = cute.make_rmem_tensor((n_rows,), F32)
                row_max.fill(-F32.inf)
                row_sum.fill(0.0)
                for r in cutlass.range_constexpr(n_rows):
                    grow = rb * BLOCK_M + c_rc[r, 0][0]
                    # keys 0 .. seqlen - s_q + token are visible (s_q = 1: all of them); rows past
                    # s_q*h_q get seqlen, harmless since they are never written.
                    row_lim[r] = cutlass.min(seqlen - (self.s_q - 1) + grow // self.h_q, seqlen)

                cute.arch.mbarrier_wait(q_bar, 0)
                tln.mark(rec, "q_landed")
                tail = seqlen - (n_tiles - 1) * TILE          # valid rows of the last tile (1..64)
                n_pairs = (t_end - t_begin + 1) // 2

                mma_qk.set(warpgroup.Field.ACCUMULATE, True)
                mma_pv.set(warpgroup.Field.ACCUMULATE, True)
                # v16: the pairs in two copies of the loop: the first without the tail branch, the
                # second with it (v13's zeroing before the publish fence). v21: the first copy takes
                # the leading pairs whose two tiles no row masks (keys below seqlen - s_q + 1, the
                # smallest row limit) and skips the mask; the second takes the rest, the last pair at
                # least, with the mask (usually just the last pair, as in v16)
                lim_min = seqlen - (self.s_q - 1)
                n_clear = cutlass.max(cutlass.min(t_end, lim_min // TILE) - t_begin, 0)
                p_split = cutlass.min(cutlass.max(n_pairs - 1, 0), n_clear // 2)
                for peel in cutlass.range_constexpr(2):
                    p_lo = 0 if peel == 0 else p_split
                    p_hi = p_split if peel == 0 else n_pairs
                    for p in cutlass.range(p_lo, p_hi, unroll=1):
                        phase = p % 2
                        t_own = t_begin + 2 * p + wg              # WG0: tile A, WG1: tile B
                        has_b = t_begin + 2 * p + 1 < t_end
                        mine = t_own < t_end                       # false only for WG1 with no tile B

                        # ---- S = Q K^T over this warpgroup's whole tile, box by box as they land
                        if mine:
                            tln.mark(rec, "qk_start", p)
                            acc_s.fill(0.0)
                            warpgroup.fence()
                            for c in cutlass.range_constexpr(N_CHUNKS):
                                cute.arch.mbarrier_wait(full + wg * N_CHUNKS + c, phase)
                                tln.mark(rec, f"box{c}", p)
                                for kb in cutlass.range_constexpr(BOX // 16):
                                    cute.gemm(mma_qk, acc_s, tSrQ[(None, None, kb, c)],
                                              tSrK[(None, None, kb, wg * N_CHUNKS + c)], acc_s)
                            warpgroup.commit_group()
                            tln.mark(rec, "qk_issued", p)
                            warpgroup.wait_group(0)
                            tln.mark(rec, "qk_end", p)
                            self.rowmax_step(s_rc, c_rc, row_lim, t_own * TILE, scale_log2, tile_max, peel == 1)
                            tln.mark(rec, "rowmax_end", p)
                        else:
                            acc_s.fill(-F32.inf)
                            tile_max.fill(-F32.inf)

                        if wg == 0:
                            # ---- tile A: new max, P_A, publish, O_L = O_L s_A + P_A V_A[:, :256]
                            self.exp_step(s_rc, row_max, row_sum, tile_max, scale, scale_log2)
                            store_p(r2s_p, tRS_acc, r_p32, r_p, tRS_sP)
                            for r in cutlass.range_constexpr(n_rows):
                                if ltid % 4 == 0:
                                    x_max[c_rc[r, 0][0], 0] = row_max[r]
                                    x_scale[c_rc[r, 0][0], 0] = scale[r]
                            tln.mark(rec, "softmax_end", p)
                            if cutlass.const_expr(peel == 1):
                                if t_own == n_tiles - 1:
                                    if tail < TILE:
                                        # v13: QK^T of the tile is long done (its scores past seqlen are -inf);
                                        # only P V reads these rows, after the publish right below
                                        self.zero_tail(sK, sK_flat, tail, wg, ltid)
                            cute.arch.fence_proxy("async.shared", space="cta")
                            cute.arch.barrier_arrive(barrier_id=BAR_A, number_of_threads=256)
                            cute.arch.barrier(barrier_id=BAR_OWN, number_of_threads=128)
                            tln.mark(rec, "own_sync", p)
                            scale_rows_unless_one(o_rc, scale)
                            warpgroup.fence()
                            for kb in cutlass.range_constexpr(TILE // 16):
                                cute.gemm(mma_pv, acc_o, tOrP[(None, None, kb, P_CHUNK)], tOrV[(None, None, kb, 0)], acc_o)
                            warpgroup.commit_group()
                            tln.mark(rec, "pv_a_issued", p)

                            # ---- tile B's statistics from WG1: O_L = O_L s_B + P_B V_B[:, :256]
                            tln.mark(rec, "wait_peer_start", p)
                            cute.arch.barrier(barrier_id=BAR_B, number_of_threads=256)
                            tln.mark(rec, "wait_peer_end", p)
                            for r in cutlass.range_constexpr(n_rows):
                                scale[r] = x_scale[c_rc[r, 0][0], 1]
                                row_max[r] = x_max[c_rc[r, 0][0], 1]
                                row_sum[r] = row_sum[r] * scale[r]
                            warpgroup.wait_group(0)
                            tln.mark(rec, "pv_a_end", p)
                            with cute.arch.elect_one():
                                self.release(empty, peer)                        # this warp is done with stage 0
                            scale_rows_unless_one(o_rc, scale)
                            if has_b:
                                warpgroup.fence()
                                for kb in cutlass.range_constexpr(TILE // 16):
                                    cute.gemm(mma_pv, acc_o, tOrP[(None, None, kb, N_CHUNKS + P_CHUNK)],
                                              tOrV[(None, None, kb, 1)], acc_o)
                                warpgroup.commit_group()
                                tln.mark(rec, "pv_b_issued", p)
                            warpgroup.wait_group(0)
                            tln.mark(rec, "pv_b_end", p)
                            if has_b:
                                with cute.arch.elect_one():
                                    self.release(empty + 1, peer)
                        else:
                            # ---- tile A's statistics from WG0: O_R = O_R s_A + P_A V_A[:, 256:] (async)
                            tln.mark(rec, "wait_peer_start", p)
                            cute.arch.barrier(barrier_id=BAR_A, number_of_threads=256)
                            tln.mark(rec, "wait_peer_end", p)
                            for r in cutlass.range_constexpr(n_rows):
                                scale[r] = x_scale[c_rc[r, 0][0], 0]
                                row_max[r] = x_max[c_rc[r, 0][0], 0]
                                row_sum[r] = row_sum[r] * scale[r]
                            scale_rows_unless_one(o_rc, scale)
                            warpgroup.fence()
                            for kb in cutlass.range_constexpr(TILE // 16):
                                cute.gemm(mma_pv, acc_o, tOrP[(None, None, kb, P_CHUNK)], tOrV[(None, None, kb, 0)], acc_o)
                            warpgroup.commit_group()
                            tln.mark(rec, "pv_a_issued", p)

                            # ---- meanwhile tile B: new max over m_A, P_B, publish
                            self.exp_step(s_rc, row_max, row_sum, tile_max, scale, scale_log2)
                            if mine:
                                store_p(r2s_p, tRS_acc, r_p32, r_p, tRS_sP)
                            for r in cutlass.range_constexpr(n_rows):
                                if ltid % 4 == 0:
                                    x_max[c_rc[r, 0][0], 1] = row_max[r]
                                    x_scale[c_rc[r, 0][0], 1] = scale[r]
                            tln.mark(rec, "softmax_end", p)
                            if cutlass.const_expr(peel == 1):
                                if mine:
                                    if t_own == n_tiles - 1:
                                        if tail < TILE:
                                            self.zero_tail(sK, sK_flat, tail, wg, ltid)   # v13: as WG0's
                            cute.arch.fence_proxy("async.shared", space="cta")
                            cute.arch.barrier_arrive(barrier_id=BAR_B, number_of_threads=256)
                            cute.arch.barrier(barrier_id=BAR_OWN + 1, number_of_threads=128)
                            tln.mark(rec, "own_sync", p)

                            # ---- O_R = O_R s_B + P_B V_B[:, 256:]
                            warpgroup.wait_group(0)
                            tln.mark(rec, "pv_a_end", p)
                            with cute.arch.elect_one():
                                self.release(empty, peer)                        # this warp is done with stage 0
                            scale_rows_unless_one(o_rc, scale)
                            if mine:
                                warpgroup.fence()
                                for kb in cutlass.range_constexpr(TILE // 16):
                                    cute.gemm(mma_pv, acc_o, tOrP[(None, None, kb, N_CHUNKS + P_CHUNK)],
                                              tOrV[(None, None, kb, 1)], acc_o)
                                warpgroup.commit_group()
                                tln.mark(rec, "pv_b_issued", p)
                                warpgroup.wait_group(0)
                                tln.mark(rec, "pv_b_end", p)
                                with cute.arch.elect_one():
                                    self.release(empty + 1, peer)

                # ---- epilogue: O / l per row; one split -> out (bf16) and lse (natural log, +inf if
                # no key); several -> O / l (f32) and the log2-domain lse (-inf if no key) per split
                tln.mark(rec, "epi_start")
                tOcO = acc_rows_cols(thr_pv.partition_C(cute.make_identity_tensor((BLOCK_M, D_V))))
                for r in cutlass.range_constexpr(n_rows):
                    l_wg = quad_allreduce_sum(row_sum[r])          # this warpgroup's keys
                    if ltid % 4 == 0:
                        s_sum[c_rc[r, 0][0], wg] = l_wg
                cute.arch.barrier(barrier_id=BAR_MATH, number_of_threads=MATH_THREADS)   # not the producer
                tln.mark(rec, "epi_sums")
                for r in cutlass.range_constexpr(n_rows):
                    l_tot = s_sum[c_rc[r, 0][0], 0] + s_sum[c_rc[r, 0][0], 1]
                    inv = F32(1.0) / l_tot if l_tot > F32(0.0) else F32(0.0)
                    for j in cutlass.range_constexpr(n_ocols):
                        o_rc[r, j] = o_rc[r, j] * inv
                    row_sum[r] = l_tot
                # O goes out through shared memory (the K ring is dead now: every tile was
                # consumed and both warpgroups passed the barrier above after their last P V):
                # each thread writes its accumulator fragment into padded rows (conflict-free),
                # then every thread copies whole 16-byte row chunks to global memory, so a warp
                # stores 512 contiguous bytes per instruction instead of 8 rows x 16 bytes.
                if n_splits == 1:
                    r_o = cute.make_rmem_tensor(acc_o.layout, BF16)
                    r_o_rc = acc_rows_cols(r_o)
                    r_o.store(acc_o.load().to(BF16))
                    sOb = cute.make_tensor(st.sK.data_ptr(), cute.make_layout((BLOCK_M, D_V), stride=(O_ROW_BF16, 1)))
                    for r in cutlass.range_constexpr(n_rows):
                        for j in cutlass.range_constexpr(n_ocols):
                            sOb[tOcO[r, j]] = r_o_rc[r, j]
                    cute.arch.barrier(barrier_id=BAR_MATH, number_of_threads=MATH_THREADS)
                    gO = cute.local_tile(out[bidx, None, None], (BLOCK_M, D_V), (rb, 0))
                    store_rows_from_smem(sOb, gO, tidx, self.rows - rb * BLOCK_M, VEC_BF16, BLOCK_M, D_V, MATH_THREADS)
                    for r in cutlass.range_constexpr(n_rows):
                        grow = rb * BLOCK_M + tOcO[r, 0][0]
                        if grow < self.rows:
                            if wg == 0:
                                if tidx % 4 == 0:
                                    lse_v = F32(F32.inf)
                                    if row_sum[r] > F32(0.0):
                                        lse_v = (row_max[r] + cute.math.log2(row_sum[r])) * LN_2
                                    lse[bidx, grow % self.h_q, grow // self.h_q] = lse_v
                else:
                    sOf = cute.make_tensor(cute.recast_ptr(st.sK.data_ptr(), dtype=F32),
                                           cute.make_layout((BLOCK_M, D_V), stride=(O_ROW_F32, 1)))
                    for r in cutlass.range_constexpr(n_rows):
                        for j in cutlass.range_constexpr(n_ocols):
                            sOf[tOcO[r, j]] = o_rc[r, j]
                    cute.arch.barrier(barrier_id=BAR_MATH, number_of_threads=MATH_THREADS)
                    gP = cute.local_tile(o_part[bidx, split, None, None], (BLOCK_M, D_V), (rb, 0))
                    store_rows_from_smem(sOf, gP, tidx, self.rows - rb * BLOCK_M, VEC_F32, BLOCK_M, D_V, MATH_THREADS)
                    for r in cutlass.range_constexpr(n_rows):
                        grow = rb * BLOCK_M + tOcO[r, 0][0]
                        if grow < self.rows:
                            if wg == 0:
                                if tidx % 4 == 0:
                                    lse_v = F32(-F32.inf)
                                    if row_sum[r] > F32(0.0):
                                        lse_v = row_max[r] + cute.math.log2(row_sum[r])
                                    lse_part[bidx, split, grow] = lse_v
                tln.mark(rec, "epi_end")
        tln.end(rec)
        if cutlass.const_expr(self.multicast):
            cute.arch.cluster_arrive()               # v29: no CTA leaves while its peer may still arrive on
            cute.arch.cluster_wait()                 # its empty barriers

    # ---------------------------------------------------------------- v29's pair helpers
    @cute.jit
    def load(self, tma_k: cute.CopyAtom, tKgK: cute.Tensor, tKsK: cute.Tensor, full, ids: cute.Tensor,
             n_pages: cutlass.Int32, stage: cutlass.Int32, part: cutlass.Int32, rank: cutlass.Int32):
        """This warp's part of a tile: v27's loads alone, or (pair) its share of the multicast boxes."""
        if cutlass.const_expr(self.multicast):
            load_part_pair(tma_k, tKgK, tKsK, full, ids, n_pages, stage, part, self.refill_warps, rank, N_CHUNKS,
                           self.pages_per_tile, self.box_bytes)
        else:
            load_part(tma_k, tKgK, tKsK, full, ids, n_pages, stage, part, self.refill_warps, N_CHUNKS,
                      self.pages_per_tile, self.box_bytes, self.whole)

    @cute.jit
    def rowmax_step(self, s_rc: cute.Tensor, c_rc: cute.Tensor, row_lim: cute.Tensor, key0: cutlass.Int32,
                    scale_log2: cutlass.Float32, tile_max: cute.Tensor, masked: cutlass.Constexpr):
        """A tile's row max into tile_max (log2 domain): v46's scaled chain (v21: unmasked in the
        loop's first copy), or v57's raw-score max, chained or as a tree (short_rowmax.py)."""
        if cutlass.const_expr(self.rowmax == "chain"):
            if cutlass.const_expr(masked):
                scale_mask_rowmax(s_rc, c_rc, row_lim, key0, scale_log2, tile_max)
            else:
                scale_rowmax(s_rc, scale_log2, tile_max)
        else:
            if cutlass.const_expr(masked):
                raw_mask_rowmax(s_rc, c_rc, row_lim, key0, scale_log2, tile_max, self.rowmax == "tree")
            else:
                raw_rowmax(s_rc, scale_log2, tile_max, self.rowmax == "tree")

    @cute.jit
    def exp_step(self, s_rc: cute.Tensor, row_max: cute.Tensor, row_sum: cute.Tensor, tile_max: cute.Tensor,
                 scale: cute.Tensor, scale_log2: cutlass.Float32):
        """P = exp2 of the scores against the lazy reference max: v46's (scores already scaled) or
        v57's with the scale in the exponent's FFMA (raw scores)."""
        exp_against_lazy_max(s_rc, row_max, row_sum, tile_max, scale, scale_log2, self.rowmax != "chain")

    @cute.jit
    def zero_tail(self, sK: cute.Tensor, sK_flat: cute.Tensor, tail: cutlass.Int32, stage: cutlass.Int32,
                  ltid: cutlass.Int32):
        """Rows tail..63 of this warpgroup's last tile, value columns: v46's 16-byte stores
        (tail_rows.py) or v13-v44's element loop through the swizzled view."""
        if cutlass.const_expr(self.wide_zero):
            zero_rows_from(sK_flat, tail, stage, ltid, 128, TILE, BOX, V_CHUNKS, N_CHUNKS)
        else:
            zero_tail_value_rows(sK, tail, stage, ltid, 128, TILE, D_V, BOX, N_CHUNKS)

    @cute.jit
    def release(self, bar, peer: cutlass.Int32):
        """One math warp is done with a stage (called by an elected lane): its own CTA's empty
        barrier, and (pair) the peer's, whose producer refills both CTAs' copies of the stage."""
        cute.arch.mbarrier_arrive(bar)
        if cutlass.const_expr(self.multicast):
            cute.arch.mbarrier_arrive(bar, peer_cta_rank_in_cluster=peer)


# -------------------------------------------------------------------- compile / call glue
def fake_arguments(k: FlashMlaDecodeKernel) -> tuple:
    """Fake tensors in __call__'s order (views: q [b, s_q*h_q, 576], kv [pages, 64, 576],
    out [b, s_q*h_q, 512], o_part [b, slots, s_q*h_q, 512] f32, lse_part [b, slots, s_q*h_q] f32),
    then the scale and an env stream; the timeline build adds its int64 buffer after the stream."""
    b = cute.sym_int(symbol="b")
    num_blocks = cute.sym_int(symbol="num_blocks")
    max_blocks = cute.sym_int(symbol="max_blocks")
    slots = cute.sym_int(symbol="split_slots")
    rm3, rm4 = (2, 1, 0), (3, 2, 1, 0)                 # row-major: last mode fastest
    q = make_fake_compact_tensor(BF16, (b, k.rows, D_QK), stride_order=rm3, assumed_align=16)
    kv = make_fake_compact_tensor(BF16, (num_blocks, k.page_size, D_QK), stride_order=rm3, assumed_align=16)
    block_table = make_fake_compact_tensor(I32, (b, max_blocks), stride_order=(1, 0), assumed_align=4)
    seqlens = make_fake_compact_tensor(I32, (b,), assumed_align=4)
    out = make_fake_compact_tensor(BF16, (b, k.rows, D_V), stride_order=rm3, assumed_align=16)
    lse = make_fake_compact_tensor(F32, (b, k.h_q, k.s_q), stride_order=rm3, assumed_align=4)
    o_part = make_fake_compact_tensor(F32, (b, slots, k.rows, D_V), stride_order=rm4, assumed_align=16)
    lse_part = make_fake_compact_tensor(F32, (b, slots, k.rows), stride_order=rm3, assumed_align=4)
    order = make_fake_compact_tensor(I32, (b, slots), stride_order=(1, 0), assumed_align=4)
    args = (q, kv, block_table, seqlens, out, lse, o_part, lse_part, order, F32(D_QK ** -0.5),
            make_fake_stream(use_tvm_ffi_env_stream=True))
    if k.timeline:                                     # the instrumented build's buffer, last
        ctas = cute.sym_int(symbol="timeline_ctas")
        args += (make_fake_compact_tensor(cutlass.Int64, (ctas, len(TIMELINE.rows), TIMELINE.n_slots),
                                          stride_order=rm3, assumed_align=8),)
    return args


def kv_page_size(kv_cache) -> int:
    """The cache's page size (dim 1), checked against what v5 supports."""
    if kv_cache.dim() != 4 or kv_cache.shape[1] not in PAGE_SIZES or tuple(kv_cache.shape[2:]) != (1, D_QK):
        raise ValueError(f"kv_cache: expected [num_blocks, page_size in {PAGE_SIZES}, 1, {D_QK}], "
                         f"got {list(kv_cache.shape)}")
    return int(kv_cache.shape[1])


def workspace(q, kv_cache, block_table, chunk: int) -> dict:
    """The split partials for this shape (never sized from length values)."""
    import torch
    b, s_q, h_q, _ = q.shape
    page_size = kv_page_size(kv_cache)
    slots = n_split_slots(block_table.shape[1], chunk, page_size)
    return {"o_part": torch.empty(b, slots, s_q * h_q, D_V, dtype=torch.float32, device=q.device),
            "lse_part": torch.empty(b, slots, s_q * h_q, dtype=torch.float32, device=q.device),
            "order": torch.empty(b, slots, dtype=torch.int32, device=q.device)}     # the order kernel's (v14)


def timeline_workspace(q, kv_cache, block_table, chunk: int, max_ctas: int) -> tuple[dict, tuple[int, int, int]]:
    """The instrumented build's zeroed buffer [min(grid CTAs, max_ctas), 3, slots] int64 and the
    grid (x = row block, y = split slot, z = sequence) its CTA index runs over."""
    import torch
    b, s_q, h_q, _ = q.shape
    grid = (-(-(s_q * h_q) // BLOCK_M), n_split_slots(block_table.shape[1], chunk, kv_page_size(kv_cache)), b)
    ctas = max(1, min(grid[0] * grid[1] * grid[2], max_ctas))
    buf = torch.zeros(ctas, len(TIMELINE.rows), TIMELINE.n_slots, dtype=torch.int64, device=q.device)
    return {"timeline": buf}, grid


def launch_arguments(q, kv_cache, block_table, cache_seqlens, out, lse, ws, softmax_scale) -> tuple:
    """The torch views the compiled split kernel is called with (same order, no stream)."""
    b, s_q, h_q, d = q.shape
    if d != D_QK:
        raise ValueError(f"q: expected [b, s_q, h_q, {D_QK}], got {list(q.shape)}")
    page_size = kv_page_size(kv_cache)
    for name, t in (("q", q), ("kv_cache", kv_cache), ("out", out), ("o_part", ws["o_part"])):
        if not t.is_contiguous() or t.data_ptr() % 16:
            raise ValueError(f"{name}: expected a contiguous, 16-byte aligned tensor (TMA)")
    return (q.view(b, s_q * h_q, D_QK), kv_cache.view(kv_cache.shape[0], page_size, D_QK),
            block_table, cache_seqlens, out.view(b, s_q * h_q, D_V), lse, ws["o_part"], ws["lse_part"], ws["order"],
            float(softmax_scale))
