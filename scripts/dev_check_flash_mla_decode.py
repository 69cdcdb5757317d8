#!/usr/bin/env python
"""Standalone GPU check of flash_mla_decode_v1 (CuTe DSL, sm_90a), independent of the harness.

For every problem of the `check` grid (plus a few edge and "peaked" problems) it builds inputs
with mla.make_inputs, runs the kernel on NaN-filled outputs (compiled once per (s_q, h_q)), and
compares with mla.reference using FlashMLA's tolerances:
  out vs the reference rounded to bf16: every element abs err < 8e-4 or rel err < 2.01/128, and
  cosine difference 1 - 2<x,y>/(|x|^2+|y|^2) <= 5e-6 ("peaked": relative norm error <= 5e-3);
  lse: abs err < 1e-6 or rel err < 8.01/65536; inf/NaN positions must match in both.
Then it times b=128, s_q=1, h_q=64, seqlen=4096 with triton.testing.do_bench_cudagraph.
One line per problem; exit status 1 on any FAIL.

Run (GPU machine, from the repo root, after the devkit setup):
    python scripts/dev_check_flash_mla_decode.py [--quick]
"""
from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")      # before anything imports cutlass

import torch  # noqa: E402

import cutlass.cute as cute  # noqa: E402
from mla_var3.layers import mla  # noqa: E402
from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v1 import kernel as kmod  # noqa: E402

OUT_ABS, OUT_REL, OUT_COS = 8e-4, 2.01 / 128, 5e-6
LSE_ABS, LSE_REL = 1e-6, 8.01 / 65536
PEAKED_NORM = 5e-3

_compiled: dict[tuple[int, int], object] = {}


def compiled_for(s_q: int, h_q: int):
    key = (s_q, h_q)
    if key not in _compiled:
        k = kmod.FlashMlaDecodeKernel(s_q, h_q)
        t0 = time.time()
        _compiled[key] = cute.compile(k, *kmod.fake_arguments(k), options="--enable-tvm-ffi")
        print(f"  compiled s_q={s_q} h_q={h_q} in {time.time() - t0:.1f}s", flush=True)
    return _compiled[key]


def run(inputs: mla.MlaDecodeInputs):
    out, lse = mla.make_outputs(inputs)                 # NaN-poisoned: unwritten elements show
    fn = compiled_for(inputs.s_q, inputs.h_q)
    fn(*kmod.launch_arguments(inputs.q, inputs.kv_cache, inputs.block_table, inputs.cache_seqlens,
                              out, lse, inputs.softmax_scale))
    torch.cuda.synchronize()
    return out, lse


def _same_specials(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(torch.isposinf(a), torch.isposinf(b))
                and torch.equal(torch.isneginf(a), torch.isneginf(b)))


def _elem_errors(x: torch.Tensor, y: torch.Tensor, abs_tol: float, rel_tol: float):
    """(#failing elements, max abs err, max rel err) over positions finite in both."""
    fin = torch.isfinite(x) & torch.isfinite(y)
    x, y = x[fin].double(), y[fin].double()
    if x.numel() == 0:
        return 0, 0.0, 0.0
    err = (x - y).abs()
    rel = torch.where(y != 0, err / y.abs(), torch.where(err == 0, 0.0, math.inf))
    bad = int((~((err < abs_tol) | (rel < rel_tol))).sum())
    return bad, float(err.max()), float(rel[torch.isfinite(rel)].max()) if torch.isfinite(rel).any() else 0.0


