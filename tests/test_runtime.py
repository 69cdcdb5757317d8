"""Runtime pieces on the CPU: devices + arch gate, roofline, records, bench sizing, check, tilings."""
import json
import statistics
import types

import pytest
import torch

from mla_var3.layers.mla import decode as mla
from mla_var3.runtime import bench, check, devices, records, registry, roofline
from mla_var3.runtime.kernel_plan import PlanError, split_version


def test_devices_json_has_the_gpus_with_sources():
    devs = devices.load_devices()
    assert {"A100-SXM4-80GB", "H100-SXM", "H200", "B200", "RTX-5090"} <= set(devs)
    raw = json.loads((devices.resources.files("mla_var3.conf") / "devices.json").read_text())
    for key, d in raw["devices"].items():
        assert d["sources"].get("tflops") and d["sources"].get("hbm_gbps"), key
    h200 = devs["H200"]
    assert h200.arch == "sm_90a" and h200.sms == 132 and h200.smem_per_block_bytes == 232448
    assert h200.ceilings() == (771.0, 4270.0) and h200.ceilings(measured=False)[1] == 4800.0


@pytest.mark.parametrize("name, key", [("NVIDIA H200", "H200"), ("NVIDIA H100 80GB HBM3", "H100-SXM"),
                                       ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"), ("NVIDIA B200", "B200"),
                                       ("NVIDIA GeForce RTX 5090", "RTX-5090")])
def test_gpu_names_map_to_their_spec(name, key):
    assert devices.spec_for_name(name).key == key


def test_arch_gate_refuses_the_wrong_gpu():
    a100 = devices.load_devices()["A100-SXM4-80GB"]
    assert devices.arch_from_capability(9, 0) == "sm_90a" and devices.arch_from_capability(8, 0) == "sm_80"
    with pytest.raises(devices.DeviceError, match=r"needs sm_90a; this GPU .* is sm_80"):
        devices.require_arch("flash_mla_decode_v1", ("sm_90a",), a100)
    devices.require_arch("torch_mla_decode_v1", ("any",), a100)
    with pytest.raises(devices.DeviceError, match="--arch"):
        devices.check_arch_name("sm_91")


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")
def test_no_gpu_is_a_clear_error():
    with pytest.raises(devices.DeviceError, match="no CUDA GPU"):
        devices.current_device()


def test_roofline_bounds_and_percentages():
    h200 = devices.load_devices()["H200"]
    p = mla.MlaDecodeProblem(b=128, s_q=1, h_q=64, seqlen=8192)
    flops, nbytes = mla.flops_bytes(p)
    pt = roofline.roofline(flops, nbytes, 310.3, h200)           # FlashMLA's measured time
    assert pt.bound == "memory" and 175 < pt.ridge < 185
    assert 90 < pt.pct_measured < 95 and pt.pct_datasheet < pt.pct_measured
    big = mla.flops_bytes(mla.MlaDecodeProblem(b=128, s_q=2, h_q=128, seqlen=8192))
    assert roofline.roofline(*big, 808.0, h200).bound == "compute"
    with pytest.raises(ValueError):
        roofline.roofline(1, 1, 0.0, h200)


def test_rotation_exceeds_three_l2():
    l2 = 60 << 20
    n = bench.sets_needed(10 << 20, l2)
    assert n * (10 << 20) >= 3 * l2 and (n - 1) * (10 << 20) < 3 * l2
    assert bench.sets_needed(1 << 30, l2) == 1 and bench.sets_needed(10, l2) == bench.MAX_SETS


def _record(kind="bench", **over):
    plan = registry.get_plan("torch_mla_decode_v1")
    p = mla.MlaDecodeProblem(b=2, seqlen=64)
    fields = dict(time_us={"median": 10.0, "min": 9.0, "max": 11.0, "n": 10}, tflops=1.0, gbps=2.0,
                  pct_roofline=3.0, pct_datasheet=2.0, bound="memory", flops=10, bytes=5) if kind == "bench" else \
        dict(passed=True, seeds=[0], errors={})
    fields.update(over)
    return records.make_record(kind, plan, plan.default_tiling(p), p, **fields)


