"""Every registered kernel against the float32 reference, one test per (kernel, problem) of the
`check` grid so `-k` selects one (needs a GPU); page sizes a version declares unsupported are
skipped with its reason."""
import pytest

from gpu_helpers import assert_check_passes, runnable_plan
from graph_replay import replay_with_new_lengths
from mla_var3.layers.mla import decode as mla
from mla_var3.runtime import check, devices, registry

ENTRIES = [e.name for e in registry.all_entries() if e.load().problem_kind is mla.MlaDecodeProblem]
PROBLEMS = mla.grid("check")


@pytest.mark.gpu
@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.key() for p in PROBLEMS])
@pytest.mark.parametrize("name", ENTRIES)
def test_kernel_matches_reference(name, problem):
    plan = registry.get_plan(name)
    missing = plan.unavailable()
    if missing:
        pytest.skip(f"{name}: {missing}")
    here = devices.current_device()
    if not devices.arch_supported(plan.arch, here.arch):
        pytest.skip(f"{name} needs {plan.arch}; this GPU is {here.arch}")
    if plan.supports(problem):
        pytest.skip(f"{name}: " + "; ".join(plan.supports(problem)))
    results = assert_check_passes(plan, problem, seeds=(0, 1), extra_seeds=(0,))
    assert len(results) == 3


@pytest.mark.gpu
def test_bench_writes_a_valid_record(tmp_path):
    from mla_var3 import jobs
    from mla_var3.runtime import bench, records
    plan = registry.get_plan("torch_mla_decode_v1")
    problem = mla.MlaDecodeProblem(b=8, s_q=1, h_q=16, seqlen=256)
    rec = jobs.bench_record(plan, problem, devices.current_device(), rep_ms=10)
    records.append(rec, tmp_path)
    assert rec["time_us"]["median"] > 0 and rec["time_us"]["n_sets"] >= 1 and rec["stages"] == ["main"]
    assert rec["time_us"]["rotated_bytes"] >= 3 * devices.current_device().l2_bytes or rec["time_us"]["n_sets"] == bench.MAX_SETS


@pytest.mark.gpu
def test_compared_plans_are_timed_interleaved(tmp_path):
    """Two plans of one problem go through one interleaved bench call: both records carry the
    same clock readings and `interleaved_with` = 1; the same plan twice (an A/A run) times level."""
    from mla_var3 import jobs
    from mla_var3.runtime import records
    plan = registry.get_plan("torch_mla_decode_v1")
    problem = mla.MlaDecodeProblem(b=8, s_q=1, h_q=16, seqlen=256)
    a, b = jobs.bench_records([plan, plan], problem, devices.current_device(), rep_ms=10)
    for rec in (a, b):
        records.validate_record(rec)
        assert rec["time_us"]["interleaved_with"] == 1 and rec["time_us"]["n"] == 10
    assert a["clocks_before"] == b["clocks_before"] and a["clocks_after"] == b["clocks_after"]
    assert 0.8 < a["time_us"]["median"] / b["time_us"]["median"] < 1.25
    for rec in (a, b):                # each plan's own clock, read while its timed replays ran
        during = rec["clocks_during"]
        assert 300 < during["sm_mhz"] < 3000 and during["power_w"] > 0 and len(during["sm_mhz_samples"]) == 10
        assert rec["kcycles"] == pytest.approx(rec["time_us"]["median"] * during["sm_mhz"] / 1000)
        # 10 ms replays span fewer than two of the energy counter's ~100 ms updates: no reading
        assert (during["mj_per_call"], during["power_w_energy"], during["energy_replays"]) == (None, None, 0)


@pytest.mark.gpu
def test_autotune_records_failures_and_caches_the_winner(tmp_path, monkeypatch):
    from mla_var3.runtime import autotune
    monkeypatch.setenv("MLA_VAR3_CACHE", str(tmp_path))
    plan = registry.get_plan("torch_mla_decode_v1")
    problem = mla.MlaDecodeProblem(b=16, s_q=1, h_q=16, seqlen=256)
    T = plan.Tiling
    real_plan = plan.plan

    def flaky(inputs, tiling):          # one config that fails at launch, as a broken compile would
        if tiling.batch_chunk == 4:
            raise RuntimeError("launch failed on purpose")
        return real_plan(inputs, tiling)
    monkeypatch.setattr(plan, "plan", flaky)
    res = autotune.autotune(plan, problem, configs=[T(batch_chunk=16), T(batch_chunk=4), T(batch_chunk=0)], rep_ms=5)
    status = {t["tiling"]: t["status"] for t in res.trials}
    assert status == {"batch_chunk=16": "ok", "batch_chunk=4": "failed", "batch_chunk=0": "invalid"}
    assert res.best == T(batch_chunk=16) and res.best_us > 0
    again = autotune.autotune(plan, problem, configs=[T(batch_chunk=16)])
    assert again.cached and again.best == T(batch_chunk=16)


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", mla.PAGE_SIZES)
@pytest.mark.parametrize("name", ENTRIES)
def test_cuda_graph_replay_with_new_lengths(name, page_size):
    """Capture one call, change the lengths in place (same shapes), replay: the answer must follow
    the new lengths (a schedule computed on the host at capture time would not); at every page
    size the version supports."""
    plan = registry.get_plan(name)
    if plan.unavailable():
        pytest.skip(f"{name}: {plan.unavailable()}")
    if not devices.arch_supported(plan.arch, devices.current_device().arch):
        pytest.skip(f"{name} needs {plan.arch}")
    problem = mla.MlaDecodeProblem(b=3, s_q=2, h_q=64, seqlens=(900, 900, 900), page_size=page_size)
    if plan.supports(problem):
        pytest.skip(f"{name}: " + "; ".join(plan.supports(problem)))
    inputs = problem.make_inputs(seed=0, device="cuda")
    # a peer's reusable metadata is, as its library documents, only valid for the lengths it was made for
    tiling = plan.Tiling(metadata="per_call") if plan.language == "peer" else None
    kern = plan.build(inputs, tiling)
    kern.compile()
    outputs, replayed = replay_with_new_lengths(problem, kern, inputs, (37, 900, 513))
    cmp = problem.compare(outputs, problem.reference(replayed))
    assert cmp.passed, cmp.reason


