"""In-kernel timelines, host side: the buffer's schema, decoding, Chrome trace JSON, summary, PNG.

An instrumented CuTe DSL build (`--prof_type=timeline`) has chosen warps write the SM cycle
counter (`clock64`) at phase boundaries into an int64 device buffer `[ctas, rows, slots]`: one
row per recording warp, one slot per (event, iteration). Slot positions are fixed by a `Schema`,
so the device code needs no counters: an event's slot is `header + once + it * per_iter + k`.
A slot left 0 was not recorded (the warp did not take that path, or the iteration is past
`max_iters`). Each row starts with a header written by the same warp:

    smid, globaltimer at start (ns), clock64 at start, globaltimer at end, clock64 at end

Within a CTA every time is the SM's clock (one counter per SM, so every row of a CTA shares it);
`%globaltimer` only places CTAs against each other. Cycles become microseconds with the clock
rate the headers give (cycles / ns between start and end, the median over rows), or one given.

A `Span` names a phase between two events of one row (e.g. QK^T: qk_start -> qk_end) on a track
(`math`, `TMA`); a Chrome trace (`traceEvents`, ph "X", pid = CTA, tid = warp and track) opens in
Perfetto (ui.perfetto.dev) or chrome://tracing. Nothing here imports a DSL or torch.
"""
from __future__ import annotations

import dataclasses
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

HEADER = ("smid", "gt_start", "clk_start", "gt_end", "clk_end")
DEFAULT_CLOCK_GHZ = 1.98          # the H200's boost clock; used only when the headers give no rate
TRACKS = ("math", "TMA")


@dataclass(frozen=True)
class Span:
    name: str                         # what the trace shows, e.g. "QK^T"
    start: str                        # event names of the schema (or "clk_start" / "clk_end")
    end: str
    track: str = "math"               # one of TRACKS
    rows: tuple[int, ...] = ()        # rows that draw it; () = every row


@dataclass(frozen=True)
class Schema:
    """Where each event of an instrumented kernel lives in the buffer (see the module docstring)."""

    kernel: str
    rows: tuple[str, ...]             # recording warps, e.g. ("warp 0 (WG0)", "warp 4 (WG1)")
    once: tuple[str, ...]             # events recorded once, before the main loop
    per_iter: tuple[str, ...]         # events recorded every main-loop iteration
    tail: tuple[str, ...]             # events recorded once, after the loop
    max_iters: int                    # iterations recorded (later ones are not)
    spans: tuple[Span, ...]
    iter_name: str = "iter"

    def __post_init__(self):
        names = HEADER + self.once + self.per_iter + self.tail
        if len(set(names)) != len(names):
            raise ValueError(f"timeline schema {self.kernel}: event names must be unique")
        for s in self.spans:
            for ev in (s.start, s.end):
                if ev not in names:
                    raise ValueError(f"timeline schema {self.kernel}: span {s.name!r} names unknown event {ev!r}")
            if (s.start in self.per_iter) != (s.end in self.per_iter):
                raise ValueError(f"timeline schema {self.kernel}: span {s.name!r} mixes per-iteration and once events")
            if s.track not in TRACKS:
                raise ValueError(f"timeline schema {self.kernel}: span {s.name!r} track must be one of {TRACKS}")

    @property
    def iter_base(self) -> int:
        return len(HEADER) + len(self.once)

    @property
    def tail_base(self) -> int:
        return self.iter_base + self.max_iters * len(self.per_iter)

    @property
    def n_slots(self) -> int:
        return self.tail_base + len(self.tail)

    def slot(self, event: str, it: int | None = None) -> int:
        """The slot of `event` (of iteration `it` for a per-iteration event)."""
        if event in HEADER:
            return HEADER.index(event)
        if event in self.once:
            return len(HEADER) + self.once.index(event)
        if event in self.tail:
            return self.tail_base + self.tail.index(event)
        if event in self.per_iter:
            if it is None or not 0 <= it < self.max_iters:
                raise ValueError(f"{event}: a per-iteration event needs an iteration in 0..{self.max_iters - 1}")
            return self.iter_base + it * len(self.per_iter) + self.per_iter.index(event)
        raise KeyError(event)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Schema":
        d = dict(d)
        d["spans"] = tuple(Span(**{**s, "rows": tuple(s.get("rows", ()))}) for s in d["spans"])
        for k in ("rows", "once", "per_iter", "tail"):
            d[k] = tuple(d[k])
        return cls(**d)


