"""flash_mla_decode_v17's combine: several warps per query row share the row's splits. CPU: the
plan's choice of warps, the tiling's refusal of other counts, and the compiled combine (shared
memory and barriers only when a row has more than one warp)."""
import pytest

from compiled_sass import opcodes, stage_sass
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import kernel_plan, registry, sass

V17 = "flash_mla_decode_v17"
HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


def _plan(monkeypatch):
    monkeypatch.setenv(kernel_plan.QUARANTINE_ENV, "1")
    return registry.get_plan(V17)


@pytest.mark.parametrize("splits, warps", [(1, 1), (2, 1), (4, 1), (5, 2), (8, 2), (9, 4), (16, 4), (17, 8), (128, 8)])
def test_warps_follow_the_most_splits_of_any_sequence(splits, warps):
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v17.flash_mla_decode_v17 import (
        default_combine_warps)
    assert default_combine_warps(splits) == warps


def test_small_batches_get_eight_warps_and_the_bench_grid_one(monkeypatch):
    plan = _plan(monkeypatch)
    small = plan.default_tiling(MlaDecodeProblem(b=1, s_q=1, h_q=16, seqlen=32768))
    assert (small.chunk, small.combine_warps) == (4, 8)            # 512 tiles in 128 splits
    for varlen in (False, True):
        bench = plan.default_tiling(MlaDecodeProblem(b=128, s_q=1, h_q=64, seqlen=4096, varlen=varlen))
        assert bench.combine_warps == 1, bench
    assert {t.combine_warps for t in plan.autotune_configs(MlaDecodeProblem(b=1, s_q=1, h_q=16, seqlen=32768))} \
        == {1, 2, 4, 8}


def test_other_warp_counts_are_refused(monkeypatch):
    plan = _plan(monkeypatch)
    problem = MlaDecodeProblem(b=1, s_q=1, h_q=16, seqlen=65)
    reasons = plan.Tiling(combine_warps=3).validate(problem, None)
    assert any("combine_warps must be one of 1, 2, 4, 8" in r for r in reasons), reasons


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
def test_only_a_shared_row_meets_barriers(monkeypatch):
    plan = _plan(monkeypatch)
    problem = MlaDecodeProblem(b=1, s_q=1, h_q=16, seqlen=4096)
    inputs = problem.make_inputs(seed=0, device="cpu")
    bars = {}
    for warps in (1, 8):
        tiling = plan.Tiling(chunk=4, combine_warps=warps)
        text = stage_sass(plan.plan(inputs, tiling), "combine")
        bars[warps] = sum(op.startswith("BAR.SYNC") for op in opcodes(text))
    assert bars[1] == 0 and bars[8] == 2, bars


def test_the_combine_kernel_refuses_other_warp_counts():
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v17 import combine
    with pytest.raises(ValueError, match="warps: expected 1, 2, 4 or 8 warps per query row"):
        combine.FlashMlaCombineKernel(1, 16, 4, warps=3)
