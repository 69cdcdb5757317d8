"""flash_mla_decode_v12's tail zeroing, read from its compiled SASS on the CPU: v11 zeroes a
partial last tile before its QK^T and meets the owning warpgroup at a named barrier of its own;
v12 zeroes it after QK^T and lets the barrier that publishes P publish the zeros, so its split
kernel has one named-barrier sync fewer and no other change in barriers or TMA loads; v13 moves
the zeroing later (after the P stores) without changing any of those counts."""
import pytest

from compiled_sass import opcodes, split_sass
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import kernel_plan, registry, sass

HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


def _opcode_counts(text: str) -> dict[str, int]:
    ops = opcodes(text)
    return {"bar_sync": sum(op.startswith("BAR.SYNC") for op in ops),
            "bar_arrive": sum(op.startswith("BAR.ARV") for op in ops),
            "tma": sum(op.startswith("UTMALDG") for op in ops),
            "hgmma": sum(op.startswith("HGMMA") for op in ops)}


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
def test_v12_drops_the_tail_tiles_own_barrier(monkeypatch):
    monkeypatch.setenv(kernel_plan.QUARANTINE_ENV, "1")             # a quarantined version would refuse to plan
    problem = MlaDecodeProblem(b=1, s_q=1, h_q=16, seqlen=65)       # a partial last tile
    inputs = problem.make_inputs(seed=0, device="cpu")
    counts = {}
    for name in ("flash_mla_decode_v11", "flash_mla_decode_v12", "flash_mla_decode_v13"):
        plan = registry.get_plan(name)
        counts[name] = _opcode_counts(split_sass(plan.plan(inputs, plan.default_tiling(problem))))
    v11, v12 = counts["flash_mla_decode_v11"], counts["flash_mla_decode_v12"]
    assert v12["bar_sync"] == v11["bar_sync"] - 1, counts
    assert {k: v for k, v in v12.items() if k != "bar_sync"} == {k: v for k, v in v11.items() if k != "bar_sync"}, counts
    assert counts["flash_mla_decode_v13"] == v12, counts


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
def test_v15_balances_the_tail_barrier(monkeypatch):
    """v15 is v11's tail path plus one warpgroup-local barrier for the warpgroup that does not own
    the partial tile: one BAR.SYNC more than v11 in the split kernel, the same loads and wgmmas."""
    monkeypatch.setenv(kernel_plan.QUARANTINE_ENV, "1")
    problem = MlaDecodeProblem(b=1, s_q=1, h_q=16, seqlen=65)
    inputs = problem.make_inputs(seed=0, device="cpu")
    counts = {}
    for name in ("flash_mla_decode_v11", "flash_mla_decode_v15"):
        plan = registry.get_plan(name)
        counts[name] = _opcode_counts(split_sass(plan.plan(inputs, plan.default_tiling(problem))))
    v11, v15 = counts["flash_mla_decode_v11"], counts["flash_mla_decode_v15"]
    assert v15["bar_sync"] == v11["bar_sync"] + 1, counts
    assert {k: v for k, v in v15.items() if k != "bar_sync"} == {k: v for k, v in v11.items() if k != "bar_sync"}, counts
