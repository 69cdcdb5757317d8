"""CUTLASS's own CuTe DSL examples as peers: found in the git-ignored `third_party/cutlass` and
imported from there at run time, never copied into the project (third_party/README.md).

`scripts/fetch_cutlass.sh` exports NVIDIA/cutlass at CUTLASS_COMMIT into `third_party/cutlass`
(or $CUTLASS_DIR) and stamps it (`.mla_var3_sources`); `cutlass_root()` finds that tree here:
$CUTLASS_DIR, else `third_party/cutlass` under the current directory, else under this checkout.
A tree without the stamp, or stamped with another commit, does not count: the plans name the
commit they were read at (`upstream`). Without the tree every plan that uses it is unavailable
with the fetch command (`list` shows it; `build` refuses in one line).

The Hopper GEMM examples take A [m, k, l], B [n, k, l] and C [m, n, l] (l the batch) as CuTe
tensors whose major modes they read from the strides (`LayoutEnum.from_tensor`). Our problem
kind's K-major A [m, k], B [n, k] and row-major C [m, n] are those with l = 1: `mnl_view` gives
the [rows, cols, 1] view with the strides the examples' own tensors have ((cols, 1, rows * cols),
no copy), and `fake_mnl_arguments` the matching fake tensors, so `cute.compile` needs no GPU and
the call goes through TVM-FFI with our torch tensors (C is the harness's output buffer).
"""
from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path

from mla_var3.errors import PlanError

CUTLASS_COMMIT = "7107b05535f8977f5ecb9d01ee203205b1fd9bc4"    # scripts/fetch_cutlass.sh (a test checks)
FETCH_COMMAND = "scripts/fetch_cutlass.sh"
ENV_VAR = "CUTLASS_DIR"
DEFAULT_DIR = "third_party/cutlass"
STAMP = ".mla_var3_sources"
HOPPER_DENSE_GEMM = "examples/python/CuTeDSL/cute/hopper/kernel/dense_gemm"
CHECKOUT = Path(__file__).resolve().parents[5]      # src/mla_var3/kernel/peer_python/common -> repo root


def _candidates() -> list[tuple[Path, str]]:
    given = os.environ.get(ENV_VAR)
    if given:
        return [(Path(given), f"{ENV_VAR}={given}")]
    here = Path.cwd() / DEFAULT_DIR
    out = [(here, f"{DEFAULT_DIR}/ ({ENV_VAR} unset)")]
    if (CHECKOUT / "scripts" / "fetch_cutlass.sh").is_file() and (CHECKOUT / DEFAULT_DIR).resolve() != here.resolve():
        out.append((CHECKOUT / DEFAULT_DIR, f"{CHECKOUT / DEFAULT_DIR}/"))
    return out


def cutlass_root() -> tuple[Path | None, str | None]:
    """(the exported CUTLASS tree, None), or (None, why not, naming the fetch command)."""
    why = []
    for where, label in _candidates():
        stamp = where / STAMP
        if stamp.is_file():
            got = stamp.read_text().strip()
            if got.split()[0:1] == [f"cutlass={CUTLASS_COMMIT}"]:
                return where, None
            why.append(f"{label} holds {got.split()[0] if got else 'an empty stamp'}, not cutlass={CUTLASS_COMMIT[:7]}")
        elif where.is_dir() and any(where.iterdir()):
            why.append(f"{label} was not made by {FETCH_COMMAND} (no {STAMP}: its commit is unknown)")
        else:
            why.append(f"no CUTLASS examples at {label}")
    return None, "; ".join(why) + f"; fetch them with {FETCH_COMMAND} [CUTLASS_GIT]"


def example_file(relpath: str) -> tuple[Path | None, str | None]:
    """(the example's file, None), or (None, why it is unavailable)."""
    root, why = cutlass_root()
    if root is None:
        return None, why
    path = root / relpath
    if not path.is_file():
        return None, f"{root} has no {relpath}; re-export it with {FETCH_COMMAND}"
    return path, None


@functools.lru_cache(maxsize=None)
def _import(path: str):
    name = "mla_var3_cutlass_examples." + Path(path).stem
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"not a Python module: {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules.setdefault(name, mod)
    return mod


def load_example(relpath: str, arch: str = "sm_90a"):
    """Import the example file from the CUTLASS tree (once per process); PlanError in one line."""
    from mla_var3.runtime.cute_kernel import ensure_dsl_arch
    path, why = example_file(relpath)
    if path is None:
        raise PlanError(f"{relpath} is unavailable: {why}")
    ensure_dsl_arch(arch)                  # the example imports cutlass.cute: the arch is read then
    try:
        return _import(str(path.resolve()))
    except Exception as ex:                # a newer DSL without an API the example uses, ...
        first = str(ex).splitlines()[0] if str(ex) else ""
        raise PlanError(f"importing {path} failed ({type(ex).__name__}: {first}); the examples at "
                        f"{CUTLASS_COMMIT[:7]} were checked against nvidia-cutlass-dsl 4.8.1") from None


# ---- our GEMM tensors as the examples' (m, k, l) tensors ------------------------------------------
ALIGN = 8          # elements: 16-byte contiguous rows (the examples' is_valid_tensor_alignment)


def fake_mnl_arguments(dtype) -> tuple:
    """A (m, k, 1), B (n, k, 1), C (m, n, 1), K- / K- / N-major with dynamic m, n, k (n, k
    divisible by 8), 16-byte aligned: what the examples build with from_dlpack(...,
    assumed_align=16).mark_layout_dynamic(leading_dim=1), as fake tensors (no GPU)."""
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor
    m = cute.sym_int(symbol="m")
    n = cute.sym_int(divisibility=ALIGN, symbol="n")
    k = cute.sym_int(divisibility=ALIGN, symbol="k")

    def fake(rows, cols):
        return make_fake_compact_tensor(dtype, (rows, cols, 1), stride_order=(1, 0, 2), assumed_align=16)
    return fake(m, k), fake(n, k), fake(m, n)


def fake_stream():
    from cutlass.cute.runtime import make_fake_stream
    return make_fake_stream(use_tvm_ffi_env_stream=True)


def mnl_view(t):
    """[rows, cols] contiguous -> the [rows, cols, 1] view with strides (cols, 1, rows * cols):
    the examples' own (l, rows, cols).permute(1, 2, 0) layout at l = 1; no copy."""
    rows, cols = t.shape
    return t.as_strided((rows, cols, 1), (cols, 1, rows * cols))


def mnl_launch_arguments(a, b, c) -> tuple:
    """The torch views the compiled example is called with (A, B, C; the stream is TVM-FFI's
    current one). The compiled code assumes what the fake arguments promised and the call
    checks only part of it: refuse misaligned or non-contiguous tensors here, in one line."""
    from mla_var3.kernel.cute_python.common import gemm_io
    a, b, c = gemm_io.launch_arguments(a, b, c)
    return mnl_view(a), mnl_view(b), mnl_view(c)
