"""The serving issue's speed targets, read from bench records of the `serving` grid:

- page size 16 within 10% of page size 64 for the same problem (time ratio <= 1.10);
- h_q 8, 16 and 32 at >= 90% of the GB/s of h_q 64 at the same b, seqlen, s_q and page size.

    python -m mla_var3.layers.mla.targets --records DIR|FILE... --kernel flash_mla_decode_v8

Only measured cells are reported; a missing partner cell is shown as "-" (never estimated).
Only records taken with the tiling the version runs by itself count (its tuned winner on that GPU,
else its default: what the serving op would run); a run with a `--tiling` override (an experiment
such as one issuing warp per stage) is left out and counted on stderr.
"""
from __future__ import annotations

import argparse
import json
import sys
from functools import lru_cache

PAGE_RATIO_MAX = 1.10          # page 16 time / page 64 time
HEADS_GBPS_MIN = 0.90          # GB/s of h_q in {8, 16, 32} / GB/s of h_q 64
SMALL_HEADS = (8, 16, 32)


def served_tiling_key(kernel: str, problem: dict, gpu: str | None) -> str | None:
    """The key of the tiling `kernel` runs by itself on `problem` (its tuned winner on `gpu`, else its
    default), or None when `kernel` is not a registered version (then no record is left out)."""
    return _served_tiling_key(kernel, json.dumps(problem, sort_keys=True), gpu)


@lru_cache(maxsize=None)
def _served_tiling_key(kernel: str, problem_json: str, gpu: str | None) -> str | None:
    """served_tiling_key, once per (kernel, problem, GPU): the tuned lookup reads the tuned files,
    and a records file repeats each cell in every run, read by `_cells` and by `main`'s count."""
    from mla_var3.errors import MlaVar3Error
    from mla_var3.runtime import autotune, registry
    try:
        plan = registry.get_plan(kernel)
    except MlaVar3Error:
        return None
    prob = plan.problem_kind.from_dict(json.loads(problem_json))
    tuned = autotune.lookup(plan, prob, gpu) if gpu else None
    return (tuned or plan.default_tiling(prob)).key()


def overridden(r: dict) -> bool:
    """A record measured with a tiling other than the one its version runs by itself."""
    served = served_tiling_key(r["kernel"], r["problem"], (r.get("env") or {}).get("gpu"))
    return served is not None and bool(r.get("tiling_key")) and r["tiling_key"] != served


def _cells(recs: list[dict], kernel: str) -> dict[tuple, dict]:
    """(b, seqlen, s_q, h_q, page) -> the latest bench record of `kernel` (fixed lengths only, the
    version's own tiling)."""
    out = {}
    for r in recs:
        p = r.get("problem", {})
        if r.get("kind") != "bench" or r.get("kernel") != kernel or p.get("varlen") or p.get("seqlens"):
            continue
        if overridden(r):
            continue
        key = (p["b"], p["seqlen"], p["s_q"], p["h_q"], p.get("page_size", 64))
        if key not in out or r.get("timestamp", "") >= out[key].get("timestamp", ""):
            out[key] = r
    return out


def serving_targets(recs: list[dict], kernel: str) -> list[dict]:
    """One row per measured (b, seqlen, s_q, h_q, page): its time and GB/s, the page-16 ratio (on
    page-16 rows) and the GB/s ratio to h_q 64 (on h_q 8/16/32 rows), each with its verdict."""
    cells = _cells(recs, kernel)
    rows = []
    for (b, seqlen, s_q, h_q, page), r in sorted(cells.items()):
        row = {"b": b, "seqlen": seqlen, "s_q": s_q, "h_q": h_q, "page_size": page,
               "us": r["time_us"]["median"], "gbps": r.get("gbps"), "page_ratio": None, "heads_ratio": None}
        if page != 64 and (b, seqlen, s_q, h_q, 64) in cells:
            row["page_ratio"] = row["us"] / cells[(b, seqlen, s_q, h_q, 64)]["time_us"]["median"]
        base = cells.get((b, seqlen, s_q, 64, page))
        if h_q in SMALL_HEADS and base is not None and base.get("gbps") and row["gbps"] is not None:
            row["heads_ratio"] = row["gbps"] / base["gbps"]
        row["page_ok"] = None if row["page_ratio"] is None else row["page_ratio"] <= PAGE_RATIO_MAX
        row["heads_ok"] = None if row["heads_ratio"] is None else row["heads_ratio"] >= HEADS_GBPS_MIN
        rows.append(row)
    return rows


def format_targets(rows: list[dict], kernel: str) -> str:
    from mla_var3.report import text_table

    def verdict(value, ok, fmt):
        return "-" if value is None else f"{fmt.format(value)} {'ok' if ok else 'MISS'}"
    page_col, heads_col = f"page16/64 (<= {PAGE_RATIO_MAX:.2f})", f"GB/s vs h_q 64 (>= {HEADS_GBPS_MIN:.2f})"
    cells = [{"b": r["b"], "seqlen": r["seqlen"], "s_q": r["s_q"], "h_q": r["h_q"], "page": r["page_size"],
              "us": f"{r['us']:.1f}", "GB/s": "-" if r["gbps"] is None else f"{r['gbps']:.0f}",
              page_col: verdict(r["page_ratio"], r["page_ok"], "{:.2f}x"),
              heads_col: verdict(r["heads_ratio"], r["heads_ok"], "{:.2f}")} for r in rows]
    misses = sum(1 for r in rows for k in ("page_ok", "heads_ok") if r[k] is False)
    checked = sum(1 for r in rows for k in ("page_ok", "heads_ok") if r[k] is not None)
    columns = ("b", "seqlen", "s_q", "h_q", "page", "us", "GB/s", page_col, heads_col)
    return f"serving targets for {kernel}: {checked - misses}/{checked} met\n" + text_table(cells, columns)


def main(argv=None) -> int:
    from mla_var3.errors import MlaVar3Error
    from mla_var3.runtime import records
    ap = argparse.ArgumentParser(prog="python -m mla_var3.layers.mla.targets", description=__doc__.splitlines()[0])
    ap.add_argument("--records", required=True, nargs="+", help="records.jsonl files or directories")
    ap.add_argument("--kernel", required=True, help="the version whose cells are checked")
    args = ap.parse_args(argv)
    try:
        recs = records.load(args.records)
        rows = serving_targets(recs, args.kernel)
        left_out = [r for r in recs if r.get("kind") == "bench" and r.get("kernel") == args.kernel and overridden(r)]
    except MlaVar3Error as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if left_out:
        print(f"note: {len(left_out)} record(s) of {args.kernel} measured with another tiling than its own "
              f"(a --tiling override) left out, e.g. {left_out[0]['problem_key']} {left_out[0]['tiling_key']}",
              file=sys.stderr)
    if not rows:
        print(f"error: no fixed-length bench records of {args.kernel} in {' '.join(args.records)} "
              f"(measure them with: python -m mla_var3.kernel {args.kernel} --grid=serving)", file=sys.stderr)
        return 2
    print(format_targets(rows, args.kernel))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
