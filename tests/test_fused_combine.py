"""flash_mla_decode_v33 folds the combine into the split kernel: the last split CTA of a (sequence,
row block) merges that row block's partials (fused_combine.py). CPU: the default by split count,
the stages a call runs, the autotune space, the one-line errors, and the compiled split kernel's
arrival (a GPU-scope acq_rel atomic, L1 invalidated before the partials are read back, 16-byte
partial loads); with fused_combine=False it is v32's kernel. GPU: the merge against the reference
with many splits, under a CUDA graph replayed with new lengths, bit-identical reruns, and the
counters left at zero after every call."""
import collections

import pytest

from compiled_sass import default_kernel, opcodes, split_opcode_counts, split_sass
from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import sass

HAVE_SASS_TOOLS = bool(sass.find_disassemblers())
V33 = "flash_mla_decode_v33"


def _v33():
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v33 import flash_mla_decode_v33
    return flash_mla_decode_v33


@pytest.mark.parametrize("problem, fused", [
    (MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=1024, varlen=True), True),     # up to 3 splits
    (MlaDecodeProblem(b=128, s_q=2, h_q=128, seqlen=4096, varlen=True), True),
    (MlaDecodeProblem(b=16, s_q=1, h_q=128, seqlen=32768), True),                 # 8 splits
    (MlaDecodeProblem(b=1, s_q=1, h_q=16, seqlen=32768), False),                  # 128 splits: the combine kernel
    (MlaDecodeProblem(b=128, s_q=1, h_q=64, seqlen=4096), False),                 # one split: nothing to merge
])
def test_fused_from_two_to_eight_splits(problem, fused):
    v33 = _v33()
    plan = v33.Plan()
    tiling = plan.default_tiling(problem)
    tiles = [-(-s // v33.TILE) for s in problem.resolve_seqlens(0)]
    assert tiling.fused_combine == (1 < max(-(-t // tiling.chunk) for t in tiles) <= v33.FUSED_UPTO_SPLITS) == fused
    assert any(t.fused_combine != fused for t in plan.autotune_configs(problem))
    kern = plan._kernel(problem.s_q, problem.h_q, problem.page_size, tiling)
    assert ("combine" in [s.name for s in kern.stages]) == (not fused)     # (before the one-slot shortcut)


def test_fused_combine_must_be_a_bool():
    problem = MlaDecodeProblem(b=4, s_q=1, h_q=16, seqlen=1024)
    assert _v33().FlashMlaSplitTiling(fused_combine=1).validate(problem, None) == [
        "fused_combine must be True or False (whether the last split CTA merges the splits instead of a combine "
        "kernel), got 1"]


def test_more_split_slots_than_the_merge_holds_is_refused_in_one_line():
    v33 = _v33()
    problem = MlaDecodeProblem(b=1, s_q=1, h_q=16, seqlen=40000)
    inputs = problem.make_inputs(seed=0, device="cpu")
    tiling = v33.FlashMlaSplitTiling(chunk=1, fused_combine=True)
    with pytest.raises(PlanError, match=r"fused_combine=True merges at most 576 splits .* up to 625"):
        v33.Plan().plan(inputs, tiling)


def test_workspace_counters_start_at_zero_one_per_row_block():
    import torch
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v33 import kernel
    problem = MlaDecodeProblem(b=3, s_q=2, h_q=128, seqlen=700)
    x = problem.make_inputs(seed=0, device="cpu")
    ws = kernel.workspace(x.q, x.kv_cache, x.block_table, 4)
    assert ws["counters"].shape == (3, 4) and ws["counters"].dtype == torch.int32
    assert not ws["counters"].any()


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
def test_the_arrival_is_an_acq_rel_gpu_atomic_and_the_merge_reads_16_byte_chunks():
    ragged = MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=1024, varlen=True)
    assert _v33().Plan().default_tiling(ragged).fused_combine
    text = split_sass(default_kernel(V33, ragged))
    ops = collections.Counter(opcodes(text))
    assert ops["ATOMG.E.ADD.STRONG.GPU"] == 1
    assert ops["CCTL.IVALL"] >= 1            # acquire: L1 invalidated before the other splits' partials are read
    assert ops["MEMBAR.ALL.GPU"] >= 2        # release before the arrival, acquire after it
    assert ops["LDG.E.128"] == 32            # 64 rows x 128 chunks / 256 threads
    assert ops["STG.E.64"] == 32             # 4 bf16 per chunk


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
def test_without_fused_combine_the_split_kernel_is_v32s():
    import dataclasses
    from compiled_sass import stage_sass
    ragged = MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=1024, varlen=True)
    plan = _v33().Plan()
    tiling = dataclasses.replace(plan.default_tiling(ragged), fused_combine=False)
    kern = plan._kernel(ragged.s_q, ragged.h_q, ragged.page_size, tiling)
    ours = collections.Counter(opcodes(stage_sass(kern, "split")))
    theirs = split_opcode_counts("flash_mla_decode_v32", ragged)
    assert ours == theirs


# ---------------------------------------------------------------- GPU
def _gpu_plan():
    from gpu_helpers import runnable_plan
    return runnable_plan(V33)


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [16, 64])
def test_fused_merge_under_graph_replay_with_new_lengths(page_size):
    """Forced fused, short splits (chunk 2: up to 8 splits per sequence), two row blocks: one
    captured call replayed with new lengths matches the reference and leaves the counters at 0."""
    from graph_replay import replay_with_new_lengths
    plan = _gpu_plan()
    problem = MlaDecodeProblem(b=3, s_q=2, h_q=64, seqlens=(900, 900, 900), page_size=page_size)
    inputs = problem.make_inputs(seed=0, device="cuda")
    kern = plan.build(inputs, _v33().FlashMlaSplitTiling(chunk=2, order="longest_first", fused_combine=True,
                                                          refill_warps=2 if page_size < 64 else 1))
    kern.compile()
    outputs, replayed = replay_with_new_lengths(problem, kern, inputs, (37, 900, 513))
    cmp = problem.compare(outputs, problem.reference(replayed))
    assert cmp.passed, cmp.reason


@pytest.mark.gpu
def test_fused_merge_is_bit_identical_and_leaves_the_counters_at_zero():
    import torch
    plan = _gpu_plan()
    problem = MlaDecodeProblem(b=9, s_q=2, h_q=64, seqlen=3000, varlen=True)
    inputs = problem.make_inputs(seed=3, device="cuda")
    kern = plan.build(inputs, _v33().FlashMlaSplitTiling(chunk=6, order="longest_first", fused_combine=True,
                                                          cluster_rows=2, multicast_kv=False))
    kern.compile()
    ws = kern.prepare(inputs)
    first = [t.clone() for t in kern.run(inputs, workspace=ws)]
    assert not ws["counters"].any()
    cmp = problem.compare(first, problem.reference(inputs))
    assert cmp.passed, cmp.reason
    for _ in range(3):
        again = kern.run(inputs, workspace=ws)
        assert not ws["counters"].any()
        for a, b in zip(first, again):
            assert torch.equal(a.view(torch.int32) if a.dtype == torch.float32 else a.view(torch.int16),
                               b.view(torch.int32) if b.dtype == torch.float32 else b.view(torch.int16))
