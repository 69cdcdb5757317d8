"""One autotune loop for every language.

Configs are pruned by Tiling.validate (reasons kept). Each survivor is first checked against
the reference on a small problem of the same static shape (`problem.small_variant()`), then
built, compiled and timed with the benchmark's protocol (`bench.bench_plans`: whole calls, every
stage, in a CUDA graph over input sets rotated past L2; the median of the replays). A config that
fails to compile, raises, gives a wrong answer or (isolated) exceeds its time limit is recorded
with its reason and skipped. With `isolate=True` (what `--autotune` uses) each config runs in
its own process (`python -m mla_var3.cli.tune_trial`) under a timeout, so a hung kernel cannot
hang the caller. Winners are cached per (version, source hash, problem, GPU, DSL version) in
the user cache dir; committed winners live in src/mla_var3/conf/tuned/<gpu>.json.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from mla_var3.runtime import records


@dataclass
class TuneResult:
    best: object | None
    best_us: float | None
    trials: list[dict] = field(default_factory=list)   # {"tiling", "status", "time_us"|"error"}
    cached: bool = False


def cache_path() -> Path:
    base = os.environ.get("MLA_VAR3_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "mla_var3")
    return Path(base) / "autotune.json"


def source_hash(plan) -> str:
    """Hash of every file of the version's package: an edit invalidates its cached winners."""
    pkg = Path(__import__(type(plan).__module__, fromlist=["_"]).__file__).parent
    h = hashlib.sha256()
    for f in sorted(pkg.rglob("*.py")):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def dsl_version(plan) -> str:
    if plan.language == "peer":       # an outside library at a pinned commit (plan.upstream)
        return f"{plan.upstream or plan.name}+torch=={records.package_versions().get('torch')}"
    pkg = {"cute-dsl": "nvidia-cutlass-dsl", "cutile": "cuda-tile"}.get(plan.language, "torch")
    return f"{pkg}=={records.package_versions().get(pkg)}"


def cache_key(plan, problem, gpu_name: str) -> str:
    return "|".join((plan.name, source_hash(plan), problem.key(), gpu_name, dsl_version(plan)))


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def lookup(plan, problem, gpu_name: str):
    """A cached winner (user cache first, then the committed conf/tuned file), or None."""
    key = cache_key(plan, problem, gpu_name)
    hit = _load(cache_path()).get(key)
    if hit is None:
        tuned = resources.files("mla_var3.conf").joinpath("tuned", f"{gpu_name.replace(' ', '_')}.json")
        if tuned.is_file():
            hit = json.loads(tuned.read_text()).get(key)
    return plan.Tiling(**hit["tiling"]) if hit else None


def committed_gpus() -> list[str]:
    """The GPUs with a committed winners file (conf/tuned/<GPU name with _ for spaces>.json)."""
    folder = resources.files("mla_var3.conf").joinpath("tuned")
    return sorted(f.name[:-len(".json")].replace("_", " ") for f in folder.iterdir() if f.name.endswith(".json"))


def store(plan, problem, gpu_name: str, tiling, time_us: float) -> None:
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _load(path)
    data[cache_key(plan, problem, gpu_name)] = {"tiling": tiling.to_dict(), "time_us": time_us}
    path.write_text(json.dumps(data, indent=1, sort_keys=True))


TRIAL_TIMEOUT_S = 300


def trial_in_process(plan, problem, tiling, *, inputs=None, rep_ms: float = 50.0,
                     seed: int = 0, verify: bool = True) -> dict:
    """One config here: check it on a small problem of the same shape, then time it on `problem`
    with the benchmark's own protocol (bench.bench_plans: whole calls in a CUDA graph over input
    sets rotated past L2, median of the replays), so a trial never times L2-resident data.
    Returns {"status": "ok", "time_us"} or {"status": "wrong"|"failed", "error"}."""
    from mla_var3.runtime import bench, check, devices
    try:
        if verify:
            small = problem.small_variant()
            res = check.check_one(plan, small, seed=seed, device="cuda", tiling=tiling)
            if res.status == "fail":
                return {"status": "wrong", "error": f"on {small.key()}: {res.reason}"}
        (rec,) = bench.bench_plans([(plan, tiling)], problem, devices.current_device(), seed=seed, rep_ms=rep_ms,
                                   inputs=inputs)
        return {"status": "ok", "time_us": rec["time_us"]["median"]}
    except Exception as e:     # a failing config is data, not a crash
        return {"status": "failed", "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}


def trial_command(plan, problem, tiling, *, rep_ms: float, seed: int) -> list[str]:
    spec = {"kernel": plan.name, "kind": problem.kind, "problem": problem.to_dict(), "tiling": tiling.to_dict(),
            "rep_ms": rep_ms, "seed": seed}
    return [sys.executable, "-m", "mla_var3.cli.tune_trial", json.dumps(spec)]


def run_trial(cmd: list[str], timeout_s: float) -> dict:
    """Run one isolated trial; its last stdout line is the trial's JSON. A timeout, a crash or no
    answer is recorded, never raised."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "error": f"exceeded {timeout_s:g}s (killed)"}
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.startswith("{")]
    if lines:
        try:
            return json.loads(lines[-1])
        except ValueError:
            pass
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"status": "failed", "error": f"trial process exited {proc.returncode}: {tail}"}


def autotune(plan, problem, inputs=None, *, configs=None, rep_ms: float = 50.0, use_cache: bool = True,
             seed: int = 0, isolate: bool = False, timeout_s: float = TRIAL_TIMEOUT_S,
             verify: bool = True, store_winner: bool | None = None, knobs=None) -> TuneResult:
    """Time every valid config on `problem`; return the fastest. `use_cache`: return a cached or
    committed winner instead of tuning when there is one. `store_winner` (default: `use_cache`):
    put the winner in the user cache; `use_cache=False, store_winner=True` re-tunes for good.
    `knobs`: only the configs that move those Tiling fields (KernelPlan.tune_configs)."""
    from mla_var3.runtime import devices
    device = devices.current_device()
    devices.require_arch(plan.name, plan.arch, device)
    if use_cache:
        hit = lookup(plan, problem, device.name)
        if hit is not None:
            return TuneResult(best=hit, best_us=None, cached=True)
    if not isolate:
        inputs = inputs if inputs is not None else problem.make_inputs(seed=seed, device="cuda")
    result = TuneResult(best=None, best_us=None)
    for tiling in (configs if configs is not None else plan.tune_configs(problem, knobs)):
        reasons = tiling.validate(problem, device)
        if reasons:
            result.trials.append({"tiling": tiling.key(), "status": "invalid", "error": "; ".join(reasons)})
            continue
        if isolate:
            trial = run_trial(trial_command(plan, problem, tiling, rep_ms=rep_ms, seed=seed), timeout_s)
        else:
            trial = trial_in_process(plan, problem, tiling, inputs=inputs, rep_ms=rep_ms, seed=seed, verify=verify)
        result.trials.append({"tiling": tiling.key(), **trial})
        if trial["status"] == "ok" and (result.best_us is None or trial["time_us"] < result.best_us):
            result.best, result.best_us = tiling, trial["time_us"]
    if result.best is not None and (use_cache if store_winner is None else store_winner):
        store(plan, problem, device.name, result.best, result.best_us)
    return result
