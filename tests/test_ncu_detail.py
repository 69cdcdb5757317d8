"""--prof_type=ncu --ncu-set=detail, --ncu-rep and the --compare diff, on the CPU.

tests/fixtures/ncu_raw_detail_h200_v4_v3.csv is a real H200 capture, kept as ncu wrote it (its
==WARNING== / ==PROF== lines and the program's own line included): the `--tool-log` of
`python -m mla_var3.kernel flash_mla_decode_v4 --prof_type=ncu --ncu-set=detail
--compare=flash_mla_decode_v3 --b=64 --h_q=128 --seqlen=4096`, run on the H200 on 2026-12-01
(`ncu --csv --page raw --print-units base`, two profiled processes, v4 then v3, split + combine
kernel, 3 launches each). The numbers below are read from it; the tables that run printed are
the ones these tests rebuild from it."""
from pathlib import Path

import pytest

from mla_var3.cli import ncu_view
from mla_var3.cli.kernel import main
from mla_var3.runtime import profiling

FIXTURE = Path(__file__).parent / "fixtures" / "ncu_raw_detail_h200_v4_v3.csv"
V3, V4, V6 = "flash_mla_decode_v3", "flash_mla_decode_v4", "flash_mla_decode_v6"
RAW = "kernel_cutlass_{}_mla_var3kernelcute_pythonmlaflash_mla_decode_0"      # CuTe DSL's kernel name, shortened


def _table():
    """As the CLI builds it: one row per kernel and version, the version that ran first (v4) first."""
    rows = profiling.summarize_launches(profiling.parse_ncu_csv(FIXTURE.read_text()))
    return [{"version": V3 if "_v3_" in r["kernel_name"] else V4, **r} for r in rows]


def test_detail_parser_on_the_fixture():
    rows = profiling.parse_ncu_csv(FIXTURE.read_text())
    assert len(rows) == 12                                 # 2 processes x 2 kernels x 3 launches
    split = [r for r in rows if r["kernel_name"].startswith("kernel_cutlass_flash_mla_decode_v4_kernel_")]
    assert len(split) == 3
    assert [r["duration_us"] for r in split] == pytest.approx([152.224, 151.456, 150.208])   # ns -> us
    r = split[1]                                           # the middle launch
    assert r["registers_per_thread"] == 228 and r["smem_per_block_kb"] == pytest.approx(219.0)
    assert r["eligible_warps_per_sched"] == pytest.approx(0.41) and r["issue_slots_pct"] == pytest.approx(32.36)
    assert r["warp_cycles_per_issue"] == pytest.approx(6.18) and r["active_warps_per_sched"] == pytest.approx(2.0)
    assert r["smem_conflicts_st"] == 2004 and r["smem_conflicts_ld"] == 0
    assert r["l2_sectors_read_tex"] == 9759978 and r["dram_sectors_read"] == 9736472
    assert all(r[c] is not None for c in profiling.NCU_DETAIL_METRICS if c not in profiling.ADDED_DETAIL_COLUMNS)
    assert all(r[c] is None for c in profiling.ADDED_DETAIL_COLUMNS)     # captured before they were asked for
    assert len(r["stalls"]) == 18 and "selected" not in r["stalls"]       # 19 reasons, `selected` is no stall
    assert r["stalls"]["barrier"] == pytest.approx(1.43) and r["stalls"]["long_scoreboard"] == pytest.approx(1.36)


def test_basic_rows_have_no_detail_keys():
    rows = profiling.parse_ncu_csv((FIXTURE.parent / "ncu_raw_h200.csv").read_text())
    assert rows and all("stalls" not in r and "issue_slots_pct" not in r for r in rows)
    assert "stalls" not in profiling.summarize_launches(rows)[0]


