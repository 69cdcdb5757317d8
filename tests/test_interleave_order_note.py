"""The report's note on bench rows timed in the rotating interleave order (before
bench.balanced_order): with three or more plans each followed the same neighbour, and the
whole-grid run of 2026-12-04 put v46 after PyTorch at a higher clock than FlashMLA after v46."""
from dataclasses import replace

from mla_var3 import report
from mla_var3.layers.mla import decode as mla
from mla_var3.runtime import bench, records, registry

FIXED = mla.MlaDecodeProblem(b=8, s_q=1, h_q=16, seqlen=256)
OTHER = mla.MlaDecodeProblem(b=8, s_q=1, h_q=16, seqlen=512)


def _bench(name, problem, us, interleaved_with, order=None):
    plan = registry.get_plan(name)
    time_us = {"median": us, "min": us, "max": us, "n": 1, "interleaved_with": interleaved_with}
    if order:
        time_us["interleave_order"] = order
    return records.make_record("bench", plan, replace(plan.default_tiling(problem)), problem, time_us=time_us,
                               tflops=1.0, gbps=1.0, pct_roofline=1.0, pct_datasheet=1.0, bound="memory",
                               flops=1, bytes=1)


KERNELS = ("flash_mla_decode_v46", "flashmla_decode_v1", "torch_mla_decode_v1")


def test_three_plans_in_the_old_order_get_one_note_counting_the_problems():
    recs = [_bench(k, p, 50.0, 2) for p in (FIXED, OTHER) for k in KERNELS]
    assert report.order_notes(recs) == [
        "note: 2 problem(s) were timed in the rotating interleave order (records before the balanced order), "
        "where each of three or more plans always followed the same one: their ratios can carry a clock bias "
        "(compare --clocks)"]
    assert report.order_notes(recs) == report.table_notes(recs)[-1:]


def test_balanced_records_two_plan_compares_and_single_runs_get_none():
    balanced = [_bench(k, FIXED, 50.0, 2, bench.INTERLEAVE_ORDER) for k in KERNELS]
    pair = [_bench(k, FIXED, 50.0, 1) for k in KERNELS[:2]]                 # two plans: each followed the other
    single = [_bench(KERNELS[0], FIXED, 50.0, 0)]
    for recs in (balanced, pair, single):
        assert report.order_notes(recs) == []
    assert bench.INTERLEAVE_ORDER == "balanced"