def compare(out, lse, ref_out, ref_lse, peaked: bool) -> tuple[bool, str]:
    o = out.float()
    r = ref_out.to(out.dtype).float()                   # the reference rounded to bf16
    msgs, ok = [], True
    if not _same_specials(o, r):
        ok = False
        msgs.append(f"out inf/nan mismatch (kernel nan={int(torch.isnan(o).sum())}, inf={int(torch.isinf(o).sum())})")
    if not _same_specials(lse, ref_lse):
        ok = False
        msgs.append(f"lse inf/nan mismatch (kernel nan={int(torch.isnan(lse).sum())}, "
                    f"+inf={int(torch.isposinf(lse).sum())} vs ref +inf={int(torch.isposinf(ref_lse).sum())})")
    fin = torch.isfinite(o) & torch.isfinite(r)
    x, y = o[fin].double(), r[fin].double()
    if peaked:
        yf = ref_out.float()[fin].double()
        norm_err = float((x - yf).norm() / yf.norm().clamp_min(1e-30)) if yf.numel() else 0.0
        ok &= norm_err <= PEAKED_NORM
        msgs.append(f"out rel_norm={norm_err:.2e}")
    else:
        bad, max_abs, max_rel = _elem_errors(o, r, OUT_ABS, OUT_REL)
        denom = float((x * x).sum() + (y * y).sum())
        cos = 1.0 - 2.0 * float((x * y).sum()) / denom if denom > 0 else 0.0
        ok &= bad == 0 and cos <= OUT_COS
        msgs.append(f"out max_abs={max_abs:.2e} max_rel={max_rel:.2e} bad={bad} cos_diff={cos:.2e}")
    bad, max_abs, max_rel = _elem_errors(lse, ref_lse, LSE_ABS, LSE_REL)
    ok &= bad == 0
    msgs.append(f"lse max_abs={max_abs:.2e} max_rel={max_rel:.2e} bad={bad}")
    return ok, "; ".join(msgs)


def problems(quick: bool):
    P = mla.MlaDecodeProblem
    plain = mla.grid("check")
    extra = [
        P(b=3, s_q=2, h_q=16, seqlens=(0, 1, 2)),          # empty sequence, rows that see nothing
        P(b=2, s_q=1, h_q=128, seqlens=(0, 20000)),        # long sequence next to an empty one
        P(b=2, s_q=3, h_q=7, seqlens=(5, 130)),            # odd h_q, s_q=3: 21 rows
        P(b=2, s_q=1, h_q=1, seqlens=(1, 64)),
        P(b=128, s_q=1, h_q=64, seqlen=4096),              # the timed problem
    ]
    peaked = [P(b=4, s_q=2, h_q=64, seqlens=(63, 64, 65, 1000)),
              P(b=8, s_q=1, h_q=128, seqlen=500, varlen=True),
              P(b=4, s_q=1, h_q=16, seqlens=(1, 63, 129, 700))]
    if quick:
        plain = plain[::5]
    return [(p, 0, False) for p in plain + extra] + [(p, 1, True) for p in peaked]


def main() -> int:
    quick = "--quick" in sys.argv
    assert torch.cuda.is_available(), "this check needs a GPU"
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    n_fail = 0
    for prob, seed, peaked in problems(quick):
        label = prob.key() + (" peaked" if peaked else "")
        try:
            inputs = mla.make_inputs(prob, seed, device="cuda", peaked=peaked)
            out, lse = run(inputs)
            ref_out, ref_lse = mla.reference(inputs)
            ok, msg = compare(out, lse, ref_out, ref_lse, peaked)
        except Exception as e:  # report and go on: one broken shape must not hide the others
            ok, msg = False, f"{type(e).__name__}: {e}"
        n_fail += not ok
        print(f"{'PASS' if ok else 'FAIL'} {label}: {msg}", flush=True)

    prob = mla.MlaDecodeProblem(b=128, s_q=1, h_q=64, seqlen=4096)
    try:
        import triton.testing
        inputs = mla.make_inputs(prob, 0, device="cuda")
        out, lse = mla.make_outputs(inputs)
        fn = compiled_for(prob.s_q, prob.h_q)
        args = kmod.launch_arguments(inputs.q, inputs.kv_cache, inputs.block_table, inputs.cache_seqlens,
                                     out, lse, inputs.softmax_scale)
        ms = triton.testing.do_bench_cudagraph(lambda: fn(*args))
        flops, nbytes = mla.flops_bytes(prob)
        us = ms * 1e3
        print(f"TIME {prob.key()}: {us:.1f} us  {flops / us / 1e6:.1f} TFLOP/s  {nbytes / us / 1e3:.0f} GB/s",
              flush=True)
    except Exception as e:
        print(f"TIME failed: {type(e).__name__}: {e}", flush=True)
    print(f"{'ALL PASS' if n_fail == 0 else f'{n_fail} FAIL'}", flush=True)
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
