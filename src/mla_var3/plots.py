"""Plots from run records: a roofline and a version-progress chart per design (matplotlib, Agg).

Both read the newest bench (or peer) record of each (kernel, problem) — the same rows as
`report.bench_rows` — and never run anything. `python -m mla_var3.report --plots` writes them
next to the devlog. Every `*_figure` helper returns the matplotlib Figure before it is saved,
so tests can look at its axes.

- `roofline_plot`: log-log, x = FLOP/byte, y = TFLOP/s; the measured ceiling solid, the
  datasheet one dashed. Versions of `design` are shades of blue with one marker shape per
  version, the newest version of every other design (cuTile, torch) has its own colour and a
  triangle, peers (FlashMLA) are black stars. Fixed lengths and varlen get separate panels;
  the top axis names the (s_q x h_q) clusters, which is what sets the intensity of a problem.
- `progress_plot`: x = v1, v2, ... of `design`, one line per problem (or, past
  `MAX_LINES` problems, per (s_q, h_q) group, median over seqlens); the baselines stand in
  columns to the right of the versions, in the same colour per line.
"""
from __future__ import annotations

import re
import statistics
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from mla_var3.errors import UsageError  # noqa: E402

MAX_LINES = 12                      # progress plot: more problems than this -> group them
VERSION_MARKERS = ("o", "s", "D", "P", "X", "h", "p", "8")
BASELINE_MARKERS = ("^", "v", "<", ">", "d")
BASELINE_COLORS = ("#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")
LANGUAGE_STYLE = {"cutile": ("#e6750f", "^"), "torch": ("#8c8c8c", "v")}    # baselines we always show
PEER_COLOR = "black"
POINTS_GID = "points"               # gid of every scatter of measured points (tests count them)
METRICS = {
    "pct_roofline": ("% of the measured roofline", "higher is better"),
    "pct_datasheet": ("% of the datasheet roofline", "higher is better"),
    "tflops": ("TFLOP/s", "higher is better"),
    "gbps": ("GB/s", "higher is better"),
    "time": ("median time (µs)", "lower is better"),
}


# ---------------------------------------------------------------------------------------------
# records -> points

def _latest(recs: list[dict]) -> list[dict]:
    from mla_var3.runtime.records import latest_records
    return latest_records(recs)


def _problem_of(rec: dict, known: dict[str, dict]) -> dict:
    """The problem dict of a record; peers carry only the key, so look it up (or parse it)."""
    if isinstance(rec.get("problem"), dict):
        return rec["problem"]
    if rec["problem_key"] in known:
        return known[rec["problem_key"]]
    out = {"varlen": False}
    for part in rec["problem_key"].split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k] = int(v) if re.fullmatch(r"\d+", v) else v
        elif part == "varlen":
            out["varlen"] = True
    return out


def _intensity(rec: dict) -> float:
    if rec.get("intensity"):
        return float(rec["intensity"])
    if rec.get("flops") and rec.get("bytes"):
        return rec["flops"] / rec["bytes"]
    return rec["tflops"] * 1e3 / rec["gbps"]           # peers: TFLOP/s / GB/s * 1e3 = FLOP/byte


def _design(rec: dict) -> str:
    return "peer" if rec.get("kind") == "peer" else rec.get("design") or rec["kernel"].rsplit("_v", 1)[0]


def _version(rec: dict) -> int:
    if isinstance(rec.get("version"), int):
        return rec["version"]
    m = re.search(r"_v(\d+)$", rec["kernel"])
    return int(m.group(1)) if m else 0


def _kind(rec: dict) -> str:
    """The record's problem kind (records from before problem kinds were MLA decode)."""
    return rec.get("problem_kind") or "mla_decode"


def _select(recs, design, problems) -> list[dict]:
    """Newest record per (kernel, problem); with `design`: only its problem kind, every version
    of it, the newest version of every other design, and the peers; `problems`: keys to keep."""
    latest = _latest(recs)
    if problems is not None:
        keep = set(problems)
        latest = [r for r in latest if r["problem_key"] in keep]
    if design is not None:
        kinds = {_kind(r) for r in latest if _design(r) == design}
        if kinds:                   # a GEMM design's plots show GEMM baselines, not MLA kernels
            latest = [r for r in latest if _kind(r) in kinds]
        newest = {}
        for r in latest:
            d = _design(r)
            if d not in (design, "peer"):
                newest[d] = max(newest.get(d, 0), _version(r))
        latest = [r for r in latest if _design(r) in (design, "peer") or _version(r) == newest[_design(r)]]
    return latest