def test_records_schema_round_trip(tmp_path):
    rec = _record()
    records.validate_record(rec)
    assert rec["kernel"] == "torch_mla_decode_v1" and rec["version"] == 1 and rec["design"] == "torch_mla_decode"
    assert set(rec["env"]["packages"]) >= {"torch", "triton", "nvidia-cutlass-dsl", "cuda-tile"}
    path = records.append(rec, tmp_path)
    records.append(_record("check"), tmp_path)
    back = records.load(tmp_path)
    assert path.name == "records.jsonl" and len(back) == 2 and back[0]["time_us"]["median"] == 10.0


@pytest.mark.parametrize("drop, match", [("kernel", "missing field 'kernel'"), ("tflops", "missing field 'tflops'")])
def test_records_schema_rejects_incomplete(drop, match):
    rec = _record()
    del rec[drop]
    with pytest.raises(records.RecordError, match=match):
        records.validate_record(rec)
    bad = _record(time_us={"median": 1.0})
    with pytest.raises(records.RecordError, match="time_us lacks"):
        records.validate_record(bad)


def test_devlog_update_keeps_prose(tmp_path):
    path = tmp_path / "d.md"
    path.write_text("# d\n\n## d_v1\n\nWhat changed: prose.\n\n## d_v2\n\nLater prose.\n")
    assert records.update_devlog(path, "d_v1", "| a |\n|---|\n| 1 |")
    text = path.read_text()
    assert "What changed: prose." in text and "Later prose." in text
    assert text.index("| 1 |") < text.index("## d_v2")
    assert records.update_devlog(path, "d_v1", "| a |\n|---|\n| 2 |")
    text = path.read_text()
    assert "| 2 |" in text and "| 1 |" not in text and text.count("mla_var3:generated d_v1 begin") == 1
    assert not records.update_devlog(path, "d_v1", "| a |\n|---|\n| 2 |")


def test_check_catches_wrong_unwritten_and_stale_outputs():
    x = mla.make_inputs(mla.MlaDecodeProblem(b=2, s_q=2, h_q=4, seqlens=(1, 70)), seed=0)
    ref_out, ref_lse = mla.reference(x)
    assert mla.compare(ref_out.to(torch.bfloat16), ref_lse, ref_out, ref_lse).passed
    holes = ref_out.to(torch.bfloat16).clone()
    holes[1, 1, 2, 7] = float("nan")                      # an element nobody wrote
    assert "NaN positions" in mla.compare(holes, ref_lse, ref_out, ref_lse).reason
    off = ref_out.to(torch.bfloat16) * 1.05
    assert not mla.compare(off, ref_lse, ref_out, ref_lse).passed
    lse_off = ref_lse + 1e-3
    assert "lse" in mla.compare(ref_out.to(torch.bfloat16), lse_off, ref_out, ref_lse).reason
    zeros = torch.zeros_like(ref_out, dtype=torch.bfloat16)
    assert not mla.compare(zeros, ref_lse, ref_out, ref_lse).passed
    peaked_bad = ref_out.to(torch.bfloat16) + 0.01 * ref_out.abs().max()
    assert not mla.compare(peaked_bad, ref_lse, ref_out, ref_lse, peaked=True).passed


def test_registry_finds_versions_and_resolves_designs():
    names = {e.name for e in registry.all_entries()}
    assert "torch_mla_decode_v1" in names
    assert registry.resolve("torch_mla_decode").name.startswith("torch_mla_decode_v")
    plan = registry.get_plan("torch_mla_decode_v1")
    assert plan.language == "torch" and plan.layer == "mla" and plan.design == "torch_mla_decode"
    for e in registry.all_entries():
        plan = e.load()
        assert plan.name == e.name and plan.arch and plan.language in ("cute-dsl", "cutile", "torch", "peer")
    with pytest.raises(registry.RegistryError, match="unknown kernel 'nope'"):
        registry.resolve("nope")
    assert split_version("flash_mla_decode_v12") == ("flash_mla_decode", 12)
    with pytest.raises(PlanError):
        split_version("flash")


