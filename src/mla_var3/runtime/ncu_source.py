"""ncu's source view as text: where each kernel's warps were sampled, per SASS instruction.

`--prof_type=ncu --ncu-set=source` records the run with ncu's SourceCounters section (warp-state
sampling per instruction) and exports its source page as CSV (`ncu --import R --page source --csv
--print-source sass`). This module reads that CSV and says where the time went:

    parse_source_csv(text)      -> [SourceKernel]  one per profiled launch, in order
    merge_launches(kernels)     -> [SourceKernel]  launches of the same kernel summed row by row
    summarize(kernel)           -> dict: samples by stall reason, by class, the mbarrier waits, the top rows
    format_summary(summary)     -> text;  format_compare(a, b) -> two summaries side by side

An mbarrier wait compiles to `SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [bar], phase` followed by a
branch back while P0 is false; ncu charges the wait's samples (long scoreboard) to that branch, so
a table by instruction shows `@!P0 BRA` at the top. `mbarrier_waits` pairs each such branch with
the barrier operand of the try-wait before it, which is what a kernel engineer needs to tell "the
math warps wait for data" (full barriers) from "the producer waits for a free stage" (empty ones).

    python -m mla_var3.runtime.ncu_source A.csv.gz [B.csv.gz] [--top N]
"""
from __future__ import annotations

import argparse
import csv
import gzip
import io
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"
NOT_ISSUED = "Warp Stall Sampling (Not-issued Samples)"
EXECUTED = "Instructions Executed"
STALL_PREFIX = "stall_"
WAIT_LOOKBACK = 8           # instructions between a try-wait and its branch (2-7 seen on sm_90a)
TOP = 12
_TRYWAIT = re.compile(r"SYNCS\.PHASECHK\S*\s+(\w+),\s*(\[[^\]]*\])")      # predicate, barrier
_BRANCH_BACK = re.compile(r"^\s*@!(\w+)\s+BRA\b")                          # loop while !predicate


@dataclass
class SourceRow:
    index: int
    address: str
    source: str
    samples: float
    not_issued: float
    executed: float
    stalls: dict = field(default_factory=dict)      # reason (without "stall_") -> samples

    @property
    def opcode(self) -> str:
        words = [w for w in self.source.split() if not w.startswith("@")]
        return words[0] if words else ""


@dataclass
class SourceKernel:
    name: str
    rows: list
    launches: int = 1

    @property
    def samples(self) -> float:
        return sum(r.samples for r in self.rows)


