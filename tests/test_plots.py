"""Plots and the report CLI on the CPU: committed H200 records and small synthetic ones."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from mla_var3 import plots, report
from mla_var3.runtime import records

RECORDS = Path(__file__).resolve().parents[1] / "records"
# the v1 comparison on the bench grid: 36 problems x 3 kernels (other committed files add sweeps)
BENCH_RECORDS = RECORDS / "2026-11-29-h200-bench-compare-v1.jsonl.gz"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
GPU = "NVIDIA H200"


def _bench(kernel: str, design: str, version: int, language: str, problem: dict, tflops: float,
           stamp: str = "2026-12-01T10:00:00+00:00") -> dict:
    key = f"b={problem['b']},s_q={problem['s_q']},h_q={problem['h_q']},seqlen={problem['seqlen']}" + \
        (",varlen" if problem.get("varlen") else "")
    intensity = 20.0 * problem["s_q"] * problem["h_q"] / 16
    flops = int(1e9 * problem["seqlen"] / 1024)
    t_us = flops / (tflops * 1e6)
    gbps = tflops * 1e3 / intensity
    return {"schema": 1, "kind": "bench", "timestamp": stamp, "kernel": kernel, "version": version, "design": design,
            "language": language, "tiling": {}, "problem": problem, "problem_key": key,
            "env": {"gpu": GPU, "commit": "abc"}, "time_us": {"median": t_us, "min": t_us, "max": t_us, "n": 3},
            "tflops": tflops, "gbps": gbps, "pct_roofline": 100 * min(tflops / 771, gbps / 4270),
            "pct_datasheet": 100 * min(tflops / 989.4, gbps / 4800), "bound": "memory", "intensity": intensity,
            "flops": flops, "bytes": int(flops / intensity)}


def _problem(s_q, h_q, seqlen, varlen=False):
    return {"b": 128, "s_q": s_q, "h_q": h_q, "seqlen": seqlen, "varlen": varlen, "seqlens": None,
            "softmax_scale": None}


PROBLEMS = [_problem(1, 16, 1024), _problem(1, 64, 4096), _problem(2, 128, 4096), _problem(1, 16, 1024, varlen=True)]


def synthetic() -> list[dict]:
    """demo v1..v3 on 4 problems, two cuTile versions (only the newest is plotted), torch, and an
    older demo_v3 record that a newer one replaces."""
    recs = []
    for i, p in enumerate(PROBLEMS):
        for v in (1, 2, 3):
            recs.append(_bench(f"demo_v{v}", "demo", v, "cute-dsl", p, 50.0 * v + i))
        recs.append(_bench("demo_v3", "demo", 3, "cute-dsl", p, 1.0, stamp="2026-11-30T10:00:00+00:00"))  # older
        recs.append(_bench("ct_demo_v1", "ct_demo", 1, "cutile", p, 40.0 + i))
        recs.append(_bench("ct_demo_v2", "ct_demo", 2, "cutile", p, 60.0 + i))
        recs.append(_bench("torch_demo_v1", "torch_demo", 1, "torch", p, 5.0 + i))
    return recs


@pytest.fixture(scope="module")
def committed() -> list[dict]:
    from mla_var3.report import peer_rows
    recs = records.load([BENCH_RECORDS])
    return recs + peer_rows(recs)


def n_points(fig) -> int:
    return sum(len(c.get_offsets()) for ax in fig.axes for c in ax.collections if c.get_gid() == plots.POINTS_GID)


def progress_lines(fig) -> list:
    return [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_gid() == plots.POINTS_GID]


def check_axes(fig, log: bool) -> None:
    main_axes = [ax for ax in fig.axes if ax.get_xlabel()]
    assert main_axes
    for ax in main_axes:
        assert ax.get_xlabel()
        if log:
            assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert fig.axes[0].get_ylabel()
    assert fig._suptitle is not None and GPU in fig._suptitle.get_text()


def check_png(path: Path) -> None:
    data = Path(path).read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 20_000


# --- committed records (36 problems x 3 kernels + FlashMLA peers) ------------------------------

def test_roofline_committed(committed, tmp_path):
    bench = {(r["kernel"], r["problem_key"]) for r in committed if r.get("kind") in ("bench", "peer")}
    fig = plots._roofline_figure(committed, design="flash_mla_decode")
    try:
        check_axes(fig, log=True)
        assert "2026-11-29" in fig._suptitle.get_text()
        assert n_points(fig) == len(bench) == 36 * 4
        assert [ax.get_title() for ax in fig.axes if ax.get_xlabel()][0] == "fixed lengths"
        legend = " ".join(t.get_text() for leg in fig.legends for t in leg.get_texts())
        assert "771" in legend and "989" in legend and "FlashMLA" in legend
    finally:
        plt.close(fig)
    check_png(plots.roofline_plot(committed, tmp_path / "roof.png", design="flash_mla_decode"))


def test_a_gemm_design_plots_only_gemm_records(tmp_path):
    """A design's plots keep its own problem kind: GEMM points, no MLA baselines, no MLA
    (s_q x h_q) axis or fixed/varlen panels; the bandwidth slope stays in view."""
    recs = records.load(Path(__file__).resolve().parents[1] / "records")
    assert any(r.get("problem_kind") == "gemm" for r in recs)
    pts = plots._select(recs, "gemm", None)
    assert pts and all(r.get("problem_kind") == "gemm" for r in pts)
    fig = plots._roofline_figure(recs, design="gemm")
    try:
        assert [ax.get_title() for ax in fig.axes if ax.get_xlabel()] == [""]
        assert not any("s_q" in ax.get_xlabel() for ax in fig.axes)
        assert fig.axes[0].get_xlim()[0] < 180           # the ridge (771 TFLOP/s / 4.27 TB/s) is visible
    finally:
        plt.close(fig)


def test_roofline_problem_subset(committed):
    keys = ["b=128,s_q=1,h_q=16,seqlen=1024", "b=128,s_q=2,h_q=128,seqlen=8192"]
    fig = plots._roofline_figure(committed, design="flash_mla_decode", problems=keys)
    try:
        assert n_points(fig) == 2 * 4
        assert len([ax for ax in fig.axes if ax.get_xlabel()]) == 1        # fixed lengths only: one panel
    finally:
        plt.close(fig)


def test_progress_committed(committed, tmp_path):
    fig = plots._progress_figure(committed, design="flash_mla_decode")
    try:
        check_axes(fig, log=False)
        lines = progress_lines(fig)
        assert len(lines) == 12                         # 6 (s_q, h_q) groups x (fixed, varlen)
        assert all(len(ln.get_xdata()) == 1 for ln in lines)     # one version today
        assert "%" in fig.axes[0].get_ylabel()
        assert "median" in fig._suptitle.get_text()
    finally:
        plt.close(fig)
    check_png(plots.progress_plot(committed, tmp_path / "prog.png", design="flash_mla_decode"))


# --- synthetic records ------------------------------------------------------------------------

def test_roofline_synthetic(tmp_path):
    recs = synthetic()
    fig = plots._roofline_figure(recs, design="demo")
    try:
        check_axes(fig, log=True)
        # demo v1..v3, the newest cuTile version and torch, per problem; ct_demo_v1 is left out
        assert n_points(fig) == 5 * len(PROBLEMS)
        ys = sorted(y for ax in fig.axes for c in ax.collections if c.get_gid() == plots.POINTS_GID
                    for _, y in c.get_offsets())
        assert 1.0 not in ys                            # the older demo_v3 record lost to the newer one
    finally:
        plt.close(fig)
    fig = plots._roofline_figure(recs)                  # no design: every kernel
    try:
        assert n_points(fig) == 6 * len(PROBLEMS)
    finally:
        plt.close(fig)
    check_png(plots.roofline_plot(recs, tmp_path / "r.png", design="demo", title="custom"))


def test_progress_synthetic(tmp_path):
    recs = synthetic()
    fig = plots._progress_figure(recs, design="demo")
    try:
        lines = progress_lines(fig)
        assert len(lines) == len(PROBLEMS)              # few problems: one line per problem
        assert all(len(ln.get_xdata()) == 3 for ln in lines)
        ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
        assert ticks[:3] == ["v1", "v2", "v3"] and any("cuTile" in t for t in ticks)
    finally:
        plt.close(fig)
    fig = plots._progress_figure(recs, design="demo", metric="time")
    try:
        assert fig.axes[0].get_yscale() == "log" and "time" in fig.axes[0].get_ylabel()
    finally:
        plt.close(fig)
    check_png(plots.progress_plot(recs, tmp_path / "p.png", design="demo"))


def test_progress_of_many_versions_stacks_its_panels_within_a_width(tmp_path):
    """54 versions at 1.35 in each made a 17000-pixel strip: past a dozen versions the columns
    narrow, and past PROGRESS_MAX_WIDTH the fixed and varlen panels stack, each full width."""
    recs = [_bench(f"demo_v{v}", "demo", v, "cute-dsl", p, 50.0 + v) for v in range(1, 55) for p in PROBLEMS]
    fig = plots._progress_figure(recs, design="demo")
    try:
        w, h = fig.get_size_inches()
        assert w <= plots.PROGRESS_MAX_WIDTH and h > w / 4
        panels = [ax for ax in fig.axes if ax.get_title()]
        assert len(panels) == 2 and panels[0].get_position().y0 > panels[1].get_position().y1   # one above the other
        assert all(len(ln.get_xdata()) == 54 for ln in progress_lines(fig))
    finally:
        plt.close(fig)
    check_png(plots.progress_plot(recs, tmp_path / "many.png", design="demo"))


def test_progress_single_version_single_problem(tmp_path):
    recs = [_bench("demo_v1", "demo", 1, "cute-dsl", PROBLEMS[0], 80.0)]
    fig = plots._progress_figure(recs, design="demo")
    try:
        (line,) = progress_lines(fig)
        assert len(line.get_xdata()) == 1
    finally:
        plt.close(fig)
    check_png(plots.roofline_plot(recs, tmp_path / "r.png", design="demo"))


def test_progress_errors():
    with pytest.raises(ValueError, match="metric"):
        plots._progress_figure(synthetic(), design="demo", metric="nope")
    with pytest.raises(ValueError, match="no bench records"):
        plots._progress_figure(synthetic(), design="missing")


# --- the report CLI ---------------------------------------------------------------------------

def test_report_cli_plots(tmp_path, capsys):
    out = tmp_path / "kernels"
    assert report.main(["--records", str(RECORDS), "--design", "flash_mla_decode", "--plots", "--peers",
                        "--out", str(out)]) == 0
    text = capsys.readouterr().out
    # --peers: FlashMLA's rows, live (flashmla_decode_v1) where it ran in these records, else stored
    assert "| kernel |" in text and ("| flashmla_decode_v1 |" in text or "| FlashMLA, measured" in text)
    assert "![flash_mla_decode roofline](flash_mla_decode_roofline.png)" in text
    assert "![flash_mla_decode progress](flash_mla_decode_progress.png)" in text
    for name in ("flash_mla_decode_roofline.png", "flash_mla_decode_progress.png"):
        check_png(out / name)


def test_report_cli_infers_design(tmp_path, capsys):
    src = tmp_path / "recs.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in synthetic()) + "\n")
    assert report.main(["--records", str(src), "--plots", "--out", str(tmp_path / "o")]) == 0
    text = capsys.readouterr().out
    assert "demo_roofline.png" in text                  # the CuTe DSL design, not ct_ or torch_
    check_png(tmp_path / "o" / "demo_progress.png")


def test_report_cli_table_only(capsys):
    assert report.main(["--records", str(RECORDS), "--kernel", "flash_mla_decode_v1"]) == 0
    text = capsys.readouterr().out
    assert "flash_mla_decode_v1" in text and "ct_flash_mla_decode_v1" not in text and ".png" not in text


def _report_refuses(capsys, argv) -> str:
    """report exits 2 with one `error:` line and prints nothing else (no table before the error)."""
    assert report.main(argv) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and len(cap.err.strip().splitlines()) == 1 and cap.err.startswith("error: ")
    return cap.err.strip()


def test_report_plots_bad_out_is_one_line_before_any_work(tmp_path, capsys):
    src = tmp_path / "recs.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in synthetic()) + "\n")
    base = ["--records", str(src), "--plots", "--out"]
    assert _report_refuses(capsys, base + [str(src)]) == f"error: --out: {src} is a file, expected a directory"
    assert _report_refuses(capsys, base + [str(src / "sub")]) == \
        f"error: --out: cannot create the directory {src / 'sub'} (Not a directory); expected a writable directory"
    (tmp_path / "o" / "demo_roofline.png").mkdir(parents=True)
    assert _report_refuses(capsys, base + [str(tmp_path / "o")]) == \
        f"error: --out: {tmp_path / 'o' / 'demo_roofline.png'} is a directory, expected a file to write"
    assert not [p for p in tmp_path.rglob("*.png") if p.is_file()]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_report_plots_out_under_proc_is_one_line(tmp_path, capsys):
    src = tmp_path / "recs.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in synthetic()) + "\n")
    assert _report_refuses(capsys, ["--records", str(src), "--plots", "--out", "/proc/x"]) == \
        "error: --out: cannot create the directory /proc/x (No such file or directory); expected a writable directory"
    assert _report_refuses(capsys, ["--records", str(src), "--plots", "--out", "/proc"]).startswith(
        "error: --out: /proc is not a writable directory (")


def test_report_plots_unknown_design_or_metric_is_one_line_before_any_work(tmp_path, capsys):
    src = tmp_path / "recs.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in synthetic()) + "\n")
    out = tmp_path / "o"
    base = ["--records", str(src), "--plots", "--out", str(out)]
    assert _report_refuses(capsys, base + ["--design", "nope"]) == \
        "error: --design: no bench records of 'nope' in the records given (designs there: ct_demo, demo, torch_demo)"
    assert _report_refuses(capsys, base + ["--metric", "nope"]) == \
        "error: --metric: expected one of pct_roofline, pct_datasheet, tflops, gbps, time, got 'nope'"
    assert _report_refuses(capsys, base + ["--kernel", "nope_v1"]) == "error: --plots: no bench records to plot"
    assert not out.exists()


def test_report_ratios_puts_kernels_side_by_side(tmp_path, capsys):
    """--ratios: one row per problem, the times in --kernel order, then each other kernel's time
    over the first's; a problem one kernel lacks shows '-' instead of a made-up ratio."""
    a, b = _problem(1, 16, 1024), _problem(1, 64, 4096)
    recs = [_bench("k_new", "d", 2, "cute-dsl", a, 100.0), _bench("k_old", "d", 1, "cute-dsl", a, 80.0),
            _bench("k_new", "d", 2, "cute-dsl", b, 50.0)]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert report.main(["--records", str(path), "--ratios", "--kernel", "k_new", "--kernel", "k_old"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| b=")]
    t_new, t_old = recs[0]["time_us"]["median"], recs[1]["time_us"]["median"]
    assert rows[0] == f"| b=128,s_q=1,h_q=16,seqlen=1024 | {t_new:.1f} | {t_old:.1f} | {t_old / t_new:.3f} |"
    assert rows[0].endswith("| 1.250 |")
    assert rows[1].endswith("| - | - |")


def _clocks_table(tmp_path, capsys, *records):
    """`report --ratios --clocks` over these records (kernels k_new then k_old): its header and first row."""
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert report.main(["--records", str(path), "--ratios", "--clocks", "--kernel", "k_new", "--kernel", "k_old"]) == 0
    out = capsys.readouterr().out.splitlines()
    return (next(line for line in out if line.startswith("| problem")),
            next(line for line in out if line.startswith("| b=")))


def test_report_ratios_clocks_separate_clock_from_cycles(tmp_path, capsys):
    """--ratios --clocks: each kernel's SM clock during its replays, and the ratio in cycles. A
    kernel 10% slower in time at a clock 10% lower took the same cycles: ratio 1.000."""
    a = _problem(1, 16, 1024)
    fast, slow = _bench("k_new", "d", 2, "cute-dsl", a, 100.0), _bench("k_old", "d", 1, "cute-dsl", a, 80.0)
    t_fast = fast["time_us"]["median"]
    slow["time_us"]["median"] = t_fast * 1.1
    fast["clocks_during"] = {"sm_mhz": 1800.0, "power_w": 650.0, "sm_mhz_samples": [1800.0]}
    slow["clocks_during"] = {"sm_mhz": 1800.0 / 1.1, "power_w": 690.0, "sm_mhz_samples": [1636.4]}
    head, row = _clocks_table(tmp_path, capsys, fast, slow)
    assert head.endswith("| k_new MHz | k_old MHz | k_old / k_new cycles | k_new mJ | k_old mJ | k_old / k_new energy |")
    assert row.endswith("| 1.100 | 1800 | 1636 | 1.000 | - | - | - |")   # records from before mj_per_call
    del slow["clocks_during"]                     # an older record: no clock, no made-up cycle ratio
    _, row = _clocks_table(tmp_path, capsys, fast, slow)
    assert row.endswith("| 1800 | - | - | - | - | - |")


def test_report_ratios_clocks_show_energy_per_call_and_its_ratio(tmp_path, capsys):
    """--ratios --clocks: each kernel's energy per call (mJ) and each other kernel's over the
    first's; a kernel at the same clock and cycles spending 12% more energy per call reads 1.120."""
    a = _problem(1, 16, 1024)
    ours, peer = _bench("k_new", "d", 2, "cute-dsl", a, 100.0), _bench("k_old", "d", 1, "cute-dsl", a, 80.0)
    peer["time_us"]["median"] = ours["time_us"]["median"]
    ours["clocks_during"] = {"sm_mhz": 1650.0, "power_w": 690.0, "sm_mhz_samples": [1650.0],
                             "mj_per_call": 200.0, "power_w_energy": 688.5, "energy_replays": 10}
    peer["clocks_during"] = {"sm_mhz": 1650.0, "power_w": 690.0, "sm_mhz_samples": [1650.0],
                             "mj_per_call": 224.0, "power_w_energy": 689.9, "energy_replays": 10}
    head, row = _clocks_table(tmp_path, capsys, ours, peer)
    assert head.endswith("| k_new mJ | k_old mJ | k_old / k_new energy |")
    assert row.endswith("| 1.000 | 1650 | 1650 | 1.000 | 200.0 | 224.0 | 1.120 |")
    del ours["clocks_during"]["mj_per_call"]      # the first kernel's record predates the field: no ratio
    _, row = _clocks_table(tmp_path, capsys, ours, peer)
    assert row.endswith("| 1650 | 1650 | 1.000 | - | 224.0 | - |")


def test_report_ratios_stat_shows_the_fast_mode_beside_the_median(tmp_path, capsys):
    """--ratios --stat median,p10: each cell 'median / p10' (nearest rank over time_us.samples). Two
    kernels with the same fast mode but a median in the slow one for the second read 1.100 / 1.000."""
    a = _problem(1, 16, 1024)
    one, two = _bench("k_new", "d", 2, "cute-dsl", a, 100.0), _bench("k_old", "d", 1, "cute-dsl", a, 80.0)
    one["time_us"].update(median=100.0, samples=[100.0] * 10)
    two["time_us"].update(median=110.0, samples=[100.0] * 3 + [110.0] * 7)
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (one, two)))
    argv = ["--records", str(path), "--ratios", "--kernel", "k_new", "--kernel", "k_old"]
    assert report.main(argv + ["--stat", "median,p10"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert next(x for x in out if x.startswith("| problem")).endswith("| k_old / k_new (median / p10) |")
    assert next(x for x in out if x.startswith("| b=")).endswith("| 100.0 / 100.0 | 110.0 / 100.0 | 1.100 / 1.000 |")
    assert report.time_stat(two, "p25") == 100.0 and report.time_stat(two, "min") == two["time_us"]["min"]
    del two["time_us"]["samples"]
    assert report.time_stat(two, "p10") is None
    assert _report_refuses(capsys, argv + ["--stat", "p5"]) == \
        "error: --stat: expected one or more of median, min, p10, p25, comma-separated, got 'p5'"
    assert _report_refuses(capsys, ["--records", str(path), "--stat", "p10"]) == \
        "error: --stat: only with --ratios (the bench table shows medians)"
