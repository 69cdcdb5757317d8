"""Sweeps: every kernel on every problem of a problem set, one worker process per visible GPU.

    python -m mla_var3.sweep problems=deepseek_v3_tp8 kernels=[flash_mla_decode,ct_flash_mla_decode] records=runs/sweep
    python -m mla_var3.sweep problems=small dry_run=true          the job list; no GPU needed
    python -m mla_var3.sweep -m launcher=slurm problems=deepseek_v3_tp1 records=/shared/runs/tp1
    python -m mla_var3.sweep merge records=runs/sweep             -> runs/sweep/records.jsonl

Hydra composes `sweep.yaml` from the package's conf/sweep/ (shipped with the package, so it
works installed; `--config-dir DIR` adds yours). Jobs = problems x kernels; a run takes its shard's problems and deals them to its
workers (all kernels of a problem on one GPU: `_deal`), worker i pinned to the i-th visible
GPU through CUDA_VISIBLE_DEVICES, appending to `<records>/workers/shard-<s>-worker-<i>.jsonl`.
A failed job goes to `<records>/failures/` and the run goes on. `merge` concatenates the
workers' files into `<records>/records.jsonl`, read by `python -m mla_var3.report --records DIR`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

try:
    from tqdm import tqdm
except ImportError:                 # the GPU machine's devkit has no tqdm: plain lines instead
    tqdm = None

from mla_var3.errors import UsageError, guarded

WORKERS_DIR, FAILURES_DIR = "workers", "failures"
PROBLEM_SET_KEYS = {"grid", "product", "list", "source", "kind"}


class SweepError(UsageError):
    """A bad sweep setting, or no GPU; printed as one line."""


def conf_dir() -> Path:
    """The hydra configs shipped inside the package (mla_var3/conf/sweep/)."""
    from importlib import resources
    return Path(str(resources.files("mla_var3.conf").joinpath("sweep")))


def _plain(x):
    from omegaconf import DictConfig, ListConfig, OmegaConf
    return OmegaConf.to_container(x, resolve=True) if isinstance(x, (DictConfig, ListConfig)) else x


def load_problems(pset, kind) -> list:
    """A problem set (conf/sweep/problems/*.yaml) -> problems of `kind`: a named grid of the kind,
    the product of per-field lists, and/or an explicit list, concatenated, duplicates dropped.
    A set may name its kind (`kind: mla_decode`); it must match the kernels'."""
    from mla_var3.errors import ProblemError
    pset = _plain(pset) or {}
    unknown = set(pset) - PROBLEM_SET_KEYS
    if unknown:
        raise SweepError(f"problems: unknown keys {sorted(unknown)}; expected {sorted(PROBLEM_SET_KEYS)}")
    if pset.get("kind") not in (None, kind.kind):
        raise SweepError(f"problems: the set is of kind {pset['kind']!r}, the kernels solve {kind.kind!r}")
    out = list(kind.grid(pset["grid"])) if pset.get("grid") else []
    product = pset.get("product") or {}
    fields = {k: v if isinstance(v, list) else [v] for k, v in product.items()}
    specs = [dict(zip(fields, combo)) for combo in itertools.product(*fields.values())] if fields else []
    names = ", ".join(f.name for f in dataclasses.fields(kind))
    for where, spec in [("product", s) for s in specs] + [(f"list[{i}]", s) for i, s in enumerate(pset.get("list") or [])]:
        try:
            out.append(kind(**spec))
        except TypeError as e:
            raise SweepError(f"problems.{where}: {e} (fields: {names})") from None
        except ProblemError as e:
            raise SweepError(f"problems.{where} {spec}: {e}") from None
    unique = list({p.key(): p for p in out}.values())
    if not unique:
        raise SweepError("problems: the set is empty (give grid:, product: or list:)")
    return unique


def kernel_names(kernels) -> list[str]:
    """Kernel names as given (a list, or 'a,b'), each resolved to its version (newest by default)."""
    from mla_var3.runtime import registry
    kernels = _plain(kernels)
    names = kernels.split(",") if isinstance(kernels, str) else list(kernels or [])
    names = [n.strip() for n in names if n and n.strip()]
    if not names:
        raise SweepError("kernels: give at least one, e.g. kernels=[flash_mla_decode]")
    return list(dict.fromkeys(registry.resolve(n).name for n in names))


def kernels_kind(names: list[str]) -> type:
    """The one problem kind every kernel of the sweep solves."""
    from mla_var3.runtime import registry
    kinds = {n: registry.get_plan(n).problem_kind for n in names}
    if len(set(kinds.values())) > 1:
        raise SweepError("kernels: a sweep compares kernels of one problem kind, got "
                         + ", ".join(f"{n} ({k.kind})" for n, k in kinds.items()))
    return next(iter(kinds.values()))


def expand_jobs(cfg) -> list[dict]:
    """problems x kernels -> jobs {index, kernel, kind, problem (dict), problem_key}, problem-major."""
    kernels = kernel_names(cfg["kernels"])
    kind = kernels_kind(kernels)
    problems = load_problems(cfg["problems"], kind)
    return [{"index": i, "kernel": k, "kind": kind.kind, "problem": p.to_dict(), "problem_key": p.key()}
            for i, (p, k) in enumerate(itertools.product(problems, kernels))]


def _deal(jobs: list, n: int) -> list[list]:
    """Deal problems (with all their kernels, so kernels are compared on one GPU) round-robin
    to n hands, in an order fixed by a hash of each problem's key: balanced to one problem,
    deterministic, and blind to the grid's structure (no hand gets every seqlen=32768)."""
    groups: dict[str, list] = {}
    for job in jobs:
        groups.setdefault(job["problem_key"], []).append(job)
    order = sorted(groups.values(), key=lambda g: hashlib.sha1(g[0]["problem_key"].encode()).hexdigest())
    return [sorted((j for g in order[i::n] for j in g), key=lambda j: j["index"]) for i in range(n)]


def shard(jobs: list, index: int, count: int) -> list:
    """This shard's jobs (every job in exactly one of the `count` shards)."""
    if not (isinstance(count, int) and count >= 1 and isinstance(index, int) and 0 <= index < count):
        raise SweepError(f"shard={index} num_shards={count}: expected 0 <= shard < num_shards")
    return _deal(jobs, count)[index]


def assign(jobs: list, n_workers: int) -> list[list]:
    """The jobs of each of n workers (every job exactly once)."""
    if n_workers < 1:
        raise SweepError(f"workers: expected >= 1, got {n_workers}")
    return _deal(jobs, n_workers)


def worker_envs(n_workers: int, n_gpus: int, env=None) -> list[dict]:
    """One environment per worker, worker i seeing only the i-th visible GPU (the i-th entry of
    CUDA_VISIBLE_DEVICES when it is set, else GPU i)."""
    env = dict(os.environ if env is None else env)
    if n_workers > n_gpus:
        raise SweepError(f"workers={n_workers}: only {n_gpus} GPU(s) visible (one worker per GPU)")
    given = [x.strip() for x in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()]
    ids = given or [str(i) for i in range(n_gpus)]
    return [{**env, "CUDA_VISIBLE_DEVICES": gpu} for gpu in ids[:n_workers]]


def n_workers_for(setting, n_gpus: int) -> int:
    """workers=auto: one per visible GPU (1 without a GPU, for dry runs); else the int given."""
    if setting in (None, "auto"):
        return max(1, n_gpus)
    if not isinstance(setting, int) or setting < 1:
        raise SweepError(f"workers: expected 'auto' or an int >= 1, got {setting!r}")
    return setting


def worker_paths(records: Path, shard_index: int, worker: int) -> tuple[Path, Path]:
    name = f"shard-{shard_index}-worker-{worker}.jsonl"
    return records / WORKERS_DIR / name, records / FAILURES_DIR / name


def _append(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(obj, sort_keys=True) + "\n")


def run_jobs(spec: dict, progress: bool = True) -> int:
    """Benchmark the jobs of one worker on the GPU it sees (as the kernel CLI's bench does);
    returns how many failed. A failed job is recorded and the next one runs."""
    import torch

    from mla_var3 import jobs as harness
    from mla_var3.layers import problem_kind
    from mla_var3.runtime import devices, registry
    device, say = devices.current_device(), tqdm.write if tqdm else print
    plans, failed, jobs = {}, 0, spec["jobs"]
    out, fail = Path(spec["records_file"]), Path(spec["failures_file"])
    for n, job in enumerate(tqdm(jobs, desc=f"shard {spec['shard']}", disable=not progress) if tqdm else jobs):
        try:
            plan = plans.get(job["kernel"]) or plans.setdefault(job["kernel"], registry.get_plan(job["kernel"]))
            problem = problem_kind(job.get("kind", "mla_decode")).from_dict(job["problem"])
            rec = harness.bench_record(plan, problem, device, seed=spec["seed"], rep_ms=spec["rep_ms"],
                                       tune=spec["autotune"],
                                       sweep={"job": job["index"], "shard": spec["shard"], "worker": spec["worker"]})
            _append(out, rec)
            say(f"[{n + 1}/{len(jobs)}] {plan.name:24} {problem.key():44} {rec['time_us']['median']:9.1f} us")
        except Exception as e:  # noqa: BLE001 - one bad job must not end the sweep
            failed += 1
            err = f"{type(e).__name__}: {e}".splitlines()[0]
            _append(fail, {**job, "error": err, "gpu": os.environ.get("CUDA_VISIBLE_DEVICES")})
            say(f"[{n + 1}/{len(jobs)}] FAILED {job['kernel']} {job['problem_key']}: {err}", file=sys.stderr)
        finally:
            torch.cuda.empty_cache()
    return failed


def _count_lines(paths) -> int:
    return sum(p.read_text().count("\n") for p in paths if p.exists())


def run_workers(specs: list[dict], envs: list[dict]) -> int:
    """One process per worker, pinned by its env; one progress bar over all of them."""
    procs, watched, logs = [], [], []
    for spec, env in zip(specs, envs):
        spec_file, log = (Path(spec["records_file"]).with_suffix(x) for x in (".spec.json", ".log"))
        spec_file.write_text(json.dumps(spec))
        logs.append(log)
        watched += [Path(spec["records_file"]), Path(spec["failures_file"])]
        with log.open("a") as fh:
            procs.append(subprocess.Popen([sys.executable, "-m", "mla_var3.sweep", "worker", str(spec_file)],
                                          env=env, stdout=fh, stderr=subprocess.STDOUT))
    start, total, done = _count_lines(watched), sum(len(s["jobs"]) for s in specs), 0
    bar = tqdm(total=total, desc=f"{len(procs)} workers") if tqdm else None
    try:
        while True:
            alive = any(p.poll() is None for p in procs)
            now = _count_lines(watched) - start
            if bar is not None:
                bar.update(now - bar.n)
            elif now != done:
                print(f"{now}/{total} jobs done", flush=True)
            done = now
            if not alive:
                break
            time.sleep(0.5)
    except KeyboardInterrupt:
        for p in procs:
            p.terminate()
        raise
    finally:
        if bar is not None:
            bar.close()
    for i, p in enumerate(procs):
        if p.returncode not in (0, 1):
            print(f"worker {i} (CUDA_VISIBLE_DEVICES={envs[i]['CUDA_VISIBLE_DEVICES']}) exited {p.returncode}; "
                  f"see {logs[i]}", file=sys.stderr)
    return 0 if all(p.returncode == 0 for p in procs) else 1


def merge_records(directory) -> Path:
    """<dir>/records.jsonl (if any) + <dir>/workers/*.jsonl -> <dir>/records.jsonl: identical
    records once, ordered by timestamp (stable). A bad line (one a killed worker left
    half-written) is skipped with one warning naming file and line; bad lines of records.jsonl
    itself, which the merge rewrites, are kept in records.jsonl.skipped first."""
    from mla_var3.runtime import records
    d = Path(directory)
    target = d / records.RECORDS_FILE
    sources = ([target] if target.exists() else []) + sorted((d / WORKERS_DIR).glob("*.jsonl"))
    if not sources:
        raise SweepError(f"merge: no records in {d} (expected {d / WORKERS_DIR}/*.jsonl)")
    seen, recs = set(), []
    for f in sources:
        try:
            good, bad = records.read_file(f)
        except records.RecordError as e:
            if f == target:                 # the merge would overwrite it: refuse, lose nothing
                raise SweepError(f"merge: {e}; move it out of {d} and merge again") from None
            print(f"warning: {e}, skipped", file=sys.stderr)
            continue
        records.warn_bad(f, bad)
        if bad and f == target:
            keep = target.with_name(records.RECORDS_FILE + ".skipped")
            with keep.open("a") as out:
                out.write("".join(line + "\n" for _, _, line in bad))
            print(f"warning: merge: the {len(bad)} skipped line(s) of {target} are kept in {keep}", file=sys.stderr)
        for rec in good:
            key = json.dumps(rec, sort_keys=True)
            if key not in seen:
                seen.add(key)
                recs.append(rec)
    recs.sort(key=lambda r: str(r.get("timestamp", "")))
    tmp = target.with_name(records.RECORDS_FILE + ".tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in recs))
    os.replace(tmp, target)
    return target


def run(cfg) -> int:
    """The sweep as hydra composed it; returns the exit status."""
    from hydra.utils import to_absolute_path
    from mla_var3.runtime import devices
    records_dir = Path(to_absolute_path(str(cfg.records)))
    jobs = shard(expand_jobs(cfg), cfg.shard, cfg.num_shards)
    n_gpus = _gpu_count()
    workers = assign(jobs, min(n_workers_for(cfg.workers, n_gpus), max(1, len(jobs))))
    head = (f"{len(jobs)} jobs (shard {cfg.shard}/{cfg.num_shards}) over {len(workers)} worker(s); "
            f"records: {records_dir / WORKERS_DIR}")
    if cfg.dry_run:
        print(head)
        for i, wjobs in enumerate(workers):
            for job in wjobs:
                print(f"  job {job['index']:4d}  worker {i}  {job['kernel']:28} {job['problem_key']}")
        return 0
    if not devices.cuda_available():
        raise SweepError(f"the sweep needs a GPU to benchmark and none is visible; "
                         f"dry_run=true lists its {len(jobs)} jobs without one")
    print(head, flush=True)
    specs = []
    for i, wjobs in enumerate(workers):
        out, fail = worker_paths(records_dir, cfg.shard, i)
        out.parent.mkdir(parents=True, exist_ok=True)
        specs.append({"jobs": wjobs, "records_file": str(out), "failures_file": str(fail), "shard": cfg.shard,
                      "worker": i, "seed": cfg.seed, "rep_ms": float(cfg.rep_ms), "autotune": bool(cfg.autotune)})
    if len(specs) == 1:
        rc = 1 if run_jobs(specs[0]) else 0
    else:
        rc = run_workers(specs, worker_envs(len(specs), n_gpus))
    if rc:
        print(f"some jobs failed: see {records_dir / FAILURES_DIR}", file=sys.stderr)
    if cfg.merge and cfg.num_shards == 1:
        print(f"merged into {merge_records(records_dir)}; "
              f"table: python -m mla_var3.report --records {records_dir}")
    return rc


def _gpu_count() -> int:
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _hydra_main() -> None:
    import hydra
    conf = conf_dir()
    if not (conf / "sweep.yaml").is_file():
        raise SweepError(f"{conf}/sweep.yaml not found: the package was installed without its data files")

    @hydra.main(version_base="1.3", config_path=str(conf), config_name="sweep")
    def task(cfg) -> None:
        if rc := guarded(run, cfg):
            raise SystemExit(rc)
    task()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["worker"]:          # internal: one worker process, spawned by run_workers
        return guarded(lambda: 1 if run_jobs(json.loads(Path(argv[1]).read_text()), progress=False) else 0)
    if argv[:1] == ["merge"]:           # merge records=DIR [records=DIR2 ...]
        dirs = [a.split("=", 1)[1] if a.startswith("records=") else a for a in argv[1:]] or ["runs/sweep"]
        return guarded(_merge_cli, dirs)
    sys.argv = [sys.argv[0]] + argv
    return guarded(lambda: _check_plugin(argv) or _hydra_main() or 0)


def _merge_cli(dirs) -> int:
    for path in map(merge_records, dirs):
        print(f"{path}: {_count_lines([path])} records")
    return 0


def _check_plugin(argv) -> None:
    """launcher=slurm without its plugin: say what to install (hydra's own message does not)."""
    if any(a.lstrip("+") == "launcher=slurm" or a.startswith("hydra/launcher=submitit") for a in argv):
        try:
            import hydra_plugins.hydra_submitit_launcher  # noqa: F401
        except ImportError:
            raise SweepError("launcher=slurm needs hydra-submitit-launcher: pip install -e '.[slurm]'") from None


if __name__ == "__main__":
    sys.exit(main())
