"""ct_flash_mla_decode_v6's column-blocked combines and v7's several slots per combine iteration:
the width and slot count the plans pick from the shape, the knobs and their refusals, both combines
compile for sm_90a (CPU), and on the H200 both schedules against the reference at several widths
and slot counts (only column block 0 may write lse; v7's slots of other sequences weigh 0), small
batches included, and the balanced schedule under a CUDA graph replayed with new lengths."""
import dataclasses
import math

import pytest
from gpu_helpers import assert_check_passes

from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry

V6 = "ct_flash_mla_decode_v6"
V7 = "ct_flash_mla_decode_v7"
V8 = "ct_flash_mla_decode_v8"


def _plan_module(version=V6):
    import importlib
    return importlib.import_module(f"mla_var3.kernel.cutile_python.mla.ct_flash_mla_decode.{version}.{version}")


@pytest.mark.parametrize("b,rows,rows_per_block,expected", [
    (1, 16, 8, 64),        # 2 row blocks: the narrowest width, 16 blocks
    (4, 16, 8, 64),        # 8 row blocks -> 64 blocks at 64 columns
    (16, 16, 8, 64),       # 32 row blocks: 128 at 128 columns is still under 132
    (16, 128, 8, 512),     # 256 row blocks fill the GPU at full width
    (128, 16, 8, 512),     # 256 row blocks already fill the GPU: v5's combine
    (1, 128, 4, 64),       # 32 row blocks
])
@pytest.mark.parametrize("version", [V6, V7, V8])
def test_combine_width_fills_the_gpu(version, b, rows, rows_per_block, expected):
    mod = _plan_module(version)
    t = mod.CtFlashMlaSplitTiling(combine_rows=rows_per_block)
    row_blocks = b * -(-rows // rows_per_block)
    cols = mod.resolve_combine_cols(t, b, rows)
    # The rule: the widest width whose block count reaches one per SM, else the narrowest.
    widths = [c for c in mod.COMBINE_COLS if row_blocks * (512 // c) >= mod.NUM_SMS]
    assert cols == (max(widths) if widths else min(mod.COMBINE_COLS))
    assert cols == expected
    assert mod.resolve_combine_cols(dataclasses.replace(t, combine_cols=128), b, rows) == 128


@pytest.mark.parametrize("cols,rows_per_block,expected", [(512, 8, 1), (256, 8, 1), (128, 8, 1), (64, 8, 8),
                                                          (64, 4, 8), (512, 4, 1)])
@pytest.mark.parametrize("version", [V7, V8])
def test_combine_slots_only_at_the_narrow_width(version, cols, rows_per_block, expected):
    mod = _plan_module(version)
    t = mod.CtFlashMlaSplitTiling(combine_rows=rows_per_block)
    assert mod.resolve_combine_slots(t, cols) == expected
    assert mod.resolve_combine_slots(dataclasses.replace(t, combine_slots=2), cols) == 2


def test_v7_slots_knob_and_refusal():
    plan = registry.get_plan(V7)
    p = MlaDecodeProblem(b=1, s_q=1, h_q=16, seqlen=32768)
    assert plan.default_tiling(p).combine_slots == 0
    assert {c.combine_slots for c in plan.autotune_configs(p)} >= {0, 1, 2, 4, 8, 16}
    with pytest.raises(PlanError, match="combine_slots must be 0"):
        plan.check_tiling(plan.Tiling(combine_slots=3), p, None)


def test_default_rescale_and_refused_width():
    plan = registry.get_plan(V6)
    p = MlaDecodeProblem(b=1, s_q=1, h_q=16, seqlen=32768)
    t = plan.default_tiling(p)
    assert t.rescale == "eager" and t.combine_cols == 0
    assert {c.combine_cols for c in plan.autotune_configs(p)} >= {0, 64, 128, 256, 512}
    with pytest.raises(PlanError, match="combine_cols must be 0"):
        plan.check_tiling(plan.Tiling(combine_cols=96), p, None)


@pytest.mark.parametrize("schedule,splits", [("sequence", 4), ("balanced", 1)])
@pytest.mark.parametrize("version,cols,slots", [(V6, 64, 0), (V7, 64, 8), (V8, 64, 8)])
def test_combines_compile_for_sm90(schedule, splits, version, cols, slots):
    pytest.importorskip("cuda.tile")
    plan = registry.get_plan(version)
    p = MlaDecodeProblem(b=2, s_q=1, h_q=16, seqlen=3000)
    t = plan.Tiling(schedule=schedule, num_splits=splits, combine_cols=cols)
    if slots:
        t = dataclasses.replace(t, combine_slots=slots)
    info = plan.compile_only(p, "sm_90a", t)
    assert info["combine_cubin_bytes"] > 0 and info["combine_cols"] == cols
    if slots:
        assert info["combine_slots"] == slots


@pytest.mark.parametrize("n_slots,first", [(1, 0), (7, 2), (17, 5), (8, 0)])
def test_two_pass_slot_merge_equals_the_softmax_merge(n_slots, first):
    """v8's balanced combine in PyTorch: SLOTS-wide chunks from slot `first`, slots past the
    sequence's own weighed 0 through lse -inf, an elementwise max pass then an elementwise sum pass,
    each reduced over the slots once; against the direct merge of the sequence's own partials."""
    import torch
    g = torch.Generator().manual_seed(n_slots)
    SLOTS, R, D = 8, 4, 16
    total = first + n_slots + SLOTS                   # the workspace: other sequences' slots around
    lse = torch.randn(total, R, generator=g, dtype=torch.float64) * 4
    if n_slots > 1:
        lse[first + 1, 0] = -math.inf                 # a piece that saw nothing of row 0
    o = torch.randn(total, R, D, generator=g, dtype=torch.float64)
    chunks = -(-n_slots // SLOTS)
    k = torch.arange(SLOTS)
    m3 = torch.full((SLOTS, R), -math.inf, dtype=torch.float64)
    for c in range(chunks):
        pen = torch.where(c * SLOTS + k < n_slots, 0.0, -math.inf).reshape(SLOTS, 1)
        m3 = torch.maximum(m3, lse[first + c * SLOTS:first + (c + 1) * SLOTS] + pen)
    m = m3.max(dim=0).values
    acc3 = torch.zeros(SLOTS, R, D, dtype=torch.float64)
    w3 = torch.zeros(SLOTS, R, dtype=torch.float64)
    for c in range(chunks):
        pen = torch.where(c * SLOTS + k < n_slots, 0.0, -math.inf).reshape(SLOTS, 1)
        w = torch.exp2(lse[first + c * SLOTS:first + (c + 1) * SLOTS] + pen - m)
        acc3 += w[:, :, None] * o[first + c * SLOTS:first + (c + 1) * SLOTS]
        w3 += w
    out = acc3.sum(0) / w3.sum(0)[:, None]
    own = torch.softmax(lse[first:first + n_slots] * math.log(2.0), dim=0)       # weights 2^lse / sum
    assert torch.allclose(out, (own[:, :, None] * o[first:first + n_slots]).sum(0), rtol=1e-12, atol=1e-12)
    assert torch.allclose(m + torch.log2(w3.sum(0)), torch.logsumexp(lse[first:first + n_slots] * math.log(2.0), 0)
                          / math.log(2.0), rtol=1e-12, atol=1e-12)


GPU_PROBLEMS = [MlaDecodeProblem(b=1, s_q=1, h_q=16, seqlen=5000),
                MlaDecodeProblem(b=3, s_q=2, h_q=64, seqlens=(0, 700, 4097)),
                MlaDecodeProblem(b=2, s_q=1, h_q=128, seqlens=(1, 2500))]


# One device call compiles about 20 of these (each a new cuTile build on the H200), so the matrix
# is: v6 at three widths and v7's default (64 columns, 8 slots) on every problem, v7's other slot
# counts (1, and the spilling 4 at 128 and 2 at 512 columns) on the first.
GPU_CASES = ([(p, s, V6, c, 0) for p in GPU_PROBLEMS for s in ("sequence", "balanced") for c in (64, 128, 512)]
             + [(p, s, v, 64, 8) for v in (V7, V8) for p in GPU_PROBLEMS for s in ("sequence", "balanced")]
             + [(GPU_PROBLEMS[0], s, V7, c, k) for s in ("sequence", "balanced") for c, k in ((64, 1), (128, 4), (512, 2))])


@pytest.mark.gpu
@pytest.mark.parametrize("problem,schedule,version,cols,slots", GPU_CASES,
                         ids=[f"{p.key()}-{s}-{v}-{c}-{k}" for p, s, v, c, k in GPU_CASES])
def test_column_blocked_combine_matches_reference(problem, schedule, version, cols, slots):
    plan = registry.get_plan(version)
    if plan.unavailable():
        pytest.skip(plan.unavailable())
    t = plan.Tiling(schedule=schedule, num_splits=1 if schedule == "balanced" else 5, combine_cols=cols)
    if slots:
        t = dataclasses.replace(t, combine_slots=slots)
    assert_check_passes(plan, problem, seeds=(0,), extra_seeds=(0,), tiling=t)


@pytest.mark.gpu
@pytest.mark.parametrize("version", [V6, V7, V8])
def test_column_blocked_combine_under_graph_replay_with_new_lengths(version):
    from graph_replay import replay_with_new_lengths
    plan = registry.get_plan(version)
    if plan.unavailable():
        pytest.skip(plan.unavailable())
    problem = MlaDecodeProblem(b=3, s_q=1, h_q=16, seqlens=(900, 900, 900))
    inputs = problem.make_inputs(seed=0, device="cuda")
    kern = plan.build(inputs, plan.Tiling(schedule="balanced", parts=7, combine_cols=64))
    kern.compile()
    outputs, replayed = replay_with_new_lengths(problem, kern, inputs, (37, 0, 777))
    cmp = problem.compare(outputs, problem.reference(replayed))
    assert cmp.passed, cmp.reason