# ---- decoding -----------------------------------------------------------------------------------

@dataclass
class CtaTimeline:
    index: int                       # linear CTA id: (z * grid_y + y) * grid_x + x
    coord: tuple[int, int, int]
    smid: int
    gt_start: int                    # ns, globaltimer of the earliest row start
    clk_start: int                   # SM cycles at that start
    clk_end: int                     # latest row end (cycles)
    spans: list[dict]                # {name, track, row, it, start, end} in cycles from clk_start
    gt_end: int = 0                  # ns, globaltimer of the latest row end (0: not recorded)


def _coord(index: int, grid: tuple[int, int, int]) -> tuple[int, int, int]:
    gx, gy, _ = grid
    return index % gx, (index // gx) % gy, index // (gx * gy)


def decode(buf, schema: Schema, grid: tuple[int, int, int]) -> list[CtaTimeline]:
    """The recorded CTAs of a `[ctas, rows, slots]` buffer (nested lists or a numpy array)."""
    import numpy as np
    buf = np.asarray(buf, dtype=np.int64)
    if buf.ndim != 3 or buf.shape[1:] != (len(schema.rows), schema.n_slots):
        raise ValueError(f"timeline buffer: expected [ctas, {len(schema.rows)}, {schema.n_slots}], got {list(buf.shape)}")
    out = []
    for c in range(buf.shape[0]):
        rows = [r for r in range(buf.shape[1]) if buf[c, r, HEADER.index("clk_start")] != 0]
        if not rows:
            continue
        first = min(rows, key=lambda r: buf[c, r, 2])
        clk0, gt0 = int(buf[c, first, 2]), int(buf[c, first, 1])
        ends = [int(buf[c, r, 4]) for r in rows if buf[c, r, 4] != 0]
        gt_ends = [int(buf[c, r, 3]) for r in rows if buf[c, r, 3] != 0]
        spans = []
        for s in schema.spans:
            for r in (s.rows or range(len(schema.rows))):
                if r not in rows:
                    continue
                its = range(schema.max_iters) if s.start in schema.per_iter else [None]
                for it in its:
                    a, b = int(buf[c, r, schema.slot(s.start, it)]), int(buf[c, r, schema.slot(s.end, it)])
                    if a and b and b >= a:
                        spans.append({"name": s.name, "track": s.track, "row": r, "it": it,
                                      "start": a - clk0, "end": b - clk0})
        out.append(CtaTimeline(index=c, coord=_coord(c, grid), smid=int(buf[c, first, 0]), gt_start=gt0,
                               clk_start=clk0, clk_end=max(ends) if ends else clk0, spans=spans,
                               gt_end=max(gt_ends) if gt_ends else 0))
    return out


def clock_ghz(buf, schema: Schema) -> float | None:
    """SM cycles per ns from the headers (median over rows that ran >= 1 us), or None."""
    import numpy as np
    buf = np.asarray(buf, dtype=np.int64).reshape(-1, schema.n_slots)
    rates = []
    for row in buf:
        dgt, dclk = int(row[3] - row[1]), int(row[4] - row[2])
        if row[2] and row[4] and dgt >= 1000 and dclk > 0:
            rates.append(dclk / dgt)
    return statistics.median(rates) if rates else None


def pick_ctas(ctas: list[CtaTimeline], n: int) -> list[CtaTimeline]:
    """The `n` longest-running CTAs (the ones that set the kernel's end), in CTA order."""
    longest = sorted(ctas, key=lambda c: c.clk_end - c.clk_start, reverse=True)[:max(0, n)]
    return sorted(longest, key=lambda c: c.index)


# ---- Chrome trace --------------------------------------------------------------------------------

def chrome_trace(ctas: list[CtaTimeline], schema: Schema, ghz: float, meta: dict | None = None) -> dict:
    """Chrome trace JSON (Perfetto-loadable): pid = CTA, tid = row * len(TRACKS) + track, ph "X",
    ts / dur in microseconds; CTAs placed by their globaltimer start."""
    if ghz <= 0:
        raise ValueError(f"clock rate must be > 0 GHz, got {ghz}")
    events = []
    gt_min = min((c.gt_start for c in ctas), default=0)
    for c in ctas:
        pid = c.index
        events.append({"name": "process_name", "ph": "M", "pid": pid,
                       "args": {"name": f"CTA {c.index} {c.coord} SM {c.smid}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": c.index}})
        origin_us = (c.gt_start - gt_min) / 1e3
        for r, row in enumerate(schema.rows):
            for t, track in enumerate(TRACKS):
                if any(s["row"] == r and s["track"] == track for s in c.spans):
                    tid = r * len(TRACKS) + t
                    events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                                   "args": {"name": f"{row} {track}"}})
                    events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                                   "args": {"sort_index": tid}})
        for s in sorted(c.spans, key=lambda s: (s["start"], -s["end"])):
            args = {"cycles": s["end"] - s["start"]}
            if s["it"] is not None:
                args[schema.iter_name] = s["it"]
            events.append({"name": s["name"], "cat": s["track"], "ph": "X", "pid": pid,
                           "tid": s["row"] * len(TRACKS) + TRACKS.index(s["track"]),
                           "ts": round(origin_us + s["start"] / ghz / 1e3, 4),
                           "dur": round((s["end"] - s["start"]) / ghz / 1e3, 4), "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"kernel": schema.kernel, "clock_ghz": ghz, **(meta or {})}}


def validate_trace(trace: dict) -> None:
    """Raise ValueError where `trace` breaks the Chrome trace format this module writes."""
    if not isinstance(trace.get("traceEvents"), list):
        raise ValueError("traceEvents: expected a list")
    for e in trace["traceEvents"]:
        if e.get("ph") == "M":
            if e.get("name") not in ("process_name", "thread_name", "process_sort_index", "thread_sort_index"):
                raise ValueError(f"metadata event {e.get('name')!r}")
            continue
        if e.get("ph") != "X":
            raise ValueError(f"event phase {e.get('ph')!r}: this writer emits only X and M")
        for k, typ in (("name", str), ("pid", int), ("tid", int), ("ts", (int, float)), ("dur", (int, float))):
            if not isinstance(e.get(k), typ):
                raise ValueError(f"event {e.get('name')!r}: {k} missing or not {typ}")
        if e["dur"] < 0:
            raise ValueError(f"event {e['name']!r}: negative duration")


# ---- summary --------------------------------------------------------------------------------------

def summarize(ctas: list[CtaTimeline], schema: Schema, ghz: float) -> list[dict]:
    """Per span name and row: count, median and total cycles, median ns, and the share of the
    row's CTA time (its recorded span), over all recorded CTAs."""
    acc: dict[tuple[str, int], list[int]] = {}
    for c in ctas:
        for s in c.spans:
            acc.setdefault((s["name"], s["row"]), []).append(s["end"] - s["start"])
    busy = sum(c.clk_end - c.clk_start for c in ctas) or 1
    order = {s.name: i for i, s in enumerate(schema.spans)}
    rows = []
    for (name, r), durs in sorted(acc.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1])):
        med = statistics.median(durs)
        rows.append({"span": name, "row": schema.rows[r], "n": len(durs), "median_cycles": med,
                     "median_ns": med / ghz, "total_pct": 100.0 * sum(durs) / busy})
    return rows


