"""Tables from records: the CLI's result table and the devlog's generated section.

`python -m mla_var3.report --records DIR [--kernel NAME] [--peers]` prints the markdown table of
the latest bench record per (kernel, problem) found there (`--ratios`: one row per problem, the
kernels side by side with their time ratios; `--clocks` adds the SM clock each ran at and the ratios in
cycles, and the energy each spent per call and the ratios in energy); `--plots [--design D] [--out DIR]`
also writes D's roofline and version-progress PNGs (mla_var3.plots) and prints their links.
"""
from __future__ import annotations

import argparse
import math
import sys

from mla_var3.errors import UsageError, guarded
from mla_var3.runtime import gpu_monitor
from mla_var3.runtime.records import latest_records

BENCH_COLUMNS = ("kernel", "problem", "time (us)", "TFLOP/s", "GB/s", "% roofline", "% datasheet", "bound", "vs first")


def kernel_order(seen: list[str], order: list[str] | None) -> list[str]:
    """The kernels of `seen` with those named in `order` first, in that order, then the rest as seen."""
    return [k for k in (order or []) if k in seen] + [k for k in seen if k not in (order or [])]


def bench_rows(recs: list[dict], baseline: str | None = None, order: list[str] | None = None) -> list[dict]:
    """One row per (problem, kernel), the latest record wins; kernels in `order` (default: as
    they first appear), peers last; 'vs first' = baseline time / time."""
    kinds = ("bench", "peer")       # peer rows: measured elsewhere, shown for reference
    latest = {(r["problem_key"], r["kernel"]): r for r in latest_records(recs)}
    seen = list(dict.fromkeys(r["kernel"] for r in recs if r.get("kind") in kinds))
    order = kernel_order(seen, order)
    order.sort(key=lambda k: any(r["kernel"] == k and r["kind"] == "peer" for r in recs))
    baseline = baseline or (order[0] if order else None)
    rows = []
    problems = list(dict.fromkeys(k[0] for k in latest))
    for pk in problems:
        base = latest.get((pk, baseline))
        for kname in order:
            r = latest.get((pk, kname))
            if r is None:
                continue
            t = r["time_us"]["median"]
            ratio = f"{base['time_us']['median'] / t:.2f}x" if base else "-"
            rows.append({"kernel": kname, "problem": pk, "time (us)": f"{t:.1f}", "TFLOP/s": f"{r['tflops']:.1f}",
                         "GB/s": f"{r['gbps']:.0f}", "% roofline": f"{r['pct_roofline']:.1f}",
                         "% datasheet": f"{r['pct_datasheet']:.1f}", "bound": r["bound"], "vs first": ratio})
    return rows


STATS = ("median", "min", "p10", "p25")


def time_stat(rec: dict, stat: str) -> float | None:
    """One statistic of a bench record's per-call times (us): the median or minimum it keeps, or a
    nearest-rank percentile (p10, p25) of its `time_us.samples`. A low percentile reads a clock-bound
    kernel's fast mode when the power cap splits its replays into two
    (docs/knowledge/anti-patterns/short-median-of-a-clock-bound-kernel.md)."""
    t = rec["time_us"]
    if stat in ("median", "min"):
        return t.get(stat)
    samples = sorted(t.get("samples") or [])
    if not samples:
        return None
    k = max(0, math.ceil(int(stat[1:]) / 100 * len(samples)) - 1)
    return samples[k]