def _kernel_order(points: list[dict], design: str | None) -> list[str]:
    """Kernels: `design`'s versions oldest first, then other designs (cuTile first, PyTorch
    last), then peers."""
    rank = {"cutile": 1, "cute-dsl": 2, "torch": 4}
    key = {}
    for r in points:
        if r.get("kind") == "peer":
            key.setdefault(r["kernel"], (5, r["kernel"], 0))
        elif _design(r) == design:
            key.setdefault(r["kernel"], (0, "", _version(r)))
        else:
            key.setdefault(r["kernel"], (rank.get(r.get("language"), 3), _design(r), _version(r)))
    return sorted(key, key=lambda k: key[k])


def _styles(points: list[dict], design: str | None) -> dict[str, dict]:
    """kernel -> scatter style: `design` (or, without one, the first design) in blues by version,
    other designs distinct colours and triangles, peers black stars."""
    kernels = _kernel_order(points, design)
    by_kernel = {r["kernel"]: r for r in points}
    focus = design or next((_design(by_kernel[k]) for k in kernels if by_kernel[k].get("kind") != "peer"), None)
    versions = sorted({_version(by_kernel[k]) for k in kernels if _design(by_kernel[k]) == focus})
    cmap = plt.get_cmap("Blues")
    styles, other = {}, {}
    for k in kernels:
        r = by_kernel[k]
        d = _design(r)
        if r.get("kind") == "peer":
            styles[k] = {"color": PEER_COLOR, "marker": "*", "s": 90, "label": k}
        elif d == focus:
            i = versions.index(_version(r))
            shade = 0.95 if len(versions) == 1 else 0.45 + 0.5 * i / (len(versions) - 1)
            styles[k] = {"color": cmap(shade), "marker": VERSION_MARKERS[i % len(VERSION_MARKERS)], "s": 42,
                         "label": f"{k} ({r.get('language', '?')})"}
        else:
            j = other.setdefault(d, len(other))
            color, marker = LANGUAGE_STYLE.get(r.get("language"), (BASELINE_COLORS[j % len(BASELINE_COLORS)],
                                                                  BASELINE_MARKERS[j % len(BASELINE_MARKERS)]))
            styles[k] = {"color": color, "marker": marker, "s": 42, "label": f"{k} ({r.get('language', '?')})"}
    return styles


def _context(recs: list[dict]) -> tuple[str | None, str]:
    """(GPU name, measured dates) of the bench records."""
    bench = [r for r in recs if r.get("kind") == "bench"]
    gpus = [(r.get("env") or {}).get("gpu") for r in bench]
    gpu = next((g for g in reversed(gpus) if g), None)
    dates = sorted({r["timestamp"][:10] for r in bench if r.get("timestamp")})
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}" if dates else "undated"
    return gpu, when


def _ceilings(gpu: str | None):
    """((measured TFLOP/s, GB/s), (datasheet TFLOP/s, GB/s)) for this GPU, or None."""
    from mla_var3.runtime import devices
    spec = devices.spec_for_name(gpu) if gpu else None
    if spec is None:
        return None
    return spec.ceilings(measured=True), spec.ceilings(measured=False)


def _panels(points: list[dict], known: dict) -> list[tuple[str, list[dict]]]:
    """Fixed lengths and varlen in separate panels (one panel when only one kind is present);
    one untitled panel for problem kinds without lengths (GEMM)."""
    if points and all(_kind(r) != "mla_decode" for r in points):
        return [("", points)]
    fixed = [r for r in points if not _problem_of(r, known).get("varlen")]
    varlen = [r for r in points if _problem_of(r, known).get("varlen")]
    out = [(t, p) for t, p in (("fixed lengths", fixed), ("varlen (lengths ~ N(seqlen, seqlen/2))", varlen)) if p]
    return out or [("", [])]


# ---------------------------------------------------------------------------------------------
# roofline

