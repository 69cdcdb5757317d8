"""Profiling modes: disabled | annotation (NVTX) | ncu | sanitize.

- annotation: every launch the harness makes sits in an NVTX range `<kernel>:<config>:<phase>`
  (phases compile, warmup, timed, check, profile; `:` not `/`, which ncu's NVTX filter reads
  as syntax), through the `nvtx` package or, when it is missing, torch.cuda.nvtx.
- ncu: the CLI re-runs itself under `ncu --clock-control none` (clocks are never locked or
  changed) on a few plain launches (no CUDA graph) and parses the CSV into one row per kernel;
  `detail` adds the warp-state metrics (stall reasons per issued instruction, eligible and
  issued warps per scheduler, issue slots), shared-memory bank conflicts and L2/DRAM sectors.
- sanitize: one small problem under compute-sanitizer memcheck and racecheck.
"""
from __future__ import annotations

import contextlib
import csv
import io
import re
import shutil
import sys

from mla_var3.errors import ProfilerError

PHASES = ("compile", "warmup", "timed", "check", "profile")

# ---- annotation -----------------------------------------------------------------------------

_state = {"enabled": False, "backend": None, "notice": False}


def range_name(kernel: str, config: str, phase: str) -> str:
    """`kernel:config:phase`, with characters NVTX filters treat as syntax replaced."""
    if phase not in PHASES:
        raise ValueError(f"phase: expected one of {PHASES}, got {phase!r}")
    clean = lambda s: re.sub(r"[^A-Za-z0-9_.\-]", "_", s)  # noqa: E731  ncu filters read / : @ , = as syntax
    return f"{clean(kernel)}:{clean(config)}:{phase}"


def _backend():
    if _state["backend"] is None:
        try:
            import nvtx
            _state["backend"] = ("nvtx", nvtx.push_range, nvtx.pop_range)
        except ImportError:
            import torch
            if not _state["notice"]:
                print("annotation: the nvtx package is missing; using torch.cuda.nvtx", file=sys.stderr)
                _state["notice"] = True
            _state["backend"] = ("torch.cuda.nvtx", torch.cuda.nvtx.range_push, lambda: torch.cuda.nvtx.range_pop())
    return _state["backend"]


def enable_annotation(on: bool = True) -> None:
    _state["enabled"] = on


@contextlib.contextmanager
def annotate(kernel: str, config: str, phase: str, force: bool = False):
    """An NVTX range around a phase when annotation is on (or forced, as the ncu run does)."""
    if not (_state["enabled"] or force):
        yield
        return
    if force:       # the ncu run: its --nvtx-include filter matches ranges of the default domain,
        import torch    # which torch.cuda.nvtx pushes to (the nvtx package may use a named one)
        push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    else:
        _, push, pop = _backend()
    push(range_name(kernel, config, phase))
    try:
        yield
    finally:
        pop()


def nsys_command(argv: list[str]) -> str:
    """The nsys line that would record these ranges (nsys is not on the lent H200)."""
    return ("nsys profile --trace=cuda,nvtx --cuda-graph-trace=node -o mla_var3_%p "
            f"{sys.executable} -m mla_var3.kernel " + " ".join(argv))


# ---- ncu --------------------------------------------------------------------------------------

# column -> (ncu metric, conversion to the column's unit)
NCU_METRICS = {
    "duration_us": ("gpu__time_duration.sum", "ns->us"),
    "sm_throughput_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed", None),
    # on sm_90 the hmma pipe counter includes wgmma (ncu reports no separate gmma metric there)
    "tensor_pipe_pct": ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", None),
    "dram_throughput_pct": ("dram__throughput.avg.pct_of_peak_sustained_elapsed", None),
    "dram_gbps": ("dram__bytes.sum.per_second", "B/s->GB/s"),
    "achieved_occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active", None),
    "registers_per_thread": ("launch__registers_per_thread", None),
    "smem_per_block_kb": ("launch__shared_mem_per_block", "B->KB"),
    "l2_hit_rate_pct": ("lts__t_sector_hit_rate.pct", None),
    # the SM clock ncu's replay ran at and the SM cycles the launch took: a kernel's cycles compare
    # across clocks (a benchmark at the power limit runs at 1500-1700 MHz, ncu's short replays often
    # near 1980); bench records keep the same pair as clocks_during / kcycles
    "sm_mhz": ("sm__cycles_elapsed.avg.per_second", "Hz->MHz"),
    "sm_kcycles": ("sm__cycles_elapsed.max", "cycles->k"),
}
CLOCK_COLUMNS = ("sm_mhz", "sm_kcycles")     # added 2026-12-02: older ncu records and fixtures lack them
DEFAULT_LAUNCHES = 3

