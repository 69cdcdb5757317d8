"""ct_flash_mla_decode_v8: v7 with its slot-batched combine loops free of reductions over the slots:
the balanced combine in two passes (every slot's lse into an elementwise [slots, rows] max, then the
weighted O into an elementwise [slots, rows, columns] sum), the sequence combine's sum the same way,
each reduced over the slots once after its loop.

Why: v7's balanced combine at b=1 h_q=16 (8 slots of [8 rows, 64 columns] per iteration) still took
25.3 us for 17 iterations, about 1.5 us each (ncu). Its exported cubin reduces over the slot axis
inside the loop (the running max and the sum): 468 LDS, 68 STS and 36 BAR.SYNC in the kernel; v8's
has 78 LDS, 18 STS, 6 BAR, none inside a loop. Device code: kernel.py (the sequence combine),
balanced.py (the balanced combine). Devlog: docs/kernels/ct_flash_mla_decode.md.
"""
from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass

from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import D_QK, D_V, PAGE_SIZE, MlaDecodeProblem, page_size_reasons
from mla_var3.runtime.ct_kernel import CtKernel, gpu_code_for
from mla_var3.runtime.kernel_plan import KernelPlan, Tiling, smem_reasons
from mla_var3.runtime.runtime_kernel import RuntimeKernel

INDEX_LIMIT = 2 ** 31          # the kernels' index math is int32 (cache, partial O)
SMEM_BYTES = 223 * 1024        # >= what the exported sm_90 split cubin reserves (222800 B at 1 split,
                               # 214608 B with partials; the combine: 107656 B); cuTile sizes it
MAX_SPLITS = 32
SCHEDULES = ("sequence", "balanced")
RESCALES = ("lazy", "eager")   # v5: the online softmax's reference max moved lazily, or every tile (v4)
COMBINE_COLS = (64, 128, 256, 512)   # v6: output columns per combine block
COMBINE_SLOTS = (1, 2, 4, 8, 16)     # v7: partial slots merged per combine iteration
MAX_PARTS = 1024
MAX_BALANCED_B = 4096          # the balanced kernels load every length as one [pow2(b)] tile
SPLIT_CANDIDATES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32)

