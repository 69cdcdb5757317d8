"""flash_mla_decode_v38's epilogue moves only the rows that hold queries (kernel.py). CPU: at
s_q * h_q = 16 the split kernel's copy loop has a quarter of v37's 16-byte shared-memory loads,
and with 64 query rows per block it keeps them all. GPU: v38's outputs equal v37's bit for bit
where a row block is partly empty (h_q 8 and 16, 96 rows = a full and a half block) or full,
through both epilogue paths (one split: bf16 out; several: f32 partials)."""
import pytest

from compiled_sass import split_opcode_counts
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import sass

HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
def test_the_copy_loop_walks_only_the_query_rows():
    p16 = MlaDecodeProblem(b=8, s_q=1, h_q=16, seqlen=1024, varlen=True)
    v37, v38 = split_opcode_counts("flash_mla_decode_v37", p16), split_opcode_counts("flash_mla_decode_v38", p16)
    assert v38["LDS.128"] * 4 == v37["LDS.128"]          # 16 of 64 rows, in both epilogue paths
    p64 = MlaDecodeProblem(b=8, s_q=1, h_q=64, seqlen=1024, varlen=True)
    assert split_opcode_counts("flash_mla_decode_v38", p64)["LDS.128"] == split_opcode_counts("flash_mla_decode_v37", p64)["LDS.128"]


PROBLEMS = [
    MlaDecodeProblem(b=20, s_q=1, h_q=16, seqlen=3000, varlen=True),                 # 16 of 64 rows, splits
    MlaDecodeProblem(b=6, s_q=1, h_q=16, seqlen=200),                                  # one split: bf16 path
    MlaDecodeProblem(b=9, s_q=4, h_q=8, seqlen=2500, varlen=True, page_size=16),      # 32 rows
    MlaDecodeProblem(b=5, s_q=1, h_q=8, seqlen=1500),                                  # 8 rows: half a warp's
    MlaDecodeProblem(b=7, s_q=3, h_q=32, seqlen=2100, varlen=True, page_size=32),     # 96 rows: 64 + 32
    MlaDecodeProblem(b=4, s_q=1, h_q=64, seqlen=4000, varlen=True),                   # every row
]


@pytest.mark.gpu
@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.key() for p in PROBLEMS])
def test_v38_equals_v37_bit_for_bit(problem):
    import torch

    from gpu_helpers import runnable_plan
    v37, v38 = runnable_plan("flash_mla_decode_v37"), runnable_plan("flash_mla_decode_v38")
    inputs = problem.make_inputs(seed=6, device="cuda")
    tiling = v37.default_tiling(problem)
    want = v37.build(inputs, tiling).run(inputs)
    got = v38.build(inputs, v38.Tiling(**tiling.to_dict())).run(inputs)
    cmp = problem.compare(got, problem.reference(inputs))
    assert cmp.passed, cmp.reason
    for a, b in zip(want, got):
        assert torch.equal(a, b)
