"""--prof_type=ncu --ncu-set=source on the CPU: the source-page CSV parser, the launch merge, the
mbarrier-wait pairing and the summary (fixture: rows of flash_mla_decode_v36's split kernel at page
16, two launches, from ncu 2025.3 on the H200, 2026-12-03), and the CLI run with ncu faked."""
import gzip
import json
from pathlib import Path

import pytest

from mla_var3.cli.kernel import main
from mla_var3.runtime import ncu_source, profiling

FIXTURE = Path(__file__).parent / "fixtures" / "ncu_source_h200_v36_page16.csv"
V36, V40 = "flash_mla_decode_v36", "flash_mla_decode_v40"


def _kernels():
    return ncu_source.parse_source_csv(FIXTURE.read_text())


def test_parser_reads_each_launch_with_its_samples_and_stall_reasons():
    ks = _kernels()
    assert len(ks) == 2 and all(len(k.rows) == 52 for k in ks)
    assert ks[0].name.startswith("kernel_cutlass_flash_mla_decode_v36_kernel")
    wait = ks[0].rows[9]
    assert wait.source.startswith("@!P0  BRA") and wait.samples == 3332 and wait.executed == 15872
    assert wait.stalls == {"long_sb": 3330, "wait": 2}                  # the "(Not Issued)" columns left out
    assert ks[0].rows[8].opcode == "SYNCS.PHASECHK.TRANS64.TRYWAIT" and wait.opcode == "BRA"


def test_launches_of_one_kernel_merge_row_by_row():
    ks = _kernels()
    (m,) = ncu_source.merge_launches(ks)
    assert m.launches == 2 and len(m.rows) == 52
    assert m.rows[9].samples == ks[0].rows[9].samples + ks[1].rows[9].samples
    assert m.rows[9].executed == 2 * 15872
    assert m.samples == pytest.approx(ks[0].samples + ks[1].samples)
    assert ks[0].rows[9].samples == 3332, "merging leaves the parsed launches alone"


def test_mbarrier_waits_pair_the_branch_with_its_try_wait():
    (m,) = ncu_source.merge_launches(_kernels())
    waits = ncu_source.mbarrier_waits(m)
    # the producer's empty-barrier wait and two chunk barriers of the math warps; the `@P1 BRA`
    # right after the first loop is not a wait (another predicate)
    assert [(w["index"], w["barrier"]) for w in waits] == [(9, "[R14+URZ+0x98]"), (21, "[R18+URZ+0x10]"),
                                                            (47, "[R18+URZ+0x18]")]
    s = ncu_source.summarize(m, top=3)
    assert [w["index"] for w in s["waits"]] == [9, 47, 21]              # largest first
    assert s["mbarrier_wait_pct"] == pytest.approx(sum(w["pct"] for w in s["waits"]))
    assert list(s["reasons_pct"])[0] == "long_sb" and sum(s["reasons_pct"].values()) == pytest.approx(100, abs=0.5)
    assert [t["index"] for t in s["top"]] == [9, 47, 21]
    text = ncu_source.format_summary(s, top=3)
    assert "mbarrier waits: 95.1% of the samples" in text and "[R14+URZ+0x98]" in text
    both = ncu_source.format_compare(s, s, labels=("p16", "p16"))
    assert both.splitlines()[0].split() == ["p16", "p16"] and "stall long_sb %" in both


