"""Correctness of one plan against the float32 reference, for any problem kind.

Outputs are NaN-poisoned before every run (an element the kernel never writes fails), several
seeds draw fresh inputs, and each extra input distribution of the problem kind (MLA: "peaked",
where bf16 rounding of P shows) runs too. Tolerances belong to the problem (`problem.compare`).
Problems the plan does not support are skipped with the plan's reason, never silently.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from mla_var3.runtime.profiling import annotate


@dataclass
class CheckOutcome:
    problem_key: str
    seed: int | None
    dist: str
    status: str                  # "pass" | "fail" | "skip"
    reason: str = ""
    errors: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def to_dict(self) -> dict:
        return asdict(self)


def check_one(plan, problem, *, seed: int = 0, dist: str = "default", device: str = "cuda",
              tiling=None) -> CheckOutcome:
    """One problem, one seed, one distribution: build, run into poisoned outputs, compare."""
    from mla_var3.runtime.memory import require_fits
    require_fits(problem, device)
    inputs = problem.make_inputs(seed=seed, device=device, dist=dist)
    kern = plan.build(inputs, tiling)
    with annotate(plan.name, kern.tiling.key(), "compile"):
        kern.compile()
    with annotate(plan.name, kern.tiling.key(), "check"):
        outputs = kern.run(inputs)               # fresh NaN-filled outputs, fresh workspace
    cmp = problem.compare(outputs, problem.reference(inputs), dist, inputs=inputs)
    return CheckOutcome(problem.key(), seed, dist, "pass" if cmp.passed else "fail", cmp.reason, cmp.errors)


def check_plan(plan, problems, *, seeds=(0, 1), extra_seeds=(0,), device: str = "cuda", tiling=None,
               on_result=None) -> list[CheckOutcome]:
    """Every problem x seed of the default distribution, plus `extra_seeds` of every other
    distribution the problem kind names. `on_result(problem, outcome)` sees each as it lands.
    `tiling`: one Tiling for every problem, None (each problem's default), or a callable
    problem -> Tiling (a tiling per problem, e.g. the CLI's `--tiling +key=value`)."""
    results = []

    def emit(problem, outcome):
        results.append(outcome)
        if on_result is not None:
            on_result(problem, outcome)

    for problem in problems:
        reasons = plan.supports(problem)
        if reasons:
            emit(problem, CheckOutcome(problem.key(), None, "-", "skip", "; ".join(reasons)))
            continue
        own = tiling(problem) if callable(tiling) else tiling
        for dist in problem.dists:
            for seed in (seeds if dist == problem.dists[0] else extra_seeds):
                emit(problem, check_one(plan, problem, seed=seed, dist=dist, device=device, tiling=own))
    return results