def _roofline_figure(recs: list[dict], *, design: str | None = None, problems=None, title: str | None = None) -> Figure:
    points = _select(recs, design, problems)
    known = {r["problem_key"]: r["problem"] for r in recs if isinstance(r.get("problem"), dict)}
    gpu, when = _context(recs)
    ceil = _ceilings(gpu)
    styles = _styles(points, design)
    panels = _panels(points, known)

    xs = [_intensity(r) for r in points] or [1.0, 100.0]
    ys = [r["tflops"] for r in points if r.get("tflops")] or [1.0, 100.0]
    ridges = [p * 1e3 / bw for p, bw in ceil] if ceil else []
    x_lo = min([min(xs) / 4] + [r / 3 for r in ridges])     # the ridge and its slope stay in view
    x_hi = max(max(xs), *ridges) * 4                          # room for the ceilings' labels
    y_top = max(ys + [p for p, _ in ceil] if ceil else ys) * 2
    y_lo = min(ys) / 2.5

    fig, axes = plt.subplots(1, len(panels), figsize=(7.2 * len(panels), 6.4), sharey=True, squeeze=False)
    axes = axes[0]
    for ax, (ptitle, pts) in zip(axes, panels):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(x_lo, x_hi)
        ax.set_ylim(y_lo, y_top)
        if ceil:
            _draw_ceilings(ax, ceil, x_lo, x_hi)
        for k in styles:
            kp = [r for r in pts if r["kernel"] == k]
            if not kp:
                continue
            st = styles[k]
            sc = ax.scatter([_intensity(r) for r in kp], [r["tflops"] for r in kp], c=[st["color"]],
                            marker=st["marker"], s=st["s"], edgecolors="black", linewidths=0.4, alpha=0.9,
                            zorder=3 if st["marker"] != "*" else 4)
            sc.set_gid(POINTS_GID)
        _cluster_axis(ax, pts, known)
        ax.set_title(ptitle, fontsize=10)
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.grid(True, which="both", alpha=0.25)
    axes[0].set_ylabel("performance (TFLOP/s; ceilings: bf16/fp16 dense)")

    handles = [Line2D([], [], linestyle="", marker=st["marker"], markerfacecolor=st["color"], markeredgecolor="black",
                      markersize=10 if st["marker"] == "*" else 7, label=st["label"]) for st in styles.values()]
    ncol = min(len(handles), 4 if len(panels) > 1 else 2) or 1
    nrows = -(-len(handles) // ncol)
    row_h = 0.032 * 6.4 / fig.get_figheight()
    if ceil:
        (mp, mb), (dp, db) = ceil
        lines = [Line2D([], [], color="0.15", lw=1.8, label=f"measured ceiling: {mb / 1e3:.2f} TB/s, {mp:.0f} TFLOP/s bf16"),
                 Line2D([], [], color="0.45", lw=1.2, ls="--", label=f"datasheet ceiling: {db / 1e3:.2f} TB/s, {dp:.0f} TFLOP/s bf16")]
        fig.legend(handles=lines, loc="lower center", ncol=2, fontsize=9, frameon=False, bbox_to_anchor=(0.5, 0.0))
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=9, frameon=False,
               bbox_to_anchor=(0.5, row_h * (1 if ceil else 0)))
    what = f"{design} roofline" if design else "roofline"
    fig.suptitle(title or f"{what} on {gpu or 'unknown GPU'}, measured {when}\n"
                          f"(newest record per kernel and problem)", fontsize=11)
    fig.tight_layout(rect=(0, row_h * (nrows + (1 if ceil else 0)) + 0.01, 1, 1))
    _rotate_slope_labels(fig)
    return fig


def _rotate_slope_labels(fig: Figure) -> None:
    """Turn the bandwidth labels along the memory slope (its on-screen angle is known only
    once the layout is final)."""
    import math
    for ax in fig.axes:
        for t in ax.texts:
            if t.get_gid() == "slope-label":
                x, y = t.xy
                (x0, y0), (x1, y1) = ax.transData.transform([(x, y), (x * 2, y * 2)])
                t.set_rotation(math.degrees(math.atan2(y1 - y0, x1 - x0)))


def _draw_ceilings(ax, ceil, x_lo, x_hi) -> None:
    for (peak, bw), style, color, where in zip(ceil, ("-", "--"), ("0.15", "0.45"), ("measured", "datasheet")):
        ridge = peak * 1e3 / bw
        ax.plot([x_lo, ridge, x_hi], [bw * x_lo / 1e3, peak, peak], ls=style, color=color,
                lw=1.8 if style == "-" else 1.2, zorder=2)
        below = where == "measured"
        ax.annotate(f"{where} {peak:.0f} TFLOP/s", (x_hi, peak), xytext=(-4, -11 if below else 3),
                    textcoords="offset points", ha="right", fontsize=8, color=color)
        # the label of the slope sits on the slope, left of every point
        x = x_lo * 1.2
        t = ax.annotate(f"{where} {bw / 1e3:.2f} TB/s", (x, bw * x / 1e3), xytext=(0, -5 if below else 5),
                        textcoords="offset points", fontsize=8, color=color, rotation_mode="anchor",
                        va="top" if below else "bottom")
        t.set_gid("slope-label")
    ax.axvline(ceil[0][0] * 1e3 / ceil[0][1], color="0.15", lw=0.6, ls=":", zorder=1)


