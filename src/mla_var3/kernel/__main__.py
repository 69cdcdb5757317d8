"""The CLI: python -m mla_var3.kernel ...

    list                                         versions, language, arch, status
    <name> --check                               correctness on the check grid (or the given problem)
    <name> --b=128 --s_q=1 --h_q=64 --seqlen=4096 [--varlen] [--seed=0]    benchmark one problem
    <name> --grid=bench                          benchmark a named grid
    <name> --seqlens=63,64,65                    explicit per-sequence lengths
    <name> --compare=<a>,<b>|all                 <name> first = the baseline
    <name> --compile-only --arch=sm_90a          no GPU needed
    --json=PATH  --records=DIR (default runs/)  --devlog  --prof_type=disabled|annotation|ncu|sanitize
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from mla_var3.layers import mla

PROBLEM_FLAGS = ("b", "s_q", "h_q", "seqlen")
PROF_TYPES = ("disabled", "annotation", "ncu", "sanitize")
REPO_ROOT = Path(__file__).resolve().parents[3]


class CliError(ValueError):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):            # one line, exit code 2, no usage dump
        raise CliError(message)


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m mla_var3.kernel", description=__doc__,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", help="'list', a design (newest version) or a version (design_vN)")
    ap.add_argument("--check", action="store_true", help="correctness against the float32 reference")
    ap.add_argument("--b", type=int, dest="b")
    ap.add_argument("--s_q", "--s", type=int, dest="s_q")
    ap.add_argument("--h_q", "--h", type=int, dest="h_q")
    ap.add_argument("--seqlen", "--t", type=int, dest="seqlen")
    ap.add_argument("--varlen", action="store_true", help="lengths ~ max(N(seqlen, seqlen/2), s_q)")
    ap.add_argument("--seqlens", type=str, help="explicit lengths, comma-separated (sets b)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--grid", choices=sorted(mla.GRIDS), help="a named problem grid")
    ap.add_argument("--compare", type=str, help="other kernels, comma-separated, or 'all'")
    ap.add_argument("--compile-only", action="store_true", dest="compile_only")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--json", type=str, help="write the results as JSON here")
    ap.add_argument("--records", type=str, default="runs", help="append run records here (default runs/)")
    ap.add_argument("--devlog", action="store_true",
                    help="write the measured table into docs/kernels/<design>.md (from --records)")
    ap.add_argument("--prof_type", choices=PROF_TYPES, default="disabled",
                    help="annotation: NVTX ranges kernel:config:phase; ncu: metrics per launched kernel; "
                         "sanitize: compute-sanitizer memcheck + racecheck on a small problem")
    ap.add_argument("--prof_inner", choices=("ncu", "sanitize"), help=argparse.SUPPRESS)
    ap.add_argument("--tool-log", dest="tool_log", help="append ncu's / compute-sanitizer's raw output here")
    ap.add_argument("--autotune", action="store_true", help="autotune the tiling before benchmarking")
    ap.add_argument("--rep_ms", type=float, default=100.0, help="timing budget per measurement (ms)")
    ap.add_argument("--device", choices=("cuda", "cpu"), help="where to check (torch kernels can run on cpu)")
    return ap


def problems_from_args(args) -> list[mla.MlaDecodeProblem] | None:
    """The problem the flags describe, or None when no problem flag was given."""
    given = {k: getattr(args, k) for k in PROBLEM_FLAGS if getattr(args, k) is not None}
    if args.seqlens:
        try:
            lens = tuple(int(x) for x in args.seqlens.split(",") if x.strip())
        except ValueError:
            raise CliError(f"--seqlens: expected comma-separated ints, got {args.seqlens!r}") from None
        if "b" in given and given["b"] != len(lens):
            raise mla.ProblemError(f"--b={given['b']} but --seqlens gives {len(lens)} lengths")
        given["b"] = len(lens)
        given["seqlens"] = lens
        given.setdefault("seqlen", max(lens, default=0))
    if args.varlen:
        given["varlen"] = True
    if not given:
        return None
    if args.grid:
        raise CliError("--grid: give a named grid or problem flags, not both")
    return [mla.MlaDecodeProblem(**given)]


def kernel_names(args) -> list[str]:
    from mla_var3.runtime import registry
    first = registry.resolve(args.name).name
    names = [first]
    if args.compare:
        if args.compare == "all":
            names += [e.name for e in registry.all_entries() if e.name != first and e.layer == "mla"
                      and e.version == registry.versions_of(e.design)[-1].version]
        else:
            names += [registry.resolve(n.strip()).name for n in args.compare.split(",") if n.strip()]
    return list(dict.fromkeys(names))


def cmd_list() -> int:
    from mla_var3.runtime import devices, registry
    here = None
    if devices.cuda_available():
        here = devices.current_device()
    print(f"{'version':28} {'language':9} {'arch':10} status")
    for e in registry.all_entries():
        try:
            plan = e.load()
            arch = ",".join(plan.arch)
            if here is not None:
                status = "runs here" if devices.arch_supported(plan.arch, here.arch) else f"needs {arch}"
            else:
                status = "runs on cpu" if plan.language == "torch" else f"needs a GPU ({arch})"
            summary = plan.summary
        except Exception as ex:  # a broken version must not hide the others
            arch, status, summary = "?", f"import failed: {type(ex).__name__}: {ex}", ""
        print(f"{e.name:28} {e.language:9} {arch:10} {status}" + (f"  - {summary}" if summary else ""))
    return 0


def compile_shapes(problems) -> list[mla.MlaDecodeProblem]:
    """One problem per distinct static shape (s_q, h_q): what a compile depends on."""
    seen = {}
    for p in problems:
        seen.setdefault((p.s_q, p.h_q), p)
    return list(seen.values())


def cmd_compile_only(names, problems, arch) -> int:
    from mla_var3.runtime import devices, registry
    devices.check_arch_name(arch)
    shapes = compile_shapes(problems or mla.grid("check"))
    failed = 0
    for name in names:
        plan = registry.get_plan(name)
        if not devices.arch_supported(plan.arch, arch):
            print(f"{name}: skipped, built for {','.join(plan.arch)} not {arch}")
            continue
        for p in shapes:
            t0 = time.perf_counter()
            try:
                info = plan.compile_only(p, arch)
            except Exception as ex:
                failed += 1
                print(f"{name} s_q={p.s_q} h_q={p.h_q}: FAILED {type(ex).__name__}: {str(ex).splitlines()[0] if str(ex) else ''}")
                continue
            dt = time.perf_counter() - t0
            what = "compiled" if info.get("compiled") else info.get("reason", "nothing to compile")
            extra = ", ".join(f"{k}={v}" for k, v in info.items() if k not in ("compiled", "reason"))
            print(f"{name} s_q={p.s_q} h_q={p.h_q} [{arch}]: {what} in {dt:.2f}s" + (f" ({extra})" if extra else ""))
    return 1 if failed else 0


def pick_device(args, plan) -> str:
    from mla_var3.runtime import devices
    if args.device:
        if args.device == "cpu" and plan.language != "torch":
            raise CliError(f"--device=cpu: {plan.name} is a {plan.language} kernel and needs a GPU")
        return args.device
    if devices.cuda_available():
        return "cuda"
    if plan.language == "torch":
        return "cpu"
    raise devices.DeviceError(f"{plan.name} needs a GPU ({','.join(plan.arch)}) and none is visible; "
                              f"use --compile-only --arch=sm_90a here")


def cmd_check(names, problems, args) -> int:
    from mla_var3.runtime import check, records, registry
    problems = problems or mla.grid(args.grid or "check")
    seeds = (args.seed, args.seed + 1)
    all_ok, out = True, []
    for name in names:
        plan = registry.get_plan(name)
        device = pick_device(args, plan)
        n_fail = 0

        def report(problem, kern, res):
            nonlocal n_fail
            tag = "PASS" if res.passed else "FAIL"
            n_fail += not res.passed
            errs = ", ".join(f"{k}={v:.3g}" for k, v in res.errors.items())
            print(f"{tag} {name} {res.problem_key} seed={res.seed}{' peaked' if res.peaked else ''}"
                  f"  {errs}" + (f"  <- {res.reason}" if not res.passed else ""))
        t0 = time.perf_counter()
        results = check.check_plan(plan, problems, seeds=seeds, peaked_seeds=(args.seed,), device=device,
                                   on_result=report)
        ok = n_fail == 0
        all_ok &= ok
        single = len(problems) == 1 and not args.grid
        rec = records.make_record("check", plan, None, problems[0] if single else None,
                                  grid=None if single else (args.grid or "check"), passed=ok, seeds=list(seeds),
                                  device=device, errors={"failed": n_fail, "total": len(results)},
                                  problems=[p.key() for p in problems], cases=[r.__dict__ for r in results])
        records.append(rec, args.records)
        out.append(rec)
        print(f"{name}: {'PASSED' if ok else 'FAILED'} {len(results) - n_fail}/{len(results)} cases "
              f"on {len(problems)} problems ({device}, {time.perf_counter() - t0:.1f}s)")
    write_json(args, out)
    return 0 if all_ok else 1


def cmd_bench(names, problems, args) -> int:
    from mla_var3 import report
    from mla_var3.runtime import autotune, bench, devices, peers, records, registry
    device = devices.current_device()
    problems = problems or (mla.grid(args.grid) if args.grid else [mla.MlaDecodeProblem()])
    recs = []
    for problem in problems:
        for name in names:
            plan = registry.get_plan(name)
            devices.require_arch(plan.name, plan.arch, device)
            if args.autotune:
                tiling = autotune.autotune(plan, problem, rep_ms=min(args.rep_ms, 50)).best
            else:
                tiling = autotune.lookup(plan, problem, device.name)     # None: the default
            fields = bench.bench_plan(plan, problem, device, tiling=tiling, seed=args.seed, rep_ms=args.rep_ms)
            tiling_obj = fields.pop("tiling_obj")
            rec = records.make_record("bench", plan, tiling_obj, problem, **fields)
            records.append(rec, args.records)
            recs.append(rec)
            print(f"  {name:26} {problem.key():44} {rec['time_us']['median']:9.1f} us", flush=True)
        peer = peers.peer_record(problem, device) if args.compare else None
        if peer is not None:
            recs.append(peer)
    print()
    print(report.text_table(report.bench_rows(recs, baseline=names[0], order=names)))
    write_json(args, [r for r in recs if r["kind"] == "bench"])
    return 0


def cmd_devlog(names, args) -> int:
    from mla_var3 import report
    from mla_var3.runtime import records, registry
    recs = records.load(args.records) if Path(args.records).exists() else []
    entry = registry.resolve(names[0])          # the version whose section gets the table
    recs = [r for r in recs if r["kernel"] in names]
    if not any(r["kernel"] == entry.name and r["kind"] == "bench" for r in recs):
        raise CliError(f"--devlog: no bench records of {entry.name} in {args.records}")
    recs = recs + peer_rows(recs)
    body = (report.run_context(report.latest_records(recs)) + "\n\n"
            + report.markdown_table(report.bench_rows(recs, baseline=entry.name, order=names)))
    path = REPO_ROOT / "docs" / "kernels" / f"{entry.design}.md"
    changed = records.update_devlog(path, entry.name, body)
    print(f"devlog: {path} {'updated' if changed else 'unchanged'}")
    return 0


def peer_rows(recs: list[dict]) -> list[dict]:
    """Peer reference rows for the problems of bench records (GPU named in the records)."""
    from dataclasses import replace

    from mla_var3.runtime import devices, peers
    out, seen = [], set()
    for r in recs:
        gpu = (r.get("env") or {}).get("gpu")
        if r.get("kind") != "bench" or not gpu or r["problem_key"] in seen:
            continue
        seen.add(r["problem_key"])
        spec = devices.spec_for_name(gpu)
        peer = peers.peer_record(mla.MlaDecodeProblem.from_dict(r["problem"]), replace(spec, name=gpu)) if spec else None
        if peer is not None:
            out.append(peer)
    return out


def write_json(args, recs) -> None:
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(recs, indent=1, default=str))


def run(argv) -> int:
    args = build_parser().parse_args(argv)
    if args.name == "list":
        return cmd_list()
    problems = problems_from_args(args)
    names = kernel_names(args)
    from mla_var3.kernel import cli_profile
    from mla_var3.runtime import profiling
    if args.prof_inner:
        return cli_profile.run_inner(names[0], (problems or [mla.MlaDecodeProblem()])[0], args.prof_inner, args.seed)
    if args.prof_type == "ncu":
        return cli_profile.cmd_ncu(names, problems, args)
    if args.prof_type == "sanitize":
        return cli_profile.cmd_sanitize(names, problems, args)
    if args.prof_type == "annotation":
        profiling.enable_annotation()
        print("annotation: NVTX ranges <kernel>:<config>:<phase>; to record them:\n  "
              + profiling.nsys_command(list(argv)))
    if args.compile_only:
        return cmd_compile_only(names, problems, args.arch)
    if args.check:
        return cmd_check(names, problems, args)
    from mla_var3.runtime import devices
    if args.devlog and not devices.cuda_available():
        return cmd_devlog(names, args)          # from records brought back from the GPU
    rc = cmd_bench(names, problems, args)
    if args.devlog:
        rc = rc or cmd_devlog(names, args)
    return rc


def main(argv=None) -> int:
    from mla_var3.runtime.devices import DeviceError
    from mla_var3.runtime.kernel_plan import PlanError
    from mla_var3.runtime.profiling import ProfilerError
    from mla_var3.runtime.registry import RegistryError
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except (CliError, mla.ProblemError, mla.InputError, PlanError, DeviceError, RegistryError, ProfilerError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
