"""Standalone GPU check of ct_flash_mla_decode_v1 (cuTile MLA decode) against the layer's reference.

Run (on a GPU machine with cuda-tile + tileiras):
    python scripts/dev_check_ct_flash_mla_decode.py [--seed 0] [--no-bench]

For every problem of mla.grid("check") (and, with FlashMLA's looser "peaked" criterion, the same
problems drawn from N(0, 1)): NaN-filled outputs, one launch of the default tiling, comparison
with mla.reference using FlashMLA's tolerances; one PASS/FAIL line per problem. The other tilings
in ALT_TILINGS get the odd-length subset. Then times b=128, s_q=1, h_q=64, seqlen=4096 (and a
few neighbours) with triton.testing.do_bench_cudagraph, per tiling. Exit 1 on any FAIL.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import torch  # noqa: E402

from mla_var3.layers import mla  # noqa: E402
from mla_var3.kernel.cutile_python.mla.ct_flash_mla_decode.ct_flash_mla_decode_v1 import \
    kernel as K  # noqa: E402

OUT_ABS, OUT_REL, OUT_COS = 8e-4, 2.01 / 128, 5e-6
LSE_ABS, LSE_REL = 1e-6, 8.01 / 65536
PEAKED_NORM = 5e-3
DEFAULT = dict(block_n=K.BLOCK_N_DEFAULT, kv_latency=K.KV_LATENCY_DEFAULT)
ALT_TILINGS = [dict(block_n=64, kv_latency=4), dict(block_n=32, kv_latency=10)]


def _tag(tiling: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in tiling.items())


def _nonfinite_match(x: torch.Tensor, r: torch.Tensor) -> bool:
    return bool(torch.equal(torch.isnan(x), torch.isnan(r))
                and torch.equal(torch.isposinf(x), torch.isposinf(r))
                and torch.equal(torch.isneginf(x), torch.isneginf(r)))


def _elementwise(x: torch.Tensor, r: torch.Tensor, abs_tol: float, rel_tol: float):
    """(all finite elements pass abs OR rel, max abs err, max rel err) on positions finite in both."""
    fin = torch.isfinite(x) & torch.isfinite(r)
    x, r = x[fin].double(), r[fin].double()
    if x.numel() == 0:
        return True, 0.0, 0.0
    err = (x - r).abs()
    rel = err / r.abs().clamp_min(1e-30)
    ok = bool(((err < abs_tol) | (rel < rel_tol)).all())
    return ok, float(err.max()), float(torch.where(err < abs_tol, 0.0, rel).max())


def _cos_diff(x: torch.Tensor, r: torch.Tensor) -> float:
    fin = torch.isfinite(x) & torch.isfinite(r)
    x, r = x[fin].double(), r[fin].double()
    den = (x * x).sum() + (r * r).sum()
    if float(den) == 0.0:
        return 0.0
    return float(1.0 - 2.0 * (x * r).sum() / den)


def run_kernel(inputs: mla.MlaDecodeInputs, tiling: dict):
    out, lse = mla.make_outputs(inputs)              # NaN-poisoned: unwritten elements show
    K.launch(torch.cuda.current_stream(), inputs.q, inputs.kv_cache, inputs.block_table,
             inputs.cache_seqlens, out, lse, inputs.softmax_scale, **tiling)
    torch.cuda.synchronize()
    return out, lse


def check(problem: mla.MlaDecodeProblem, seed: int, peaked: bool, tiling: dict = DEFAULT
          ) -> tuple[bool, str]:
    inputs = mla.make_inputs(problem, seed, device="cuda", peaked=peaked)
    out, lse = run_kernel(inputs, tiling)
    ref_out, ref_lse = mla.reference(inputs)
    ref_out_bf = ref_out.to(torch.bfloat16).float()
    o = out.float()
    msgs, ok = [], True
    if not _nonfinite_match(o, ref_out_bf):
        ok = False
        msgs.append(f"out nonfinite mismatch (kernel NaN {int(torch.isnan(o).sum())}, "
                    f"ref NaN {int(torch.isnan(ref_out_bf).sum())})")
    if peaked:
        fin = torch.isfinite(o) & torch.isfinite(ref_out)
        d = (o[fin].double() - ref_out[fin].double()).norm()
        n = ref_out[fin].double().norm().clamp_min(1e-30)
        rel_norm = float(d / n)
        ok &= rel_norm <= PEAKED_NORM
        msgs.append(f"out rel_norm {rel_norm:.2e}")
    else:
        e_ok, e_abs, e_rel = _elementwise(o, ref_out_bf, OUT_ABS, OUT_REL)
        cos = _cos_diff(o, ref_out_bf)
        ok &= e_ok and cos <= OUT_COS
        msgs.append(f"out max_abs {e_abs:.2e} max_rel(beyond abs) {e_rel:.2e} cos_diff {cos:.2e}")
    if not _nonfinite_match(lse, ref_lse):
        ok = False
        msgs.append(f"lse nonfinite mismatch (kernel inf {int(torch.isinf(lse).sum())} "
                    f"NaN {int(torch.isnan(lse).sum())}, ref inf {int(torch.isinf(ref_lse).sum())})")
    l_ok, l_abs, l_rel = _elementwise(lse, ref_lse, LSE_ABS, LSE_REL)
    ok &= l_ok
    msgs.append(f"lse max_abs {l_abs:.2e} max_rel {l_rel:.2e}")
    return ok, "; ".join(msgs)


def bench(problem: mla.MlaDecodeProblem, tilings: list[dict], seed: int = 0) -> list[str]:
    import triton.testing
    inputs = mla.make_inputs(problem, seed, device="cuda")
    out, lse = mla.make_outputs(inputs)
    flops, nbytes = mla.flops_bytes(problem, list(inputs.seqlens))
    lines = []
    for tiling in tilings:
        def fn():
            K.launch(torch.cuda.current_stream(), inputs.q, inputs.kv_cache, inputs.block_table,
                     inputs.cache_seqlens, out, lse, inputs.softmax_scale, **tiling)
        try:
            fn()
            torch.cuda.synchronize()
            us = triton.testing.do_bench_cudagraph(fn, rep=200) * 1e3
            lines.append(f"BENCH {problem.key()} [{_tag(tiling)}]: {us:.1f} us  "
                         f"{flops / us / 1e6:.1f} TFLOP/s  {nbytes / us / 1e6:.3f} TB/s")
        except Exception as e:
            lines.append(f"BENCH {problem.key()} [{_tag(tiling)}]: error {type(e).__name__}: {e}")
        print(lines[-1], flush=True)
    del inputs, out, lse
    torch.cuda.empty_cache()
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--no-peaked", action="store_true")
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    fails = 0
    runs = [(DEFAULT, peaked, p) for peaked in ([False] if args.no_peaked else [False, True])
            for p in mla.grid("check")]
    # The other tilings: the odd lengths (63, 64, 65, 1), 200, and 2 vs 1000, at h_q = 64.
    subset = [p for p in mla.grid("check") if p.h_q == 64 and (p.b <= 4 or p.seqlens == (2, 1000))]
    runs += [(t, False, p) for t in ALT_TILINGS for p in subset]
    for tiling, peaked, problem in runs:
        tag = f"[{_tag(tiling)}] " + ("peaked " if peaked else "") + problem.key()
        t0 = time.time()
        try:
            ok, msg = check(problem, args.seed, peaked, tiling)
        except Exception as e:                           # one crash is one FAIL line
            ok, msg = False, f"{type(e).__name__}: {e}"
            traceback.print_exc()
            if "CUDA" in str(e) or "illegal" in str(e).lower():
                print(f"FAIL {tag}: {msg} (context likely dead: stopping)", flush=True)
                return 1
        fails += not ok
        print(f"{'PASS' if ok else 'FAIL'} {tag}: {msg}  ({time.time() - t0:.1f}s)", flush=True)
    print(f"check: {fails} FAIL of {len(runs)}", flush=True)
    if not args.no_bench:
        every = [DEFAULT] + ALT_TILINGS
        for p, tilings in ((mla.MlaDecodeProblem(b=128, s_q=1, h_q=64, seqlen=4096), every),
                           (mla.MlaDecodeProblem(b=128, s_q=1, h_q=128, seqlen=4096), every),
                           (mla.MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=4096), [DEFAULT]),
                           (mla.MlaDecodeProblem(b=128, s_q=2, h_q=64, seqlen=4096), [DEFAULT]),
                           (mla.MlaDecodeProblem(b=128, s_q=1, h_q=64, seqlen=8192, varlen=True),
                            [DEFAULT]),
                           (mla.MlaDecodeProblem(b=128, s_q=2, h_q=128, seqlen=8192), [DEFAULT])):
            try:
                bench(p, tilings)
            except Exception as e:
                print(f"BENCH {p.key()}: error {type(e).__name__}: {e}", flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