def ratio_table(recs: list[dict], order: list[str] | None = None, clocks: bool = False,
                stats: tuple[str, ...] = ("median",)) -> str:
    """The side-by-side comparison a devlog section quotes: one row per problem, each kernel's
    median time, then each other kernel's time over the first's (> 1: the first is faster).
    Kernels in `order` (default: as they first appear); problems missing a kernel show '-'.
    `clocks`: also each kernel's median SM clock during its own timed replays and each other
    kernel's SM cycles over the first's, which separates a slower clock (more power drawn for
    the same work) from more cycles; then each kernel's energy per call (mJ) and each other
    kernel's over the first's: at the power cap, the kernel spending more energy per call is the
    one given the lower clock (records without `clocks_during`, or from before it kept
    `mj_per_call`, show '-'). `stats` (of `STATS`): the time statistics shown, several as "a / b"
    in each cell; the clock columns use the first."""
    latest = {(r["problem_key"], r["kernel"]): r for r in latest_records(recs) if r.get("kind") in ("bench", "peer")}
    seen = list(dict.fromkeys(k for _, k in latest))
    kernels = kernel_order(seen, order)
    if not kernels:
        return "(no records)"
    first, others = kernels[0], kernels[1:]
    tag = "" if stats == ("median",) else f" ({' / '.join(stats)})"
    heads = ["problem"] + [f"{k} us{tag}" for k in kernels] + [f"{k} / {first}{tag}" for k in others]
    if clocks:
        heads += [f"{k} MHz" for k in kernels] + [f"{k} / {first} cycles" for k in others]
        heads += [f"{k} mJ" for k in kernels] + [f"{k} / {first} energy" for k in others]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for pk in dict.fromkeys(p for p, _ in latest):
        rows = [latest.get((pk, k)) for k in kernels]
        by_stat = [[time_stat(r, st) if r else None for r in rows] for st in stats]
        times = by_stat[0]
        cells = [pk] + [" / ".join(f"{ts[i]:.1f}" if ts[i] else "-" for ts in by_stat) for i in range(len(rows))]
        cells += [" / ".join(f"{ts[i] / ts[0]:.3f}" if ts[i] and ts[0] else "-" for ts in by_stat)
                  for i in range(1, len(rows))]
        if clocks:
            during = [(r or {}).get("clocks_during") or {} for r in rows]
            mhz = [d.get("sm_mhz") for d in during]
            cyc = [gpu_monitor.kcycles(t, m) if t else None for t, m in zip(times, mhz)]
            cells += [f"{m:.0f}" if m else "-" for m in mhz]
            cells += [f"{c / cyc[0]:.3f}" if c and cyc[0] else "-" for c in cyc[1:]]
            mj = [d.get("mj_per_call") for d in during]
            cells += [f"{e:.1f}" if e else "-" for e in mj]
            cells += [f"{e / mj[0]:.3f}" if e and mj[0] else "-" for e in mj[1:]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def record_contract(rec: dict) -> str | None:
    """A bench record's schedule contract (KernelPlan.schedule_contract): the one it carries, else,
    for records written before they carried it, its plan's answer for the record's tiling and
    problem (None where the plan is gone, declares none, or the tiling no longer builds)."""
    if "schedule_contract" in rec:
        return rec["schedule_contract"]
    try:
        from mla_var3.layers import problem_kind
        from mla_var3.runtime import registry
        plan = registry.get_plan(rec["kernel"])
        problem = problem_kind(rec.get("problem_kind", "mla_decode")).from_dict(rec["problem"])
        return plan.schedule_contract(plan.Tiling(**rec.get("tiling") or {}), problem)
    except Exception:  # an old record must not stop a report: it just has no contract to compare
        return None


def order_notes(recs: list[dict]) -> list[str]:
    """A line when some of the latest bench rows were timed beside two or more other plans in the
    rotating order the harness used before `bench.balanced_order` (their records name no
    `interleave_order`): each plan then always followed the same neighbour, and a plan timed after
    a low-power one ran at a higher clock
    (docs/knowledge/anti-patterns/fixed-interleave-order-under-power-limits.md)."""
    pks = list(dict.fromkeys(r["problem_key"] for r in latest_records(recs)
                             if r.get("kind") == "bench" and isinstance(r.get("time_us"), dict)
                             and r["time_us"].get("interleaved_with", 0) >= 2
                             and "interleave_order" not in r["time_us"]))
    if not pks:
        return []
    return [f"note: {len(pks)} problem(s) were timed in the rotating interleave order (records before the "
            f"balanced order), where each of three or more plans always followed the same one: their ratios "
            f"can carry a clock bias (compare --clocks)"]


def table_notes(recs: list[dict]) -> list[str]:
    """Every note a table of these records needs: mixed schedule contracts, the old interleave order."""
    return contract_notes(recs) + order_notes(recs)


def contract_notes(recs: list[dict]) -> list[str]:
    """One line per way the latest bench rows of a problem mix the per_call and per_step schedule
    contracts (which kernels on which side), naming the problems: there the per_call rows pay in
    every call for work the per_step rows made once
    (docs/knowledge/anti-patterns/timing-a-per-call-schedule.md); run both sides on one contract
    (e.g. `--tiling +schedule=per_step`, or the peer's `+metadata=per_call`)."""
    by_problem: dict[str, dict[str, str]] = {}
    for r in latest_records(recs):
        if r.get("kind") == "bench":
            c = record_contract(r)
            if c in ("per_call", "per_step"):
                by_problem.setdefault(r["problem_key"], {})[r["kernel"]] = c
    mixed: dict[str, list[str]] = {}
    for pk, kc in by_problem.items():
        if len(set(kc.values())) > 1:
            sides = "; ".join(f"{c}: {', '.join(k for k, v in kc.items() if v == c)}" for c in ("per_call", "per_step"))
            mixed.setdefault(sides, []).append(pk)
    return [f"note: schedule contracts differ ({sides}) on {len(pks)} problem(s), whose ratios are not like for "
            f"like: {' '.join(f'[{pk}]' for pk in pks)}" for sides, pks in mixed.items()]


def markdown_row(row: dict, columns=BENCH_COLUMNS) -> str:
    return "| " + " | ".join(str(row.get(c, "")) for c in columns) + " |"


def markdown_table(rows: list[dict], columns=BENCH_COLUMNS) -> str:
    if not rows:
        return "(no records)"
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += [markdown_row(r, columns) for r in rows]
    return "\n".join(lines)


def aligned_table(heads, cells, title: str | None = None) -> str:
    """Plain-text table: each column padded to its widest cell, two spaces apart, a dashed rule
    under the heads, trailing blanks dropped; `title` (if any) on the first line. Every console
    table of the project (bench, ncu, timeline, serving targets) is printed through it."""
    heads = [str(h) for h in heads]
    cells = [[str(v) for v in c] for c in cells]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(heads)]
    line = lambda vals: "  ".join(v.ljust(w) for v, w in zip(vals, widths)).rstrip()  # noqa: E731
    return "\n".join(([title] if title is not None else []) + [line(heads), line(["-" * w for w in widths])]
                     + [line(c) for c in cells])