# --ncu-set=detail: column -> (metric, conversion). Names as ncu's own sections use them (the
# WarpStateStats / SchedulerStats / MemoryWorkloadAnalysis sections on sm_90).
NCU_DETAIL_METRICS = {
    "warp_cycles_per_issue": ("smsp__average_warp_latency_per_inst_issued.ratio", None),
    "active_warps_per_sched": ("smsp__warps_active.avg.per_cycle_active", None),
    "eligible_warps_per_sched": ("smsp__warps_eligible.avg.per_cycle_active", None),
    "issued_warps_per_sched": ("smsp__issue_active.avg.per_cycle_active", None),
    "issue_slots_pct": ("smsp__issue_active.avg.pct_of_peak_sustained_active", None),
    # LSU shared-memory traffic only (LDS/STS); wgmma's and TMA's shared-memory accesses are not in it
    "smem_conflicts_ld": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", None),
    "smem_conflicts_st": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", None),
    "l2_sectors_read_tex": ("lts__t_sectors_srcunit_tex_op_read.sum", None),   # reads from the SMs' L1/TEX
    # ... of which L2 hits (added 2026-12-02: a row block re-reading what its sibling CTA fetched
    # hits L2; FlashMLA's h_q=128 call read each K/V sector from L2 once, ours 1.9 times)
    "l2_sectors_read_tex_hit": ("lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum", None),
    "l2_sectors_read": ("lts__t_sectors_op_read.sum", None),                   # all L2 read sectors
    "dram_sectors_read": ("dram__sectors_read.sum", None),
    "dram_sectors_write": ("dram__sectors_write.sum", None),
    # instructions issued over the whole launch (added 2026-12-02): at the power limit a call's time
    # follows its energy, and instructions, L2 sectors and DRAM sectors are where it goes
    "inst_executed": ("smsp__inst_executed.sum", None),
    # local-memory sectors (added 2026-12-03): a register spill's LDL/STL traffic, so a version the
    # compiler made spill (v44's one 4-byte value) shows what the spill costs next to its time
    "local_sectors_ld": ("l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum", None),
    "local_sectors_st": ("l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum", None),
    # cycles the SMs had a CTA resident, mean and least over the SMs (added 2026-12-03): against the
    # launch's span (sm_kcycles) they say how evenly a grid kept the SMs busy, which is what a
    # split schedule on ragged lengths gets right or wrong (sm_busy_pct, sm_min_busy_pct)
    "sm_active_kcycles_avg": ("sm__cycles_active.avg", "cycles->k"),
    "sm_active_kcycles_min": ("sm__cycles_active.min", "cycles->k"),
}
# columns older captures lack: 2026-12-02 (L2 hits, instructions), 2026-12-03 (local sectors, SM active)
ADDED_DETAIL_COLUMNS = ("l2_sectors_read_tex_hit", "inst_executed", "local_sectors_ld", "local_sectors_st",
                        "sm_active_kcycles_avg", "sm_active_kcycles_min")
# detail columns computed from two others: column -> (numerator, denominator), as a percentage
DERIVED_DETAIL_COLUMNS = {"sm_busy_pct": ("sm_active_kcycles_avg", "sm_kcycles"),
                          "sm_min_busy_pct": ("sm_active_kcycles_min", "sm_kcycles")}