def _num(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except (ValueError, AttributeError):
        return 0.0


def parse_source_csv(text: str) -> list[SourceKernel]:
    """Every kernel block of ncu's source-page CSV: a `"Kernel Name","<name>"` line, a header
    line starting with "Address", then one line per SASS instruction."""
    kernels, header = [], None
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if row[0] == "Kernel Name":
            kernels.append(SourceKernel(name=row[1] if len(row) > 1 else "?", rows=[]))
            header = None
            continue
        if row[0] == "Address":
            header = row
            continue
        if header is None or not kernels:
            continue
        d = dict(zip(header, row))
        stalls = {k[len(STALL_PREFIX):]: _num(v) for k, v in d.items()
                  if k.startswith(STALL_PREFIX) and "(Not Issued)" not in k and _num(v)}
        kernels[-1].rows.append(SourceRow(index=len(kernels[-1].rows), address=d.get("Address", ""),
                                          source=d.get("Source", "").strip(), samples=_num(d.get(SAMPLES, "")),
                                          not_issued=_num(d.get(NOT_ISSUED, "")),
                                          executed=_num(d.get(EXECUTED, "")), stalls=stalls))
    return kernels


def read_source_csv(path: str | Path) -> list[SourceKernel]:
    p = Path(path)
    raw = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
    return parse_source_csv(raw.decode("utf-8", errors="replace"))


def merge_launches(kernels: list[SourceKernel]) -> list[SourceKernel]:
    """Launches of one kernel (same name and instruction count) summed instruction by instruction,
    in first-seen order: ncu profiles each launch separately."""
    merged: dict[tuple, SourceKernel] = {}
    for k in kernels:
        key = (k.name, len(k.rows))
        if key not in merged:
            merged[key] = SourceKernel(name=k.name, launches=k.launches,
                                       rows=[SourceRow(r.index, r.address, r.source, r.samples, r.not_issued,
                                                       r.executed, dict(r.stalls)) for r in k.rows])
            continue
        m = merged[key]
        m.launches += k.launches
        for a, b in zip(m.rows, k.rows):
            a.samples += b.samples
            a.not_issued += b.not_issued
            a.executed += b.executed
            for reason, v in b.stalls.items():
                a.stalls[reason] = a.stalls.get(reason, 0.0) + v
    return list(merged.values())


def mbarrier_waits(kernel: SourceKernel) -> list[dict]:
    """Each mbarrier wait loop: the branch that carries its samples (`@!P BRA`), paired with the
    barrier operand of the try-wait that sets P, up to WAIT_LOOKBACK instructions before it."""
    rows, out = kernel.rows, []
    for i, r in enumerate(rows):
        b = _BRANCH_BACK.match(r.source)
        if not b:
            continue
        for j in range(i - 1, max(-1, i - 1 - WAIT_LOOKBACK), -1):
            m = _TRYWAIT.search(rows[j].source)
            if m:
                if m.group(1) == b.group(1):
                    out.append({"index": i, "barrier": m.group(2), "samples": r.samples, "executed": r.executed,
                                "top_reason": _top_reason(r)})
                break
    return out


CLASSES = ("mbarrier waits", "named-barrier waits", "wgmma waits", "wgmma issue", "other")


def sample_classes(kernel: SourceKernel, waits: list[dict] | None = None) -> dict:
    """The kernel's samples in the five places a warp-specialized attention kernel's warps spend them:
    mbarrier waits (the loops `mbarrier_waits` finds: TMA data, free stages), named-barrier waits
    (samples whose stall reason is `barrier` outside `WARPGROUP.DEPBAR`: `bar.sync` between warpgroups),
    wgmma waits (at `WARPGROUP.DEPBAR`, a warpgroup waiting for its own wgmma groups; ncu names their
    stall `barrier` as well), wgmma issue (at `HGMMA`, its non-barrier samples), and
    the rest (the math, the loads, the address arithmetic). Each row counts once, in the first class
    that takes it, so the classes add up to all samples. `waits`: `mbarrier_waits(kernel)` if the
    caller already has it."""
    wait_rows = {w["index"] for w in (mbarrier_waits(kernel) if waits is None else waits)}
    out = dict.fromkeys(CLASSES, 0.0)
    for r in kernel.rows:
        if r.index in wait_rows:
            out["mbarrier waits"] += r.samples
        elif r.opcode.startswith("WARPGROUP.DEPBAR"):     # ncu files these under the `barrier` reason too
            out["wgmma waits"] += r.samples
        else:
            barrier = r.stalls.get("barrier", 0.0)
            out["named-barrier waits"] += barrier
            out["wgmma issue" if r.opcode.startswith("HGMMA") else "other"] += r.samples - barrier
    return out


def _top_reason(r: SourceRow) -> str:
    return max(r.stalls, key=r.stalls.get) if r.stalls else "-"


def summarize(kernel: SourceKernel, top: int = TOP) -> dict:
    """Samples by stall reason (percent of all samples), the mbarrier waits (largest first) and the
    `top` instructions by samples."""
    total = kernel.samples or 1.0
    reasons: dict[str, float] = {}
    for r in kernel.rows:
        for reason, v in r.stalls.items():
            reasons[reason] = reasons.get(reason, 0.0) + v
    waits = sorted(mbarrier_waits(kernel), key=lambda w: -w["samples"])
    ranked = sorted(kernel.rows, key=lambda r: -r.samples)[:top]
    launches = max(1, kernel.launches)
    return {
        "kernel": kernel.name, "launches": kernel.launches, "instructions": len(kernel.rows),
        "samples": kernel.samples,
        "executed": sum(r.executed for r in kernel.rows),
        "reasons_pct": {k: 100 * v / total for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])},
        "mbarrier_wait_pct": 100 * sum(w["samples"] for w in waits) / total,
        "classes_per_launch": {k: v / launches for k, v in sample_classes(kernel, waits).items()},
        "waits": [{**w, "pct": 100 * w["samples"] / total} for w in waits if w["samples"]],
        "top": [{"index": r.index, "pct": 100 * r.samples / total, "samples": r.samples, "executed": r.executed,
                 "top_reason": _top_reason(r), "source": r.source} for r in ranked],
    }