def _cluster_axis(ax, pts: list[dict], known: dict) -> None:
    """Top axis: the (s_q x h_q) groups at their intensity (which s_q*h_q sets, for a batch)."""
    groups = defaultdict(list)
    for r in pts:
        p = _problem_of(r, known)
        if "s_q" in p and "h_q" in p:
            groups[(p["s_q"], p["h_q"])].append(_intensity(r))
    if not groups:
        return
    ticks = []                      # merge groups whose intensities are within 15%
    for (s_q, h_q), xs in sorted(groups.items(), key=lambda kv: statistics.median(kv[1])):
        x = statistics.median(xs)
        name = f"{s_q}×{h_q}"
        if ticks and x / ticks[-1][0] < 1.15:
            ticks[-1] = (ticks[-1][0], ticks[-1][1] + "\n" + name)
        else:
            ticks.append((x, name))
    top = ax.secondary_xaxis("top")
    top.set_xticks([x for x, _ in ticks], [n for _, n in ticks], fontsize=8)
    top.minorticks_off()
    top.set_xlabel("s_q × h_q (query rows per sequence); within a cluster longer seqlens sit to the right", fontsize=8)


def roofline_plot(recs: list[dict], path, *, design: str | None = None, problems=None, title: str | None = None) -> Path:
    """Write the roofline PNG of the newest record per (kernel, problem) in `recs` to `path`."""
    return _save(_roofline_figure(recs, design=design, problems=problems, title=title), path)


# ---------------------------------------------------------------------------------------------
# progress

PROGRESS_MAX_WIDTH = 30.0     # inches (3900 pixels at the PNGs' 130 dpi)


def _metric_value(r: dict, metric: str) -> float:
    return float(r["time_us"]["median"]) if metric == "time" else float(r[metric])


