"""Run records: one JSON object per line, appended under `runs/` (or `--records DIR`).

Every benchmark and check writes one; tables, devlogs and plots are built from them, never
typed by hand. `environment()` is read once per process (GPU, driver, clocks, packages, commit).
"""
from __future__ import annotations

import datetime as _dt
import functools
import gzip
import json
import os
import platform
import subprocess
import sys
import zlib
from importlib import metadata
from pathlib import Path

from mla_var3.errors import RecordError

SCHEMA_VERSION = 1
RECORDS_FILE = "records.jsonl"
RECORD_GLOBS = ("*.jsonl", "*.jsonl.gz")   # a run writes .jsonl; the repository keeps them gzipped (small to ship)
REQUIRED_KEYS = {
    "schema": int, "kind": str, "timestamp": str, "kernel": str, "version": int, "design": str,
    "language": str, "tiling": dict, "problem": dict, "problem_key": str, "env": dict,
}
BENCH_KEYS = {"time_us": dict, "tflops": float, "gbps": float, "pct_roofline": float,
              "pct_datasheet": float, "bound": str, "flops": int, "bytes": int}
CHECK_KEYS = {"passed": bool, "seeds": list, "errors": dict}
PROFILE_KEYS = {"prof_type": str, "rows": list}
TUNE_KEYS = {"trials": list}                     # an autotune: every config tried, the winner in "tiling"
PACKAGES = ("torch", "triton", "nvidia-cutlass-dsl", "cuda-tile", "apache-tvm-ffi")


def _pkg_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def package_versions() -> dict:
    return {p: _pkg_version(p) for p in PACKAGES}


