"""Profiling modes on the CPU: NVTX range names and nesting, the ncu/sanitizer command lines and
output parsers (fixtures recorded on the H200)."""
from pathlib import Path

import pytest

from mla_var3.runtime import profiling

FIXTURES = Path(__file__).parent / "fixtures"


def test_range_names_use_colons_and_no_filter_syntax():
    assert profiling.range_name("flash_mla_decode_v1", "block_n=64,num_threads=256", "timed") == \
        "flash_mla_decode_v1:block_n_64_num_threads_256:timed"
    assert "/" not in profiling.range_name("a/b", "c/d", "check")
    with pytest.raises(ValueError, match="phase"):
        profiling.range_name("k", "c", "bogus")


@pytest.fixture
def recorder(monkeypatch):
    events = []
    monkeypatch.setitem(profiling._state, "backend",
                        ("fake", lambda name: events.append(("push", name)), lambda: events.append(("pop",))))
    profiling.enable_annotation(True)
    yield events
    profiling.enable_annotation(False)


def test_annotate_pushes_and_pops_in_order(recorder):
    with profiling.annotate("k_v1", "cfg", "compile"):
        pass
    with profiling.annotate("k_v1", "cfg", "timed"):
        with profiling.annotate("k_v1", "cfg", "check"):
            pass
    assert recorder == [("push", "k_v1:cfg:compile"), ("pop",), ("push", "k_v1:cfg:timed"),
                        ("push", "k_v1:cfg:check"), ("pop",), ("pop",)]


def test_annotate_pops_on_error_and_is_off_by_default(recorder):
    with pytest.raises(RuntimeError):
        with profiling.annotate("k", "c", "warmup"):
            raise RuntimeError("boom")
    assert recorder == [("push", "k:c:warmup"), ("pop",)]
    profiling.enable_annotation(False)
    with profiling.annotate("k", "c", "warmup"):
        pass
    assert len(recorder) == 2


def test_check_runs_inside_check_ranges(recorder):
    from mla_var3.layers.mla import decode as mla
    from mla_var3.runtime import check, registry
    plan = registry.get_plan("torch_mla_decode_v1")
    check.check_plan(plan, [mla.grid("smoke")[0]], seeds=(0,), extra_seeds=(), device="cpu")
    names = [e[1] for e in recorder if e[0] == "push"]
    assert names == ["torch_mla_decode_v1:batch_chunk_2:compile", "torch_mla_decode_v1:batch_chunk_2:check"]
    assert sum(e[0] == "pop" for e in recorder) == 2


def test_torch_fallback_says_so_once(monkeypatch, capsys):
    import builtins
    real_import = builtins.__import__

    def no_nvtx(name, *a, **k):
        if name == "nvtx":
            raise ImportError("no nvtx")
        return real_import(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_nvtx)
    monkeypatch.setitem(profiling._state, "backend", None)
    monkeypatch.setitem(profiling._state, "notice", False)
    assert profiling._backend()[0] == "torch.cuda.nvtx"
    monkeypatch.setitem(profiling._state, "backend", None)
    profiling._backend()
    assert capsys.readouterr().err.count("nvtx package is missing") == 1
    monkeypatch.setitem(profiling._state, "backend", None)


def test_nsys_line_names_the_ranges():
    line = profiling.nsys_command(["flash_mla_decode", "--b=128"])
    assert line.startswith("nsys profile --trace=cuda,nvtx") and "-m mla_var3.kernel flash_mla_decode --b=128" in line


def test_ncu_command_never_touches_clocks(monkeypatch):
    monkeypatch.setattr(profiling, "find_tool", lambda name: f"/usr/bin/{name}")
    cmd = profiling.ncu_command(["flash_mla_decode_v1", "--prof_inner=ncu"], "flash_mla_decode_v1:cfg")
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--nvtx-include") + 1] == "flash_mla_decode_v1:cfg:profile/"
    assert "--csv" in cmd and cmd[cmd.index("--page") + 1] == "raw"
    metrics = cmd[cmd.index("--metrics") + 1].split(",")
    assert len(metrics) == len(profiling.NCU_METRICS)
    san = profiling.sanitizer_command("racecheck", ["x"])
    assert san[san.index("--report-api-errors") + 1] == "no" and san[san.index("--tool") + 1] == "racecheck"
    with pytest.raises(ValueError):
        profiling.sanitizer_command("initcheck", ["x"])
    detail = profiling.sanitizer_command("racecheck", ["x"], hazards=True)
    assert detail[detail.index("--racecheck-report") + 1] == "hazard" and "--print-level" in detail
    with pytest.raises(ValueError):
        profiling.sanitizer_command("memcheck", ["x"], hazards=True)


