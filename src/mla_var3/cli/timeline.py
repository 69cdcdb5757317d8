"""--prof_type=timeline: run a CuTe DSL version's instrumented build once and write its in-kernel
timeline (runtime/timeline.py: schema, trace, summary; kernel/cute_python/common/timeline.py:
the device side).

    python -m mla_var3.kernel flash_mla_decode_v4 --prof_type=timeline --b=64 --s_q=1 --h_q=128 --seqlen=4096
    python -m mla_var3.kernel flash_mla_decode_v4 --prof_type=timeline --compile-only     (no GPU)

On the GPU: measures the %globaltimer tick and the SM clock with a one-thread probe kernel,
times the plain and the instrumented build (the instrumentation's cost), checks the instrumented
run's outputs against the reference, then writes `<records>/timeline/<version>/<problem>/`:
trace.json (Perfetto / chrome://tracing), timeline.png (the longest-running CTAs) and
timeline.npz (the raw buffer: `python -m mla_var3.runtime.timeline <npz>` renders it again),
prints the phase summary and appends a profile record (prof_type "timeline").
"""
from __future__ import annotations

import re
import statistics
import time
from pathlib import Path

from mla_var3.errors import DeviceError, UsageError

PROBE_SAMPLES = 1 << 14
TIMED_LAUNCHES = 20


def instrumented_versions() -> list[str]:
    from mla_var3.runtime import registry
    out = []
    for e in registry.all_entries():
        try:
            if hasattr(e.load(), "timeline_kernel"):
                out.append(e.name)
        except Exception:  # a broken version must not hide the others
            continue
    return out


def check_request(names, args, plan) -> None:
    """Everything a timeline request can get wrong, one line each, before any work."""
    if args.compare is not None:
        raise UsageError("--prof_type=timeline: one version at a time (drop --compare)")
    if args.grid:
        raise UsageError("--prof_type=timeline: one problem (give dimension flags, not --grid)")
    if plan.language != "cute-dsl":
        raise UsageError(f"--prof_type=timeline: {plan.name} is a {plan.language} kernel; the in-kernel timeline "
                         f"needs CuTe DSL (it stores the SM clock register from chosen warps; cuTile exposes no timer)")
    if not hasattr(plan, "timeline_kernel"):
        raise UsageError(f"--prof_type=timeline: {plan.name} has no timeline instrumentation "
                         f"(instrumented: {', '.join(instrumented_versions()) or 'none'})")
    if not 1 <= args.timeline_ctas <= 64:
        raise UsageError(f"--timeline-ctas: expected 1..64 CTAs in the trace, got {args.timeline_ctas}")


def out_dir(records: str, plan, problem) -> Path:
    key = re.sub(r"[^A-Za-z0-9_.,=+-]", "_", problem.key())
    return Path(records) / "timeline" / plan.name / key


def chosen_tiling(plan, problem, args):
    """What a benchmark of this problem would run (its tuned winner on this GPU, else the default;
    without a GPU the default), or --tiling: key=value,... as given, +key=value,... over that."""
    from mla_var3.cli import profile
    from mla_var3.runtime import devices
    from mla_var3.cli.tiling import resolve_tiling

    def base():
        return profile.choose_tiling(plan, problem) if devices.cuda_available() else plan.default_tiling(problem)
    return resolve_tiling(plan, args.tiling, base) if args.tiling else base()


def compile_only(plan, problem, args) -> int:
    """Compile the instrumented build for `--arch` (no GPU) and show what the stamps cost in code."""
    import tempfile

    from mla_var3.runtime import artifacts, sass
    kern = plan.compile_timeline(problem, args.arch, tiling=chosen_tiling(plan, problem, args))
    tools = sass.find_disassemblers()
    for stage in kern.stages:
        label = f"{plan.name} {stage.name}" + (f" [{stage.key.variant}]" if getattr(stage.key, "variant", "") else "")
        if not tools:
            print(f"{label}: compiled (no cuobjdump / nvdisasm for the SASS summary)")
            continue
        arts = artifacts.stage_artifacts(stage, args.arch)
        with tempfile.TemporaryDirectory(prefix="mla_var3_tl_") as tmp:
            cubin = Path(tmp) / "stage.cubin"
            cubin.write_bytes(arts.files["cubin"])
            text, res = sass.disassemble(cubin, tools)
        facts = sass.summarize(sass.parse_res_usage(res), sass.parse_sass(text))
        timers = sass.timer_reads(text)
        print(sass.format_summary(label, facts) + "; timer reads: "
              + (", ".join(f"{k} {v}" for k, v in sorted(timers.items())) or "none"))
    return 0


def measure_timer() -> dict:
    """The probe kernel: back-to-back (%globaltimer, clock64) from one thread."""
    import torch

    from mla_var3.kernel.cute_python.common import timeline as dev
    from mla_var3.runtime import timeline
    from mla_var3.runtime.cute_kernel import CuteKernel
    gt = torch.zeros(PROBE_SAMPLES, dtype=torch.int64, device="cuda")
    clk = torch.zeros_like(gt)
    probe = CuteKernel(kernel="globaltimer_probe", stage="main", build=dev.GlobaltimerProbe,
                       fake_args=dev.probe_fake_arguments, launch_args=lambda g, c: (g, c), dtypes=(), static=())
    probe.launch(gt, clk)               # compile + warm
    probe.launch(gt, clk)
    torch.cuda.synchronize()
    return timeline.timer_resolution(gt.cpu().numpy(), clk.cpu().numpy())