def test_tiling_validation_is_a_one_line_error():
    plan = registry.get_plan("torch_mla_decode_v1")
    p = mla.MlaDecodeProblem(b=2, seqlen=64)
    assert plan.Tiling(batch_chunk=0).validate(p, None)
    with pytest.raises(PlanError, match="batch_chunk must be a positive int"):
        plan.check_tiling(plan.Tiling(batch_chunk=0), p, None)
    with pytest.raises(PlanError, match="expects a TorchMlaTiling"):
        plan.check_tiling(object(), p, None)


def test_torch_baseline_passes_on_cpu():
    plan = registry.get_plan("torch_mla_decode_v1")
    results = check.check_plan(plan, mla.grid("smoke"), seeds=(0,), device="cpu")
    assert results and all(r.passed for r in results), [r.reason for r in results if not r.passed]


def test_peer_rows_match_flashmla_configs():
    from mla_var3.layers.mla import peers
    h200 = devices.load_devices()["H200"]
    from dataclasses import replace
    h200 = replace(h200, name="NVIDIA H200")
    row = peers.match(mla.MlaDecodeProblem(b=128, s_q=1, h_q=64, seqlen=4096), "NVIDIA H200")
    assert row["lengths"] == "fixed" and float(row["kernel_us"]) == 164.5 and float(row["e2e_us"]) == 164.7
    assert peers.match(mla.MlaDecodeProblem(b=64, s_q=1, h_q=64, seqlen=4096), "NVIDIA H200") is None
    assert peers.match(mla.MlaDecodeProblem(b=128, s_q=1, h_q=64, seqlen=4096), "NVIDIA A100") is None
    assert peers.match(mla.MlaDecodeProblem(b=128, s_q=1, h_q=64, seqlen=4096, page_size=16), "NVIDIA H200") is None
    assert peers.match(mla.MlaDecodeProblem(b=128, s_q=2, h_q=128, seqlen=8192, varlen=True), "NVIDIA H200")["mean_seqlen"] == "8234"
    (rec,) = mla.MlaDecodeProblem(b=128, s_q=1, h_q=64, seqlen=4096).peer_records(h200)
    assert rec["kind"] == "peer" and rec["kernel"] == peers.PEER_LABEL
    assert abs(rec["tflops"] - 443) < 2 and abs(rec["gbps"] - 3775) < 10     # the CSV's own e2e numbers
    assert len(peers.load("flashmla_h200.csv")) == 36


def test_stored_flashmla_rows_only_where_flashmla_did_not_run_live():
    """A devlog of a run with FlashMLA live had each problem twice (live row and the CSV's older
    row); the CSV rows now fill in only the problems without a live peer record."""
    from pathlib import Path

    from mla_var3 import report
    path = Path(__file__).resolve().parents[1] / "records" / "2026-12-01-h200-flash_mla_decode_v9-grid.jsonl.gz"
    recs = records.load(path)
    live = report.live_peer_problems(recs)
    assert len(live) == 36 and report.peer_rows(recs) == []
    ours = [r for r in recs if r["language"] != "peer"]
    assert len(report.peer_rows(ours)) == 36          # without the live runs the stored rows come back


def test_problem_round_trips_through_records():
    p = mla.MlaDecodeProblem(b=3, s_q=2, h_q=16, seqlens=(1, 2, 3))
    assert mla.MlaDecodeProblem.from_dict(p.to_dict()) == p
    q = mla.MlaDecodeProblem(b=128, seqlen=1024, varlen=True)
    assert mla.MlaDecodeProblem.from_dict(q.to_dict()) == q


def test_autotune_cache_is_keyed_by_version_source_problem_gpu_dsl(tmp_path, monkeypatch):
    from mla_var3.runtime import autotune
    monkeypatch.setenv("MLA_VAR3_CACHE", str(tmp_path))
    plan = registry.get_plan("torch_mla_decode_v1")
    p1, p2 = mla.MlaDecodeProblem(b=8, seqlen=64), mla.MlaDecodeProblem(b=8, seqlen=128)
    key = autotune.cache_key(plan, p1, "NVIDIA H200")
    parts = key.split("|")
    assert parts[0] == "torch_mla_decode_v1" and parts[2] == p1.key() and parts[3] == "NVIDIA H200"
    assert parts[4].startswith("torch==") and len(parts[1]) == 16
    assert autotune.lookup(plan, p1, "NVIDIA H200") is None
    autotune.store(plan, p1, "NVIDIA H200", plan.Tiling(batch_chunk=8), 12.5)
    assert autotune.lookup(plan, p1, "NVIDIA H200") == plan.Tiling(batch_chunk=8)
    assert autotune.lookup(plan, p2, "NVIDIA H200") is None
    assert autotune.lookup(plan, p1, "NVIDIA H100 80GB HBM3") is None
    monkeypatch.setattr(autotune, "source_hash", lambda plan: "edited")
    assert autotune.lookup(plan, p1, "NVIDIA H200") is None, "an edit to the version must invalidate"


