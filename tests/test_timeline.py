"""--prof_type=timeline on the CPU: the buffer schema, decoding a synthetic buffer into a Chrome
trace (schema checked, Perfetto's format), the summary, PNG and npz round trip, the globaltimer
probe's arithmetic, the instrumentation toggle (the plain v4 build is the code it was before the
instrumentation; the timeline build reads the timers) and the CLI's one-line refusals."""
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from mla_var3.cli.kernel import main
from mla_var3.runtime import registry, sass, timeline
from mla_var3.runtime.timeline import HEADER, Schema, Span
from compiled_sass import split_sass

FIXTURES = Path(__file__).parent / "fixtures"
HAVE_SASS_TOOLS = bool(sass.find_disassemblers())

TOY = Schema(kernel="toy", rows=("warp 0", "warp 4"), once=("ready",), per_iter=("a", "b", "c", "tma"),
             tail=("done",), max_iters=3, iter_name="pair",
             spans=(Span("setup", "clk_start", "ready"), Span("work", "a", "c"), Span("inner", "a", "b"),
                    Span("load", "c", "tma", track="TMA", rows=(0,)), Span("finish", "done", "clk_end")))


def synthetic_buffer(schema=TOY, ctas=3, ghz=2.0, iters=2):
    """CTA c starts at globaltimer 1000 + 500 c ns; every event 100 cycles after the previous one."""
    buf = np.zeros((ctas, len(schema.rows), schema.n_slots), dtype=np.int64)
    for c in range(ctas):
        for r in range(len(schema.rows)):
            clk = 10_000 + 7 * c + r
            row = buf[c, r]
            row[HEADER.index("smid")] = 100 + c
            row[HEADER.index("gt_start")] = 1000 + 500 * c
            row[HEADER.index("clk_start")] = clk
            t = clk
            for ev in schema.once:
                t += 100
                row[schema.slot(ev)] = t
            for it in range(iters):
                for ev in schema.per_iter:
                    t += 100 * (1 + c)            # later CTAs are slower: pick_ctas takes the longest
                    if ev == "tma" and r != 0:
                        continue
                    row[schema.slot(ev, it)] = t
            for ev in schema.tail:
                t += 100
                row[schema.slot(ev)] = t
            t += 100
            row[HEADER.index("clk_end")] = t
            row[HEADER.index("gt_end")] = row[1] + int((t - clk) / ghz)
    return buf


# ---- schema ------------------------------------------------------------------------------------

def test_schema_slots_are_fixed_and_distinct():
    slots = [TOY.slot(e) for e in HEADER + TOY.once + TOY.tail]
    slots += [TOY.slot(e, it) for it in range(TOY.max_iters) for e in TOY.per_iter]
    assert sorted(slots) == list(range(TOY.n_slots))
    assert TOY.slot("a", 1) == TOY.iter_base + len(TOY.per_iter)
    with pytest.raises(ValueError, match="iteration"):
        TOY.slot("a", TOY.max_iters)
    with pytest.raises(KeyError):
        TOY.slot("nope")
    assert Schema.from_dict(json.loads(json.dumps(TOY.to_dict()))) == TOY


@pytest.mark.parametrize("bad, match", [
    (dict(spans=(Span("x", "a", "nope"),)), "unknown event"),
    (dict(spans=(Span("x", "ready", "a"),)), "mixes"),
    (dict(spans=(Span("x", "a", "b", track="gpu"),)), "track"),
    (dict(once=("a",)), "unique"),
])
def test_schema_refuses_inconsistent_spans(bad, match):
    fields = {**TOY.to_dict(), "spans": TOY.spans, **bad}
    with pytest.raises(ValueError, match=match):
        Schema(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})


