"""--prof_type=ncu|sanitize for the CLI: the outer run re-launches the CLI under the tool with
the hidden `--prof_inner` flag (and the problem as JSON); the inner run makes a few plain calls
(every stage of each) and exits.
"""
from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
import time

from mla_var3.cli.common import write_json
from mla_var3.runtime import profiling

INNER_TIMEOUT_S = 540


def sanitize_problem(kind):
    """A small problem of the kind (sanitizers run ~100x slower): its `sanitize` grid's first."""
    return kind.grid("sanitize")[0] if "sanitize" in kind.grids else kind.default_problem()


def inner_argv(name: str, problem, mode: str, seed: int, tiling=None) -> list[str]:
    """The inner run's arguments; `tiling` (a Tiling with fields) travels whole as its key,
    --tiling key=value,... of every field, so the inner run needs no default."""
    from mla_var3.runtime.cute_kernel import line_info_enabled
    given = [f"--tiling={tiling.key()}"] if tiling is not None and dataclasses.fields(tiling) else []
    return [name, f"--problem_json={json.dumps(problem.to_dict(), separators=(',', ':'))}",
            f"--seed={seed}", f"--prof_inner={mode}"] + given + (["--lineinfo"] if line_info_enabled() else [])


def profiled_tiling(plan, problem, args, names):
    """What a profile of `plan` runs: the first version's --tiling (key=value,... as given,
    +key=value,... over the tuned/default choice), else what a benchmark would run."""
    text = getattr(args, "tiling", None)
    if not text or plan.name != names[0]:
        return choose_tiling(plan, problem)
    from mla_var3.cli.tiling import resolve_tiling
    return resolve_tiling(plan, text, lambda: choose_tiling(plan, problem))


def choose_tiling(plan, problem):
    """What a benchmark of this problem would run: the tuned winner, else the default."""
    from mla_var3.jobs import choose_tiling as bench_tiling
    from mla_var3.runtime import devices
    return bench_tiling(plan, problem, devices.current_device()) or plan.default_tiling(problem)


def run_inner(name: str, problem, mode: str, seed: int, launches: int = profiling.DEFAULT_LAUNCHES,
              tiling: str | None = None) -> int:
    """Inside ncu / compute-sanitizer: compile, warm up, then `launches` plain calls (no graph)
    inside the `:profile` NVTX range; `tiling`: the outer run's choice as key=value,..."""
    import torch

    from mla_var3.runtime import registry
    plan = registry.get_plan(name)
    inputs = problem.make_inputs(seed=seed, device="cuda")
    if tiling:
        from mla_var3.cli.tiling import parse_tiling
        chosen = parse_tiling(plan, tiling)
    else:
        chosen = choose_tiling(plan, problem)
    kern = plan.build(inputs, chosen)
    cfg = kern.tiling.key()
    outputs = problem.make_outputs(inputs)
    workspace = kern.prepare(inputs)
    with profiling.annotate(plan.name, cfg, "compile", force=True):
        kern.compile()
    with profiling.annotate(plan.name, cfg, "warmup", force=True):
        kern.launch(inputs, outputs, workspace)
    torch.cuda.synchronize()
    with profiling.annotate(plan.name, cfg, "profile", force=True):
        for _ in range(launches if mode == "ncu" else 1):
            kern.launch(inputs, outputs, workspace)
        torch.cuda.synchronize()
    print(f"mla_var3-inner: {plan.name} {cfg} {problem.key()} done")
    return 0


def _run_tool(cmd: list[str]) -> tuple[int, str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=INNER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return 124, f"{cmd[0]}: timed out after {INNER_TIMEOUT_S}s"
    return proc.returncode, proc.stdout + "\n" + proc.stderr


def save_tool_log(args, text: str) -> None:
    if args.tool_log:
        with open(args.tool_log, "a") as f:
            f.write(text)


def report_path(records_dir: str, name: str, problem) -> str:
    """Where --ncu-rep records the report (ncu adds .ncu-rep)."""
    import re
    from pathlib import Path
    folder = Path(records_dir) / "ncu"
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder / f"{name}_{re.sub(r'[^A-Za-z0-9_.,=+-]', '_', problem.key())}")


