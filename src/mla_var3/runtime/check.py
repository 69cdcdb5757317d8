"""Correctness against the float32 reference, with FlashMLA's tolerances (tests/kernelkit/compare.py).

Outputs are NaN-poisoned before every run (an element the kernel never writes fails), several
seeds draw fresh inputs, and a "peaked" set (N(0,1) inputs, sharp softmax) shows bf16 rounding of P.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from mla_var3.runtime.profiling import annotate

OUT_ABS, OUT_REL, OUT_COS = 8e-4, 2.01 / 128, 5e-6
LSE_ABS, LSE_REL = 1e-6, 8.01 / 65536
PEAKED_OUT_REL_NORM = 5e-3


@dataclass
class Comparison:
    passed: bool
    reason: str = ""
    errors: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _special_positions_match(x: torch.Tensor, y: torch.Tensor) -> str:
    for name, fn in (("NaN", torch.isnan), ("+inf", torch.isposinf), ("-inf", torch.isneginf)):
        a, b = fn(x), fn(y)
        if not torch.equal(a, b):
            return f"{name} positions differ ({int((a != b).sum())} elements)"
    return ""


def _elementwise(x: torch.Tensor, y: torch.Tensor, abs_tol: float, rel_tol: float) -> tuple[bool, float, float]:
    finite = torch.isfinite(y)
    x, y = x[finite].double(), y[finite].double()
    if x.numel() == 0:
        return True, 0.0, 0.0
    abs_err = (x - y).abs()
    rel_err = abs_err / y.abs().clamp_min(1e-30)
    bad = ~((abs_err < abs_tol) | (rel_err < rel_tol))
    ok = not bool(bad.any())
    worst_rel = float(torch.where(abs_err < abs_tol, 0, rel_err).max()) if ok else float(rel_err[bad].max())
    return ok, float(abs_err.max()), worst_rel


def cosine_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """1 - 2<x,y> / (|x|^2 + |y|^2), in float64 over finite elements."""
    x, y = x.double().nan_to_num(0, 0, 0), y.double().nan_to_num(0, 0, 0)
    denom = (x * x).sum() + (y * y).sum()
    if denom == 0:
        return 0.0
    return float(1 - 2 * (x * y).sum() / denom)


def compare(out: torch.Tensor, lse: torch.Tensor, ref_out: torch.Tensor, ref_lse: torch.Tensor,
            peaked: bool = False) -> Comparison:
    """Compare a kernel's (out, lse) with the float32 reference's."""
    if tuple(out.shape) != tuple(ref_out.shape) or tuple(lse.shape) != tuple(ref_lse.shape):
        return Comparison(False, f"shape: out {list(out.shape)} vs {list(ref_out.shape)}, "
                                 f"lse {list(lse.shape)} vs {list(ref_lse.shape)}")
    ref_out_q = ref_out.to(out.dtype).float()      # the reference rounded as the kernel's output is
    out_f = out.float()
    for name, a, b in (("out", out_f, ref_out_q), ("lse", lse.float(), ref_lse.float())):
        msg = _special_positions_match(a, b)
        if msg:
            return Comparison(False, f"{name}: {msg}")
    errors = {}
    lse_ok, errors["lse_max_abs"], errors["lse_worst_rel"] = _elementwise(lse.float(), ref_lse.float(), LSE_ABS, LSE_REL)
    if peaked:
        num = (out_f.double() - ref_out.double()).nan_to_num(0).norm()
        den = ref_out.double().nan_to_num(0).norm().clamp_min(1e-30)
        errors["out_rel_norm"] = float(num / den)
        out_ok = errors["out_rel_norm"] <= PEAKED_OUT_REL_NORM
        why = f"out relative norm error {errors['out_rel_norm']:.3g} > {PEAKED_OUT_REL_NORM}"
    else:
        elem_ok, errors["out_max_abs"], errors["out_worst_rel"] = _elementwise(out_f, ref_out_q, OUT_ABS, OUT_REL)
        errors["out_cos_diff"] = cosine_diff(out_f, ref_out_q)
        cos_ok = errors["out_cos_diff"] <= OUT_COS
        out_ok = elem_ok and cos_ok
        why = (f"out max abs {errors['out_max_abs']:.3g} / rel {errors['out_worst_rel']:.3g} "
               f"(tol {OUT_ABS} or {OUT_REL:.4g}), cos diff {errors['out_cos_diff']:.3g} (tol {OUT_COS})")
    reasons = []
    if not out_ok:
        reasons.append(why)
    if not lse_ok:
        reasons.append(f"lse max abs {errors['lse_max_abs']:.3g} / rel {errors['lse_worst_rel']:.3g} "
                       f"(tol {LSE_ABS} or {LSE_REL:.3g})")
    return Comparison(not reasons, "; ".join(reasons), errors)


def run_poisoned(kernel, inputs):
    """Run `kernel` into fresh NaN-filled outputs; a skipped element stays NaN and fails."""
    from mla_var3.layers.mla import make_outputs
    out, lse = make_outputs(inputs, fill=float("nan"))
    kernel.run(inputs, out=out, lse=lse)
    return out, lse


@dataclass
class CheckOutcome:
    problem_key: str
    seed: int
    peaked: bool
    passed: bool
    reason: str
    errors: dict


def check_plan(plan, problems, *, seeds=(0, 1), peaked_seeds=(0,), device: str = "cuda", tiling=None,
               on_result=None) -> list[CheckOutcome]:
    """Every problem x seed (+ the peaked set) against the float32 reference, NaN-poisoned outputs."""
    results = []
    for problem in problems:
        for peaked, seed_list in ((False, seeds), (True, peaked_seeds)):
            for seed in seed_list:
                inputs = plan.prepare_inputs(problem, seed=seed, device=device, peaked=peaked)
                kern = plan.build(inputs, tiling)
                with annotate(plan.name, kern.tiling.key(), "compile"):
                    kern.compile()
                with annotate(plan.name, kern.tiling.key(), "check"):
                    out, lse = run_poisoned(kern, inputs)
                ref_out, ref_lse = plan.reference_fn(inputs)
                cmp = compare(out, lse, ref_out, ref_lse, peaked=peaked)
                res = CheckOutcome(problem.key(), seed, peaked, cmp.passed, cmp.reason, cmp.errors)
                results.append(res)
                if on_result is not None:
                    on_result(problem, kern, res)
    return results