def text_table(rows: list[dict], columns=BENCH_COLUMNS) -> str:
    if not rows:
        return "(no rows)"
    return aligned_table(columns, [[r.get(c, "") for c in columns] for r in rows])


def live_peer_problems(recs: list[dict]) -> set[str]:
    """Problem keys on which a peer ran live (a bench record of language "peer"): there the stored
    reference rows would only repeat FlashMLA with older numbers, so they are left out."""
    return {r["problem_key"] for r in recs if r.get("kind") == "bench" and r.get("language") == "peer"}


def peer_rows(recs: list[dict]) -> list[dict]:
    """Peer reference rows (kind "peer") for the problems of bench records, on the GPU the
    records name, except where the peer ran live in these records; the problem kind of each
    record says where its peers come from."""
    from dataclasses import replace

    from mla_var3.layers import problem_kind
    from mla_var3.runtime import devices
    out, seen = [], live_peer_problems(recs)
    for r in recs:
        gpu = (r.get("env") or {}).get("gpu")
        if r.get("kind") != "bench" or not gpu or r["problem_key"] in seen:
            continue
        seen.add(r["problem_key"])
        spec = devices.spec_for_name(gpu)
        if spec is None:
            continue
        problem = problem_kind(r.get("problem_kind", "mla_decode")).from_dict(r["problem"])
        out += problem.peer_records(replace(spec, name=gpu))
    return out


