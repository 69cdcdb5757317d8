"""flash_mla_decode_v21's timeline schema (`--prof_type=timeline`): which events its instrumented
build records, and the phases (spans) drawn between them. Plain Python, no DSL import.

Rows: warp 0 (WG0: scores tile A of each pair), warp 4 (WG1: tile B) and warp 8 (the producer of
Q, the first two tiles, then every refill of stage 0; v11's second producer warp, warp 9, refills
stage 1 and is not recorded: one recording warp per warpgroup). One iteration = one pair of tiles. For the math rows
`box<c>` is the moment the warp saw box c of its K tile land (its mbarrier wait returned), so a
long "K box c" span is time waiting for TMA; `wait_peer_*` is WG0 waiting for (m_B, s_B, P_B), WG1
for (m_A, s_A, P_A). For the producer row, pair p's `a_*` events are the refill of stage 0 with
that pair's tile A: the wait for the stage to be freed by pair p - 1, then the issue of its boxes
(pair 0 has none: the prologue loaded it).
"""
from mla_var3.runtime.timeline import Schema, Span

N_BOXES = 9
MAX_PAIRS = 64

MATH_EVENTS = ("qk_start", *(f"box{c}" for c in range(N_BOXES)), "qk_issued", "qk_end", "rowmax_end",
               "wait_peer_start", "wait_peer_end", "softmax_end", "own_sync", "pv_a_issued", "pv_a_end",
               "pv_b_issued", "pv_b_end")
PRODUCER_EVENTS = ("a_wait_start", "a_wait_end", "a_issued")
PER_PAIR = MATH_EVENTS + PRODUCER_EVENTS

WG0, WG1, MATH, PRODUCER = (0,), (1,), (0, 1), (2,)
SPANS = (
    Span("prologue (Q lands)", "clk_start", "q_landed", rows=MATH),
    Span("TMA Q + first tiles", "clk_start", "kv_issued", track="TMA", rows=PRODUCER),
    Span("QK^T", "qk_start", "qk_end", rows=MATH),
    Span("K box 0", "qk_start", "box0", rows=MATH),
    *(Span(f"K box {c}", f"box{c - 1}", f"box{c}", rows=MATH) for c in range(1, N_BOXES)),
    Span("QK^T drain", "qk_issued", "qk_end", rows=MATH),
    Span("scale+mask+rowmax", "qk_end", "rowmax_end", rows=MATH),
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
    Span("P_B V_B", "pv_a_end", "pv_b_end", rows=MATH),
    # the producer of stage 0: wait for the stage to be freed, then issue the tile's boxes
    Span("wait stage 0 free", "a_wait_start", "a_wait_end", track="TMA", rows=PRODUCER),
    Span("TMA issue (stage 0)", "a_wait_end", "a_issued", track="TMA", rows=PRODUCER),
    Span("epilogue", "epi_start", "epi_end", rows=MATH),
    Span("row sums", "epi_start", "epi_sums", rows=MATH),
)

SCHEMA = Schema(kernel="flash_mla_decode_v21", rows=("warp 0 (WG0)", "warp 4 (WG1)", "warp 8 (producer)"),
                once=("kv_issued", "q_landed"), per_iter=PER_PAIR, tail=("epi_start", "epi_sums", "epi_end"),
                max_iters=MAX_PAIRS, spans=SPANS, iter_name="pair")