def test_summary_medians_and_top_five():
    table = _table()
    assert [(r["version"], ncu_view.kernel_role(r["kernel_name"]), r["launches"]) for r in table] == [
        (V4, "kernel", 3), (V4, "combine_kernel", 3), (V3, "kernel", 3), (V3, "combine_kernel", 3)]
    v4, v4c, v3 = table[0], table[1], table[2]
    assert v4["duration_us"] == pytest.approx(151.456) and v3["duration_us"] == pytest.approx(172.608)
    assert v4["registers_per_thread"] == 228 and v3["registers_per_thread"] == 193
    assert v4["smem_conflicts_st"] == 2004 and v3["smem_conflicts_st"] == 6461          # medians of 3 launches
    assert v4["stalls"]["long_scoreboard"] == pytest.approx(1.36)                       # of 1.36, 1.36, 1.34
    top = profiling.top_stalls(v4["stalls"])
    assert [t[0] for t in top] == ["barrier", "long_scoreboard", "wait", "dispatch_stall", "not_selected"]
    assert top[0][1:] == pytest.approx((1.43, 100 * 1.43 / 5.15)) and round(top[0][2]) == 28
    assert top[1][1] == pytest.approx(1.36) and round(top[1][2]) == 26
    top3 = profiling.top_stalls(v3["stalls"])
    assert [t[0] for t in top3] == ["barrier", "wait", "gmma", "long_scoreboard", "not_selected"]
    assert top3[0][1] == pytest.approx(2.32) and round(top3[0][2]) == 44
    assert profiling.top_stalls(v4c["stalls"])[0][:2] == ("long_scoreboard", pytest.approx(14.88))
    assert profiling.top_stalls(None) == [] and profiling.top_stalls({"a": 0.0}) == []


def test_stall_columns_keep_only_stall_reasons():
    header = ["ID", "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
              "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio",
              "smsp__average_warps_issue_stalled_long_scoreboard_not_issued_per_issue_active.ratio",
              "smsp__average_warp_latency_per_inst_issued.ratio"]
    assert profiling.stall_columns(header) == {"barrier": header[1]}


def test_detail_command_asks_for_the_stall_family(monkeypatch):
    monkeypatch.setattr(profiling, "find_tool", lambda name: f"/usr/bin/{name}")
    basic = profiling.ncu_command(["x"], "p")
    detail = profiling.ncu_command(["x"], "p", detail=True)
    m_basic = basic[basic.index("--metrics") + 1].split(",")
    m_detail = detail[detail.index("--metrics") + 1].split(",")
    assert len(m_basic) == len(profiling.NCU_METRICS)
    assert set(m_basic) < set(m_detail)
    assert "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio" in m_detail
    assert "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum" in m_detail
    assert "smsp__warps_eligible.avg.per_cycle_active" in m_detail and "dram__sectors_read.sum" in m_detail
    assert detail[detail.index("--clock-control") + 1] == "none"
    rep = profiling.ncu_report_command(["x"], "p", "/r/v4", tool="/usr/bin/ncu")
    assert rep[0] == "/usr/bin/ncu" and rep[rep.index("--set") + 1] == "full" and rep[rep.index("-o") + 1] == "/r/v4"
    assert "-f" in rep and rep[rep.index("--clock-control") + 1] == "none"


def test_detail_view():
    text = ncu_view.format_detail(_table())
    lines = text.splitlines()
    v4 = next(line for line in lines if line.startswith(V4) and "flash_mla_decode_v4_kernel " in line
              and "barrier" in line)
    assert "barrier 1.43 (28%)" in v4 and "long_scoreboard 1.36 (26%)" in v4 and "wait 0.91 (18%)" in v4
    v3 = next(line for line in lines if line.startswith(V3) and "flash_mla_decode_v3_kernel " in line
              and "barrier" in line)
    assert "barrier 2.32 (44%)" in v3 and "gmma 0.43 (8%)" in v3
    assert "eligible/sch" in text and "long_scoreboard 14.88 (41%)" in text
    detail_v4 = next(line for line in lines if line.startswith(V4) and "barrier" not in line
                     and "flash_mla_decode_v4_kernel " in line)
    assert detail_v4.split()[2:8] == ["6.18", "2.00", "0.41", "0.32", "32.4", "0.00"]
    assert detail_v4.split()[8] == "2004"