# The split-count heuristic's machine and costs (H100/H200 SXM; fitted to v2's H200 records):
# one split block per SM (223 KB of shared memory); a block spends T_TILE_US per 64-key tile
# (73.7 KB of cache; v2: 239.8 us for 64 tiles, 68.5 us for 16), and its other traffic (the q
# tile, the f32 partial it writes) at the same bytes per us, plus a fixed T_BLOCK_US (pipeline
# fill, epilogue). The combine streams the partials at ~3 TB/s plus a launch. Only the choice of
# num_splits depends on these numbers, never correctness.
NUM_SMS = 132
T_TILE_US = 3.6
SM_BYTES_PER_US = PAGE_SIZE * D_QK * 2 / T_TILE_US
T_BLOCK_US = 2.0
T_LAUNCH_US = 4.0
COMBINE_BYTES_PER_US = 3.0e6
MAX_SIMULATED_UNITS = 8 * NUM_SMS   # b * row tiles beyond this: the grid is 8+ waves already


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class CtFlashMlaSplitTiling(Tiling):
    block_m: int = 64           # query rows per block: HGMMA needs M = 64 (M < 64 falls back to mma.sync)
    block_n: int = 64           # keys per KV tile (a divisor of the page)
    kv_latency: int = 8         # DRAM latency hint; >= 8 makes cuTile double-buffer the KV loads
    num_splits: int = 1         # KV splits per sequence (grid z); 1: no partials, no combine (v2)
    combine_rows: int = 8       # query rows per combine block
    schedule: str = "sequence"  # "sequence": v3's num_splits per sequence; "balanced": equal tile shares
    parts: int = 0              # balanced: blocks per row tile (grid y); 0 = NUM_SMS // row tiles
    rescale: str = "eager"      # v5's knob: "lazy" (the reference max moves only by > 2^8, acc rescaled
                                # only then) or "eager" (v4's: every tile; v6's default, v5 measured lazy no faster)
    combine_cols: int = 0       # v6: output columns per combine block (64..512); 0 = resolve_combine_cols
    combine_slots: int = 0      # v7: partial slots per combine iteration (1..16); 0 = resolve_combine_slots

    def validate(self, problem, device) -> list[str]:
        reasons = []
        if self.block_m != 64:
            reasons.append(f"block_m must be 64, got {self.block_m}")
        if self.block_n not in (16, 32, 64) or PAGE_SIZE % self.block_n:
            reasons.append(f"block_n must be 16, 32 or 64 (a divisor of the page), got {self.block_n}")
        if not 1 <= self.kv_latency <= 10:
            reasons.append(f"kv_latency must be 1..10, got {self.kv_latency}")
        if not 1 <= self.num_splits <= MAX_SPLITS:
            reasons.append(f"num_splits must be 1..{MAX_SPLITS}, got {self.num_splits}")
        if self.combine_rows not in (4, 8, 16):
            reasons.append(f"combine_rows must be 4, 8 or 16, got {self.combine_rows}")
        if self.schedule not in SCHEDULES:
            reasons.append(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if self.schedule == "balanced" and self.num_splits != 1:
            reasons.append(f"num_splits applies to schedule='sequence' only; balanced takes parts, "
                           f"got num_splits={self.num_splits}")
        if self.rescale not in RESCALES:
            reasons.append(f"rescale must be one of {', '.join(RESCALES)}, got {self.rescale!r}")
        if self.combine_cols and self.combine_cols not in COMBINE_COLS:
            reasons.append(f"combine_cols must be 0 (chosen from the shape) or one of "
                           f"{', '.join(map(str, COMBINE_COLS))}, got {self.combine_cols}")
        if self.combine_slots and self.combine_slots not in COMBINE_SLOTS:
            reasons.append(f"combine_slots must be 0 (chosen from the shape) or one of "
                           f"{', '.join(map(str, COMBINE_SLOTS))}, got {self.combine_slots}")
        if not 0 <= self.parts <= MAX_PARTS:
            reasons.append(f"parts must be 0 (one block per SM) or 1..{MAX_PARTS}, got {self.parts}")
        if problem is not None and self.schedule == "balanced":
            reasons += balanced_reasons(problem, self)
        if problem is not None and self.num_splits > 1:
            elems = problem.b * self.num_splits * problem.s_q * problem.h_q * D_V
            if elems >= INDEX_LIMIT:
                reasons.append(f"partial O [b={problem.b}, {self.num_splits}, {problem.s_q * problem.h_q}, "
                               f"{D_V}] has {elems} elements, past the int32 indexing (< {INDEX_LIMIT})")
        return reasons + smem_reasons(SMEM_BYTES, device)


def _lengths(problem) -> list[int]:
    return list(problem.seqlens) if problem.seqlens is not None else problem.resolve_seqlens(0)


def estimate_us(tiles: list[int], row_tiles: int, rows: int, num_splits: int) -> float:
    """Modelled time of one call: the split kernel's blocks list-scheduled in launch order (row
    tile fastest, then sequence, then split) on NUM_SMS one-block slots, plus the combine."""
    free = [0.0] * NUM_SMS
    block_rows = min(rows, 64)
    extra_bytes = block_rows * D_QK * 2 + (block_rows * (D_V * 4 + 4) if num_splits > 1 else 0)
    extra = T_BLOCK_US + extra_bytes / SM_BYTES_PER_US
    for sp in range(num_splits):
        for n in tiles:
            per = _cdiv(n, num_splits)
            cost = T_TILE_US * max(0, min(per, n - sp * per)) + extra
            for _ in range(row_tiles):
                heapq.heapreplace(free, free[0] + cost)
    t = max(free)
    if num_splits > 1:
        b = len(tiles)
        nbytes = b * num_splits * rows * (D_V * 4 + 4) + b * rows * (D_V * 2 + 4)
        t += T_LAUNCH_US + nbytes / COMBINE_BYTES_PER_US
    return t


def choose_splits(problem, block_m: int = 64, block_n: int = 64) -> int:
    """Splits per sequence: the candidate in 1..min(32, KV tiles of the mean length) with the
    least modelled time (estimate_us); a split count must beat the best fewer-split time by 2%.
    Where b * row tiles already fills 8 waves, 1. Reads the problem's lengths: a tuning choice
    only (every num_splits is correct for every length; the workspace is sized by shape)."""
    lens = _lengths(problem)
    rows = problem.s_q * problem.h_q
    row_tiles = _cdiv(rows, block_m)
    units = problem.b * row_tiles
    if units >= MAX_SIMULATED_UNITS or not lens:
        return 1
    tiles = [_cdiv(s, block_n) for s in lens]
    mean_tiles = _cdiv(sum(tiles), len(tiles))
    cap = max(1, min(MAX_SPLITS, mean_tiles))
    best, best_t = 1, estimate_us(tiles, row_tiles, rows, 1)
    for s in SPLIT_CANDIDATES[1:]:
        if s > cap:
            break
        t = estimate_us(tiles, row_tiles, rows, s)
        if t < best_t * 0.98:            # a split must win by more than the model's noise
            best, best_t = s, t
    return best


def resolve_parts(tiling, rows: int) -> int:
    """Blocks per row tile of the balanced grid: the tiling's `parts`, or one block per SM."""
    return tiling.parts or max(1, NUM_SMS // _cdiv(rows, tiling.block_m))


def resolve_combine_cols(tiling, b: int, rows: int) -> int:
    """Output columns per combine block: the tiling's `combine_cols`, or the widest of 512, 256,
    128, 64 that still gives the combine one block per SM (b * row blocks * column blocks >=
    NUM_SMS). A tuning choice only: every width merges the same partials."""
    if tiling.combine_cols:
        return tiling.combine_cols
    row_blocks = b * _cdiv(rows, tiling.combine_rows)
    cols = D_V
    while cols > COMBINE_COLS[0] and row_blocks * (D_V // cols) < NUM_SMS:
        cols //= 2
    return cols


def resolve_combine_slots(tiling, cols: int) -> int:
    """Partial slots per combine iteration: the tiling's `combine_slots`, or 8 at 64 columns
    (a [8, 8 rows, 64] f32 load: 16 KB, v5's one-slot load of 8 rows x 512) and 1 at any wider
    width. Exported for sm_90 at occupancy 2 (128 registers), [2, 8, 256] and [4, 8, 128] spill
    (3.4 KB and 248 B of stack per thread) where [8, 8, 64] and [16, 8, 64] do not."""
    if tiling.combine_slots:
        return tiling.combine_slots
    return 8 if cols == COMBINE_COLS[0] else 1


def balanced_reasons(problem, tiling) -> list[str]:
    """Why the balanced kernels cannot take this problem (their int32 schedule math, one-tile length load)."""
    reasons = []
    if problem.b > MAX_BALANCED_B:
        reasons.append(f"schedule='balanced' loads every length as one tile: b <= {MAX_BALANCED_B}, got {problem.b}")
    rows = problem.s_q * problem.h_q
    parts = resolve_parts(tiling, rows)
    max_tiles = problem.b * _cdiv(max(_lengths(problem), default=0), tiling.block_n)
    if (parts + 1) * max(max_tiles, 1) >= INDEX_LIMIT:
        reasons.append(f"schedule='balanced': (parts + 1) * KV tiles = {(parts + 1) * max_tiles} is past its int32 "
                       f"schedule math (< {INDEX_LIMIT})")
    if (problem.b + parts) * rows * D_V >= INDEX_LIMIT:
        reasons.append(f"schedule='balanced': partial O [b + parts = {problem.b + parts}, {rows}, {D_V}] is past "
                       f"the int32 indexing (< {INDEX_LIMIT} elements)")
    return reasons


def schedule_pieces(tiles: list[int], parts: int) -> list[tuple[int, int, int, int, int]]:
    """The balanced schedule on the sequences' KV tile counts, as the schedule and split kernels
    compute it (balanced.py): (part, sequence, t0, t1, slot) for every piece a block writes (empty
    ones included), in launch order of the parts. Part p takes the batch's tiles
    [p * T // parts, (p + 1) * T // parts) and the sequences that end after its first tile and
    start before its last."""
    ends, acc = [], 0
    for t in tiles:
        acc += t
        ends.append(acc)
    total = acc
    out = []
    for p in range(parts):
        g0, g1 = p * total // parts, (p + 1) * total // parts
        first = sum(e <= g0 for e in ends)
        last = sum(e - t < g1 for e, t in zip(ends, tiles))
        for s in range(first, last):
            start = ends[s] - tiles[s]
            t0 = min(max(g0 - start, 0), tiles[s])
            t1 = max(min(g1 - start, tiles[s]), t0)
            out.append((p, s, t0, t1, p + s))
    return out


def host_pieces(seqlens: list[int], parts: int, block_n: int = PAGE_SIZE) -> list[tuple[int, int, int, int, int]]:
    """`schedule_pieces` of a batch of lengths (the host mirror the tests hold the kernels to)."""
    return schedule_pieces([_cdiv(s, block_n) for s in seqlens], parts)


def host_combine_parts(seqlens: list[int], parts: int, block_n: int = PAGE_SIZE) -> list[range]:
    """For each sequence, the parts whose slots (part + sequence) the combine kernel merges."""
    tiles = [_cdiv(s, block_n) for s in seqlens]
    total = max(sum(tiles), 1)
    out, end = [], 0
    for t in tiles:
        start, end = end, end + t
        p_first = ((start + 1) * parts + total - 1) // total - 1
        p_last = (end * parts + total - 1) // total - 1
        out.append(range(p_first, p_first + min(t, 1) * (p_last + 1 - p_first)))
    return out


def estimate_balanced_us(tiles: list[int], row_tiles: int, rows: int, parts: int) -> float:
    """Modelled time of a balanced call: part p's blocks (one per row tile) cost its share of the
    batch's tiles plus, per piece (`schedule_pieces`: at least one), the fixed cost and the Q /
    partial traffic of estimate_us; the blocks are list-scheduled in launch order on NUM_SMS
    slots, then the combine reads b + parts partial slots."""
    work, pieces = [0] * parts, [0] * parts
    for p, _, t0, t1, _ in schedule_pieces(tiles, parts):
        work[p] += t1 - t0
        pieces[p] += 1
    block_rows = min(rows, 64)
    extra = T_BLOCK_US + block_rows * (D_QK * 2 + D_V * 4 + 4) / SM_BYTES_PER_US
    free = [0.0] * NUM_SMS
    for p in range(parts):
        cost = T_TILE_US * work[p] + extra * max(pieces[p], 1)
        for _ in range(row_tiles):
            heapq.heapreplace(free, free[0] + cost)
    b = len(tiles)
    nbytes = (b + parts) * rows * (D_V * 4 + 4) + b * rows * (D_V * 2 + 4)
    return max(free) + T_LAUNCH_US + nbytes / COMBINE_BYTES_PER_US


def choose_schedule(problem, tiling) -> str:
    """'balanced' where its modelled time beats v3's best split count (estimate_us) by 2%, else
    'sequence'. A tuning choice only: both schedules are correct for every length."""
    lens = _lengths(problem)
    rows = problem.s_q * problem.h_q
    row_tiles = _cdiv(rows, tiling.block_m)
    if not lens or problem.b * row_tiles >= MAX_SIMULATED_UNITS or balanced_reasons(problem, tiling):
        return "sequence"
    tiles = [_cdiv(s, tiling.block_n) for s in lens]
    seq_t = estimate_us(tiles, row_tiles, rows, tiling.num_splits)
    bal_t = estimate_balanced_us(tiles, row_tiles, rows, resolve_parts(tiling, rows))
    return "balanced" if bal_t < seq_t * 0.98 else "sequence"


class CtFlashMlaDecodeV8(KernelPlan):
    name = "ct_flash_mla_decode_v8"
    language = "cutile"
    arch = ("sm_90a",)
    problem_kind = MlaDecodeProblem
    Tiling = CtFlashMlaSplitTiling
    summary = "cuTile v7 + slot-batched combines with elementwise accumulators, reduced over the slots after the loop"

    def supports(self, problem) -> list[str]:
        return super().supports(problem) or page_size_reasons(
            problem, (PAGE_SIZE,), "its kernel walks 64-row pages (PAGE = 64 in kernel.py)")

    def default_tiling(self, problem) -> CtFlashMlaSplitTiling:
        t = CtFlashMlaSplitTiling()
        t = dataclasses.replace(t, num_splits=choose_splits(problem, t.block_m, t.block_n))
        if choose_schedule(problem, t) == "balanced":
            t = dataclasses.replace(t, schedule="balanced", num_splits=1)
        return t

    def autotune_configs(self, problem) -> list[CtFlashMlaSplitTiling]:
        """The default, v3's split counts (schedule 'sequence'), the balanced schedule at half, one
        and two blocks per SM, a shorter latency hint and the other combine block heights."""
        base = self.default_tiling(problem)
        cap = max(1, min(MAX_SPLITS, _cdiv(max(_lengths(problem), default=1), base.block_n)))
        seq = dataclasses.replace(base, schedule="sequence", parts=0,
                                  num_splits=choose_splits(problem, base.block_m, base.block_n))
        configs = [base, seq] + [dataclasses.replace(seq, num_splits=s) for s in (1, 2, 4, 8, 16) if s <= cap]
        configs += [dataclasses.replace(base, kv_latency=4)]
        bal = dataclasses.replace(base, schedule="balanced", num_splits=1, parts=0)
        if not balanced_reasons(problem, bal):
            parts = resolve_parts(bal, problem.s_q * problem.h_q)
            configs += [bal] + [dataclasses.replace(bal, parts=k) for k in (parts // 2, 2 * parts) if k >= 1]
        if base.schedule == "balanced" or base.num_splits > 1:
            configs += [dataclasses.replace(base, combine_rows=r) for r in (4, 16)]
            configs += [dataclasses.replace(base, combine_cols=c) for c in COMBINE_COLS]
            configs += [dataclasses.replace(base, combine_slots=k) for k in COMBINE_SLOTS]
        configs += [dataclasses.replace(base, rescale="lazy")]
        seen, out = set(), []
        for c in configs:
            if c not in seen:
                seen.add(c)
                out.append(c)
        return out

    def example_bad_tilings(self) -> list[CtFlashMlaSplitTiling]:
        T = CtFlashMlaSplitTiling
        return [T(block_m=128), T(block_n=48), T(kv_latency=0), T(num_splits=0), T(num_splits=33),
                T(num_splits=2, combine_rows=12), T(schedule="persistent"), T(schedule="balanced", num_splits=2),
                T(parts=-1), T(parts=MAX_PARTS + 1), T(rescale="sometimes"), T(combine_cols=96),
                T(combine_slots=3)]

    def _split_stage(self, tiling: CtFlashMlaSplitTiling, s_q: int, h_q: int) -> CtKernel:
        from . import kernel
        t = tiling

        def grid(inputs, outputs, workspace):
            return kernel.split_grid(inputs.b, inputs.s_q, inputs.h_q, t.block_m, t.num_splits)

        def kernel_args(inputs, outputs, workspace):
            out, lse = outputs
            return kernel.split_kernel_args(inputs.q, inputs.kv_cache, inputs.block_table, inputs.cache_seqlens,
                                            out, lse, workspace["part_o"], workspace["part_lse"],
                                            inputs.softmax_scale, t.block_m, t.block_n, t.kv_latency, t.num_splits,
                                            lazy=t.rescale == "lazy")
        return CtKernel(kernel=kernel.ct_flash_mla_decode_v8_split_kernel, grid=grid, kernel_args=kernel_args,
                        signatures=lambda: kernel.split_export_signatures(s_q, h_q, t.block_m, t.block_n,
                                                                          t.kv_latency, t.num_splits,
                                                                          t.rescale == "lazy"),
                        name="split")

    def _combine_stage(self, tiling: CtFlashMlaSplitTiling, b: int, s_q: int, h_q: int) -> CtKernel:
        from . import kernel
        t = tiling

        cols = resolve_combine_cols(t, b, s_q * h_q)
        slots = resolve_combine_slots(t, cols)

        def grid(inputs, outputs, workspace):
            return kernel.combine_grid(inputs.b, inputs.s_q, inputs.h_q, t.combine_rows, cols)

        def kernel_args(inputs, outputs, workspace):
            out, lse = outputs
            return kernel.combine_kernel_args(workspace["part_o"], workspace["part_lse"], out, lse,
                                              t.num_splits, t.combine_rows, cols, slots)
        return CtKernel(kernel=kernel.ct_flash_mla_decode_v8_combine_kernel, grid=grid, kernel_args=kernel_args,
                        signatures=lambda: kernel.combine_export_signatures(s_q, h_q, t.num_splits, t.combine_rows,
                                                                            cols, slots),
                        name="combine")

    def _balanced_stages(self, tiling: CtFlashMlaSplitTiling, b: int, s_q: int, h_q: int) -> list[CtKernel]:
        """The balanced schedule's three kernels: schedule (each part's range), split, combine."""
        from . import balanced
        t = tiling
        parts = resolve_parts(t, s_q * h_q)
        cols = resolve_combine_cols(t, b, s_q * h_q)
        slots = resolve_combine_slots(t, cols)

        def schedule_args(inputs, outputs, workspace):
            return balanced.schedule_args(inputs.cache_seqlens, workspace["part_meta"], workspace["tile_start"],
                                          t.block_n, parts)

        def split_args(inputs, outputs, workspace):
            return balanced.balanced_kernel_args(inputs.q, inputs.kv_cache, inputs.block_table, inputs.cache_seqlens,
                                                 workspace["part_meta"], workspace["tile_start"], workspace["part_o"],
                                                 workspace["part_lse"], inputs.softmax_scale, t.block_m, t.block_n,
                                                 t.kv_latency, parts, lazy=t.rescale == "lazy")

        def combine_args(inputs, outputs, workspace):
            out, lse = outputs
            return balanced.balanced_combine_args(workspace["part_o"], workspace["part_lse"], inputs.cache_seqlens,
                                                  workspace["part_meta"], workspace["tile_start"], out, lse,
                                                  t.combine_rows, t.block_n, parts, cols, slots)
        schedule = CtKernel(kernel=balanced.ct_flash_mla_decode_v8_schedule_kernel,
                            grid=lambda inputs, outputs, workspace: balanced.schedule_grid(parts),
                            kernel_args=schedule_args, name="schedule",
                            signatures=lambda: balanced.schedule_export_signatures(b, t.block_n, parts))
        split = CtKernel(kernel=balanced.ct_flash_mla_decode_v8_balanced_kernel,
                         grid=lambda inputs, outputs, workspace: balanced.balanced_grid(
                             inputs.s_q, inputs.h_q, t.block_m, parts),
                         kernel_args=split_args, name="split",
                         signatures=lambda: balanced.balanced_export_signatures(s_q, h_q, t.block_m, t.block_n,
                                                                                t.kv_latency,
                                                                                t.rescale == "lazy"))
        combine = CtKernel(kernel=balanced.ct_flash_mla_decode_v8_balanced_combine_kernel,
                           grid=lambda inputs, outputs, workspace: balanced.balanced_combine_grid(
                               inputs.b, inputs.s_q, inputs.h_q, t.combine_rows, cols),
                           kernel_args=combine_args, name="combine",
                           signatures=lambda: balanced.balanced_combine_export_signatures(
                               s_q, h_q, t.combine_rows, t.block_n, parts, cols, slots))
        return [schedule, split, combine]

    def plan(self, inputs, tiling) -> RuntimeKernel:
        from . import kernel
        if inputs.kv_cache.numel() >= INDEX_LIMIT:
            raise PlanError(f"kv_cache: {inputs.kv_cache.shape[0]} pages ({inputs.kv_cache.numel()} elements) "
                            f"exceed this kernel's int32 indexing (< {INDEX_LIMIT // (PAGE_SIZE * D_QK)} pages)")
        if tiling.schedule == "balanced":
            from . import balanced
            parts = resolve_parts(tiling, inputs.s_q * inputs.h_q)
            max_tiles = inputs.b * inputs.block_table.shape[1] * (PAGE_SIZE // tiling.block_n)
            if (parts + 1) * max(max_tiles, 1) >= INDEX_LIMIT:
                raise PlanError(f"block_table: {inputs.b} x {inputs.block_table.shape[1]} pages with parts={parts} "
                                f"are past the balanced schedule's int32 math ((parts + 1) * KV tiles < {INDEX_LIMIT})")

            def balanced_ws(x):
                return balanced.balanced_workspace(x.b, x.s_q, x.h_q, parts, x.q.device)
            return self.runtime(tiling, *self._balanced_stages(tiling, inputs.b, inputs.s_q, inputs.h_q),
                                workspace=balanced_ws)
        ns = tiling.num_splits

        def workspace(x):
            # Sized by (b, num_splits, s_q*h_q) only; 1 split: placeholders the kernel never touches.
            return kernel.workspace(x.b, x.s_q, x.h_q, ns, x.q.device)
        stages = [self._split_stage(tiling, inputs.s_q, inputs.h_q)]
        if ns > 1:
            stages.append(self._combine_stage(tiling, inputs.b, inputs.s_q, inputs.h_q))
        return self.runtime(tiling, *stages, workspace=workspace)

    def compile_only(self, problem, arch: str, tiling=None) -> dict:
        """Exports the split kernel for the tiling and the combine kernel. A 1-split tiling runs
        no combine (its split kernel writes out / lse itself), so the split kernel's partial
        epilogue and the combine are then exported at 2 splits: both kernels always compile."""
        tiling = tiling or self.default_tiling(problem)
        self.check_tiling(tiling, problem, None)
        if tiling.schedule == "balanced":
            schedule, split, combine = self._balanced_stages(tiling, problem.b, problem.s_q, problem.h_q)
            cols = resolve_combine_cols(tiling, problem.b, problem.s_q * problem.h_q)
            return {"compiled": True, "gpu_code": gpu_code_for(arch), "schedule": "balanced",
                    "parts": resolve_parts(tiling, problem.s_q * problem.h_q),
                    "combine_cols": cols, "combine_slots": resolve_combine_slots(tiling, cols),
                    "schedule_cubin_bytes": len(schedule.export(arch)), "split_cubin_bytes": len(split.export(arch)),
                    "combine_cubin_bytes": len(combine.export(arch))}
        info = {"compiled": True, "gpu_code": gpu_code_for(arch), "num_splits": tiling.num_splits,
                "split_cubin_bytes": len(self._split_stage(tiling, problem.s_q, problem.h_q).export(arch))}
        probe = tiling if tiling.num_splits > 1 else dataclasses.replace(tiling, num_splits=2)
        if probe is not tiling:
            info["split2_cubin_bytes"] = len(self._split_stage(probe, problem.s_q, problem.h_q).export(arch))
        info["combine_cols"] = resolve_combine_cols(probe, problem.b, problem.s_q * problem.h_q)
        info["combine_slots"] = resolve_combine_slots(probe, info["combine_cols"])
        info["combine_cubin_bytes"] = len(self._combine_stage(probe, problem.b, problem.s_q,
                                                              problem.h_q).export(arch))
        return info


Plan = CtFlashMlaDecodeV8