def test_plans_refuse_before_compiling():
    from mla_var3.runtime.kernel_plan import PlanError
    x = mla.make_inputs(mla.MlaDecodeProblem(b=2, s_q=1, h_q=16, seqlen=70), seed=0)
    torch_plan = registry.get_plan("torch_mla_decode_v1")
    with pytest.raises(PlanError, match="batch_chunk must be a positive int"):
        torch_plan.build(x, torch_plan.Tiling(batch_chunk=0))
    from dataclasses import replace
    with pytest.raises(mla.InputError, match="q: expected dtype"):
        torch_plan.build(replace(x, q=x.q.float()))
    flash = registry.get_plan("flash_mla_decode_v1")
    if not torch.cuda.is_available():
        with pytest.raises(devices.DeviceError, match="no CUDA GPU"):
            flash.build(x)


def test_check_records_name_their_grid():
    plan = registry.get_plan("torch_mla_decode_v1")
    rec = records.make_record("check", plan, None, None, grid="check", passed=True, seeds=[0], errors={})
    records.validate_record(rec)
    assert rec["problem_key"] == "grid=check" and rec["problem"] == {"grid": "check"}
    with pytest.raises(records.RecordError, match="problem or the grid"):
        records.make_record("check", plan, None, None, passed=True, seeds=[0], errors={})


