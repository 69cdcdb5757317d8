"""The two jobs every front end runs: check one plan, bench one (plan, problem).

The kernel CLI and the sweep both call these, so a sweep's record and a CLI run's record are
made by the same code. Each returns a validated record; the caller decides where it goes
(`records.append` into a directory, or a sweep worker's own file).
"""
from __future__ import annotations

from mla_var3.runtime import autotune, bench, check, records


def choose_tiling(plan, problem, device, *, tune: bool = False, rep_ms: float = 50.0, isolate: bool = True,
                  on_tuned=None, knobs=None):
    """What a benchmark of `problem` runs: a fresh autotune when asked (every trial run even when a
    winner is cached or committed, each in its own process unless `isolate=False`;
    `on_tuned(plan, problem, result)` sees every trial; the winner goes to the user cache), else
    the cached or committed winner, else None (the plan's default). `knobs`: tune only those
    Tiling fields (KernelPlan.tune_configs)."""
    if tune:
        result = autotune.autotune(plan, problem, rep_ms=min(rep_ms, 50.0), isolate=isolate, use_cache=False,
                                   store_winner=True, knobs=knobs)
        if on_tuned is not None:
            on_tuned(plan, problem, result)
        return result.best
    return autotune.lookup(plan, problem, device.name)


def bench_record(plan, problem, device, *, seed: int = 0, rep_ms: float = 100.0, tune: bool = False,
                 tiling=None, **extra) -> dict:
    """Benchmark one plan on one problem (every stage of the call) and return its record.
    `tiling` (given by the user) wins over autotune and the cached winners."""
    return bench_records([plan], problem, device, seed=seed, rep_ms=rep_ms, tune=tune, tilings=[tiling], **extra)[0]


def bench_records(plans, problem, device, *, seed: int = 0, rep_ms: float = 100.0, replays: int = bench.REPLAYS,
                  tune: bool = False, tilings=None, isolate: bool = True, on_tuned=None, knobs=None,
                  **extra) -> list[dict]:
    """Benchmark several plans on one problem, timed interleaved (runtime/bench.bench_plans: the
    same clock and power history for each), and return their records in the order given.
    `tilings` (one per plan, None = the plan's choice) win over autotune and the cached winners;
    `knobs` narrows the first plan's autotune (the others, if tuned, search their whole space)."""
    from mla_var3.runtime import devices
    tilings = list(tilings) if tilings is not None else [None] * len(plans)
    entries = []
    for i, (plan, tiling) in enumerate(zip(plans, tilings)):
        devices.require_arch(plan.name, plan.arch, device)
        plan.require_supported(problem)          # before any input is allocated
        entries.append((plan, tiling if tiling is not None
                        else choose_tiling(plan, problem, device, tune=tune, rep_ms=rep_ms, isolate=isolate,
                                           on_tuned=on_tuned, knobs=knobs if i == 0 else None)))
    out = []
    timed = bench.bench_plans(entries, problem, device, seed=seed, rep_ms=rep_ms, replays=replays)
    for (plan, _), fields in zip(entries, timed):
        rec = records.make_record("bench", plan, fields.pop("tiling_obj"), problem, **fields, **extra)
        records.validate_record(rec)
        out.append(rec)
    return out


def check_record(plan, problems, *, seeds=(0, 1), extra_seeds=(0,), device: str = "cuda",
                 grid: str | None = None, on_result=None, tiling=None) -> tuple[dict, list]:
    """Check one plan on `problems` (a named `grid`, or one problem); returns (record, outcomes).
    The record passes when nothing failed; skipped problems are counted, not hidden. `tiling` may
    be a callable problem -> Tiling (check.check_plan); the record then names `tiling_rule`."""
    results = check.check_plan(plan, problems, seeds=seeds, extra_seeds=extra_seeds, device=device,
                               on_result=on_result, tiling=tiling)
    n_fail = sum(r.status == "fail" for r in results)
    n_skip = sum(r.status == "skip" for r in results)
    single = grid is None and len(problems) == 1
    per_problem = callable(tiling)
    rec = records.make_record("check", plan, None if per_problem else tiling, problems[0] if single else None,
                              grid=None if single else (grid or "custom"), passed=n_fail == 0,
                              seeds=list(seeds), device=device,
                              errors={"failed": n_fail, "skipped": n_skip, "total": len(results)},
                              problems=[p.key() for p in problems], cases=[r.to_dict() for r in results],
                              **({"tiling_rule": getattr(tiling, "rule", repr(tiling))} if per_problem else {}))
    records.validate_record(rec)
    return rec, results