@pytest.mark.gpu
def test_autotune_rejects_wrong_answers_before_timing_and_isolates(tmp_path, monkeypatch):
    from mla_var3.runtime import autotune
    from mla_var3.runtime.torch_kernel import TorchKernel
    monkeypatch.setenv("MLA_VAR3_CACHE", str(tmp_path))
    plan = registry.get_plan("torch_mla_decode_v1")
    problem = mla.MlaDecodeProblem(b=16, s_q=1, h_q=16, seqlen=256)
    real_plan = plan.plan

    def wrong_for_8(inputs, tiling):     # batch_chunk=8 "computes" zeros: fast and wrong
        if tiling.batch_chunk == 8:
            return plan.runtime(tiling, TorchKernel(lambda x, outs, ws: [t.zero_() for t in outs]))
        return real_plan(inputs, tiling)
    monkeypatch.setattr(plan, "plan", wrong_for_8)
    T = plan.Tiling
    res = autotune.autotune(plan, problem, configs=[T(batch_chunk=8), T(batch_chunk=16)], rep_ms=5, use_cache=False)
    status = {t["tiling"]: t["status"] for t in res.trials}
    assert status == {"batch_chunk=8": "wrong", "batch_chunk=16": "ok"} and res.best == T(batch_chunk=16)
    iso = autotune.autotune(registry.get_plan("torch_mla_decode_v1"), problem, configs=[T(batch_chunk=16), T(batch_chunk=0)],
                            rep_ms=5, use_cache=False, isolate=True, timeout_s=120)
    assert [t["status"] for t in iso.trials] == ["ok", "invalid"] and iso.best_us > 0


NEWEST = [e.name for e in registry.newest_entries() if e.load().problem_kind is mla.MlaDecodeProblem]


@pytest.mark.gpu
@pytest.mark.parametrize("name", NEWEST)
def test_compile_cache_keeps_shape_classes_tilings_and_options_apart(name, monkeypatch):
    """Back to back in one process: two shape classes (s_q, h_q are compile-time), each plan's
    autotune tilings, then the same again with line info on (another compile option). A compile
    cache keyed too coarsely would hand one of them another's kernel and fail the comparison."""
    from mla_var3.runtime import cute_kernel
    plan = runnable_plan(name)
    problems = [mla.MlaDecodeProblem(b=5, s_q=1, h_q=16, seqlen=700, varlen=True),
                mla.MlaDecodeProblem(b=3, s_q=2, h_q=128, seqlen=1500, varlen=True)]
    failed = []
    for line_info in (False, True):
        monkeypatch.setenv("MLA_VAR3_LINEINFO", "1" if line_info else "0")
        assert cute_kernel.line_info_enabled() == line_info
        for problem in problems:
            if plan.supports(problem):
                continue
            for tiling in plan.autotune_configs(problem)[:3]:
                if tiling.validate(problem, devices.current_device()):
                    continue
                r = check.check_one(plan, problem, seed=1, tiling=tiling)
                if not r.passed:
                    failed.append(f"lineinfo={line_info} {problem.key()} {tiling.key()}: {r.reason}")
    assert not failed, "\n".join(failed)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ENTRIES)
def test_same_inputs_give_bit_identical_outputs(name):
    """Determinism: two calls on the same inputs (varlen, causal, split-KV cells included) give the
    same bits; every kernel here reduces in a fixed order (no atomics in a reduction; the
    longest-first order kernels of flash_mla_decode_v14+ use atomics only to place work items,
    which any CTA computes the same way), so any difference is a bug."""
    import torch
    plan = runnable_plan(name)
    problem = mla.MlaDecodeProblem(b=9, s_q=2, h_q=64, seqlen=3000, varlen=True)
    inputs = problem.make_inputs(seed=3, device="cuda")
    tiling = plan.Tiling(metadata="per_call") if plan.language == "peer" else None
    kern = plan.build(inputs, tiling)
    kern.compile()
    first = [t.clone() for t in kern.run(inputs)]
    for _ in range(3):
        again = kern.run(inputs)
        for a, b in zip(first, again):
            assert torch.equal(a.view(torch.int32) if a.dtype == torch.float32 else a.view(torch.int16),
                               b.view(torch.int32) if b.dtype == torch.float32 else b.view(torch.int16))
