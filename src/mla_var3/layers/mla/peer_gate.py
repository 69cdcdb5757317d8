"""The FlashMLA-class issue's targets, read from bench records where our version and a peer were
measured together (`--compare=flashmla_decode,...`):

- gate: our speed >= 0.95x the peer's at seqlen >= 4096 and on the small-batch rows, >= 0.85x below;
- goal: >= 1.0x everywhere, >= 1.05x on the varlen cells at seqlen 1024;
- with `--cutile NAME[,NAME...]`: cuTile's best (per cell, the fastest of those versions measured in
  the same run as ours) at >= 0.6x our speed on the cells our record calls memory-bound.

    python -m mla_var3.layers.mla.peer_gate --records DIR|FILE... --kernel flash_mla_decode_v32 \\
        [--peer flashmla_decode_v1] [--cutile ct_flash_mla_decode_v7,ct_flash_mla_decode_v4] [--stat median|p10|...]

Speed ratio = the other's median time over ours (`--stat p10`: the 10th percentile of each one's
samples, the fast mode when the power cap splits a clock-bound kernel's replays; judging by both
says whether a verdict survives the clock). Records with our version and the cuTile one but no
peer still give the cuTile bar (gate and goal are then left unjudged, and a note says so). A cell counts only when both records were written
within TOGETHER_S of each other (one interleaved run); others are listed as not measured together,
never paired across runs.
"""
from __future__ import annotations

import argparse
import sys
from datetime import datetime

GATE_LONG, GATE_SHORT, GATE_SMALL_BATCH = 0.95, 0.85, 0.95
GOAL, GOAL_VARLEN_1024 = 1.0, 1.05
CUTILE_MIN = 0.6
LONG_SEQLEN = 4096
SMALL_BATCH = {1, 4, 16}            # the small-batch rows: b in {1, 4, 16} at long context
SMALL_BATCH_SEQLEN = 32768
TOGETHER_S = 1800


def _latest(recs: list[dict], kernel: str) -> dict[str, dict]:
    """problem_key -> the latest bench record of `kernel` (records.latest_records' choice)."""
    from mla_var3.runtime import records
    return {r["problem_key"]: r for r in records.latest_records(recs) if r["kernel"] == kernel and r["kind"] == "bench"}


def _together(a: dict, b: dict) -> bool:
    try:
        ta, tb = (datetime.fromisoformat(r["timestamp"]) for r in (a, b))
    except (KeyError, TypeError, ValueError):
        return False
    return abs((ta - tb).total_seconds()) <= TOGETHER_S


def thresholds(problem: dict) -> tuple[float, float]:
    """(gate, goal) of one cell."""
    if problem["b"] in SMALL_BATCH and problem["seqlen"] >= SMALL_BATCH_SEQLEN:
        gate = GATE_SMALL_BATCH
    else:
        gate = GATE_LONG if problem["seqlen"] >= LONG_SEQLEN else GATE_SHORT
    goal = GOAL_VARLEN_1024 if problem.get("varlen") and problem["seqlen"] <= 1024 else GOAL
    return gate, goal


def cutile_names(cutile: str | list[str] | None) -> list[str]:
    """`--cutile`'s versions: one name, a comma-separated list or a list."""
    if not cutile:
        return []
    names = cutile.split(",") if isinstance(cutile, str) else list(cutile)
    return [n.strip() for n in names if n.strip()]


def peer_gate(recs: list[dict], kernel: str, peer: str, cutile: str | list[str] | None = None,
              stat: str = "median") -> list[dict]:
    """One row per problem `kernel` has a bench record of: times, our speed relative to `peer`'s
    with its gate and goal verdicts (None where the peer was not measured in the same run), and
    (with `cutile`: one or several versions) cuTile's best speed relative to ours on memory-bound
    cells, from the fastest of those versions measured in the same run as ours (`cutile_best`
    names it). `stat`: the statistic of each record's per-call times compared (report.time_stat)."""
    from mla_var3.report import time_stat

    def timed(rec) -> float:
        t = time_stat(rec, stat)
        if t is None:
            raise ValueError(f"--stat={stat}: a record of {rec['kernel']} ({rec['problem_key']}) keeps no samples "
                             f"to take it from")
        return t
    ours, theirs = _latest(recs, kernel), _latest(recs, peer)
    cts = {name: _latest(recs, name) for name in cutile_names(cutile)}
    rows = []
    for key, r in ours.items():
        us = timed(r)
        gate, goal = thresholds(r["problem"])
        row = {"problem": key, "us": us, "peer_us": None, "speed": None, "gate": gate, "goal": goal,
               "gate_ok": None, "goal_ok": None, "together": None, "cutile_speed": None, "cutile_ok": None,
               "cutile_best": None}
        p = theirs.get(key)
        if p is not None:
            row["together"] = _together(r, p)
            if row["together"]:
                row["peer_us"] = timed(p)
                row["speed"] = row["peer_us"] / us
                row["gate_ok"], row["goal_ok"] = row["speed"] >= gate, row["speed"] >= goal
        if r.get("bound") == "memory":
            runs = [(timed(c), name) for name, got in cts.items() if (c := got.get(key)) is not None and _together(r, c)]
            if runs:
                best_us, row["cutile_best"] = min(runs)
                row["cutile_speed"] = us / best_us
                row["cutile_ok"] = row["cutile_speed"] >= CUTILE_MIN
        rows.append(row)
    return rows