def test_sanitizer_summaries():
    clean = "========= COMPUTE-SANITIZER\nmla_var3-inner: done\n========= ERROR SUMMARY: 0 errors\n"
    assert profiling.parse_sanitizer(clean) == {"errors": 0, "first": []}
    bad = ("========= COMPUTE-SANITIZER\n========= Invalid __global__ read of size 2 bytes\n"
           "=========     at kernel+0x1b0\n========= ERROR SUMMARY: 3 errors\n")
    res = profiling.parse_sanitizer(bad)
    assert res["errors"] == 3 and res["first"][0].startswith("========= Invalid __global__ read")
    race = "========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)\n"
    assert profiling.parse_sanitizer(race)["errors"] == 1
    # racecheck's two-line hazard (as the H200 printed it for flash_mla_decode_v6, the second line
    # in racecheck's documented form): both program counters kept, the mangled name cut
    mangled = ("kernel_cutlass_flash_mla_decode_v6_kernel_mla_var3kernelcute_pythonmlaflash_mla_decodeflash_mla_decode_v6"
               "kernelFlashMlaDecodeKernel_object_at__CopyAtom_ThrID10_TVLayoutSrc1409601_TVLayout_0")
    two = (f"========= Error: Race reported between Write access at {mangled}+0x6b90 in kernel.py:369\n"
           f"=========     and Read access at {mangled}+0x6c40 in kernel.py:404 [128 hazards]\n"
           "========= RACECHECK SUMMARY: 6 hazards displayed (6 errors, 0 warnings)\n")
    res = profiling.parse_sanitizer(two)
    assert res["errors"] == 6
    assert res["first"] == ["========= Error: Race reported between Write access at "
                            "kernel_cutlass_flash_mla_decode_v6_kernel...+0x6b90 in kernel.py:369 and Read access at "
                            "kernel_cutlass_flash_mla_decode_v6_kernel...+0x6c40 in kernel.py:404 [128 hazards]"]
    assert profiling.parse_sanitizer("Segmentation fault")["errors"] is None


def test_summarize_takes_the_median_per_kernel():
    rows = [{"kernel_name": "a", **{c: float(i) for c in profiling.NCU_METRICS}} for i in (1, 5, 3)]
    rows.append({"kernel_name": "b", **{c: None for c in profiling.NCU_METRICS}})
    out = {r["kernel_name"]: r for r in profiling.summarize_launches(rows)}
    assert out["a"]["launches"] == 3 and out["a"]["duration_us"] == 3.0 and out["b"]["dram_gbps"] is None


def test_ncu_parser_on_the_h200_fixture():
    """tests/fixtures/ncu_raw_h200.csv: the harness's ncu run on the H200 (2026-11-29), columns
    trimmed to the ones parsed, values as ncu printed them (b=128 s_q=1 h_q=64 seqlen=4096)."""
    rows = profiling.parse_ncu_csv((FIXTURES / "ncu_raw_h200.csv").read_text())
    assert len(rows) == 3 + 3 + 4
    flash = [r for r in rows if r["kernel_name"].startswith("kernel_cutlass_kernel_mla_var3")]
    assert len(flash) == 3
    f = flash[0]
    assert f["duration_us"] == pytest.approx(189.792)
    assert f["tensor_pipe_pct"] == pytest.approx(71.71)
    assert f["dram_gbps"] == pytest.approx(3245.41, rel=1e-4)
    assert f["smem_per_block_kb"] == pytest.approx(218.0)
    assert f["registers_per_thread"] == 210 and 0 < f["l2_hit_rate_pct"] < 100
    assert all(f[c] is not None for c in profiling.NCU_METRICS if c not in profiling.CLOCK_COLUMNS)
    ct_rows = [r for r in rows if r["kernel_name"].startswith("mla_decode_kernel")]
    assert len(ct_rows) == 3 and ct_rows[0]["registers_per_thread"] == 168
    summary = {r["kernel_name"]: r for r in profiling.summarize_launches(rows)}
    assert summary[f["kernel_name"]]["launches"] == 3


def test_ncu_parser_tolerates_noise_and_missing_metrics():
    text = 'noise\n"ID","Kernel Name","gpu__time_duration.sum"\n"","","usecond"\n"0","k","1,500.5"\ntrailing\n'
    (row,) = profiling.parse_ncu_csv(text)
    assert row["kernel_name"] == "k" and row["duration_us"] == pytest.approx(1500.5)
    assert row["dram_gbps"] is None
    assert profiling.parse_ncu_csv("==PROF== no kernels were profiled") == []