def cmd_ncu_source(names, problem, args, ncu: str) -> int:
    """--ncu-set=source: ncu's warp samples per SASS instruction for each version (runtime/ncu_source.py),
    the CSV kept gzipped under <records>/ncu/, a summary printed and recorded; two versions compared."""
    import gzip
    from pathlib import Path

    from mla_var3.runtime import ncu_source, records, registry
    rc, summaries = 0, []
    for name in names:
        plan = registry.get_plan(name)
        tiling = profiled_tiling(plan, problem, args, names)
        prefix = profiling.range_name(plan.name, tiling.key(), "profile").rsplit(":", 1)[0]
        report = report_path(args.records, name, problem) + ".source"
        record, export = profiling.ncu_source_commands(inner_argv(name, problem, "ncu", args.seed, tiling), prefix,
                                                       report, tool=ncu)
        t0 = time.perf_counter()
        code, text = _run_tool(record)
        save_tool_log(args, text)
        ecode, csv_text = _run_tool(export) if code == 0 else (code, "")
        kernels = ncu_source.merge_launches(ncu_source.parse_source_csv(csv_text))
        if code != 0 or ecode != 0 or not kernels:
            rc = 1
            tail = "\n".join((text if code else csv_text).strip().splitlines()[-8:])
            print(f"{name}: ncu source counters {'failed (rc=%d)' % (code or ecode) if code or ecode else 'profiled no kernel'}:"
                  f"\n{tail}", file=sys.stderr)
            continue
        csv_path = Path(report + ".csv.gz")
        csv_path.write_bytes(gzip.compress(csv_text.encode()))
        sums = [ncu_source.summarize(k) for k in kernels]
        print(f"{name} {problem.key()}: ncu --clock-control none, source counters -> {csv_path}")
        for s in sums:
            print(ncu_source.format_summary(s))
        summaries.append((name, sums[0]))
        rec = records.make_record("profile", plan, tiling, problem, prof_type="ncu", ncu_set="source",
                                  rows=sums, source_csv=str(csv_path), wall_s=time.perf_counter() - t0, tool_rc=code)
        records.append(rec, args.records)
    if len(summaries) == 2:
        (na, a), (nb, b) = summaries
        print("\n" + ncu_source.format_compare(a, b, labels=(na[-10:], nb[-10:])))
    return rc


def cmd_ncu(names, problems, args, kind) -> int:
    from mla_var3.cli import ncu_view
    from mla_var3.runtime import records, registry
    ncu = profiling.find_tool("ncu")            # a missing tool is said before any work
    problem = (problems or [kind.default_problem()])[0]
    if getattr(args, "ncu_set", "basic") == "source":
        return cmd_ncu_source(names, problem, args, ncu)
    detail = getattr(args, "ncu_set", "basic") == "detail"
    table, recs, rc = [], [], 0
    for name in names:
        plan = registry.get_plan(name)
        tiling = profiled_tiling(plan, problem, args, names)
        prefix = profiling.range_name(plan.name, tiling.key(), "profile").rsplit(":", 1)[0]
        inner = inner_argv(name, problem, "ncu", args.seed, tiling)
        t0 = time.perf_counter()
        code, text = _run_tool(profiling.ncu_command(inner, prefix, detail=detail))
        rows = profiling.summarize_launches(profiling.parse_ncu_csv(text))
        if code != 0 or not rows:
            rc = 1
            tail = "\n".join(text.strip().splitlines()[-8:])
            print(f"{name}: ncu {'failed (rc=%d)' % code if code else 'profiled no kernel'}:\n{tail}", file=sys.stderr)
        save_tool_log(args, text)           # the raw output, e.g. for the parser's test fixture
        report = None
        if getattr(args, "ncu_rep", False):     # a second run, recorded for the GUI (--set full)
            report = report_path(args.records, name, problem)
            rcode, rtext = _run_tool(profiling.ncu_report_command(inner, prefix, report, tool=ncu))
            if rcode != 0:
                rc = 1
                print(f"{name}: ncu report failed (rc={rcode}):\n" + "\n".join(rtext.strip().splitlines()[-6:]),
                      file=sys.stderr)
            else:
                report += ".ncu-rep"
                print(f"{name}: ncu report {report} (ncu-ui; source view needs --lineinfo)")
        elif "--lineinfo" in inner:         # the source view needs a report, not the CSV
            cmd = profiling.ncu_report_command(inner, prefix, f"{name}_lineinfo")
            print(f"{name}: for ncu's source view (SASS <-> Python lines):\n  " + shlex.join(cmd))
        for r in rows:
            table.append({"version": name, **r})
        extra = {"ncu_set": "detail"} if detail else {}
        if report:
            extra["ncu_report"] = report
        rec = records.make_record("profile", plan, tiling, problem, prof_type="ncu", rows=rows,
                                  wall_s=time.perf_counter() - t0, tool_rc=code, **extra)
        records.append(rec, args.records)
        recs.append(rec)
    print(format_ncu_table(table, problem))
    if detail:
        print("\n" + ncu_view.format_detail(table))
    if len(names) > 1:
        print("\n" + ncu_view.format_diff(table, names))
    write_json(args.json, recs)
    return rc