def test_report_on_missing_records_is_one_line(tmp_path, capsys):
    from mla_var3 import report
    assert report.main(["--records", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: records:") and "does not exist" in err and len(err.splitlines()) == 1


def test_report_grid_filter_keeps_only_that_grids_problems():
    from mla_var3 import report
    inside = _record(problem_key=mla.grid("bench")[0].key())
    outside = _record()
    assert report.in_grid([inside, outside], "bench") == [inside]


def test_isolated_autotune_trials_record_timeouts_crashes_and_answers():
    import sys

    from mla_var3.runtime import autotune
    slow = [sys.executable, "-c", "import time; time.sleep(30)"]
    assert autotune.run_trial(slow, timeout_s=1) == {"status": "timeout", "error": "exceeded 1s (killed)"}
    crash = [sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"]
    assert autotune.run_trial(crash, timeout_s=30) == {"status": "failed", "error": "trial process exited 3: boom"}
    ok = [sys.executable, "-c", "print('log line'); print('{\"status\": \"ok\", \"time_us\": 1.5}')"]
    assert autotune.run_trial(ok, timeout_s=30) == {"status": "ok", "time_us": 1.5}


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")
def test_isolated_trial_process_round_trips_a_real_spec():
    """The trial module rebuilds plan, problem and tiling from the spec; without a GPU its answer
    is a recorded failure, not a crash of the caller."""
    from mla_var3.runtime import autotune
    plan = registry.get_plan("torch_mla_decode_v1")
    p = mla.MlaDecodeProblem(b=2, seqlen=64)
    trial = autotune.run_trial(autotune.trial_command(plan, p, plan.Tiling(batch_chunk=2), rep_ms=5, seed=0), 120)
    assert trial["status"] == "failed" and "CUDA" in trial["error"], trial


def test_a_quarantined_plan_is_unavailable_unless_asked_for(monkeypatch):
    """A version known to fault (or never run on a GPU) is skipped by list/compare/tests/dispatch
    with its reason, and runs only when MLA_VAR3_RUN_QUARANTINED=1. (No version is quarantined
    today - the last ones passed their H200 checks on 2026-12-01 - so the test sets one.)"""
    from mla_var3.runtime import kernel_plan, registry
    plan = registry.get_plan("gemm_v3")
    monkeypatch.delenv(kernel_plan.QUARANTINE_ENV, raising=False)
    assert plan.quarantine == "" and registry.get_plan("gemm_v4").quarantine == ""
    monkeypatch.setattr(type(plan), "quarantine", "faulted with 'misaligned address' on the H200")
    assert plan.unavailable().startswith("quarantined: faulted with 'misaligned address' on the H200")
    assert kernel_plan.QUARANTINE_ENV in plan.unavailable()
    assert registry.quarantined(registry.resolve("gemm_v3"))
    assert registry.get_plan("gemm_v4").unavailable() != plan.unavailable()
    monkeypatch.setenv(kernel_plan.QUARANTINE_ENV, "1")
    assert plan.unavailable() is None and not registry.quarantined(registry.resolve("gemm_v3"))


def test_a_design_name_means_its_newest_version_that_is_not_quarantined(monkeypatch):
    from mla_var3.runtime import kernel_plan, registry
    monkeypatch.delenv(kernel_plan.QUARANTINE_ENV, raising=False)
    newest = registry.versions_of("flash_mla_decode")[-1]
    monkeypatch.setattr(type(newest.load()), "quarantine", "never run on a GPU yet")
    assert registry.quarantined(newest)
    picked = registry.resolve("flash_mla_decode")
    assert picked.version < newest.version and not registry.quarantined(picked)
    assert picked.name in {e.name for e in registry.newest_entries()}
    monkeypatch.setenv(kernel_plan.QUARANTINE_ENV, "1")
    assert registry.resolve("flash_mla_decode").name == newest.name


def test_interleaved_timing_gives_identical_plans_the_same_median():
    """A GPU that slows as it heats (each call 1% slower than the last) must not favour whichever
    plan is timed first: interleaved rounds give two identical plans medians within one step,
    where timing them one after the other (the old protocol) puts them 10% apart."""
    calls = []

    def heating_replay():
        calls.append(1)
        return 1.0 + 0.01 * len(calls)

    a, b = bench.interleaved_samples([heating_replay, heating_replay], rounds=10)
    assert len(a) == len(b) == 10
    assert abs(statistics.median(a) - statistics.median(b)) <= 0.011
    calls.clear()
    seq_a, seq_b = ([heating_replay() for _ in range(10)] for _ in range(2))
    assert statistics.median(seq_b) - statistics.median(seq_a) >= 0.09


def test_interleaved_rounds_follow_the_balanced_order():
    order = []
    replays = [lambda i=i: order.append(i) or 1.0 for i in range(3)]
    samples = bench.interleaved_samples(replays, rounds=3, warmup_rounds=0)
    assert order == [x for r in range(3) for x in bench.balanced_order(3, r)]
    assert [len(s) for s in samples] == [3, 3, 3]


def test_balanced_order_times_every_plan_after_every_other_equally_often():
    """Over one period (n - 1 rounds, timed back to back and repeated) each ordered pair of plans is
    adjacent exactly once, the call that ends a round and the next round's first included; each
    round holds every plan once and no plan is timed twice in a row."""
    for n in range(2, 9):
        period = [bench.balanced_order(n, r) for r in range(n - 1)]
        assert all(sorted(order) == list(range(n)) for order in period)
        calls = [x for order in period for x in order]
        arcs = list(zip(calls, calls[1:] + calls[:1]))
        assert sorted(arcs) == [(a, b) for a in range(n) for b in range(n) if a != b], n
        assert bench.balanced_order(n, n - 1) == period[0]


def test_balanced_order_past_the_search_budget_is_a_williams_design(monkeypatch):
    """With no cyclic design found, each ordered pair is still adjacent equally often within rounds."""
    monkeypatch.setattr(bench, "DESIGN_SEARCH_STEPS", 0)
    bench._cyclic_design.cache_clear()
    try:
        for n in (4, 5):
            follows = {}
            for r in range(n if n % 2 == 0 else 2 * n):
                order = bench.balanced_order(n, r)
                assert sorted(order) == list(range(n))
                for a, b in zip(order, order[1:]):
                    follows[(a, b)] = follows.get((a, b), 0) + 1
            assert len(follows) == n * (n - 1) and len(set(follows.values())) == 1
    finally:
        bench._cyclic_design.cache_clear()


def test_a_cool_predecessor_does_not_favour_one_plan():
    """A plan timed right after a low-power one runs faster (here 10%): with four plans, where the
    fourth is the low-power one, the three identical plans get the same mean (a plain rotation
    gave the first plan that advantage in 3 of every 4 rounds: means 0.925, 0.975 and 1.0)."""
    last = [None]

    def make(i):
        def replay():
            t = 0.9 if last[0] == 3 else 1.0
            last[0] = i
            return t
        return replay

    samples = bench.interleaved_samples([make(i) for i in range(4)], rounds=12)
    means = [statistics.mean(s) for s in samples[:3]]
    assert max(means) - min(means) <= 1e-9, means


def test_a_warmup_round_is_run_interleaved_and_dropped():
    """After the builds the GPU is idle and cool: the first round is run (every plan once, in the
    rotating order) but not kept, so no plan's first sample comes at a boost clock."""
    order, t = [], iter(range(100))
    replays = [lambda i=i: order.append(i) or float(next(t)) for i in range(2)]
    a, b = bench.interleaved_samples(replays, rounds=2)
    assert bench.WARMUP_ROUNDS == 1
    assert order == [0, 1, 0, 1, 0, 1] and a == [2.0, 4.0] and b == [3.0, 5.0]


def test_compared_plans_are_benchmarked_together_and_recorded_in_order(monkeypatch):
    """`--compare` hands every plan of a problem to one interleaved bench call; the records come
    back in the order given, each naming its own kernel and how many it was timed beside."""
    from dataclasses import replace

    from mla_var3 import jobs
    h200 = replace(devices.load_devices()["H200"], name="NVIDIA H200")
    seen = []

    def fake_bench_plans(entries, problem, device, *, seed=0, rep_ms=100.0, replays=10):
        seen.append([p.name for p, _ in entries])
        return [{"tiling_obj": None, "time_us": {"median": 2.0 + i, "min": 1.0, "max": 3.0 + i, "n": 10,
                                                 "interleaved_with": len(entries) - 1},
                 "tflops": 1.0, "gbps": 2.0, "pct_roofline": 3.0, "pct_datasheet": 2.5, "bound": "memory",
                 "flops": 1, "bytes": 2} for i, _ in enumerate(entries)]
    monkeypatch.setattr(bench, "bench_plans", fake_bench_plans)
    plans = [registry.get_plan("torch_mla_decode_v1"), registry.get_plan("torch_mla_decode_v1")]
    problem = mla.MlaDecodeProblem(b=2, s_q=1, h_q=16, seqlen=128)
    recs = jobs.bench_records(plans, problem, h200, rep_ms=5.0)
    assert seen == [["torch_mla_decode_v1", "torch_mla_decode_v1"]]
    assert [r["time_us"]["median"] for r in recs] == [2.0, 3.0]
    assert all(r["time_us"]["interleaved_with"] == 1 for r in recs)


def test_an_autotune_trial_is_timed_by_the_benchmark_protocol(monkeypatch):
    """A trial checks the config on the small variant first, then times it through bench.bench_plans
    (rotating sets past L2, the interleaved-replay median), handing over the shared inputs."""
    from mla_var3.runtime import autotune
    calls = []
    monkeypatch.setattr(check, "check_one", lambda plan, small, **kw: calls.append(("check", small.key()))
                        or types.SimpleNamespace(status="pass", reason=""))
    monkeypatch.setattr(devices, "current_device", lambda: "the-gpu")

    def fake_bench_plans(entries, problem, device, *, seed, rep_ms, inputs):
        calls.append(("bench", [t for _, t in entries], device, rep_ms, inputs))
        return [{"time_us": {"median": 12.5}}]
    monkeypatch.setattr(bench, "bench_plans", fake_bench_plans)
    problem = mla.MlaDecodeProblem(b=4, s_q=1, h_q=16, seqlen=4096)
    plan = registry.get_plan("flash_mla_decode_v16")
    tiling = plan.default_tiling(problem)
    got = autotune.trial_in_process(plan, problem, tiling, inputs="shared", rep_ms=7.0)
    assert got == {"status": "ok", "time_us": 12.5}
    assert calls == [("check", problem.small_variant().key()), ("bench", [tiling], "the-gpu", 7.0, "shared")]


def test_a_tune_run_prints_every_trial_and_keeps_a_tune_record(tmp_path, capsys):
    from mla_var3.cli.kernel import tune_reporter
    from mla_var3.runtime import autotune, records
    plan = registry.get_plan("torch_mla_decode_v1")
    problem = mla.MlaDecodeProblem(b=2, s_q=1, h_q=16, seqlen=64)
    good, slow = plan.Tiling(batch_chunk=8), plan.Tiling(batch_chunk=2)
    result = autotune.TuneResult(best=good, best_us=3.5, trials=[
        {"tiling": slow.key(), "status": "ok", "time_us": 7.0},
        {"tiling": good.key(), "status": "ok", "time_us": 3.5},
        {"tiling": "batch_chunk=0", "status": "invalid", "error": "batch_chunk must be >= 1"}])
    tune_reporter(tmp_path)(plan, problem, result)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[1].endswith("<- best") and "invalid: batch_chunk must be >= 1" in lines[2]
    (rec,) = records.load(tmp_path)
    assert rec["kind"] == "tune" and rec["tiling_key"] == good.key() and rec["best_us"] == 3.5
    assert [t["tiling"] for t in rec["trials"]] == [slow.key(), good.key(), "batch_chunk=0"]


def test_compile_only_with_autotune_covers_each_config_of_a_shape_once(monkeypatch, capsys):
    """`--compile-only --autotune` compiles every config of each problem's search space (what a
    later `--autotune` on those problems builds), each (static shape, tiling) once."""
    from mla_var3.cli.kernel import main
    plan = registry.get_plan("flash_mla_decode_v17")
    calls = []
    monkeypatch.setattr(type(plan), "compile_only",
                        lambda self, problem, arch, tiling=None: calls.append((problem.static_key(), tiling.key()))
                        or {"compiled": True})
    assert main(["flash_mla_decode_v17", "--grid=small_batch", "--compile-only", "--autotune"]) == 0
    problems = mla.MlaDecodeProblem.grid("small_batch")
    want = {(p.static_key(), t.key()) for p in problems for t in plan.autotune_configs(p)}
    assert len(calls) == len(set(calls)) and set(calls) == want
    assert len(capsys.readouterr().out.splitlines()) == len(want)


def test_compile_only_with_tiling_builds_that_tiling_once_per_shape(monkeypatch, capsys):
    """`--compile-only --tiling=...` builds the given tiling (what a later run with the same
    --tiling needs in the AOT cache), once per static shape, not the default one."""
    from mla_var3.cli.kernel import main
    plan = registry.get_plan("flash_mla_decode_v17")
    calls = []
    monkeypatch.setattr(type(plan), "compile_only",
                        lambda self, problem, arch, tiling=None: calls.append((problem.static_key(), tiling and tiling.key()))
                        or {"compiled": True})
    assert main(["flash_mla_decode_v17", "--grid=small_batch", "--compile-only", "--tiling", "chunk=22"]) == 0
    want = plan.Tiling(chunk=22).key()
    shapes = {p.static_key() for p in mla.MlaDecodeProblem.grid("small_batch")}
    assert sorted(calls) == sorted((k, want) for k in shapes)
    capsys.readouterr()


def test_a_bench_record_keeps_every_replay_in_the_order_timed():
    """The spread of a kernel's replays (clock drift, throttling) is data: the record keeps each
    replay's per-launch time, not only median/min/max."""
    stats = bench.per_call_stats([2.0, 3.0, 2.5], n_sets=2, rotated_bytes=10)
    d = stats.to_dict()
    assert d["samples"] == [1000.0, 1500.0, 1250.0] and d["median"] == 1250.0 and d["n"] == 3
    json.dumps(d)


def test_tune_in_process_needs_autotune(capsys):
    from mla_var3.cli.kernel import main
    assert main(["torch_mla_decode_v1", "--tune-in-process"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --tune-in-process: only with --autotune (it says where the trials run)")


def test_autotune_on_request_retunes_past_a_cached_winner_and_stores_the_new_one(tmp_path, monkeypatch):
    """`--autotune` must run every trial even when a winner is cached or committed (else re-tuning
    a version prints nothing and records nothing), and still store what wins."""
    from dataclasses import replace

    from mla_var3 import jobs
    from mla_var3.runtime import autotune
    monkeypatch.setenv("MLA_VAR3_CACHE", str(tmp_path))
    h200 = replace(devices.load_devices()["H200"], name="NVIDIA H200")
    monkeypatch.setattr(devices, "current_device", lambda: h200)
    monkeypatch.setattr(devices, "require_arch", lambda *a, **k: None)
    plan = registry.get_plan("torch_mla_decode_v1")
    problem = mla.MlaDecodeProblem(b=4, s_q=1, h_q=16, seqlen=64)
    old, new = plan.Tiling(batch_chunk=2), plan.Tiling(batch_chunk=8)
    autotune.store(plan, problem, h200.name, old, 9.0)                       # a winner from before
    times = {old.key(): 5.0, new.key(): 3.0}
    monkeypatch.setattr(autotune, "trial_in_process",
                        lambda plan, problem, tiling, **k: {"status": "ok", "time_us": times[tiling.key()]})
    monkeypatch.setattr(plan, "autotune_configs", lambda problem: [old, new])
    monkeypatch.setattr(type(problem), "make_inputs", lambda self, **k: "inputs")   # no GPU here
    seen = []
    best = jobs.choose_tiling(plan, problem, h200, tune=True, isolate=False,
                              on_tuned=lambda p, q, r: seen.append(r))
    assert best == new and len(seen) == 1 and not seen[0].cached and len(seen[0].trials) == 2
    assert autotune.lookup(plan, problem, h200.name) == new                  # stored for later runs
    assert jobs.choose_tiling(plan, problem, h200) == new                    # a plain bench picks it up


def test_two_modes_finds_a_fast_and_a_slow_mode_and_nothing_in_one_mode():
    """bench.two_modes: replays split across a jump of more than 3%, each side with a fifth of them
    (ct v4's b=128 s_q=1 h_q=16 4096 cell: 238-240 us and 252-264 us); one mode with noise, or a
    single slow outlier among ten, is not two modes; the CLI's bench line says so."""
    from mla_var3.cli.kernel import modes_note
    from mla_var3.runtime import bench
    split = [238.5, 252.4, 239.0, 262.6, 250.3, 239.3, 252.1, 253.4, 238.9, 253.3]
    fast, slow, share = bench.two_modes(split)
    assert fast == pytest.approx(238.95) and slow == pytest.approx(252.85) and share == pytest.approx(0.6)
    assert modes_note({"samples": split}) == f"  [two modes: {fast:.1f} and {slow:.1f} us, 60% slow; compare with --stat p10]"
    assert bench.two_modes([145.0 + 0.1 * i for i in range(10)]) is None          # 1% of spread: one mode
    assert bench.two_modes([145.0] * 9 + [170.0]) is None                          # one outlier of ten
    assert bench.two_modes([1.0, 2.0]) is None and modes_note({}) == ""            # too few samples to say


def test_tune_knobs_narrow_the_search_space_to_configs_moving_those_fields():
    """--tune-knobs: the default plus only the configs that move a named field (a campaign on a
    few cells compiles a few configs); a misspelt field is refused with the plan's fields."""
    from mla_var3.runtime.kernel_plan import PlanError
    plan = registry.get_plan("flash_mla_decode_v46")
    p = mla.MlaDecodeProblem(b=128, s_q=1, h_q=128, seqlen=4096, varlen=True)
    base = plan.default_tiling(p)
    every = plan.autotune_configs(p)
    assert plan.tune_configs(p) == every and plan.tune_configs(p, []) == every
    chunks = plan.tune_configs(p, ["chunk"])
    assert base in chunks and len(chunks) < len(every)
    assert all(c == base or c.chunk != base.chunk for c in chunks)
    assert {c.chunk for c in chunks} == {c.chunk for c in every}
    two = plan.tune_configs(p, ["chunk", "refill_warps"])
    assert [c for c in two if c.refill_warps != base.refill_warps] and set(chunks) <= set(two)
    with pytest.raises(PlanError, match="'chnk' not a field of flash_mla_decode_v46's FlashMlaSplitTiling"):
        plan.tune_configs(p, ["chnk"])