def test_v4_schema_names_its_phases():
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v4.timeline_events import SCHEMA
    assert SCHEMA.rows == ("warp 0 (WG0)", "warp 4 (WG1)") and SCHEMA.iter_name == "pair"
    names = {s.name for s in SCHEMA.spans}
    assert {"QK^T", "softmax+P", "publish", "P_A V_A", "P_B V_B", "wait peer", "TMA issue", "epilogue",
            "K box 0", "K box 8"} <= names
    assert {s.track for s in SCHEMA.spans} == {"math", "TMA"}
    assert SCHEMA.n_slots == len(HEADER) + 2 + SCHEMA.max_iters * len(SCHEMA.per_iter) + 3


# ---- decoding and the trace -------------------------------------------------------------------

def test_decode_and_chrome_trace_schema():
    buf = synthetic_buffer()
    assert timeline.clock_ghz(buf, TOY) == pytest.approx(2.0, rel=1e-2)
    ctas = timeline.decode(buf, TOY, grid=(3, 1, 1))
    assert [c.index for c in ctas] == [0, 1, 2] and ctas[2].coord == (2, 0, 0) and ctas[1].smid == 101
    work = [s for s in ctas[0].spans if s["name"] == "work" and s["row"] == 0]
    assert [s["it"] for s in work] == [0, 1] and all(s["end"] - s["start"] == 200 for s in work)
    assert not [s for s in ctas[0].spans if s["name"] == "load" and s["row"] == 1]   # row 1 records no TMA
    assert [s["it"] for s in ctas[0].spans if s["name"] == "load"] == [0, 1]

    trace = timeline.chrome_trace(ctas, TOY, 2.0, {"problem": "toy"})
    timeline.validate_trace(trace)
    trace = json.loads(json.dumps(trace))                # plain JSON
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in xs} == {0, 1, 2}
    assert {e["tid"] for e in xs} == {0, 1, 2}            # row 0 math, row 0 TMA, row 1 math
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names[(0, 1)] == "warp 0 TMA" and names[(0, 2)] == "warp 4 math"
    first = min((e for e in xs if e["pid"] == 1), key=lambda e: e["ts"])
    assert first["name"] == "setup" and first["ts"] == pytest.approx(0.5)   # CTA 1 starts 500 ns after CTA 0
    w = next(e for e in xs if e["name"] == "work" and e["pid"] == 0)
    assert w["dur"] == pytest.approx(200 / 2.0 / 1e3) and w["args"] == {"cycles": 200, "pair": 0}
    assert trace["otherData"]["kernel"] == "toy" and trace["otherData"]["clock_ghz"] == 2.0


def test_validate_trace_catches_what_perfetto_would_not_load():
    with pytest.raises(ValueError, match="traceEvents"):
        timeline.validate_trace({})
    with pytest.raises(ValueError, match="phase"):
        timeline.validate_trace({"traceEvents": [{"ph": "Q", "name": "x"}]})
    with pytest.raises(ValueError, match="ts"):
        timeline.validate_trace({"traceEvents": [{"ph": "X", "name": "x", "pid": 0, "tid": 0, "dur": 1}]})


def test_decode_skips_unrecorded_ctas_and_checks_shape():
    buf = synthetic_buffer()
    buf[1] = 0
    assert [c.index for c in timeline.decode(buf, TOY, (3, 1, 1))] == [0, 2]
    with pytest.raises(ValueError, match="expected"):
        timeline.decode(buf[:, :1], TOY, (3, 1, 1))


def test_pick_summary_and_periods():
    ctas = timeline.decode(synthetic_buffer(), TOY, (3, 1, 1))
    assert [c.index for c in timeline.pick_ctas(ctas, 2)] == [1, 2]          # the longest two, in CTA order
    rows = timeline.summarize(ctas, TOY, 2.0)
    work = next(r for r in rows if r["span"] == "work" and r["row"] == "warp 0")
    assert work["n"] == 6 and work["median_cycles"] == 400 and work["median_ns"] == 200
    assert [r["span"] for r in rows][0] == "setup"                             # schema order
    assert timeline.iteration_periods(ctas, TOY, "work") == [400, 400, 800, 800, 1200, 1200]
    assert "median cyc" in timeline.format_summary(rows, "t")