def git_commit() -> str | None:
    """The commit of the checkout the run was started in: MLA_VAR3_COMMIT (set it, as a literal
    hash, for device runs: the device's copy may carry an older .git under the current working
    tree, so `git rev-parse` there names a stale commit, with '+dirty'), else `git rev-parse` in the
    current directory with '+dirty' when the tree has changes; None outside a git checkout."""
    env = os.environ.get("MLA_VAR3_COMMIT")
    if env:
        return env
    root = Path.cwd()
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return (sha + ("+dirty" if dirty else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def gpu_clocks() -> dict | None:
    """SM and memory clocks (MHz) as nvidia-smi reads them now; None without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,driver_version,temperature.gpu,power.draw",
                              "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    if not out:
        return None
    parts = [p.strip() for p in out.splitlines()[0].split(",")]
    keys = ("sm_mhz", "mem_mhz", "driver", "temp_c", "power_w")
    return dict(zip(keys, parts))


@functools.lru_cache(maxsize=1)
def environment() -> dict:
    import torch
    env = {"host": platform.node(), "python": platform.python_version(), "packages": package_versions(),
           "commit": git_commit(), "gpu": None, "driver": None}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
        clocks = gpu_clocks()
        if clocks:
            env["driver"] = clocks.pop("driver")
    return env


def make_record(kind: str, plan, tiling, problem, *, grid: str | None = None, **fields) -> dict:
    """One record. `problem` is the problem run, or None for a whole named `grid` (a check run)."""
    if problem is None and grid is None:
        raise RecordError("record: give a problem or the grid it covers")
    rec = {"schema": SCHEMA_VERSION, "kind": kind,
           "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "kernel": plan.name, "version": plan.version, "design": plan.design, "language": plan.language,
           "problem_kind": problem.kind if problem is not None else plan.problem_kind.kind,
           "tiling": tiling.to_dict() if tiling is not None else {}, "tiling_key": tiling.key() if tiling else "",
           "problem": problem.to_dict() if problem is not None else {"grid": grid},
           "problem_key": problem.key() if problem is not None else f"grid={grid}",
           "grid": grid, "env": environment()}
    declared = getattr(plan, "schedule_contract", None)
    contract = declared(tiling, problem) if declared and tiling is not None and problem is not None else None
    if contract is not None:                     # per_call / per_step / none (KernelPlan.schedule_contract)
        rec["schedule_contract"] = contract
    if getattr(plan, "upstream", ""):            # a peer: the outside code and commit it ran
        rec["upstream"] = plan.upstream
    from mla_var3.runtime.cute_kernel import line_info_enabled
    if line_info_enabled():                      # --lineinfo: CuTe DSL stages built with line info
        rec["lineinfo"] = True
    rec.update(fields)
    return rec


def validate_record(rec: dict) -> None:
    """Raise RecordError naming the first missing or mistyped field."""
    need = dict(REQUIRED_KEYS)
    if rec.get("kind") == "bench":
        need.update(BENCH_KEYS)
    elif rec.get("kind") == "check":
        need.update(CHECK_KEYS)
    elif rec.get("kind") == "profile":
        need.update(PROFILE_KEYS)
    elif rec.get("kind") == "tune":
        need.update(TUNE_KEYS)
    for key, typ in need.items():
        if key not in rec:
            raise RecordError(f"record: missing field {key!r}")
        val = rec[key]
        ok = isinstance(val, typ) or (typ is float and isinstance(val, int) and not isinstance(val, bool))
        if not ok:
            raise RecordError(f"record: field {key!r} should be {typ.__name__}, got {type(val).__name__}")
    if rec.get("kind") == "bench":
        for k in ("median", "min", "max", "n"):
            if k not in rec["time_us"]:
                raise RecordError(f"record: time_us lacks {k!r}")


def append(rec: dict, directory: str | os.PathLike) -> Path:
    validate_record(rec)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / RECORDS_FILE
    with path.open("a") as f:
        f.write(json.dumps(rec, sort_keys=True) + "\n")
    return path


def record_problem(obj) -> str | None:
    """Why a parsed JSON line is not a usable record (None when it is): it must be an object with
    string 'kind' and 'kernel'; a bench record must also pass `validate_record` (tables read its
    fields)."""
    if not isinstance(obj, dict):
        return f"not a JSON record (a JSON {type(obj).__name__}, expected an object with 'kind' and 'kernel')"
    missing = [k for k in ("kind", "kernel") if not isinstance(obj.get(k), str)]
    if missing:
        return f"not a record (no {' or '.join(repr(k) for k in missing)} string)"
    if obj["kind"] == "bench":
        try:
            validate_record(obj)
        except RecordError as e:
            return f"bench {e}"
    return None


def read_file(path: str | os.PathLike) -> tuple[list[dict], list[tuple[int, str, str]]]:
    """One JSON-lines file -> (its records, its bad lines as (line number, why, raw line)).
    RecordError when the file cannot be read or is not text (a PNG, an archive)."""
    path = Path(path)
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":        # archived records (records/ in the repository): gzip-compressed JSON lines
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        raise RecordError(f"records: cannot read {path} ({getattr(e, 'strerror', None) or e})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text:
        raise RecordError(f"records: {path} is not a text file (expected JSON lines, one record per line)")
    good, bad = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            bad.append((n, "not a JSON record", line))
            continue
        why = record_problem(obj)
        if why:
            bad.append((n, why, line))
        else:
            good.append(obj)
    return good, bad


def warn_bad(path, bad) -> None:
    """One `warning: records: <file>:<line>: <why>, skipped` line on stderr per bad line."""
    for n, why, _ in bad:
        print(f"warning: records: {path}:{n}: {why}, skipped", file=sys.stderr)


def load(paths) -> list[dict]:
    """Records from files or directories (a directory means its *.jsonl and *.jsonl.gz files,
    records.jsonl among them). A bad line is skipped with one warning naming file and line; a file named
    directly that holds no record at all (not JSON lines), or a directory without *.jsonl, is a
    RecordError; a non-text file inside a directory is skipped with a warning."""
    out = []
    for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths):
        p = Path(p)
        if not p.exists():
            raise RecordError(f"records: {p} does not exist (expected a records.jsonl file or a directory of them)")
        if p.is_dir():
            files = sorted(f for pattern in RECORD_GLOBS for f in p.glob(pattern) if f.is_file())
            if not files:
                deeper = sum(1 for pattern in RECORD_GLOBS for _ in p.glob(f"*/{pattern}"))
                hint = (f"; its subfolders hold {deeper} (a sweep's workers/? merge them with "
                        f"python -m mla_var3.sweep merge records={p})" if deeper else "")
                raise RecordError(f"records: {p} has no *.jsonl file (expected records.jsonl or other "
                                  f"JSON-lines record files in it){hint}")
        else:
            files = [p]
        for f in files:
            try:
                good, bad = read_file(f)
            except RecordError as e:
                if f is p:                      # named directly: the wrong argument, say so
                    raise
                print(f"warning: {e}, skipped", file=sys.stderr)
                continue
            if f is p and bad and not good:     # e.g. --records README.md
                n, why, _ = bad[0]
                raise RecordError(f"records: {f} holds no record (line {n}: {why}; expected JSON lines, "
                                  f"one object with 'kind' and 'kernel' each)")
            warn_bad(f, bad)
            out += good
    return out


def latest_records(recs: list[dict]) -> list[dict]:
    """The newest bench (or peer) record of each (problem, kernel): what a table shows."""
    latest = {}
    for r in sorted((r for r in recs if r.get("kind") in ("bench", "peer")), key=lambda r: r.get("timestamp", "")):
        latest[(r["problem_key"], r["kernel"])] = r
    return list(latest.values())


def devlog_markers(version: str) -> tuple[str, str]:
    return (f"<!-- mla_var3:generated {version} begin (python -m mla_var3.kernel {version} --devlog) -->",
            f"<!-- mla_var3:generated {version} end -->")


def devlog_block(path: str | os.PathLike, version: str) -> str | None:
    """The body of `version`'s generated block in the devlog at `path`; None without one."""
    path = Path(path)
    if not path.is_file():
        return None
    begin, end = devlog_markers(version)
    text = path.read_text()
    if begin not in text or end not in text.split(begin, 1)[1]:
        return None
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def update_devlog(path: str | os.PathLike, version: str, body: str) -> bool:
    """Replace the generated block of `version` in the devlog (prose around it stays); when the
    markers are missing, append them under the version's `## <version>` section (or at the end).
    Returns True when the file changed."""
    path = Path(path)
    begin, end = devlog_markers(version)
    text = path.read_text() if path.exists() else f"# {version.rsplit('_v', 1)[0]}\n"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        new = head + block + tail
    else:
        heading = f"## {version}"
        if heading in text:
            start = text.index(heading)
            nxt = text.find("\n## ", start + len(heading))
            cut = len(text) if nxt < 0 else nxt + 1
            new = text[:cut].rstrip("\n") + "\n\n" + block + "\n" + ("\n" + text[cut:] if nxt >= 0 else "")
        else:
            new = text.rstrip("\n") + f"\n\n{heading}\n\n{block}\n"
    if new != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(new)
        return True
    return False
