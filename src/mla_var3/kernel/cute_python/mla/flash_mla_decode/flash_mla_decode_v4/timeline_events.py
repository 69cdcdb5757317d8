"""flash_mla_decode_v4's timeline schema (`--prof_type=timeline`): which events its instrumented
build records, and the phases (spans) drawn between them. Plain Python, no DSL import.

Rows: warp 0 (WG0: scores tile A of each pair, refills stage 0) and warp 4 (WG1: tile B, stage 1).
One iteration = one pair of tiles. `wait_peer_*` is WG0 waiting for (m_B, s_B, P_B), WG1 for
(m_A, s_A, P_A); `box<c>` is the moment the warp saw box c of its K tile land (its mbarrier wait
returned), so a long "K box c" span is time waiting for TMA, a short one is issuing wgmma.
"""
from mla_var3.runtime.timeline import Schema, Span

N_BOXES = 9
MAX_PAIRS = 64

PER_PAIR = ("qk_start", *(f"box{c}" for c in range(N_BOXES)), "qk_issued", "qk_end", "rowmax_end",
            "wait_peer_start", "wait_peer_end", "softmax_end", "own_sync", "pv_a_issued", "pv_a_end",
            "pv_b_issued", "pv_b_end", "refill_wait_start", "refill_wait_end", "tma_issued")

WG0, WG1 = (0,), (1,)
SPANS = (
    Span("prologue (Q lands)", "clk_start", "q_landed"),
    Span("TMA Q + first tiles", "clk_start", "kv_issued", track="TMA", rows=WG0),
    Span("QK^T", "qk_start", "qk_end"),
    Span("K box 0", "qk_start", "box0"),
    *(Span(f"K box {c}", f"box{c - 1}", f"box{c}") for c in range(1, N_BOXES)),
    Span("QK^T drain", "qk_issued", "qk_end"),
    Span("scale+mask+rowmax", "qk_end", "rowmax_end"),
    # WG0: tile A's softmax right after its QK^T, then P_A V_A while it waits for WG1's stats
    Span("softmax+P", "rowmax_end", "softmax_end", rows=WG0),
    Span("publish", "softmax_end", "own_sync", rows=WG0),
    Span("P_A V_A", "own_sync", "pv_a_end", rows=WG0),
    Span("wait peer", "wait_peer_start", "wait_peer_end", rows=WG0),
    # WG1: waits for tile A's stats, issues P_A V_A, and does tile B's softmax under it
    Span("wait peer", "wait_peer_start", "wait_peer_end", rows=WG1),
    Span("P_A V_A", "wait_peer_end", "pv_a_end", rows=WG1),
    Span("softmax+P", "pv_a_issued", "softmax_end", rows=WG1),
    Span("publish", "softmax_end", "own_sync", rows=WG1),
    Span("P_B V_B", "pv_a_end", "pv_b_end"),
    Span("wait stage free", "refill_wait_start", "refill_wait_end", track="TMA"),
    Span("TMA issue", "refill_wait_end", "tma_issued", track="TMA"),
    Span("epilogue", "epi_start", "epi_end"),
    Span("row sums", "epi_start", "epi_sums"),
)

SCHEMA = Schema(kernel="flash_mla_decode_v4", rows=("warp 0 (WG0)", "warp 4 (WG1)"),
                once=("kv_issued", "q_landed"), per_iter=PER_PAIR, tail=("epi_start", "epi_sums", "epi_end"),
                max_iters=MAX_PAIRS, spans=SPANS, iter_name="pair")
