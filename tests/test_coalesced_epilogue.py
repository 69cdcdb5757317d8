"""flash_mla_decode_v9's epilogue, read from its compiled SASS on the CPU: the output leaves
through shared memory in 16-byte row chunks - 16 `STG.E.128` per thread for the bf16 output and
32 for the f32 partials, where v8 stores each accumulator pair with its own 4- or 8-byte STG."""
import re

import pytest

from compiled_sass import split_sass
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import kernel_plan, registry, sass

HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


def _stores(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for op in re.findall(r"\b(STG\.E(?:\.\w+)*|LDS(?:\.\w+)*)\b", text):
        counts[op] = counts.get(op, 0) + 1
    return counts


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
def test_v9_stores_16_byte_row_chunks_where_v8_stored_fragments(monkeypatch):
    monkeypatch.setenv(kernel_plan.QUARANTINE_ENV, "1")           # neither has run on a GPU yet
    problem = MlaDecodeProblem(b=2, s_q=1, h_q=64, seqlens=(65, 300))
    inputs = problem.make_inputs(seed=0, device="cpu")
    counts = {}
    for name in ("flash_mla_decode_v8", "flash_mla_decode_v9"):
        plan = registry.get_plan(name)
        text = split_sass(plan.plan(inputs, plan.default_tiling(problem)))
        assert "STL" not in text and "LDL" not in text, f"{name} spills"
        counts[name] = _stores(text)
    v8, v9 = counts["flash_mla_decode_v8"], counts["flash_mla_decode_v9"]
    assert v8.get("STG.E.128", 0) == 0 and v8["STG.E.64"] == 64          # f32 pairs, one STG each
    assert v9["STG.E.128"] == 16 + 32 and v9.get("STG.E.64", 0) == 0      # bf16 + f32 paths, 16 B each
    assert v9["LDS.128"] == 16 + 32                                        # the same chunks out of smem
    assert v9["STG.E"] < v8["STG.E"]                                        # only the lse stores stay 4 B