# one metric per stall reason: average warps stalled for that reason per issued instruction
# (cycles / instruction; the reasons sum to about warp_cycles_per_issue)
STALL_METRICS_REGEX = r"smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
_STALL_COLUMN = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
NOT_A_STALL = ("selected",)       # the warp issued: not a stall
TOP_STALLS = 5


def find_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        for guess in (f"/usr/local/cuda/bin/{name}", f"/opt/nvidia/nsight-compute/{name}"):
            if shutil.which(guess):
                return guess
        raise ProfilerError(f"{name}: not found on PATH (it ships with the CUDA toolkit; needed by --prof_type)")
    return path


def ncu_metrics(detail: bool = False) -> str:
    """The --metrics argument: the basic table's metrics, plus the detail ones and the stall
    reasons (an ncu `regex:` entry, so every reason this ncu knows for the GPU comes back)."""
    names = [m for m, _ in NCU_METRICS.values()]
    if detail:
        names += [m for m, _ in NCU_DETAIL_METRICS.values()] + [f"regex:{STALL_METRICS_REGEX}"]
    return ",".join(names)


def ncu_command(inner_argv: list[str], range_prefix: str, launches: int = DEFAULT_LAUNCHES,
                detail: bool = False) -> list[str]:
    """ncu over the inner run, profiling the kernels launched inside its `:profile` NVTX range."""
    metrics = ncu_metrics(detail)
    return [find_tool("ncu"), "--clock-control", "none", "--target-processes", "all",
            "--nvtx", "--nvtx-include", f"{range_prefix}:profile/",
            "--launch-count", str(200 * launches), "--csv", "--page", "raw", "--print-units", "base",
            "--metrics", metrics,
            sys.executable, "-m", "mla_var3.kernel", *inner_argv]


def ncu_report_command(inner_argv: list[str], range_prefix: str, report: str, tool: str = "ncu") -> list[str]:
    """The same run recorded as an ncu report (`<report>.ncu-rep`, --set full, overwritten) with
    the source imported: with a line-info build (--lineinfo), ncu's source view maps each SASS
    instruction back to its Python line."""
    return [tool, "--clock-control", "none", "--target-processes", "all", "--set", "full",
            "--import-source", "yes", "--nvtx", "--nvtx-include", f"{range_prefix}:profile/", "-f",
            "-o", report, sys.executable, "-m", "mla_var3.kernel", *inner_argv]


def ncu_source_commands(inner_argv: list[str], range_prefix: str, report: str,
                        launches: int = DEFAULT_LAUNCHES, tool: str = "ncu") -> tuple[list[str], list[str]]:
    """--ncu-set=source: (record the run's warp-state samples per instruction into `<report>.ncu-rep`,
    export that report's source page as CSV on stdout). See runtime/ncu_source.py."""
    record = [tool, "--clock-control", "none", "--target-processes", "all", "--section", "SourceCounters",
              "--section", "WarpStateStats", "--import-source", "yes", "--nvtx", "--nvtx-include",
              f"{range_prefix}:profile/", "--launch-count", str(200 * launches), "-f", "-o", report,
              sys.executable, "-m", "mla_var3.kernel", *inner_argv]
    export = [tool, "--import", f"{report}.ncu-rep", "--page", "source", "--csv", "--print-source", "sass"]
    return record, export


def _to_float(text: str) -> float | None:
    text = text.strip().replace(",", "")
    if text in ("", "n/a", "N/A"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


_UNIT_SCALE = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "msecond": 1e3, "ms": 1e3, "nsecond": 1e-3,
               "B/s": 1e-9, "byte/second": 1e-9, "KB/s": 1e-6, "Kbyte/second": 1e-6, "MB/s": 1e-3,
               "Mbyte/second": 1e-3, "GB/s": 1.0, "Gbyte/second": 1.0, "TB/s": 1e3, "Tbyte/second": 1e3,
               "B": 1 / 1024, "byte": 1 / 1024, "byte/block": 1 / 1024, "byte/s": 1e-9, "KB": 1.0, "Kbyte": 1.0, "MB": 1024.0, "Mbyte": 1024.0,
               # the clock columns (only read with a conversion, so a ratio in "cycle" stays as printed)
               "cycle/nsecond": 1e3, "cycle/usecond": 1.0, "cycle/second": 1e-6, "Hz": 1e-6, "KHz": 1e-3,
               "MHz": 1.0, "GHz": 1e3, "cycle": 1e-3, "Kcycle": 1.0, "Mcycle": 1e3}