def in_grid(recs: list[dict], grid: str) -> list[dict]:
    """The records whose problem is in the named grid of its problem kind."""
    from mla_var3.layers import problem_kind
    keys: dict[str, set] = {}
    out = []
    for r in recs:
        kind = r.get("problem_kind", "mla_decode")
        if kind not in keys:
            keys[kind] = {p.key() for p in problem_kind(kind).grid(grid)}
        if r.get("problem_key") in keys[kind]:
            out.append(r)
    return out


def ceilings_text(gpu: str | None) -> str:
    """'bf16 771 TFLOP/s, 4.27 TB/s' from devices.json (measured where we measured)."""
    from mla_var3.runtime import devices
    spec = devices.spec_for_name(gpu or "")
    if spec is None:
        return "no known ceilings for this GPU"
    tflops, gbps = spec.ceilings(measured=True)
    which = "measured" if spec.measured else "datasheet"
    return f"{which} ceilings: bf16 {tflops:g} TFLOP/s, {gbps / 1000:g} TB/s"


def run_context(recs: list[dict]) -> str:
    """One line: where and when the records were measured."""
    peer = any(r.get("kind") == "peer" for r in recs)
    recs = [r for r in recs if r.get("kind") != "peer"]
    if not recs:
        return ""
    env = recs[-1].get("env", {})
    pk = env.get("packages", {})
    dates = sorted({r["timestamp"][:10] for r in recs})
    commits = ", ".join(sorted({str((r.get("env") or {}).get("commit")) for r in recs}))
    return (f"Measured on {env.get('gpu')} (driver {env.get('driver')}), {', '.join(dates)}, commit {commits}; "
            f"torch {pk.get('torch')}, triton {pk.get('triton')}, nvidia-cutlass-dsl {pk.get('nvidia-cutlass-dsl')}, "
            f"cuda-tile {pk.get('cuda-tile')}. Median of CUDA-graph replays, inputs rotated past 3x L2; "
            f"% roofline against the {ceilings_text(env.get('gpu'))}."
            + (" FlashMLA rows: its end-to-end times measured on this H200 on 2026-11-29 (conf/peers), not re-run; "
               "its varlen rows use its own drawn lengths (our seed-0 draws have a 2.5% larger mean: compare TFLOP/s there, not time)." if peer else ""))


def _plot_design(recs: list[dict], design: str | None) -> str | None:
    """The design to plot: the one asked for, else the first CuTe DSL design with bench records
    (else the first design at all)."""
    if design:
        return design
    designs = list(dict.fromkeys(r.get("design") for r in recs if r.get("kind") == "bench" and r.get("design")))
    plain = [d for d in designs if not d.startswith(("ct_", "torch_"))]
    return (plain or designs or [None])[0]


