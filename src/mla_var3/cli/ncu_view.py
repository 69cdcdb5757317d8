"""Text views of ncu rows (runtime/profiling.py parses them): the `--ncu-set=detail` table (why a
kernel waits) and the `--compare` diff (what moved between two versions, and by how much).

Rows are dicts as `profiling.summarize_launches` returns them, with a "version" key added.
"""
from __future__ import annotations

from mla_var3.runtime import profiling

DETAIL_HEADERS = (("version", "version"), ("kernel", "kernel_name"), ("cyc/issue", "warp_cycles_per_issue"),
                  ("active/sch", "active_warps_per_sched"), ("eligible/sch", "eligible_warps_per_sched"),
                  ("issued/sch", "issued_warps_per_sched"), ("issue %", "issue_slots_pct"),
                  ("smem confl ld", "smem_conflicts_ld"), ("smem confl st", "smem_conflicts_st"),
                  ("L2 rd sect (tex)", "l2_sectors_read_tex"), ("L2 rd sect", "l2_sectors_read"),
                  ("DRAM rd sect", "dram_sectors_read"), ("DRAM wr sect", "dram_sectors_write"))

# what the diff compares, with the label it prints
DIFF_COLUMNS = (("us", "duration_us"), ("SM %", "sm_throughput_pct"), ("tensor %", "tensor_pipe_pct"),
                ("DRAM %", "dram_throughput_pct"), ("DRAM GB/s", "dram_gbps"), ("occup %", "achieved_occupancy_pct"),
                ("regs", "registers_per_thread"), ("smem KB", "smem_per_block_kb"), ("L2 hit %", "l2_hit_rate_pct"),
                *((h, k) for h, k in DETAIL_HEADERS[2:]))
MOVED_PCT = 5.0           # a metric "moved" when it changed by at least this much (relative) ...
MOVED_STALL = 0.1         # ... or, for a stall reason, by at least this many cycles per issued instruction


def kname(name: str, width: int = 40) -> str:
    """A kernel row's short name: CuTe DSL's `kernel_cutlass_<function>_<module path>..._0` -> `<function>`."""
    import re
    m = re.match(r"kernel_cutlass_(\w+?)_mla_var3", name)
    return m.group(1) if m else profiling.short_kernel_name(name, width)


def fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if abs(v) >= 1e6:
            return f"{v:.3g}"
        return f"{v:.0f}" if abs(v) >= 100 else f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def table(heads: list[str], cells: list[list[str]], title: str) -> str:
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(heads)]
    line = lambda vals: "  ".join(v.ljust(w) for v, w in zip(vals, widths)).rstrip()  # noqa: E731
    return "\n".join([title, line(heads), line(["-" * w for w in widths])] + [line(c) for c in cells])


def format_detail(rows: list[dict]) -> str:
    """Scheduler, memory and the top five stall reasons of each kernel row."""
    cells = [[fmt(kname(r[k]) if k == "kernel_name" else r.get(k)) for _, k in DETAIL_HEADERS]
             for r in rows]
    out = [table([h for h, _ in DETAIL_HEADERS], cells,
                 "ncu detail: warps per scheduler (per active cycle), issue-slot use, LSU shared-memory bank "
                 "conflicts, L2 / DRAM sectors")]
    stall_cells = []
    for r in rows:
        top = profiling.top_stalls(r.get("stalls"))
        stall_cells.append([r["version"], kname(r["kernel_name"], 32)]
                           + [f"{name} {v:.2f} ({pct:.0f}%)" for name, v, pct in top]
                           + [""] * (profiling.TOP_STALLS - len(top)))
    out.append(table(["version", "kernel"] + [f"stall #{i + 1}" for i in range(profiling.TOP_STALLS)], stall_cells,
                     "warp stall reasons, top five: cycles per issued instruction (share of all stalls)"))
    return "\n\n".join(out)


def _by_version(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r["version"], []).append(r)
    return out


def diff_rows(base: dict, other: dict) -> list[dict]:
    """The metrics and stall reasons that moved from `base` to `other` (one kernel each), largest
    relative change first: {metric, base, other, delta, pct}."""
    moved = []

    def add(label, a, b, threshold_abs=None):
        if a is None or b is None or a == b:
            return
        delta = b - a
        pct = 100.0 * delta / abs(a) if a else None
        if (threshold_abs is not None and abs(delta) >= threshold_abs) or (
                threshold_abs is None and (pct is None or abs(pct) >= MOVED_PCT)):
            moved.append({"metric": label, "base": a, "other": b, "delta": delta, "pct": pct})
    for label, key in DIFF_COLUMNS:
        add(label, base.get(key), other.get(key))
    sb, so = base.get("stalls") or {}, other.get("stalls") or {}
    for reason in dict.fromkeys([*sb, *so]):
        add(f"stall {reason}", sb.get(reason, 0.0), so.get(reason, 0.0), MOVED_STALL)
    return sorted(moved, key=lambda m: -(abs(m["pct"]) if m["pct"] is not None else float("inf")))


def format_diff(rows: list[dict], names: list[str]) -> str:
    """For each version after the first: its kernels against the first version's, paired by
    launch order (main kernel with main kernel, combine with combine)."""
    by = _by_version(rows)
    base_rows = by.get(names[0], [])
    out = []
    for name in names[1:]:
        for i, (b, o) in enumerate(zip(base_rows, by.get(name, []))):
            moved = diff_rows(b, o)
            title = (f"ncu diff: {name} vs {names[0]}, kernel {i + 1} ({kname(o['kernel_name'], 32)}"
                     f" vs {kname(b['kernel_name'], 32)}): what moved (>= {MOVED_PCT:g}%, stalls "
                     f">= {MOVED_STALL:g} cyc/issue)")
            cells = [[m["metric"], fmt(m["base"]), fmt(m["other"]), ("+" if m["delta"] > 0 else "") + fmt(m["delta"]),
                      "new" if m["pct"] is None else f"{m['pct']:+.1f}%"] for m in moved]
            out.append(table(["metric", names[0], name, "delta", "change"], cells, title) if cells
                       else title + "\n  nothing moved")
        if len(by.get(name, [])) != len(base_rows):
            out.append(f"  ({name} launched {len(by.get(name, []))} kernels per call, {names[0]} {len(base_rows)}: "
                       f"paired the first {min(len(base_rows), len(by.get(name, [])))} by launch order)")
    return "\n\n".join(out)