def _convert(value: float | None, unit: str, conv: str | None) -> float | None:
    """Bring ncu's value in its printed unit to the column's unit (us, GB/s, KB)."""
    if value is None or conv is None:
        return value
    return value * _UNIT_SCALE.get(unit.strip(), {"ns->us": 1e-3, "B/s->GB/s": 1e-9, "B->KB": 1 / 1024,
                                                  "Hz->MHz": 1e-6, "cycles->k": 1e-3}[conv])


def parse_ncu_csv(text: str) -> list[dict]:
    """Rows of `ncu --csv --page raw` (header, units, one row per profiled launch; one such block
    per profiled process) -> one dict per launch with kernel_name and the NCU_METRICS columns; metrics ncu did not report are
    None. A block with detail metrics also gives the NCU_DETAIL_METRICS columns and `stalls`
    ({reason: cycles per issued instruction}). ncu's log lines and the program's own output
    around the blocks are skipped."""
    lines = text.splitlines()
    out = []
    for start in [i for i, line in enumerate(lines) if line.startswith('"ID"')]:
        end = start + 1
        while end < len(lines) and lines[end].startswith('"'):
            end += 1
        reader = list(csv.reader(io.StringIO("\n".join(lines[start:end]))))
        header, rows = reader[0], reader[1:]
        detail = any(m in header for m, _ in NCU_DETAIL_METRICS.values())
        stall_cols = stall_columns(header)
        units = {}
        if rows and not rows[0][0].strip().isdigit():      # the units row
            units = dict(zip(header, rows[0]))
            rows = rows[1:]
        for row in rows:
            if not row or not row[0].strip().isdigit():
                continue
            rec = dict(zip(header, row))
            parsed = {"kernel_name": rec.get("Kernel Name", "")}
            for col, (metric, conv) in NCU_METRICS.items():
                parsed[col] = _convert(_to_float(rec.get(metric, "")), units.get(metric, ""), conv)
            if detail:
                for col, (metric, conv) in NCU_DETAIL_METRICS.items():
                    parsed[col] = _convert(_to_float(rec.get(metric, "")), units.get(metric, ""), conv)
                parsed.update(derived_detail(parsed))
            if stall_cols:
                parsed["stalls"] = {reason: v for reason, col in stall_cols.items()
                                    if (v := _to_float(rec.get(col, ""))) is not None}
            out.append(parsed)
    return out


def derived_detail(row: dict) -> dict:
    """DERIVED_DETAIL_COLUMNS of one parsed row: None where a part is missing (an older capture)."""
    out = {}
    for col, (num, den) in DERIVED_DETAIL_COLUMNS.items():
        a, b = row.get(num), row.get(den)
        out[col] = 100.0 * a / b if a is not None and b else None
    return out


def stall_columns(header: list[str]) -> dict[str, str]:
    """{reason: column} for the stall-reason metrics in a raw CSV header (not `selected`, which
    is the issuing warp, nor ncu's `_not_issued` variants)."""
    out = {}
    for col in header:
        m = _STALL_COLUMN.match(col.strip())
        if m and m.group(1) not in NOT_A_STALL and not m.group(1).endswith("_not_issued"):
            out[m.group(1)] = col
    return out


def top_stalls(stalls: dict[str, float] | None, n: int = TOP_STALLS) -> list[tuple[str, float, float]]:
    """The `n` largest stall reasons: (reason, cycles per issued instruction, % of all stalls)."""
    if not stalls:
        return []
    total = sum(v for v in stalls.values() if v > 0) or 1.0
    ranked = sorted(((r, v) for r, v in stalls.items() if v > 0), key=lambda rv: -rv[1])[:n]
    return [(r, v, 100.0 * v / total) for r, v in ranked]


