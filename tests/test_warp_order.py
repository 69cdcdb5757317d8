"""flash_mla_decode_v34 computes v14's longest-first split order with one warp (lean_order.py);
v35 with the same warp's passes on lengths that 1024 threads prefetched into shared memory
(prefetched_order.py). CPU: v34's order kernel has no CTA barrier, v35's two; both use a warp match
and shuffles; the split kernel is v32's instruction for instruction. GPU: the order equals the host mirror
(common/split_order.py `host_order`) entry for entry, ties among equal partial sizes included
(v14's kernel placed those by shared-memory atomics, in any order), for ragged batches from 1 to
4096 sequences, empty sequences and partial sizes past the histogram's cap."""
import collections
import random

import pytest

from compiled_sass import opcodes, split_opcode_counts, stage_sass
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import sass

HAVE_SASS_TOOLS = bool(sass.find_disassemblers())
BARRIERS = {"flash_mla_decode_v34": 0, "flash_mla_decode_v35": 2}     # CTA barriers in the order kernel


def _ragged_kernel(version):
    from mla_var3.runtime import registry
    plan = registry.get_plan(version)
    problem = MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=1024, varlen=True)
    tiling = plan.default_tiling(problem)
    assert tiling.order == "longest_first"
    return problem, plan._kernel(problem.s_q, problem.h_q, problem.page_size, tiling)


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
@pytest.mark.parametrize("version", list(BARRIERS))
def test_the_order_kernel_has_its_barriers_and_the_warp_passes(version):
    _, kern = _ragged_kernel(version)
    ops = collections.Counter(opcodes(stage_sass(kern, "order")))
    assert sum(n for op, n in ops.items() if op.startswith("BAR")) == BARRIERS[version]
    assert ops["MATCH.ANY"] >= 1
    assert sum(n for op, n in ops.items() if op.startswith("SHFL")) >= 10


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
@pytest.mark.parametrize("version", list(BARRIERS))
def test_the_split_kernel_is_v32s(version):
    problem, kern = _ragged_kernel(version)
    assert collections.Counter(opcodes(stage_sass(kern, "split"))) == split_opcode_counts("flash_mla_decode_v32",
                                                                                          problem)


def _tiles(lens):
    return [-(-s // 64) for s in lens]


CASES = {
    "mixed": ([5000, 70, 129, 64 * 68, 0, 9000, 64 * 68 * 2 + 1, 640], 68),
    "varlen-1024": (MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=1024, varlen=True).resolve_seqlens(0), 20),
    "one": ([3000], 8),
    "empty": ([0, 0, 0], 4),
    "b4096": ([random.Random(5).randrange(0, 4000) for _ in range(4096)], 6),
    "ties-many": ([64 * 7] * 70 + [64 * 3] * 70, 5),
    "past-the-cap": ([64 * 1500, 64 * 1100, 64 * 2500, 64 * 1100], 2000),
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("version", list(BARRIERS))
def test_the_order_equals_the_host_mirror_entry_for_entry(version, case):
    from gpu_helpers import order_stage_output, runnable_plan
    from mla_var3.kernel.cute_python.common.split_order import host_order
    plan = runnable_plan(version)
    lens, chunk = CASES[case]
    slots = -(-max(max(_tiles(lens)), 1) // chunk) + 1                # one slot more than needed: -1 entries
    assert order_stage_output(plan, lens, chunk, slots) == host_order(lens, chunk, slots)