def iteration_periods(ctas: list[CtaTimeline], schema: Schema, first_event_span: str) -> list[int]:
    """Cycles between the starts of consecutive iterations' `first_event_span` spans, per row."""
    out = []
    for c in ctas:
        for r in range(len(schema.rows)):
            starts = sorted(s["start"] for s in c.spans if s["name"] == first_event_span and s["row"] == r)
            out += [b - a for a, b in zip(starts, starts[1:])]
    return out


def sm_occupancy(ctas: list[CtaTimeline], ghz: float, min_ns: float = 2000.0) -> dict:
    """How the grid's working CTAs (those that ran at least `min_ns`; shorter ones are idle split
    slots) filled the SMs over the kernel's span: CTAs per SM, the share of SM-time they were
    busy, the SMs' finish times (a wide spread is a tail: SMs idle while the last CTAs run) and
    the idle share after each SM's last CTA. Times in ns from the first CTA's start.
    A CTA ends at its globaltimer end stamp where it has one: its cycles over one clock rate for
    the whole run put the end of a 250 us CTA microseconds off when the SM clock moves under the
    power cap, which read as a 4.9-6.4 us interval between CTAs on ragged lengths that the
    globaltimer puts at 0.4-0.7 us (2026-12-03, docs/kernels/flash_mla_decode.md, v48)."""
    def end(c):
        return c.gt_end if c.gt_end else c.gt_start + (c.clk_end - c.clk_start) / ghz
    if not ctas:
        raise ValueError("sm_occupancy: no CTAs recorded")
    t0, t1 = min(c.gt_start for c in ctas), max(end(c) for c in ctas)
    span = t1 - t0
    work = [c for c in ctas if end(c) - c.gt_start >= min_ns]
    by_sm: dict[int, list[CtaTimeline]] = {}
    for c in work:
        by_sm.setdefault(c.smid, []).append(c)
    finish = sorted(max(end(c) for c in cs) - t0 for cs in by_sm.values())
    busy = sum(end(c) - c.gt_start for c in work)
    n_sms = len(by_sm)
    per_sm: dict[int, int] = {}
    for cs in by_sm.values():
        per_sm[len(cs)] = per_sm.get(len(cs), 0) + 1

    def q(x):
        return finish[min(len(finish) - 1, int(x * (len(finish) - 1)))] if finish else 0.0
    # between two working CTAs on one SM: its launch and, before the first record, the next CTA's
    # setup (2026-12-03, by globaltimer: 0.4 us in grid order, 0.7 us with the order kernel's read,
    # on equal and ragged lengths alike)
    in_order = [sorted(cs, key=lambda c: c.gt_start) for cs in by_sm.values()]
    gaps = sorted(b.gt_start - end(a) for cs in in_order for a, b in zip(cs, cs[1:]))
    gap = ({"n": len(gaps), "median": gaps[len(gaps) // 2], "p90": gaps[min(len(gaps) - 1, int(0.9 * len(gaps)))]}
           if gaps else {"n": 0, "median": 0.0, "p90": 0.0})
    return {"span_ns": span, "ctas": len(ctas), "working_ctas": len(work), "sms": n_sms, "between_ctas_ns": gap,
            "working_ctas_per_sm": dict(sorted(per_sm.items())),
            "busy_share": busy / (n_sms * span) if n_sms and span else 0.0,
            "finish_ns": {"p10": q(0.1), "p50": q(0.5), "p90": q(0.9), "max": q(1.0)},
            "idle_after_last_share": sum(span - f for f in finish) / (n_sms * span) if n_sms and span else 0.0}


def cta_cost_fit(ctas: list[CtaTimeline], schema: Schema, ghz: float, span: str, min_ns: float = 2000.0) -> dict | None:
    """A CTA's time against its work: least squares of each working CTA's duration (us) on the
    number of `span` spans it recorded over all rows (e.g. QK^T: one per tile a warpgroup scored),
    -> {us_per_iter, us_fixed, ctas, r2}. `us_fixed` is what a CTA costs beyond its iterations
    (prologue, epilogue, anything paid once per CTA): on ragged lengths flash_mla_decode_v44 fit
    8-10 us there, which pointed at its tail zeroing (docs/kernels/flash_mla_decode.md, v46).
    CTAs that reached `max_iters` on some row (their count is cut) are left out; None when fewer
    than two distinct counts remain (equal lengths: nothing to fit)."""
    xs, ys = [], []
    for c in ctas:
        dur_ns = (c.clk_end - c.clk_start) / ghz
        if dur_ns < min_ns:
            continue
        per_row: dict[int, set] = {}
        for sp in c.spans:
            if sp["name"] == span:
                per_row.setdefault(sp["row"], set()).add(sp["it"])
        if any(len(its) >= schema.max_iters for its in per_row.values()):
            continue
        xs.append(sum(len(its) for its in per_row.values()))
        ys.append(dur_ns / 1e3)
    if len(set(xs)) < 2:
        return None
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    icpt = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - icpt - slope * x) ** 2 for x, y in zip(xs, ys))
    return {"span": span, "us_per_iter": slope, "us_fixed": icpt, "ctas": n,
            "r2": 1.0 - ss_res / ss_tot if ss_tot else 1.0}


