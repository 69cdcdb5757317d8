"""One timing protocol for every language: CUDA-graph replays, inputs rotated past L2.

Each timed call walks through `n_sets` independent input sets whose bytes together exceed
3x L2, so every launch reads its data from HBM, as decode does. Times are per launch.

Several plans compared on one problem (`--compare`) are timed interleaved (`bench_plans`): all
are built, compiled and captured first, then their graphs are replayed in turn, round after
round. Timing them one after another instead hands whichever plan follows an idle gap (a
compile, building inputs) a cooler GPU at a higher boost clock: on the H200, a compare run's
records show 130 W and 1980 MHz before a plan that had just compiled, and 620 W and 1500-1900 MHz
before the plan timed right after another (2026-12-01, docs/kernels/flash_mla_decode.md, v12).
Each plan's record also keeps the SM clock and power read while its own timed replays ran
(`clocks_during`, runtime/gpu_monitor.py) and its SM cycles per call (`kcycles`): at the power
limit a kernel that draws more power runs at a lower clock, which time alone cannot tell apart
from a kernel that needs more cycles. `clocks_during` also keeps the energy per call (mJ,
`mj_per_call`) from NVML's energy counter followed during each timed replay: at the cap the
energy a call spends decides the clock the kernel gets. The counter advances every ~100 ms on the
H200, so it is read only for replays spanning two of its updates (`--rep_ms 300` or more).
"""
from __future__ import annotations

import functools
import itertools
import math
import statistics
from dataclasses import asdict, dataclass

from mla_var3.runtime import gpu_monitor

L2_MULTIPLE = 3
MAX_SETS = 64
REPLAYS = 10            # timed replays of each plan's graph (interleaved across plans)


@dataclass(frozen=True)
class TimeStats:
    median: float      # microseconds per launch
    min: float
    max: float
    n: int             # graph replays timed (each an average over many launches)
    launches: int      # launches per replay
    n_sets: int        # input sets rotated
    rotated_bytes: int
    samples: tuple = ()  # each replay's per-launch time (us), in the order timed: drift shows here

    def to_dict(self) -> dict:
        d = asdict(self)
        d["samples"] = list(self.samples)
        return d


def sets_needed(bytes_per_set: int, l2_bytes: int, multiple: int = L2_MULTIPLE, cap: int = MAX_SETS) -> int:
    """How many input sets make the rotation exceed `multiple` x L2 (at least 1, at most cap)."""
    if bytes_per_set <= 0:
        raise ValueError(f"bytes_per_set: expected > 0, got {bytes_per_set}")
    return max(1, min(cap, math.ceil(multiple * l2_bytes / bytes_per_set)))


def per_call_stats(times_ms: list[float], n_sets: int, rotated_bytes: int) -> TimeStats:
    """Per-call statistics (us) from timed replays of one step over `n_sets` rotating sets."""
    per_call_us = [t * 1e3 / n_sets for t in times_ms]
    return TimeStats(median=statistics.median(per_call_us), min=min(per_call_us), max=max(per_call_us),
                     n=len(per_call_us), launches=n_sets, n_sets=n_sets, rotated_bytes=rotated_bytes,
                     samples=tuple(round(t, 3) for t in per_call_us))


def bench_rotating(kern, sets, rep_ms: float = 100.0, rotated_bytes: int = 0) -> TimeStats:
    """Time whole calls of `kern` (every stage) over the rotating (inputs, outputs, workspace)
    sets inside one CUDA graph; returns per-call statistics (bench_plans's protocol, one plan)."""
    import torch
    sets = list(sets)
    replay = GraphReplay(kern, sets, rep_ms, torch.cuda.Stream())
    (times_ms,) = interleaved_samples([replay], REPLAYS)
    return per_call_stats(times_ms, len(sets), rotated_bytes)


WARMUP_ROUNDS = 1       # untimed interleaved rounds first: no plan's first sample follows the build's idle gap


MODE_GAP = 0.03         # a jump of 3% between neighbouring sorted samples splits two modes
MODE_SHARE = 0.2        # ... when each side holds at least a fifth of the samples


def two_modes(samples: list[float]) -> tuple[float, float, float] | None:
    """(fast mode, slow mode, share of samples in the slow one) when the samples split into two
    groups across a jump of more than MODE_GAP, each group holding at least MODE_SHARE of them;
    else None. At the power cap a kernel that follows the SM clock does this, and its median is
    then whichever mode it drew more often
    (docs/knowledge/anti-patterns/short-median-of-a-clock-bound-kernel.md)."""
    xs = sorted(samples)
    n = len(xs)
    if n < 5:
        return None
    gaps = [(xs[i + 1] / xs[i] - 1.0, i) for i in range(n - 1) if xs[i] > 0]
    if not gaps:
        return None
    gap, i = max(gaps)
    lo, hi = xs[:i + 1], xs[i + 1:]
    if gap <= MODE_GAP or min(len(lo), len(hi)) < MODE_SHARE * n:
        return None
    return statistics.median(lo), statistics.median(hi), len(hi) / n


