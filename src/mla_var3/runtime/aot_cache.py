"""Ahead-of-time compile cache on disk for CuTe DSL stages (opt-in: MLA_VAR3_AOT_DIR=<dir>[:<dir>...]).

Why: CuTe DSL compiles the same way with or without a GPU, and a `--check` of an MLA version spends
most of its time compiling (one build per static shape and split length, ~3-5 s each), which on
the lent GPU machine is device time. With the cache, compile here (`--compile-only` with the
same problems), carry the directory, and the GPU run loads each compiled function instead.

An entry is `<dir>/<kernel>-<stage>-<digest>.o` (the TVM-FFI function exported with
`export_to_c`) and a `.json` beside it saying what it is. The digest covers the whole CompileKey
(kernel, stage, tiling, dtypes, static dims, arch, options, variant), the nvidia-cutlass-dsl
version and the source of the kernel's package plus `cute_python/common/`, so an edit or a DSL
upgrade is a miss, never a stale kernel. Builds that keep artifacts (`--keep-*`, `--dump-dir`:
`--dump`) never use it. An entry that fails to load is ignored (the stage compiles as usual).

Several directories (separated by os.pathsep) are searched in turn and new entries go to the
first: a device call can carry one cache per purpose (the versions of a bench, the builds of a
test file) and load from all of them, within the 64 MiB a call may carry."""
from __future__ import annotations

import hashlib
import json
import os
import sys
from functools import lru_cache
from pathlib import Path

AOT_ENV = "MLA_VAR3_AOT_DIR"
COMMON_DIR = Path(__file__).resolve().parents[1] / "kernel" / "cute_python" / "common"
LOADED: list = []                   # CompileKeys served from disk in this process (for tests and logs)
_SOURCE_DIGESTS: dict[Path, str] = {}


def directories() -> list[Path]:
    """Every cache directory named by MLA_VAR3_AOT_DIR, in search order (empty: no cache)."""
    return [Path(p) for p in os.environ.get(AOT_ENV, "").split(os.pathsep) if p]


def directory() -> Path | None:
    """Where new entries go: the first directory named, or None (no cache)."""
    dirs = directories()
    return dirs[0] if dirs else None


def usable(key) -> bool:
    """Whether a build with this key may be cached: not the artifact-keeping builds of --dump."""
    return directory() is not None and "--keep-" not in key.options and "--dump-dir" not in key.options


@lru_cache(maxsize=1)
def _dsl_version() -> str:
    from importlib import metadata
    try:
        return metadata.version("nvidia-cutlass-dsl")
    except metadata.PackageNotFoundError:
        return "unknown"


def source_digest(obj) -> str:
    """sha256 over the .py files of the package that defines `obj`'s class and of cute_python/common."""
    module = sys.modules.get(type(obj).__module__)
    folder = Path(module.__file__).resolve().parent if module is not None and getattr(module, "__file__", None) else None
    if folder not in _SOURCE_DIGESTS:
        h = hashlib.sha256()
        for d in (folder, COMMON_DIR):
            for f in sorted(d.glob("*.py")) if d is not None and d.is_dir() else ():
                h.update(f.name.encode())
                h.update(f.read_bytes())
        _SOURCE_DIGESTS[folder] = h.hexdigest()
    return _SOURCE_DIGESTS[folder]


def describe(key, obj) -> dict:
    return {"kernel": key.kernel, "stage": key.stage, "tiling": key.tiling, "dtypes": list(key.dtypes),
            "static": [repr(s) for s in key.static], "arch": key.arch, "options": key.options,
            "variant": key.variant, "nvidia_cutlass_dsl": _dsl_version(), "source": source_digest(obj)}


def entry(key, obj) -> tuple[Path, str]:
    """(object file path in the first directory, exported function name) of this key's entry."""
    digest = hashlib.sha256(json.dumps(describe(key, obj), sort_keys=True).encode()).hexdigest()[:24]
    safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in f"{key.kernel}-{key.stage}")
    return directory() / f"{safe}-{digest}.o", f"mla_var3_aot_{digest}"


def load(key, obj, fake_args):
    """The cached compiled function for `key`, or None (no cache, no entry, or it did not load).
    `fake_args(obj)` are the arguments it was compiled with: the trailing `__call__` defaults past
    them are appended on every call (`FilledCall`), as the in-process function would."""
    if not usable(key):
        return None
    first, name = entry(key, obj)
    path = next((d / first.name for d in directories() if (d / first.name).is_file()), None)
    if path is None:
        return None
    try:
        import cutlass.runtime
        fn = getattr(cutlass.runtime.load_module(str(path), enable_tvm_ffi=True), name)
    except Exception as ex:             # a corrupt or foreign entry: compile instead, say so once
        print(f"aot cache: {path.name} did not load ({type(ex).__name__}); compiling", file=sys.stderr)
        return None
    LOADED.append(key)
    defaults = trailing_defaults(obj, fake_args(obj))
    return FilledCall(fn, defaults) if defaults else fn


def trailing_defaults(obj, fake_args: tuple) -> tuple:
    """Defaults of the `__call__` parameters after the last fake argument (e.g. `timeline=None`).

    Why: a function compiled in this process fills an omitted trailing default itself, but the
    exported one lists every parameter (env streams excepted) and refuses a shorter call."""
    import inspect
    params = [p for p in inspect.signature(obj.__call__).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    rest = params[len(fake_args):]
    if any(p.default is inspect.Parameter.empty for p in rest):
        return ()
    return tuple(p.default for p in rest)


class FilledCall:
    """A loaded entry called with the trailing defaults appended, as the in-process function would."""

    def __init__(self, fn, defaults: tuple):
        self.fn, self.defaults = fn, defaults

    def __call__(self, *args):
        return self.fn(*args, *self.defaults)


def store(key, obj, fn) -> Path | None:
    """Export `fn` (a TVM-FFI compiled function) as this key's entry; None when not cached."""
    if not usable(key) or not hasattr(fn, "export_to_c"):
        return None
    path, name = entry(key, obj)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}.o")
    fn.export_to_c(str(tmp), function_name=name)
    os.replace(tmp, path)                # never a half-written entry under the real name
    path.with_suffix(".json").write_text(json.dumps({**describe(key, obj), "function": name}, indent=1))
    return path