@pytest.mark.parametrize("name, role", [
    ("kernel_cutlass_flash_mla_decode_v4_kernel_mla_var3kernelcute_pythonmlaflash_mla_decodeflash_mla_decode_v4"
     "kernelFlashMlaDecodeKernel_object_at__CopyAtom_ThrID10_TVLayoutSrc1409601_TVLayout_0", "kernel"),
    ("kernel_cutlass_flash_mla_decode_v6_schedule_kernel_mla_var3kernelcute_pythonmlaflash_mla_decodeflash_mla_"
     "decode_v6scheduleFlashMlaScheduleKernel_object_at__tensorptri32gmemo1_tensorptri32_0", "schedule_kernel"),
    ("flash_mla_decode_v6_combine_kernel", "combine_kernel"),
    ("ct_flash_mla_decode_v3_split_kernel_Kt2_A3bf16_3v8l0_4t1_7i16_p16_A2i32_1v4l0_2t1_3i16_p16_Sf32_I1_I128_I64",
     "split_kernel"),
    ("ct_flash_mla_decode_v12_combine_kernel_Kt2_A3f32_7s1t1_p16_I8", "combine_kernel"),
    ("mla_decode_kernel_Kt2_A3bf16_3v8l0_4t1_7i16_p16_Sf32_I1_I64", "mla_decode_kernel"),    # no version: all of it
    ("kernel_cutlass_kernel_mla_var3kernelcute_pythonmlaflash_mla_decodeflash_mla_decode_v1kernelFlashMla_0", "kernel"),
    ("void at::reduce_kernel<512, 1>(T3)", "void at::reduce_kernel<512, 1>"),
])
def test_kernel_role(name, role):
    assert ncu_view.kernel_role(name) == role


def _row(version, function, us, **kw):
    return {"version": version, "kernel_name": RAW.format(function), "launches": 3, "duration_us": us, **kw}


def _v6_vs_v4():
    """The kernel rows of an H200 `flash_mla_decode_v6 --prof_type=ncu --ncu-set=detail
    --compare=flash_mla_decode_v4` run (b=128, h_q=16, seqlen=1024), a few of their numbers: v6 launches a
    schedule kernel before split and combine, v4 only split and combine."""
    return [_row(V6, "flash_mla_decode_v6_schedule_kernel", 4.32, registers_per_thread=25.0, smem_per_block_kb=5.0),
            _row(V6, "flash_mla_decode_v6_kernel", 53.0, registers_per_thread=254.0, smem_per_block_kb=219.0,
                 stalls={"long_scoreboard": 2.71, "barrier": 1.73}),
            _row(V6, "flash_mla_decode_v6_combine_kernel", 8.0, registers_per_thread=40.0, smem_per_block_kb=1.0),
            _row(V4, "flash_mla_decode_v4_kernel", 46.3, registers_per_thread=225.0, smem_per_block_kb=219.0,
                 stalls={"long_scoreboard": 2.44, "barrier": 1.60}),
            _row(V4, "flash_mla_decode_v4_combine_kernel", 2.37, registers_per_thread=38.0, smem_per_block_kb=1.0)]


def test_diff_pairs_kernels_by_role():
    rows = _v6_vs_v4()
    pairs, only_base, only_main = ncu_view.pair_kernels(rows[3:], rows[:3])
    assert [(b["kernel_name"], m["kernel_name"], by_role) for b, m, by_role in pairs] == [
        (rows[3]["kernel_name"], rows[1]["kernel_name"], True), (rows[4]["kernel_name"], rows[2]["kernel_name"], True)]
    assert only_base == [] and only_main == [rows[0]]
    diff = ncu_view.format_diff(rows, [V4, V6])                             # `v4 --compare=v6`
    blocks = diff.split("\n\n")
    assert [b.splitlines()[0].split(":")[1] for b in blocks] == [          # in v6's launch order
        f" {V6} vs {V4} (baseline), schedule_kernel", f" {V6} vs {V4} (baseline), kernel",
        f" {V6} vs {V4} (baseline), combine_kernel"]
    assert blocks[0] == f"ncu diff: {V6} vs {V4} (baseline), schedule_kernel: only in {V6} (4.32 us)"   # one line, no table
    split = {line.split()[0]: line.split() for line in blocks[1].splitlines()[3:]}
    assert split["us"] == ["us", "46.3", "53.0", "+6.70", "+14.5%"]           # v6's split against v4's split
    assert split["regs"] == ["regs", "225", "254", "+29.0", "+12.9%"]
    assert "smem" not in blocks[1] and "20197441" not in diff                 # not the schedule kernel's numbers
    combine = {line.split()[0]: line.split() for line in blocks[2].splitlines()[3:]}
    assert combine["us"][1:3] == ["2.37", "8.00"]
    # the other way round: the schedule kernel is only in the baseline
    back = ncu_view.format_diff(rows, [V6, V4])
    assert back.endswith(f"ncu diff: {V4} vs {V6} (baseline), schedule_kernel: only in {V6} (4.32 us)")
    assert f"{V4} vs {V6} (baseline), kernel:" in back and f"{V4} vs {V6} (baseline), combine_kernel:" in back