def _progress_figure(recs: list[dict], *, design: str, metric: str = "pct_roofline") -> Figure:
    if metric not in METRICS:
        raise UsageError(f"metric: expected one of {', '.join(METRICS)}, got {metric!r}")
    points = _select(recs, design, None)
    known = {r["problem_key"]: r["problem"] for r in recs if isinstance(r.get("problem"), dict)}
    gpu, when = _context(recs)
    mine = [r for r in points if _design(r) == design]
    if not mine:
        raise UsageError(f"design {design!r}: no bench records (designs here: "
                         f"{', '.join(sorted({_design(r) for r in points})) or 'none'})")
    versions = sorted({_version(r) for r in mine})
    keys = list(dict.fromkeys(r["problem_key"] for r in mine))
    grouped = len(keys) > MAX_LINES
    mine_kernels = {r["kernel"] for r in mine}
    others = [k for k in _kernel_order(points, design) if k not in mine_kernels]
    by_kernel = {r["kernel"]: r for r in points}
    keyset = set(keys)              # only the problems `design` ran, so baselines compare like with like
    panels = _panels([r for r in points if r["problem_key"] in keyset], known)

    def column(r):
        return f"v{_version(r)}" if _design(r) == design else r["kernel"]

    def line_of(r):
        p = _problem_of(r, known)
        return (p.get("s_q"), p.get("h_q")) if grouped else r["problem_key"]

    # one colour per line, the same in every panel
    lines = list(dict.fromkeys(sorted((line_of(r) for r in mine), key=lambda g: (str(g[0]).zfill(6), str(g[1]).zfill(6))
                                      if grouped else g)))
    cmap = plt.get_cmap("tab10" if len(lines) <= 10 else "tab20")
    color = {g: cmap(i % cmap.N) for i, g in enumerate(lines)}

    # 1.35 in per version up to a dozen, then narrower: 54 versions at 1.35 in made a 17000-pixel
    # strip; past PROGRESS_MAX_WIDTH the panels stack, one under the other, each the full width.
    # Baseline columns keep about 1.3 in each, so their three-line labels do not overlap.
    per_version = 1.35 if len(versions) <= 12 else max(0.32, 16.0 / len(versions))
    gap = max(1.0, 1.3 / per_version)
    cols = [f"v{v}" for v in versions] + others
    xpos = list(range(len(versions))) + [len(versions) - 0.5 + gap * (i + 0.75) for i in range(len(others))]
    x_of = dict(zip(cols, xpos))
    width = max(4.8, per_version * len(versions) + 1.5 * len(others) + 2.2)
    stacked = len(panels) > 1 and width * len(panels) * 0.85 > PROGRESS_MAX_WIDTH
    if stacked:
        fig, axes = plt.subplots(len(panels), 1, figsize=(min(width, PROGRESS_MAX_WIDTH), 5.4 * len(panels)),
                                 sharey=True, squeeze=False)
        axes = axes[:, 0]
    else:
        fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels) * (0.85 if len(panels) > 1 else 1), 6.2),
                                 sharey=True, squeeze=False)
        axes = axes[0]
    for ax, (ptitle, pts) in zip(axes, panels):
        series = defaultdict(lambda: defaultdict(list))     # line -> column -> values
        for r in pts:
            series[line_of(r)][column(r)].append(_metric_value(r, metric))
        present = [g for g in lines if g in series]
        for i, g in enumerate(present):
            dx = (i - (len(present) - 1) / 2) * min(0.07, 0.5 / max(1, len(present)))   # dodge: no hidden points
            vs = [f"v{v}" for v in versions if series[g].get(f"v{v}")]
            ln = ax.plot([x_of[c] + dx for c in vs], [statistics.median(series[g][c]) for c in vs], "-o",
                         color=color[g], lw=1.8, ms=6, mec="black", mew=0.4, zorder=3)
            ln[0].set_gid(POINTS_GID)
            for k in others:
                vals = series[g].get(k)
                if vals:
                    peer = by_kernel[k].get("kind") == "peer"
                    ax.scatter([x_of[k] + dx], [statistics.median(vals)], color=color[g], zorder=3,
                               marker="*" if peer else LANGUAGE_STYLE.get(by_kernel[k].get("language"), (0, "D"))[1],
                               s=90 if peer else 55, edgecolors="black", linewidths=0.4)
        if others:
            ax.axvline(len(versions) - 0.25, color="0.5", lw=0.8, ls=":")
        ax.set_xticks(xpos, [c if c in mine_kernels or c.startswith("v") else _column_label(by_kernel[c]) for c in cols],
                      fontsize=8 if per_version >= 0.5 else 7)
        if per_version < 0.5:                   # many versions: upright version labels would overlap
            for t, c in zip(ax.get_xticklabels(), cols):
                if c.startswith("v"):
                    t.set_rotation(90)
        ax.set_xlim(-0.5, xpos[-1] + 0.5 * gap)
        ax.set_xlabel(f"{design} version" + ("  |  baselines (newest version of each)" if others else ""))
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_title(ptitle, fontsize=10)
        if metric == "time":
            ax.set_yscale("log")
    name, better = METRICS[metric]
    for ax in axes if stacked else axes[:1]:
        ax.set_ylabel(f"{name} ({better})")
    if metric in ("pct_roofline", "pct_datasheet"):
        axes[0].set_ylim(0, max(100, axes[0].get_ylim()[1]))
    handles = [Line2D([], [], color=color[g], marker="o", mec="black", mew=0.4, lw=1.8,
                      label=f"s_q={g[0]}, h_q={g[1]}" if grouped else g) for g in lines]
    ncol = min(len(handles), 6 if len(panels) > 1 else 3)
    nrows = -(-len(handles) // ncol)
    row_h = 0.034 * 6.2 / fig.get_figheight()
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=8, frameon=False,
               title="median over seqlens of each (s_q, h_q)" if grouped else "problem", title_fontsize=8)
    how = "one line per (s_q, h_q), median over its seqlens" if grouped else "one line per problem"
    fig.suptitle(f"{design}: {name} by version on {gpu or 'unknown GPU'}, measured {when}\n({how}; "
                 f"right of the dotted line: baselines, same colour per line)", fontsize=11)
    fig.tight_layout(rect=(0, row_h * (nrows + 1) + 0.01, 1, 1))
    return fig


def _column_label(rec: dict) -> str:
    """A column label for a baseline: what it is, then its kernel name."""
    if rec.get("kind") == "peer":
        return "FlashMLA (peer,\nmeasured\nseparately)" if rec["kernel"].startswith("FlashMLA") else rec["kernel"]
    lang = {"cutile": "cuTile", "torch": "PyTorch", "cute-dsl": "CuTe DSL"}.get(rec.get("language"), rec.get("language", ""))
    name = rec["kernel"]
    if len(name) > 16:                                  # break long names at an underscore
        cut = name.rfind("_", 0, len(name) // 2 + 4)
        name = name[:cut + 1] + "\n" + name[cut + 1:] if cut > 0 else name
    return f"{lang}\n{name}"


def progress_plot(recs: list[dict], path, *, design: str, metric: str = "pct_roofline") -> Path:
    """Write the version-progress PNG of `design` (metric: pct_roofline, pct_datasheet, tflops,
    gbps or time) to `path`."""
    return _save(_progress_figure(recs, design=design, metric=metric), path)


def _save(fig: Figure, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
