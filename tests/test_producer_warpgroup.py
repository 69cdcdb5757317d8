"""flash_mla_decode_v8's producer warpgroup, read from its compiled SASS on the CPU: the register
hand-over survives ptxas (setmaxnreg 40 / 232, kept only with .minnctapersm) and every TMA load
sits in the producer's region, so no math warp issues one (what v8 changes from v5)."""
import re
from pathlib import Path

import pytest

from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import kernel_plan, registry, sass
from compiled_sass import split_sass

HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


def _offsets(text: str, opcode: str) -> list[int]:
    return [int(m.group(1), 16) for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?" + re.escape(opcode), text)]


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
@pytest.mark.parametrize("page_size", [64, 16])
def test_v8_math_warps_issue_no_tma_and_keep_their_registers(page_size, monkeypatch):
    monkeypatch.setenv(kernel_plan.QUARANTINE_ENV, "1")          # v8 has not run on a GPU yet
    plan = registry.get_plan("flash_mla_decode_v8")
    problem = MlaDecodeProblem(b=2, s_q=2, h_q=64, seqlens=(65, 300), page_size=page_size)
    inputs = problem.make_inputs(seed=0, device="cpu")
    text = split_sass(plan.plan(inputs, plan.default_tiling(problem)))
    dealloc = re.findall(r"USETMAXREG\.DEALLOC\.CTAPOOL (0x[0-9a-f]+)", text)
    alloc = re.findall(r"USETMAXREG\.TRY_ALLOC\.CTAPOOL \w+, (0x[0-9a-f]+)", text)
    assert [int(x, 16) for x in dealloc] == [40] and [int(x, 16) for x in alloc] == [232]
    assert "STL" not in text and "LDL" not in text                  # no spills at the 232-register budget
    start, end = _offsets(text, "USETMAXREG.DEALLOC")[0], _offsets(text, "USETMAXREG.TRY_ALLOC")[0]
    loads = _offsets(text, "UTMALDG")
    # ptxas lays the producer branch out first: every TMA load between its setmaxnreg.dec and the
    # math warpgroups' setmaxnreg.inc (if a new ptxas reorders the branches, read the SASS again)
    assert loads and all(start < off < end for off in loads), (hex(start), hex(end), [hex(o) for o in loads])


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
def test_plain_v8_is_unchanged_and_timeline_build_records_the_producer(monkeypatch):
    """The instrumentation compiles away: the plain split kernel's SASS is the code it was before
    the timeline marks were added (fixture); the timeline build reads the SM clock and the global
    timer, and its schema has the producer's row with its refill spans."""
    import json

    from mla_var3.runtime import cute_kernel
    monkeypatch.setenv(kernel_plan.QUARANTINE_ENV, "1")
    monkeypatch.setenv(cute_kernel.LINE_INFO_ENV, "0")
    expect = json.loads((Path(__file__).parent / "fixtures" / "sass_expect_flash_mla_decode_v8_split.json").read_text())
    plan = registry.get_plan("flash_mla_decode_v8")
    problem = MlaDecodeProblem.default_problem()
    assert (problem.s_q, problem.h_q, problem.page_size) == tuple(expect["problem"].values())
    tiling = plan.default_tiling(problem)
    assert tiling.key() == expect["tiling"]
    inputs = problem.small_variant().make_inputs(seed=0, device="cpu")
    plain = split_sass(plan.plan(inputs, tiling))
    assert sass.fingerprint(plain) == {"instructions": expect["instructions"], "sha256": expect["sha256"]}
    assert sass.timer_reads(plain) == {}
    inst, grid = plan.timeline_kernel(inputs, tiling, max_ctas=8)
    assert grid == (1, 1, inputs.q.shape[0])
    timers = sass.timer_reads(split_sass(inst))
    assert timers.get("SR_CLOCKLO", 0) >= 30 and timers.get("SR_GLOBALTIMERLO", 0) >= 1
    schema = plan.timeline_schema()
    assert schema.rows[2] == "warp 8 (producer)"
    assert {s.name for s in schema.spans if s.rows == (2,)} >= {"wait stage 0 free", "TMA issue (stage 0)",
                                                                "wait stage 1 free", "TMA issue (stage 1)"}
