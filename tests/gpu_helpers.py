"""Test helpers for GPU tests: a registered plan that can run here (or a skip naming why not), the
check against the reference with every failing case named, one launch of a split-KV version's order
stage on given lengths, and a check with keys planted so the running max jumps mid-sequence."""
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


def assert_check_passes(plan, problem, **kwargs):
    """`plan` passes the check against the reference on `problem` on the GPU (`kwargs`: check_plan's
    seeds, extra_seeds, tiling); the assertion lists every failing seed and draw. -> the outcomes."""
    from mla_var3.runtime import check
    results = check.check_plan(plan, [problem], device="cuda", **kwargs)
    failed = [f"seed={r.seed} {r.dist}: {r.reason}" for r in results if not r.passed]
    assert results and not failed, "\n".join(failed)
    return results


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


# (sequence, key, head): with chunk=4, keys 200, 450 and 999 of sequence 0 fall in B tiles of their
# splits (tiles 3, 7, 15), keys 130 and 390 of sequence 1 in A tiles (2, 6)
PLANTED_KEYS = ((0, 200, 5), (0, 450, 40), (0, 999, 63), (1, 130, 0), (1, 390, 17))


def planted_keys_problem(page_size: int = 64):
    """The planted-key check's problem: b=2 s_q=2 h_q=64, lengths (1000, 700) (partial last tiles)."""
    from mla_var3.layers.mla.decode import MlaDecodeProblem
    return MlaDecodeProblem(b=2, s_q=2, h_q=64, seqlens=(1000, 700), page_size=page_size)


def check_with_planted_keys(plan, tiling, score: float = 30.0, page_size: int = 64):
    """`planted_keys_problem(page_size)`: each planted key scores `score` against one head's
    query, past the lazy max's threshold, so the reference max jumps mid-split on A and B tiles of
    the seesaw; `plan` built at `tiling` must still match the reference."""
    problem = planted_keys_problem(page_size)
    inputs = problem.make_inputs(seed=0, device="cuda")
    page = inputs.kv_cache.shape[1]
    for seq, key, head in PLANTED_KEYS:
        q = inputs.q[seq, 0, head].float()
        k = q * (score / (inputs.softmax_scale * float(q @ q)))
        blk = int(inputs.block_table[seq, key // page])
        inputs.kv_cache[blk, key % page, 0] = k.to(inputs.kv_cache.dtype)
    kern = plan.build(inputs, tiling)
    kern.compile()
    cmp = problem.compare(kern.run(inputs), problem.reference(inputs))
    assert cmp.passed, cmp.reason