def records_item_epilogues(schema: Schema) -> bool:
    """Whether the schema records an epilogue per iteration (each item's, v54), so item_gaps applies."""
    return any(sp.name == "epilogue" and sp.start in schema.per_iter for sp in schema.spans)


def item_gaps(ctas: list[CtaTimeline], ghz: float, row: int = 0, loop: str = "QK^T",
              epilogue: str = "epilogue") -> dict | None:
    """What a persistent CTA pays per further item (flash_mla_decode_v54: its pairs numbered over the
    CTA's items, each item's epilogue at its last pair's number). On `row`, an item boundary is an
    `epilogue` span at pair k followed by a `loop` span at pair k + 1; the pair period is the median
    of `loop` start-to-start within items. Returns the boundaries' count, the epilogue's median ns,
    the boundary's median and p90 ns (from the epilogue's start to the next item's first `loop`
    start), and `extra_tiles`: the median of (next item's first start - this item's last start -
    one pair period) over half a pair period, the tile-times an item costs beyond its tiles (what
    the makespan model's PERSISTENT_ITEM_TILES assumes). None when no CTA walked two items."""
    gaps, epis, extras, periods = [], [], [], []
    per_cta = []
    for c in ctas:
        loops = {sp["it"]: sp for sp in c.spans if sp["name"] == loop and sp["row"] == row and sp["it"] is not None}
        ends = {sp["it"]: sp for sp in c.spans if sp["name"] == epilogue and sp["row"] == row and sp["it"] is not None}
        bounds = [k for k in sorted(ends) if k + 1 in loops and k in loops]
        periods += [loops[k + 1]["start"] - loops[k]["start"] for k in sorted(loops)
                    if k + 1 in loops and k not in ends]
        per_cta.append((loops, ends, bounds))
    if not periods or not any(b for _, _, b in per_cta):
        return None
    period = statistics.median(periods)
    for loops, ends, bounds in per_cta:
        for k in bounds:
            epis.append((ends[k]["end"] - ends[k]["start"]) / ghz)
            gaps.append((loops[k + 1]["start"] - ends[k]["start"]) / ghz)
            extras.append((loops[k + 1]["start"] - loops[k]["start"] - period) / (period / 2))
    gaps.sort()
    return {"boundaries": len(gaps), "pair_ns": period / ghz, "epilogue_ns": statistics.median(epis),
            "gap_ns": statistics.median(gaps), "gap_p90_ns": gaps[min(len(gaps) - 1, int(0.9 * len(gaps)))],
            "extra_tiles": statistics.median(extras)}