def format_gate(rows: list[dict], kernel: str, peer: str, cutile: str | list[str] | None = None,
                stat: str = "median") -> str:
    from mla_var3.report import text_table

    def verdict(value, ok, need):
        return "-" if value is None else f"{value:.3f} {'ok' if ok else 'MISS'} (>= {need:.2f})"
    names = cutile_names(cutile)
    cells = []
    for r in rows:
        cell = {"problem": r["problem"], "us": f"{r['us']:.1f}",
                f"{peer} us": "-" if r["peer_us"] is None else f"{r['peer_us']:.1f}",
                "gate": verdict(r["speed"], r["gate_ok"], r["gate"]),
                "goal": verdict(r["speed"], r["goal_ok"], r["goal"])}
        if r["together"] is False:
            cell["gate"] = cell["goal"] = "not measured together"
        if len(names) == 1:
            cell[f"{names[0]} speed / ours"] = verdict(r["cutile_speed"], r["cutile_ok"], CUTILE_MIN)
        elif names:
            cell["cuTile best speed / ours"] = verdict(r["cutile_speed"], r["cutile_ok"], CUTILE_MIN) + (
                f" {r['cutile_best']}" if r["cutile_best"] else "")
        cells.append(cell)
    judged = [r for r in rows if r["gate_ok"] is not None]
    head = (f"peer gate for {kernel} vs {peer} ({stat} times): gate {sum(r['gate_ok'] for r in judged)}/{len(judged)} met, "
            f"goal {sum(r['goal_ok'] for r in judged)}/{len(judged)}")
    if names:
        mem = [r for r in rows if r["cutile_ok"] is not None]
        who = names[0] if len(names) == 1 else f"cuTile's best of {', '.join(names)}"
        head += f"; {who} >= {CUTILE_MIN}x our speed on {sum(r['cutile_ok'] for r in mem)}/{len(mem)} memory-bound cells"
    return head + "\n" + text_table(cells, list(cells[0]) if cells else ["problem"])


def main(argv=None) -> int:
    from mla_var3.errors import MlaVar3Error
    from mla_var3.report import STATS
    from mla_var3.runtime import records
    ap = argparse.ArgumentParser(prog="python -m mla_var3.layers.mla.peer_gate", description=__doc__.splitlines()[0])
    ap.add_argument("--records", required=True, nargs="+", help="records.jsonl files or directories")
    ap.add_argument("--kernel", required=True, help="our version whose cells are judged")
    ap.add_argument("--peer", default="flashmla_decode_v1", help="the peer version (default: flashmla_decode_v1)")
    ap.add_argument("--cutile", default=None,
                    help="cuTile version(s), comma-separated: the fastest of them in each cell is held to >= 0.6x "
                         "our speed on memory-bound cells")
    ap.add_argument("--stat", default="median", choices=STATS,
                    help="which statistic of each record's per-call times to compare (default median; p10: the "
                         "fast mode of a clock-bound kernel under the power cap)")
    args = ap.parse_args(argv)
    try:
        recs = records.load(args.records)
    except MlaVar3Error as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        rows = peer_gate(recs, args.kernel, args.peer, args.cutile, args.stat)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not rows:
        print(f"error: no bench records of {args.kernel} in {' '.join(args.records)} (measure them with: python -m "
              f"mla_var3.kernel {args.kernel} --grid=bench --compare={args.peer.rsplit('_v', 1)[0]})", file=sys.stderr)
        return 2
    judged_cutile = any(r["cutile_ok"] is not None for r in rows)
    if not any(r["together"] for r in rows) and not judged_cutile:
        print(f"error: no cell of {args.kernel} has a {args.peer} record from the same run in "
              f"{' '.join(args.records)} (measure both in one run: --compare={args.peer.rsplit('_v', 1)[0]})",
              file=sys.stderr)
        return 2
    print(format_gate(rows, args.kernel, args.peer, args.cutile, args.stat))
    if not any(r["together"] for r in rows):
        print(f"note: no {args.peer} record from the same run: only the cuTile bar is judged "
              f"(gate and goal need --compare={args.peer.rsplit('_v', 1)[0]} in the run)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
