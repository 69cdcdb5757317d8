"""The kernel CLI: python -m mla_var3.kernel ...

    list                                         versions, language, problem kind, arch, status
    <name> --check                               correctness on the check grid (or the given problem)
    <name> --b=128 --s_q=1 --h_q=64 --seqlen=4096 [--varlen] [--seed=0]    benchmark one problem
    <name> --grid=bench                          benchmark a named grid
    <name> --grid=bench --where "h_q >= 64"      ... only its problems for which the expression holds
    <name> --compare=<a>,<b>|all                 <name> first = the baseline
    <name> --compile-only --arch=sm_90a          no GPU needed
    <name> --dump=ptx,cubin,sass,mlir|all        compiler output + one summary line per stage (no GPU)
    --lineinfo                                   CuTe DSL builds with line info (dump, ncu, benchmarks)
    --json=PATH  --records=DIR (default runs/)  --devlog [--docs-dir DIR]
    --prof_type=disabled|annotation|ncu|sanitize|timeline
    --prof_type=ncu --ncu-set=detail [--ncu-rep]  stall reasons, scheduler, bank conflicts, sectors; keep the .ncu-rep
    --prof_type=ncu --ncu-set=source             where the warps were sampled, per SASS instruction (mbarrier waits named)
    --prof_type=timeline [--timeline-ctas=4]     in-kernel phase timeline (CuTe DSL) -> Chrome trace JSON + PNG
The dimension flags (--b, --h_q, ...) are those of the kernel's problem kind.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from mla_var3.cli.common import write_json
from mla_var3.errors import DeviceError, UsageError, guarded

PROF_TYPES = ("disabled", "annotation", "ncu", "sanitize", "timeline")


class _Parser(argparse.ArgumentParser):
    def error(self, message):            # one line, exit code 2, no usage dump
        raise UsageError(message)


def build_parser(kinds=(), *, pre: bool = False) -> argparse.ArgumentParser:
    """The generic flags plus the dimension flags of `kinds` (the kernel's problem kind).
    `pre`: the lenient first pass that only looks for the kernel name."""
    ap = _Parser(prog="python -m mla_var3.kernel", description=__doc__, add_help=not pre,
                 formatter_class=argparse.RawDescriptionHelpFormatter, conflict_handler="resolve")
    ap.add_argument("name", nargs="?" if pre else None,
                    help="'list', a design (newest version) or a version (design_vN)")
    ap.add_argument("--check", action="store_true", help="correctness against the float32 reference")
    ap.add_argument("--seed", type=int, default=0)
    grids = sorted({g for k in kinds for g in k.grids})
    ap.add_argument("--grid", choices=grids or None, help="a named problem grid of the problem kind")
    ap.add_argument("--compare", type=str, help="other kernels, comma-separated, or 'all'")
    ap.add_argument("--compile-only", action="store_true", dest="compile_only")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--dump", metavar="KINDS",
                    help="write ptx,cubin,sass,mlir (or all) under <records>/dump/ and summarize each stage")
    ap.add_argument("--lineinfo", action="store_true",
                    help="build CuTe DSL kernels with --generate-line-info (ncu source view; cuTile always has it)")
    ap.add_argument("--json", type=str, help="write the results as JSON here")
    ap.add_argument("--records", type=str, default="runs", help="append run records here (default runs/)")
    ap.add_argument("--devlog", action="store_true",
                    help="write the measured table into <docs>/kernels/<design>.md (from --records)")
    ap.add_argument("--docs-dir", dest="docs_dir",
                    help="where the docs live (default: docs/ of the current git checkout)")
    ap.add_argument("--prof_type", choices=PROF_TYPES, default="disabled",
                    help="annotation: NVTX ranges kernel:config:phase; ncu: metrics per launched kernel; "
                         "sanitize: compute-sanitizer memcheck + racecheck on a small problem; "
                         "timeline: an instrumented build records phase timestamps (CuTe DSL)")
    ap.add_argument("--ncu-set", dest="ncu_set", choices=("basic", "detail", "source"),
                    help="with --prof_type=ncu: basic (default) or detail (+ warp stall reasons, eligible/issued "
                         "warps per scheduler, issue slots, smem bank conflicts, L2/DRAM sectors) or source "
                         "(warp samples per SASS instruction: stall reasons, mbarrier waits, the top instructions; "
                         "the CSV kept under <records>/ncu/)")
    ap.add_argument("--ncu-rep", dest="ncu_rep", action="store_true",
                    help="with --prof_type=ncu: also record an ncu report (--set full) under <records>/ncu/ for the GUI")
    ap.add_argument("--racecheck-detail", dest="racecheck_detail", action="store_true",
                    help="with --prof_type=sanitize: one more racecheck run reporting every hazard, grouped by "
                         "instruction pair with the CTAs, threads (warpgroups) and smem addresses involved")
    ap.add_argument("--timeline-ctas", dest="timeline_ctas", type=int,
                    help="with --prof_type=timeline: CTAs drawn in the trace and picture (default 4, the longest)")
    ap.add_argument("--timeline-max-ctas", dest="timeline_max_ctas", type=int,
                    help="with --prof_type=timeline: CTAs that record at all (default 1024; CTA id < this)")
    ap.add_argument("--prof_inner", choices=("ncu", "sanitize"), help=argparse.SUPPRESS)
    ap.add_argument("--problem_json", help=argparse.SUPPRESS)       # the inner profiling run's problem
    ap.add_argument("--tool-log", dest="tool_log", help="append ncu's / compute-sanitizer's raw output here")
    ap.add_argument("--autotune", action="store_true",
                    help="autotune the tiling before benchmarking (each trial printed and kept as a 'tune' record; "
                         "with --compile-only: compile every config of the search space ahead, for the AOT cache)")
    ap.add_argument("--tune-in-process", dest="tune_in_process", action="store_true",
                    help="with --autotune: run the trials in this process (compiles shared across problems of one "
                         "shape; a hung config hangs the run) instead of one process per trial under a timeout")
    ap.add_argument("--tune-knobs", dest="tune_knobs", type=lambda text: [k.strip() for k in text.split(",") if k.strip()],
                    help="with --autotune: only the configs of the first kernel that move these fields of its Tiling, "
                         "comma-separated (e.g. chunk,refill_warps), plus its default; --compile-only --autotune "
                         "compiles the same")
    ap.add_argument("--tiling", help="key=value,... fields of the first kernel's Tiling (e.g. chunk=16); "
                                     "wins over --autotune and cached winners; +key=value,... sets the fields over "
                                     "each problem's own tiling (its tuned winner, else its default)")
    ap.add_argument("--where", help="with --grid: only the grid's problems for which this holds, e.g. "
                                    "\"s_q * h_q >= 128 and not varlen\" (problem fields, numbers, + - * // %%, "
                                    "comparisons, and/or/not)")
    ap.add_argument("--rep_ms", type=float, default=100.0, help="timing budget per measurement (ms); the energy per "
                    "call (mJ) is read only from replays of about 300 ms or more (NVML's counter moves every ~100 ms)")
    ap.add_argument("--replays", type=int, default=10, help="timed rounds per problem (each plan's graph once per "
                    "round, interleaved); more rounds when the samples split into a fast and a slow mode")
    ap.add_argument("--device", choices=("cuda", "cpu"), help="where to check (torch kernels can run on cpu)")
    for kind in kinds:
        kind.add_cli_args(ap)
    return ap


def _all_kinds() -> list[type]:
    from mla_var3.layers import KINDS, problem_kind
    return [problem_kind(k) for k in KINDS]


def parse(argv: list[str]) -> tuple[argparse.Namespace, type | None]:
    """Two passes: find the kernel name (knowing every kind's flags, so `--b 4 name` parses),
    then parse strictly with the flags of that kernel's problem kind."""
    known, _ = build_parser(_all_kinds(), pre=True).parse_known_args(argv)
    if not known.name or known.name == "list":
        return build_parser(_all_kinds()).parse_args(argv), None
    from mla_var3.runtime import registry
    kind = registry.get_plan(known.name).problem_kind
    return build_parser([kind]).parse_args(argv), kind


def kernel_names(args, kind) -> list[str]:
    from mla_var3.runtime import registry
    first = registry.resolve(args.name).name
    names = [first]
    if args.compare is not None:
        if args.compare == "all":
            for e in registry.newest_entries():
                if e.name == first or e.load().problem_kind is not kind:
                    continue
                missing = e.load().unavailable()
                if missing:              # an unbuilt peer: say so, compare the rest
                    print(f"--compare=all: skipping {e.name}: {missing}")
                    continue
                names.append(e.name)
        else:
            others = [n.strip() for n in args.compare.split(",") if n.strip()]
            if not others:
                raise UsageError(f"--compare: expected kernel names or 'all', got {args.compare!r}")
            for n in others:
                plan = registry.get_plan(n)
                if plan.problem_kind is not kind:
                    raise UsageError(f"--compare: {plan.name} solves {plan.problem_kind.kind}, "
                                     f"{first} solves {kind.kind}")
                names.append(plan.name)
    return list(dict.fromkeys(names))


def cmd_list() -> int:
    from mla_var3.runtime import devices, registry
    here = devices.current_device() if devices.cuda_available() else None
    entries = registry.all_entries()
    w = max([28] + [len(e.name) for e in entries])
    print(f"{'version':{w}} {'language':9} {'problem':11} {'arch':10} status")
    for e in entries:
        try:
            plan = e.load()
            arch, kind = ",".join(plan.arch), plan.problem_kind.kind
            missing = plan.unavailable()
            if missing:
                status = f"unavailable: {missing}"
            elif here is not None:
                status = "runs here" if devices.arch_supported(plan.arch, here.arch) else f"needs {arch}"
            else:
                status = "runs on cpu" if plan.language == "torch" else f"needs a GPU ({arch})"
            summary = plan.summary
        except Exception as ex:  # a broken version must not hide the others
            arch, kind, status, summary = "?", "?", f"import failed: {type(ex).__name__}: {ex}", ""
        print(f"{e.name:{w}} {e.language:9} {kind:11} {arch:10} {status}" + (f"  - {summary}" if summary else ""))
    return 0


def require_available(names) -> None:
    """Refuse before any work when a named kernel cannot run in this checkout (an unbuilt peer)."""
    from mla_var3.errors import PlanError
    from mla_var3.runtime import registry
    for name in names:
        missing = registry.get_plan(name).unavailable()
        if missing:
            raise PlanError(f"{name} is unavailable: {missing}")


def compile_shapes(problems) -> list:
    """One problem per distinct static key (what a compile depends on)."""
    seen = {}
    for p in problems:
        seen.setdefault(p.static_key(), p)
    return list(seen.values())


def compile_problems(plan, problems) -> list:
    """One problem per distinct (static key, default tiling) - what a run of these problems
    compiles (a default tiling may depend on the lengths, e.g. the split length)."""
    seen = {}
    for p in problems:
        try:
            tiling = "" if plan.supports(p) else plan.default_tiling(p).key()
        except Exception:                 # the compile below reports it
            tiling = ""
        seen.setdefault((p.static_key(), tiling), p)
    return list(seen.values())


def with_tuned_winners(plan, problems):
    """(problem, None) for each problem, then (problem, winner) for each committed tuned winner of
    it (conf/tuned, any GPU) whose build differs from the default's: a run on that GPU builds the
    winner, so an AOT cache made without a GPU must hold it too."""
    from mla_var3.runtime import autotune
    for p in problems:
        yield p, None
        if plan.supports(p):
            continue
        seen = {plan.default_tiling(p).key()}
        for gpu in autotune.committed_gpus():
            winner = autotune.lookup(plan, p, gpu)
            if winner is not None and winner.key() not in seen:
                seen.add(winner.key())
                yield p, winner


def with_tune_configs(plan, problems, knobs=None):
    """(problem, tiling) for every config of each problem's autotune search space, each
    (static shape, tiling) once: what `--autotune` on these problems will compile. A problem the
    plan does not support comes once, with no tiling (the caller says why it is skipped)."""
    seen = set()
    for p in problems:
        if plan.supports(p):
            yield p, None
            continue
        for tiling in plan.tune_configs(p, knobs):
            key = (p.static_key(), tiling.key())
            if key not in seen:
                seen.add(key)
                yield p, tiling


def cmd_compile_only(names, problems, args, kind) -> int:
    from mla_var3.cli.tiling import is_override
    from mla_var3.runtime import aot_cache, devices, registry
    devices.check_arch_name(args.arch)
    problems = problems or kind.grid(args.grid or "check")
    failed, wrong_arch = 0, []
    for name in names:
        plan = registry.get_plan(name)
        if not devices.arch_supported(plan.arch, args.arch):
            print(f"{name}: skipped, built for {','.join(plan.arch)} not {args.arch}")
            wrong_arch.append(name)
            continue
        override = is_override(args.tiling) and name == names[0]
        forced = None if override else user_tiling(args, plan, names)
        if args.autotune:               # every config a later --autotune of these problems builds
            builds = with_tune_configs(plan, problems, args.tune_knobs)
        elif override:                  # --tiling +...: each problem's default tiling with those fields
            builds = ((p, None if plan.supports(p) else user_tiling(args, plan, names, p))   # (no GPU: no
                      for p in compile_problems(plan, problems))                            # tuned winner)
        elif forced is not None:        # --tiling: that build, once per static shape
            builds = ((p, forced) for p in compile_shapes(problems))
        elif aot_cache.directory():     # with the AOT cache every build a run needs, winners included
            builds = with_tuned_winners(plan, compile_problems(plan, problems))
        else:                           # else one per static shape
            builds = ((p, None) for p in compile_shapes(problems))
        for p, tiling in builds:
            label = f"{name} {p.static_key()}" + (f" {tiling.key()}" if tiling is not None else "")
            reasons = plan.supports(p)
            if reasons:
                print(f"{label}: skipped, {'; '.join(reasons)}")
                continue
            t0 = time.perf_counter()
            try:
                info = plan.compile_only(p, args.arch, tiling=tiling)
            except Exception as ex:
                failed += 1
                print(f"{label}: FAILED {type(ex).__name__}: {str(ex).splitlines()[0] if str(ex) else ''}")
                continue
            what = "compiled" if info.get("compiled") else info.get("reason", "nothing to compile")
            extra = ", ".join(f"{k}={v}" for k, v in info.items() if k not in ("compiled", "reason"))
            print(f"{label} [{args.arch}]: {what} in {time.perf_counter() - t0:.2f}s" + (f" ({extra})" if extra else ""))
    if wrong_arch:                      # an explicit compile request that compiled nothing for them
        raise UsageError(f"--compile-only --arch={args.arch}: {', '.join(wrong_arch)} cannot be compiled for "
                         f"{args.arch} (built for another arch); nothing was compiled for them")
    return 1 if failed else 0


def pick_device(args, plan) -> str:
    from mla_var3.runtime import devices
    if args.device:
        if args.device == "cpu" and plan.language != "torch":
            raise UsageError(f"--device=cpu: {plan.name} is a {plan.language} kernel and needs a GPU")
        if args.device == "cuda" and not devices.cuda_available():
            raise DeviceError("--device=cuda: no CUDA GPU is visible here (torch kernels can run with --device=cpu)")
        return args.device
    if devices.cuda_available():
        return "cuda"
    if plan.language == "torch":
        return "cpu"
    raise DeviceError(f"{plan.name} needs a GPU ({','.join(plan.arch)}) and none is visible; "
                      f"use --compile-only --arch=sm_90a here")


def user_tiling(args, plan, names, problem=None, device=None):
    """The --tiling of the first kernel (None for the others and without the flag). With
    `+key=value,...` the fields go over `problem`'s own tiling (its tuned winner on `device`,
    else the plan's default for it); without a problem that form is refused in one line."""
    if not args.tiling or plan.name != names[0]:
        return None
    from mla_var3.cli.tiling import is_override, override_tiling, parse_tiling
    if not is_override(args.tiling):
        return parse_tiling(plan, args.tiling)
    if problem is None:
        raise UsageError(f"--tiling {args.tiling}: the '+' form (over each problem's own tiling) needs a "
                         f"problem; give the whole tiling (key=value,...) here")
    from mla_var3 import jobs
    base = (jobs.choose_tiling(plan, problem, device) if device is not None else None) or plan.default_tiling(problem)
    return override_tiling(plan, base, args.tiling)


class _OverEachDefault:
    """--check --tiling +key=value: each problem's default tiling with those fields (callable per
    problem; `rule` is what the check record keeps)."""

    def __init__(self, args, plan, names):
        self.args, self.plan, self.names = args, plan, names
        self.rule = f"each problem's default tiling with {args.tiling.lstrip()[1:]}"

    def __call__(self, problem):
        return user_tiling(self.args, self.plan, self.names, problem)


def check_tiling(args, plan, names):
    """What --check runs: --tiling's one tiling, a per-problem rule for its '+' form, or None."""
    from mla_var3.cli.tiling import is_override
    if is_override(args.tiling) and plan.name == names[0]:
        return _OverEachDefault(args, plan, names)
    return user_tiling(args, plan, names)


def cmd_check(names, problems, args, kind) -> int:
    from mla_var3 import jobs
    from mla_var3.runtime import records, registry
    grid = None if problems else (args.grid or "check")
    problems = problems or kind.grid(grid)
    seeds = (args.seed, args.seed + 1)
    all_ok, out = True, []
    for name in names:
        plan = registry.get_plan(name)
        device = pick_device(args, plan)

        def show(problem, res, name=name):
            if res.status == "skip":
                print(f"SKIP {name} {res.problem_key}  <- {res.reason}")
                return
            errs = ", ".join(f"{k}={v:.3g}" for k, v in res.errors.items())
            dist = "" if res.dist == kind.dists[0] else f" {res.dist}"
            print(f"{res.status.upper()} {name} {res.problem_key} seed={res.seed}{dist}  {errs}"
                  + (f"  <- {res.reason}" if res.status == "fail" else ""))
        t0 = time.perf_counter()
        rec, results = jobs.check_record(plan, problems, seeds=seeds, extra_seeds=(args.seed,), device=device,
                                         tiling=check_tiling(args, plan, names),
                                         grid=grid, on_result=show)
        records.append(rec, args.records)
        out.append(rec)
        all_ok &= rec["passed"]
        e = rec["errors"]
        ran = e["total"] - e["skipped"]
        print(f"{name}: {'PASSED' if rec['passed'] else 'FAILED'} {ran - e['failed']}/{ran} cases on "
              f"{len(problems)} problems" + (f", {e['skipped']} skipped" if e["skipped"] else "")
              + f" ({device}, {time.perf_counter() - t0:.1f}s)")
    write_json(args.json, out)
    return 0 if all_ok else 1


def cmd_bench(names, problems, args, kind) -> int:
    from mla_var3 import jobs, report
    from mla_var3.runtime import devices, records, registry
    device = devices.current_device()
    problems = problems or (kind.grid(args.grid) if args.grid else [kind.default_problem()])
    recs = []
    for problem in problems:
        plans = []
        for name in names:
            plan = registry.get_plan(name)
            reasons = plan.supports(problem)
            if reasons:
                print(f"  {name:26} {problem.key():44} skipped: {'; '.join(reasons)}")
                continue
            plans.append(plan)
        # every plan of this problem timed in turn (one clock and power history for all of them)
        timed = jobs.bench_records(plans, problem, device, seed=args.seed, rep_ms=args.rep_ms, replays=args.replays,
                                   tune=args.autotune, isolate=not args.tune_in_process, on_tuned=tune_reporter(args.records),
                                   knobs=args.tune_knobs,
                                   tilings=[user_tiling(args, p, names, problem, device) for p in plans]) if plans else []
        for rec in timed:
            records.append(rec, args.records)
            recs.append(rec)
            print(f"  {rec['kernel']:26} {problem.key():44} {rec['time_us']['median']:9.1f} us"
                  f"{clock_note(rec.get('clocks_during'))}{modes_note(rec['time_us'])}", flush=True)
        if args.compare and problem.key() not in report.live_peer_problems(recs):
            recs += problem.peer_records(device)
    print()
    print(report.text_table(report.bench_rows(recs, baseline=names[0], order=names)))
    for note in report.table_notes(recs):
        print(note)
    write_json(args.json, [r for r in recs if r["kind"] == "bench"])
    return 0


def clock_note(during: dict | None) -> str:
    """The bench line's tail from a record's `clocks_during`: '  at X MHz, Y W' and, where the
    energy counter was read, ', Z mJ/call' (at the power cap the energy per call decides the
    clock a kernel gets); '' when the clock was not read."""
    during = during or {}
    if not (during.get("sm_mhz") and during.get("power_w")):
        return ""
    energy = f", {during['mj_per_call']:.1f} mJ/call" if during.get("mj_per_call") else ""
    return f"  at {during['sm_mhz']:.0f} MHz, {during['power_w']:.0f} W{energy}"


def modes_note(time_us: dict) -> str:
    """The bench line's warning when the replays split into a fast and a slow mode (bench.two_modes):
    the median is then a draw between them; the fast mode compares such kernels
    (`report --ratios --stat median,p10`, more rounds with --replays)."""
    from mla_var3.runtime import bench
    modes = bench.two_modes(time_us.get("samples") or [])
    if modes is None:
        return ""
    fast, slow, share = modes
    return f"  [two modes: {fast:.1f} and {slow:.1f} us, {share:.0%} slow; compare with --stat p10]"


def tune_reporter(records_dir):
    """Prints every autotune trial of a bench run (fastest marked) and appends one 'tune' record
    per (kernel, problem) to the run's records: the search is data, not only its winner."""
    def report(plan, problem, result) -> None:
        from mla_var3.runtime import records
        best = result.best.key() if result.best is not None else None
        for t in result.trials:
            what = f"{t['time_us']:9.1f} us" if t["status"] == "ok" else f"{t['status']}: {t.get('error', '')[:90]}"
            mark = "  <- best" if t["tiling"] == best else ""
            print(f"  tune {plan.name:21} {problem.key():44} {t['tiling']:60} {what}{mark}", flush=True)
        records.append(records.make_record("tune", plan, result.best, problem, trials=result.trials,
                                           best_us=result.best_us), records_dir)
    return report


def cmd_devlog(names, args, docs) -> int:
    from pathlib import Path

    from mla_var3.cli import devlog
    from mla_var3.runtime import records, registry
    recs = records.load(args.records) if Path(args.records).exists() else []
    devlog.write_devlog(registry.resolve(names[0]), names, recs, docs,
                        compare=args.compare is not None)     # without: keep the other rows there
    return 0


MAX_SEED = 2 ** 31 - 1 - 1000 * 64        # input sets use seed + 1000 * i; torch seeds are 64-bit


def check_flags(args) -> None:
    """Values argparse accepts but the harness cannot use: one line each, before any work."""
    if not 0 <= args.seed <= MAX_SEED:
        raise UsageError(f"--seed: expected 0..{MAX_SEED}, got {args.seed}")
    if not 0 < args.rep_ms <= 60_000:
        raise UsageError(f"--rep_ms: expected a timing budget in (0, 60000] ms, got {args.rep_ms:g}")
    if not 3 <= args.replays <= 1000:
        raise UsageError(f"--replays: expected 3..1000 timed rounds, got {args.replays}")
    for flag, value, prof in (("--ncu-set", args.ncu_set, "ncu"), ("--ncu-rep", args.ncu_rep or None, "ncu"),
                              ("--racecheck-detail", args.racecheck_detail or None, "sanitize"),
                              ("--timeline-ctas", args.timeline_ctas, "timeline"),
                              ("--timeline-max-ctas", args.timeline_max_ctas, "timeline")):
        if value is not None and args.prof_type != prof and args.prof_inner is None:
            raise UsageError(f"{flag}: only with --prof_type={prof} (got --prof_type={args.prof_type})")
    if args.tune_knobs and not args.autotune:
        raise UsageError("--tune-knobs: only with --autotune (it narrows the search space)")
    if args.tune_in_process and not args.autotune:
        raise UsageError("--tune-in-process: only with --autotune (it says where the trials run)")
    args.ncu_set = args.ncu_set or "basic"
    args.timeline_ctas = 4 if args.timeline_ctas is None else args.timeline_ctas
    args.timeline_max_ctas = 1024 if args.timeline_max_ctas is None else args.timeline_max_ctas
    if args.timeline_max_ctas < 1:
        raise UsageError(f"--timeline-max-ctas: expected >= 1, got {args.timeline_max_ctas}")


def run(argv: list[str]) -> int:
    args, kind = parse(argv)
    check_flags(args)
    if args.name == "list":
        return cmd_list()
    problems = kind.from_cli(args)
    if problems and args.grid:
        raise UsageError("--grid: give a named grid or problem flags, not both")
    if args.where is not None:
        if not args.grid:
            raise UsageError("--where: only with --grid (it keeps some of a named grid's problems)")
        from mla_var3.cli.where import filter_grid
        problems = filter_grid(kind.grid(args.grid), args.where, args.grid)
    names = kernel_names(args, kind)
    if args.tiling:
        from mla_var3.cli.tiling import given_fields
        from mla_var3.runtime import registry
        given_fields(registry.get_plan(names[0]), args.tiling)       # a bad --tiling fails before any work
    if args.tune_knobs:
        from mla_var3.runtime import registry
        registry.get_plan(names[0]).require_tiling_fields(args.tune_knobs)    # a misspelt knob, likewise
    if args.lineinfo:
        from mla_var3.runtime import cute_kernel
        cute_kernel.enable_line_info()    # every CuteKernel built from here on, and child processes
    if args.dump is not None:
        from mla_var3.cli import dump
        return dump.cmd_dump(names, problems, args, kind)
    if args.prof_type == "timeline":
        from mla_var3.cli import timeline
        return timeline.cmd_timeline(names, problems, args, kind)
    docs = None
    if args.devlog:                       # where it goes is checked before any work
        from mla_var3.cli import devlog
        docs = devlog.docs_dir(args.docs_dir)
    from mla_var3.cli import profile
    from mla_var3.runtime import devices, profiling
    if not args.compile_only and not (args.devlog and not devices.cuda_available()):
        require_available(names)          # what runs must exist; compile-only and devlog-from-records need nothing
    if args.prof_inner:
        problem = kind.from_dict(json.loads(args.problem_json)) if args.problem_json else kind.default_problem()
        return profile.run_inner(names[0], problem, args.prof_inner, args.seed, tiling=args.tiling)
    if args.prof_type == "ncu":
        return profile.cmd_ncu(names, problems, args, kind)
    if args.prof_type == "sanitize":
        return profile.cmd_sanitize(names, problems, args, kind)
    if args.prof_type == "annotation":
        profiling.enable_annotation()
        print("annotation: NVTX ranges <kernel>:<config>:<phase>; to record them:\n  "
              + profiling.nsys_command(list(argv)))
    if args.compile_only:
        return cmd_compile_only(names, problems, args, kind)
    if args.check:
        return cmd_check(names, problems, args, kind)
    if args.devlog and not devices.cuda_available():
        return cmd_devlog(names, args, docs)          # from records brought back from the GPU
    rc = cmd_bench(names, problems, args, kind)
    if args.devlog:
        rc = rc or cmd_devlog(names, args, docs)
    return rc


def main(argv=None) -> int:
    return guarded(run, sys.argv[1:] if argv is None else list(argv))


if __name__ == "__main__":
    sys.exit(main())