def _time_us(kern, inputs, outputs, ws) -> float:
    import torch
    times = []
    for _ in range(TIMED_LAUNCHES):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        kern.launch(inputs, outputs, ws)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def cmd_timeline(names, problems, args, kind) -> int:
    from mla_var3.runtime import devices, records, registry, timeline
    plan = registry.get_plan(names[0])
    check_request(names, args, plan)
    problem = (problems or [kind.default_problem()])[0]
    plan.require_supported(problem)
    if args.compile_only:
        return compile_only(plan, problem, args)
    if not devices.cuda_available():
        raise DeviceError("--prof_type=timeline runs the instrumented kernel and needs a GPU; here, "
                          "--prof_type=timeline --compile-only compiles it")
    import torch

    tiling = chosen_tiling(plan, problem, args)
    t0 = time.perf_counter()
    res = measure_timer()
    print(timeline.format_resolution(res))

    inputs = problem.make_inputs(seed=args.seed, device="cuda")
    plain = plan.build(inputs, tiling)
    kern, grid = plan.timeline_kernel(inputs, tiling, max_ctas=args.timeline_max_ctas)
    outputs = problem.make_outputs(inputs)
    ws_plain, ws = plain.prepare(inputs), kern.prepare(inputs)
    plain.compile()
    kern.compile()
    plain_us = _time_us(plain, inputs, outputs, ws_plain)
    inst_us = _time_us(kern, inputs, outputs, ws)
    ws["timeline"].zero_()
    outputs = problem.make_outputs(inputs)
    kern.launch(inputs, outputs, ws)
    torch.cuda.synchronize()
    buf = ws["timeline"].cpu().numpy()
    cmp = problem.compare(outputs, problem.reference(inputs), inputs=inputs)
    print(f"{plan.name} {problem.key()} tiling {tiling.key()}: plain {plain_us:.1f} us, instrumented "
          f"{inst_us:.1f} us ({100 * (inst_us / plain_us - 1):+.1f}%); instrumented outputs "
          f"{'match the reference' if cmp.passed else 'FAIL: ' + cmp.reason}")

    schema = plan.timeline_schema()
    out = out_dir(args.records, plan, problem)
    meta = {"kernel": plan.name, "problem": problem.key(), "tiling": tiling.key(), "grid": list(grid),
            "device": devices.current_device().name, "timer": res,
            "title": f"{plan.name} {problem.key()} ({tiling.key()})"}
    out.mkdir(parents=True, exist_ok=True)
    timeline.save_buffer(out / "timeline.npz", buf, schema, grid, meta)
    got = timeline.write_outputs(out, buf, schema, grid, n_ctas=args.timeline_ctas, meta=meta)
    periods = timeline.iteration_periods(got["ctas"], schema, "QK^T")
    title = (f"{plan.name}: {len(got['ctas'])} CTAs recorded of {grid[0] * grid[1] * grid[2]}, SM clock "
             f"{got['clock_ghz']:.3f} GHz ({'from the CTA headers' if got['clock_measured'] else 'assumed'})"
             + (f"; a {schema.iter_name} every {statistics.median(periods):.0f} cycles (median)" if periods else ""))
    print(timeline.format_summary(got["summary"], title))
    occupancy = None
    if len(got["ctas"]) == grid[0] * grid[1] * grid[2]:     # every CTA recorded: how they filled the SMs
        occupancy = timeline.sm_occupancy(got["ctas"], got["clock_ghz"])
        print(timeline.format_occupancy(occupancy))
    cta_cost = None
    if periods:                                         # the schema records QK^T per tile
        cta_cost = timeline.cta_cost_fit(got["ctas"], schema, got["clock_ghz"], "QK^T")
        print(timeline.format_cta_cost(cta_cost))
    gaps = None
    if timeline.records_item_epilogues(schema):
        gaps = timeline.item_gaps(got["ctas"], got["clock_ghz"])
        print(timeline.format_item_gaps(gaps))
    print("wrote " + ", ".join(str(p) for p in [*got["files"].values(), out / "timeline.npz"])
          + "\n  open trace.json in https://ui.perfetto.dev (or chrome://tracing)")
    rec = records.make_record("profile", plan, tiling, problem, prof_type="timeline", rows=got["summary"],
                              timer=res, clock_ghz=got["clock_ghz"], plain_us=plain_us, instrumented_us=inst_us,
                              instrumented_passed=cmp.passed, ctas_recorded=len(got["ctas"]),
                              pair_period_cycles=statistics.median(periods) if periods else None,
                              sm_occupancy=occupancy, cta_cost=cta_cost, item_gaps=gaps,
                              files=[str(p) for p in got["files"].values()], wall_s=time.perf_counter() - t0)
    records.append(rec, args.records)
    return 0 if cmp.passed else 1