def test_diff_falls_back_on_launch_order_only_for_unmatched_roles():
    ct = [{"version": "ct_v3", "kernel_name": "ct_flash_mla_decode_v3_split_kernel_Kt2_A3bf16_I1", "duration_us": 80.0},
          {"version": "ct_v3", "kernel_name": "ct_flash_mla_decode_v3_combine_kernel_Kt2_A3f32_I8", "duration_us": 3.0}]
    cute = [_row(V4, "flash_mla_decode_v4_combine_kernel", 2.0), _row(V4, "flash_mla_decode_v4_kernel", 60.0)]
    pairs, only_base, only_main = ncu_view.pair_kernels(ct, cute)
    assert only_base == only_main == []
    assert [(b["duration_us"], m["duration_us"], by_role) for b, m, by_role in pairs] == [
        (3.0, 2.0, True), (80.0, 60.0, False)]                               # combine by role, the rest by order
    diff = ncu_view.format_diff(ct + cute, ["ct_v3", V4])
    assert f"ncu diff: {V4} vs ct_v3 (baseline), kernel vs split_kernel (no common role: paired by launch order)" in diff
    # unmatched on both sides but not as many: nothing is guessed
    _, only_base, only_main = ncu_view.pair_kernels(ct, _v6_vs_v4()[:3])
    assert [r["duration_us"] for r in only_base] == [80.0]
    assert [r["duration_us"] for r in only_main] == [4.32, 53.0]


def test_diff_direction_version_minus_baseline():
    table = _table()
    v4, v3 = table[0], table[2]
    moved = {m["metric"]: m for m in ncu_view.diff_rows(v3, v4)}               # baseline v3, evaluated v4
    assert moved["us"]["base"] == pytest.approx(172.608) and moved["us"]["main"] == pytest.approx(151.456)
    assert moved["us"]["delta"] == pytest.approx(151.456 - 172.608)             # v4 is faster: negative
    assert moved["us"]["pct"] == pytest.approx(100 * (151.456 - 172.608) / 172.608)   # relative to the baseline
    assert moved["regs"]["delta"] == 35 and moved["smem confl st"]["delta"] == 2004 - 6461
    assert moved["stall barrier"]["delta"] == pytest.approx(1.43 - 2.32)
    assert moved["stall long_scoreboard"]["delta"] == pytest.approx(1.36 - 0.32)
    assert "stall wait" not in moved and "L2 rd sect" not in moved and "occup %" not in moved   # below the thresholds
    diff = ncu_view.format_diff(table, [V3, V4])                                # as `v3 --compare=v4` prints it
    blocks = diff.split("\n\n")
    assert len(blocks) == 2
    title, head, _, *cells = blocks[0].splitlines()
    assert title.startswith(f"ncu diff: {V4} vs {V3} (baseline), kernel: what moved (>= 5%, stalls >= 0.1 cyc/issue)")
    assert head.split() == ["metric", V3, V4, "delta", f"({V4}", "-", "baseline)", "change", "(relative", "to",
                            "baseline)"]
    by = {" ".join(c.split()[:-4]): c.split()[-4:] for c in cells}
    assert by["us"] == ["173", "151", "-21.2", "-12.3%"]
    assert by["regs"] == ["193", "228", "+35.0", "+18.1%"]
    assert by["smem confl st"] == ["6461", "2004", "-4457", "-69.0%"]
    assert by["stall barrier"] == ["2.32", "1.43", "-0.89", "-38.4%"]
    assert by["stall long_scoreboard"] == ["0.32", "1.36", "+1.04", "+325.0%"]
    assert list(by)[0] == "stall long_scoreboard" and list(by)[-1] == "us"      # largest relative change first
    pcts = [abs(float(c[-1].rstrip("%"))) for c in by.values()]
    assert pcts == sorted(pcts, reverse=True)
    assert blocks[1].startswith(f"ncu diff: {V4} vs {V3} (baseline), combine_kernel:") and "L2 hit %" in blocks[1]
    # the other direction flips every sign
    back = {m["metric"]: m for m in ncu_view.diff_rows(v4, v3)}
    assert back["us"]["delta"] == pytest.approx(-moved["us"]["delta"]) and back["regs"]["delta"] == -35