INTERLEAVE_ORDER = "balanced"   # what records say of the order (the report flags records without it)
DESIGN_SEARCH_STEPS = 200_000   # balanced_order's search budget; past it (many plans) a Williams design


@functools.lru_cache(maxsize=None)
def _cyclic_design(n: int) -> tuple[tuple[int, ...], ...] | None:
    """n - 1 orders of range(n) that, timed back to back and repeated, put every plan right after
    every other plan exactly once per period, the boundary between rounds included (found by a
    depth-first search: instant up to 8 plans); None when the search budget runs out."""
    if n < 2:
        return ((0,) * n,)
    used: set[tuple[int, int]] = set()              # (a, b): b already timed right after a
    rounds: list[tuple[int, ...]] = []
    steps = [0]

    def free(a, b):
        return a != b and (a, b) not in used

    def place(p):
        arcs = list(zip(p, p[1:])) + ([(rounds[-1][-1], p[0])] if rounds else [])
        if len(set(arcs)) < len(arcs) or not all(free(a, b) for a, b in arcs):
            return None
        used.update(arcs)
        return arcs

    def extend(k):
        if k == n - 1:
            return free(rounds[-1][-1], rounds[0][0])
        for p in itertools.permutations(range(n)):
            steps[0] += 1
            if steps[0] > DESIGN_SEARCH_STEPS:
                return False
            if k == 0 and p[0] != 0:
                break
            arcs = place(p)
            if arcs is None:
                continue
            rounds.append(p)
            if extend(k + 1):
                return True
            rounds.pop()
            used.difference_update(arcs)
        return False

    return tuple(rounds) if extend(0) else None