def format_item_gaps(g: dict | None) -> str:
    if g is None:
        return "items: no CTA walked two items (nothing to measure between items)"
    return (f"items: {g['boundaries']} boundaries; epilogue {g['epilogue_ns'] / 1e3:.2f} us, epilogue start to "
            f"the next item's first QK^T {g['gap_ns'] / 1e3:.2f} us (p90 {g['gap_p90_ns'] / 1e3:.2f}); "
            f"a pair {g['pair_ns'] / 1e3:.2f} us; an item costs {g['extra_tiles']:.2f} tile-times beyond its tiles")


def format_cta_cost(fit: dict | None) -> str:
    if fit is None:
        return "CTA cost: every CTA recorded the same number of iterations (nothing to fit)"
    return (f"CTA cost: {fit['us_per_iter']:.2f} us per {fit['span']} + {fit['us_fixed']:.2f} us fixed "
            f"(least squares over {fit['ctas']} CTAs, r2 {fit['r2']:.3f})")


def format_occupancy(occ: dict) -> str:
    f = occ["finish_ns"]
    per = ", ".join(f"{n} on {k} SM{'s' if k != 1 else ''}" for n, k in occ["working_ctas_per_sm"].items())
    return (f"SMs: {occ['sms']} with working CTAs ({occ['working_ctas']} of {occ['ctas']} recorded; per SM: {per})\n"
            f"span {occ['span_ns'] / 1e3:.1f} us; working CTAs busy {occ['busy_share']:.1%} of the SMs' time\n"
            f"SM finish (us): p10 {f['p10'] / 1e3:.1f}, p50 {f['p50'] / 1e3:.1f}, p90 {f['p90'] / 1e3:.1f}, "
            f"max {f['max'] / 1e3:.1f}; idle after each SM's last CTA: {occ['idle_after_last_share']:.1%}"
            + (f"\nbetween consecutive CTAs on one SM (us): median {g['median'] / 1e3:.2f}, p90 {g['p90'] / 1e3:.2f} "
               f"({g['n']} intervals)" if (g := occ.get("between_ctas_ns")) and g["n"] else ""))