@pytest.mark.parametrize("prof, tool", [("ncu", "ncu"), ("sanitize", "compute-sanitizer")])
def test_missing_profiler_is_one_line_before_any_work(prof, tool, monkeypatch, capsys):
    import shutil

    from mla_var3.cli.kernel import main
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert main(["torch_mla_decode", f"--prof_type={prof}", "--b=2", "--seqlen=64"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {tool}: not found on PATH (it ships with the CUDA toolkit; needed by --prof_type)"


def test_racecheck_hazard_report_groups_by_instruction_pair():
    """tests/fixtures/racecheck_hazard_h200_v9.txt: `compute-sanitizer --tool racecheck
    --racecheck-report hazard --print-level info` on flash_mla_decode_v9 (H200, 2026-12-01, b=2
    s_q=2 h_q=16 seqlens 65,130), the first four hazards of each instruction pair and CTA kept,
    host backtraces as printed."""
    res = profiling.parse_racecheck_hazards((FIXTURES / "racecheck_hazard_h200_v9.txt").read_text())
    assert (res["errors"], res["displayed"]) == (320, 100)
    rows = {tuple(g["pcs"]): g for g in res["groups"]}
    assert set(rows) == {("+0xa040", "+0xa070"), ("+0x5c20", "+0x7140")}
    sums, stats = rows[("+0xa040", "+0xa070")], rows[("+0x5c20", "+0x7140")]
    assert sums["kind"] == "RAW" and sums["accesses"] == "Write->Read" and sums["count"] == 8
    assert sums["blocks"] == ["(0,1,0)", "(0,2,1)"] and sums["warpgroups"] == [[0], [1]]
    assert sums["threads"] == [[64, 64], [192, 192]] and sums["smem"] == [0x928, 0x92B]
    assert stats["blocks"] == ["(0,1,0)"] and stats["count"] == 4
    table = profiling.racecheck_hazard_table(res)
    assert "(100 of 320 reported hazards)" in table.splitlines()[0]
    assert "+0xa040 -> +0xa070  8  (0,1,0) (0,2,1)  64-64 (WG0)" in table
    assert profiling.parse_racecheck_hazards("========= ERROR SUMMARY: 0 errors") == {
        "errors": None, "displayed": None, "groups": []}


def test_racecheck_detail_runs_the_hazard_report_and_records_it(monkeypatch, tmp_path, capsys):
    from mla_var3.cli import profile
    from mla_var3.cli.kernel import main
    hazard_text = (FIXTURES / "racecheck_hazard_h200_v9.txt").read_text()
    monkeypatch.setattr(profiling, "find_tool", lambda name: f"/usr/bin/{name}")
    calls = []

    def run(cmd):
        calls.append(cmd)
        if "hazard" in cmd:
            return 1, hazard_text
        return 0, "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
    monkeypatch.setattr(profile, "_run_tool", run)
    monkeypatch.setattr(profile, "choose_tiling", lambda plan, problem: plan.default_tiling(problem))
    assert main(["torch_mla_decode_v1", "--prof_type=sanitize", "--racecheck-detail", f"--records={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert [c[c.index("--tool") + 1] for c in calls] == ["memcheck", "racecheck", "racecheck"]
    assert calls[2][calls[2].index("--racecheck-report") + 1] == "hazard"
    assert "racecheck hazards by instruction pair (100 of 320 reported hazards)" in out
    import json
    (rec,) = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    detail = rec["rows"][-1]
    assert detail["tool"] == "racecheck-hazards" and detail["errors"] == 320 and len(detail["groups"]) == 2


def test_racecheck_detail_needs_sanitize(capsys):
    from mla_var3.cli.kernel import main
    assert main(["torch_mla_decode_v1", "--racecheck-detail"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --racecheck-detail: only with --prof_type=sanitize (got --prof_type=disabled)")


def test_ncu_clock_columns_convert_to_mhz_and_thousands_of_cycles():
    """sm__cycles_elapsed.avg.per_second in the units ncu prints it (cycle/nsecond, Hz, GHz) -> MHz;
    sm__cycles_elapsed.max (cycle, Kcycle) -> thousands of cycles; the ratio columns in "cycle"
    without a conversion stay as printed."""
    head = '"ID","Kernel Name","sm__cycles_elapsed.avg.per_second","sm__cycles_elapsed.max"\n'
    for rate_unit, rate, mhz in (("cycle/nsecond", "1.65", 1650.0), ("Hz", "1,650,000,000", 1650.0), ("GHz", "1.65", 1650.0)):
        for cyc_unit, cyc, k in (("cycle", "402,600", 402.6), ("Kcycle", "402.6", 402.6)):
            text = head + f'"","","{rate_unit}","{cyc_unit}"\n"0","k","{rate}","{cyc}"\n'
            (row,) = profiling.parse_ncu_csv(text)
            assert row["sm_mhz"] == pytest.approx(mhz) and row["sm_kcycles"] == pytest.approx(k)
    assert "sm__cycles_elapsed.max" in profiling.ncu_metrics() and "sm__cycles_elapsed.avg.per_second" in profiling.ncu_metrics()