def writable_dir(flag: str, path, files=()) -> None:
    """Make sure `path` is a directory we can write `files` into (creating it), or raise a
    UsageError naming `flag`: before any work, so a bad path costs nothing."""
    import os
    import tempfile
    from pathlib import Path
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag}: {path} is a file, expected a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{flag}: cannot create the directory {path} ({e.strerror or e}); "
                         f"expected a writable directory") from None
    try:
        fd, probe = tempfile.mkstemp(dir=path, prefix=".mla_var3-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UsageError(f"{flag}: {path} is not a writable directory ({e.strerror or e})") from None
    for f in files:
        if Path(f).is_dir():
            raise UsageError(f"{flag}: {f} is a directory, expected a file to write")


def main(argv=None) -> int:
    return guarded(_main, argv)


def _main(argv=None) -> int:
    from pathlib import Path

    from mla_var3.runtime import records
    ap = argparse.ArgumentParser(prog="python -m mla_var3.report", description=__doc__)
    ap.add_argument("--records", required=True, nargs="+", help="records.jsonl files or directories")
    ap.add_argument("--kernel", action="append", help="only these kernels (repeatable)")
    ap.add_argument("--design", help="the design the plots follow version by version (default: the first "
                                     "CuTe DSL design in the records); other designs appear as baselines")
    ap.add_argument("--out", default="docs/kernels", help="where --plots writes <design>_roofline.png and "
                                                          "<design>_progress.png (default: docs/kernels)")
    ap.add_argument("--plots", action="store_true", help="also write the roofline and progress PNGs")
    ap.add_argument("--grid", help="only the problems of this named grid of the records' problem kind "
                                   "(e.g. bench), so other runs do not enter the plots' medians")
    ap.add_argument("--peers", action="store_true", help="add the measured peer rows (FlashMLA) for these problems")
    ap.add_argument("--ratios", action="store_true", help="print instead one row per problem: each kernel's "
                                                          "time, then each other kernel's time over the first's "
                                                          "(kernels in --kernel order)")
    ap.add_argument("--clocks", action="store_true", help="with --ratios: add each kernel's SM clock during its "
                                                          "timed replays and the ratios in SM cycles, "
                                                          "and its energy per call (mJ) and the ratios "
                                                          "in energy")
    ap.add_argument("--stat", default="median", help="with --ratios: the time statistics, comma-separated, of "
                                                     f"{', '.join(STATS)} (e.g. median,p10: both in each cell)")
    ap.add_argument("--metric", default="pct_roofline", help="progress plot's y: pct_roofline (default), "
                                                             "pct_datasheet, tflops, gbps or time")
    args = ap.parse_args(argv)
    from mla_var3 import plots
    if args.metric not in plots.METRICS:
        raise UsageError(f"--metric: expected one of {', '.join(plots.METRICS)}, got {args.metric!r}")
    stats = tuple(x.strip() for x in args.stat.split(","))
    if any(x not in STATS for x in stats):
        raise UsageError(f"--stat: expected one or more of {', '.join(STATS)}, comma-separated, got {args.stat!r}")
    if stats != ("median",) and not args.ratios:
        raise UsageError("--stat: only with --ratios (the bench table shows medians)")
    recs = records.load(args.records)
    if args.kernel:
        recs = [r for r in recs if r["kernel"] in args.kernel]
    if args.grid:
        recs = in_grid(recs, args.grid)
    if args.peers:
        recs = recs + peer_rows(recs)
    if args.plots:                      # everything the plots need is checked before any output
        design = _plot_design(recs, args.design)
        if design is None:
            raise UsageError("--plots: no bench records to plot")
        designs = sorted({r.get("design") for r in recs if r.get("kind") == "bench" and r.get("design")})
        if design not in designs:
            raise UsageError(f"--design: no bench records of {design!r} in the records given "
                             f"(designs there: {', '.join(designs) or 'none'})")
        out = Path(args.out)
        targets = [out / f"{design}_roofline.png", out / f"{design}_progress.png"]
        writable_dir("--out", out, targets)
    print(run_context(recs))
    print(ratio_table(recs, args.kernel, clocks=args.clocks, stats=stats) if args.ratios else markdown_table(bench_rows(recs)))
    for note in table_notes(recs):
        print(note)
    if args.plots:
        try:
            roof = plots.roofline_plot(recs, targets[0], design=design)
            prog = plots.progress_plot(recs, targets[1], design=design, metric=args.metric)
        except OSError as e:
            raise UsageError(f"--out: cannot write {e.filename or out} ({e.strerror or e})") from None
        print(f"\nwrote {roof} and {prog}; to embed them in the devlog next to them:\n")
        print(f"![{design} roofline]({roof.name})")
        print(f"![{design} progress]({prog.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