def short_name(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def format_summary(s: dict, top: int = TOP) -> str:
    reasons = ", ".join(f"{k} {v:.1f}%" for k, v in list(s["reasons_pct"].items())[:8])
    lines = [f"{short_name(s['kernel'])}: {s['instructions']} SASS instructions, {s['launches']} launch(es), "
             f"{s['samples']:.0f} warp samples, {s['executed']:.3g} instructions executed",
             f"  by stall reason: {reasons}",
             "  by class (samples per launch): " + ", ".join(f"{k} {v:.0f}" for k, v in s["classes_per_launch"].items()),
             f"  mbarrier waits: {s['mbarrier_wait_pct']:.1f}% of the samples"]
    for w in s["waits"][:top]:
        lines.append(f"    #{w['index']:<6d} {w['barrier']:<22s} {w['pct']:5.1f}%  executed {w['executed']:>9.0f}"
                     f"  ({w['top_reason']})")
    lines.append("  top instructions (#index, % of samples, main reason, times executed):")
    for t in s["top"][:top]:
        lines.append(f"    #{t['index']:<6d} {t['pct']:5.1f}%  {t['top_reason']:<14s} {t['executed']:>9.0f}  {t['source'][:70]}")
    return "\n".join(lines)


def format_compare(a: dict, b: dict, labels: tuple[str, str] = ("A", "B"), top: int = TOP) -> str:
    """Two summaries of the same kernel (e.g. two page sizes): the stall reasons and the mbarrier
    waits side by side, in percent of each one's samples."""
    lines = [f"{'':24s} {labels[0]:>10s} {labels[1]:>10s}",
             f"{'samples':24s} {a['samples']:>10.0f} {b['samples']:>10.0f}",
             f"{'instructions executed':24s} {a['executed']:>10.3g} {b['executed']:>10.3g}",
             f"{'mbarrier waits %':24s} {a['mbarrier_wait_pct']:>10.1f} {b['mbarrier_wait_pct']:>10.1f}",
             f"{'samples per launch':24s} {a['samples'] / max(1, a['launches']):>10.0f} "
             f"{b['samples'] / max(1, b['launches']):>10.0f}"]
    for name in CLASSES:
        lines.append(f"{'  ' + name:24s} {a['classes_per_launch'][name]:>10.0f} {b['classes_per_launch'][name]:>10.0f}")
    for reason in list(dict.fromkeys([*a["reasons_pct"], *b["reasons_pct"]]))[:top]:
        lines.append(f"{'stall ' + reason + ' %':24s} {a['reasons_pct'].get(reason, 0):>10.1f} "
                     f"{b['reasons_pct'].get(reason, 0):>10.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mla_var3.runtime.ncu_source", description=__doc__.split("\n")[0])
    ap.add_argument("csv", nargs="+", help="ncu source-page CSV(s) (.csv or .csv.gz); two: compared")
    ap.add_argument("--top", type=int, default=TOP, help=f"rows per table (default {TOP})")
    args = ap.parse_args(argv)
    if len(args.csv) > 2:
        ap.error("csv: one file, or two to compare")
    summaries = []
    for path in args.csv:
        kernels = merge_launches(read_source_csv(path))
        if not kernels:
            print(f"{path}: no kernel in this CSV (expected ncu's --page source --csv export)", file=sys.stderr)
            return 1
        print(f"== {path}")
        for k in kernels:
            print(format_summary(summarize(k, args.top), args.top))
        summaries.append(summarize(kernels[0], args.top))
    if len(summaries) == 2:
        print("\n== first kernel of each, compared")
        print(format_compare(*summaries, labels=(Path(args.csv[0]).name[:10], Path(args.csv[1]).name[:10])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