def _fake_ncu(monkeypatch, calls):
    from mla_var3.cli import profile
    blocks = FIXTURE.read_text().split("==WARNING==")
    monkeypatch.setattr(profiling, "find_tool", lambda name: f"/usr/bin/{name}")

    def run(cmd):
        calls.append(cmd)
        if "-o" in cmd:                                   # the report run
            return 0, "==PROF== Report: x.ncu-rep"
        name = next(a for a in cmd[cmd.index("mla_var3.kernel") + 1:] if not a.startswith("-"))
        return 0, "==WARNING==" + next(b for b in blocks if f"mla_var3-inner: {name} " in b)
    monkeypatch.setattr(profile, "_run_tool", run)
    monkeypatch.setattr(profile, "choose_tiling", lambda plan, problem: plan.default_tiling(problem))  # no GPU here


def test_ncu_detail_compare_end_to_end(monkeypatch, tmp_path, capsys):
    calls = []
    _fake_ncu(monkeypatch, calls)
    rc = main([V4, "--prof_type=ncu", "--ncu-set=detail", f"--compare={V3}", "--ncu-rep", "--b=64", "--h_q=128",
               "--seqlen=4096", f"--records={tmp_path}"])                # the command the fixture was captured with
    assert rc == 0
    out = capsys.readouterr().out
    assert f"ncu report {tmp_path}/ncu/{V4}_b=64,s_q=1,h_q=128,seqlen=4096.ncu-rep" in out
    lines = out.splitlines()
    # as the H200 run printed them (the basic table's row, the detail and stall tables' rows)
    basic = [line.split() for line in lines if line.startswith("flash_mla_decode_v") and "..." in line]
    assert [(r[0], r[1], r[3], r[9]) for r in basic] == [             # version, kernel, us, regs
        (V4, "kernel_cutlass_flash_mla_decode_v4_ke...", "151", "228"),
        (V4, "kernel_cutlass_flash_mla_decode_v4_co...", "2.8", "38.0"),
        (V3, "kernel_cutlass_flash_mla_decode_v3_ke...", "173", "193"),
        (V3, "kernel_cutlass_flash_mla_decode_v3_co...", "2.8", "38.0")]
    assert (f"{V3}  flash_mla_decode_v3_kernel          barrier 2.32 (44%)           wait 0.99 (19%)"
            "             gmma 0.43 (8%)           long_scoreboard 0.32 (6%)    not_selected 0.31 (6%)") in lines
    assert out.index("warp stall reasons, top five") < out.index(f"ncu diff: {V3} vs {V4} (baseline), kernel: what moved")
    assert out.index(f"ncu diff: {V3} vs {V4} (baseline), kernel:") < out.index(f"ncu diff: {V3} vs {V4} (baseline), combine_kernel:")
    assert "kernel 1" not in out and "launch order" not in out
    csv_runs = [c for c in calls if "--csv" in c]
    assert len(csv_runs) == 2 and all("regex:" in c[c.index("--metrics") + 1] for c in csv_runs)
    import json
    recs = [json.loads(line) for f in tmp_path.glob("*.jsonl") for line in f.read_text().splitlines()]
    assert {r["kernel"] for r in recs} == {V3, V4} and all(r["ncu_set"] == "detail" for r in recs)
    assert all("stalls" in row for r in recs for row in r["rows"])


