"""Single-file companion kernels: any Python file that exports

    get_inputs()            -> a tuple of inputs (torch tensors and plain values), on the GPU
    kernel_fn(*inputs)      -> the kernel's output (a tensor or a tuple of tensors)
    reference_fn(*inputs)   -> the same outputs computed another way (torch)

is checked by `scripts/verify_kernel.py FILE` (outputs against the reference, element-wise
|out - ref| <= atol + rtol |ref|, NaN and inf where the reference has them) and timed by
`scripts/benchmark_kernel.py FILE` with the harness's protocol (runtime/bench.py: CUDA-graph
replays, as many input sets, from repeated get_inputs() calls, as make the bytes touched exceed
3x L2). A file may set TOLERANCE = {"atol": ..., "rtol": ...}; flags override it. Examples:
`examples/companion/`. Anything wrong - no file, an import error, a missing name, no GPU -
is one line on stderr and exit status 2; a mismatch is exit status 1.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

REQUIRED = ("get_inputs", "kernel_fn", "reference_fn")
DEFAULT_ATOL = DEFAULT_RTOL = 1e-2


class CompanionError(Exception):
    """Why a companion file cannot be verified or timed (one line)."""


def _first_line(ex: BaseException) -> str:
    text = str(ex).strip()
    return f"{type(ex).__name__}: {text.splitlines()[0]}" if text else type(ex).__name__


def load(path: str | Path):
    """Import the file as a module and check it exports the three callables."""
    p = Path(path)
    if not p.is_file():
        raise CompanionError(f"{path}: no such file")
    if p.suffix != ".py":
        raise CompanionError(f"{path}: expected a Python file (.py)")
    spec = importlib.util.spec_from_file_location(f"mla_var3_companion_{p.stem}", p)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except BaseException as ex:          # SyntaxError, ImportError, SystemExit from a script, ...
        if isinstance(ex, KeyboardInterrupt):
            raise
        raise CompanionError(f"{path}: import failed ({_first_line(ex)})") from None
    missing = [n for n in REQUIRED if not callable(getattr(mod, n, None))]
    if missing:
        raise CompanionError(f"{path}: missing {', '.join(missing)}; a companion file exports get_inputs(), "
                             f"kernel_fn(*inputs) and reference_fn(*inputs)")
    return mod


def as_outputs(value, what: str) -> tuple:
    import torch
    outs = (value,) if isinstance(value, torch.Tensor) else tuple(value) if isinstance(value, (tuple, list)) else None
    if not outs or not all(isinstance(t, torch.Tensor) for t in outs):
        raise CompanionError(f"{what}: expected a tensor or a tuple of tensors, got {type(value).__name__}")
    return outs


def compare(outs: tuple, refs: tuple, atol: float, rtol: float) -> tuple[bool, list[str]]:
    """(all close, one line per output)."""
    import torch
    if len(outs) != len(refs):
        return False, [f"kernel_fn returned {len(outs)} outputs, reference_fn {len(refs)}"]
    ok, lines = True, []
    for i, (o, r) in enumerate(zip(outs, refs)):
        name = f"output {i}"
        if tuple(o.shape) != tuple(r.shape):
            ok = False
            lines.append(f"{name}: shape {list(o.shape)} vs reference {list(r.shape)}")
            continue
        od, rd = o.detach().double().cpu(), r.detach().double().cpu()
        special = ~torch.isfinite(rd)
        bad_special = int((special & ~((od == rd) | (od.isnan() & rd.isnan()))).sum())
        finite = ~special
        err = (od - rd).abs().where(finite, torch.zeros_like(od))
        err = err.where(~(od.isnan() & finite), torch.full_like(od, float("inf")))   # NaN where the reference is finite
        allowed = atol + rtol * rd.abs().where(finite, torch.zeros_like(rd))
        over = int((err > allowed).sum())
        max_err = float(err.max()) if err.numel() else 0.0
        good = over == 0 and bad_special == 0
        ok &= good
        lines.append(f"{name} {list(o.shape)} {str(o.dtype).replace('torch.', '')}: "
                     f"{'ok' if good else 'MISMATCH'}, max |out - ref| {max_err:.3g}, "
                     f"{over} of {o.numel()} beyond {atol:g} + {rtol:g} |ref|"
                     + (f", {bad_special} NaN/inf where the reference differs" if bad_special else ""))
    return ok, lines


def require_gpu(script: str) -> None:
    import torch
    if not torch.cuda.is_available():
        raise CompanionError(f"{script}: no CUDA GPU is visible; companion kernels run on one (the H200)")


def _inputs(mod) -> tuple:
    got = mod.get_inputs()
    return tuple(got) if isinstance(got, (tuple, list)) else (got,)


def _nbytes(values) -> int:
    import torch
    return sum(t.numel() * t.element_size() for t in values if isinstance(t, torch.Tensor))


# ---- verify ---------------------------------------------------------------------------------------
def verify(path, atol: float | None = None, rtol: float | None = None) -> tuple[bool, list[str]]:
    import torch
    mod = load(path)
    require_gpu("verify_kernel.py")
    tol = getattr(mod, "TOLERANCE", {}) or {}
    atol = float(tol.get("atol", DEFAULT_ATOL) if atol is None else atol)
    rtol = float(tol.get("rtol", DEFAULT_RTOL) if rtol is None else rtol)
    inputs = _inputs(mod)
    try:
        outs = as_outputs(mod.kernel_fn(*inputs), "kernel_fn")
        torch.cuda.synchronize()
    except CompanionError:
        raise
    except Exception as ex:
        raise CompanionError(f"{path}: kernel_fn failed ({_first_line(ex)})") from None
    refs = as_outputs(mod.reference_fn(*inputs), "reference_fn")
    return compare(outs, refs, atol, rtol)


def main_verify(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="verify_kernel.py", description="Check a companion file's kernel_fn "
                                 "against its reference_fn on get_inputs() (module docstring: mla_var3/companion.py).")
    ap.add_argument("file")
    ap.add_argument("--atol", type=float, help=f"absolute tolerance (default: the file's TOLERANCE, else {DEFAULT_ATOL:g})")
    ap.add_argument("--rtol", type=float, help=f"relative tolerance (default: the file's TOLERANCE, else {DEFAULT_RTOL:g})")
    args = ap.parse_args(argv)
    try:
        ok, lines = verify(args.file, args.atol, args.rtol)
    except CompanionError as ex:
        print(f"error: {ex}", file=sys.stderr)
        return 2
    for line in lines:
        print(f"{args.file}: {line}")
    print(f"{args.file}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


# ---- benchmark ------------------------------------------------------------------------------------
class _Call:
    """What runtime/bench.bench_rotating times: `launch(inputs, outputs, workspace)` per set."""

    def __init__(self, fn):
        self.fn = fn

    def launch(self, inputs, outputs, workspace):
        self.fn(*inputs)


def benchmark(path, rep_ms: float = 100.0) -> dict:
    import torch

    from mla_var3.runtime import bench, devices
    mod = load(path)
    require_gpu("benchmark_kernel.py")
    device = devices.current_device()
    first = _inputs(mod)
    try:
        outs = as_outputs(mod.kernel_fn(*first), "kernel_fn")     # compiles, warms up
        torch.cuda.synchronize()
    except CompanionError:
        raise
    except Exception as ex:
        raise CompanionError(f"{path}: kernel_fn failed ({_first_line(ex)})") from None
    per_set = _nbytes(first) + _nbytes(outs)
    if per_set <= 0:
        raise CompanionError(f"{path}: get_inputs() and kernel_fn touch no tensor bytes; nothing to time")
    n_sets = bench.sets_needed(per_set, device.l2_bytes)
    sets = [(first, None, {})] + [(_inputs(mod), None, {}) for _ in range(1, n_sets)]
    stats = bench.bench_rotating(_Call(mod.kernel_fn), sets, rep_ms=rep_ms, rotated_bytes=per_set * n_sets)
    gbps = per_set / (stats.median * 1e-6) / 1e9
    _, ceiling = device.ceilings()
    return {"file": str(path), "gpu": device.name or device.display_name, "time_us": stats.to_dict(),
            "bytes": per_set, "gbps": gbps, "pct_copy_ceiling": 100.0 * gbps / ceiling, "copy_ceiling_gbps": ceiling}


def main_benchmark(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="benchmark_kernel.py", description="Time a companion file's kernel_fn "
                                 "with the harness's protocol (CUDA graphs, inputs rotated past 3x L2).")
    ap.add_argument("file")
    ap.add_argument("--rep-ms", type=float, default=100.0, dest="rep_ms", help="timing budget per measurement (ms)")
    ap.add_argument("--json", help="also write the result as JSON to this path")
    args = ap.parse_args(argv)
    try:
        res = benchmark(args.file, args.rep_ms)
    except CompanionError as ex:
        print(f"error: {ex}", file=sys.stderr)
        return 2
    t = res["time_us"]
    print(f"{args.file}: {t['median']:.2f} us median (min {t['min']:.2f}, max {t['max']:.2f}; {t['n']} graph replays "
          f"of {t['launches']} calls over {t['n_sets']} input sets), {res['bytes'] / 2**20:.1f} MiB per call, "
          f"{res['gbps']:.0f} GB/s = {res['pct_copy_ceiling']:.1f}% of the {res['copy_ceiling_gbps']:.0f} GB/s "
          f"copy ceiling ({res['gpu']})")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0