def format_summary(rows: list[dict], title: str) -> str:
    heads = ("span", "row", "n", "median cyc", "median ns", "% of CTA time")
    cells = [(r["span"], r["row"], str(r["n"]), f"{r['median_cycles']:.0f}", f"{r['median_ns']:.0f}",
              f"{r['total_pct']:.1f}") for r in rows]
    from mla_var3.report import aligned_table
    return aligned_table(heads, cells, title)


# ---- the globaltimer probe ---------------------------------------------------------------------------

def timer_resolution(gt, clk) -> dict:
    """From back-to-back (globaltimer, clock64) samples of one thread: the globaltimer's tick (the
    median and smallest positive step, ns), how many distinct values it showed, the cycles
    between samples, and the SM clock (cycles per ns over the whole run)."""
    import numpy as np
    gt, clk = np.asarray(gt, dtype=np.int64), np.asarray(clk, dtype=np.int64)
    if gt.size < 2 or gt.size != clk.size:
        raise ValueError("timer samples: need >= 2 (globaltimer, clock64) pairs of equal length")
    steps = np.diff(gt)
    ticks = steps[steps > 0]
    span_ns = int(gt[-1] - gt[0])
    return {"samples": int(gt.size), "distinct": int(np.unique(gt).size),
            "tick_ns_median": float(np.median(ticks)) if ticks.size else None,
            "tick_ns_min": int(ticks.min()) if ticks.size else None,
            "cycles_per_sample": float(np.median(np.diff(clk))),
            "span_ns": span_ns, "clock_ghz": float((clk[-1] - clk[0]) / span_ns) if span_ns > 0 else None}


def format_resolution(res: dict) -> str:
    if res["tick_ns_median"] is None:
        return (f"globaltimer: did not advance over {res['samples']} samples "
                f"({res['cycles_per_sample']:.0f} cycles apart): resolution coarser than the probe")
    return (f"globaltimer: tick {res['tick_ns_median']:.0f} ns median, {res['tick_ns_min']} ns smallest "
            f"({res['distinct']} distinct values in {res['samples']} samples, {res['cycles_per_sample']:.0f} cycles "
            f"apart, {res['span_ns']} ns); SM clock {res['clock_ghz']:.3f} GHz over the probe")


# ---- files ------------------------------------------------------------------------------------------

def save_buffer(path: Path, buf, schema: Schema, grid, meta: dict) -> None:
    """The raw buffer with what is needed to decode it again (numpy .npz, schema as JSON)."""
    import numpy as np
    np.savez_compressed(path, buffer=np.asarray(buf, dtype=np.int64), grid=np.asarray(grid, dtype=np.int64),
                        schema=json.dumps(schema.to_dict()), meta=json.dumps(meta))


def load_buffer(path: Path):
    import numpy as np
    with np.load(path) as z:
        return (z["buffer"], Schema.from_dict(json.loads(str(z["schema"]))), tuple(int(g) for g in z["grid"]),
                json.loads(str(z["meta"])))