@pytest.mark.parametrize("argv, message", [
    ([V4, "--ncu-set=detail"], "--ncu-set: only with --prof_type=ncu (got --prof_type=disabled)"),
    ([V4, "--ncu-rep", "--prof_type=timeline"], "--ncu-rep: only with --prof_type=ncu (got --prof_type=timeline)"),
    ([V4, "--prof_type=ncu", "--ncu-set=full"], "invalid choice: 'full'"),
])
def test_ncu_flag_refusals_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_detail_asks_for_l2_hits_and_instructions_and_parses_them():
    """The energy columns (2026-12-02): L2 read hits from the SMs and instructions issued are in the
    detail --metrics and come back as numbers from a capture that has them."""
    metrics = profiling.ncu_metrics(detail=True).split(",")
    assert "lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum" in metrics and "smsp__inst_executed.sum" in metrics
    assert "smsp__inst_executed.sum" not in profiling.ncu_metrics(detail=False).split(",")
    text = FIXTURE.read_text().splitlines()
    head = next(i for i, line in enumerate(text) if line.startswith('"ID"'))
    units = text[head + 1]
    row = text[head + 2]
    extra = ('"lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum","smsp__inst_executed.sum"',
             '"sector","inst"', '"1234567","89012345"')
    capture = "\n".join(text[:head] + [text[head] + "," + extra[0], units + "," + extra[1], row + "," + extra[2]])
    (r,) = profiling.parse_ncu_csv(capture)
    assert r["l2_sectors_read_tex_hit"] == 1234567 and r["inst_executed"] == 89012345


def test_detail_asks_for_local_memory_sectors_and_parses_them():
    """A spill's cost (2026-12-03): local-memory load/store sectors are in the detail --metrics (not
    the basic set) and come back as numbers; an older capture without them gives None."""
    metrics = profiling.ncu_metrics(detail=True).split(",")
    ld, st = "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum"
    assert ld in metrics and st in metrics and ld not in profiling.ncu_metrics(detail=False).split(",")
    text = FIXTURE.read_text().splitlines()
    head = next(i for i, line in enumerate(text) if line.startswith('"ID"'))
    extra = (f'"{ld}","{st}"', '"sector","sector"', '"4096","8"')
    capture = "\n".join(text[:head] + [text[head] + "," + extra[0], text[head + 1] + "," + extra[1],
                                       text[head + 2] + "," + extra[2]])
    (r,) = profiling.parse_ncu_csv(capture)
    assert r["local_sectors_ld"] == 4096 and r["local_sectors_st"] == 8
    assert all(old["local_sectors_ld"] is None for old in profiling.parse_ncu_csv(FIXTURE.read_text()))


def test_detail_asks_for_sm_active_cycles_and_derives_how_busy_the_sms_were():
    """Balance on ragged lengths (2026-12-03): the detail set asks for the SMs' active cycles (mean
    and least), and each row derives SM busy % = mean active / the launch's span in SM cycles; an
    older capture without them gives None, not a crash."""
    metrics = profiling.ncu_metrics(detail=True).split(",")
    avg, least, span = "sm__cycles_active.avg", "sm__cycles_active.min", "sm__cycles_elapsed.max"
    assert avg in metrics and least in metrics and avg not in profiling.ncu_metrics(detail=False).split(",")
    text = FIXTURE.read_text().splitlines()
    head = next(i for i, line in enumerate(text) if line.startswith('"ID"'))
    header = text[head]
    extra = [f'"{avg}","{least}"', '"cycle","cycle"', '"360000","300000"']
    lines = [header + "," + extra[0], text[head + 1] + "," + extra[1], text[head + 2] + "," + extra[2]]
    if span not in header:          # a capture from before the clock columns: give the span too
        lines = [lines[0] + f',"{span}"', lines[1] + ',"cycle"', lines[2] + ',"400000"']
    (r,) = profiling.parse_ncu_csv("\n".join(text[:head] + lines))
    assert r["sm_active_kcycles_avg"] == 360.0 and r["sm_active_kcycles_min"] == 300.0
    assert abs(r["sm_busy_pct"] - 100 * 360 / r["sm_kcycles"]) < 1e-9
    assert abs(r["sm_min_busy_pct"] - 100 * 300 / r["sm_kcycles"]) < 1e-9
    (s,) = profiling.summarize_launches([r, dict(r)])
    assert s["sm_busy_pct"] == r["sm_busy_pct"]
    assert all(old["sm_busy_pct"] is None for old in profiling.parse_ncu_csv(FIXTURE.read_text()))
    rendered = ncu_view.format_detail([{**s, "version": "v"}])
    assert "SM busy %" in rendered and "least SM busy %" in rendered