def summarize_launches(rows: list[dict]) -> list[dict]:
    """One row per kernel name: the median of its launches (e.g. main kernel and a combine)."""
    import statistics
    by_name: dict[str, list[dict]] = {}
    for r in rows:
        by_name.setdefault(r["kernel_name"], []).append(r)
    out = []
    for name, rs in by_name.items():
        row = {"kernel_name": name, "launches": len(rs)}
        detail = any(c in rs[0] for c in NCU_DETAIL_METRICS)
        for col in [*NCU_METRICS, *((*NCU_DETAIL_METRICS, *DERIVED_DETAIL_COLUMNS) if detail else ())]:
            vals = [r[col] for r in rs if r.get(col) is not None]
            row[col] = statistics.median(vals) if vals else None
        if any("stalls" in r for r in rs):
            reasons = dict.fromkeys(k for r in rs for k in r.get("stalls", {}))
            row["stalls"] = {k: statistics.median([r["stalls"][k] for r in rs if k in r.get("stalls", {})])
                             for k in reasons}
        out.append(row)
    return out


def short_kernel_name(name: str, width: int = 40) -> str:
    base = re.sub(r"\(.*$", "", name)
    return base if len(base) <= width else base[: width - 3] + "..."


# ---- sanitize -----------------------------------------------------------------------------------

SANITIZER_TOOLS = ("memcheck", "racecheck")


RACECHECK_HAZARD_OPTIONS = ("--racecheck-report", "hazard", "--print-level", "info")


def sanitizer_command(tool: str, inner_argv: list[str], hazards: bool = False) -> list[str]:
    """The compute-sanitizer command line; `hazards` (racecheck only): one report per hazard, with
    its block, the two threads and their program counters (the options run on the H200)."""
    if tool not in SANITIZER_TOOLS:
        raise ValueError(f"tool: expected one of {SANITIZER_TOOLS}, got {tool!r}")
    if hazards and tool != "racecheck":
        raise ValueError(f"hazards: a racecheck option, not {tool}'s")
    return [find_tool("compute-sanitizer"), "--tool", tool, *(RACECHECK_HAZARD_OPTIONS if hazards else ()),
            "--report-api-errors", "no", "--target-processes", "all",
            sys.executable, "-m", "mla_var3.kernel", *inner_argv]


_HAZARD = re.compile(r"Potential (\w+) hazard detected at __shared__ (0x[0-9a-f]+) in block \((\d+),(\d+),(\d+)\)")
_ACCESS = re.compile(r"(Write|Read) Thread \((\d+),(\d+),(\d+)\) at \S*?(\+0x[0-9a-f]+)")


