"""Test helpers for GPU tests: a registered plan that can run here (or a skip naming why not), and
one launch of a split-KV version's order stage on given lengths."""
import pytest


def runnable_plan(name: str):
    """The plan of version `name`, or pytest.skip with the reason it cannot run on this device."""
    from mla_var3.runtime import devices, registry
    plan = registry.get_plan(name)
    if plan.unavailable():
        pytest.skip(f"{name}: {plan.unavailable()}")
    if not devices.arch_supported(plan.arch, devices.current_device().arch):
        pytest.skip(f"{name} needs {plan.arch}")
    return plan


def order_stage_output(plan, lens: list[int], chunk: int, slots: int) -> list[int]:
    """Launch only the "order" stage of `plan` (order=longest_first, `chunk` tiles per split) on
    a b=len(lens) problem with those lengths, into a [b, slots] buffer pre-filled with -7;
    returns the buffer flattened."""
    import torch

    from mla_var3.layers.mla.decode import MlaDecodeProblem
    problem = MlaDecodeProblem(b=len(lens), s_q=1, h_q=16, seqlens=tuple(lens))
    x = problem.make_inputs(seed=0, device="cuda")
    kern = plan.build(x, plan.Tiling(chunk=chunk, order="longest_first"))
    ws = {"order": torch.full((len(lens), slots), -7, dtype=torch.int32, device="cuda")}
    stage = next(s for s in kern.stages if s.name == "order")
    stage.launch(x, None, ws)
    torch.cuda.synchronize()
    return ws["order"].flatten().tolist()
