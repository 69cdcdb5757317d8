"""Compile, here and without a GPU, every build a test file's GPU tests make, into the AOT cache.

Why: a GPU test run on the lent H200 spends most of its device time compiling (3-5 s a build, two
dozen builds for one version's file). A test file that lists its builds in `aot_builds()` (yielding
(version, problem, tiling or None for the default)) gets them compiled here; carry the cache and
run the tests there with the same MLA_VAR3_AOT_DIR, and each build loads instead of compiling.

Usage, from the repository root:
    MLA_VAR3_AOT_DIR=.aot_tests python scripts/aot_test_builds.py tests/test_persistent_items.py [...]
Quarantined versions are compiled too (MLA_VAR3_RUN_QUARANTINED=1 is set for this process)."""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_test_module(path: Path):
    """Import a test file as pytest would see it (tests/ on sys.path for its helper imports)."""
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("test_files", nargs="+", type=Path)
    ap.add_argument("--arch", default="sm_90a")
    args = ap.parse_args(argv)
    os.environ.setdefault("MLA_VAR3_RUN_QUARANTINED", "1")
    os.environ.setdefault("CUTE_DSL_ARCH", args.arch)
    from mla_var3.runtime import aot_cache, registry
    if aot_cache.directory() is None:
        print(f"error: scripts/aot_test_builds.py: set {aot_cache.AOT_ENV}=<dir> (where the builds go)",
              file=sys.stderr)
        return 2
    for path in args.test_files:
        module = load_test_module(path)
        if not hasattr(module, "aot_builds"):
            print(f"error: scripts/aot_test_builds.py: {path} has no aot_builds() listing its GPU builds",
                  file=sys.stderr)
            return 2
        seen, start = set(), time.time()
        for version, problem, tiling in module.aot_builds():
            plan = registry.get_plan(version)
            key = (version, problem.static_key(), (tiling or plan.default_tiling(problem)).key())
            if key in seen:
                continue
            seen.add(key)
            t0 = time.time()
            info = plan.compile_only(problem, args.arch, tiling=tiling)
            if not info.get("compiled", True):
                print(f"error: {version} {problem.key()}: {info.get('reason')}", file=sys.stderr)
                return 1
            print(f"  {version} {problem.static_key()} {key[2]}: {time.time() - t0:.1f} s", flush=True)
        print(f"{path}: {len(seen)} builds in {aot_cache.directory()} ({time.time() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