def test_module_cli_reads_gzip_and_compares_two(tmp_path, capsys):
    gz = tmp_path / "a.csv.gz"
    gz.write_bytes(gzip.compress(FIXTURE.read_bytes()))
    assert ncu_source.main([str(gz), str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    assert out.count("mbarrier waits:") == 2 and "compared" in out
    empty = tmp_path / "empty.csv"
    empty.write_text("nothing here\n")
    assert ncu_source.main([str(empty)]) == 1


def test_cli_source_set_records_the_csv_and_a_summary(monkeypatch, tmp_path, capsys):
    from mla_var3.cli import profile
    calls = []
    monkeypatch.setattr(profiling, "find_tool", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(profile, "choose_tiling", lambda plan, problem: plan.default_tiling(problem))

    def run(cmd):
        calls.append(cmd)
        return (0, FIXTURE.read_text()) if "--import" in cmd else (0, "==PROF== Report: x.ncu-rep")
    monkeypatch.setattr(profile, "_run_tool", run)
    rc = main([V36, "--prof_type=ncu", "--ncu-set=source", "--b=128", "--s_q=1", "--h_q=16", "--seqlen=4096",
               "--page_size=16", f"--records={tmp_path}"])
    assert rc == 0
    record_cmd, export_cmd = calls
    assert record_cmd[:3] == ["/usr/bin/ncu", "--clock-control", "none"] and "SourceCounters" in record_cmd
    assert export_cmd[-5:] == ["--page", "source", "--csv", "--print-source", "sass"]
    assert export_cmd[2].endswith(".source.ncu-rep") and record_cmd[record_cmd.index("-o") + 1] + ".ncu-rep" == export_cmd[2]
    out = capsys.readouterr().out
    assert "mbarrier waits: 95.1% of the samples" in out
    csv_gz = tmp_path / "ncu" / f"{V36}_b=128,s_q=1,h_q=16,seqlen=4096,page_size=16.source.csv.gz"
    assert gzip.decompress(csv_gz.read_bytes()).decode() == FIXTURE.read_text()
    (rec,) = [json.loads(line) for f in tmp_path.glob("*.jsonl") for line in f.read_text().splitlines()]
    assert rec["ncu_set"] == "source" and rec["source_csv"] == str(csv_gz)
    assert rec["rows"][0]["waits"][0]["barrier"] == "[R14+URZ+0x98]"


def test_cli_source_set_says_when_ncu_fails(monkeypatch, tmp_path, capsys):
    from mla_var3.cli import profile
    monkeypatch.setattr(profiling, "find_tool", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(profile, "choose_tiling", lambda plan, problem: plan.default_tiling(problem))
    monkeypatch.setattr(profile, "_run_tool", lambda cmd: (1, "==ERROR== no permission to the counters"))
    assert main([V36, "--prof_type=ncu", "--ncu-set=source", "--b=2", "--seqlen=128", f"--records={tmp_path}"]) == 1
    assert "ncu source counters failed (rc=1)" in capsys.readouterr().err and not list(tmp_path.glob("*.jsonl"))


def test_profiles_run_the_given_tiling_in_the_inner_run(monkeypatch, tmp_path, capsys):
    """--tiling reaches the profiled run: the '+' form over the problem's own tiling, sent whole to
    the inner run (which parses it instead of choosing), the NVTX filter and the record naming it."""
    from mla_var3.cli import profile
    from mla_var3.runtime import registry
    calls = []
    monkeypatch.setattr(profiling, "find_tool", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(profile, "choose_tiling", lambda plan, problem: plan.default_tiling(problem))
    monkeypatch.setattr(profile, "_run_tool",
                        lambda cmd: calls.append(cmd) or ((0, FIXTURE.read_text()) if "--import" in cmd else (0, "")))
    assert main([V36, "--prof_type=ncu", "--ncu-set=source", "--tiling=+refill_warps=2", "--b=8", "--seqlen=4096",
                 f"--records={tmp_path}"]) == 0
    record_cmd = calls[0]
    given = next(a for a in record_cmd if a.startswith("--tiling="))
    plan = registry.get_plan(V36)
    from mla_var3.cli.tiling import parse_tiling
    from mla_var3.layers.mla.decode import MlaDecodeProblem
    want = plan.default_tiling(MlaDecodeProblem(b=8, seqlen=4096))
    assert want.refill_warps == 1
    got = parse_tiling(plan, given.split("=", 1)[1])
    assert got.refill_warps == 2 and got.chunk == want.chunk and got.order == want.order
    nvtx = record_cmd[record_cmd.index("--nvtx-include") + 1]
    assert "refill_warps_2" in nvtx                          # range names replace "=" (profiling.range_name)
    (rec,) = [json.loads(line) for f in tmp_path.glob("*.jsonl") for line in f.read_text().splitlines()]
    assert rec["tiling"]["refill_warps"] == 2


def test_sample_classes_add_up_and_put_wgmma_waits_apart():
    """The five classes of `sample_classes` partition the samples: the try-wait loops, then
    `WARPGROUP.DEPBAR` (whose stalls ncu names `barrier`), then other `barrier` samples, HGMMA, the rest."""
    (m,) = ncu_source.merge_launches(_kernels())
    c = ncu_source.sample_classes(m)
    assert list(c) == list(ncu_source.CLASSES)
    assert sum(c.values()) == pytest.approx(m.samples)
    assert c["mbarrier waits"] == pytest.approx(sum(w["samples"] for w in ncu_source.mbarrier_waits(m)))
    depbar = sum(r.samples for r in m.rows if r.opcode.startswith("WARPGROUP.DEPBAR"))
    assert c["wgmma waits"] == pytest.approx(depbar)
    s = ncu_source.summarize(m)
    assert s["classes_per_launch"]["mbarrier waits"] == pytest.approx(c["mbarrier waits"] / 2)   # two launches
    assert "by class (samples per launch): mbarrier waits" in ncu_source.format_summary(s)
    assert "  wgmma waits" in ncu_source.format_compare(s, s)


def test_sample_classes_on_hand_made_rows():
    """A DEPBAR whose samples ncu files under `barrier` is a wgmma wait, not a named-barrier wait; an
    LDS right after `BAR.SYNC` carrying `barrier` samples is a named-barrier wait; an HGMMA's own samples
    are issue; a try-wait loop's branch is an mbarrier wait."""
    R = ncu_source.SourceRow
    rows = [R(0, "0", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R6+URZ+0x98], R2", 1, 1, 1, {"long_sb": 1}),
            R(1, "1", "@!P0  BRA 0x7f", 50, 50, 9, {"long_sb": 50}),
            R(2, "2", "HGMMA.64x64x16.F32.BF16 R152, gdesc[UR16], R152, gsb0", 7, 7, 4, {"dispatch": 7}),
            R(3, "3", "WARPGROUP.DEPBAR.LE gsb0, 0x0", 40, 40, 4, {"barrier": 39, "wait": 1}),
            R(4, "4", "BAR.SYNC.DEFER_BLOCKING 0x2, 0x100", 2, 2, 4, {"wait": 2}),
            R(5, "5", "LDS R22, [R152+0x3c8]", 30, 30, 4, {"barrier": 28, "short_sb": 2})]
    c = ncu_source.sample_classes(ncu_source.SourceKernel(name="k", rows=rows))
    assert c == {"mbarrier waits": 50, "named-barrier waits": 28, "wgmma waits": 40, "wgmma issue": 7, "other": 5}
