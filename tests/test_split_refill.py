"""flash_mla_decode_v26 issues each tile's boxes from two producer warps per stage. CPU: the two
halves cover the 9 chunks once, in QK^T's order, the first half starting at chunk 0; the compiled
split kernel keeps v23's wgmmas, TMA loads and mbarrier operations (the same boxes, armed once
per chunk, only issued from more warps)."""
import collections

import pytest

from compiled_sass import opcodes, stage_sass
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import kernel_plan, registry, sass

HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


def test_the_halves_cover_every_chunk_once_in_order():
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v26 import kernel, split_refill
    chunks = [c for lo, hi in split_refill.HALVES for c in range(lo, hi)]
    assert chunks == list(range(kernel.N_CHUNKS)) and split_refill.N_CHUNKS == kernel.N_CHUNKS
    assert all(hi > lo for lo, hi in split_refill.HALVES)
    assert kernel.PRODUCER_WARP == 8 and kernel.STAGES * len(split_refill.HALVES) == 4   # warps 8-11


def _split_opcodes(version, page_size, monkeypatch) -> collections.Counter:
    monkeypatch.setenv(kernel_plan.QUARANTINE_ENV, "1")
    plan = registry.get_plan(version)
    problem = MlaDecodeProblem(b=2, s_q=1, h_q=64, seqlen=1024, page_size=page_size)
    return collections.Counter(opcodes(stage_sass(plan.plan(problem.make_inputs(seed=0, device="cpu"),
                                                            plan.default_tiling(problem)), "split")))


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
@pytest.mark.parametrize("page_size", [64, 16])
def test_the_same_boxes_and_barriers_as_v23(page_size, monkeypatch):
    v23 = _split_opcodes("flash_mla_decode_v23", page_size, monkeypatch)
    v26 = _split_opcodes("flash_mla_decode_v26", page_size, monkeypatch)
    for prefix in ("HGMMA", "UTMALDG", "SYNCS.EXCH", "SYNCS.ARRIVE", "SYNCS.PHASECHK", "ELECT"):
        assert sum(n for op, n in v26.items() if op.startswith(prefix)) == \
            sum(n for op, n in v23.items() if op.startswith(prefix)) > 0, prefix