NCU_HEADERS = (("version", "version"), ("kernel", "kernel_name"), ("n", "launches"), ("us", "duration_us"),
               ("SM %", "sm_throughput_pct"), ("tensor %", "tensor_pipe_pct"), ("DRAM %", "dram_throughput_pct"),
               ("DRAM GB/s", "dram_gbps"), ("occup %", "achieved_occupancy_pct"), ("regs", "registers_per_thread"),
               ("smem KB", "smem_per_block_kb"), ("L2 hit %", "l2_hit_rate_pct"), ("MHz", "sm_mhz"),
               ("kcycles", "sm_kcycles"))


def format_ncu_table(rows: list[dict], problem) -> str:
    def fmt(v):
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}"
        return str(v)
    cells = [[fmt(profiling.short_kernel_name(r[k]) if k == "kernel_name" else r.get(k)) for _, k in NCU_HEADERS]
             for r in rows]
    from mla_var3.report import aligned_table
    return aligned_table([h for h, _ in NCU_HEADERS], cells,
                         f"ncu --clock-control none, {problem.key()} (median of launches per kernel)")


def _racecheck_detail(name: str, problem, args, tiling=None) -> dict:
    """--racecheck-detail: racecheck once more with a report per hazard; print them grouped by
    instruction pair (which CTAs, which threads and warpgroups, which smem bytes)."""
    inner = inner_argv(name, problem, "sanitize", args.seed, tiling)
    code, text = _run_tool(profiling.sanitizer_command("racecheck", inner, hazards=True))
    save_tool_log(args, f"==== {name} racecheck (hazards)\n{text}")
    res = profiling.parse_racecheck_hazards(text)
    if res["groups"]:
        print(profiling.racecheck_hazard_table(res))
    else:
        print(f"{name} racecheck hazards on {problem.key()}: none reported (rc={code})")
    return {"tool": "racecheck-hazards", "rc": code, **res}


def cmd_sanitize(names, problems, args, kind) -> int:
    from mla_var3.runtime import records, registry
    profiling.find_tool("compute-sanitizer")    # a missing tool is said before any work
    problem = (problems or [sanitize_problem(kind)])[0]
    rc = 0
    for name in names:
        plan = registry.get_plan(name)
        tiling = profiled_tiling(plan, problem, args, names)
        results = {}
        for tool in profiling.SANITIZER_TOOLS:
            inner = inner_argv(name, problem, "sanitize", args.seed, tiling)
            code, text = _run_tool(profiling.sanitizer_command(tool, inner))
            save_tool_log(args, f"==== {name} {tool}\n{text}")
            res = profiling.parse_sanitizer(text)
            res["rc"] = code
            results[tool] = res
            clean = code == 0 and res["errors"] == 0
            rc |= not clean
            verdict = "clean (0 errors)" if clean else (
                f"{res['errors']} errors" if res["errors"] else f"no summary (rc={code})")
            print(f"{name} {tool} on {problem.key()}: {verdict}")
            for line in res["first"] if not clean else []:
                print(f"    {line}")
            if not clean and not res["first"]:
                print("    " + "\n    ".join(text.strip().splitlines()[-6:]))
        rows = [{"tool": t, **r} for t, r in results.items()]
        if args.racecheck_detail:
            rows.append(_racecheck_detail(name, problem, args, tiling))
        rec = records.make_record("profile", plan, tiling, problem, prof_type="sanitize",
                                  rows=rows)
        records.append(rec, args.records)
    return int(rc)
