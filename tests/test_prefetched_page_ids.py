"""flash_mla_decode_v10's producer, read from its compiled SASS on the CPU: the page ids of a
refill are loaded before the producer waits for the stage, so between that wait and the refill's
first TMA box there is no global load (v9 waits, then loads the block table, then issues); v11,
which splits the refills over two producer warps, keeps that."""
import pytest

from compiled_sass import opcodes, split_sass
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import kernel_plan, registry, sass

HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


def _producer_ops(text: str) -> list[str]:
    """Opcodes of the producer warpgroup's region (ptxas lays it out first: from its
    setmaxnreg.dec to the math warpgroups' setmaxnreg.inc), in address order."""
    ops = opcodes(text)
    start = next(i for i, op in enumerate(ops) if op.startswith("USETMAXREG.DEALLOC"))
    end = next(i for i, op in enumerate(ops) if op.startswith("USETMAXREG.TRY_ALLOC"))
    return ops[start:end]


def _loads_between_wait_and_box(ops: list[str]) -> list[int]:
    """For each stage wait of the producer (an mbarrier try-wait), the global loads issued before
    the next TMA box."""
    out = []
    for i, op in enumerate(ops):
        if op.startswith("SYNCS.PHASECHK") and "TRYWAIT" in op:
            nxt = next((j for j in range(i + 1, len(ops)) if ops[j].startswith("UTMALDG")), len(ops))
            out.append(sum(o.startswith("LDG") for o in ops[i + 1:nxt]))
    return out


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
@pytest.mark.parametrize("page_size", [64, 16])
def test_v10_reads_the_block_table_before_the_stage_wait(page_size, monkeypatch):
    monkeypatch.setenv(kernel_plan.QUARANTINE_ENV, "1")             # a quarantined version would refuse to plan
    # a long sequence, so the split is many tiles and the refill loop exists (chunk = 1 removes it)
    problem = MlaDecodeProblem(b=128, s_q=1, h_q=64, seqlen=4096, page_size=page_size)
    inputs = problem.small_variant().make_inputs(seed=0, device="cpu")
    found = {}
    for name in ("flash_mla_decode_v9", "flash_mla_decode_v10", "flash_mla_decode_v11"):
        plan = registry.get_plan(name)
        tiling = plan.default_tiling(problem)
        assert tiling.chunk > 2
        ops = _producer_ops(split_sass(plan.plan(inputs, tiling)))
        found[name] = (_loads_between_wait_and_box(ops), sum(op.startswith("LDG") for op in ops))
    (v9_gaps, v9_loads), (v10_gaps, v10_loads) = found["flash_mla_decode_v9"], found["flash_mla_decode_v10"]
    pages = 64 // page_size
    assert v9_gaps and max(v9_gaps) == pages            # v9: the wait, then one load per page, then boxes
    assert v10_gaps and max(v10_gaps) == 0              # v10: the wait, then boxes
    assert v10_loads == v9_loads + pages                # the ids read once more, before the loop
    v11_gaps, _ = found["flash_mla_decode_v11"]         # v11 (a producer warp per stage) keeps it
    assert v11_gaps and max(v11_gaps) == 0