def balanced_order(n: int, r: int) -> list[int]:
    """Round r's order of n plans: every plan is timed right after every other plan equally often,
    the call that ends one round and starts the next included (`_cyclic_design`; a Williams design,
    balanced within rounds only, past the search budget). A plain rotation (0 1 2 3, 1 2 3 0, ...)
    times plan k + 1 right after plan k in most rounds, and a plan that follows a slow, low-power
    one (PyTorch in a four-way compare) then starts on a cooler GPU at a higher clock: in the
    whole-grid run of 2026-12-04 (docs/kernels/flash_mla_decode.md) v46, timed after PyTorch, ran
    at 1874-1980 MHz and FlashMLA, timed after v46, at 1597-1980 MHz."""
    design = _cyclic_design(n)
    if design is not None:
        return list(design[r % len(design)])
    first = [0] + [(k + 1) // 2 if k % 2 else n - k // 2 for k in range(1, n)]
    order = [(x + r) % n for x in first]
    return order[::-1] if n % 2 and (r // n) % 2 else order


def interleaved_samples(replays: list, rounds: int, warmup_rounds: int = WARMUP_ROUNDS) -> list[list[float]]:
    """Call each of `replays` (one per plan: a timed replay, returning its time) once per round in
    `balanced_order` (the starting plan rotates and each plan follows every other equally often),
    so every plan sees the same drift in clocks, power and temperature; returns each plan's samples
    in call order. The first `warmup_rounds` rounds are run the same way and dropped: after the
    builds and captures the GPU is idle and cool, and the plan that goes first would get a replay at
    a boost clock the others never see (v18's minimum read 3-9% better than v17's while its median
    was 0-4% worse)."""
    samples: list[list[float]] = [[] for _ in replays]
    n = len(replays)
    for r in range(warmup_rounds):
        for j in balanced_order(n, r):
            replays[j]()
    for r in range(rounds):                  # the design continues where the warm-up left it
        for j in balanced_order(n, warmup_rounds + r):
            samples[j].append(replays[j]())
    return samples


class GraphReplay:
    """One plan's whole calls over its rotating sets, captured once in a CUDA graph of enough
    repetitions to last about `rep_ms`; `__call__` replays it and returns ms per step (one pass
    over the sets), timed with CUDA events. With a monitor each replay also leaves a ClockSample:
    the clock sampled while it ran and the energy per call (one launch over one set) from the
    energy counter's updates during it."""

    def __init__(self, kern, sets, rep_ms: float, stream, monitor=None):
        import torch
        self.sets, self.stream, self.monitor = sets, stream, monitor
        self.clocks: list = []          # one gpu_monitor.ClockSample per call (with a monitor)

        def step():
            for inputs, outputs, workspace in sets:
                kern.launch(inputs, outputs, workspace)

        with torch.cuda.stream(stream):
            step()                                               # warm-up on the timing stream
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(5):
                step()
            end.record()
            torch.cuda.synchronize()
            estimate_ms = start.elapsed_time(end) / 5
            self.n_repeat = max(1, int(rep_ms / estimate_ms)) if estimate_ms > 0 else 1000
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, stream=stream):
                for _ in range(self.n_repeat):
                    step()
            torch.cuda.synchronize()

    def __call__(self) -> float:
        import torch
        with torch.cuda.stream(self.stream):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self.graph.replay()
            end.record()
            if self.monitor is not None:   # read the clock while this plan's replay runs
                sample = gpu_monitor.sample_while(lambda: not end.query(), self.monitor)
            torch.cuda.synchronize()
            elapsed_ms = start.elapsed_time(end)
            if self.monitor is not None:   # one call: one launch over one set, as per_call_stats counts
                self.clocks.append(gpu_monitor.with_energy(sample, elapsed_ms / (self.n_repeat * len(self.sets))))
        return elapsed_ms / self.n_repeat


def bench_plans(entries, problem, device, *, seed: int = 0, rep_ms: float = 100.0,
                replays: int = REPLAYS, inputs=None) -> list[dict]:
    """Benchmark several (plan, tiling) on one problem, interleaved (module docstring): every plan
    is built, compiled, given its rotating sets (the input sets are shared, outputs and workspace
    are each plan's) and captured first; then the graphs are replayed in turn, `replays` rounds.
    `inputs`: the first input set when the caller already made it (autotune's trials share one).
    Returns the fields of each plan's `bench` record, in the order given."""
    import torch

    from mla_var3.runtime import records, roofline
    from mla_var3.runtime.memory import require_fits
    from mla_var3.runtime.profiling import annotate

    require_fits(problem, "cuda")
    first = inputs if inputs is not None else problem.make_inputs(seed=seed, device="cuda")
    input_sets = [first]

    def inputs_set(i):
        while len(input_sets) <= i:
            input_sets.append(problem.make_inputs(seed=seed, device="cuda", data_seed=seed + 1000 * len(input_sets)))
        return input_sets[i]

    stream = torch.cuda.Stream()
    monitor = gpu_monitor.Nvml(torch.cuda.current_device())
    monitor = monitor if monitor.available else None
    prepared = []
    for plan, tiling in entries:
        kern = plan.build(first, tiling)
        cfg = kern.tiling.key()
        with annotate(plan.name, cfg, "compile"):
            compile_s = time_compile(kern)

        def one_set(x, kern=kern):
            return x, problem.make_outputs(x, fill=0.0), kern.prepare(x)

        sets = [one_set(first)]
        per_set = (problem.input_bytes(first) + sum(t.numel() * t.element_size() for t in sets[0][1])
                   + sets[0][2].nbytes())
        n_sets = sets_needed(per_set, device.l2_bytes)
        sets += [one_set(inputs_set(i)) for i in range(1, n_sets)]
        with annotate(plan.name, cfg, "warmup"):
            replay = GraphReplay(kern, sets, rep_ms, stream, monitor)   # warms every set up before capturing
        prepared.append((plan, kern, sets, per_set, compile_s, replay))

    clocks_before = records.gpu_clocks()
    with annotate("+".join(p.name for p, *_ in prepared), "interleaved", "timed"):
        samples = interleaved_samples([replay for *_, replay in prepared], replays)
    clocks_after = records.gpu_clocks()
    flops, nbytes = problem.flops_bytes(first)
    out = []
    for (_plan, kern, sets, per_set, compile_s, replay), times_ms in zip(prepared, samples):
        stats = per_call_stats(times_ms, len(sets), per_set * len(sets))
        point = roofline.roofline(flops, nbytes, stats.median, device)
        during = gpu_monitor.summarize(replay.clocks[-len(times_ms):])   # the timed replays, not the warm-up
        out.append({"tiling_obj": kern.tiling, "time_us": {**stats.to_dict(), "interleaved_with": len(prepared) - 1,
                                                                 "interleave_order": INTERLEAVE_ORDER},
                    "tflops": point.tflops, "gbps": point.gbps,
                    "pct_roofline": point.pct_measured, "pct_datasheet": point.pct_datasheet, "bound": point.bound,
                    "intensity": point.intensity, "floor_us": point.floor_us, "flops": flops, "bytes": nbytes,
                    "compile_s": compile_s, "clocks_before": clocks_before, "clocks_after": clocks_after,
                    "clocks_during": during,
                    "kcycles": gpu_monitor.kcycles(stats.median, during["sm_mhz"] if during else None),
                    "stages": [s.name for s in kern.stages], "workspace_bytes": sets[0][2].nbytes(),
                    **problem.input_facts(first)})
    return out


def time_compile(kern) -> float:
    import time as _time
    t0 = _time.perf_counter()
    kern.compile()
    return _time.perf_counter() - t0
