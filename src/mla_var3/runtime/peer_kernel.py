"""PeerKernel: one call into an outside library (a "peer", e.g. FlashMLA), run live by our harness.

A peer is code we neither write nor ship: a build script fetches it at a pinned commit and builds
a Python extension outside the package (the git-ignored `third_party/`); the peer plan finds it at
run time (`locate` / `load_extension`: an environment variable naming the .so or its directory,
else a default directory under the current directory) and reports itself unavailable, naming the
build command, when it is missing - so `list` and the CPU tests work without it.

A peer's API allocates and returns its own outputs: the stage returns them (runtime_kernel.py,
"Outputs"), so the check compares the library's own tensors and the timed call copies nothing.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mla_var3.runtime.runtime_kernel import Stage


class PeerKernel(Stage):
    """Wraps `fn(inputs, workspace) -> outputs`: one call of the library, whose returned tensors
    (in the problem's output order) are the call's outputs."""

    def __init__(self, fn: Callable, *, name: str = "main"):
        self.fn, self.name = fn, name

    def launch(self, inputs, outputs, workspace) -> tuple:
        return tuple(self.fn(inputs, workspace))


@dataclass(frozen=True)
class ExtensionSpec:
    """Where a peer's extension module lives and how it is made."""
    module: str            # the module's name (its PyInit_<module>), e.g. "flashmla_dense_sm90"
    env_var: str           # names the .so, or the directory holding it
    default_dir: str       # else this directory, relative to the current directory
    build_command: str     # what makes it, for the "unavailable" message

    def locate(self) -> tuple[Path | None, str | None]:
        """(path of the .so, None), or (None, why it cannot be found)."""
        given = os.environ.get(self.env_var)
        where = Path(given) if given else Path.cwd() / self.default_dir
        label = f"{self.env_var}={given}" if given else f"{self.default_dir}/ ({self.env_var} unset)"
        if where.is_file():
            return where, None
        if where.is_dir():
            exact = where / f"{self.module}.so"
            found = [exact] if exact.is_file() else sorted(where.glob(f"{self.module}.*.so"))
            if found:
                return found[0], None
        return None, (f"{self.module} not built: no {self.module}*.so at {label}; "
                      f"build it with {self.build_command}")


@functools.lru_cache(maxsize=None)
def _load(module: str, path: str):
    try:
        import torch  # noqa: F401  (the extension links against libtorch: load it first)
        spec = importlib.util.spec_from_file_location(module, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"not a loadable extension module: {path}")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except Exception as ex:       # ImportError, OSError (missing libtorch_cuda on a CPU-only torch), ...
        first = str(ex).splitlines()[0] if str(ex) else ""
        return None, f"{type(ex).__name__}: {first}"
    sys.modules.setdefault(module, mod)
    return mod, None


def load_extension(spec: ExtensionSpec):
    """(module, None) when it imports, else (None, a one-line reason naming the build command)."""
    path, reason = spec.locate()
    if path is None:
        return None, reason
    mod, err = _load(spec.module, str(path.resolve()))
    if mod is None:
        return None, f"{path} does not import ({err}); rebuild it with {spec.build_command}"
    return mod, None
