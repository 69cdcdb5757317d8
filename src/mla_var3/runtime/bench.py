"""One timing protocol for every language: CUDA-graph replays, inputs rotated past L2.

Each timed call walks through `n_sets` independent input sets whose bytes together exceed
3x L2, so every launch reads its data from HBM, as decode does. Times are per launch.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

L2_MULTIPLE = 3
MAX_SETS = 64


@dataclass(frozen=True)
class TimeStats:
    median: float      # microseconds per launch
    min: float
    max: float
    n: int             # graph replays timed (each an average over many launches)
    launches: int      # launches per replay
    n_sets: int        # input sets rotated
    rotated_bytes: int

    def to_dict(self) -> dict:
        return asdict(self)


def sets_needed(bytes_per_set: int, l2_bytes: int, multiple: int = L2_MULTIPLE, cap: int = MAX_SETS) -> int:
    """How many input sets make the rotation exceed `multiple` x L2 (at least 1, at most cap)."""
    if bytes_per_set <= 0:
        raise ValueError(f"bytes_per_set: expected > 0, got {bytes_per_set}")
    return max(1, min(cap, math.ceil(multiple * l2_bytes / bytes_per_set)))


def time_cudagraph(fn, rep_ms: float = 100.0) -> list[float]:
    """Per-call times (ms) of `fn` from triton's do_bench_cudagraph (graph of many calls)."""
    from triton.testing import do_bench_cudagraph
    return do_bench_cudagraph(fn, rep=rep_ms, return_mode="all")


def bench_rotating(kern, sets, rep_ms: float = 100.0, rotated_bytes: int = 0) -> TimeStats:
    """Time whole calls of `kern` (every stage) over the rotating (inputs, outputs, workspace)
    sets inside one CUDA graph; returns per-call statistics."""
    sets = list(sets)

    def step():
        for inputs, outputs, workspace in sets:
            kern.launch(inputs, outputs, workspace)

    times_ms = time_cudagraph(step, rep_ms=rep_ms)
    per_call_us = [t * 1e3 / len(sets) for t in times_ms]
    return TimeStats(median=statistics.median(per_call_us), min=min(per_call_us), max=max(per_call_us),
                     n=len(per_call_us), launches=len(sets), n_sets=len(sets), rotated_bytes=rotated_bytes)


def bench_plan(plan, problem, device, *, tiling=None, seed: int = 0, rep_ms: float = 100.0) -> dict:
    """Benchmark one plan on one problem: rotating input sets (inputs + outputs + workspace
    bytes past 3x L2), CUDA graph of whole calls, roofline.

    Returns the fields of a `bench` record (records.make_record adds identity and environment)."""
    from mla_var3.runtime import records, roofline
    from mla_var3.runtime.profiling import annotate

    from mla_var3.runtime.memory import require_fits
    require_fits(problem, "cuda")
    first = problem.make_inputs(seed=seed, device="cuda")
    kern = plan.build(first, tiling)
    cfg = kern.tiling.key()
    with annotate(plan.name, cfg, "compile"):
        compile_s = time_compile(kern)

    def one_set(inputs):
        outputs = problem.make_outputs(inputs, fill=0.0)
        return inputs, outputs, kern.prepare(inputs)

    sets = [one_set(first)]
    per_set = (problem.input_bytes(first) + sum(t.numel() * t.element_size() for t in sets[0][1])
               + sets[0][2].nbytes())
    n_sets = sets_needed(per_set, device.l2_bytes)
    sets += [one_set(problem.make_inputs(seed=seed, device="cuda", data_seed=seed + 1000 * i))
             for i in range(1, n_sets)]
    with annotate(plan.name, cfg, "warmup"):
        kern.launch(*sets[0])                            # warm-up outside the graph
    clocks_before = records.gpu_clocks()
    with annotate(plan.name, cfg, "timed"):
        stats = bench_rotating(kern, sets, rep_ms=rep_ms, rotated_bytes=per_set * n_sets)
    clocks_after = records.gpu_clocks()
    flops, nbytes = problem.flops_bytes(first)
    point = roofline.roofline(flops, nbytes, stats.median, device)
    return {"tiling_obj": kern.tiling, "time_us": stats.to_dict(), "tflops": point.tflops, "gbps": point.gbps,
            "pct_roofline": point.pct_measured, "pct_datasheet": point.pct_datasheet, "bound": point.bound,
            "intensity": point.intensity, "floor_us": point.floor_us, "flops": flops, "bytes": nbytes,
            "compile_s": compile_s, "clocks_before": clocks_before, "clocks_after": clocks_after,
            "stages": [s.name for s in kern.stages], "workspace_bytes": sets[0][2].nbytes(),
            **problem.input_facts(first)}


def time_compile(kern) -> float:
    import time as _time
    t0 = _time.perf_counter()
    kern.compile()
    return _time.perf_counter() - t0
