"""CuteKernel: one CuTe DSL stage - compile cache (TVM-FFI, from fake tensors) + launch.

Compiled once per (kernel, stage, tiling key, dtypes, static dims, arch, compile options): the
dynamic extents (batch, pages) are `cute.sym_int`s in the fake tensors, so one compile serves
every batch and length. The call goes through TVM-FFI with torch tensors directly (~12 us host
time on the H200, against ~233 us for the from_dlpack path) on the caller's current stream.

Line info (`--lineinfo` on the CLI): `enable_line_info()` sets MLA_VAR3_LINEINFO=1 for this
process and the ones it starts (the ncu inner run, autotune trials); every CuteKernel built while
it is set appends `--generate-line-info` to its options, so it is part of the compile key.

With MLA_VAR3_AOT_DIR set, a compile first looks for the key's entry on disk and stores what it
compiled there (runtime/aot_cache.py): compile on a CPU machine, run on the GPU machine.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

from mla_var3.errors import DeviceError
from mla_var3.runtime import aot_cache
from mla_var3.runtime.runtime_kernel import Stage

DEFAULT_ARCH = "sm_90a"
DEFAULT_OPTIONS = "--enable-tvm-ffi"
LINE_INFO_ENV = "MLA_VAR3_LINEINFO"
LINE_INFO_OPTION = "--generate-line-info"


def enable_line_info(on: bool = True) -> None:
    """Build every CuteKernel made from now on (here and in child processes) with line info."""
    if on:
        os.environ[LINE_INFO_ENV] = "1"
    else:
        os.environ.pop(LINE_INFO_ENV, None)


def line_info_enabled() -> bool:
    return os.environ.get(LINE_INFO_ENV, "") == "1"


def with_line_info(options: str) -> str:
    """`options` plus --generate-line-info when line info is on (once)."""
    if line_info_enabled() and LINE_INFO_OPTION not in options.split():
        return f"{options} {LINE_INFO_OPTION}".strip()
    return options


def ensure_dsl_arch(arch: str = DEFAULT_ARCH) -> None:
    """CUTE_DSL_ARCH is read once, when cutlass.cute is first imported: set it before."""
    current = os.environ.setdefault("CUTE_DSL_ARCH", arch)
    if current != arch and "cutlass.cute" in sys.modules:
        raise DeviceError(f"--arch: CuTe DSL was already imported for {current}; "
                          f"compile for {arch} in a fresh process (CUTE_DSL_ARCH={arch})")
    os.environ["CUTE_DSL_ARCH"] = arch


@dataclass(frozen=True)
class CompileKey:
    kernel: str          # the version, e.g. flash_mla_decode_v2
    stage: str           # which launch of the call, e.g. "split" / "combine"
    tiling: str
    dtypes: tuple
    static: tuple
    arch: str
    options: str
    variant: str = ""    # e.g. "timeline": an instrumented build, never sharing an entry with the plain one


_CACHE: dict[CompileKey, Any] = {}
COMPILE_LOG: list[tuple[CompileKey, float]] = []   # (key, seconds) of every real compile


def clear_cache() -> None:
    _CACHE.clear()


class CuteKernel(Stage):
    """A CuTe DSL kernel object, its fake arguments, and how to call it with torch tensors.

    build():                                the kernel object (class with @cute.jit __call__)
    fake_args(obj):                         fake tensors / scalars / fake stream, in __call__'s order
    launch_args(inputs, outputs, workspace): the torch tensors (views) to call the compiled function with
    """

    def __init__(self, *, kernel: str, build: Callable[[], Any], fake_args: Callable[[Any], tuple],
                 launch_args: Callable[..., tuple], dtypes: tuple, static: tuple, tiling_key: str = "default",
                 stage: str = "main", arch: str = DEFAULT_ARCH, options: str = DEFAULT_OPTIONS,
                 variant: str = ""):
        self.name, self.build, self.fake_args, self.launch_args = stage, build, fake_args, launch_args
        self.key = CompileKey(kernel=kernel, stage=stage, tiling=tiling_key, dtypes=tuple(str(d) for d in dtypes),
                              static=tuple(static), arch=arch, options=with_line_info(options), variant=variant)

    def compile(self):
        fn = _CACHE.get(self.key)
        if fn is None:
            ensure_dsl_arch(self.key.arch)
            import cutlass.cute as cute
            obj = self.build()
            fn = aot_cache.load(self.key, obj, self.fake_args)   # MLA_VAR3_AOT_DIR: compiled earlier, maybe elsewhere
            if fn is None:
                t0 = time.perf_counter()
                fn = cute.compile(obj, *self.fake_args(obj), options=self.key.options)
                COMPILE_LOG.append((self.key, time.perf_counter() - t0))
                aot_cache.store(self.key, obj, fn)
            _CACHE[self.key] = fn
        return fn

    def launch(self, *args) -> None:
        self.compile()(*self.launch_args(*args))

    def describe(self) -> dict:
        extra = {"variant": self.key.variant} if self.key.variant else {}
        return {**super().describe(), "arch": self.key.arch, "options": self.key.options, **extra}
