"""Peers: measured numbers of kernels we cannot ship (FlashMLA on the H200), shown beside ours.

They are reference rows, never re-run and never written as our records: the CSV says where,
when and how they were measured. A row matches a problem of the same b, s_q, h_q, seqlen, page
size 64 and lengths kind (fixed / varlen; for varlen FlashMLA's RNG drew its own lengths, whose mean is in
the CSV and is what its FLOPs and bytes use).
"""
from __future__ import annotations

import csv
import functools
import io
from importlib import resources

PEER_FILES = {"NVIDIA H200": "flashmla_h200.csv"}
PEER_LABEL = "FlashMLA, measured 2026-11-29, not re-run"


@functools.lru_cache(maxsize=None)
def load(filename: str) -> tuple[dict, ...]:
    text = resources.files("mla_var3.conf").joinpath("peers", filename).read_text()
    rows = csv.DictReader(io.StringIO("\n".join(line for line in text.splitlines() if not line.startswith("#"))))
    return tuple(rows)


def match(problem, gpu_name: str) -> dict | None:
    """The peer row for this problem on this GPU, or None."""
    fname = PEER_FILES.get(gpu_name)
    if fname is None or problem.seqlens is not None or problem.softmax_scale is not None \
            or problem.page_size != 64:      # FlashMLA's table: page size 64 (its only one)
        return None
    kind = "varlen" if problem.varlen else "fixed"
    for row in load(fname):
        if (row["lengths"], int(row["s_q"]), int(row["h_q"]), int(row["seqlen"])) == \
                (kind, problem.s_q, problem.h_q, problem.seqlen) and problem.b == 128:
            return row
    return None


def peer_record(problem, device, flops_bytes) -> dict | None:
    """A record-shaped row (kind "peer") for tables, from the end-to-end time;
    `flops_bytes(seqlens)` counts the work at the peer's own (mean) lengths."""
    from mla_var3.runtime.roofline import roofline
    row = match(problem, device.name)
    if row is None:
        return None
    flops, nbytes = flops_bytes([float(row["mean_seqlen"])] * problem.b)
    t = float(row["e2e_us"])
    pt = roofline(int(flops), int(nbytes), t, device)
    return {"kind": "peer", "kernel": PEER_LABEL, "problem_key": problem.key(), "problem_kind": problem.kind,
            "time_us": {"median": t}, "tflops": pt.tflops, "gbps": pt.gbps, "pct_roofline": pt.pct_measured,
            "pct_datasheet": pt.pct_datasheet, "bound": pt.bound, "peer": dict(row)}
