"""flash_mla_decode_v36's `schedule` knob: the longest-first order made in every call ("per_call",
v32's contract) or once when the workspace is prepared for a set of lengths ("per_step", FlashMLA's
metadata contract), through RuntimeKernel's `prepare_stages`. CPU: the runtime runs prepare stages in
prepare, not in launch; v36's stages per schedule; the knob's one-line error; autotune never changes
the contract; compiling a per-step kernel compiles its order stage too. GPU: per-step calls match the
reference and per-call calls bit for bit."""
import dataclasses

import pytest

from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime.runtime_kernel import RuntimeKernel, Stage

RAGGED = MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=1024, varlen=True)


def _v36():
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v36 import flash_mla_decode_v36
    return flash_mla_decode_v36


class _Recorder(Stage):
    def __init__(self, name, log):
        self.name, self.log = name, log

    def launch(self, inputs, outputs, workspace):
        self.log.append((self.name, "prepared" if outputs is None else "called"))


def test_prepare_stages_run_in_prepare_once_and_never_in_launch():
    log = []
    plan = _v36().Plan()
    kern = RuntimeKernel(plan, None, [_Recorder("split", log)], workspace=lambda x: {"buf": 1},
                         prepare_stages=[_Recorder("order", log)])
    ws = kern.prepare(object())
    assert ws == {"buf": 1} and log == [("order", "prepared")]
    kern.launch(object(), ("out",), ws)
    kern.launch(object(), ("out",), ws)
    assert log == [("order", "prepared"), ("split", "called"), ("split", "called")]


def test_stage_names_stay_unique_across_prepare_and_call():
    from mla_var3.errors import PlanError
    with pytest.raises(PlanError, match="names must be unique"):
        RuntimeKernel(_v36().Plan(), None, [_Recorder("order", [])], prepare_stages=[_Recorder("order", [])])


@pytest.mark.parametrize("schedule, call, prepared", [("per_call", ["order", "split", "combine"], []),
                                                      ("per_step", ["split", "combine"], ["order"])])
def test_the_order_runs_per_call_or_when_prepared(schedule, call, prepared):
    plan = _v36().Plan()
    tiling = dataclasses.replace(plan.default_tiling(RAGGED), schedule=schedule)
    kern = plan._kernel(RAGGED.s_q, RAGGED.h_q, RAGGED.page_size, tiling)
    assert [s.name for s in kern.stages] == call
    assert [s.name for s in kern.prepare_stages] == prepared
    assert [s["stage"] for s in kern.describe().get("prepare_stages", [])] == prepared


def test_the_default_and_every_autotune_config_keep_the_per_call_contract():
    plan = _v36().Plan()
    assert plan.default_tiling(RAGGED).schedule == "per_call"
    assert {t.schedule for t in plan.autotune_configs(RAGGED)} == {"per_call"}


def test_a_bad_schedule_is_refused_in_one_line():
    assert _v36().FlashMlaSplitTiling(schedule="once").validate(RAGGED, None) == [
        "schedule must be one of per_call, per_step (the order made in every call, or once per set of lengths), "
        "got 'once'"]


def test_compiling_a_per_step_kernel_compiles_its_order_stage():
    from mla_var3.runtime import cute_kernel
    plan = _v36().Plan()
    tiling = dataclasses.replace(plan.default_tiling(RAGGED), schedule="per_step")
    kern = plan._kernel(RAGGED.s_q, RAGGED.h_q, RAGGED.page_size, tiling)
    kern.compile()
    assert kern.prepare_stages[0].key in cute_kernel._CACHE


@pytest.mark.gpu
def test_per_step_calls_match_the_reference_and_per_call_bit_for_bit():
    import torch

    from gpu_helpers import runnable_plan
    plan = runnable_plan("flash_mla_decode_v36")
    problem = MlaDecodeProblem(b=9, s_q=2, h_q=64, seqlen=3000, varlen=True)
    inputs = problem.make_inputs(seed=3, device="cuda")
    base = plan.default_tiling(problem)
    per_call = plan.build(inputs, base).run(inputs)
    kern = plan.build(inputs, dataclasses.replace(base, schedule="per_step"))
    ws = kern.prepare(inputs)
    for _ in range(2):                               # one prepare, several calls
        outputs = problem.make_outputs(inputs, fill=float("nan"))
        kern.launch(inputs, outputs, ws)
        cmp = problem.compare(outputs, problem.reference(inputs))
        assert cmp.passed, cmp.reason
        for a, b in zip(per_call, outputs):
            assert torch.equal(a, b)


def test_tiling_plus_form_sets_fields_over_each_problems_own_tiling():
    """`--tiling +schedule=per_step` keeps each problem's split length, order, ... and changes one
    knob; the plain form starts from the dataclass defaults; the '+' form needs a problem."""
    import argparse

    from mla_var3.cli.kernel import user_tiling
    from mla_var3.errors import UsageError
    from mla_var3.runtime import registry
    plan = registry.get_plan("flash_mla_decode_v36")
    args = argparse.Namespace(tiling="+schedule=per_step")
    names = [plan.name]
    got = user_tiling(args, plan, names, RAGGED)
    assert got == dataclasses.replace(plan.default_tiling(RAGGED), schedule="per_step")
    assert got.order == "longest_first" and got.chunk == plan.default_tiling(RAGGED).chunk
    plain = user_tiling(argparse.Namespace(tiling="schedule=per_step"), plan, names, RAGGED)
    assert plain == plan.Tiling(schedule="per_step") and plain.order == "grid"
    with pytest.raises(UsageError, match=r"the '\+' form .* needs a problem; give the whole tiling"):
        user_tiling(args, plan, names)
    assert user_tiling(args, registry.get_plan("flash_mla_decode_v32"), names, RAGGED) is None   # not the first


def test_check_takes_a_tiling_per_problem_for_the_plus_form(monkeypatch):
    """--check --tiling +schedule=per_step: check_plan asks the rule for each problem's tiling and
    the record names the rule (not one tiling)."""
    import argparse

    from mla_var3 import jobs
    from mla_var3.cli.kernel import check_tiling
    from mla_var3.runtime import check, registry
    plan = registry.get_plan("flash_mla_decode_v36")
    rule = check_tiling(argparse.Namespace(tiling="+schedule=per_step"), plan, [plan.name])
    assert rule(RAGGED) == dataclasses.replace(plan.default_tiling(RAGGED), schedule="per_step")
    seen = []

    def fake_check_one(plan, problem, *, seed, dist, device, tiling):
        seen.append((problem.key(), tiling.schedule, tiling.chunk))
        return check.CheckOutcome(problem.key(), seed, dist, "pass", "", {})
    problems = [RAGGED, MlaDecodeProblem(b=4, s_q=1, h_q=16, seqlen=300, varlen=True)]
    monkeypatch.setattr(check, "check_one", fake_check_one)
    rec, _ = jobs.check_record(plan, problems, seeds=(0,), extra_seeds=(), grid="custom", tiling=rule)
    assert {(k, s) for k, s, _ in seen} == {(p.key(), "per_step") for p in problems}
    assert {c for k, _, c in seen} == {plan.default_tiling(p).chunk for p in problems}
    assert rec["tiling"] == {} and rec["tiling_rule"] == "each problem's default tiling with schedule=per_step"
