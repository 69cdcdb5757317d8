"""flash_mla_decode_v37's work rows (work_order.py): beside each launch slot's longest-first item,
the sequence's length and the page ids of the item's first two tiles, so a split CTA's prologue is
one load deep. CPU: the host mirror of a row (pages 16/32/64, idle slots, empty sequences, a
one-tile split whose second tile belongs to the next split, the poison past a sequence never
read); v37's stages; the split kernel compiles with the row. GPU: every row the kernel writes equals
the host mirror of its item, the items are v14's order (as multisets, sizes in the same order),
and v37's outputs equal v36's bit for bit, per call and per step, at pages 16 and 64."""
import dataclasses

import pytest

from mla_var3.layers.mla.decode import MlaDecodeProblem

POISON = -99                                         # what the block table holds past a sequence


def _wo():
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v37 import work_order
    return work_order


def _table(lens, page_size):
    """A block table whose page ids are distinct (sequence i's page j: 1000 i + j), poison past each sequence."""
    width = max(-(-max(lens + [1]) // 64) * (64 // page_size), 1) + 2
    return [[1000 * i + j if j < -(-n // page_size) else POISON for j in range(width)] for i, n in enumerate(lens)]


def test_a_row_holds_the_item_its_length_and_its_first_two_tiles_page_ids():
    wo = _wo()
    lens, slots = [300, 64 * 5 + 1], 3
    table = _table(lens, 64)
    # sequence 1, split 1 with chunk 2: tiles 2 and 3 (one page each at page 64)
    assert wo.host_work_row(1 * slots + 1, lens, table, chunk=2, slots=slots, page_size=64) == (
        [4, lens[1], 1002, 0, 0, 0, 1003, 0, 0, 0])
    # sequence 0 (300 keys = 5 tiles), split 2 with chunk 2: tile 4 alone (its last; tile 5 does not exist)
    assert wo.host_work_row(0 * slots + 2, lens, table, chunk=2, slots=slots, page_size=64) == (
        [2, 300, 4, 0, 0, 0, 0, 0, 0, 0])


def test_page_16_rows_hold_four_ids_per_tile_and_never_the_poison():
    wo = _wo()
    lens, slots = [64 + 20], 2                        # tile 0: 4 pages; tile 1: 20 keys = 2 pages
    table = _table(lens, 16)
    row = wo.host_work_row(0, lens, table, chunk=2, slots=slots, page_size=16)
    assert row == [0, 84, 0, 1, 2, 3, 4, 5, 0, 0]
    assert POISON not in row


def test_chunk_one_leaves_the_second_tile_to_the_next_split():
    wo = _wo()
    lens = [64 * 3]
    table = _table(lens, 32)
    row = wo.host_work_row(1, lens, table, chunk=1, slots=3, page_size=32)
    assert row == [1, 192, 2, 3, 0, 0, 0, 0, 0, 0]


def test_idle_slots_and_empty_sequences_have_length_zero_and_no_pages():
    wo = _wo()
    assert wo.host_work_row(-1, [5], [[0]], chunk=4, slots=1, page_size=64) == [-1] + [0] * 9
    assert wo.host_work_row(0, [0], [[POISON]], chunk=4, slots=1, page_size=64) == [0] + [0] * 9


def test_the_work_order_kernel_refuses_what_it_cannot_build():
    wo = _wo()
    with pytest.raises(ValueError, match="page_size: expected 16, 32 or 64, got 8"):
        wo.WorkOrderKernel(4, 8)
    with pytest.raises(ValueError, match="chunk: expected >= 1"):
        wo.WorkOrderKernel(0, 64)


RAGGED = MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=1024, varlen=True)


def test_v37_runs_the_work_order_stage_per_call_or_when_prepared():
    from mla_var3.runtime import registry
    plan = registry.get_plan("flash_mla_decode_v37")
    base = plan.default_tiling(RAGGED)
    assert base.order == "longest_first"
    per_call = plan._kernel(RAGGED.s_q, RAGGED.h_q, RAGGED.page_size, base)
    assert [s.name for s in per_call.stages] == ["order", "split", "combine"]
    per_step = plan._kernel(RAGGED.s_q, RAGGED.h_q, RAGGED.page_size, dataclasses.replace(base, schedule="per_step"))
    assert [s.name for s in per_step.stages] == ["split", "combine"]
    assert [s.name for s in per_step.prepare_stages] == ["order"]


def test_v37_compiles_with_the_work_row_at_pages_16_and_64():
    from mla_var3.runtime import registry
    plan = registry.get_plan("flash_mla_decode_v37")
    for page_size in (16, 64):
        problem = MlaDecodeProblem(b=8, s_q=1, h_q=16, seqlen=700, varlen=True, page_size=page_size)
        tiling = plan.default_tiling(problem)
        assert tiling.order == "longest_first"
        assert plan.compile_only(problem, "sm_90a", tiling)["compiled"] is True


def _tiles(lens):
    return [-(-s // 64) for s in lens]


CASES = {
    "mixed": ([5000, 70, 129, 64 * 68, 0, 9000, 64 * 68 * 2 + 1, 640], 68, 64),
    "mixed-page16": ([5000, 70, 129, 64 * 68, 0, 9000, 64 * 68 * 2 + 1, 640], 3, 16),
    "varlen-1024-page32": (RAGGED.resolve_seqlens(0), 20, 32),
    "chunk-1": ([130, 64, 1], 1, 64),
    "empty": ([0, 0, 0], 4, 64),
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(CASES))
def test_every_work_row_equals_the_host_mirror_of_its_item(case):
    import torch

    from gpu_helpers import runnable_plan
    plan = runnable_plan("flash_mla_decode_v37")
    wo = _wo()
    lens, chunk, page_size = CASES[case]
    slots = -(-max(max(_tiles(lens)), 1) // chunk) + 1                # one slot more than needed: idle rows
    problem = MlaDecodeProblem(b=len(lens), s_q=1, h_q=16, seqlens=tuple(lens), page_size=page_size)
    x = problem.make_inputs(seed=0, device="cuda")
    kern = plan.build(x, plan.Tiling(chunk=chunk, order="longest_first"))
    ws = {"work": torch.full((len(lens), slots, wo.WORK_INTS), -7, dtype=torch.int32, device="cuda")}
    next(s for s in kern.stages if s.name == "order").launch(x, None, ws)
    torch.cuda.synchronize()
    rows = ws["work"].view(-1, wo.WORK_INTS).tolist()
    table = x.block_table.tolist()
    for row in rows:                                 # the padding past USED_INTS is never written (-7 stays)
        assert row[:wo.USED_INTS] == wo.host_work_row(row[0], lens, table, chunk, slots, page_size)
        assert row[wo.USED_INTS:] == [-7] * (wo.WORK_INTS - wo.USED_INTS)
    host = wo.host_order(lens, chunk, slots)
    assert sorted(r[0] for r in rows) == sorted(host)

    def size(item):                                  # tiles of the item (-1: idle)
        if item < 0:
            return -1
        i, s = divmod(item, slots)
        return min(chunk, _tiles(lens)[i] - s * chunk)
    assert [size(r[0]) for r in rows] == [size(i) for i in host]


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [16, 64])
@pytest.mark.parametrize("schedule", ["per_call", "per_step"])
def test_v37_equals_v36_bit_for_bit(page_size, schedule):
    import torch

    from gpu_helpers import runnable_plan
    v37, v36 = runnable_plan("flash_mla_decode_v37"), runnable_plan("flash_mla_decode_v36")
    problem = MlaDecodeProblem(b=33, s_q=2, h_q=16, seqlen=2000, varlen=True, page_size=page_size)
    inputs = problem.make_inputs(seed=4, device="cuda")
    tiling = dataclasses.replace(v36.default_tiling(problem), schedule=schedule)
    want = v36.build(inputs, tiling).run(inputs)
    got = v37.build(inputs, v37.Tiling(**dataclasses.asdict(tiling))).run(inputs)
    cmp = problem.compare(got, problem.reference(inputs))
    assert cmp.passed, cmp.reason
    for a, b in zip(want, got):
        assert torch.equal(a, b)