def parse_racecheck_hazards(text: str) -> dict:
    """racecheck's hazard-level report (`--racecheck-report hazard`) grouped by the pair of
    instructions: {'errors': n or None, 'displayed': n or None, 'groups': [...]}, each group
    {kind, accesses (e.g. "Write->Read"), pcs, count, blocks, threads (first and second access:
    [min, max]), warpgroups (thread // 128 of each side), smem ([min, max] byte address)}, most
    hazards first. Why: the default report names two program counters; which CTAs and which
    warps race is what tells a barrier bug from a tool artefact."""
    groups: dict[tuple, dict] = {}
    pending = None
    for line in text.splitlines():
        m = _HAZARD.search(line)
        if m:
            pending = {"kind": m.group(1), "addr": int(m.group(2), 16),
                       "block": f"({m.group(3)},{m.group(4)},{m.group(5)})", "acc": []}
            continue
        a = _ACCESS.search(line)
        if a and pending is not None:
            pending["acc"].append((a.group(1), int(a.group(2)), a.group(5)))
            if len(pending["acc"]) == 2:
                (k1, t1, pc1), (k2, t2, pc2) = pending["acc"]
                key = (pending["kind"], k1, k2, pc1, pc2)
                g = groups.setdefault(key, {"kind": pending["kind"], "accesses": f"{k1}->{k2}", "pcs": [pc1, pc2],
                                            "count": 0, "blocks": [], "threads": [[t1, t1], [t2, t2]],
                                            "warpgroups": [[], []], "smem": [pending["addr"], pending["addr"]]})
                g["count"] += 1
                if pending["block"] not in g["blocks"]:
                    g["blocks"].append(pending["block"])
                for side, t in ((0, t1), (1, t2)):
                    g["threads"][side] = [min(g["threads"][side][0], t), max(g["threads"][side][1], t)]
                    g["warpgroups"][side] = sorted(set(g["warpgroups"][side]) | {t // 128})
                g["smem"] = [min(g["smem"][0], pending["addr"]), max(g["smem"][1], pending["addr"])]
                pending = None
    summary = re.search(r"RACECHECK SUMMARY:\s*(\d+)\s+hazards?\s+displayed\s+\((\d+)\s+errors?", text)
    return {"errors": int(summary.group(2)) if summary else None,
            "displayed": int(summary.group(1)) if summary else None,
            "groups": sorted(groups.values(), key=lambda g: -g["count"])}


def racecheck_hazard_table(res: dict) -> str:
    """The hazard groups as an aligned table (one row per pair of instructions)."""
    from mla_var3.report import aligned_table
    rows = [[g["kind"], g["accesses"], f"{g['pcs'][0]} -> {g['pcs'][1]}", g["count"], " ".join(g["blocks"]),
             "-".join(map(str, g["threads"][0])) + f" (WG{'/'.join(map(str, g['warpgroups'][0]))})",
             "-".join(map(str, g["threads"][1])) + f" (WG{'/'.join(map(str, g['warpgroups'][1]))})",
             f"{g['smem'][0]:#x}-{g['smem'][1]:#x}"] for g in res["groups"]]
    shown = f"{res['displayed']} of {res['errors']}" if res["errors"] is not None else "all"
    return aligned_table(["hazard", "accesses", "pcs", "n", "blocks", "first threads", "second threads", "smem"],
                         rows, f"racecheck hazards by instruction pair ({shown} reported hazards)")


_MANGLED = re.compile(r"(kernel_cutlass_\w*?_v\d+_[a-z]+(?:_kernel)?)\w*(\+0x[0-9a-f]+)")


def _first_errors(lines: list[str], limit: int = 5) -> list[str]:
    """The first error lines, each with its continuation: racecheck states a hazard as "Race
    reported between Write access at <kernel>+<pc>" and, on the next line, "and Read access at
    <kernel>+<pc>"; both program counters are needed to find the two instructions in the SASS.
    CuTe DSL's mangled kernel names are cut to their readable head."""
    out = []
    for i, line in enumerate(lines):
        text = line.strip()
        if not (re.match(r"=+\s*(Invalid|Error|ERROR|Race|Warning)", text.lstrip("="))
                or re.search(r"=========\s+(Invalid|Race reported|Error:|Program hit)", line)):
            continue
        if "Race reported" in text and i + 1 < len(lines) and re.match(r"=+\s+and\s", lines[i + 1].strip()):
            text += " " + re.sub(r"^=+\s+", "", lines[i + 1].strip())
        out.append(_MANGLED.sub(r"\1...\2", text))
        if len(out) == limit:
            break
    return out


def parse_sanitizer(text: str) -> dict:
    """{'errors': n (None when no summary was printed), 'first': [first error lines]}."""
    m = re.search(r"ERROR SUMMARY:\s*(\d+)\s+error", text)
    hazards = re.search(r"RACECHECK SUMMARY:\s*\d+\s+hazards?\s+displayed\s+\((\d+)\s+errors?", text)
    first = _first_errors(text.splitlines())
    errors = int(m.group(1)) if m else None
    if hazards:
        errors = (errors or 0) + int(hazards.group(1))
    return {"errors": errors, "first": first}