def test_write_outputs_and_npz_round_trip(tmp_path, capsys):
    buf = synthetic_buffer()
    got = timeline.write_outputs(tmp_path, buf, TOY, (3, 1, 1), n_ctas=2, meta={"title": "toy"})
    trace = json.loads((tmp_path / "trace.json").read_text())
    timeline.validate_trace(trace)
    assert {e["pid"] for e in trace["traceEvents"]} == {1, 2} and trace["otherData"]["ctas_recorded"] == 3
    assert (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert got["clock_measured"] == pytest.approx(2.0, rel=1e-2)
    timeline.save_buffer(tmp_path / "t.npz", buf, TOY, (3, 1, 1), {"problem": "toy"})
    b2, s2, g2, m2 = timeline.load_buffer(tmp_path / "t.npz")
    assert (b2 == buf).all() and s2 == TOY and g2 == (3, 1, 1) and m2 == {"problem": "toy"}
    out = tmp_path / "again"
    assert timeline.main([str(tmp_path / "t.npz"), "--ctas=1", f"--out={out}"]) == 0
    assert (out / "trace.json").exists() and "3 CTAs recorded" in capsys.readouterr().out


def test_timer_resolution_from_probe_samples():
    n = 400
    clk = 5_000 + 20 * np.arange(n)                       # a sample every 20 cycles
    gt = 1_000_000 + 32 * (np.arange(n) // 3)             # ticks of 32 ns (3 samples each at 2 GHz-ish)
    res = timeline.timer_resolution(gt, clk)
    assert res["tick_ns_median"] == 32 and res["tick_ns_min"] == 32 and res["cycles_per_sample"] == 20
    assert res["distinct"] == len(set(gt.tolist()))
    assert "tick 32 ns" in timeline.format_resolution(res)
    flat = timeline.timer_resolution(np.full(5, 7), np.arange(5))
    assert flat["tick_ns_median"] is None and "did not advance" in timeline.format_resolution(flat)
    with pytest.raises(ValueError):
        timeline.timer_resolution([1], [1])


# ---- the instrumentation toggle (compiles on the CPU) -------------------------------------------

@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
def test_plain_v4_is_unchanged_and_timeline_build_reads_the_timers(monkeypatch):
    from mla_var3.layers.mla.decode import MlaDecodeProblem
    from mla_var3.runtime import cute_kernel, registry
    monkeypatch.setenv(cute_kernel.LINE_INFO_ENV, "0")
    expect = json.loads((FIXTURES / "sass_expect_flash_mla_decode_v4_split.json").read_text())
    plan = registry.get_plan("flash_mla_decode_v4")
    problem = MlaDecodeProblem.default_problem()
    assert (problem.s_q, problem.h_q) == (expect["problem"]["s_q"], expect["problem"]["h_q"])
    tiling = plan.default_tiling(problem)
    assert tiling.key() == expect["tiling"]
    inputs = problem.small_variant().make_inputs(seed=0, device="cpu")

    plain = plan.plan(inputs, tiling)
    text = split_sass(plain)
    assert sass.fingerprint(text) == {"instructions": expect["instructions"], "sha256": expect["sha256"]}
    assert sass.timer_reads(text) == {}

    inst, grid = plan.timeline_kernel(inputs, tiling, max_ctas=8)
    assert grid == (1, 1, inputs.q.shape[0])
    keys = {s.name: s.key for s in inst.stages}
    assert keys["split"].variant == "timeline" and keys["split"] != plain.stages[0].key
    assert keys["combine"] == plain.stages[1].key                      # the combine kernel is not instrumented
    timers = sass.timer_reads(split_sass(inst))
    assert timers.get("SR_CLOCKLO", 0) >= 30 and timers.get("SR_GLOBALTIMERLO", 0) >= 1


def test_timer_reads_and_fingerprint_on_text():
    a = "        /*0000*/                   CS2R R8, SR_CLOCKLO ;   /* 0x0000 */\n"
    b = "        /*0010*/                   S2UR UR4, SR_GLOBALTIMERLO ;\n        /*0020*/  EXIT ;\n"
    assert sass.timer_reads(a + b) == {"SR_CLOCKLO": 1, "SR_GLOBALTIMERLO": 1}
    assert sass.instructions(a) == ["CS2R R8, SR_CLOCKLO"]
    assert sass.fingerprint(a)["instructions"] == 1
    assert sass.fingerprint(a) == sass.fingerprint(a.replace("/* 0x0000 */", ""))      # encodings do not count
    assert sass.timer_reads((FIXTURES / "sass_nvdisasm_v3_split.txt").read_text()) == {}


# ---- the CLI -----------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["ct_flash_mla_decode_v2", "--prof_type=timeline"],
     "is a cutile kernel; the in-kernel timeline needs CuTe DSL"),
    (["torch_mla_decode", "--prof_type=timeline"], "is a torch kernel; the in-kernel timeline needs CuTe DSL"),
    (["flash_mla_decode_v3", "--prof_type=timeline"],
     "flash_mla_decode_v3 has no timeline instrumentation (instrumented: flash_mla_decode_v4, flash_mla_decode_v8, "),
    (["flash_mla_decode_v4", "--prof_type=timeline", "--compare=flash_mla_decode_v3"], "one version at a time"),
    (["flash_mla_decode_v4", "--prof_type=timeline", "--timeline-ctas=0"], "--timeline-ctas: expected 1..64"),
    (["flash_mla_decode_v4", "--timeline-ctas=2"], "--timeline-ctas: only with --prof_type=timeline"),
    (["flash_mla_decode_v4", "--prof_type=ncu", "--timeline-max-ctas=2"], "only with --prof_type=timeline"),
])
def test_timeline_refusals_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_timeline_without_gpu_says_how_to_compile(monkeypatch, capsys):
    from mla_var3.runtime import devices
    monkeypatch.setattr(devices, "cuda_available", lambda: False)
    assert main(["flash_mla_decode_v4", "--prof_type=timeline"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --prof_type=timeline runs the instrumented kernel and needs a GPU; here, "
        "--prof_type=timeline --compile-only compiles it")


def test_timeline_compile_only_shows_the_timer_reads(capsys):
    if not HAVE_SASS_TOOLS:
        pytest.skip("needs cuobjdump or nvdisasm")
    assert main(["flash_mla_decode_v4", "--prof_type=timeline", "--compile-only", "--h_q=16"]) == 0
    out = capsys.readouterr().out
    assert "flash_mla_decode_v4 split [timeline]:" in out and "timer reads: SR_CLOCKLO" in out
    assert "flash_mla_decode_v4 combine:" in out and "timer reads: none" in out


@pytest.mark.gpu
def test_timeline_run_on_the_gpu(tmp_path, capsys):
    """The whole --prof_type=timeline run on a small problem: probe, instrumented outputs correct,
    a valid trace with both warpgroups' QK^T and P V phases. chunk=4 gives each CTA two pairs of
    tiles: v4's default chunk on this problem is 1 tile per CTA (b=2 leaves 66 CTAs per sequence),
    where warpgroup 1 scores nothing."""
    assert main(["flash_mla_decode_v4", "--prof_type=timeline", "--b=2", "--h_q=16", "--seqlen=700",
                 "--tiling", "+chunk=4", f"--records={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "globaltimer: tick" in out and "instrumented outputs match the reference" in out
    (d,) = (tmp_path / "timeline" / "flash_mla_decode_v4").iterdir()
    trace = json.loads((d / "trace.json").read_text())
    timeline.validate_trace(trace)
    spans = {(e["name"], e["tid"]) for e in trace["traceEvents"] if e["ph"] == "X"}
    assert {("QK^T", 0), ("QK^T", 2), ("P_A V_A", 0), ("P_A V_A", 2)} <= spans
    assert (d / "timeline.png").exists() and (d / "timeline.npz").exists()


def test_the_instrumented_list_follows_the_plans():
    """The refusal's list is every registered version with a timeline build, in version order;
    v22's and v25's persistent items have none, v31 and v32 (copies of v30) have v30's."""
    from mla_var3.cli.timeline import instrumented_versions
    names = instrumented_versions()
    assert names[:3] == ["flash_mla_decode_v4", "flash_mla_decode_v8", "flash_mla_decode_v9"]
    assert "flash_mla_decode_v22" not in names and "flash_mla_decode_v25" not in names
    assert {"flash_mla_decode_v30", "flash_mla_decode_v31", "flash_mla_decode_v32"} <= set(names)
    assert all(hasattr(registry.get_plan(n), "timeline_kernel") for n in names)


def test_sm_occupancy_counts_ctas_per_sm_busy_share_and_the_tail(tmp_path, capsys):
    buf = synthetic_buffer()
    buf[2, :, HEADER.index("smid")] = 100                  # CTAs 0 and 2 on SM 100, CTA 1 on SM 101
    ctas = timeline.decode(buf, TOY, (3, 1, 1))
    ends = {c.index: c.gt_end for c in ctas}                # the globaltimer end stamps
    occ = timeline.sm_occupancy(ctas, 2.0, min_ns=0)
    span = max(ends.values()) - 1000
    assert occ["sms"] == 2 and occ["working_ctas"] == 3 and occ["working_ctas_per_sm"] == {1: 1, 2: 1}
    assert occ["span_ns"] == pytest.approx(span)
    busy = sum(ends[i] - (1000 + 500 * i) for i in range(3))
    assert occ["busy_share"] == pytest.approx(busy / (2 * span))
    assert occ["finish_ns"]["max"] == pytest.approx(span)
    assert occ["idle_after_last_share"] == pytest.approx((span - (ends[1] - 1000)) / (2 * span))
    gap = occ["between_ctas_ns"]                           # SM 100: CTA 2 starts after CTA 0 ends
    assert gap["n"] == 1 and gap["median"] == pytest.approx((1000 + 500 * 2) - ends[0]) == gap["p90"]
    assert timeline.sm_occupancy(ctas, 2.0, min_ns=10 ** 9)["working_ctas"] == 0    # all idle slots
    with pytest.raises(ValueError, match="no CTAs"):
        timeline.sm_occupancy([], 2.0)
    timeline.save_buffer(tmp_path / "t.npz", buf, TOY, (3, 1, 1), {})
    assert timeline.main([str(tmp_path / "t.npz"), "--ctas=1", "--per-sm", f"--out={tmp_path}"]) == 0
    assert "idle after each SM's last CTA" in capsys.readouterr().out


def test_sm_occupancy_ends_a_cta_at_its_globaltimer_end_stamp():
    """With end stamps recorded, the between-CTA interval and the span come from the globaltimer,
    not from cycles over one clock rate (which the SM clock moving under the power cap skews):
    a wrong `ghz` leaves them unchanged."""
    buf = synthetic_buffer()
    buf[2, :, HEADER.index("smid")] = 100                  # CTAs 0 and 2 on SM 100
    for c in range(3):
        buf[c, :, HEADER.index("gt_end")] = 1000 + 500 * c + 400 + np.arange(buf.shape[1])
    ctas = timeline.decode(buf, TOY, (3, 1, 1))
    assert [c.gt_end for c in ctas] == [1401, 1901, 2401]
    for ghz in (2.0, 1.0, 4.0):
        occ = timeline.sm_occupancy(ctas, ghz, min_ns=0)
        assert occ["between_ctas_ns"]["median"] == (1000 + 500 * 2) - 1401
        assert occ["span_ns"] == 2401 - 1000


def test_cta_cost_fit_separates_the_cost_per_iteration_from_the_fixed_cost():
    """CTAs of 1..6 iterations at 3 us each plus 5 us fixed (at 2 GHz, two rows sharing the
    iterations) give back 3 and 5; a CTA that reached max_iters on a row (its count cut) and a
    too-short idle CTA are left out; equal counts give no fit."""
    ghz = 2.0
    schema = dataclasses.replace(TOY, max_iters=8)

    def cta(i, iters, us=None, row_its=None):
        us = 5.0 + 3.0 * iters if us is None else us
        spans = [{"name": "QK^T", "track": "math", "row": it % 2, "it": it // 2, "start": 0, "end": 1}
                 for it in range(iters)] if row_its is None else row_its
        return timeline.CtaTimeline(index=i, coord=(i, 0, 0), smid=i, gt_start=0, clk_start=0,
                                    clk_end=int(us * 1e3 * ghz), spans=spans)
    ctas = [cta(i, n) for i, n in enumerate((1, 2, 3, 4, 5, 6))]
    capped = cta(9, 0, us=500.0, row_its=[{"name": "QK^T", "track": "math", "row": 0, "it": k, "start": 0, "end": 1}
                                          for k in range(8)])
    idle = cta(10, 0, us=0.5)
    fit = timeline.cta_cost_fit(ctas + [capped, idle], schema, ghz, "QK^T")
    assert fit["ctas"] == 6 and fit["us_per_iter"] == pytest.approx(3.0) and fit["us_fixed"] == pytest.approx(5.0)
    assert fit["r2"] == pytest.approx(1.0)
    assert "3.00 us per QK^T + 5.00 us fixed" in timeline.format_cta_cost(fit)
    assert timeline.cta_cost_fit([cta(i, 4) for i in range(3)], schema, ghz, "QK^T") is None
    assert "nothing to fit" in timeline.format_cta_cost(None)


def test_item_gaps_measure_what_a_persistent_cta_pays_per_further_item():
    """Two CTAs, each walking items of 3, 2 and 4 pairs (pairs numbered over the items, each
    item's epilogue at its last pair's number): a pair every 1000 cycles within an item, and 2500
    cycles from an item's last pair to the next item's first (the epilogue 1200 of them, from 800
    after the last pair's start). At 2 GHz: a pair 0.5 us, the boundary 0.85 us from the
    epilogue's start, an item 3 tile-times beyond its tiles ((2500 - 1000) / 500)."""
    def cta(i):
        spans, t, k = [], 0, 0
        for n in (3, 2, 4):
            for p in range(n):
                spans.append({"name": "QK^T", "track": "math", "row": 0, "it": k, "start": t, "end": t + 300})
                if p == n - 1:
                    spans.append({"name": "epilogue", "track": "math", "row": 0, "it": k, "start": t + 800,
                                  "end": t + 2000})
                    t += 2500
                else:
                    t += 1000
                k += 1
        return timeline.CtaTimeline(index=i, coord=(i, 0, 0), smid=i, gt_start=0, clk_start=0, clk_end=t, spans=spans)
    g = timeline.item_gaps([cta(0), cta(1)], 2.0)
    assert g["boundaries"] == 4 and g["pair_ns"] == pytest.approx(500.0)
    assert g["epilogue_ns"] == pytest.approx(600.0) and g["gap_ns"] == pytest.approx(850.0) == g["gap_p90_ns"]
    assert g["extra_tiles"] == pytest.approx(3.0)
    assert "3.00 tile-times beyond its tiles" in timeline.format_item_gaps(g)
    one_item = timeline.CtaTimeline(index=0, coord=(0, 0, 0), smid=0, gt_start=0, clk_start=0, clk_end=10,
                                    spans=[s for s in cta(0).spans if s["it"] <= 2])
    assert timeline.item_gaps([one_item], 2.0) is None
    assert "nothing to measure" in timeline.format_item_gaps(None)


def test_v54_records_every_items_epilogue_per_pair():
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v54 import timeline_events as ev
    assert {"epi_start", "epi_sums", "epi_end"} <= set(ev.SCHEMA.per_iter) and ev.SCHEMA.tail == ()
    assert timeline.records_item_epilogues(ev.SCHEMA) and not timeline.records_item_epilogues(TOY)
