"""--prof_type=ncu --ncu-set=detail, --ncu-rep and the --compare diff, on the CPU.

tests/fixtures/ncu_raw_detail_SYNTHETIC.csv is SYNTHETIC: invented values written in the format
of `ncu --csv --page raw --print-units base` (two profiled processes, flash_mla_decode_v3 then
v4, split + combine kernels, 3 launches each) because no H200 detail run existed yet. Replace it
with a real `--tool-log` from the H200 (docs/workflows/profile-a-kernel.md) and update the
numbers below."""
from pathlib import Path

import pytest

from mla_var3.cli import ncu_view
from mla_var3.cli.kernel import main
from mla_var3.runtime import profiling

FIXTURE = Path(__file__).parent / "fixtures" / "ncu_raw_detail_SYNTHETIC.csv"
V3, V4 = "flash_mla_decode_v3", "flash_mla_decode_v4"


def _table():
    rows = profiling.summarize_launches(profiling.parse_ncu_csv(FIXTURE.read_text()))
    return [{"version": V3 if "_v3_" in r["kernel_name"] else V4, **r} for r in rows]


def test_detail_parser_on_the_fixture():
    rows = profiling.parse_ncu_csv(FIXTURE.read_text())
    assert len(rows) == 12
    split = [r for r in rows if r["kernel_name"].startswith("kernel_cutlass_flash_mla_decode_v4_kernel_")]
    assert len(split) == 3
    r = split[1]                                           # the middle launch: the invented values exactly
    assert r["duration_us"] == pytest.approx(200.0) and r["registers_per_thread"] == 225
    assert r["eligible_warps_per_sched"] == pytest.approx(0.38) and r["issue_slots_pct"] == pytest.approx(24.7)
    assert r["smem_conflicts_st"] == 9216 and r["smem_conflicts_ld"] == 0
    assert r["l2_sectors_read_tex"] == 4718592 and r["dram_sectors_read"] == 4700100
    assert all(r[c] is not None for c in profiling.NCU_DETAIL_METRICS)
    assert len(r["stalls"]) == 17 and "selected" not in r["stalls"]       # 18 reasons, `selected` is no stall
    assert r["stalls"]["barrier"] == pytest.approx(1.4)


def test_basic_rows_have_no_detail_keys():
    rows = profiling.parse_ncu_csv((FIXTURE.parent / "ncu_raw_h200.csv").read_text())
    assert rows and all("stalls" not in r and "issue_slots_pct" not in r for r in rows)
    assert "stalls" not in profiling.summarize_launches(rows)[0]


def test_summary_medians_and_top_five():
    table = _table()
    assert [(r["version"], r["launches"]) for r in table] == [(V3, 3), (V3, 3), (V4, 3), (V4, 3)]
    v3 = table[0]
    assert v3["stalls"]["barrier"] == pytest.approx(2.9)                  # median of 3 launches (jittered +-0.4%)
    top = profiling.top_stalls(v3["stalls"])
    assert [t[0] for t in top] == ["barrier", "wait", "math_pipe_throttle", "no_instruction", "short_scoreboard"]
    assert top[0][2] == pytest.approx(100 * 2.9 / sum(v3["stalls"].values()))
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


def test_detail_view_and_diff():
    table = _table()
    text = ncu_view.format_detail(table)
    assert "eligible/sch" in text and "barrier 2.90 (36%)" in text and "flash_mla_decode_v4_combine_kernel" in text
    moved = {m["metric"]: m for m in ncu_view.diff_rows(table[0], table[2])}
    assert moved["us"]["delta"] == pytest.approx(-50.0) and moved["us"]["pct"] == pytest.approx(-20.0)
    assert moved["stall barrier"]["delta"] == pytest.approx(-1.5)
    assert "stall membar" not in moved and "L2 rd sect" not in moved        # below the thresholds
    diff = ncu_view.format_diff(table, [V3, V4])
    assert "kernel 1 (flash_mla_decode_v4_kernel vs flash_mla_decode_v3_kernel)" in diff
    assert diff.index("stall barrier") < diff.index("tensor %")               # largest change first
    assert "kernel 2" in diff and "nothing moved" in diff.split("kernel 2")[1]


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
    rc = main([V3, "--prof_type=ncu", "--ncu-set=detail", f"--compare={V4}", "--ncu-rep", "--b=64", "--h_q=128",
               "--seqlen=4096", f"--records={tmp_path}"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "warp stall reasons, top five" in out and f"ncu diff: {V4} vs {V3}" in out
    assert f"ncu report {tmp_path}/ncu/{V3}_b=64,s_q=1,h_q=128,seqlen=4096.ncu-rep" in out
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