def render_png(ctas: list[CtaTimeline], schema: Schema, ghz: float, path: Path, title: str = "") -> None:
    """A small Gantt chart: one lane per (CTA, row, track), time in us from each CTA's start."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    lanes = [(c, r, t) for c in ctas for r in range(len(schema.rows)) for t in TRACKS
             if any(s["row"] == r and s["track"] == t for s in c.spans)]
    names = list(dict.fromkeys(s.name for s in schema.spans))
    cmap = plt.get_cmap("tab20")
    colors = {n: cmap(i % 20) for i, n in enumerate(names)}
    fig, ax = plt.subplots(figsize=(14, 0.45 * len(lanes) + 1.6))
    # parents first, children (shorter, later-starting) drawn over them, thinner
    for y, (c, r, t) in enumerate(lanes):
        spans = sorted((s for s in c.spans if s["row"] == r and s["track"] == t), key=lambda s: (s["start"], -s["end"]))
        depth_end: list[int] = []
        for s in spans:
            while depth_end and depth_end[-1] <= s["start"]:
                depth_end.pop()
            h = 0.8 * (0.7 ** len(depth_end))
            ax.broken_barh([(s["start"] / ghz / 1e3, (s["end"] - s["start"]) / ghz / 1e3)], (y - h / 2, h),
                           facecolors=colors[s["name"]], edgecolor="none")
            depth_end.append(s["end"])
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"CTA {c.index} SM{c.smid} {schema.rows[r]} {t}" for c, r, t in lanes], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"us from each CTA's start (SM clock {ghz:.2f} GHz)")
    ax.set_title(title or schema.kernel, fontsize=9)
    used = [n for n in names if any(s["name"] == n for c in ctas for s in c.spans)]
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colors[n]) for n in used], labels=used,
              fontsize=7, ncol=min(6, max(1, len(used))), loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.4 / max(1, len(lanes))))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(out_dir: Path, buf, schema: Schema, grid, *, n_ctas: int = 4, ghz: float | None = None,
                  meta: dict | None = None, png: bool = True) -> dict:
    """Decode `buf`, write trace.json (+ timeline.png) under `out_dir`; returns what was found."""
    out_dir.mkdir(parents=True, exist_ok=True)
    measured = clock_ghz(buf, schema)
    rate = ghz or measured or DEFAULT_CLOCK_GHZ
    ctas = decode(buf, schema, grid)
    shown = pick_ctas(ctas, n_ctas)
    trace = chrome_trace(shown, schema, rate, {**(meta or {}), "ctas_recorded": len(ctas),
                                               "clock_source": "given" if ghz else ("headers" if measured else "default")})
    validate_trace(trace)
    files = {"trace": out_dir / "trace.json"}
    files["trace"].write_text(json.dumps(trace))
    if png and shown:
        files["png"] = out_dir / "timeline.png"
        render_png(shown, schema, rate, files["png"], title=(meta or {}).get("title", ""))
    return {"ctas": ctas, "shown": shown, "clock_ghz": rate, "clock_measured": measured, "files": files,
            "summary": summarize(ctas, schema, rate)}


def main(argv=None) -> int:
    """python -m mla_var3.runtime.timeline <timeline.npz> [--ctas N] [--out DIR] [--per-sm]: re-render a
    run's trace and picture from its saved buffer (no GPU needed); --per-sm adds how the working
    CTAs filled the SMs (CTAs per SM, busy share, finish spread: the grid's tail) and a CTA's time
    against its QK^T count (the cost per iteration and the fixed cost per CTA)."""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m mla_var3.runtime.timeline", description=main.__doc__)
    ap.add_argument("npz")
    ap.add_argument("--ctas", type=int, default=4)
    ap.add_argument("--out", help="default: the npz's folder")
    ap.add_argument("--per-sm", action="store_true", help="how the working CTAs filled the SMs")
    args = ap.parse_args(argv)
    buf, schema, grid, meta = load_buffer(Path(args.npz))
    res = write_outputs(Path(args.out or Path(args.npz).parent), buf, schema, grid, n_ctas=args.ctas,
                        ghz=meta.get("clock_ghz_given"), meta=meta)
    print(format_summary(res["summary"], f"{schema.kernel}: {len(res['ctas'])} CTAs recorded, clock {res['clock_ghz']:.3f} GHz"))
    if args.per_sm:
        print(format_occupancy(sm_occupancy(res["ctas"], res["clock_ghz"])))
        if any(sp.name == "QK^T" for sp in schema.spans):
            print(format_cta_cost(cta_cost_fit(res["ctas"], schema, res["clock_ghz"], "QK^T")))
        if records_item_epilogues(schema):
            print(format_item_gaps(item_gaps(res["ctas"], res["clock_ghz"])))
    print("wrote " + ", ".join(str(p) for p in res["files"].values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
