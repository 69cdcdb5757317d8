"""--dump=ptx,cubin,sass,mlir: a version's compiler output for one tiling and one problem shape.

    python -m mla_var3.kernel <version> --dump=all [--s_q=.. --h_q=..] [--arch=sm_90a] [--lineinfo]

Compile-only (no GPU needed). Writes `<records>/dump/<version>/<dir>/<stage>.<kind>` for every
stage of the version's runtime kernel (`<dir>`: the problem's static key and the tiling key, or
their hash when long), `<stage>.res-usage.txt` beside the SASS, and `dump.json` (what was dumped
and each stage's summary); then prints one summary line per stage (registers, spills, static
shared memory, SASS instruction mix). The tiling is `--tiling` when given, else the tuned one
for this problem when a GPU is visible (what a benchmark would run), else the default one.
"""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from mla_var3.errors import UsageError
from mla_var3.runtime import artifacts, sass

DUMPABLE_LANGUAGES = ("cute-dsl", "cutile")
MAX_DIR_NAME = 96


def parse_kinds(text: str) -> tuple[str, ...]:
    """`ptx,cubin` -> ("ptx", "cubin"); `all` -> every kind; anything else is one-line error."""
    kinds = [k.strip().lower() for k in (text or "").split(",") if k.strip()]
    if kinds == ["all"]:
        return artifacts.KINDS
    unknown = [k for k in kinds if k not in artifacts.KINDS]
    if unknown or not kinds:
        raise UsageError(f"--dump: unknown kind {', '.join(map(repr, unknown)) or repr(text)}; expected a "
                         f"comma-separated subset of {','.join(artifacts.KINDS)}, or all")
    return tuple(dict.fromkeys(kinds))


def dump_dir_name(problem, tiling) -> str:
    """`s_q=1,h_q=64,chunk=64,...`, or a 16-hex hash of it when long or not filesystem-safe."""
    name = f"{problem.static_key()},{tiling.key()}"
    if len(name) <= MAX_DIR_NAME and re.fullmatch(r"[A-Za-z0-9_.,=+-]+", name):
        return name
    return hashlib.sha256(name.encode()).hexdigest()[:16]


def choose_tiling(plan, problem) -> tuple[object, str]:
    """(tiling, "tuned" | "default"): the tuned winner for this GPU when one is visible."""
    from mla_var3.runtime import autotune, devices
    if devices.cuda_available():
        tuned = autotune.lookup(plan, problem, devices.current_device().name)
        if tuned is not None:
            return tuned, "tuned"
    return plan.default_tiling(problem), "default"


def runtime_stages(plan, problem, tiling) -> list:
    """The stages the version would launch for `problem`, built on small CPU inputs of the same
    static shape (a stage's compile depends only on the static shape and the tiling)."""
    inputs = problem.small_variant().make_inputs(seed=0, device="cpu")
    return plan.plan(inputs, tiling).stages


def check_request(names, problems, args, plan) -> tuple[str, ...]:
    """Everything a dump request can get wrong, one line each, before any compile."""
    from mla_var3.runtime import devices
    kinds = parse_kinds(args.dump)
    if args.compare is not None:
        raise UsageError("--dump: one version at a time (drop --compare)")
    if args.grid:
        raise UsageError("--dump: one problem shape (give dimension flags, not --grid)")
    if plan.language not in DUMPABLE_LANGUAGES:
        raise UsageError(f"--dump: {plan.name} is a {plan.language} kernel: nothing to dump "
                         f"(only CuTe DSL and cuTile versions compile to PTX / cubin)")
    devices.check_arch_name(args.arch)
    if not devices.arch_supported(plan.arch, args.arch):
        raise UsageError(f"--dump --arch={args.arch}: {plan.name} is built for {','.join(plan.arch)}")
    return kinds


def write_stage(out: Path, stage, arch: str, kinds, tools) -> tuple[list[str], dict | None]:
    """Compile one stage, write its files; returns (files written, summary facts or None)."""
    arts = artifacts.stage_artifacts(stage, arch, mlir="mlir" in kinds)
    for note in arts.notes:
        if not note.startswith("no PTX") or "ptx" in kinds:
            print(f"  {stage.name}: {note}")
    written = []
    for kind, data in arts.files.items():
        if kind in kinds or (kind == "tileirbc" and "mlir" in kinds):
            path = out / f"{stage.name}.{kind}"
            path.write_bytes(data)
            written.append(path.name)
    if not tools or "cubin" not in arts.files:
        return written, None
    with tempfile.TemporaryDirectory(prefix="mla_var3_sass_") as tmp:
        cubin = Path(tmp) / f"{stage.name}.cubin"
        cubin.write_bytes(arts.files["cubin"])
        try:
            sass_text, res_text = sass.disassemble(cubin, tools)
        except (OSError, RuntimeError, subprocess.SubprocessError) as ex:
            print(f"warning: {stage.name}: SASS skipped: {ex}", file=sys.stderr)
            return written, None
    if "sass" in kinds:
        for suffix, text in (("sass", sass_text), ("res-usage.txt", res_text)):
            if text:
                (out / f"{stage.name}.{suffix}").write_text(text)
                written.append(f"{stage.name}.{suffix}")
    return written, sass.summarize(sass.parse_res_usage(res_text), sass.parse_sass(sass_text))


def cmd_dump(names, problems, args, kind) -> int:
    from mla_var3.runtime import cute_kernel, registry
    plan = registry.get_plan(names[0])
    kinds = check_request(names, problems, args, plan)
    problem = (problems or [kind.default_problem()])[0]
    plan.require_supported(problem)
    if getattr(args, "tiling", None):                    # --tiling key=value,... (or +key=value over the choice) wins
        from mla_var3.cli.tiling import resolve_tiling
        tiling, source = resolve_tiling(plan, args.tiling, lambda: choose_tiling(plan, problem)[0]), "--tiling"
    else:
        tiling, source = choose_tiling(plan, problem)
    plan.check_tiling(tiling, problem, None)
    tools = sass.find_disassemblers()
    if not tools:
        print("warning: no cuobjdump or nvdisasm found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, triton's "
              "bundled copy): SASS and the summary are skipped, the rest is written", file=sys.stderr)
    out = Path(args.records) / "dump" / plan.name / dump_dir_name(problem, tiling)
    out.mkdir(parents=True, exist_ok=True)
    lineinfo = cute_kernel.line_info_enabled() if plan.language == "cute-dsl" else "always (cuTile)"
    print(f"{plan.name} {problem.static_key()} tiling {tiling.key()} ({source}) [{args.arch}] "
          f"lineinfo={lineinfo} -> {out}")
    manifest = {"kernel": plan.name, "language": plan.language, "arch": args.arch, "problem": problem.to_dict(),
                "tiling": tiling.to_dict(), "tiling_key": tiling.key(), "tiling_source": source,
                "kinds": list(kinds), "lineinfo": lineinfo, "tools": tools, "stages": []}
    lines = []
    for stage in runtime_stages(plan, problem, tiling):
        written, facts = write_stage(out, stage, args.arch, kinds, tools)
        manifest["stages"].append({**stage.describe(), "files": written, "summary": facts})
        label = f"{plan.name} {stage.name}"
        lines.append(sass.format_summary(label, facts) if facts else f"{label}: wrote {', '.join(written)}")
    (out / "dump.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print("\n".join(lines))
    return 0
