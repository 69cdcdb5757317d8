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
                  ("L2 rd sect (tex)", "l2_sectors_read_tex"), ("tex hit sect", "l2_sectors_read_tex_hit"),
                  ("L2 rd sect", "l2_sectors_read"), ("DRAM rd sect", "dram_sectors_read"),
                  ("DRAM wr sect", "dram_sectors_write"), ("inst", "inst_executed"),
                  ("local ld sect", "local_sectors_ld"), ("local st sect", "local_sectors_st"),
                  ("SM busy %", "sm_busy_pct"), ("least SM busy %", "sm_min_busy_pct"))

# what the diff compares, with the label it prints
DIFF_COLUMNS = (("us", "duration_us"), ("SM %", "sm_throughput_pct"), ("tensor %", "tensor_pipe_pct"),
                ("DRAM %", "dram_throughput_pct"), ("DRAM GB/s", "dram_gbps"), ("occup %", "achieved_occupancy_pct"),
                ("regs", "registers_per_thread"), ("smem KB", "smem_per_block_kb"), ("L2 hit %", "l2_hit_rate_pct"),
                ("MHz", "sm_mhz"), ("kcycles", "sm_kcycles"),
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
    from mla_var3.report import aligned_table
    return aligned_table(heads, cells, title)


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


def kernel_role(name: str) -> str:
    """What a kernel does within its version, for pairing kernels across versions: the kernel's
    function name without the `<design>_vN_` prefix. `kernel_cutlass_flash_mla_decode_v6_combine_kernel_mla_var3...`
    (CuTe DSL) -> `combine_kernel`; `ct_flash_mla_decode_v3_split_kernel_Kt2_A3bf16...` (cuTile: the
    signature follows the last `_K<calling convention>`) -> `split_kernel`; a name without a version
    (`nvjet_...`, `void at::...(...)`) is its own role, less the argument list."""
    import re
    m = re.match(r"kernel_cutlass_(\w+?)_mla_var3", name)
    base = m.group(1) if m else re.sub(r"\(.*$", "", name).strip()
    base = re.sub(r"^(\w+)_K[a-z]\d+(?:_\w*)?$", r"\1", base) if re.fullmatch(r"\w+", base) else base
    m = re.fullmatch(r"(?:\w*?_)?v\d+_(\w+)", base)
    return m.group(1) if m else base


def pair_kernels(base_rows: list[dict], main_rows: list[dict]) -> tuple[list[tuple], list[dict], list[dict]]:
    """Pair the kernel rows of two versions by role (kernel_role: split with split, combine with
    combine, the k-th of a role with the k-th); rows whose role the other version lacks are paired
    by launch order only when both sides have the same number of them (the roles are named
    differently, e.g. `split_kernel` and `kernel`), else they stay unpaired.
    -> ([(base row, main row, paired by role)] in the main version's launch order, base only, main only)."""
    roles_b = [kernel_role(r["kernel_name"]) for r in base_rows]
    roles_m = [kernel_role(r["kernel_name"]) for r in main_rows]
    left_b = list(range(len(base_rows)))
    match: dict[int, int] = {}                      # main index -> base index
    for j, role in enumerate(roles_m):
        i = next((i for i in left_b if roles_b[i] == role), None)
        if i is not None:
            match[j] = i
            left_b.remove(i)
    left_m = [j for j in range(len(main_rows)) if j not in match]
    by_order = len(left_m) == len(left_b) > 0
    if by_order:
        match.update(zip(left_m, left_b))
    pairs = [(base_rows[match[j]], main_rows[j], j not in left_m) for j in range(len(main_rows)) if j in match]
    if by_order:
        return pairs, [], []
    return pairs, [base_rows[i] for i in left_b], [main_rows[j] for j in left_m]


def diff_rows(base: dict, main: dict) -> list[dict]:
    """The metrics and stall reasons that moved from the baseline kernel `base` to the evaluated
    kernel `main`, largest relative change first: {metric, base, main, delta, pct}, where delta =
    main - base and pct = delta relative to base (None where base is 0)."""
    moved = []

    def add(label, a, b, threshold_abs=None):
        if a is None or b is None or a == b:
            return
        delta = b - a
        pct = 100.0 * delta / abs(a) if a else None
        if (threshold_abs is not None and abs(delta) >= threshold_abs) or (
                threshold_abs is None and (pct is None or abs(pct) >= MOVED_PCT)):
            moved.append({"metric": label, "base": a, "main": b, "delta": delta, "pct": pct})
    for label, key in DIFF_COLUMNS:
        add(label, base.get(key), main.get(key))
    sb, sm = base.get("stalls") or {}, main.get("stalls") or {}
    for reason in dict.fromkeys([*sb, *sm]):
        add(f"stall {reason}", sb.get(reason, 0.0), sm.get(reason, 0.0), MOVED_STALL)
    return sorted(moved, key=lambda m: -(abs(m["pct"]) if m["pct"] is not None else float("inf")))


def _only_in(version: str, row: dict) -> str:
    us = row.get("duration_us")
    return f"{kernel_role(row['kernel_name'])}: only in {version}" + (f" ({fmt(us)} us)" if us is not None else "")


def format_diff(rows: list[dict], names: list[str]) -> str:
    """Each compared version names[1:] against the baseline names[0] (the CLI's `<name>`, as in
    the benchmark's "vs first"): its kernels paired with the baseline's by role (pair_kernels),
    for each pair what moved (delta = version - baseline, change relative to the baseline); a
    kernel only one version launches gets one line."""
    by = _by_version(rows)
    base, base_rows = names[0], by.get(names[0], [])
    out = []
    for other in names[1:]:
        head = f"ncu diff: {other} vs {base} (baseline)"
        other_rows = by.get(other, [])
        if not other_rows or not base_rows:
            out.append(f"{head}: no kernel rows for {other if not other_rows else base}")
            continue
        pairs, only_base, _ = pair_kernels(base_rows, other_rows)
        paired = {id(m): (b, by_role) for b, m, by_role in pairs}
        for m in other_rows:                        # in the compared version's launch order
            if id(m) not in paired:
                out.append(f"{head}, " + _only_in(other, m))
                continue
            b, by_role = paired[id(m)]
            role_m, role_b = kernel_role(m["kernel_name"]), kernel_role(b["kernel_name"])
            what = role_m if by_role else f"{role_m} vs {role_b} (no common role: paired by launch order)"
            title = f"{head}, {what}: what moved (>= {MOVED_PCT:g}%, stalls >= {MOVED_STALL:g} cyc/issue)"
            cells = [[d["metric"], fmt(d["base"]), fmt(d["main"]), ("+" if d["delta"] > 0 else "") + fmt(d["delta"]),
                      "new" if d["pct"] is None else f"{d['pct']:+.1f}%"] for d in diff_rows(b, m)]
            out.append(table(["metric", base, other, f"delta ({other} - baseline)", "change (relative to baseline)"],
                             cells, title) if cells else title + "\n  nothing moved")
        out += [f"{head}, " + _only_in(base, r) for r in only_base]
    return "\n\n".join(out)
